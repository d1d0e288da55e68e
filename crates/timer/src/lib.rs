//! Timers done right: a threaded timer service, async `sleep` / `timeout` / `interval` for
//! any executor, and a [`DelayQueue`], on the hierarchical timing wheel of
//! [`tickwheel_core`].
//!
//! # The timer service
//!
//! A [`Timer`] runs callbacks at a deadline on a pool of worker threads, like Netty's
//! `HashedWheelTimer`, without its failure modes: a slow callback does not delay other
//! timers (workers), a cancelled timer frees its closure at once (not at its deadline),
//! an idle driver sleeps until the next deadline however many timers are pending
//! (tickless), `max_pending` gives backpressure, and [`Timer::stop`] returns what never ran.
//!
//! ```
//! use std::sync::mpsc;
//! use std::time::Duration;
//! use tickwheel::{MissedTickBehavior, TaskState, Timer};
//!
//! let timer = Timer::new();
//! let (tx, rx) = mpsc::channel();
//!
//! let tx2 = tx.clone();
//! let soon = timer.schedule(Duration::from_millis(2), move || tx2.send("soon").unwrap())?;
//! let never = timer.schedule(Duration::from_secs(3600), || println!("an hour later"))?;
//! assert!(timer.cancel(never)); // O(1); the closure is dropped now
//!
//! let ping = timer.schedule_repeating(
//!     Duration::from_millis(1),
//!     Duration::from_millis(1),
//!     MissedTickBehavior::Skip,
//!     move || { let _ = tx.send("ping"); },
//! )?;
//! let mut seen = Vec::new();
//! while seen.len() < 3 {
//!     seen.push(rx.recv_timeout(Duration::from_secs(10))?);
//! }
//! timer.cancel(ping);
//! assert!(seen.contains(&"soon") || timer.state(soon) != TaskState::Cancelled);
//! assert_eq!(timer.stop().len(), 0); // nothing left that never ran
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Async timers
//!
//! [`Timer::sleep`], [`Timer::timeout`], [`Timer::interval`] (and the free functions
//! [`sleep`](sleep()), [`timeout`](timeout()), [`interval`](interval()) on a lazily started
//! [`default_timer`]) return plain futures that need no particular runtime: tokio,
//! `futures::executor`, smol, or a hand-written loop.
//!
//! ```
//! use std::time::Duration;
//!
//! futures::executor::block_on(async {
//!     tickwheel::sleep(Duration::from_millis(1)).await;
//!     let slow = tickwheel::sleep(Duration::from_secs(60));
//!     assert!(tickwheel::timeout(Duration::from_millis(1), slow).await.is_err());
//! });
//! ```
//!
//! # Guarantees
//!
//! - **Never early.** A deadline maps to the first tick at or after it (rounding up) and
//!   the driver's "now" to the last tick at or before it (rounding down), so nothing fires
//!   before its deadline by the timer's [`Clock`].
//! - **Exactly once.** A callback runs once, or is cancelled, or is returned by
//!   [`Timer::stop`], or is refused by `schedule*` with the closure handed back.
//! - **Any deadline.** `Duration::MAX` and instants decades away are fine; no panics.
//! - A panicking callback is caught and counted in [`Metrics::panicked`].
//!
//! # Design
//!
//! Timers live in shards: each a wheel, a slab of task slots and one short lock; a producer
//! thread always uses the same shard, so producers on different cores do not contend. A
//! [`TimerHandle`] is a `Copy` key (shard, slot, generation), not a pointer: no `Arc` and
//! no allocation per timer, and a stale handle never touches a newer timer. One driver
//! thread sleeps until the earliest deadline of any shard, takes due timers out in chunks
//! and hands them to the workers in batches; a cancel frees the slot and the closure at
//! once, on the cancelling thread. See the `shard` and `driver` modules' ground rules and
//! `BENCHMARKS.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod builder;
mod clock;
mod delay_queue;
mod driver;
mod error;
mod interval;
mod metrics;
mod payload;
mod shard;
mod sleep;
mod sync;
mod task;
mod timeout;
mod timer;

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use builder::{Builder, DEFAULT_MAX_PENDING};
pub use clock::{Clock, ManualClock, SystemClock};
pub use delay_queue::{DelayQueue, Expired, Key};
pub use error::{BuildError, Elapsed, ScheduleError};
pub use interval::{Interval, MissedTickBehavior};
pub use metrics::{LatenessHistogram, Metrics, LATENESS_BUCKETS};
pub use sleep::Sleep;
pub use task::{PendingTask, TaskState, TimerHandle};
pub use tickwheel_core;
pub use timeout::Timeout;
pub use timer::Timer;

/// The process-wide timer behind the free functions: started on first use (1 ms ticks,
/// one worker thread), never stopped.
pub fn default_timer() -> &'static Timer {
    static DEFAULT: OnceLock<Timer> = OnceLock::new();
    DEFAULT.get_or_init(|| {
        match Timer::builder()
            .worker_threads(1)
            .thread_name("tickwheel-default")
            .build()
        {
            Ok(timer) => timer,
            Err(e) => panic!("tickwheel: cannot start the default timer: {e}"),
        }
    })
}

/// [`Timer::sleep`] on the [`default_timer`].
pub fn sleep(duration: Duration) -> Sleep {
    default_timer().sleep(duration)
}

/// [`Timer::sleep_until`] on the [`default_timer`].
pub fn sleep_until(deadline: Instant) -> Sleep {
    default_timer().sleep_until(deadline)
}

/// [`Timer::timeout`] on the [`default_timer`].
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    default_timer().timeout(duration, future)
}

/// [`Timer::timeout_at`] on the [`default_timer`].
pub fn timeout_at<F: Future>(deadline: Instant, future: F) -> Timeout<F> {
    default_timer().timeout_at(deadline, future)
}

/// [`Timer::interval`] on the [`default_timer`].
///
/// # Panics
///
/// If `period` is zero.
pub fn interval(period: Duration) -> Interval {
    default_timer().interval(period)
}

/// [`Timer::interval_at`] on the [`default_timer`].
///
/// # Panics
///
/// If `period` is zero.
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    default_timer().interval_at(start, period)
}
