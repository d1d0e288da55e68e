//! Configuring and starting a [`Timer`].

use std::thread;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::driver::{join_all, run_worker, Inner};
use crate::error::BuildError;
use crate::sync::{Arc, Mutex};
use crate::timer::{Owner, Timer};

/// The default cap on pending callbacks (about 16.7 million): large enough for any
/// reasonable load, small enough that a runaway producer gets `ScheduleError::Full`
/// instead of exhausting memory (Netty's unbounded default is a classic OOM).
pub const DEFAULT_MAX_PENDING: usize = 1 << 24;

/// Configures a [`Timer`]: resolution, worker threads, backpressure, thread names, clock.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickwheel::Timer;
///
/// let timer = Timer::builder()
///     .resolution(Duration::from_micros(100))
///     .worker_threads(2)
///     .max_pending(100_000)
///     .thread_name("my-timer")
///     .build()?;
/// assert_eq!(timer.resolution(), Duration::from_micros(100));
/// # Ok::<(), tickwheel::BuildError>(())
/// ```
#[derive(Debug)]
pub struct Builder {
    resolution: Duration,
    workers: Option<usize>,
    max_pending: usize,
    thread_name: String,
    clock: Option<Arc<dyn Clock>>,
    shards: Option<usize>,
    manual: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            resolution: Duration::from_millis(1),
            workers: None,
            max_pending: DEFAULT_MAX_PENDING,
            thread_name: "tickwheel".to_owned(),
            clock: None,
            shards: None,
            manual: false,
        }
    }
}

impl Builder {
    /// The tick: deadlines round up to it, so a timer fires at most about one tick plus
    /// the OS wake-up latency after its deadline, and never before. Default 1 ms; 50 µs and
    /// below work (at the cost of more driver wake-ups for dense timers).
    #[must_use]
    pub fn resolution(mut self, tick: Duration) -> Self {
        self.resolution = tick;
        self
    }

    /// Threads that run callbacks. Default: the available parallelism. `0` runs callbacks
    /// inline on the driver thread: only for tiny, non-blocking callbacks, since a slow one
    /// then delays every other timer.
    #[must_use]
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// The most callbacks that may wait at once; `schedule*` beyond it returns
    /// [`ScheduleError::Full`](crate::ScheduleError::Full) with the task. Async timers are
    /// not counted. Default [`DEFAULT_MAX_PENDING`].
    #[must_use]
    pub fn max_pending(mut self, n: usize) -> Self {
        self.max_pending = n;
        self
    }

    /// Prefix of the thread names: `{name}-driver`, `{name}-worker-{i}`. Default `tickwheel`.
    #[must_use]
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }

    /// The clock deadlines are measured by. Default [`SystemClock`]; tests use
    /// [`ManualClock`](crate::ManualClock).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Number of shards: independent wheels, each with its own lock, that producer threads
    /// are spread over (a thread always uses the same one). Default: the available
    /// parallelism, so that producers on different cores do not contend; `1` keeps every
    /// timer in one wheel. Clamped to `1..=1024`.
    #[must_use]
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// No driver thread: the caller turns the driver with `Timer::__turn` (loom and
    /// deterministic tests only).
    #[doc(hidden)]
    #[must_use]
    pub fn __manual_driver(mut self) -> Self {
        self.manual = true;
        self
    }

    /// Starts the timer's threads.
    ///
    /// # Errors
    ///
    /// [`BuildError::ZeroResolution`] for a zero tick; [`BuildError::Spawn`] if a thread
    /// could not be started (threads already started are stopped again).
    pub fn build(self) -> Result<Timer, BuildError> {
        if self.resolution.is_zero() {
            return Err(BuildError::ZeroResolution);
        }
        let workers = self.workers.unwrap_or_else(|| {
            thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        let system_clock = self.clock.is_none();
        let clock = self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        let shards = self.shards.unwrap_or_else(|| {
            thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        let inner = Arc::new(Inner::new(
            clock,
            system_clock,
            self.resolution,
            self.max_pending,
            workers,
            shards,
        ));
        let mut threads = Vec::new();
        let driver = match self.spawn_threads(&inner, workers, &mut threads) {
            Ok(driver) => driver,
            Err(e) => {
                inner.mark_stopped();
                drop(inner.collect_after_stop());
                join_all(threads);
                return Err(BuildError::Spawn(e));
            }
        };
        Ok(Timer {
            owner: Arc::new(Owner {
                inner,
                threads: Mutex::new((driver, threads)),
            }),
        })
    }

    fn spawn_threads(
        &self,
        inner: &Arc<Inner>,
        workers: usize,
        threads: &mut Vec<thread::JoinHandle<()>>,
    ) -> std::io::Result<Option<thread::JoinHandle<()>>> {
        if let Some(rx) = inner.worker_receiver() {
            for i in 0..workers {
                let (inner, rx) = (Arc::clone(inner), rx.clone());
                threads.push(
                    thread::Builder::new()
                        .name(format!("{}-worker-{i}", self.thread_name))
                        .spawn(move || run_worker(&inner, &rx))?,
                );
            }
        }
        if !self.manual {
            let driver = Arc::clone(inner);
            let handle = thread::Builder::new()
                .name(format!("{}-driver", self.thread_name))
                .spawn(move || driver.run_driver())?;
            inner.set_driver_thread(handle.thread().clone());
            return Ok(Some(handle));
        }
        Ok(None)
    }
}
