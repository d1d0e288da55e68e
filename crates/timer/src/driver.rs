//! The driver: one thread that fires due timers from a wheel that producers update directly.
//!
//! # Ground rules
//!
//! - The [`Wheel`] sits in `Inner::core`, one mutex. Producers take it for a few dozen
//!   nanoseconds: `schedule` inserts, `cancel` and a dropped future remove their own entry
//!   (by the key stored in the task), a first `Sleep` poll inserts. The driver takes it to
//!   move due timers into a buffer and to read its next deadline. Callbacks, wakers and
//!   closures are never run or dropped under the lock.
//!
//!   This replaced a lock-free command queue (Netty's design) that cost more than it saved:
//!   every pair of schedule and cancel crossed to the driver thread twice (insert, then a
//!   deferred unlink), the driver freed what producers allocated (glibc's slow cross-thread
//!   path), and each unlink of a near timer re-armed the driver's wake-up for the next one.
//!   Now a cancel frees its wheel entry and closure at once on the cancelling thread, and
//!   the driver only hears about timers earlier than the one it sleeps towards.
//! - **Waking.** `DriverCore::sleep_until` is the tick the driver sleeps towards, `AWAKE` (0)
//!   while it works. A producer that inserts an earlier tick lowers it under the lock and
//!   unparks the driver after unlocking. The driver sets it under the same lock from the
//!   wheel's next deadline before parking, so either it sees the new timer or the producer
//!   sees its target; `unpark` before `park` makes `park` return, so no wake-up is lost.
//! - **Cancel vs fire.** The task's state byte decides (see `task.rs`); removing the entry
//!   is only about memory. An insert re-reads the state after linking, under the lock, so a
//!   task cancelled while being (re-)inserted never stays linked.
//! - **Stop.** `collect_after_stop` sets `closed` under the lock and drains the wheel; an
//!   insert that finds `closed` hands the task back to its caller. So each task is either
//!   refused, or in the wheel when it is drained, exactly once.

use std::sync::OnceLock;
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tickwheel_core::{TimerKey, Wheel};

use crate::clock::{Clock, TickSource};
use crate::metrics::Counters;
use crate::sync::{Arc, AtomicU8, AtomicUsize, Mutex, Ordering};
use crate::task::{Job, PendingTask, Tally, TaskCore, NO_KEY, WAITING};

/// `sleep_until` while the driver is awake: no producer needs to wake it.
const AWAKE: u64 = 0;

pub(crate) const RUN: u8 = 0;
pub(crate) const SHUTTING_DOWN: u8 = 1;
pub(crate) const STOPPED: u8 = 2;

/// What `Inner::insert` links, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    /// A new callback: takes a pending slot (or is refused at `max_pending`).
    Callback,
    /// A `Sleep` being armed: counted as scheduled, no pending slot.
    Async,
    /// A repeating task's next run: already counted.
    Again,
}

/// What `Inner::insert` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inserted {
    Linked,
    Closed,
    Full,
}

/// What `Job::fire` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// A callback must run now.
    Run,
    /// An async timer woke its task.
    Woke,
    /// Cancelled meanwhile; nothing to do.
    Nothing,
}

pub(crate) struct DriverCore {
    wheel: Wheel<Arc<dyn Job>>,
    due: Vec<(Arc<dyn Job>, u64)>,
    /// The tick the driver sleeps towards; `AWAKE` while it works.
    sleep_until: u64,
    /// Set once `stop` has drained the wheel: inserts are refused from then on.
    closed: bool,
    swept_repeating: bool,
    /// `Metrics::scheduled` and the handle/future part of `Metrics::cancelled`, counted
    /// under the lock those operations take anyway instead of on shared atomics.
    scheduled: u64,
    cancelled: u64,
    /// Pending slots taken by callbacks, minus those released under this lock (cancels).
    /// `pending = reserved - finished`: reserving under the lock a producer takes anyway
    /// saves two shared atomic RMWs per schedule + cancel pair.
    reserved: usize,
}

/// A batch of due callbacks for one worker; `None` dismisses the worker.
type WorkItem = Option<Vec<(Arc<dyn Job>, u64)>>;

/// Due callbacks are handed to workers in batches of at most this many: one channel
/// operation (and at most one worker wake-up) per batch instead of per callback, which
/// matters in bursts (1M timers due within a second), while a batch still takes only
/// microseconds to start.
const BATCH: usize = 64;

/// Everything a timer's threads, handles and futures share.
pub(crate) struct Inner {
    driver_thread: OnceLock<Thread>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ticks: TickSource,
    pub(crate) resolution: Duration,
    /// Pending slots released without the wheel lock (runs, `stop`); see `reserved`.
    finished: AtomicUsize,
    pub(crate) max_pending: usize,
    run_state: AtomicU8,
    pub(crate) counters: Counters,
    core: Mutex<DriverCore>,
    workers: Option<(Sender<WorkItem>, Receiver<WorkItem>)>,
    pub(crate) worker_count: usize,
    idle: (std::sync::Mutex<()>, std::sync::Condvar),
}

impl Inner {
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        resolution: Duration,
        max_pending: usize,
        worker_count: usize,
    ) -> Self {
        let origin = clock.now();
        let ticks = TickSource::new(origin, resolution);
        Inner {
            driver_thread: OnceLock::new(),
            clock,
            ticks,
            resolution,
            finished: AtomicUsize::new(0),
            max_pending,
            run_state: AtomicU8::new(RUN),
            counters: Counters::new(),
            core: Mutex::new(DriverCore {
                wheel: Wheel::starting_at(0),
                due: Vec::new(),
                sleep_until: AWAKE,
                closed: false,
                swept_repeating: false,
                scheduled: 0,
                cancelled: 0,
                reserved: 0,
            }),
            workers: (worker_count > 0).then(crossbeam_channel::unbounded),
            worker_count,
            idle: (std::sync::Mutex::new(()), std::sync::Condvar::new()),
        }
    }

    pub(crate) fn set_driver_thread(&self, thread: Thread) {
        let _ = self.driver_thread.set(thread);
    }

    pub(crate) fn worker_receiver(&self) -> Option<Receiver<WorkItem>> {
        self.workers.as_ref().map(|(_, rx)| rx.clone())
    }

    pub(crate) fn now_tick(&self) -> u64 {
        self.ticks.tick_floor(self.clock.now())
    }

    /// The instant of a tick, saturating far beyond any real deadline.
    pub(crate) fn instant_of(&self, tick: u64) -> Instant {
        self.ticks.instant_of(tick).unwrap_or_else(far_future)
    }

    pub(crate) fn run_state(&self) -> u8 {
        self.run_state.load(Ordering::SeqCst)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.run_state() != RUN
    }

    pub(crate) fn pending(&self) -> usize {
        let reserved = self.core.lock().reserved;
        reserved.saturating_sub(self.finished.load(Ordering::SeqCst))
    }

    /// A callback ran, or was cancelled or taken back: release its pending slot.
    pub(crate) fn task_finished(&self) {
        self.tasks_finished(1);
    }

    /// Applies what a batch of runs counted.
    pub(crate) fn settle(&self, tally: &Tally) {
        if tally.fired > 0 {
            self.counters
                .fired
                .fetch_add(tally.fired, Ordering::Relaxed);
        }
        if tally.finished > 0 {
            self.tasks_finished(tally.finished);
        }
    }

    fn tasks_finished(&self, n: usize) {
        self.finished.fetch_add(n, Ordering::SeqCst);
        self.notify_if_idle();
    }

    /// Wakes a graceful `shutdown` waiting for the last pending callback.
    fn notify_if_idle(&self) {
        if self.is_shutting_down() && self.pending() == 0 {
            let _guard = self
                .idle
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.idle.1.notify_all();
        }
    }

    /// Blocks until no callback is pending (graceful shutdown).
    pub(crate) fn wait_idle(&self) {
        let mut guard = self
            .idle
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while self.pending() > 0 {
            // The timeout only covers a notify racing with the check above.
            guard = match self.idle.1.wait_timeout(guard, Duration::from_millis(10)) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Links a timer into the wheel at `tick`, waking the driver if it sleeps towards a
    /// later tick. Anything but `Linked` means nothing was linked and the task is still the
    /// caller's: `Closed` once `stop` has drained the wheel, `Full` at `max_pending`.
    pub(crate) fn insert(&self, job: Arc<dyn Job>, tick: u64, kind: Insert) -> Inserted {
        let mut dropped = None;
        let wake = {
            let mut core = self.core.lock();
            if core.closed {
                return Inserted::Closed;
            }
            match kind {
                Insert::Callback => {
                    let finished = self.finished.load(Ordering::Relaxed);
                    if core.reserved.saturating_sub(finished) >= self.max_pending {
                        return Inserted::Full;
                    }
                    core.reserved += 1;
                    core.scheduled += 1;
                }
                Insert::Async => core.scheduled += 1,
                Insert::Again => {}
            }
            let key = core.wheel.insert(tick, job);
            let Some(job) = core.wheel.get(key) else {
                return Inserted::Linked;
            };
            job.core().key.store(key.to_u64(), Ordering::Relaxed);
            // Cancelled while being inserted (a repeating task between runs): unlink now.
            // The canceller's state CAS precedes its locked removal; see the ground rules.
            if job.core().state.load(Ordering::SeqCst) != WAITING {
                dropped = core.wheel.remove(key);
                false
            } else if self.run_state() == SHUTTING_DOWN && job.cancel_repeating() {
                dropped = core.wheel.remove(key);
                core.cancelled += 1;
                core.reserved -= 1;
                false
            } else if tick < core.sleep_until {
                core.sleep_until = tick;
                true
            } else {
                false
            }
        };
        drop(dropped);
        if wake {
            self.unpark_driver();
        }
        Inserted::Linked
    }

    /// After a won cancel: count it, release its pending slot if it is a callback
    /// (`release`), and unlink the wheel entry (freed at once, outside the lock).
    pub(crate) fn cancelled(&self, core: &TaskCore, release: bool) {
        let removed = {
            let mut driver = self.core.lock();
            driver.cancelled += 1;
            driver.reserved -= usize::from(release);
            let key = core.key.load(Ordering::Relaxed);
            if key == NO_KEY {
                None
            } else {
                driver.wheel.remove(TimerKey::from_u64(key))
            }
        };
        drop(removed);
        if release {
            self.notify_if_idle();
        }
    }

    /// A snapshot of the metrics: the shared counters plus those kept under the lock.
    pub(crate) fn metrics(&self) -> crate::metrics::Metrics {
        let (scheduled, cancelled) = {
            let core = self.core.lock();
            (core.scheduled, core.cancelled)
        };
        let mut m = self.counters.snapshot();
        m.scheduled += scheduled;
        m.cancelled += cancelled;
        m
    }

    pub(crate) fn unpark_driver(&self) {
        if let Some(thread) = self.driver_thread.get() {
            thread.unpark();
        }
    }

    /// Cancels every repeating task once a graceful shutdown has begun.
    fn sweep_repeating(&self, core: &mut DriverCore) -> Vec<Arc<dyn Job>> {
        core.swept_repeating = true;
        let repeating: Vec<TimerKey> = core
            .wheel
            .iter()
            .filter(|(_, _, job)| job.cancel_repeating())
            .map(|(key, _, _)| key)
            .collect();
        let mut removed = Vec::with_capacity(repeating.len());
        for key in repeating {
            removed.extend(core.wheel.remove(key));
            core.cancelled += 1;
            core.reserved -= 1;
        }
        removed
    }

    /// One round: fire what is due, then arm the wake-up. Returns the next deadline tick.
    pub(crate) fn turn(self: &Arc<Self>) -> Option<u64> {
        let (mut due, swept) = {
            let mut core = self.core.lock();
            core.sleep_until = AWAKE;
            // Only a graceful shutdown cancels repeating tasks; after `stop` they are returned.
            let swept = if self.run_state() == SHUTTING_DOWN && !core.swept_repeating {
                self.sweep_repeating(&mut core)
            } else {
                Vec::new()
            };
            let now = self.now_tick();
            let mut due = std::mem::take(&mut core.due);
            while let Some((_, job)) = core.wheel.poll(now) {
                let tick = core.wheel.now();
                due.push((job, tick));
            }
            (due, swept)
        };
        drop(swept);
        if !due.is_empty() {
            let now = self.clock.now();
            let mut batch = Vec::new();
            let mut tally = Tally::default();
            for (job, tick) in due.drain(..) {
                let late = now.saturating_duration_since(self.instant_of(tick));
                match job.fire(self, tick) {
                    Fired::Nothing => continue,
                    Fired::Woke => {}
                    Fired::Run => match &self.workers {
                        Some((tx, _)) => {
                            if batch.capacity() == 0 {
                                batch.reserve_exact(BATCH);
                            }
                            batch.push((job, tick));
                            if batch.len() == BATCH {
                                let _ = tx.send(Some(std::mem::take(&mut batch)));
                            }
                        }
                        None => job.run(self, &mut tally),
                    },
                }
                self.counters.record_lateness(late);
            }
            if let (false, Some((tx, _))) = (batch.is_empty(), &self.workers) {
                let _ = tx.send(Some(batch));
            }
            self.settle(&tally);
        }
        let mut core = self.core.lock();
        if core.due.capacity() < due.capacity() {
            core.due = due;
        }
        let next = core.wheel.next_deadline();
        core.sleep_until = next.unwrap_or(u64::MAX).max(1);
        next
    }

    /// The driver thread's loop.
    pub(crate) fn run_driver(self: &Arc<Self>) {
        loop {
            let next = self.turn();
            if self.run_state() == STOPPED {
                return;
            }
            if next.is_some_and(|t| t <= self.now_tick()) {
                continue;
            }
            self.clock
                .park_until(next.map(|tick| self.instant_of(tick)));
        }
    }

    /// Moves the service to `SHUTTING_DOWN`; `false` if it already was shutting down or stopped.
    pub(crate) fn begin_shutdown(&self) -> bool {
        let won = self
            .run_state
            .compare_exchange(RUN, SHUTTING_DOWN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        self.unpark_driver();
        won
    }

    /// Marks the service stopped; returns `false` if it already was.
    pub(crate) fn mark_stopped(&self) -> bool {
        let was = self.run_state.swap(STOPPED, Ordering::SeqCst);
        self.unpark_driver();
        was != STOPPED
    }

    /// After the driver has exited: take back every callback that never ran, tell async
    /// timers, and dismiss the workers (they finish the callback they are running).
    pub(crate) fn collect_after_stop(&self) -> Vec<PendingTask> {
        let mut out = Vec::new();
        let drained: Vec<(u64, Arc<dyn Job>)> = {
            let mut core = self.core.lock();
            core.closed = true;
            core.wheel
                .drain()
                .map(|(_, tick, job)| (tick, job))
                .collect()
        };
        for (tick, job) in drained {
            match job.take_pending(self, tick) {
                Some(task) => {
                    Counters::bump(&self.counters.cancelled);
                    out.push(task);
                }
                None => job.shut_down(),
            }
        }
        if let Some((tx, rx)) = &self.workers {
            while let Ok(item) = rx.try_recv() {
                for (job, tick) in item.into_iter().flatten() {
                    if let Some(task) = job.take_pending(self, tick) {
                        Counters::bump(&self.counters.cancelled);
                        out.push(task);
                    }
                }
            }
            for _ in 0..self.worker_count {
                let _ = tx.send(None);
            }
        }
        out.sort_by_key(PendingTask::deadline);
        out
    }
}

/// A worker thread's loop: run batches of callbacks until told to stop.
///
/// A slow callback must not hold up the rest of its batch: before each callback, if more
/// are left and no other batch is waiting (so another worker may be idle), the rest goes
/// back to the channel for whoever is free. In a burst the channel is never empty and
/// batches stay whole; under light load this degrades to one hand-off per callback.
///
/// After the dismissal (`None`), batches still queued (a remainder handed back while
/// `stop` was collecting) are run here rather than lost; `stop` joins the workers, so they
/// still start before it returns.
pub(crate) fn run_worker(inner: &Arc<Inner>, rx: &Receiver<WorkItem>) {
    let tx = inner.workers.as_ref().map(|(tx, _)| tx);
    let share = inner.worker_count > 1;
    let run = |mut batch: Vec<(Arc<dyn Job>, u64)>| {
        let mut tally = Tally::default();
        batch.reverse();
        while let Some((job, _tick)) = batch.pop() {
            if share && !batch.is_empty() && rx.is_empty() {
                if let Some(tx) = tx {
                    let mut rest = std::mem::take(&mut batch);
                    rest.reverse();
                    let _ = tx.send(Some(rest));
                }
            }
            job.run(inner, &mut tally);
        }
        inner.settle(&tally);
    };
    while let Ok(Some(batch)) = rx.recv() {
        run(batch);
    }
    while let Ok(item) = rx.try_recv() {
        match item {
            Some(batch) => run(batch),
            None => {
                // Another worker's dismissal: hand it back, or that worker never exits.
                if let Some(tx) = tx {
                    let _ = tx.send(None);
                }
                break;
            }
        }
    }
}

/// Joins threads, skipping the calling one (a callback may drop the last `Timer`).
pub(crate) fn join_all(threads: Vec<JoinHandle<()>>) {
    let me = thread::current().id();
    for handle in threads {
        if handle.thread().id() != me {
            let _ = handle.join();
        }
    }
}

/// An instant about 30 years from now: "never" for deadlines beyond `Instant`'s range.
pub(crate) fn far_future() -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_secs(86_400 * 365 * 30))
        .unwrap_or(now)
}
