//! Where a burst's time goes: 1M callbacks made due at once (a `ManualClock` jumps over
//! their second), the time until all ran, and each timer thread's on-CPU time per callback
//! (`/proc/self/task/*/schedstat`): the driver (taking due timers out, dispatching) and
//! the workers (channel, callback, freeing). Deterministic apart from scheduling, so it
//! separates the pipeline's cost from a loaded machine's noise better than `lateness`.
//!
//! With a third argument `ticks`, the clock instead moves to each deadline the driver parks
//! towards before the burst (its early wake, as a real clock would reach it), then through
//! the burst one tick (1 ms) at a time, and the driver's on-CPU time is taken per tick, from
//! each step until the callbacks due by then have run and the driver sleeps again: the
//! first tick's cost, the most expensive ticks and how many cost more than the tick itself.
//! CPU time, not wall time, so a loaded machine changes it much less than it changes
//! lateness.
//!
//! By default each callback captures two `Arc`s and its index (24 bytes: boxed). With the
//! flag `small` it captures one `Arc` and its index (16 bytes: stored inline in the wheel
//! entry, no allocation per timer) and does the same work.
//!
//! With `at=MS` the burst starts MS ms after scheduling (default 1000): where it starts
//! within the wheel's 256-tick window decides what the driver can stage before it.
//!
//! Run: `cargo run --release -p tickwheel --example burst [timers] [runs] [ticks] [small] [at=MS]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tickwheel::{Clock, ManualClock, Timer};

/// A `ManualClock` that remembers the deadline the driver last parked towards, so that
/// `ticks` can move the clock through the driver's own wake-ups before the burst, as a real
/// clock would, instead of jumping over them.
#[derive(Debug, Clone)]
struct Watched {
    clock: ManualClock,
    parked: Arc<Mutex<Option<Instant>>>,
}

impl Clock for Watched {
    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn park_until(&self, deadline: Option<Instant>) {
        *self.parked.lock().expect("parked") = deadline;
        self.clock.park_until(deadline);
    }

    fn system_time(&self) -> SystemTime {
        self.clock.system_time()
    }
}

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

/// `true` once the thread named `prefix…` sleeps (`S` in `/proc/self/task/*/stat`).
fn sleeping(prefix: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return true;
    };
    dir.filter_map(|e| {
        let path = e.ok()?.path();
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        if !name.starts_with(prefix) {
            return None;
        }
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        let state = stat.rsplit_once(") ")?.1.chars().next()?;
        Some(state == 'S')
    })
    .all(|s| s)
}

/// Moves the clock through the burst one millisecond at a time; prints the driver's
/// on-CPU time per tick (see the module docs).
fn step_through(
    clock: &Watched,
    start: Instant,
    base: Instant,
    done: &AtomicU64,
    due_by: &[u64],
    run: usize,
) {
    // To 1 ms before the burst (not counted), through each wake-up the driver parks towards
    // on the way (its early wake stages the burst's windows), as a real clock would.
    let eve = base - Duration::from_millis(1);
    let mut wakes = Vec::new();
    loop {
        while !sleeping("burst-driver") {
            std::thread::sleep(Duration::from_micros(50));
        }
        let now = clock.now();
        match *clock.parked.lock().expect("parked") {
            Some(at) if at > now && at < eve => {
                wakes.push(format!("{:.0}", (at - start).as_secs_f64() * 1e3));
                clock.clock.advance(at - now);
            }
            _ => break,
        }
    }
    clock
        .clock
        .advance(eve.saturating_duration_since(clock.now()));
    while !sleeping("burst-driver") {
        std::thread::sleep(Duration::from_micros(50));
    }
    println!(
        "run {run}: the driver woke at ms {} before the burst (ms {:.0})",
        wakes.join(", "),
        (base - start).as_secs_f64() * 1e3
    );
    let mut per_tick = Vec::with_capacity(due_by.len());
    for &due in due_by {
        let d0 = cpu_ns("burst-driver");
        clock.clock.advance(Duration::from_millis(1));
        // Until this tick's callbacks ran and the driver is back asleep (its turn, staging
        // included, is over).
        while done.load(Ordering::Relaxed) < due || !sleeping("burst-driver") {
            std::thread::sleep(Duration::from_micros(50));
        }
        per_tick.push(cpu_ns("burst-driver") - d0);
    }
    let first: Vec<String> = per_tick
        .iter()
        .take(4)
        .map(|&ns| format!("{:.3}", ns as f64 / 1e6))
        .collect();
    let total: u64 = per_tick.iter().sum();
    let mut sorted = per_tick.clone();
    sorted.sort_unstable();
    let ms = |ns: u64| ns as f64 / 1e6;
    let worst: Vec<String> = sorted
        .iter()
        .rev()
        .take(5)
        .map(|&ns| format!("{:.2}", ms(ns)))
        .collect();
    println!(
        "run {run}: driver on-CPU per 1 ms tick over the burst: first ticks {} ms, median {:.3} ms, \
         top five {} ms, ticks over 1 ms: {}, total {:.1} ms",
        first.join(" / "),
        ms(sorted[sorted.len() / 2]),
        worst.join(" / "),
        per_tick.iter().filter(|&&ns| ns > 1_000_000).count(),
        ms(total)
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let runs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let flags: Vec<String> = args.collect();
    let ticks = flags.iter().any(|f| f == "ticks");
    // `at=MS`: the burst starts MS ms after scheduling (default 1000, tick 1000 of the
    // timer: 232 ticks into its 256-tick window). E.g. `at=958` puts it 190 ticks in.
    let at_ms: u64 = flags
        .iter()
        .find_map(|f| f.strip_prefix("at=")?.parse().ok())
        .unwrap_or(1_000);
    let small = flags.iter().any(|f| f == "small");
    for run in 0..runs {
        let clock = Watched {
            clock: ManualClock::new(),
            parked: Arc::new(Mutex::new(None)),
        };
        let timer = Timer::builder()
            .clock(clock.clone())
            .worker_threads(2)
            .thread_name("burst")
            .build()
            .expect("build");
        let done = Arc::new(AtomicU64::new(0));
        let sum = Arc::new((0..1024).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        // `small`: the counter and the sums behind one `Arc`.
        let both = Arc::new((
            AtomicU64::new(0),
            (0..1024).map(|_| AtomicU64::new(0)).collect::<Vec<_>>(),
        ));
        let done_count = |d: &AtomicU64| d.load(Ordering::Relaxed) + both.0.load(Ordering::Relaxed);
        let mut x: u64 = 0x9E37_79B9 + run as u64;
        let start = clock.now();
        let base = start + Duration::from_millis(at_ms);
        // Callbacks due once the clock is `k` ms into the burst: `due_by[k]`.
        let mut due_by = vec![0u64; 1_001];
        for i in 0..n {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let offset_us = (x >> 33) % 1_000_000;
            due_by[offset_us.div_ceil(1_000) as usize] += 1;
            let deadline = base + Duration::from_micros(offset_us);
            if small {
                let both = Arc::clone(&both);
                timer
                    .schedule_at(deadline, move || {
                        both.1[(i % 1024) as usize].fetch_add(i, Ordering::Relaxed);
                        both.0.fetch_add(1, Ordering::Relaxed);
                    })
                    .expect("schedule");
                continue;
            }
            let (done, sum) = (Arc::clone(&done), Arc::clone(&sum));
            timer
                .schedule_at(deadline, move || {
                    sum[(i % 1024) as usize].fetch_add(i, Ordering::Relaxed);
                    done.fetch_add(1, Ordering::Relaxed);
                })
                .expect("schedule");
        }
        std::thread::sleep(Duration::from_millis(50));
        if ticks {
            for k in 1..due_by.len() {
                due_by[k] += due_by[k - 1];
            }
            step_through(
                &clock,
                start,
                base,
                if small { &both.0 } else { &done },
                &due_by,
                run,
            );
            drop(timer.stop());
            continue;
        }
        let (d0, w0) = (cpu_ns("burst-driver"), cpu_ns("burst-worker"));
        let (dw0, ww0) = (waits("burst-driver"), waits("burst-worker"));
        let start = Instant::now();
        clock.clock.advance(Duration::from_millis(at_ms + 1_000));
        while done_count(&done) < n {
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
