//! Counters and the lateness histogram of a [`Timer`](crate::Timer).
//!
//! Every counter is a relaxed atomic: metrics are statistics, not synchronisation. A
//! [`Metrics`] value is a snapshot; fields read at slightly different moments may be
//! mutually inconsistent by the few operations in flight.

use std::time::Duration;

use crate::sync::{AtomicU64, Ordering};

/// Number of lateness buckets: bucket `i` counts lateness in `[2^(i-1), 2^i)` µs (bucket 0:
/// under 1 µs), the last one everything from about 36 minutes up.
pub const LATENESS_BUCKETS: usize = 32;

#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) scheduled: AtomicU64,
    pub(crate) fired: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) panicked: AtomicU64,
    pub(crate) worker_turns: AtomicU64,
    lateness: [AtomicU64; LATENESS_BUCKETS],
}

impl Counters {
    pub(crate) fn new() -> Self {
        Counters {
            scheduled: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            worker_turns: AtomicU64::new(0),
            lateness: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a batch's lateness counts (one atomic add per non-empty bucket instead of one
    /// per timer: in a burst the driver fires 1M timers a second).
    pub(crate) fn record_lateness(&self, counts: &LatenessCounts) {
        for (bucket, &n) in self.lateness.iter().zip(&counts.0) {
            if n > 0 {
                bucket.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Metrics {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Metrics {
            scheduled: load(&self.scheduled),
            fired: load(&self.fired),
            cancelled: load(&self.cancelled),
            rejected: load(&self.rejected),
            panicked: load(&self.panicked),
            worker_turns: load(&self.worker_turns),
            lateness: LatenessHistogram {
                buckets: std::array::from_fn(|i| load(&self.lateness[i])),
            },
        }
    }
}

/// Lateness counts of one batch of timers, added to the shared histogram at once.
pub(crate) struct LatenessCounts([u64; LATENESS_BUCKETS]);

impl LatenessCounts {
    pub(crate) fn new() -> Self {
        LatenessCounts([0; LATENESS_BUCKETS])
    }

    /// Counts one timer that fired `late_ns` nanoseconds after its deadline.
    #[inline]
    pub(crate) fn add(&mut self, late_ns: u64) {
        self.0[bucket_of_nanos(late_ns)] += 1;
    }
}

/// The bucket of a lateness in nanoseconds: `log2` of whole microseconds, plus one.
#[inline]
fn bucket_of_nanos(late_ns: u64) -> usize {
    let us = late_ns / 1000;
    let bits = (u64::BITS - us.leading_zeros()) as usize;
    bits.min(LATENESS_BUCKETS - 1)
}

/// A snapshot of a timer's counters, from [`Timer::metrics`](crate::Timer::metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Timers accepted by `schedule*` (a repeating task counts once), and async timers registered.
    pub scheduled: u64,
    /// Callbacks started plus async timers fired (a repeating task counts every run).
    pub fired: u64,
    /// Timers whose cancellation prevented a run (handles, dropped futures, `stop`).
    pub cancelled: u64,
    /// `schedule*` calls refused (full or shut down).
    pub rejected: u64,
    /// Callbacks that panicked (caught; other timers are not disturbed).
    pub panicked: u64,
    /// Turns of the driver's work run by a worker thread because the driver's wake-up was
    /// late (the driver thread was waiting for a core; see the crate's `BENCHMARKS.md`).
    pub worker_turns: u64,
    /// How late callbacks started and async timers fired, relative to their deadline.
    pub lateness: LatenessHistogram,
}

/// A log₂ histogram of lateness in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatenessHistogram {
    buckets: [u64; LATENESS_BUCKETS],
}

impl LatenessHistogram {
    /// The raw bucket counts; bucket `i` holds lateness in `[2^(i-1), 2^i)` µs.
    #[must_use]
    pub fn buckets(&self) -> &[u64; LATENESS_BUCKETS] {
        &self.buckets
    }

    /// Number of samples.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// An upper bound of the `q`-quantile (`0.0..=1.0`): the top of the bucket holding it.
    /// `None` without samples.
    #[must_use]
    pub fn quantile_upper_bound(&self, q: f64) -> Option<Duration> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a rank within 1 of exact is fine for a histogram"
        )]
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_micros(1u64 << i));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log2_microseconds() {
        assert_eq!(bucket_of_nanos(0), 0);
        assert_eq!(bucket_of_nanos(999), 0);
        assert_eq!(bucket_of_nanos(1_000), 1);
        assert_eq!(bucket_of_nanos(3_999), 2);
        assert_eq!(bucket_of_nanos(4_000), 3);
        assert_eq!(bucket_of_nanos(2_147_483_647_999), 31);
        assert_eq!(bucket_of_nanos(u64::MAX), LATENESS_BUCKETS - 1);
    }

    #[test]
    fn quantiles_report_bucket_tops() {
        let c = Counters::new();
        let mut counts = LatenessCounts::new();
        for _ in 0..99 {
            counts.add(100_000);
        }
        c.record_lateness(&counts);
        let mut counts = LatenessCounts::new();
        counts.add(5_000_000);
        c.record_lateness(&counts);
        let h = c.snapshot().lateness;
        assert_eq!(h.count(), 100);
        assert_eq!(
            h.quantile_upper_bound(0.5),
            Some(Duration::from_micros(128))
        );
        assert_eq!(
            h.quantile_upper_bound(1.0),
            Some(Duration::from_micros(8192))
        );
    }
}
