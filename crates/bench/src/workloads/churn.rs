//! Workloads (a) churn and (c) far-future mix.
//!
//! N timers are inserted (untimed) at clock 0. Each op picks a random slot, cancels its
//! timer and inserts a new one into the slot; every `max(1, N/1000)` ops the clock advances
//! 1 ms and everything due is polled and checked. A slot whose timer fired is refilled at
//! once (in slot order, so every implementation consumes the PRNG identically) with a new
//! timer, so exactly N timers stay live; those refills are timed but are not counted as ops.
//! One op = one cancel + one insert.
//!
//! Deadlines: churn draws 1–60 s from the current clock; far-future draws 1–60 s with
//! probability 0.9 and 1–30 days with probability 0.1.

use std::time::Instant;

use super::{RunResult, DAY, SECOND};
use crate::harness::{check_failed, Checked, Harness, OnFire};
use crate::peers::TimerImpl;
use crate::rng::Rng;

#[derive(Clone, Copy, Debug)]
pub(crate) struct ChurnParams {
    pub(crate) n: usize,
    /// Ops to time.
    pub(crate) ops: u64,
    pub(crate) seed: u64,
    pub(crate) far_future: bool,
}

impl ChurnParams {
    pub(crate) fn ops_per_ms(&self) -> u64 {
        (self.n as u64 / 1000).max(1)
    }
}

#[inline]
fn deadline(rng: &mut Rng, now: u64, far_future: bool) -> u64 {
    if far_future && rng.below(10) == 0 {
        now + rng.range(DAY, 30 * DAY)
    } else {
        now + rng.range(SECOND, 60 * SECOND)
    }
}

/// Builds the initial N live timers; returns the harness and the PRNG to go on with.
pub(crate) fn setup<I: TimerImpl>(p: &ChurnParams, h: &mut Harness<I>) -> Rng {
    let mut rng = Rng::new(p.seed);
    for slot in 0..p.n {
        let d = deadline(&mut rng, 0, p.far_future);
        h.insert(slot as u32, d);
    }
    rng
}

/// Runs `ops` churn ops on a filled harness, starting at clock 0. Returns the final clock.
pub(crate) fn churn_ops<I: TimerImpl>(
    p: &ChurnParams,
    h: &mut Harness<I>,
    rng: &mut Rng,
    ops: u64,
) -> Checked<u64> {
    let n = p.n as u64;
    let per_ms = p.ops_per_ms();
    let mut refill = Vec::with_capacity(4096);
    let mut now = 0;
    let mut since = 0;
    for _ in 0..ops {
        let slot = rng.below(n) as u32;
        h.cancel(slot)?;
        let d = deadline(rng, now, p.far_future);
        h.insert(slot, d);
        since += 1;
        if since == per_ms {
            since = 0;
            now += 1;
            h.poll(now, OnFire::Refill)?;
            h.take_fired_sorted(&mut refill);
            for &slot in &refill {
                let d = deadline(rng, now, p.far_future);
                h.insert(slot, d);
            }
        }
    }
    Ok(now)
}

pub(crate) fn run<I: TimerImpl>(p: &ChurnParams) -> Checked<RunResult> {
    let wall = Instant::now();
    let mut h = Harness::<I>::new(p.n);
    let mut rng = setup(p, &mut h);
    let start = Instant::now();
    let now = churn_ops(p, &mut h, &mut rng, p.ops)?;
    let timed = start.elapsed();
    h.verify_totals()?;
    if h.imp.len() != p.n {
        check_failed!(
            "{}: {} live timers after churn, expected {}",
            I::NAME,
            h.imp.len(),
            p.n
        );
    }
    let note = format!(
        "{}: {} ms simulated, {} fired (refilled), max lateness {} ms",
        I::NAME,
        now,
        h.fired,
        h.max_late
    );
    if std::env::var_os(crate::misses::SKIP_TEARDOWN).is_some() {
        // A counted run (see `misses`): the process ends right after; keep the teardown out
        // of the counts.
        std::mem::forget(h);
    } else {
        // Give nexus-timer its handles back; also frees memory before the next run.
        h.cancel_all()?;
        drop(h);
    }
    Ok(RunResult {
        value: timed.as_nanos() as f64 / p.ops as f64,
        wall_secs: wall.elapsed().as_secs_f64(),
        timed_secs: timed.as_secs_f64(),
        ops: p.ops,
        note,
    })
}
