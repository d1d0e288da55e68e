//! The threaded service: ordering, cancel, stop/shutdown, metrics, panics, never early.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tickwheel::{Clock, ManualClock, MissedTickBehavior, ScheduleError, TaskState, Timer};

const WAIT: Duration = Duration::from_secs(10);

fn manual(workers: usize) -> (Timer, ManualClock) {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .worker_threads(workers)
        .build()
        .expect("build");
    (timer, clock)
}

/// Waits (bounded) until `cond` holds, failing the test instead of hanging.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn fires_in_deadline_order_with_fifo_ties_on_a_manual_clock() {
    let (timer, clock) = manual(0);
    let order = Arc::new(Mutex::new(Vec::new()));
    for (i, ms) in [(0, 30u64), (1, 10), (2, 20), (3, 10), (4, 20)] {
        let order = Arc::clone(&order);
        timer
            .schedule(Duration::from_millis(ms), move || {
                order.lock().expect("lock").push(i)
            })
            .expect("schedule");
    }
    clock.advance(Duration::from_millis(9));
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        order.lock().expect("lock").is_empty(),
        "nothing is due at 9 ms"
    );
    clock.advance(Duration::from_millis(100));
    eventually("all five fired", || order.lock().expect("lock").len() == 5);
    assert_eq!(*order.lock().expect("lock"), [1, 3, 2, 4, 0]);
}

#[test]
fn a_timer_does_not_fire_before_its_deadline_on_a_manual_clock() {
    let (timer, clock) = manual(1);
    let (tx, rx) = mpsc::channel();
    let handle = timer
        .schedule(Duration::from_millis(5), move || tx.send(()).expect("send"))
        .expect("schedule");
    clock.advance(Duration::from_millis(4));
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "fired early"
    );
    assert_eq!(timer.state(handle), TaskState::Waiting);
    clock.advance(Duration::from_millis(1));
    rx.recv_timeout(WAIT).expect("fired at its deadline");
    eventually("done", || timer.state(handle) == TaskState::Done);
}

#[test]
fn never_early_against_the_real_clock() {
    let timer = Timer::builder()
        .resolution(Duration::from_micros(50))
        .build()
        .expect("build");
    let (tx, rx) = mpsc::channel();
    let n = 300;
    for i in 0..n {
        let delay = Duration::from_micros(37 * (i % 97));
        let deadline = Instant::now() + delay;
        let tx = tx.clone();
        timer
            .schedule_at(deadline, move || {
                tx.send((deadline, Instant::now())).expect("send")
            })
            .expect("schedule");
    }
    for _ in 0..n {
        let (deadline, ran) = rx.recv_timeout(WAIT).expect("every timer fires");
        assert!(ran >= deadline, "ran {:?} early", deadline - ran);
    }
}

/// `schedule(delay)` and `sleep(d)` take their deadline from the raw monotonic clock
/// (Linux) and the driver its "now": measured by `Instant`, nothing runs or completes
/// before the call's own time plus its delay, and `Sleep::deadline` is never earlier.
#[test]
fn delays_from_now_are_never_early_against_the_real_clock() {
    let timer = Timer::builder()
        .resolution(Duration::from_micros(50))
        .build()
        .expect("build");
    let (tx, rx) = mpsc::channel();
    let n = 300;
    for i in 0..n {
        let delay = Duration::from_nanos(37_013 * (i % 97));
        let start = Instant::now();
        let tx = tx.clone();
        timer
            .schedule(delay, move || {
                tx.send((start + delay, Instant::now())).expect("send")
            })
            .expect("schedule");
    }
    for _ in 0..n {
        let (deadline, ran) = rx.recv_timeout(WAIT).expect("every timer fires");
        assert!(ran >= deadline, "ran {:?} early", deadline - ran);
    }
    futures::executor::block_on(async {
        for i in 0..200u64 {
            let delay = Duration::from_nanos(1 + 13_007 * (i % 31));
            let start = Instant::now();
            let sleep = timer.sleep(delay);
            assert!(sleep.deadline() >= start + delay, "deadline early");
            sleep.await;
            let done = Instant::now();
            assert!(
                done >= start + delay,
                "woke {:?} early",
                start + delay - done
            );
        }
    });
}

#[test]
fn cancel_prevents_the_run_and_drops_the_closure_at_once() {
    let (timer, _clock) = manual(1);
    let token = Arc::new(());
    let held = Arc::clone(&token);
    let handle = timer
        .schedule(Duration::from_secs(3600), move || drop(held))
        .expect("schedule");
    assert_eq!(Arc::strong_count(&token), 2);
    assert_eq!(timer.pending(), 1);
    assert!(timer.cancel(handle));
    assert_eq!(
        Arc::strong_count(&token),
        1,
        "closure dropped by cancel, not at its deadline"
    );
    assert!(!timer.cancel(handle));
    assert_eq!(timer.state(handle), TaskState::Cancelled);
    assert_eq!(timer.pending(), 0);
    assert_eq!(timer.metrics().cancelled, 1);
    assert!(timer.stop().is_empty());
}

#[test]
fn cancel_after_the_run_returns_false() {
    let (timer, clock) = manual(1);
    let (tx, rx) = mpsc::channel();
    let handle = timer
        .schedule(Duration::from_millis(1), move || tx.send(()).expect("send"))
        .expect("schedule");
    clock.advance(Duration::from_millis(1));
    rx.recv_timeout(WAIT).expect("ran");
    eventually("done", || timer.state(handle) == TaskState::Done);
    assert!(!timer.cancel(handle));
    // The driver publishes its tally after handing the batch over, so a worker may run the
    // callback before the counter moves.
    eventually("fired counted", || timer.metrics().fired == 1);
    assert_eq!(timer.metrics().fired, 1);
}

#[test]
fn stop_returns_every_task_that_never_ran_sorted_by_deadline() {
    let (timer, clock) = manual(1);
    let ran = Arc::new(AtomicUsize::new(0));
    for s in [30u64, 10] {
        // Captures 8 bytes: stored inline in the wheel entry.
        let ran = Arc::clone(&ran);
        timer
            .schedule(Duration::from_secs(s), move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .expect("schedule");
    }
    // Captures 40 bytes: boxed.
    let (big_ran, pad) = (Arc::clone(&ran), [1usize; 4]);
    timer
        .schedule(Duration::from_secs(20), move || {
            big_ran.fetch_add(pad.iter().sum::<usize>() - 3, Ordering::SeqCst);
        })
        .expect("schedule");
    let start = clock.now();
    let left = timer.stop();
    assert_eq!(left.len(), 3);
    let offsets: Vec<_> = left.iter().map(|t| t.deadline() - start).collect();
    assert_eq!(
        offsets,
        [10, 20, 30].map(Duration::from_secs),
        "sorted by deadline"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    for task in left {
        task.run();
    }
    assert_eq!(
        ran.load(Ordering::SeqCst),
        3,
        "the returned tasks are the real closures"
    );
    let refused = timer.schedule(Duration::ZERO, || ());
    assert!(matches!(refused, Err(ScheduleError::Shutdown(_))));
    assert!(timer.stop().is_empty(), "a second stop has nothing left");
}

#[test]
fn max_pending_refuses_and_gives_the_task_back() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock)
        .max_pending(2)
        .build()
        .expect("build");
    timer.schedule(Duration::from_secs(1), || ()).expect("1");
    let second = timer.schedule(Duration::from_secs(1), || ()).expect("2");
    let (tx, rx) = mpsc::channel();
    let err = timer
        .schedule(Duration::from_secs(1), move || tx.send(42).expect("send"))
        .expect_err("third is over the limit");
    assert!(err.is_full());
    assert_eq!(err.to_string().chars().last(), Some('.'));
    (err.into_inner())();
    assert_eq!(rx.try_recv(), Ok(42), "the refused task comes back");
    assert!(timer.cancel(second));
    timer
        .schedule(Duration::from_secs(1), || ())
        .expect("room again after a cancel");
    assert_eq!(timer.metrics().rejected, 1);
}

#[test]
fn a_panicking_callback_is_counted_and_does_not_disturb_others() {
    let (timer, clock) = manual(1);
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(Duration::from_millis(1), || {
            panic!("boom (expected by the test)")
        })
        .expect("schedule");
    timer
        .schedule(Duration::from_millis(2), move || tx.send(()).expect("send"))
        .expect("schedule");
    clock.advance(Duration::from_millis(2));
    rx.recv_timeout(WAIT).expect("the second timer still fires");
    eventually("panic counted", || timer.metrics().panicked == 1);
}

#[test]
fn a_slow_callback_does_not_delay_other_timers() {
    let (timer, clock) = manual(2);
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(Duration::from_millis(1), move || {
            let _ = release_rx.recv_timeout(WAIT);
        })
        .expect("slow");
    timer
        .schedule(Duration::from_millis(2), move || tx.send(()).expect("send"))
        .expect("fast");
    clock.advance(Duration::from_millis(2));
    rx.recv_timeout(WAIT)
        .expect("fast timer ran while the slow one blocks");
    release_tx.send(()).expect("release");
}

#[test]
fn graceful_shutdown_waits_for_scheduled_tasks() {
    let timer = Timer::builder().worker_threads(1).build().expect("build");
    let ran = Arc::new(AtomicUsize::new(0));
    for ms in [1u64, 5, 20] {
        let ran = Arc::clone(&ran);
        timer
            .schedule(Duration::from_millis(ms), move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .expect("schedule");
    }
    let repeating = timer
        .schedule_repeating(
            Duration::from_secs(3600),
            Duration::from_secs(1),
            MissedTickBehavior::Skip,
            || (),
        )
        .expect("repeating");
    timer.shutdown();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        3,
        "every one-shot ran before shutdown returned"
    );
    assert_eq!(timer.state(repeating), TaskState::Cancelled);
    assert!(timer
        .schedule(Duration::ZERO, || ())
        .expect_err("closed")
        .is_shutdown());
}

#[test]
fn repeating_tasks_follow_the_missed_tick_policy() {
    for (behavior, expected_runs) in [
        (MissedTickBehavior::Burst, 5), // due at 10,20,30,40,50: all caught up
        (MissedTickBehavior::Skip, 1),  // jumps to the next grid point after 55
        (MissedTickBehavior::Delay, 1), // restarts 10 after the late run
    ] {
        let (timer, clock) = manual(0);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&runs);
        let handle = timer
            .schedule_repeating(
                Duration::from_millis(10),
                Duration::from_millis(10),
                behavior,
                move || {
                    r.fetch_add(1, Ordering::SeqCst);
                },
            )
            .expect("schedule");
        let start = clock.now();
        clock.advance(Duration::from_millis(55));
        eventually("first run", || runs.load(Ordering::SeqCst) >= 1);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(runs.load(Ordering::SeqCst), expected_runs, "{behavior:?}");
        let next = timer.deadline(handle).expect("waiting for its next run") - start;
        let expected_next = match behavior {
            MissedTickBehavior::Burst => Duration::from_millis(60),
            MissedTickBehavior::Skip => Duration::from_millis(60),
            _ => Duration::from_millis(65),
        };
        assert_eq!(next, expected_next, "{behavior:?}");
        assert!(timer.cancel(handle));
    }
}

#[test]
fn dropping_the_last_timer_joins_its_threads() {
    let timer = Timer::builder()
        .worker_threads(2)
        .thread_name("tw-drop-test")
        .build()
        .expect("build");
    timer
        .schedule(Duration::from_secs(3600), || ())
        .expect("schedule");
    let clone = timer.clone();
    drop(timer);
    drop(clone); // joins: returns only after the threads exited
    let names = std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .filter(|n| n.starts_with("tw-drop-test"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(names, 0, "no thread of the dropped timer is left");
}

#[test]
fn far_deadlines_are_accepted() {
    let (timer, _clock) = manual(0);
    let h = timer.schedule(Duration::MAX, || ()).expect("Duration::MAX");
    assert_eq!(timer.state(h), TaskState::Waiting);
    let h2 = timer
        .schedule(Duration::from_secs(86_400 * 365 * 100), || ())
        .expect("a century");
    assert!(timer.cancel(h) && timer.cancel(h2));
}

#[test]
fn many_producers_schedule_and_cancel_concurrently() {
    let timer = Timer::builder().worker_threads(1).build().expect("build");
    let fired = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let timer = timer.clone();
            let fired = Arc::clone(&fired);
            std::thread::spawn(move || {
                let mut kept = 0;
                for i in 0..5_000u64 {
                    let fired = Arc::clone(&fired);
                    let h = timer
                        .schedule(Duration::from_micros(i % 500), move || {
                            fired.fetch_add(1, Ordering::SeqCst);
                        })
                        .expect("schedule");
                    if i % 2 == 0 && timer.cancel(h) {
                        continue;
                    }
                    kept += 1;
                }
                kept
            })
        })
        .collect();
    let kept: usize = threads.into_iter().map(|t| t.join().expect("join")).sum();
    eventually("all kept timers fired", || {
        fired.load(Ordering::SeqCst) == kept
    });
    // The driver publishes its fired tally after handing a batch over (see above).
    eventually("fired tally published", || {
        let m = timer.metrics();
        m.fired + m.cancelled == 20_000
    });
    let m = timer.metrics();
    assert_eq!(m.scheduled, 20_000);
    assert_eq!(m.fired + m.cancelled, 20_000);
    assert_eq!(timer.pending(), 0);
}

/// Regression (issue 13): `stop` dropped pending repeating tasks instead of returning them,
/// because the driver's last turn swept them as if for a graceful shutdown.
#[test]
fn stop_returns_pending_repeating_tasks_too() {
    let (timer, clock) = manual(1);
    let start = clock.now();
    timer
        .schedule(Duration::from_secs(5), || ())
        .expect("one-shot");
    timer
        .schedule_repeating(
            Duration::from_secs(10),
            Duration::from_secs(1),
            MissedTickBehavior::Skip,
            || (),
        )
        .expect("repeating");
    let left = timer.stop();
    let seen: Vec<_> = left
        .iter()
        .map(|t| (t.deadline() - start, t.period()))
        .collect();
    assert_eq!(
        seen,
        [
            (Duration::from_secs(5), None),
            (Duration::from_secs(10), Some(Duration::from_secs(1)))
        ]
    );
    assert_eq!(
        timer.metrics().cancelled,
        2,
        "both counted once, as returned"
    );
}

/// A handle is a key: once its timer is gone and its slot holds a newer timer, the old
/// handle neither cancels nor reports that newer timer.
#[test]
fn a_stale_handle_never_cancels_a_newer_timer_in_its_reused_slot() {
    let (timer, clock) = manual(1);
    let old = timer
        .schedule(Duration::from_secs(60), || ())
        .expect("schedule");
    assert!(timer.cancel(old));
    assert_eq!(
        timer.state(old),
        TaskState::Cancelled,
        "slot not reused yet"
    );
    let (tx, rx) = mpsc::channel();
    let new = timer
        .schedule(Duration::from_millis(1), move || tx.send(()).expect("send"))
        .expect("schedule");
    assert_ne!(old, new);
    assert!(!timer.cancel(old), "the stale handle cancels nothing");
    assert_eq!(
        timer.state(old),
        TaskState::Cancelled,
        "its own outcome, never the newer timer's state"
    );
    assert_eq!(timer.deadline(old), None);
    assert_eq!(timer.state(new), TaskState::Waiting);
    clock.advance(Duration::from_millis(1));
    rx.recv_timeout(WAIT).expect("the newer timer still fires");
    eventually("done", || timer.state(new) == TaskState::Done);
    assert_eq!(
        timer.state(old),
        TaskState::Unknown,
        "the newer timer in the slot finished"
    );
    assert!(!timer.cancel(old));
    assert!(!timer.cancel(new));
    assert_eq!(timer.metrics().cancelled, 1);
}

/// A handle of one timer means nothing to another.
#[test]
fn a_handle_of_another_timer_is_rejected() {
    let (a, _ca) = manual(0);
    let (b, _cb) = manual(0);
    let ha = a.schedule(Duration::from_secs(60), || ()).expect("a");
    let hb = b.schedule(Duration::from_secs(60), || ()).expect("b");
    assert!(!b.cancel(ha), "a's handle must not cancel b's timer");
    assert_eq!(b.state(ha), TaskState::Unknown);
    assert_eq!(b.state(hb), TaskState::Waiting);
    assert!(a.cancel(ha) && b.cancel(hb));
}

/// Issue 13: a repeating task whose run is in progress when `stop` is called is not lost:
/// `stop` waits for the run and returns the task with its next deadline.
#[test]
fn stop_returns_a_repeating_task_whose_run_is_in_progress() {
    let (timer, clock) = manual(1);
    let start = clock.now();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let handle = timer
        .schedule_repeating(
            Duration::from_millis(1),
            Duration::from_secs(10),
            MissedTickBehavior::Skip,
            move || {
                r.fetch_add(1, Ordering::SeqCst);
                let _ = entered_tx.send(());
                let _ = release_rx.recv_timeout(WAIT);
            },
        )
        .expect("schedule");
    clock.advance(Duration::from_millis(1));
    entered_rx
        .recv_timeout(WAIT)
        .expect("the first run started");
    assert_eq!(timer.state(handle), TaskState::Running);
    let stopper = {
        let timer = timer.clone();
        std::thread::spawn(move || timer.stop())
    };
    // Wait until `stop` has begun (schedules are refused), then let the run finish.
    let mut accepted = 0;
    eventually("stop began", || {
        match timer.schedule(Duration::from_secs(1), || ()) {
            Ok(_) => {
                accepted += 1;
                false
            }
            Err(e) => e.is_shutdown(),
        }
    });
    release_tx.send(()).expect("release");
    let left = stopper.join().expect("stop");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let repeating: Vec<_> = left.iter().filter(|t| t.period().is_some()).collect();
    assert_eq!(repeating.len(), 1, "the running repeating task is returned");
    assert_eq!(
        repeating[0].deadline() - start,
        Duration::from_millis(1) + Duration::from_secs(10),
        "with its next deadline"
    );
    assert_eq!(left.len(), 1 + accepted);
    assert_eq!(timer.state(handle), TaskState::Cancelled);
}

/// Cancelling a repeating task while its run is in progress: the run finishes, no further
/// run starts, and the closure is dropped when the run ends.
#[test]
fn cancel_during_a_repeating_run_prevents_further_runs() {
    let (timer, clock) = manual(1);
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let token = Arc::new(());
    let held = Arc::clone(&token);
    let handle = timer
        .schedule_repeating(
            Duration::from_millis(1),
            Duration::from_millis(1),
            MissedTickBehavior::Burst,
            move || {
                let _keep = &held;
                let _ = entered_tx.send(());
                let _ = release_rx.recv_timeout(WAIT);
            },
        )
        .expect("schedule");
    clock.advance(Duration::from_millis(1));
    entered_rx.recv_timeout(WAIT).expect("running");
    assert!(timer.cancel(handle), "cancels the runs after this one");
    assert_eq!(timer.state(handle), TaskState::Cancelled);
    release_tx.send(()).expect("release");
    eventually("closure dropped", || Arc::strong_count(&token) == 1);
    clock.advance(Duration::from_millis(10));
    assert!(
        entered_rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "no run after the cancel"
    );
    assert_eq!(timer.pending(), 0);
}

/// Producers on several threads land on different shards; cancels from other threads
/// reach the right shard; the driver fires from all of them.
#[test]
fn shards_fire_and_cancel_across_threads() {
    let timer = Timer::builder()
        .worker_threads(2)
        .shards(4)
        .build()
        .expect("build");
    let fired = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let timer = timer.clone();
            let fired = Arc::clone(&fired);
            std::thread::spawn(move || {
                (0..200u64)
                    .map(|i| {
                        let fired = Arc::clone(&fired);
                        let delay =
                            Duration::from_millis(if i % 2 == 0 { 3_600_000 } else { i % 7 });
                        (
                            i,
                            t,
                            timer
                                .schedule(delay, move || {
                                    fired.fetch_add(1, Ordering::SeqCst);
                                })
                                .expect("schedule"),
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
        .flat_map(|t| t.join().expect("producer"))
        .collect();
    // Cancel the far ones from this (non-scheduling) thread.
    for (i, _, h) in &handles {
        if i % 2 == 0 {
            assert!(timer.cancel(*h));
        }
    }
    eventually("the near half fired", || {
        fired.load(Ordering::SeqCst) == 400
    });
    assert_eq!(timer.pending(), 0);
    assert!(timer.stop().is_empty());
}

/// A worker runs the driver's turn only once the earliest deadline is more than the margin
/// (150 µs) past with no turn since, fires only what is due by the clock, and leaves the
/// driver nothing to do. (`__worker_turn` is what a worker calls between batches.)
#[test]
fn a_worker_turns_for_a_late_driver_only_past_the_margin() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .worker_threads(0)
        .__manual_driver()
        .build()
        .expect("build");
    let ran = Arc::new(Mutex::new(Vec::new()));
    for (i, ms) in [10u64, 10, 12].into_iter().enumerate() {
        let ran = Arc::clone(&ran);
        timer
            .schedule(Duration::from_millis(ms), move || {
                ran.lock().expect("lock").push(i);
            })
            .expect("schedule");
    }
    assert!(
        !timer.__worker_turn(),
        "no turn has published a deadline yet"
    );
    timer.__turn();
    clock.advance(Duration::from_millis(10) + Duration::from_micros(100));
    assert!(
        !timer.__worker_turn(),
        "within the margin the driver keeps its turn"
    );
    assert!(ran.lock().expect("lock").is_empty());
    clock.advance(Duration::from_micros(100));
    assert!(timer.__worker_turn(), "200 µs late: the worker turns");
    assert_eq!(*ran.lock().expect("lock"), vec![0, 1], "only what is due");
    assert!(!timer.__worker_turn(), "the next deadline is not late");
    timer.__turn();
    assert_eq!(
        ran.lock().expect("lock").len(),
        2,
        "the driver finds nothing due"
    );
    clock.advance(Duration::from_millis(2));
    assert!(timer.__worker_turn());
    assert_eq!(*ran.lock().expect("lock"), vec![0, 1, 2]);
    assert!(!timer.__worker_turn(), "nothing pending: no turn");
    let m = timer.metrics();
    assert_eq!((m.worker_turns, m.fired), (2, 3));
    assert!(timer.stop().is_empty());
}
