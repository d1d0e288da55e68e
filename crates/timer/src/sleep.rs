//! [`Sleep`]: a future that completes at a deadline, on any executor.
//!
//! # Ground rules
//!
//! A registered `Sleep` owns a slot in one shard (`shard.rs`) from its first pending poll
//! until it is dropped: state byte and waker slot, read and written only under that
//! shard's lock. The driver fires it with `WAITING -> DONE` and takes the waker, waking it
//! after unlocking; `poll` stores its waker if the slot still waits. Both happen under the
//! lock, so either the driver takes the new waker or `poll` sees `DONE`: no lost wake-up.
//! Re-arming (a reset, an `Interval` tick) reuses the slot: no allocation, ever, after the
//! shard's slab and wheel are warm.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::driver::{Inner, STOPPED};
use crate::shard::{Arm, DONE, SHUTDOWN};
use crate::sync::Arc;

/// A future that completes at its deadline (by its timer's clock), never before.
///
/// Created by [`Timer::sleep`](crate::Timer::sleep), [`sleep`](crate::sleep()) and friends.
/// Creating one costs a clock read; the first pending poll registers it with the timer (a
/// slot and a wheel insert under a short lock, no allocation once warm); dropping it
/// cancels that registration in O(1). It is `Unpin`,
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
    deadline: Deadline,
    /// `(shard, slot)` once registered; the slot is this `Sleep`'s until it is dropped.
    reg: Option<(u32, u32)>,
    /// Linked (or fired) since the last arm; `false` while unregistered or reset.
    armed: bool,
    /// Read the clock before arming: the deadline may already have passed (`sleep_until`,
    /// a reset, a zero duration). A fresh `sleep(d)` skips it (its deadline was ahead when
    /// it was made) and relies on the wheel's clock, as tokio does.
    check_clock: bool,
}

/// A `Sleep`'s deadline.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    /// An instant by the timer's clock (`sleep_until`, a reset, or a clock without a raw
    /// reading).
    At(Instant),
    /// Nanoseconds from the timer's origin, by its raw clock (`Timer::sleep` with the
    /// default clock): never earlier than the call's time plus its duration, and turned
    /// into a tick without `Instant` arithmetic.
    Nanos(u64),
}

impl Sleep {
    pub(crate) fn new(inner: Arc<Inner>, deadline: Instant, check_clock: bool) -> Self {
        Sleep {
            inner,
            deadline: Deadline::At(deadline),
            reg: None,
            armed: false,
            check_clock,
        }
    }

    /// A `Sleep` for `duration` from now (not zero).
    #[inline]
    pub(crate) fn after(inner: Arc<Inner>, duration: std::time::Duration) -> Self {
        let deadline = match inner.ns_after(duration) {
            Some(ns) => Deadline::Nanos(ns),
            None => {
                let now = inner.now();
                Deadline::At(
                    now.checked_add(duration)
                        .unwrap_or_else(|| crate::driver::far_after(now)),
                )
            }
        };
        Sleep {
            inner,
            deadline,
            reg: None,
            armed: false,
            check_clock: false,
        }
    }

    /// The instant this future completes at.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        match self.deadline {
            Deadline::At(at) => at,
            Deadline::Nanos(ns) => self
                .inner
                .ticks
                .instant_of_ns(ns)
                .unwrap_or_else(|| self.inner.far_future()),
        }
    }

    /// The deadline's tick (rounded up).
    #[inline]
    fn tick(&self) -> u64 {
        match self.deadline {
            Deadline::At(at) => self.inner.ticks.tick_ceil(at),
            Deadline::Nanos(ns) => self.inner.ticks.tick_ceil_ns(ns),
        }
    }

    /// `true` if the deadline has passed by the timer's clock.
    fn clock_passed(&self) -> bool {
        match self.deadline {
            Deadline::At(at) => self.clock_now() >= at,
            Deadline::Nanos(ns) => self.inner.now_ns() >= ns,
        }
    }

    /// `true` once the deadline has passed by the timer's clock.
    #[must_use]
    pub fn is_elapsed(&self) -> bool {
        if let (true, Some((shard, slot))) = (self.armed, self.reg) {
            if self
                .inner
                .with_shard_quiet(shard as usize, |s| s.sleep_state(slot))
                == DONE
            {
                return true;
            }
        }
        self.clock_passed()
    }

    pub(crate) fn clock_now(&self) -> Instant {
        self.inner.now()
    }

    /// Moves the deadline, earlier or later; the future can be polled again after it
    /// completed. Never allocates: a waiting registration moves in the wheel, a completed
    /// one is re-linked by the next poll, in the same slot.
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = Deadline::At(deadline);
        self.check_clock = true;
        let (true, Some((shard, slot))) = (self.armed, self.reg) else {
            return;
        };
        let tick = self.inner.ticks.tick_ceil(deadline);
        match self
            .inner
            .with_shard_quiet(shard as usize, |s| s.sleep_reset(slot, tick))
        {
            Some(wake) => {
                if wake {
                    self.inner.unpark_driver();
                }
            }
            None => self.armed = false,
        }
    }
}

fn stopped() -> ! {
    panic!("tickwheel: a Sleep was polled after its Timer stopped")
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if !this.armed {
            if this.check_clock && this.clock_passed() {
                return Poll::Ready(());
            }
            if this.inner.run_state() == STOPPED {
                stopped();
            }
            let tick = this.tick();
            let waker = cx.waker().clone();
            let (shard, armed) = match this.reg {
                Some((shard, slot)) => (
                    shard,
                    this.inner
                        .with_shard_quiet(shard as usize, |s| s.sleep_rearm(slot, waker, tick)),
                ),
                None => {
                    let shard = this.inner.pick_shard();
                    let armed = this
                        .inner
                        .with_shard_quiet(shard, |s| s.sleep_register(waker, tick));
                    (shard as u32, armed)
                }
            };
            match armed {
                Arm::Linked(slot, wake) => {
                    this.reg = Some((shard, slot));
                    this.armed = true;
                    if wake {
                        this.inner.unpark_driver();
                    }
                    return Poll::Pending;
                }
                Arm::Elapsed => return Poll::Ready(()),
                Arm::Closed => stopped(),
            }
        }
        let Some((shard, slot)) = this.reg else {
            return Poll::Pending;
        };
        match this
            .inner
            .with_shard_quiet(shard as usize, |s| s.sleep_poll(slot, cx.waker()))
        {
            DONE => Poll::Ready(()),
            SHUTDOWN => stopped(),
            _ => Poll::Pending,
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some((shard, slot)) = self.reg.take() {
            let waker = self
                .inner
                .with_shard_quiet(shard as usize, |s| s.sleep_drop(slot));
            drop(waker); // outside the lock
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline())
            .field("registered", &self.armed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Clock, ManualClock, Timer};

    fn poll(sleep: &mut Sleep) -> Poll<()> {
        let waker = futures::task::noop_waker();
        Pin::new(sleep).poll(&mut Context::from_waker(&waker))
    }

    /// Issue 13: moving a registered `Sleep` earlier (or later, or re-arming it after it
    /// fired) reuses its slot and wheel entry: the slab and the wheel do not grow, and no
    /// allocation is made (the only allocations on this path would be growing them).
    #[test]
    fn rearming_reuses_the_slot() {
        let clock = ManualClock::new();
        let timer = Timer::builder()
            .clock(clock.clone())
            .worker_threads(0)
            .shards(1)
            .__manual_driver()
            .build()
            .expect("build");
        let mut sleep = timer.sleep(Duration::from_secs(60));
        assert!(poll(&mut sleep).is_pending());
        let reg = sleep.reg;
        let inner = Arc::clone(timer.inner());
        let before = inner.with_shard(0, |s| s.capacities());
        for ms in [30_000u64, 10, 5] {
            sleep.reset(clock.now() + Duration::from_millis(ms));
            assert!(poll(&mut sleep).is_pending());
            assert_eq!(sleep.reg, reg, "same slot");
        }
        clock.advance(Duration::from_millis(5));
        timer.__turn();
        assert!(poll(&mut sleep).is_ready());
        sleep.reset(clock.now() + Duration::from_millis(1));
        assert!(poll(&mut sleep).is_pending(), "re-armed after firing");
        assert_eq!(sleep.reg, reg, "same slot after firing");
        assert_eq!(inner.with_shard(0, |s| s.capacities()), before);
        clock.advance(Duration::from_millis(1));
        timer.__turn();
        assert!(poll(&mut sleep).is_ready());
    }
}
