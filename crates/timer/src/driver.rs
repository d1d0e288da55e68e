//! The driver: one thread that alone owns the wheel, fed by a lock-free command queue.
//!
//! # Ground rules
//!
//! - Only the driver touches the [`Wheel`]: it sits in `Inner::core`, a mutex that the driver
//!   takes once per turn (uncontended) and that `stop` takes after the driver has exited.
//!   Producers never lock it: `schedule`, `cancel`, a first `Sleep` poll and a dropped
//!   future only push a [`Command`] onto a lock-free MPSC queue.
//! - **Waking.** While the driver works, `sleep_until` is `AWAKE` (0); before parking it
//!   stores the tick it sleeps towards, issues a `SeqCst` fence and looks at the queue once
//!   more. A producer pushes, fences, then reads `sleep_until`, and unparks the driver only if
//!   its deadline is earlier (`fetch_min` makes that once per new minimum). One of the two
//!   always sees the other, so no wake-up is lost, and a producer whose deadline is later
//!   than the driver's next one costs the driver nothing.
//! - **Cancels** free the closure at once on the cancelling thread. The wheel entry (a
//!   pointer) is unlinked when the driver next drains the queue; a sleeping driver is woken
//!   for that only every [`CANCEL_FLUSH`] cancels, so memory stays bounded without a wake-up
//!   per cancel.
//! - Callbacks never run under a lock: due timers are moved out of the wheel into a buffer,
//!   the lock is released, then they are handed to the workers (or run inline).

use std::sync::OnceLock;
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tickwheel_core::{TimerKey, Wheel};

use crate::clock::{Clock, TickSource};
use crate::metrics::Counters;
use crate::sync::{fence, Arc, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering, Queue};
use crate::task::{Job, PendingTask, TaskCore, NO_KEY, WAITING};

/// `sleep_until` while the driver is awake: no producer needs to wake it.
const AWAKE: u64 = 0;
/// Wake a sleeping driver after this many cancels so their wheel entries get freed.
pub(crate) const CANCEL_FLUSH: usize = 4096;

pub(crate) const RUN: u8 = 0;
pub(crate) const SHUTTING_DOWN: u8 = 1;
pub(crate) const STOPPED: u8 = 2;

pub(crate) enum Command {
    Insert(Arc<dyn Job>, u64),
    Cancel(u64),
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
    swept_repeating: bool,
}

type WorkItem = Option<(Arc<dyn Job>, u64)>;

/// Everything a timer's threads, handles and futures share.
pub(crate) struct Inner {
    commands: Queue<Command>,
    unflushed_cancels: AtomicUsize,
    sleep_until: AtomicU64,
    driver_thread: OnceLock<Thread>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ticks: TickSource,
    pub(crate) resolution: Duration,
    pending: AtomicUsize,
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
            commands: Queue::new(),
            unflushed_cancels: AtomicUsize::new(0),
            sleep_until: AtomicU64::new(AWAKE),
            driver_thread: OnceLock::new(),
            clock,
            ticks,
            resolution,
            pending: AtomicUsize::new(0),
            max_pending,
            run_state: AtomicU8::new(RUN),
            counters: Counters::new(),
            core: Mutex::new(DriverCore {
                wheel: Wheel::starting_at(0),
                due: Vec::new(),
                swept_repeating: false,
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
        self.pending.load(Ordering::SeqCst)
    }

    /// Reserves a pending slot; `false` if `max_pending` is reached.
    pub(crate) fn try_reserve(&self) -> bool {
        let prev = self.pending.fetch_add(1, Ordering::Relaxed);
        if prev >= self.max_pending {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// A callback ran, or was cancelled or taken back: release its pending slot.
    pub(crate) fn task_finished(&self) {
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1 && self.is_shutting_down() {
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

    /// Hands a timer to the driver.
    pub(crate) fn submit(&self, job: Arc<dyn Job>, tick: u64) {
        self.commands.push(Command::Insert(job, tick));
        fence(Ordering::SeqCst);
        if tick < self.sleep_until.load(Ordering::Relaxed) {
            let prev = self.sleep_until.fetch_min(tick, Ordering::SeqCst);
            if tick < prev {
                self.unpark_driver();
            }
        }
    }

    /// After a won cancel: count it and ask the driver to unlink the wheel entry.
    pub(crate) fn cancelled(&self, core: &TaskCore) {
        Counters::bump(&self.counters.cancelled);
        let key = core.key.load(Ordering::SeqCst);
        if key == NO_KEY {
            return; // not inserted yet: the driver sees the state and skips it
        }
        self.commands.push(Command::Cancel(key));
        if self.unflushed_cancels.fetch_add(1, Ordering::Relaxed) + 1 == CANCEL_FLUSH {
            fence(Ordering::SeqCst);
            if self.sleep_until.load(Ordering::Relaxed) != AWAKE {
                self.unpark_driver();
            }
        }
    }

    pub(crate) fn unpark_driver(&self) {
        if let Some(thread) = self.driver_thread.get() {
            thread.unpark();
        }
    }

    fn drain_commands(&self, core: &mut DriverCore) {
        self.unflushed_cancels.store(0, Ordering::Relaxed);
        let sweep = self.is_shutting_down();
        while let Some(command) = self.commands.pop() {
            match command {
                Command::Insert(job, tick) => {
                    let key = core.wheel.insert(tick, job);
                    let Some(job) = core.wheel.get(key) else {
                        continue;
                    };
                    job.core().key.store(key.to_u64(), Ordering::SeqCst);
                    // Pairs with the canceller's state-then-key (see task.rs ground rules).
                    if job.core().state.load(Ordering::SeqCst) != WAITING {
                        core.wheel.remove(key);
                    } else if sweep && job.cancel_repeating() {
                        core.wheel.remove(key);
                        Counters::bump(&self.counters.cancelled);
                        self.task_finished();
                    }
                }
                Command::Cancel(key) => {
                    core.wheel.remove(TimerKey::from_u64(key));
                }
            }
        }
        if sweep && !core.swept_repeating {
            core.swept_repeating = true;
            let repeating: Vec<TimerKey> = core
                .wheel
                .iter()
                .filter(|(_, _, job)| job.cancel_repeating())
                .map(|(key, _, _)| key)
                .collect();
            for key in repeating {
                core.wheel.remove(key);
                Counters::bump(&self.counters.cancelled);
                self.task_finished();
            }
        }
    }

    /// One round: apply queued commands, fire what is due. Returns the next deadline tick.
    pub(crate) fn turn(self: &Arc<Self>) -> Option<u64> {
        let (mut due, next) = {
            let mut core = self.core.lock();
            self.drain_commands(&mut core);
            let now = self.now_tick();
            let mut due = std::mem::take(&mut core.due);
            while let Some(deadline) = core.wheel.next_deadline().filter(|&d| d <= now) {
                match core.wheel.poll(now) {
                    Some((_, job)) => due.push((job, deadline)),
                    None => break,
                }
            }
            (due, core.wheel.next_deadline())
        };
        if !due.is_empty() {
            let now = self.clock.now();
            for (job, tick) in due.drain(..) {
                match job.fire(self, tick) {
                    Fired::Nothing => continue,
                    Fired::Woke => {}
                    Fired::Run => match &self.workers {
                        Some((tx, _)) => {
                            let _ = tx.send(Some((job, tick)));
                        }
                        None => job.run(self),
                    },
                }
                let late = now.saturating_duration_since(self.instant_of(tick));
                self.counters.record_lateness(late);
            }
            let mut core = self.core.lock();
            if core.due.capacity() < due.capacity() {
                core.due = due;
            }
        }
        next
    }

    /// The driver thread's loop.
    pub(crate) fn run_driver(self: &Arc<Self>) {
        loop {
            self.sleep_until.store(AWAKE, Ordering::SeqCst);
            let next = self.turn();
            if self.run_state() == STOPPED {
                return;
            }
            self.sleep_until
                .store(next.unwrap_or(u64::MAX), Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if !self.commands.is_empty() || self.run_state() == STOPPED {
                continue;
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
        let mut core = self.core.lock();
        while let Some(command) = self.commands.pop() {
            if let Command::Insert(job, tick) = command {
                core.wheel.insert(tick, job);
            }
        }
        for (_, tick, job) in core.wheel.drain() {
            match job.take_pending(self, tick) {
                Some(task) => {
                    Counters::bump(&self.counters.cancelled);
                    out.push(task);
                }
                None => job.shut_down(),
            }
        }
        drop(core);
        if let Some((tx, rx)) = &self.workers {
            while let Ok(item) = rx.try_recv() {
                if let Some((job, tick)) = item {
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

/// A worker thread's loop: run callbacks until told to stop.
pub(crate) fn run_worker(inner: &Arc<Inner>, rx: &Receiver<WorkItem>) {
    while let Ok(Some((job, _tick))) = rx.recv() {
        job.run(inner);
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
