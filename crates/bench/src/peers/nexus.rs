//! Adapter for `nexus_timer::Wheel<u64>` (crates.io `nexus-timer`), default configuration
//! (1 ms tick, 64 slots, 8x per level, 7 levels ≈ 4.7 h; later deadlines are clamped into the
//! top level and still fire exactly).
//!
//! Logical clock: nexus-timer takes `std::time::Instant`s but never reads the system clock
//! itself; we fix one epoch `Instant` and pass `epoch + tick ms` everywhere, so it is driven
//! by the same logical clock as everyone else. Polls use `poll_and_rebalance` (the crate's
//! recommended all-in-one poll). Its `next_deadline()` is a lower bound, not exact.

use std::time::{Duration, Instant};

use nexus_timer::{TimerHandle, Wheel};

use super::TimerImpl;

/// Slab chunk size (entries per chunk) for the unbounded wheel.
const CHUNK: usize = 64 * 1024;

pub(crate) struct NexusTimer {
    wheel: Wheel<u64>,
    epoch: Instant,
    /// The last tick polled: the clock must never be handed an earlier instant.
    now: u64,
}

impl NexusTimer {
    #[inline]
    fn at(&self, tick: u64) -> Instant {
        self.epoch + Duration::from_millis(tick)
    }
}

impl TimerImpl for NexusTimer {
    type Handle = TimerHandle<u64>;
    const NAME: &'static str = "nexus-timer";
    const PEEK: &'static str =
        "next_deadline(): lower bound (may read early; jumps can fire nothing)";

    fn create(capacity: usize) -> Self {
        let epoch = Instant::now();
        NexusTimer {
            wheel: Wheel::unbounded(CHUNK.min(capacity.max(1024)), epoch),
            epoch,
            now: 0,
        }
    }

    #[inline(always)]
    fn insert(&mut self, deadline: u64, id: u64) -> TimerHandle<u64> {
        let at = self.at(deadline);
        self.wheel.schedule(at, id)
    }

    #[inline(always)]
    fn cancel(&mut self, handle: TimerHandle<u64>) -> Option<u64> {
        self.wheel.cancel(handle)
    }

    #[inline]
    fn release_fired(&mut self, handle: TimerHandle<u64>) {
        // The fired entry stays a zombie until its handle is given back.
        self.wheel.free(handle);
    }

    #[inline]
    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>) {
        self.now = now;
        let at = self.at(now);
        self.wheel.poll_and_rebalance(at, out);
    }

    fn next_deadline(&mut self) -> Option<u64> {
        self.wheel.next_deadline().map(|at| {
            u64::try_from(at.saturating_duration_since(self.epoch).as_millis())
                .expect("deadline fits u64 ms")
        })
    }

    fn jump(&mut self, out: &mut Vec<u64>) -> Option<u64> {
        // A lower bound at or before the last poll would only re-poll the past: step 1 ms.
        let next = self.next_deadline()?.max(self.now + 1);
        self.poll_until(next, out);
        Some(next)
    }

    fn len(&self) -> usize {
        self.wheel.len()
    }
}
