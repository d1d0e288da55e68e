//! Instruction counts of async `sleep` and `timeout` (create + first poll + drop) against
//! tokio, for `valgrind --tool=callgrind`, which counts instructions repeatably on a noisy
//! machine (criterion's nanoseconds are in `benches/async.rs`):
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='async_cost::*_loop' \
//!     target/release/examples/async_cost 100000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep _loop
//! ```

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

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let timer = tickwheel::Timer::builder()
        .worker_threads(1)
        .build()
        .expect("build");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("rt");
    let _guard = rt.enter();
    for _ in 0..2 {
        tickwheel_sleep_loop(&timer, n);
        tokio_sleep_loop(n);
        tickwheel_timeout_loop(&timer, n);
        tokio_timeout_loop(n);
    }
}
