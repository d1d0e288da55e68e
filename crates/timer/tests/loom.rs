//! Model-checked races (run with `RUSTFLAGS="--cfg loom" cargo test --test loom --release`);
//! without `--cfg loom` the same bodies run once as plain tests.
//!
//! The timer is built with a manual driver and inline callbacks, so the "driver" is just
//! another thread calling `__turn`: cancel vs fire, schedule vs stop, waker change vs fire,
//! drop vs fire.

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

#[cfg(loom)]
use loom::{sync::atomic::AtomicUsize, thread};
#[cfg(not(loom))]
use std::{sync::atomic::AtomicUsize, thread};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use tickwheel::{ManualClock, ScheduleError, TaskState, Timer};

fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    #[cfg(loom)]
    {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        // A wheel's slot tables are ~80 KiB and are built in place on the model's stack;
        // loom's coroutines get 32 KiB by default, so run the body on a thread with room.
        let f = Arc::new(f);
        builder.check(move || {
            let f = Arc::clone(&f);
            thread::Builder::new()
                .stack_size(1 << 20)
                .spawn(move || f())
                .expect("spawn the model's body")
                .join()
                .expect("the model's body panicked");
        });
    }
    #[cfg(not(loom))]
    f();
}

fn manual_timer() -> (Timer, ManualClock) {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .worker_threads(0)
        .__manual_driver()
        .build()
        .expect("build");
    (timer, clock)
}

struct Counter(AtomicUsize);
impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}
fn waker() -> (Arc<Counter>, Waker) {
    let c = Arc::new(Counter(AtomicUsize::new(0)));
    (Arc::clone(&c), Waker::from(c))
}

#[test]
fn cancel_vs_fire() {
    model(|| {
        let (timer, _clock) = manual_timer();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&ran);
        let handle = timer
            .schedule(Duration::ZERO, move || {
                r.fetch_add(1, SeqCst);
            })
            .expect("schedule");
        let canceller = {
            let timer = timer.clone();
            thread::spawn(move || timer.cancel(handle))
        };
        let driver = {
            let timer = timer.clone();
            thread::spawn(move || {
                timer.__turn();
            })
        };
        let cancelled = canceller.join().expect("canceller");
        driver.join().expect("driver");
        timer.__turn();
        let ran = ran.load(SeqCst);
        assert_eq!(
            ran + usize::from(cancelled),
            1,
            "ran {ran}, cancelled {cancelled}"
        );
        let expected = if cancelled {
            TaskState::Cancelled
        } else {
            TaskState::Done
        };
        assert_eq!(timer.state(handle), expected);
        assert_eq!(timer.pending(), 0);
    });
}

#[test]
fn schedule_vs_stop() {
    model(|| {
        let (timer, _clock) = manual_timer();
        let ran = Arc::new(AtomicUsize::new(0));
        let producer = {
            let timer = timer.clone();
            let ran = Arc::clone(&ran);
            thread::spawn(move || {
                match timer.schedule(Duration::ZERO, move || {
                    ran.fetch_add(1, SeqCst);
                }) {
                    Ok(_) => 0,
                    Err(ScheduleError::Shutdown(f)) => {
                        f();
                        1
                    }
                    Err(e) => panic!("unexpected {e}"),
                }
            })
        };
        let stopper = {
            let timer = timer.clone();
            thread::spawn(move || {
                let left = timer.stop();
                let n = left.len();
                left.into_iter().for_each(tickwheel::PendingTask::run);
                n
            })
        };
        let refused = producer.join().expect("producer");
        let returned = stopper.join().expect("stopper");
        assert_eq!(
            refused + returned,
            1,
            "the task is either refused or returned by stop, exactly once"
        );
        assert_eq!(ran.load(SeqCst), 1);
    });
}

#[test]
fn waker_change_vs_fire() {
    model(|| {
        let (timer, clock) = manual_timer();
        let (_c1, w1) = waker();
        let (c2, w2) = waker();
        let mut sleep = timer.sleep(Duration::from_millis(1));
        assert!(Pin::new(&mut sleep)
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        clock.advance(Duration::from_millis(1));
        let driver = {
            let timer = timer.clone();
            thread::spawn(move || {
                timer.__turn();
            })
        };
        let second = Pin::new(&mut sleep).poll(&mut Context::from_waker(&w2));
        driver.join().expect("driver");
        if second.is_pending() {
            assert_eq!(c2.0.load(SeqCst), 1, "the new waker must be woken");
        }
        assert_eq!(
            Pin::new(&mut sleep).poll(&mut Context::from_waker(&w2)),
            Poll::Ready(())
        );
    });
}

#[test]
fn drop_sleep_vs_fire() {
    model(|| {
        let (timer, clock) = manual_timer();
        let (_c, w) = waker();
        let mut sleep = timer.sleep(Duration::from_millis(1));
        assert!(Pin::new(&mut sleep)
            .poll(&mut Context::from_waker(&w))
            .is_pending());
        clock.advance(Duration::from_millis(1));
        let dropper = thread::spawn(move || drop(sleep));
        let driver = {
            let timer = timer.clone();
            thread::spawn(move || {
                timer.__turn();
            })
        };
        dropper.join().expect("dropper");
        driver.join().expect("driver");
        timer.__turn();
        let m = timer.metrics();
        assert_eq!(m.fired + m.cancelled, 1, "{m:?}");
    });
}

/// The wheel lock protocol: a repeating task is re-inserted by the (inline) driver after
/// its run while another thread cancels it. The insert re-reads the state after linking,
/// so the cancel always wins for the future and no run starts after it.
#[test]
fn cancel_vs_repeating_reinsert() {
    model(|| {
        let (timer, clock) = manual_timer();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&runs);
        let handle = timer
            .schedule_repeating(
                Duration::ZERO,
                Duration::from_millis(1),
                tickwheel::MissedTickBehavior::Skip,
                move || {
                    r.fetch_add(1, SeqCst);
                },
            )
            .expect("schedule");
        let canceller = {
            let timer = timer.clone();
            thread::spawn(move || timer.cancel(handle))
        };
        let driver = {
            let timer = timer.clone();
            thread::spawn(move || {
                timer.__turn();
            })
        };
        let cancelled = canceller.join().expect("canceller");
        driver.join().expect("driver");
        assert!(
            cancelled,
            "a repeating task that has not finished can be cancelled"
        );
        let after = runs.load(SeqCst);
        assert!(after <= 1, "ran {after} times in one turn");
        clock.advance(Duration::from_millis(5));
        timer.__turn();
        assert_eq!(runs.load(SeqCst), after, "no run starts after the cancel");
        assert_eq!(timer.state(handle), TaskState::Cancelled);
        assert_eq!(timer.pending(), 0);
        assert_eq!(timer.stop().len(), 0);
    });
}

fn sharded_timer() -> (Timer, ManualClock) {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .worker_threads(0)
        .shards(2)
        .__manual_driver()
        .build()
        .expect("build");
    (timer, clock)
}

/// Schedule on one thread while the driver turns; cancel from another thread than the
/// scheduling one, racing the next turn. Exactly one of run / cancel happens.
#[test]
fn cancel_from_another_thread_than_the_scheduler() {
    model(|| {
        let (timer, clock) = sharded_timer();
        let ran = Arc::new(AtomicUsize::new(0));
        let producer = {
            let timer = timer.clone();
            let ran = Arc::clone(&ran);
            thread::spawn(move || {
                timer
                    .schedule(Duration::from_millis(1), move || {
                        ran.fetch_add(1, SeqCst);
                    })
                    .expect("schedule")
            })
        };
        let handle = producer.join().expect("producer");
        clock.advance(Duration::from_millis(1));
        let driver = {
            let timer = timer.clone();
            thread::spawn(move || {
                timer.__turn();
            })
        };
        let cancelled = timer.cancel(handle);
        driver.join().expect("driver");
        timer.__turn();
        let ran = ran.load(SeqCst);
        assert_eq!(
            ran + usize::from(cancelled),
            1,
            "ran {ran}, cancelled {cancelled}"
        );
        assert_eq!(timer.pending(), 0);
        assert!(timer.stop().is_empty());
    });
}

/// A stale handle used while its slot is being reused by a new timer: the stale cancel
/// never takes the new timer.
#[test]
fn stale_cancel_vs_slot_reuse() {
    model(|| {
        let (timer, _clock) = manual_timer();
        let old = timer
            .schedule(Duration::from_secs(60), || ())
            .expect("schedule");
        assert!(timer.cancel(old));
        let stale = {
            let timer = timer.clone();
            thread::spawn(move || timer.cancel(old))
        };
        let new = timer
            .schedule(Duration::from_secs(60), || ())
            .expect("schedule");
        assert!(
            !stale.join().expect("stale canceller"),
            "a stale handle cancels nothing"
        );
        assert_eq!(timer.state(new), TaskState::Waiting);
        assert_eq!(timer.pending(), 1);
        assert_eq!(timer.stop().len(), 1);
    });
}

/// A one-shot callback lives in its wheel entry and its outcome is kept for its handle
/// until the next timer in that entry finishes. A stale handle read while its entry is
/// reused by a newer timer and that timer fires reports its own outcome or `Unknown`,
/// never the newer timer's `Waiting` or `Done`, and cancels nothing.
#[test]
fn stale_state_vs_reuse_and_fire() {
    model(|| {
        let (timer, clock) = manual_timer();
        let old = timer
            .schedule(Duration::from_secs(60), || ())
            .expect("schedule");
        assert!(timer.cancel(old));
        let reader = {
            let timer = timer.clone();
            thread::spawn(move || (timer.state(old), timer.cancel(old)))
        };
        let ran = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&ran);
        let new = timer
            .schedule(Duration::from_millis(1), move || {
                r.fetch_add(1, SeqCst);
            })
            .expect("schedule");
        clock.advance(Duration::from_millis(1));
        timer.__turn();
        let (seen, cancelled) = reader.join().expect("reader");
        assert!(
            matches!(seen, TaskState::Cancelled | TaskState::Unknown),
            "stale handle reported {seen:?}"
        );
        assert!(!cancelled, "a stale handle cancels nothing");
        assert_eq!(ran.load(SeqCst), 1, "the newer timer ran once");
        assert_eq!(timer.state(new), TaskState::Done);
        assert_eq!(timer.state(old), TaskState::Unknown);
        assert_eq!(timer.pending(), 0);
    });
}

/// A burst whose timers share one higher-level wheel slot: the driver moves them down in
/// several lock holds (`poll_budgeted` pauses; under loom after each line of 15 timers),
/// releasing the shard lock in between. Meanwhile another thread cancels one of them (in
/// the window being moved down: the wheel finishes the cascade for it) and schedules a new
/// one due in the same window. Every timer runs exactly once or is cancelled, none early,
/// and the new one runs too.
#[test]
fn cancel_and_schedule_during_a_paused_cascade() {
    use std::sync::atomic::AtomicUsize as StdCount;
    const BURST: usize = 20; // two lines: the cascade pauses once
    model(|| {
        let (timer, clock) = manual_timer();
        let ran = Arc::new(StdCount::new(0));
        let handles: Vec<_> = (0..BURST)
            .map(|_| {
                let ran = Arc::clone(&ran);
                timer
                    .schedule(Duration::from_millis(300), move || {
                        ran.fetch_add(1, SeqCst);
                    })
                    .expect("schedule")
            })
            .collect();
        clock.advance(Duration::from_millis(300));
        let victim = handles[BURST / 2];
        let late = Arc::new(StdCount::new(0));
        let other = {
            let (timer, late) = (timer.clone(), Arc::clone(&late));
            thread::spawn(move || {
                let cancelled = timer.cancel(victim);
                // A cancel fails only once the timer has fired. (Checked now: the late
                // timer below may reuse the victim's wheel entry, after which the victim's
                // handle reports `Unknown`.)
                let expected = if cancelled {
                    TaskState::Cancelled
                } else {
                    TaskState::Done
                };
                assert_eq!(timer.state(victim), expected);
                timer
                    .schedule(Duration::ZERO, move || {
                        late.fetch_add(1, SeqCst);
                    })
                    .expect("schedule during the cascade");
                cancelled
            })
        };
        timer.__turn();
        let cancelled = other.join().expect("other thread");
        timer.__turn();
        let ran = ran.load(SeqCst);
        assert_eq!(
            ran + usize::from(cancelled),
            BURST,
            "ran {ran}, cancelled {cancelled}"
        );
        assert_eq!(
            late.load(SeqCst),
            1,
            "the timer scheduled meanwhile ran once"
        );
        assert!(!timer.cancel(victim), "nothing left to cancel");
        assert_eq!(timer.pending(), 0);
        assert!(timer.stop().is_empty());
    });
}

/// A worker standing in for a late driver (`__worker_turn`) races the driver's own turn and
/// a cancel. Whoever holds the turn token turns, the other skips or finds nothing due: the
/// timer due runs at most once (exactly once unless the cancel won), never before its
/// deadline, not after a cancel that returned `true`, and the timer not yet due stays put.
#[test]
fn worker_turn_vs_driver_turn_vs_cancel() {
    model(|| {
        let (timer, clock) = manual_timer();
        let start = timer.now();
        let ran = Arc::new(AtomicUsize::new(0));
        let early = Arc::new(AtomicUsize::new(0));
        let (r, e, c) = (Arc::clone(&ran), Arc::clone(&early), clock.clone());
        let due = timer
            .schedule(Duration::from_millis(10), move || {
                if tickwheel::Clock::now(&c) < start + Duration::from_millis(10) {
                    e.fetch_add(1, SeqCst);
                }
                r.fetch_add(1, SeqCst);
            })
            .expect("schedule");
        let later_ran = Arc::new(AtomicUsize::new(0));
        let l = Arc::clone(&later_ran);
        timer
            .schedule(Duration::from_millis(50), move || {
                l.fetch_add(1, SeqCst);
            })
            .expect("schedule");
        // The driver's turn before the deadline publishes it; nothing is due yet, so a
        // worker does not turn.
        timer.__turn();
        assert!(!timer.__worker_turn(), "nothing is late yet");
        assert_eq!(ran.load(SeqCst), 0);
        // The driver oversleeps: the deadline is 1 ms past.
        clock.advance(Duration::from_millis(11));
        let canceller = {
            let timer = timer.clone();
            let ran = Arc::clone(&ran);
            thread::spawn(move || {
                let cancelled = timer.cancel(due);
                // A cancel that returned true was before the run: none may follow.
                (cancelled, ran.load(SeqCst))
            })
        };
        let worker = {
            let timer = timer.clone();
            thread::spawn(move || timer.__worker_turn())
        };
        let driver = {
            let timer = timer.clone();
            thread::spawn(move || {
                timer.__turn();
            })
        };
        let (cancelled, ran_at_cancel) = canceller.join().expect("canceller");
        let worker_turned = worker.join().expect("worker");
        driver.join().expect("driver");
        timer.__turn();
        let ran = ran.load(SeqCst);
        assert_eq!(
            ran + usize::from(cancelled),
            1,
            "ran {ran}, cancelled {cancelled}"
        );
        if cancelled {
            assert_eq!(ran_at_cancel, 0);
        }
        assert_eq!(early.load(SeqCst), 0, "fired before its deadline");
        assert_eq!(later_ran.load(SeqCst), 0, "a timer not due fired");
        assert_eq!(
            timer.metrics().worker_turns,
            u64::from(worker_turned),
            "worker turns counted"
        );
        assert_eq!(timer.pending(), 1);
        assert_eq!(timer.stop().len(), 1, "stop returns the timer not yet due");
    });
}
