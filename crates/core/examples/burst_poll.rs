//! How long one call can take when a million timers fall due within one second, with
//! `poll` (a whole 256-tick slot cascades in one call) and with `poll_budgeted`.
//!
//! `cargo run --release -p tickwheel-core --example burst_poll [-- N BUDGET]`
//!
//! The clock (1 tick = 1 ms) steps one tick at a time over the second; the example prints
//! the eight longest single calls, the total time and the number of calls for each way of polling,
//! and the longest *first-timer wait*: for each tick, the CPU time spent in the calls of that
//! tick before its first timer came out (the lateness the wheel itself adds to that timer: at a
//! window's start, `poll` first moves the whole window down a level; `poll_budgeted` with `Wheel::prepare`
//! on idle ticks moves the next window ahead of time).
//! Times are this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so other processes on a
//! shared machine do not inflate them; compare the two lines of one run.

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

use tickwheel_core::{Step, Wheel};

fn wheel(n: u64) -> Wheel<u64> {
    let mut wheel = Wheel::with_capacity(n as usize);
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        wheel.insert(1_000 + x % 1_000, i); // due in the second [1 s, 2 s)
    }
    wheel
}

/// CPU time of this thread: preemption by other processes on a loaded machine does not
/// count, so the per-call numbers are the call's own work.
fn cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Keeps the `KEEP` longest call durations.
const KEEP: usize = 8;

fn note(longest: &mut Vec<Duration>, took: Duration) {
    if longest.len() < KEEP || took > longest[KEEP - 1] {
        longest.push(took);
        longest.sort_unstable_by(|a, b| b.cmp(a));
        longest.truncate(KEEP);
    }
}

fn report(
    what: &str,
    longest: &[Duration],
    total: Duration,
    calls: u64,
    fired: u64,
    first_wait: Duration,
) {
    let ms: Vec<String> = longest
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64() * 1e3))
        .collect();
    println!(
        "{what:<20} total {:>7.1} ms  calls {calls:>8}  fired {fired}  longest first-timer wait {:.2} ms  longest calls (ms): {}",
        total.as_secs_f64() * 1e3,
        first_wait.as_secs_f64() * 1e3,
        ms.join(" "),
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("N"));
    let budget: usize = args.next().map_or(4_096, |a| a.parse().expect("BUDGET"));

    let mut w = wheel(n);
    let (mut longest, mut total, mut calls, mut fired) = (Vec::new(), Duration::ZERO, 0, 0);
    let mut first_wait = Duration::ZERO;
    for now in 0..2_000 {
        let mut waited = Some(Duration::ZERO);
        loop {
            let t = cpu();
            let got = w.poll(now);
            let took = cpu() - t;
            note(&mut longest, took);
            total += took;
            calls += 1;
            if let Some(w) = waited.as_mut() {
                *w += took;
            }
            if got.is_none() {
                break;
            }
            if let Some(w) = waited.take() {
                first_wait = first_wait.max(w);
            }
            fired += 1;
        }
    }
    report("poll", &longest, total, calls, fired, first_wait);

    let mut w = wheel(n);
    let (mut longest, mut total, mut calls, mut fired) = (Vec::new(), Duration::ZERO, 0, 0);
    let mut first_wait = Duration::ZERO;
    for now in 0..2_000 {
        let mut waited = Some(Duration::ZERO);
        loop {
            let t = cpu();
            let step = w.poll_budgeted(now, budget);
            let took = cpu() - t;
            note(&mut longest, took);
            total += took;
            calls += 1;
            if let Some(w) = waited.as_mut() {
                *w += took;
            }
            match step {
                Step::Fired(..) => {
                    if let Some(w) = waited.take() {
                        first_wait = first_wait.max(w);
                    }
                    fired += 1;
                }
                Step::Paused => {}
                Step::Idle => {
                    // Nothing due: move (part of) the next window ahead of time.
                    let t = cpu();
                    w.prepare(budget);
                    total += cpu() - t;
                    break;
                }
            }
        }
    }
    report(
        &format!("poll_budgeted+prepare({budget})"),
        &longest,
        total,
        calls,
        fired,
        first_wait,
    );
}
