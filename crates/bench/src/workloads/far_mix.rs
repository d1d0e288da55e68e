//! Workload (e) far-future mix without cancels, as issue 9 defines it: insert N timers at
//! clock 0, 90% due in [1 s, 60 s] and 10% in [1 day, 30 days], then step the clock 1 ms at a
//! time for `secs` seconds, firing what is due. One op = one insert or one fire; the time
//! covers both phases. (Workload (c) is the same mix with cancels, driven like churn.)

use std::time::Instant;

use super::{RunResult, DAY, SECOND};
use crate::harness::{check_failed, Checked, Harness, OnFire};
use crate::peers::TimerImpl;
use crate::rng::Rng;

#[derive(Clone, Copy, Debug)]
pub(crate) struct FarMixParams {
    pub(crate) n: usize,
    pub(crate) secs: u64,
    pub(crate) seed: u64,
}

pub(crate) fn run<I: TimerImpl>(p: &FarMixParams) -> Checked<RunResult> {
    let wall = Instant::now();
    let mut h = Harness::<I>::new(p.n);
    let mut rng = Rng::new(p.seed);
    let mut near = 0u64;
    let start = Instant::now();
    for slot in 0..p.n {
        let d = if rng.below(10) == 0 {
            rng.range(DAY, 30 * DAY)
        } else {
            near += 1;
            rng.range(SECOND, 60 * SECOND)
        };
        h.insert(slot as u32, d);
    }
    for now in 1..=p.secs * SECOND {
        h.poll(now, OnFire::Leave)?;
    }
    let timed = start.elapsed();
    h.verify_totals()?;
    let expect_fired = if p.secs >= 60 { near } else { h.fired };
    if h.fired != expect_fired {
        check_failed!(
            "{}: fired {} timers, {} were due within the run",
            I::NAME,
            h.fired,
            expect_fired
        );
    }
    let ops = p.n as u64 + h.fired;
    let note = format!(
        "{}: {} inserted, {} fired, max lateness {} ms",
        I::NAME,
        p.n,
        h.fired,
        h.max_late
    );
    h.cancel_all()?;
    drop(h);
    Ok(RunResult {
        value: timed.as_nanos() as f64 / ops as f64,
        wall_secs: wall.elapsed().as_secs_f64(),
        timed_secs: timed.as_secs_f64(),
        ops,
        note,
    })
}
