//! What a timer allocates, counted by `allocation-counter`'s global allocator (the calling
//! thread's allocations only: the driver's and workers' own are not counted).
//!
//! Once the shard's slabs are warm, scheduling and cancelling a one-shot callback whose
//! captures fit inline (`Option<F>` within 16 bytes: nothing, a `u64`, an `Arc` and a
//! `u64`) allocates nothing: the closure is stored in the wheel entry itself
//! (`src/payload.rs`). A larger closure is boxed: exactly one allocation per schedule, which
//! the last test pins (and which shows the counter sees allocations).
//!
//! One allocation is not the timer's and happens once per process: the first time any thread
//! waits for a `parking_lot` lock, `parking_lot` builds its table of waiting threads (two
//! allocations, on the waiting thread). A schedule that meets the driver holding the shard's
//! lock waits, so that can land in any round (it did in ~1 run in 10). Each test therefore
//! makes its thread wait on a lock once before it counts.

use std::time::Duration;

use tickwheel::Timer;

const N: usize = 20_000;

/// Makes this thread wait for a `parking_lot` mutex that another thread holds, so that
/// `parking_lot`'s one-time set-up for waiting threads is done before anything is counted.
fn wait_on_a_lock_once() {
    let lock = std::sync::Arc::new(parking_lot::Mutex::new(()));
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder = {
        let lock = std::sync::Arc::clone(&lock);
        std::thread::spawn(move || {
            let _guard = lock.lock();
            held_tx.send(()).expect("send");
            // Long past parking_lot's spinning: the waiter parks.
            std::thread::sleep(Duration::from_millis(50));
        })
    };
    held_rx.recv().expect("holder took the lock");
    drop(lock.lock());
    holder.join().expect("holder");
}

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
    wait_on_a_lock_once();
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
    wait_on_a_lock_once();
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
    wait_on_a_lock_once();
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
