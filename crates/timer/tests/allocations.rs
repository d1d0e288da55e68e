//! What a timer allocates, counted by `allocation-counter`'s global allocator (the calling
//! thread's allocations only: the driver's and workers' own are not counted).
//!
//! Once the shard's slabs are warm, scheduling and cancelling a one-shot callback whose
//! captures fit inline (`Option<F>` within 16 bytes: nothing, a `u64`, an `Arc` and a
//! `u64`) allocates nothing: the closure is stored in the wheel entry itself
//! (`src/payload.rs`). A larger closure is boxed: exactly one allocation per schedule, which
//! the last test pins (and which shows the counter sees allocations).

use std::time::Duration;

use tickwheel::Timer;

const N: usize = 20_000;

/// Schedules `N` callbacks made by `make` an hour ahead and cancels them all; returns the
/// allocations this thread made for it.
fn round<F: FnOnce() + Send + 'static>(timer: &Timer, make: impl Fn(usize) -> F) -> u64 {
    let mut handles = Vec::with_capacity(N);
    let counts = allocation_counter::measure(|| {
        for i in 0..N {
            handles.push(
                timer
                    .schedule(Duration::from_secs(3600), make(i))
                    .expect("schedule"),
            );
        }
        for &h in &handles {
            assert!(timer.cancel(h));
        }
    });
    counts.count_total
}

#[test]
fn a_closure_that_captures_nothing_is_scheduled_without_allocating() {
    let timer = Timer::builder().worker_threads(1).build().expect("build");
    // Warm: the shard's wheel, its outcome records and item pool grow to N timers.
    let warm = round(&timer, |_| || ());
    assert!(warm > 0, "growing the slabs allocates ({warm})");
    for _ in 0..3 {
        let used = round(&timer, |_| || ());
        assert_eq!(
            used, 0,
            "{used} allocations for {N} warm schedule + cancel pairs"
        );
    }
    assert_eq!(timer.stop().len(), 0);
}

#[test]
fn a_closure_capturing_a_u64_or_an_arc_and_a_u64_is_stored_inline() {
    let timer = Timer::builder().worker_threads(1).build().expect("build");
    let shared = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let _ = round(&timer, |_| || ());
    for _ in 0..2 {
        let used = round(&timer, |i| {
            let x = i as u64;
            move || {
                std::hint::black_box(x);
            }
        });
        assert_eq!(
            used, 0,
            "{used} allocations for {N} closures capturing a u64"
        );
        // (Cloning an `Arc` does not allocate.)
        let used = round(&timer, |i| {
            let (a, x) = (std::sync::Arc::clone(&shared), i as u64);
            move || {
                a.fetch_add(x, std::sync::atomic::Ordering::Relaxed);
            }
        });
        assert_eq!(
            used, 0,
            "{used} allocations for {N} closures capturing an Arc and a u64"
        );
    }
    assert_eq!(timer.stop().len(), 0);
    assert_eq!(
        std::sync::Arc::strong_count(&shared),
        1,
        "every capture dropped"
    );
}

#[test]
fn a_larger_closure_is_boxed_once_per_schedule() {
    let timer = Timer::builder().worker_threads(1).build().expect("build");
    let _ = round(&timer, |_| || ());
    for _ in 0..2 {
        let used = round(&timer, |i| {
            let xs = [i as u64; 3];
            move || {
                std::hint::black_box(xs);
            }
        });
        assert_eq!(used, N as u64, "one box per closure over 16 bytes");
    }
    assert_eq!(timer.stop().len(), 0);
}
