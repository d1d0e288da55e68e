//! schedule + cancel pairs with 1M timers pending, on 1 and on 2 producer threads, for
//! profiling (`perf record -e cpu-clock`, `valgrind --tool=callgrind`) and a quick
//! throughput ratio: prints ns per pair and the 2-thread / 1-thread aggregate throughput.
//!
//! On a shared machine wall time includes time spent descheduled, so each thread's
//! on-CPU time (`/proc/thread-self/schedstat`) is printed too: with free cores, 2-thread
//! throughput / 1-thread = 2 × (1-thread CPU ns per pair) / (2-thread CPU ns per pair).
//!
//! Run: `cargo run --release -p tickwheel --example pairs [pairs per thread] [pending]`

use std::time::{Duration, Instant};

use tickwheel::Timer;

/// On-CPU nanoseconds of the calling thread so far.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Runs `n` pairs; returns this thread's on-CPU nanoseconds for them.
fn timed_pairs(timer: &Timer, n: u64) -> u64 {
    let start = cpu_ns();
    pairs(timer, n);
    cpu_ns() - start
}

#[inline(never)]
fn pairs(timer: &Timer, n: u64) {
    for _ in 0..n {
        let h = timer
            .schedule(Duration::from_secs(60), || ())
            .expect("schedule");
        std::hint::black_box(timer.cancel(h));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000_000);
    let pending: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let timer = Timer::builder().worker_threads(1).build().expect("build");
    for i in 0..pending {
        let _handle = timer
            .schedule(Duration::from_secs(1800 + i % 1800), || ())
            .expect("fill");
    }
    pairs(&timer, n / 10); // warm up
    let start = Instant::now();
    let one_cpu = timed_pairs(&timer, n);
    let one = start.elapsed();
    let start = Instant::now();
    let two_cpu: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2).map(|_| s.spawn(|| timed_pairs(&timer, n))).collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("producer"))
            .collect()
    });
    let two = start.elapsed();
    let per = |d: Duration, pairs: u64| d.as_nanos() as f64 / pairs as f64;
    let cpu_per = |ns: u64| ns as f64 / n as f64;
    let two_cpu_per = (cpu_per(two_cpu[0]) + cpu_per(two_cpu[1])) / 2.0;
    println!(
        "wall: 1 thread {:.1} ns/pair, 2 threads {:.1} ns/pair (wall / all pairs), ratio {:.2}x | \
         on-CPU: 1 thread {:.1} ns/pair, 2 threads {:.1} ns/pair each, ratio {:.2}x",
        per(one, n),
        per(two, 2 * n),
        per(one, n) / per(two, 2 * n),
        cpu_per(one_cpu),
        two_cpu_per,
        2.0 * cpu_per(one_cpu) / two_cpu_per
    );
    drop(timer.stop());
}
