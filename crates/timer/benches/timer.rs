#![allow(missing_docs, reason = "criterion macros generate undocumented items")]
//! schedule + cancel with 1e6 pending timers: tickwheel vs the `timer` crate (0.2),
//! single-threaded and with 2 producer threads. Run:
//! `cargo bench -p tickwheel --bench timer`

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

const PENDING: usize = 1_000_000;

fn tickwheel_pair(c: &mut Criterion) {
    let timer = tickwheel::Timer::builder()
        .worker_threads(1)
        .build()
        .expect("build");
    let _keep: Vec<_> = (0..PENDING)
        .map(|i| {
            timer
                .schedule(Duration::from_secs(1800 + (i % 1800) as u64), || ())
                .expect("fill")
        })
        .collect();
    let mut group = c.benchmark_group("schedule+cancel/1M-pending");
    group.bench_function("tickwheel/1-thread", |b| {
        b.iter(|| {
            let h = timer
                .schedule(Duration::from_secs(60), || ())
                .expect("schedule");
            timer.cancel(h)
        });
    });
    group.bench_function("tickwheel/2-threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_| {
                let h = timer
                    .schedule(Duration::from_secs(60), || ())
                    .expect("schedule");
                timer.cancel(h);
            })
        });
    });
    drop(group);
    drop(timer.stop());

    let yoric = timer::Timer::new();
    let _keep: Vec<_> = (0..PENDING)
        .map(|i| {
            yoric.schedule_with_delay(chrono::Duration::seconds(1800 + (i % 1800) as i64), || ())
        })
        .collect();
    let mut group = c.benchmark_group("schedule+cancel/1M-pending");
    group.bench_function("timer-crate/1-thread", |b| {
        b.iter(|| drop(yoric.schedule_with_delay(chrono::Duration::seconds(60), || ())));
    });
    group.bench_function("timer-crate/2-threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_| {
                drop(yoric.schedule_with_delay(chrono::Duration::seconds(60), || ()));
            })
        });
    });
}

/// Runs `iters` operations split over two scoped threads; returns the wall time.
fn two_threads(iters: u64, op: impl Fn(u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2 {
            let op = &op;
            s.spawn(move || {
                for i in (t..iters).step_by(2) {
                    op(i);
                }
            });
        }
    });
    start.elapsed()
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = tickwheel_pair
}
criterion_main!(benches);
