//! Where a burst's time goes: 1M callbacks made due at once (a `ManualClock` jumps over
//! their second), the time until all ran, and each timer thread's on-CPU time per callback
//! (`/proc/self/task/*/schedstat`): the driver (taking due timers out, dispatching) and
//! the workers (channel, callback, freeing). Deterministic apart from scheduling, so it
//! separates the pipeline's cost from a loaded machine's noise better than `lateness`.
//!
//! Run: `cargo run --release -p tickwheel --example burst [timers] [runs]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickwheel::{Clock, ManualClock, Timer};

/// Voluntary context switches (blocking waits: a worker waiting on the channel, a lock)
/// of this process's threads whose name starts with `prefix`.
fn waits(prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| {
        let path = e.ok()?.path();
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        if !name.starts_with(prefix) {
            return None;
        }
        let status = std::fs::read_to_string(path.join("status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
            .trim()
            .parse::<u64>()
            .ok()
    })
    .sum()
}

/// On-CPU nanoseconds of this process's threads whose name starts with `prefix`.
fn cpu_ns(prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| {
        let path = e.ok()?.path();
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        if !name.starts_with(prefix) {
            return None;
        }
        std::fs::read_to_string(path.join("schedstat"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    })
    .sum()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let runs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    for run in 0..runs {
        let clock = ManualClock::new();
        let timer = Timer::builder()
            .clock(clock.clone())
            .worker_threads(2)
            .thread_name("burst")
            .build()
            .expect("build");
        let done = Arc::new(AtomicU64::new(0));
        let sum = Arc::new((0..1024).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let mut x: u64 = 0x9E37_79B9 + run as u64;
        let base = clock.now() + Duration::from_secs(1);
        for i in 0..n {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let deadline = base + Duration::from_micros((x >> 33) % 1_000_000);
            let (done, sum) = (Arc::clone(&done), Arc::clone(&sum));
            timer
                .schedule_at(deadline, move || {
                    sum[(i % 1024) as usize].fetch_add(i, Ordering::Relaxed);
                    done.fetch_add(1, Ordering::Relaxed);
                })
                .expect("schedule");
        }
        std::thread::sleep(Duration::from_millis(50));
        let (d0, w0) = (cpu_ns("burst-driver"), cpu_ns("burst-worker"));
        let (dw0, ww0) = (waits("burst-driver"), waits("burst-worker"));
        let start = Instant::now();
        clock.advance(Duration::from_secs(2));
        while done.load(Ordering::Relaxed) < n {
            std::thread::sleep(Duration::from_micros(200));
        }
        let wall = start.elapsed();
        let (d1, w1) = (cpu_ns("burst-driver"), cpu_ns("burst-worker"));
        let (dw1, ww1) = (waits("burst-driver"), waits("burst-worker"));
        let per = |ns: u64| ns as f64 / n as f64;
        println!(
            "run {run}: {n} callbacks in {:.1} ms wall ({:.0} ns each); on-CPU per callback: driver {:.0} ns, workers {:.0} ns (both workers together); blocking waits: driver {}, workers {}",
            wall.as_secs_f64() * 1e3,
            wall.as_nanos() as f64 / n as f64,
            per(d1 - d0),
            per(w1 - w0),
            dw1 - dw0,
            ww1 - ww0
        );
        drop(timer.stop());
    }
}
