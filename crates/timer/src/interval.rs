//! Periodic async ticks and the missed-tick policy shared with repeating callbacks.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::sleep::Sleep;

/// What a periodic timer does when it falls behind (a slow callback, a busy executor, a
/// suspended machine).
///
/// The default is [`Skip`](Self::Skip): after a stall, the next tick comes at the next
/// multiple of the period and the missed ones are dropped. tokio's default, `Burst`, fires
/// every missed tick back to back, which turned stalls into reconnect storms and request
/// bursts in many projects (nats.rs#875, ldk-sample#108, omicron#9428); a caller who
/// really wants catch-up must ask for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MissedTickBehavior {
    /// Stay on the original grid (`start + k × period`), dropping missed ticks.
    #[default]
    Skip,
    /// Restart the grid from the late tick: the next one is `period` after it was handled.
    Delay,
    /// Fire every missed tick as soon as possible, then continue on the original grid.
    Burst,
}

impl MissedTickBehavior {
    /// The next deadline after the one `due`, handled at `now`, in any unit (ticks or ns).
    pub(crate) fn next_tick(self, due: u64, now: u64, period: u64) -> u64 {
        let period = period.max(1);
        let on_grid = due.saturating_add(period);
        if now < on_grid {
            return on_grid;
        }
        match self {
            MissedTickBehavior::Burst => on_grid,
            MissedTickBehavior::Delay => now.saturating_add(period),
            MissedTickBehavior::Skip => {
                let missed = (now - due) / period;
                due.saturating_add(period.saturating_mul(missed + 1))
            }
        }
    }

    fn next_instant(self, due: Instant, now: Instant, period: Duration) -> Instant {
        let to_ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let now_ns = to_ns(now.saturating_duration_since(due));
        let next_ns = self.next_tick(0, now_ns, to_ns(period));
        due.checked_add(Duration::from_nanos(next_ns))
            .unwrap_or_else(|| crate::driver::far_after(due))
    }
}

/// A stream of ticks every `period`, from [`Timer::interval`](crate::Timer::interval) or
/// [`interval`](crate::interval()).
///
/// The first tick completes at the start instant (immediately for `interval`).
#[derive(Debug)]
pub struct Interval {
    sleep: Sleep,
    period: Duration,
    behavior: MissedTickBehavior,
}

impl Interval {
    pub(crate) fn new(sleep: Sleep, period: Duration, behavior: MissedTickBehavior) -> Self {
        assert!(
            !period.is_zero(),
            "tickwheel: an interval's period must be non-zero"
        );
        Interval {
            sleep,
            period,
            behavior,
        }
    }

    /// Waits for the next tick and returns the instant it was due.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: dropping the returned future before it completes loses no tick;
    /// the next call waits for the same one.
    pub async fn tick(&mut self) -> Instant {
        std::future::poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick; `Ready(due)` when it has come.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        if Pin::new(&mut self.sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        let due = self.sleep.deadline();
        let now = self.sleep.clock_now();
        let next = self.behavior.next_instant(due, now, self.period);
        self.sleep.reset(next);
        Poll::Ready(due)
    }

    /// Sets what happens after missed ticks.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.behavior = behavior;
    }

    /// The current missed-tick policy.
    #[must_use]
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.behavior
    }

    /// The period.
    #[must_use]
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Restarts the grid: the next tick is one period from now.
    pub fn reset(&mut self) {
        let next = self.sleep.clock_now() + self.period;
        self.sleep.reset(next);
    }
}

impl futures_core::Stream for Interval {
    type Item = Instant;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Instant>> {
        self.get_mut().poll_tick(cx).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::MissedTickBehavior::{Burst, Delay, Skip};

    #[test]
    fn on_time_ticks_stay_on_the_grid() {
        for b in [Skip, Delay, Burst] {
            assert_eq!(b.next_tick(100, 105, 10), 110, "{b:?}");
        }
    }

    #[test]
    fn late_ticks_follow_the_policy() {
        // Due at 100, handled at 135, period 10.
        assert_eq!(Skip.next_tick(100, 135, 10), 140);
        assert_eq!(Delay.next_tick(100, 135, 10), 145);
        assert_eq!(Burst.next_tick(100, 135, 10), 110);
        // Exactly one period late.
        assert_eq!(Skip.next_tick(100, 110, 10), 120);
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        assert_eq!(Skip.next_tick(u64::MAX - 1, u64::MAX, 10), u64::MAX);
        assert_eq!(Burst.next_tick(u64::MAX, u64::MAX, 10), u64::MAX);
    }
}
