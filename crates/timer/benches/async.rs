#![allow(missing_docs, reason = "criterion macros generate undocumented items")]
//! Async sleep/timeout: create + first poll + drop, tickwheel vs tokio, futures-timer,
//! async-io, in the same run. Run: `cargo bench -p tickwheel --bench async`

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

fn poll_once<F: Future>(f: F) -> bool {
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let f = pin!(f);
    matches!(f.poll(&mut cx), Poll::Pending)
}

fn sleep(c: &mut Criterion) {
    let d = Duration::from_secs(60);
    let mut group = c.benchmark_group("sleep/create+poll+drop");
    let timer = tickwheel::Timer::builder()
        .worker_threads(1)
        .build()
        .expect("build");
    group.bench_function("tickwheel", |b| b.iter(|| poll_once(timer.sleep(d))));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("rt");
    group.bench_function("tokio", |b| {
        let _g = rt.enter();
        b.iter(|| poll_once(tokio::time::sleep(d)));
    });
    group.bench_function("futures-timer", |b| {
        b.iter(|| poll_once(futures_timer::Delay::new(d)));
    });
    group.bench_function("async-io", |b| {
        b.iter(|| poll_once(async_io::Timer::after(d)));
    });
    drop(group);

    let mut group = c.benchmark_group("timeout/pending-future");
    group.bench_function("tickwheel", |b| {
        b.iter(|| poll_once(timer.timeout(d, std::future::pending::<()>())));
    });
    group.bench_function("tokio", |b| {
        let _g = rt.enter();
        b.iter(|| poll_once(tokio::time::timeout(d, std::future::pending::<()>())));
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = sleep
}
criterion_main!(benches);
