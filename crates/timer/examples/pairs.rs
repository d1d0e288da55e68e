//! schedule + cancel pairs with 1M timers pending, on 1 and on 2 producer threads, for
//! profiling (`perf record -e cpu-clock`, `valgrind --tool=callgrind`) and a quick
//! throughput ratio: prints ns per pair and the 2-thread / 1-thread aggregate throughput.
//!
//! On a shared machine wall time includes time spent waiting for a core, so each producer
//! thread's wall time is split (`/proc/thread-self/schedstat`) into on-CPU time, time
//! runnable but waiting for a core (other processes), and the rest: time blocked (a
//! contended lock, a futex). Contention between the producers shows as blocked time or as
//! more on-CPU time per pair (cache lines bouncing, spinning); a busy machine shows as
//! runqueue time. With free cores, 2-thread throughput / 1-thread =
//! 2 × (1-thread on-CPU ns per pair) / (2-thread on-CPU + blocked ns per pair).
//!
//! The pair's timer is due in 60 s, before every pending one (30–60 min): the common
//! "timeout that is cancelled" shape, where each cancel removes the wheel's earliest timer.
//! A third argument sets the pair's delay in seconds instead (e.g. `7200`: after every
//! pending timer, so a cancel never removes the earliest).
//!
//! Run: `cargo run --release -p tickwheel --example pairs [pairs per thread] [pending] [pair delay s]`

use std::time::{Duration, Instant};

use tickwheel::Timer;

/// On-CPU and runqueue-wait nanoseconds of the calling thread so far.
fn sched_ns() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut fields = stat
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

/// Runs `n` pairs; returns this thread's (on-CPU, runqueue wait, blocked) nanoseconds.
fn timed_pairs(timer: &Timer, n: u64, delay: Duration) -> (u64, u64, u64) {
    let (cpu0, wait0) = sched_ns();
    let start = Instant::now();
    pairs(timer, n, delay);
    let wall = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let (cpu1, wait1) = sched_ns();
    let (cpu, wait) = (cpu1 - cpu0, wait1 - wait0);
    (cpu, wait, wall.saturating_sub(cpu + wait))
}

#[inline(never)]
fn pairs(timer: &Timer, n: u64, delay: Duration) {
    for _ in 0..n {
        let h = timer.schedule(delay, || ()).expect("schedule");
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
    let delay = Duration::from_secs(args.next().and_then(|s| s.parse().ok()).unwrap_or(60));
    let timer = Timer::builder().worker_threads(1).build().expect("build");
    for i in 0..pending {
        let _handle = timer
            .schedule(Duration::from_secs(1800 + i % 1800), || ())
            .expect("fill");
    }
    pairs(&timer, n / 10, delay); // warm up
    let start = Instant::now();
    let one_cpu = timed_pairs(&timer, n, delay);
    let one = start.elapsed();
    let start = Instant::now();
    let two_cpu: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| s.spawn(|| timed_pairs(&timer, n, delay)))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("producer"))
            .collect()
    });
    let two = start.elapsed();
    let per = |d: Duration, pairs: u64| d.as_nanos() as f64 / pairs as f64;
    let each = |ns: u64| ns as f64 / n as f64;
    let avg = |f: fn(&(u64, u64, u64)) -> u64| (each(f(&two_cpu[0])) + each(f(&two_cpu[1]))) / 2.0;
    let (two_on, two_wait, two_blocked) = (avg(|t| t.0), avg(|t| t.1), avg(|t| t.2));
    println!(
        "wall: 1 thread {:.1} ns/pair, 2 threads {:.1} ns/pair (wall / all pairs), ratio {:.2}x | \
         per pair and thread, on-CPU / waiting for a core / blocked: 1 thread {:.1} / {:.1} / {:.1}, \
         2 threads {:.1} / {:.1} / {:.1} | throughput ratio with free cores {:.2}x",
        per(one, n),
        per(two, 2 * n),
        per(one, n) / per(two, 2 * n),
        each(one_cpu.0),
        each(one_cpu.1),
        each(one_cpu.2),
        two_on,
        two_wait,
        two_blocked,
        2.0 * each(one_cpu.0) / (two_on + two_blocked)
    );
    drop(timer.stop());
}
