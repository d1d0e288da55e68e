//! The [`Timer`] service: schedule callbacks from any thread, cancel them cheaply.

use std::future::Future;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::builder::Builder;
use crate::driver::{join_all, Inner};
use crate::error::ScheduleError;
use crate::interval::{Interval, MissedTickBehavior};
use crate::metrics::{Counters, Metrics};
use crate::payload::Prepared;
use crate::shard::{Shard, CANCELLED, CANCELLING, DONE, RUNNING, WAITING};
use crate::sleep::Sleep;
use crate::sync::{Arc, Mutex};
use crate::task::{PendingTask, Repeat, TaskState, TimerHandle};
use crate::timeout::Timeout;

/// A timer service: a driver thread that owns a hierarchical timing wheel, plus a pool of
/// worker threads that run the callbacks.
///
/// Cloning is cheap and gives another handle to the same service. Dropping the last clone
/// stops the service (like [`stop`](Self::stop), discarding what never ran) and joins its
/// threads. A callback that holds a clone of its own `Timer` keeps the service alive until
/// it has run.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use tickwheel::Timer;
///
/// let timer = Timer::new();
/// let (tx, rx) = mpsc::channel();
/// timer.schedule(Duration::from_millis(5), move || tx.send("fired").unwrap())?;
/// assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("fired"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Timer {
    pub(crate) owner: Arc<Owner>,
}

pub(crate) struct Owner {
    pub(crate) inner: Arc<Inner>,
    /// The driver thread (none for a manual driver), then the workers.
    pub(crate) threads: Threads,
}

impl Drop for Owner {
    fn drop(&mut self) {
        drop(stop_inner(&self.inner, &self.threads));
    }
}

pub(crate) type Threads = Mutex<(Option<JoinHandle<()>>, Vec<JoinHandle<()>>)>;

fn stop_inner(inner: &Inner, threads: &Threads) -> Vec<PendingTask> {
    if !inner.mark_stopped() {
        return Vec::new();
    }
    let (driver, workers) = std::mem::take(&mut *threads.lock());
    // The driver must have exited before we drain the shards; the workers after, so that
    // callbacks dispatched but not started are returned rather than run, and repeating
    // runs in flight are returned once they end.
    join_all(driver.into_iter().collect());
    let mut pending = inner.collect_after_stop();
    join_all(workers);
    pending.extend(inner.take_returned());
    pending.sort_by_key(PendingTask::deadline);
    pending
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("resolution", &self.inner().resolution)
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

impl Default for Timer {
    fn default() -> Self {
        Timer::new()
    }
}

impl Timer {
    /// A timer with the default configuration (1 ms ticks, one worker per CPU).
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread; use [`Timer::builder`] to get
    /// that as an error.
    #[must_use]
    pub fn new() -> Timer {
        match Builder::default().build() {
            Ok(timer) => timer,
            Err(e) => panic!("tickwheel: cannot start the timer: {e}"),
        }
    }

    /// Configure a timer.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.owner.inner
    }

    /// The current time by this timer's clock.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.inner().now()
    }

    /// The tick resolution.
    #[must_use]
    pub fn resolution(&self) -> Duration {
        self.inner().resolution
    }

    /// Runs `f` once, `delay` from now (by the timer's clock), on a worker thread.
    ///
    /// `f` never starts before the deadline; it starts about one tick after it at most,
    /// plus OS wake-up latency, when workers are free. The delay may be anything,
    /// `Duration::MAX` included (that timer just never fires).
    ///
    /// Cost: one clock read (on x86-64 Linux usually a time-stamp counter read instead,
    /// see `BENCHMARKS.md`) and one short lock of the calling thread's shard. A closure
    /// whose captures fit in 16 bytes (nothing, a `u64`, an `Arc` and a `u64`, a channel
    /// sender…) is stored in the timer's wheel entry without allocating; a larger one is
    /// boxed (one allocation).
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Full`] when `max_pending` callbacks already wait,
    /// [`ScheduleError::Shutdown`] after [`stop`](Self::stop) or [`shutdown`](Self::shutdown);
    /// both give `f` back.
    pub fn schedule<F>(&self, delay: Duration, f: F) -> Result<TimerHandle, ScheduleError<F>>
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.inner().tick_after(delay);
        self.schedule_tick(tick, f)
    }

    /// Runs `f` once at `at` (by the timer's clock); a past instant runs it at once.
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    pub fn schedule_at<F>(&self, at: Instant, f: F) -> Result<TimerHandle, ScheduleError<F>>
    where
        F: FnOnce() + Send + 'static,
    {
        let tick = self.inner().ticks.tick_ceil(at);
        self.schedule_tick(tick, f)
    }

    /// Runs `f` once at wheel tick `tick`.
    fn schedule_tick<F>(&self, tick: u64, f: F) -> Result<TimerHandle, ScheduleError<F>>
    where
        F: FnOnce() + Send + 'static,
    {
        self.submit(0, Prepared::new(f), |s, f| {
            s.schedule_once(f.into_payload(), tick)
        })
        .map_err(|e| e.map(Prepared::into_inner))
    }

    /// Runs `f` every `period`, the first time `initial_delay` from now, until cancelled.
    /// `behavior` says what happens after missed runs (a run never overlaps the previous one
    /// of the same task); [`MissedTickBehavior::Skip`] is the usual choice.
    ///
    /// A panicking run is caught and counted, and the task is not run again.
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    ///
    /// # Panics
    ///
    /// If `period` is zero.
    pub fn schedule_repeating<F>(
        &self,
        initial_delay: Duration,
        period: Duration,
        behavior: MissedTickBehavior,
        f: F,
    ) -> Result<TimerHandle, ScheduleError<F>>
    where
        F: FnMut() + Send + 'static,
    {
        assert!(
            !period.is_zero(),
            "tickwheel: a repeating task's period must be non-zero"
        );
        let inner = self.inner();
        let tick = inner.tick_after(initial_delay);
        let period_ticks = u64::try_from(
            period
                .as_nanos()
                .div_ceil(inner.resolution.as_nanos().max(1)),
        )
        .unwrap_or(u64::MAX)
        .max(1);
        self.submit(TimerHandle::REPEATING, f, move |s, f| {
            let task = Box::new(Repeat {
                f: Box::new(f),
                period,
                period_ticks,
                behavior,
                due: tick,
            });
            s.schedule_repeat(task, tick)
        })
    }

    /// Links a new callback into the calling thread's shard, or refuses it (shutting down,
    /// stopped, or `max_pending`) and gives `payload` back.
    /// `link` returns `(slot, generation, wake the driver)`; `flag` is or-ed into the
    /// handle's shard field.
    fn submit<P>(
        &self,
        flag: u32,
        payload: P,
        link: impl FnOnce(&mut Shard, P) -> (u32, u32, bool),
    ) -> Result<TimerHandle, ScheduleError<P>> {
        let inner = self.inner();
        let refused = if inner.is_shutting_down() {
            ScheduleError::Shutdown(payload)
        } else {
            let i = inner.pick_shard();
            let linked = inner.with_shard(i, |s| {
                if s.closed {
                    return Err(ScheduleError::Shutdown(payload));
                }
                if inner.is_full(i, s.pending) {
                    return Err(ScheduleError::Full(payload));
                }
                Ok(link(s, payload))
            });
            match linked {
                Ok((slot, gen, wake)) => {
                    if wake {
                        inner.unpark_driver();
                    }
                    return Ok(TimerHandle {
                        shard: i as u32 | flag,
                        slot,
                        gen,
                    });
                }
                Err(refused) => refused,
            }
        };
        Counters::bump(&inner.counters.rejected);
        Err(refused)
    }

    /// Cancels a callback. Returns `true` only if this call prevented a run: the callback
    /// had not fired yet (for a repeating task: no further run will start, though a run in
    /// progress finishes). O(1); the closure is dropped and the timer's memory freed before
    /// this returns, not at the deadline. A stale handle (finished timer, reused slot,
    /// another timer's handle) returns `false` and touches nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::{TaskState, Timer};
    ///
    /// let timer = Timer::new();
    /// let handle = timer.schedule(Duration::from_secs(60), || unreachable!())?;
    /// assert!(timer.cancel(handle));
    /// assert!(!timer.cancel(handle), "a second cancel prevents nothing");
    /// assert_eq!(timer.state(handle), TaskState::Cancelled);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(&self, handle: TimerHandle) -> bool {
        let inner = self.inner();
        let i = handle.shard_index();
        if i >= inner.shard_count() {
            return false;
        }
        let prevented = if handle.is_repeating() {
            let task = inner.with_shard(i, |s| s.cancel(handle.slot, handle.gen));
            task.map(drop).is_some() // dropped outside the lock
        } else {
            let f = inner.with_shard(i, |s| s.cancel_once(handle.slot, handle.gen));
            f.map(drop).is_some()
        };
        if prevented {
            inner.released();
        }
        prevented
    }

    /// The state of a callback now; [`TaskState::Unknown`] once its slot has been reused
    /// (see there), or for another timer's handle.
    #[must_use]
    pub fn state(&self, handle: TimerHandle) -> TaskState {
        let inner = self.inner();
        let i = handle.shard_index();
        if i >= inner.shard_count() {
            return TaskState::Unknown;
        }
        let state = inner.with_shard(i, |s| {
            if handle.is_repeating() {
                s.state(handle.slot, handle.gen)
            } else {
                s.state_once(handle.slot, handle.gen)
            }
        });
        match state {
            Some(WAITING) => TaskState::Waiting,
            Some(RUNNING) => TaskState::Running,
            Some(DONE) => TaskState::Done,
            Some(CANCELLED | CANCELLING) => TaskState::Cancelled,
            _ => TaskState::Unknown,
        }
    }

    /// When a waiting callback is due (rounded up to the tick); for a repeating task, its
    /// next run. `None` once it is running, finished or unknown.
    #[must_use]
    pub fn deadline(&self, handle: TimerHandle) -> Option<Instant> {
        let inner = self.inner();
        let i = handle.shard_index();
        if i >= inner.shard_count() {
            return None;
        }
        inner
            .with_shard(i, |s| {
                if handle.is_repeating() {
                    s.deadline(handle.slot, handle.gen)
                } else {
                    s.deadline_once(handle.slot, handle.gen)
                }
            })
            .map(|tick| inner.instant_of(tick))
    }

    /// Callbacks scheduled and not yet run or cancelled (repeating tasks count until
    /// cancelled).
    #[must_use]
    pub fn pending(&self) -> usize {
        self.inner().pending()
    }

    /// A snapshot of the counters and the lateness histogram.
    #[must_use]
    pub fn metrics(&self) -> Metrics {
        self.inner().metrics()
    }

    /// Stops the service now: no callback starts after this returns, running ones are
    /// waited for, and every callback that never ran is returned (sorted by deadline) so
    /// the caller can run, persist or drop it. Repeating tasks are returned too (with
    /// their next deadline and [`PendingTask::period`]); one whose run is in progress when
    /// `stop` is called is returned once that run ends (`stop` waits for it), unless `stop`
    /// is called from that very run, which then ends the task. A one-shot callback that had
    /// fired (was handed to a worker) but not started is returned too, though its handle
    /// already reports [`TaskState::Done`]. Pending async timers are woken and panic
    /// when polled (see [`Sleep`]). Later calls return an empty `Vec`; `schedule*` returns
    /// [`ScheduleError::Shutdown`] from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel::Timer;
    ///
    /// let timer = Timer::new();
    /// timer.schedule(Duration::from_secs(3600), || println!("in an hour"))?;
    /// let never_ran = timer.stop();
    /// assert_eq!(never_ran.len(), 1);
    /// never_ran.into_iter().for_each(|task| task.run()); // or persist them
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(&self) -> Vec<PendingTask> {
        stop_inner(&self.owner.inner, &self.owner.threads)
    }

    /// Graceful shutdown: refuses new tasks, cancels repeating ones, waits until every
    /// one-shot callback already scheduled has run (however far its deadline), then stops.
    /// Call [`stop`](Self::stop) instead to get pending tasks back without waiting.
    ///
    /// Must not be called from one of this timer's callbacks (it would wait for itself).
    pub fn shutdown(&self) {
        self.inner().begin_shutdown();
        self.inner().wait_idle();
        drop(self.stop());
    }

    /// Turns a driver built with `Builder::__manual_driver` once (loom and deterministic
    /// tests).
    #[doc(hidden)]
    pub fn __turn(&self) -> Option<u64> {
        self.inner().turn()
    }

    /// A worker's stand-in turn for a late driver (loom and deterministic tests).
    #[doc(hidden)]
    pub fn __worker_turn(&self) -> bool {
        self.inner().worker_turn()
    }

    /// A future that completes `duration` from now; see [`Sleep`].
    pub fn sleep(&self, duration: Duration) -> Sleep {
        if duration.is_zero() {
            return Sleep::new(Arc::clone(self.inner()), self.now(), true);
        }
        Sleep::after(Arc::clone(self.inner()), duration)
    }

    /// A future that completes at `deadline`; see [`Sleep`].
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::new(Arc::clone(self.inner()), deadline, true)
    }

    /// Runs `future` with a time limit; see [`Timeout`].
    pub fn timeout<F: Future>(&self, duration: Duration, future: F) -> Timeout<F> {
        Timeout::new(future, self.sleep(duration))
    }

    /// Runs `future` until `deadline`; see [`Timeout`].
    pub fn timeout_at<F: Future>(&self, deadline: Instant, future: F) -> Timeout<F> {
        Timeout::new(future, self.sleep_until(deadline))
    }

    /// Ticks every `period`, the first tick immediately, with [`MissedTickBehavior::Skip`].
    ///
    /// # Panics
    ///
    /// If `period` is zero.
    pub fn interval(&self, period: Duration) -> Interval {
        self.interval_at(self.now(), period)
    }

    /// Ticks every `period` from `start`, with [`MissedTickBehavior::Skip`].
    ///
    /// # Panics
    ///
    /// If `period` is zero.
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        Interval::new(self.sleep_until(start), period, MissedTickBehavior::Skip)
    }
}
