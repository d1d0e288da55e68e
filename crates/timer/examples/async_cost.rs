//! Instruction counts of async `sleep` and `timeout` (create + first poll + drop) against
//! tokio, for `valgrind --tool=callgrind`, which counts instructions repeatably on a noisy
//! machine (criterion's nanoseconds are in `benches/async.rs`):
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='async_cost::*_loop' \
//!     target/release/examples/async_cost 100000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep _loop
//! ```
//!
//! Run natively with a second argument (rounds), it also prints each loop's on-CPU
//! nanoseconds per operation (`/proc/thread-self/schedstat`: time on a core, not time
//! waiting for one), the loops interleaved round by round, as medians over the rounds and
//! the median of the per-round ratios tokio / tickwheel (above 1: tickwheel is cheaper):
//! `cargo run --release -p tickwheel --example async_cost -- 200000 15`

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

fn poll_once<F: Future>(f: F) -> bool {
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    let f = pin!(f);
    matches!(f.poll(&mut cx), Poll::Pending)
}

#[inline(never)]
fn tickwheel_sleep_loop(timer: &tickwheel::Timer, n: u64) {
    for _ in 0..n {
        std::hint::black_box(poll_once(timer.sleep(Duration::from_secs(60))));
    }
}

#[inline(never)]
fn tokio_sleep_loop(n: u64) {
    for _ in 0..n {
        std::hint::black_box(poll_once(tokio::time::sleep(Duration::from_secs(60))));
    }
}

#[inline(never)]
fn tickwheel_timeout_loop(timer: &tickwheel::Timer, n: u64) {
    for _ in 0..n {
        std::hint::black_box(poll_once(
            timer.timeout(Duration::from_secs(60), std::future::pending::<()>()),
        ));
    }
}

#[inline(never)]
fn tokio_timeout_loop(n: u64) {
    for _ in 0..n {
        std::hint::black_box(poll_once(tokio::time::timeout(
            Duration::from_secs(60),
            std::future::pending::<()>(),
        )));
    }
}

/// On-CPU nanoseconds of the calling thread so far.
fn cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// On-CPU nanoseconds per iteration of `f(n)`.
fn per_op(n: u64, f: impl FnOnce(u64)) -> f64 {
    let start = cpu_ns();
    f(n);
    (cpu_ns() - start) as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let timer = tickwheel::Timer::builder()
        .worker_threads(1)
        .build()
        .expect("build");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("rt");
    let _guard = rt.enter();
    if rounds == 0 {
        for _ in 0..2 {
            tickwheel_sleep_loop(&timer, n);
            tokio_sleep_loop(n);
            tickwheel_timeout_loop(&timer, n);
            tokio_timeout_loop(n);
        }
        return;
    }
    let mut rows: [Vec<f64>; 4] = Default::default();
    for _ in 0..rounds {
        rows[0].push(per_op(n, |n| tickwheel_sleep_loop(&timer, n)));
        rows[1].push(per_op(n, tokio_sleep_loop));
        rows[2].push(per_op(n, |n| tickwheel_timeout_loop(&timer, n)));
        rows[3].push(per_op(n, tokio_timeout_loop));
    }
    let ratio = |a: usize, b: usize| median((0..rounds).map(|r| rows[b][r] / rows[a][r]).collect());
    println!(
        "on-CPU ns per op, median of {rounds} rounds: sleep tickwheel {:.1}, tokio {:.1} \
         (ratio tokio/tickwheel {:.2}) | timeout tickwheel {:.1}, tokio {:.1} (ratio {:.2})",
        median(rows[0].clone()),
        median(rows[1].clone()),
        ratio(0, 1),
        median(rows[2].clone()),
        median(rows[3].clone()),
        ratio(2, 3),
    );
}
