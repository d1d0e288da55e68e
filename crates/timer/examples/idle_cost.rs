//! Idle cost: CPU time used by the timer's threads over 10 s while it holds no timers, and
//! while it holds 1M timers due in 30–60 minutes. Read from
//! `/proc/self/task/<tid>/schedstat` (on-CPU nanoseconds per thread, Linux only), which is
//! finer than `getrusage`'s accounting; the process total from `getrusage`-equivalent
//! `/proc/self/stat` is printed beside it.
//!
//! Run: `cargo run --release -p tickwheel --example idle_cost [seconds]`

use std::time::{Duration, Instant};

use tickwheel::Timer;

/// On-CPU nanoseconds of every thread whose name starts with `prefix`, and how many
/// threads matched.
fn threads_cpu_ns(prefix: &str) -> (u64, usize) {
    let (mut total, mut threads) = (0, 0);
    for entry in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let dir = entry.expect("task").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        threads += 1;
        let stat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    }
    (total, threads)
}

/// Process user+system time from `/proc/self/stat`, in clock ticks (1/100 s).
fn process_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("procfs");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

fn measure(label: &str, secs: u64) {
    let (before_ns, threads) = threads_cpu_ns("idle-");
    let before_ticks = process_ticks();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let wall = start.elapsed();
    let used = threads_cpu_ns("idle-").0 - before_ns;
    let ticks = process_ticks() - before_ticks;
    println!(
        "{label}: {threads} timer threads (driver + workers; {:.1} ms CPU before) used \
         {:.3} ms CPU in {:.1} s = {:.4} % of a core (whole process incl. main: {} clock ticks)",
        before_ns as f64 / 1e6,
        used as f64 / 1e6,
        wall.as_secs_f64(),
        100.0 * used as f64 / wall.as_nanos() as f64,
        ticks
    );
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let timer = Timer::builder().thread_name("idle").build().expect("build");
    std::thread::sleep(Duration::from_millis(200));
    measure("0 timers", secs);

    for i in 0..1_000_000u64 {
        let delay = Duration::from_secs(1800) + Duration::from_millis(i * 1_800_000 / 1_000_000);
        let _handle = timer.schedule(delay, || ()).expect("schedule");
    }
    std::thread::sleep(Duration::from_secs(1));
    measure("1M timers due in 30-60 min", secs);
    assert_eq!(timer.stop().len(), 1_000_000);
}
