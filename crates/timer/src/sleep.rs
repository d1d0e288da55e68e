//! [`Sleep`]: a future that completes at a deadline, on any executor.
//!
//! # Ground rules
//!
//! A registered `Sleep` shares a `SleepEntry` (state byte, wheel key, waker slot) with the
//! driver. The driver fires it with `WAITING -> DONE` and then wakes the waker in the slot;
//! `poll` stores its waker in the slot and then reads the state. The slot is a mutex, so
//! either the driver's wake sees the new waker or `poll` sees `DONE`: no lost wake-up. The
//! driver clones the waker rather than taking it, so a re-armed entry keeps its waker.
//!
//! Only the owning `Sleep` re-arms an entry, and only once it is `DONE` (the driver has
//! unlinked it); an entry still `WAITING` is cancelled and replaced instead.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::driver::{Fired, Inner, Insert, Inserted, STOPPED};
use crate::metrics::Counters;
use crate::sync::{Arc, Mutex, Ordering};
use crate::task::{Job, PendingTask, Tally, TaskCore, DONE, SHUTDOWN, WAITING};

pub(crate) struct SleepEntry {
    core: TaskCore,
    waker: Mutex<Option<Waker>>,
}

impl SleepEntry {
    fn wake(&self) {
        let waker = self.waker.lock().clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Job for SleepEntry {
    fn core(&self) -> &TaskCore {
        &self.core
    }

    fn fire(&self, inner: &Inner, _deadline_tick: u64) -> Fired {
        if !self.core.transition(WAITING, DONE) {
            return Fired::Nothing;
        }
        Counters::bump(&inner.counters.fired);
        self.wake();
        Fired::Woke
    }

    fn run(self: Arc<Self>, _inner: &Arc<Inner>, _tally: &mut Tally) {}

    fn take_pending(&self, _inner: &Inner, _deadline_tick: u64) -> Option<PendingTask> {
        None
    }

    fn shut_down(&self) {
        if self.core.transition(WAITING, SHUTDOWN) {
            self.wake();
        }
    }
}

/// A future that completes at its deadline (by its timer's clock), never before.
///
/// Created by [`Timer::sleep`](crate::Timer::sleep), [`sleep`](crate::sleep()) and friends.
/// Creating one costs nothing; the first poll registers it with the timer (one allocation,
/// one wheel insert under a short lock); dropping it cancels that registration in O(1). It is `Unpin`,
/// `Send` and `Sync`, and works on any executor.
///
/// # Cancellation safety
///
/// Dropping a `Sleep` before it completes cancels its timer and has no other effect;
/// polling it again (or a new `Sleep` with the same deadline) waits for the same instant.
///
/// # Panics
///
/// Polling panics if its [`Timer`](crate::Timer) has been stopped (dropped, or
/// [`stop`](crate::Timer::stop)ped) before the deadline: the deadline can no longer be
/// observed, and returning `Ready` would be early.
pub struct Sleep {
    inner: Arc<Inner>,
    deadline: Instant,
    entry: Option<Arc<SleepEntry>>,
    armed: bool,
}

impl Sleep {
    pub(crate) fn new(inner: Arc<Inner>, deadline: Instant) -> Self {
        Sleep {
            inner,
            deadline,
            entry: None,
            armed: false,
        }
    }

    /// The instant this future completes at.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// `true` once the deadline has passed by the timer's clock.
    #[must_use]
    pub fn is_elapsed(&self) -> bool {
        match &self.entry {
            Some(e) if self.armed && e.core.state.load(Ordering::SeqCst) == DONE => true,
            _ => self.clock_now() >= self.deadline,
        }
    }

    pub(crate) fn clock_now(&self) -> Instant {
        self.inner.clock.now()
    }

    /// Moves the deadline, earlier or later; the future can be polled again after it
    /// completed. Re-arming a completed `Sleep` reuses its registration (no allocation).
    pub fn reset(&mut self, deadline: Instant) {
        if self.armed && deadline == self.deadline {
            if let Some(e) = &self.entry {
                if e.core.state.load(Ordering::SeqCst) == WAITING {
                    return;
                }
            }
        }
        self.disarm();
        self.deadline = deadline;
    }

    fn disarm(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        if let Some(e) = &self.entry {
            if e.core.transition(WAITING, crate::task::CANCELLED) {
                self.inner.cancelled(&e.core, false);
                self.entry = None; // the driver may still hold it: never re-arm this one
            } else if e.core.state.load(Ordering::SeqCst) != DONE {
                self.entry = None;
            }
        }
    }

    fn register(&mut self, waker: &Waker) {
        let entry = match self.entry.take() {
            Some(e) => {
                // DONE: the driver has unlinked it; only we touch it now.
                *e.waker.lock() = Some(waker.clone());
                e.core.state.store(WAITING, Ordering::SeqCst);
                e
            }
            None => Arc::new(SleepEntry {
                core: TaskCore::new(),
                waker: Mutex::new(Some(waker.clone())),
            }),
        };
        let tick = self.inner.ticks.tick_ceil(self.deadline);
        if self
            .inner
            .insert(Arc::clone(&entry) as Arc<dyn Job>, tick, Insert::Async)
            != Inserted::Linked
        {
            entry.shut_down();
        }
        self.entry = Some(entry);
        self.armed = true;
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if !this.armed {
            if this.clock_now() >= this.deadline {
                return Poll::Ready(());
            }
            assert!(
                this.inner.run_state() != STOPPED,
                "tickwheel: a Sleep was polled after its Timer stopped"
            );
            this.register(cx.waker());
            // The slot already holds this waker: skip the slot lock below.
            return match this
                .entry
                .as_ref()
                .map(|e| e.core.state.load(Ordering::SeqCst))
            {
                Some(DONE) => Poll::Ready(()),
                Some(SHUTDOWN) => panic!("tickwheel: a Sleep was polled after its Timer stopped"),
                _ => Poll::Pending,
            };
        }
        let Some(entry) = &this.entry else {
            return Poll::Pending;
        };
        match entry.core.state.load(Ordering::SeqCst) {
            DONE => return Poll::Ready(()),
            SHUTDOWN => panic!("tickwheel: a Sleep was polled after its Timer stopped"),
            _ => {}
        }
        {
            let mut slot = entry.waker.lock();
            if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *slot = Some(cx.waker().clone());
            }
        }
        match entry.core.state.load(Ordering::SeqCst) {
            DONE => Poll::Ready(()),
            SHUTDOWN => panic!("tickwheel: a Sleep was polled after its Timer stopped"),
            _ => Poll::Pending,
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.disarm();
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("registered", &self.armed)
            .finish()
    }
}
