//! Lateness against the real clock (1 ms tick): how long after its deadline each callback
//! starts, as p50 / p99 / max, and how many started early (must be 0).
//!
//! Two scenarios from the issue: 100k timers spread uniformly over 2 s, and a burst of 1M
//! timers all due within one second. Each callback reads `Instant::now()` first thing, so
//! the figure includes the worker hand-off, as a user would see it.
//!
//! Run: `cargo run --release -p tickwheel --example lateness [runs]`

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::Timer;

/// Deterministic spread of offsets (no `rand` dependency): a 64-bit LCG.
struct Lcg(u64);
impl Lcg {
    fn next_below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

const NOT_YET: i64 = i64::MIN;

struct Stats {
    p50: f64,
    p99: f64,
    max: f64,
    early: usize,
    n: usize,
}

/// Schedules `n` timers with deadlines `lead + U[0, span)` from now; waits for all of them.
fn run(n: usize, lead: Duration, span: Duration, seed: u64) -> Stats {
    let timer = Timer::new();
    // `NOT_YET` until the callback ran: no shared counter for the callbacks to contend on.
    let late_ns: Arc<Vec<AtomicI64>> = Arc::new((0..n).map(|_| AtomicI64::new(NOT_YET)).collect());
    let mut rng = Lcg(seed);
    let span_ns = u64::try_from(span.as_nanos()).expect("span");
    let base = Instant::now() + lead;
    for i in 0..n {
        let deadline = base + Duration::from_nanos(rng.next_below(span_ns));
        let late_ns = Arc::clone(&late_ns);
        timer
            .schedule_at(deadline, move || {
                let now = Instant::now();
                let late = if now >= deadline {
                    i64::try_from((now - deadline).as_nanos()).unwrap_or(i64::MAX)
                } else {
                    -i64::try_from((deadline - now).as_nanos()).unwrap_or(i64::MAX)
                };
                late_ns[i].store(late, Ordering::Relaxed);
            })
            .expect("schedule");
    }
    let scheduled_at = Instant::now();
    if scheduled_at > base {
        println!(
            "  warning: scheduling took longer than the {lead:?} lead ({:?}): \
             the machine is overloaded, this run's lateness includes that",
            scheduled_at - (base - lead)
        );
    }
    std::thread::sleep((base + span).saturating_duration_since(Instant::now()));
    let give_up = Instant::now() + Duration::from_secs(30);
    while late_ns.iter().any(|a| a.load(Ordering::Relaxed) == NOT_YET) {
        assert!(Instant::now() < give_up, "timers did not all fire");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(timer.stop());
    let mut v: Vec<i64> = late_ns.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    v.sort_unstable();
    let ms = |ns: i64| ns as f64 / 1e6;
    Stats {
        p50: ms(v[n / 2]),
        p99: ms(v[(n * 99) / 100]),
        max: ms(v[n - 1]),
        early: v.iter().filter(|&&x| x < 0).count(),
        n,
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn report(name: &str, runs: &[Stats]) {
    for (i, s) in runs.iter().enumerate() {
        println!(
            "{name} run {i}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms early={}",
            s.n, s.p50, s.p99, s.max, s.early
        );
    }
    println!(
        "{name} MEDIAN of {}: p50={:.3} ms p99={:.3} ms max={:.3} ms; early total={}",
        runs.len(),
        median(runs.iter().map(|s| s.p50).collect()),
        median(runs.iter().map(|s| s.p99).collect()),
        median(runs.iter().map(|s| s.max).collect()),
        runs.iter().map(|s| s.early).sum::<usize>()
    );
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let spread: Vec<Stats> = (0..runs)
        .map(|r| {
            run(
                100_000,
                Duration::from_millis(200),
                Duration::from_secs(2),
                r as u64 + 1,
            )
        })
        .collect();
    report("100k over 2s", &spread);
    let burst: Vec<Stats> = (0..runs)
        .map(|r| {
            run(
                1_000_000,
                Duration::from_secs(2),
                Duration::from_secs(1),
                r as u64 + 7,
            )
        })
        .collect();
    report("1M burst within 1s", &burst);
}
