//! Workload (b) fire-all: insert N timers 1 ms–1 h out, then fire them all, either stepping
//! the clock 1 ms at a time or jumping to each next deadline the structure reports. The
//! time covers inserts and fires; the result is ns per timer.

use std::time::Instant;

use super::{RunResult, HOUR};
use crate::harness::{check_failed, Checked, Harness, OnFire};
use crate::peers::TimerImpl;
use crate::rng::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Stepping,
    Jumping,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct FireAllParams {
    pub(crate) n: usize,
    pub(crate) seed: u64,
    pub(crate) mode: Mode,
}

pub(crate) fn run<I: TimerImpl>(p: &FireAllParams) -> Checked<RunResult> {
    let wall = Instant::now();
    let mut h = Harness::<I>::new(p.n);
    let mut rng = Rng::new(p.seed);
    let start = Instant::now();
    for slot in 0..p.n {
        h.insert(slot as u32, rng.range(1, HOUR));
    }
    match p.mode {
        Mode::Stepping => {
            let mut now = 0;
            while h.imp.len() > 0 {
                if now > HOUR {
                    check_failed!(
                        "{}: {} timers still pending at {now} ms, after the last deadline",
                        I::NAME,
                        h.imp.len()
                    );
                }
                now += 1;
                h.poll(now, OnFire::Leave)?;
            }
        }
        Mode::Jumping => {
            let limit = 4 * HOUR + 4 * p.n as u64;
            while h.jump()? {
                if h.polls > limit {
                    check_failed!("{}: no progress after {} jumps", I::NAME, h.polls);
                }
            }
        }
    }
    let timed = start.elapsed();
    h.verify_totals()?;
    if h.fired != p.n as u64 || h.imp.len() != 0 {
        check_failed!(
            "{}: fired {} of {} timers, {} still pending",
            I::NAME,
            h.fired,
            p.n,
            h.imp.len()
        );
    }
    let note = format!(
        "{}: {} polls/jumps, {} fired nothing, max lateness {} ms",
        I::NAME,
        h.polls,
        h.empty_polls,
        h.max_late
    );
    drop(h);
    Ok(RunResult {
        value: timed.as_nanos() as f64 / p.n as f64,
        wall_secs: wall.elapsed().as_secs_f64(),
        timed_secs: timed.as_secs_f64(),
        ops: p.n as u64,
        note,
    })
}
