//! Lateness against the real clock (1 ms tick): how long after its deadline each callback
//! starts, as p50 / p99 / max, and how many started early (must be 0).
//!
//! Two scenarios from the issue: 100k timers spread uniformly over 2 s, and a burst of 1M
//! timers all due within one second. Each callback reads `Instant::now()` first thing, so
//! the figure includes the worker hand-off, as a user would see it.
//!
//! By default each callback captures 32 bytes (the shared results, its deadline and its
//! index), so it is boxed (the service stores closures of up to 16 bytes of captures in the
//! wheel entry). With `small` it captures what a typical callback does, an `Arc` of shared
//! state and an index (16 bytes, stored inline, no allocation), and reads its deadline from
//! that state.
//!
//! Run: `cargo run --release -p tickwheel --example lateness [runs] [breakdown] [small]`
//!
//! With `breakdown`, each run also prints where its lateness lies: percentiles per bucket of
//! deadline offset within the scenario (the first milliseconds of a burst apart), and the
//! timer threads' on-CPU time and blocking waits (voluntary context switches) from the end
//! of scheduling until the last callback ran (`/proc/self/task/*`), per thread.

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

/// On-CPU nanoseconds and voluntary context switches of each of this process's threads whose
/// name starts with `prefix`, by name.
fn thread_stats(prefix: &str) -> Vec<(String, u64, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out: Vec<(String, u64, u64)> = dir
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = std::fs::read_to_string(path.join("comm")).ok()?;
            let name = name.trim().to_owned();
            if !name.starts_with(prefix) {
                return None;
            }
            let cpu = std::fs::read_to_string(path.join("schedstat"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()?;
            let status = std::fs::read_to_string(path.join("status")).ok()?;
            let waits = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                .trim()
                .parse::<u64>()
                .ok()?;
            Some((name, cpu, waits))
        })
        .collect();
    out.sort();
    out
}

/// Lateness percentiles per bucket of deadline offset (ms from the scenario's start).
fn print_breakdown(offsets_ns: &[u64], late_ns: &[i64], span: Duration) {
    let span_ms = span.as_millis() as u64;
    let mut edges: Vec<u64> = vec![0, 1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 100, 200, 500];
    edges.retain(|&e| e < span_ms);
    edges.push(span_ms);
    let mut buckets: Vec<Vec<i64>> = vec![Vec::new(); edges.len() - 1];
    for (&off, &late) in offsets_ns.iter().zip(late_ns) {
        let ms = off / 1_000_000;
        let b = edges.partition_point(|&e| e <= ms).saturating_sub(1);
        buckets[b.min(edges.len() - 2)].push(late);
    }
    for (b, v) in buckets.iter_mut().enumerate() {
        if v.is_empty() {
            continue;
        }
        v.sort_unstable();
        let ms = |ns: i64| ns as f64 / 1e6;
        println!(
            "    deadline +{:>4}..{:>4} ms: n={:>7} p50={:7.3} p99={:7.3} max={:7.3} ms",
            edges[b],
            edges[b + 1],
            v.len(),
            ms(v[v.len() / 2]),
            ms(v[v.len() * 99 / 100]),
            ms(v[v.len() - 1])
        );
    }
}

/// Signed nanoseconds from `deadline` to now (negative: early).
fn lateness_now(deadline: Instant) -> i64 {
    let now = Instant::now();
    if now >= deadline {
        i64::try_from((now - deadline).as_nanos()).unwrap_or(i64::MAX)
    } else {
        -i64::try_from((deadline - now).as_nanos()).unwrap_or(i64::MAX)
    }
}

/// What the `small` callbacks share: each captures this behind an `Arc` plus its index.
struct Shared {
    late_ns: Vec<AtomicI64>,
    deadlines: Vec<Instant>,
}

/// Schedules `n` timers with deadlines `lead + U[0, span)` from now; waits for all of them.
fn run(n: usize, lead: Duration, span: Duration, seed: u64, breakdown: bool, small: bool) -> Stats {
    let timer = Timer::new();
    let mut rng = Lcg(seed);
    let span_ns = u64::try_from(span.as_nanos()).expect("span");
    let base = Instant::now() + lead;
    let offsets_ns: Vec<u64> = (0..n).map(|_| rng.next_below(span_ns)).collect();
    let deadlines: Vec<Instant> = offsets_ns
        .iter()
        .map(|&offset| base + Duration::from_nanos(offset))
        .collect();
    // `NOT_YET` until the callback ran: no shared counter for the callbacks to contend on.
    let shared = Arc::new(Shared {
        late_ns: (0..n).map(|_| AtomicI64::new(NOT_YET)).collect(),
        deadlines: if small { deadlines.clone() } else { Vec::new() },
    });
    for (i, &deadline) in deadlines.iter().enumerate() {
        let shared = Arc::clone(&shared);
        if small {
            // 16 bytes of captures: stored in the wheel entry.
            timer
                .schedule_at(deadline, move || {
                    let late = lateness_now(shared.deadlines[i]);
                    shared.late_ns[i].store(late, Ordering::Relaxed);
                })
                .expect("schedule");
        } else {
            // 32 bytes of captures (the deadline too): boxed.
            timer
                .schedule_at(deadline, move || {
                    let late = lateness_now(deadline);
                    shared.late_ns[i].store(late, Ordering::Relaxed);
                })
                .expect("schedule");
        }
    }
    drop(deadlines);
    let late_ns = &shared.late_ns;
    let scheduled_at = Instant::now();
    if scheduled_at > base {
        println!(
            "  warning: scheduling took longer than the {lead:?} lead ({:?}): \
             the machine is overloaded, this run's lateness includes that",
            scheduled_at - (base - lead)
        );
    }
    let threads_before = thread_stats("tickwheel");
    std::thread::sleep((base + span).saturating_duration_since(Instant::now()));
    let give_up = Instant::now() + Duration::from_secs(30);
    while late_ns.iter().any(|a| a.load(Ordering::Relaxed) == NOT_YET) {
        assert!(Instant::now() < give_up, "timers did not all fire");
        std::thread::sleep(Duration::from_millis(10));
    }
    let threads_after = thread_stats("tickwheel");
    let worker_turns = timer.metrics().worker_turns;
    drop(timer.stop());
    let mut v: Vec<i64> = late_ns.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    drop(shared);
    if breakdown {
        print_breakdown(&offsets_ns, &v, span);
        println!("    turns run by a worker for a late driver: {worker_turns}");
        for (name, cpu, waits) in &threads_after {
            let (cpu0, waits0) = threads_before
                .iter()
                .find(|t| &t.0 == name)
                .map_or((0, 0), |t| (t.1, t.2));
            println!(
                "    {name}: on-CPU {:.1} ms ({:.0} ns per timer), blocking waits {}",
                (cpu - cpu0) as f64 / 1e6,
                (cpu - cpu0) as f64 / n as f64,
                waits - waits0
            );
        }
    }
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
    let flags: Vec<String> = std::env::args().skip(2).collect();
    let breakdown = flags.iter().any(|f| f == "breakdown");
    let small = flags.iter().any(|f| f == "small");
    if small {
        println!("callbacks capture an Arc and an index (16 bytes: inline)");
    } else {
        println!("callbacks capture 32 bytes (boxed)");
    }
    let spread: Vec<Stats> = (0..runs)
        .map(|r| {
            run(
                100_000,
                Duration::from_millis(200),
                Duration::from_secs(2),
                r as u64 + 1,
                breakdown,
                small,
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
                breakdown,
                small,
            )
        })
        .collect();
    report("1M burst within 1s", &burst);
}
