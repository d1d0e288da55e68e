//! Per-timer shared state: the state machine, callback tasks and [`TimerHandle`].
//!
//! # Ground rules
//!
//! A timer is an `Arc<dyn Job>` shared by its handle(s), the driver's wheel and, for a
//! moment, a worker. Its `state` byte is the only arbiter of who may act:
//!
//! - `WAITING -> RUNNING`: a worker (or the inline driver) about to run the callback;
//! - `WAITING -> CANCELLED`: [`TimerHandle::cancel`], a dropped future, or `stop`;
//! - `WAITING -> DONE`: the driver firing an async timer;
//! - `RUNNING -> WAITING | DONE | CANCELLED`: the end of a run (repeating / one-shot / a
//!   repeating task cancelled while it ran).
//!
//! Whoever wins a compare-and-swap out of `WAITING` owns what follows (running, or dropping
//! the closure and unlinking the wheel entry); everyone else backs off. The
//! closure sits in a `Mutex<Option<F>>` that only that winner takes.
//!
//! `key` is the wheel key, written and read only under the driver's wheel lock (an insert
//! stores it, a canceller reads it to unlink the entry at once). An insert re-reads `state`
//! after linking, so a task cancelled while being re-inserted is unlinked right there.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::driver::{Fired, Inner};
use crate::interval::MissedTickBehavior;
use crate::metrics::Counters;
use crate::sync::{Arc, AtomicU64, AtomicU8, Mutex, Ordering};

pub(crate) const WAITING: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const DONE: u8 = 2;
pub(crate) const CANCELLED: u8 = 3;
/// The timer service stopped before an async timer fired.
pub(crate) const SHUTDOWN: u8 = 4;

/// `key` before the driver has inserted the timer (a real key never has index `u32::MAX`).
pub(crate) const NO_KEY: u64 = u64::MAX;

#[derive(Debug)]
pub(crate) struct TaskCore {
    pub(crate) state: AtomicU8,
    pub(crate) key: AtomicU64,
}

impl TaskCore {
    pub(crate) fn new() -> Self {
        TaskCore {
            state: AtomicU8::new(WAITING),
            key: AtomicU64::new(NO_KEY),
        }
    }

    pub(crate) fn transition(&self, from: u8, to: u8) -> bool {
        self.state
            .compare_exchange(from, to, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}

/// What the driver and workers need from a timer, whatever it carries.
pub(crate) trait Job: Send + Sync + 'static {
    fn core(&self) -> &TaskCore;
    /// Called by the driver when the timer is due. Callbacks answer `Fired::Run` (the
    /// driver then has them run); async timers wake their task here.
    ///
    /// The default (callbacks) does no state check: `run` decides with its CAS. A cancelled
    /// timer has normally left the wheel already, and skipping the load spares the driver
    /// (the serial part of a burst) a cache miss per timer.
    fn fire(&self, _inner: &Inner, _deadline_tick: u64) -> Fired {
        Fired::Run
    }
    /// Runs the callback; only called after `fire` returned `true`.
    /// Counts into `tally` (settled once per batch, so workers do not contend on the
    /// shared counters per callback).
    fn run(self: Arc<Self>, inner: &Arc<Inner>, tally: &mut Tally);
    /// Takes back a callback that never ran (for `stop`); marks the timer cancelled.
    fn take_pending(&self, inner: &Inner, deadline_tick: u64) -> Option<PendingTask>;
    /// Drops the closure, if it is still there, after a won cancel.
    fn discard(&self) {}
    /// Cancels a repeating task (graceful shutdown); one-shot timers return `false`.
    fn cancel_repeating(&self) -> bool {
        false
    }
    /// The timer service stopped: async timers learn it here.
    fn shut_down(&self) {}
    /// The next deadline tick of a repeating task.
    fn next_tick(&self) -> Option<u64> {
        None
    }
}

/// What a batch of runs did to the shared counters, applied once by [`Inner::settle`].
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) fired: u64,
    /// Pending slots released.
    pub(crate) finished: usize,
}

/// A one-shot callback.
pub(crate) struct OnceTask<F> {
    core: TaskCore,
    f: Mutex<Option<F>>,
}

impl<F: FnOnce() + Send + 'static> OnceTask<F> {
    pub(crate) fn new(f: F) -> Self {
        OnceTask {
            core: TaskCore::new(),
            f: Mutex::new(Some(f)),
        }
    }

    /// Takes the closure back after a lost race with `stop` (see `Timer::schedule`).
    pub(crate) fn take(&self) -> Option<F> {
        self.f.lock().take()
    }
}

impl<F: FnOnce() + Send + 'static> Job for OnceTask<F> {
    fn core(&self) -> &TaskCore {
        &self.core
    }

    fn run(self: Arc<Self>, inner: &Arc<Inner>, tally: &mut Tally) {
        if !self.core.transition(WAITING, RUNNING) {
            return; // cancelled between firing and running
        }
        let Some(f) = self.f.lock().take() else {
            return;
        };
        tally.fired += 1;
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            Counters::bump(&inner.counters.panicked);
        }
        self.core.state.store(DONE, Ordering::SeqCst);
        tally.finished += 1;
    }

    fn take_pending(&self, inner: &Inner, deadline_tick: u64) -> Option<PendingTask> {
        if !self.core.transition(WAITING, CANCELLED) {
            return None;
        }
        let f = self.f.lock().take()?;
        inner.task_finished();
        Some(PendingTask {
            deadline: inner.instant_of(deadline_tick),
            kind: PendingKind::Once(Box::new(f)),
        })
    }

    fn discard(&self) {
        // A closure with nothing to drop needs no lock: the state CAS already stops it.
        if std::mem::needs_drop::<F>() {
            drop(self.f.lock().take());
        }
    }
}

/// A repeating callback; re-inserted by the worker after each run.
pub(crate) struct RepeatTask<F> {
    core: TaskCore,
    period_ticks: u64,
    period: Duration,
    behavior: MissedTickBehavior,
    next: AtomicU64,
    f: Mutex<Option<F>>,
}

impl<F: FnMut() + Send + 'static> RepeatTask<F> {
    pub(crate) fn new(
        f: F,
        first_tick: u64,
        period: Duration,
        period_ticks: u64,
        behavior: MissedTickBehavior,
    ) -> Self {
        RepeatTask {
            core: TaskCore::new(),
            period_ticks: period_ticks.max(1),
            period,
            behavior,
            next: AtomicU64::new(first_tick),
            f: Mutex::new(Some(f)),
        }
    }

    pub(crate) fn take(&self) -> Option<F> {
        self.f.lock().take()
    }
}

impl<F: FnMut() + Send + 'static> Job for RepeatTask<F> {
    fn core(&self) -> &TaskCore {
        &self.core
    }

    fn run(self: Arc<Self>, inner: &Arc<Inner>, tally: &mut Tally) {
        if !self.core.transition(WAITING, RUNNING) {
            return;
        }
        let Some(mut f) = self.f.lock().take() else {
            return;
        };
        tally.fired += 1;
        let panicked = catch_unwind(AssertUnwindSafe(&mut f)).is_err();
        if panicked {
            Counters::bump(&inner.counters.panicked);
        }
        let due = self.next.load(Ordering::SeqCst);
        let now = inner.now_tick();
        let next = self.behavior.next_tick(due, now, self.period_ticks);
        self.next.store(next, Ordering::SeqCst);
        // A panicking repeating task is not run again: it is likely to panic every time.
        if panicked || inner.is_shutting_down() {
            if self.core.transition(RUNNING, DONE) {
                tally.finished += 1;
            }
            return; // dropping `f` here, outside every lock
        }
        *self.f.lock() = Some(f);
        if self.core.transition(RUNNING, WAITING) {
            if inner.insert(self.clone(), next, crate::driver::Insert::Again)
                != crate::driver::Inserted::Linked
                && self.core.transition(WAITING, CANCELLED)
            {
                // `stop` drained the wheel while we ran: no further run.
                drop(self.f.lock().take());
                tally.finished += 1;
            }
        } else {
            // Cancelled while running: the canceller already counted it; drop the closure.
            drop(self.f.lock().take());
        }
    }

    fn take_pending(&self, inner: &Inner, deadline_tick: u64) -> Option<PendingTask> {
        if !self.core.transition(WAITING, CANCELLED) {
            return None;
        }
        let f = self.f.lock().take()?;
        inner.task_finished();
        Some(PendingTask {
            deadline: inner.instant_of(deadline_tick),
            kind: PendingKind::Repeating {
                f: Box::new(f),
                period: self.period,
            },
        })
    }

    fn discard(&self) {
        drop(self.f.lock().take());
    }

    fn cancel_repeating(&self) -> bool {
        let won = self.core.transition(WAITING, CANCELLED);
        if won {
            drop(self.f.lock().take());
        }
        won
    }

    fn next_tick(&self) -> Option<u64> {
        Some(self.next.load(Ordering::SeqCst))
    }
}

/// The observable state of a scheduled callback, from [`TimerHandle::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskState {
    /// Not yet due, or due and waiting for a worker.
    Waiting,
    /// The callback is running now.
    Running,
    /// A one-shot callback ran (or panicked), or a repeating task stopped after a panic or
    /// a graceful shutdown.
    Done,
    /// Cancelled (by a handle, or by [`Timer::stop`](crate::Timer::stop)) before it ran.
    Cancelled,
}

/// A handle to a scheduled callback: cancel it, watch its state.
///
/// Cheap to clone, `Send + Sync`. Dropping a handle does **not** cancel the timer. A handle
/// does not keep its [`Timer`](crate::Timer) alive.
#[derive(Clone)]
pub struct TimerHandle {
    pub(crate) job: Arc<dyn Job>,
    pub(crate) inner: Arc<Inner>,
    pub(crate) deadline: Instant,
}

impl TimerHandle {
    /// Cancels the timer. Returns `true` only if this call prevented a run: the callback
    /// had not started (for a repeating task: no further run will start). O(1); the
    /// closure is dropped before this returns and the wheel entry is unlinked by the driver
    /// shortly after, not at the deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::{TaskState, Timer};
    ///
    /// let timer = Timer::new();
    /// let handle = timer.schedule(Duration::from_secs(60), || unreachable!())?;
    /// assert!(handle.cancel());
    /// assert!(!handle.cancel(), "a second cancel prevents nothing");
    /// assert_eq!(handle.state(), TaskState::Cancelled);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(&self) -> bool {
        let core = self.job.core();
        let repeating = self.job.next_tick().is_some();
        // Retry while a repeating task flips between RUNNING and WAITING under us: trying
        // each transition once could miss both (found by `cancel_vs_repeating_reinsert`).
        let won = loop {
            let from = match core.state.load(Ordering::SeqCst) {
                WAITING => WAITING,
                RUNNING if repeating => RUNNING,
                _ => break false,
            };
            if core.transition(from, CANCELLED) {
                break true;
            }
        };
        if won {
            // Drop the closure now (a running repeating task drops it when its run ends).
            self.job.discard();
            self.inner.cancelled(core, true);
        }
        won
    }

    /// The callback's state now.
    #[must_use]
    pub fn state(&self) -> TaskState {
        match self.job.core().state.load(Ordering::SeqCst) {
            WAITING => TaskState::Waiting,
            RUNNING => TaskState::Running,
            CANCELLED => TaskState::Cancelled,
            _ => TaskState::Done,
        }
    }

    /// When the callback is (or was) due; for a repeating task, its next run.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        match self.job.next_tick() {
            Some(tick) => self.inner.instant_of(tick),
            None => self.deadline,
        }
    }
}

impl fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerHandle")
            .field("state", &self.state())
            .field("deadline", &self.deadline())
            .finish()
    }
}

/// A callback that never ran, handed back by [`Timer::stop`](crate::Timer::stop) so the
/// caller can run it, persist it, or drop it.
pub struct PendingTask {
    deadline: Instant,
    kind: PendingKind,
}

enum PendingKind {
    Once(Box<dyn FnOnce() + Send>),
    Repeating {
        f: Box<dyn FnMut() + Send>,
        period: Duration,
    },
}

impl PendingTask {
    /// When it was due (for a repeating task: its next run).
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The period of a repeating task; `None` for a one-shot callback.
    #[must_use]
    pub fn period(&self) -> Option<Duration> {
        match &self.kind {
            PendingKind::Once(_) => None,
            PendingKind::Repeating { period, .. } => Some(*period),
        }
    }

    /// Runs the callback once, on the calling thread.
    pub fn run(self) {
        match self.kind {
            PendingKind::Once(f) => f(),
            PendingKind::Repeating { mut f, .. } => f(),
        }
    }
}

impl fmt::Debug for PendingTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTask")
            .field("deadline", &self.deadline)
            .field("period", &self.period())
            .finish_non_exhaustive()
    }
}
