//! Where a [`Timer`](crate::Timer) reads the time, and how its driver waits for it.
//!
//! Deadlines are [`Instant`]s *by the timer's clock*. [`SystemClock`] (the default) is the
//! monotonic `Instant::now()`; [`ManualClock`] only moves when a test calls
//! [`ManualClock::advance`], which makes ordering and missed-tick tests deterministic.
//!
//! A clock also tells the time of day ([`Clock::system_time`]) for users whose deadlines must
//! mean the same after a restart, as a job server's delays do. With a [`ManualClock`] both
//! readings move together, so one clock can drive a whole program: its [`Timer`](crate::Timer)
//! (whose [`sleep`](crate::Timer::sleep)s are the async way to wait for this clock) and
//! whatever it computes from the time of day.

use std::fmt;
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant, SystemTime};

use crate::sync::Mutex;

/// A source of time for a [`Timer`](crate::Timer).
///
/// Implementations must be monotonic: `now()` never goes backwards.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time by this clock.
    fn now(&self) -> Instant;

    /// Blocks the calling thread (the timer's driver) until `deadline` by this clock, or
    /// until the thread is [unparked](Thread::unpark), whichever comes first. `None` means
    /// "until unparked". Returning early is always allowed: the driver re-reads
    /// [`now`](Self::now) and goes back to sleep.
    fn park_until(&self, deadline: Option<Instant>);

    /// The time of day by this clock, for deadlines that must survive a restart.
    ///
    /// Unlike [`now`](Self::now) it may go backwards (an NTP step on a real clock, or
    /// [`ManualClock::set_system_time`]): callers that need it monotonic keep their own
    /// maximum. The default is `SystemTime::now()`, right for any clock that follows real
    /// time; a clock that moves by hand overrides it so that both readings move together,
    /// as [`ManualClock`] does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tickwheel::{Clock, ManualClock};
    ///
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let clock = ManualClock::starting_at(start);
    /// clock.advance(Duration::from_millis(1_500));
    /// assert_eq!(clock.system_time(), start + Duration::from_millis(1_500));
    /// ```
    fn system_time(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A shared clock is a clock: one `Arc<dyn Clock>` can be handed to a [`Timer`](crate::Timer)
/// and kept by its owner for reading the same time.
impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }

    fn park_until(&self, deadline: Option<Instant>) {
        (**self).park_until(deadline);
    }

    fn system_time(&self) -> SystemTime {
        (**self).system_time()
    }
}

/// The real monotonic clock (`Instant::now()`); the default.
///
/// On Linux a timer with this clock reads the same clock (`CLOCK_MONOTONIC`) as a plain
/// count of nanoseconds for its ticks, which is cheaper than `Instant` arithmetic; its
/// readings are rounded so that nothing fires before its deadline by `Instant::now()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn park_until(&self, deadline: Option<Instant>) {
        match deadline {
            None => thread::park(),
            Some(deadline) => {
                let wait = deadline.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    thread::park_timeout(wait);
                }
            }
        }
    }
}

/// A clock that moves only when told to, for deterministic tests.
///
/// Cloning gives another handle to the same clock. A driver waiting on it is woken by
/// [`advance`](Self::advance). Its time of day ([`Clock::system_time`]) moves with it;
/// [`starting_at`](Self::starting_at) chooses where it starts, and
/// [`set_system_time`](Self::set_system_time) steps it alone, as NTP steps a real clock.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tickwheel::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let start = clock.now();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now() - start, Duration::from_secs(5));
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    shared: Arc<Mutex<ManualState>>,
}

#[derive(Default)]
struct ManualState {
    offset: Duration,
    origin: Option<Instant>,
    /// The time of day when `offset` was the second field: it reads that plus however far
    /// the clock has advanced since (`offset` never decreases, so that is never negative).
    wall: Option<(SystemTime, Duration)>,
    parked: Vec<Thread>,
}

impl ManualState {
    fn now(&self) -> Instant {
        self.origin.unwrap_or_else(Instant::now) + self.offset
    }

    fn system_time(&self) -> SystemTime {
        match self.wall {
            Some((wall, at)) => wall + (self.offset - at),
            None => SystemTime::now() + self.offset,
        }
    }
}

impl ManualClock {
    /// A clock standing at an arbitrary instant, its time of day the real one when it was
    /// made; it never moves by itself.
    #[must_use]
    pub fn new() -> Self {
        Self::starting_at(SystemTime::now())
    }

    /// A clock whose time of day starts at `time` (a whole second, say, so that a test
    /// knows how every reading rounds); it never moves by itself.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tickwheel::{Clock, ManualClock};
    ///
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let clock = ManualClock::starting_at(start);
    /// assert_eq!(clock.system_time(), start);
    /// ```
    #[must_use]
    pub fn starting_at(time: SystemTime) -> Self {
        let clock = ManualClock::default();
        {
            let mut state = clock.shared.lock();
            state.origin = Some(Instant::now());
            state.wall = Some((time, Duration::ZERO));
        }
        clock
    }

    /// Sets the time of day to `time`, forwards or backwards, without moving
    /// [`now`](Clock::now): what an NTP step does to a real clock. Later
    /// [`advance`](Self::advance)s move it on from `time`. Wakes nobody: deadlines are
    /// measured by `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tickwheel::{Clock, ManualClock};
    ///
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let clock = ManualClock::starting_at(start);
    /// let instant = clock.now();
    /// clock.set_system_time(start - Duration::from_secs(60));
    /// assert_eq!(clock.now(), instant);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(clock.system_time(), start - Duration::from_secs(59));
    /// ```
    pub fn set_system_time(&self, time: SystemTime) {
        let mut state = self.shared.lock();
        state.wall = Some((time, state.offset));
    }

    /// Moves the clock forward by `by` and wakes every driver waiting on it.
    pub fn advance(&self, by: Duration) {
        let parked = {
            let mut state = self.shared.lock();
            state.offset += by;
            std::mem::take(&mut state.parked)
        };
        for thread in parked {
            thread.unpark();
        }
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let offset = self.shared.lock().offset;
        f.debug_struct("ManualClock")
            .field("advanced_by", &offset)
            .finish()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.shared.lock().now()
    }

    fn park_until(&self, deadline: Option<Instant>) {
        {
            let mut state = self.shared.lock();
            if deadline.is_some_and(|d| d <= state.now()) {
                return;
            }
            // Registered under the same lock `advance` takes: an advance after this point
            // unparks us, and an unpark before `park` makes `park` return at once. Once per
            // thread: a driver unparked for another reason parks again before any advance.
            let me = thread::current();
            if !state.parked.iter().any(|t| t.id() == me.id()) {
                state.parked.push(me);
            }
        }
        thread::park();
    }

    fn system_time(&self) -> SystemTime {
        self.shared.lock().system_time()
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC`, the clock `Instant::now()` reads on Linux, as a plain
/// number: no `Timespec` subtraction and `Duration` normalisation to get a tick from it
/// (about a hundred instructions per schedule and per `sleep`, see `BENCHMARKS.md`).
#[cfg(target_os = "linux")]
#[inline]
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.wrapping_mul(1_000_000_000).wrapping_add(nanos)
}

/// Where the default [`SystemClock`]'s origin `Instant` lies on the raw monotonic clock:
/// between `lo` (read just before it) and `hi` (read just after). The timer reads its
/// own deadlines and "now" from the raw clock (Linux only; see `Inner::now_ns`), rounding
/// each the safe way, so nothing fires early:
///
/// - "now" is `raw - hi`, never later than the true time since the origin;
/// - a deadline `delay` from now is `raw - lo + delay`, never earlier than the true one.
///
/// The two readings are tens of nanoseconds apart (the tightest of eight tries): the
/// most a timer can fire late for it.
/// `a_raw_reading_brackets_instant` checks that the raw clock is the one `Instant` reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawOrigin {
    lo: u64,
    hi: u64,
}

impl RawOrigin {
    /// Reads `Instant::now()` as the origin, bracketed by raw readings (`None` where the
    /// raw clock is not known to be `Instant`'s).
    pub(crate) fn bracket() -> (Instant, Option<RawOrigin>) {
        #[cfg(target_os = "linux")]
        {
            // The tightest of a few brackets: a thread preempted between the readings
            // would make every timer that much later.
            let mut best: Option<(Instant, RawOrigin)> = None;
            for _ in 0..8 {
                let lo = monotonic_ns();
                let origin = Instant::now();
                let hi = monotonic_ns();
                if best.is_none_or(|(_, b)| hi.saturating_sub(lo) < b.hi - b.lo) {
                    best = Some((origin, RawOrigin { lo, hi }));
                }
            }
            match best {
                Some((origin, raw)) => (origin, Some(raw)),
                None => (Instant::now(), None),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            (Instant::now(), None)
        }
    }

    /// Nanoseconds since the origin now, rounded down (never later than the truth).
    #[inline]
    pub(crate) fn now_floor(self) -> u64 {
        #[cfg(target_os = "linux")]
        return monotonic_ns().saturating_sub(self.hi);
        #[cfg(not(target_os = "linux"))]
        unreachable!("no raw clock outside Linux ({self:?})")
    }

    /// Nanoseconds since the origin now, rounded up (never earlier than the truth): the
    /// base of a deadline.
    #[inline]
    pub(crate) fn now_ceil(self) -> u64 {
        #[cfg(target_os = "linux")]
        return monotonic_ns().saturating_sub(self.lo);
        #[cfg(not(target_os = "linux"))]
        unreachable!("no raw clock outside Linux ({self:?})")
    }
}

/// Maps [`Instant`]s to wheel ticks of a fixed resolution from a fixed origin.
///
/// Deadlines round **up** and "now" rounds **down**, so a tick that is due by the wheel is
/// due by the clock: `tick_ceil(d) <= tick_floor(now)` implies `d <= now`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TickSource {
    origin: Instant,
    resolution_ns: u64,
    /// Division by the resolution without a hardware divide (tens of cycles on the
    /// schedule path otherwise); exact.
    divisor: strength_reduce::StrengthReducedU64,
}

impl TickSource {
    pub(crate) fn new(origin: Instant, resolution: Duration) -> Self {
        let resolution_ns = u64::try_from(resolution.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        TickSource {
            origin,
            resolution_ns,
            divisor: strength_reduce::StrengthReducedU64::new(resolution_ns),
        }
    }

    /// Nanoseconds from the origin to `t` (0 before it), if they fit in a `u64` (584 years).
    #[inline]
    fn nanos_since_origin(&self, t: Instant) -> Option<u64> {
        let since = t.saturating_duration_since(self.origin);
        since
            .as_secs()
            .checked_mul(1_000_000_000)
            .and_then(|s| s.checked_add(u64::from(since.subsec_nanos())))
    }

    /// Nanoseconds from the origin to `t`, saturating (for lateness statistics).
    pub(crate) fn nanos_of_instant(&self, t: Instant) -> u64 {
        self.nanos_since_origin(t).unwrap_or(u64::MAX)
    }

    /// Nanoseconds from the origin to the start of `tick`, saturating.
    pub(crate) fn nanos_of_tick(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.resolution_ns)
    }

    /// The first tick at or after `ns` nanoseconds from the origin.
    #[inline]
    pub(crate) fn tick_ceil_ns(&self, ns: u64) -> u64 {
        let (q, r) = strength_reduce::StrengthReducedU64::div_rem(ns, self.divisor);
        q + u64::from(r != 0)
    }

    /// The last tick at or before `ns` nanoseconds from the origin.
    #[inline]
    pub(crate) fn tick_floor_ns(&self, ns: u64) -> u64 {
        ns / self.divisor
    }

    /// The instant `ns` nanoseconds after the origin, if `Instant` can hold it.
    pub(crate) fn instant_of_ns(&self, ns: u64) -> Option<Instant> {
        self.origin.checked_add(Duration::from_nanos(ns))
    }

    /// The first tick at or after `deadline`.
    #[inline]
    pub(crate) fn tick_ceil(&self, deadline: Instant) -> u64 {
        match self.nanos_since_origin(deadline) {
            Some(ns) => self.tick_ceil_ns(ns),
            None => {
                let ns = deadline.saturating_duration_since(self.origin).as_nanos();
                let res = u128::from(self.resolution_ns);
                u64::try_from(ns.div_ceil(res)).unwrap_or(u64::MAX)
            }
        }
    }

    /// The last tick at or before `now`.
    pub(crate) fn tick_floor(&self, now: Instant) -> u64 {
        match self.nanos_since_origin(now) {
            Some(ns) => self.tick_floor_ns(ns),
            None => {
                let ns = now.saturating_duration_since(self.origin).as_nanos();
                u64::try_from(ns / u128::from(self.resolution_ns)).unwrap_or(u64::MAX)
            }
        }
    }

    /// The instant a tick starts, or `None` if it is beyond what `Instant` can hold.
    pub(crate) fn instant_of(&self, tick: u64) -> Option<Instant> {
        let ns = u128::from(tick) * u128::from(self.resolution_ns);
        let secs = u64::try_from(ns / 1_000_000_000).ok()?;
        let sub = u32::try_from(ns % 1_000_000_000).ok()?;
        self.origin.checked_add(Duration::new(secs, sub))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: Duration = Duration::from_secs(1_700_000_000);

    #[test]
    fn a_manual_clock_moves_both_readings_together() {
        let start = SystemTime::UNIX_EPOCH + START;
        let clock = ManualClock::starting_at(start);
        let instant = clock.now();
        for step in [1, 999, 1_000_000, 7_000_000_000] {
            clock.advance(Duration::from_nanos(step));
            let since = clock.now() - instant;
            assert_eq!(clock.system_time(), start + since, "after {step} ns");
        }
    }

    #[test]
    fn a_time_of_day_step_moves_only_the_time_of_day() {
        let start = SystemTime::UNIX_EPOCH + START;
        let clock = ManualClock::starting_at(start);
        clock.advance(Duration::from_secs(10));
        let instant = clock.now();
        let back = start - Duration::from_secs(3600);
        clock.set_system_time(back);
        assert_eq!(clock.now(), instant);
        assert_eq!(clock.system_time(), back);
        clock.advance(Duration::from_millis(5));
        assert_eq!(clock.system_time(), back + Duration::from_millis(5));
        clock.set_system_time(start + Duration::from_secs(60));
        assert_eq!(clock.system_time(), start + Duration::from_secs(60));
        assert_eq!(clock.now(), instant + Duration::from_millis(5));
    }

    #[test]
    fn a_shared_clock_reads_what_it_shares() {
        let manual = ManualClock::starting_at(SystemTime::UNIX_EPOCH + START);
        let shared: Arc<dyn Clock> = Arc::new(manual.clone());
        manual.advance(Duration::from_secs(3));
        assert_eq!(shared.now(), manual.now());
        assert_eq!(shared.system_time(), manual.system_time());
        // Already past: returns at once instead of parking.
        shared.park_until(Some(manual.now()));
    }

    #[test]
    fn a_clock_without_a_time_of_day_of_its_own_tells_the_real_one() {
        #[derive(Debug)]
        struct Frozen(Instant);
        impl Clock for Frozen {
            fn now(&self) -> Instant {
                self.0
            }
            fn park_until(&self, _deadline: Option<Instant>) {}
        }
        // The real time of day: past the clock's 2023 start (not the epoch, not frozen).
        assert!(Frozen(Instant::now()).system_time() > SystemTime::UNIX_EPOCH + START);
    }

    #[test]
    fn a_driver_parked_again_is_registered_once() {
        let clock = ManualClock::new();
        let far = clock.now() + Duration::from_secs(60);
        // Each park returns at once: the token of the unpark before it.
        for _ in 0..3 {
            thread::current().unpark();
            clock.park_until(Some(far));
        }
        assert_eq!(clock.shared.lock().parked.len(), 1);
        clock.advance(Duration::from_secs(60));
        assert!(clock.shared.lock().parked.is_empty());
    }

    /// The raw clock is the one `Instant` reads: an `Instant` taken between two raw
    /// readings lies between them, measured from the bracketed origin (with another clock,
    /// such as `CLOCK_BOOTTIME` after a suspend, or a coarse clock, this fails).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_raw_reading_brackets_instant() {
        let (origin, raw) = RawOrigin::bracket();
        let raw = raw.expect("a raw origin on Linux");
        assert!(raw.lo <= raw.hi);
        for i in 0..10_000u32 {
            if i % 1_000 == 0 {
                thread::sleep(Duration::from_micros(200));
            }
            let before = monotonic_ns();
            let t = Instant::now();
            let after = monotonic_ns();
            let since = u64::try_from((t - origin).as_nanos()).expect("fits");
            assert!(
                before.saturating_sub(raw.hi) <= since && since <= after - raw.lo,
                "Instant {since} ns after the origin, raw clock says {}..={}",
                before.saturating_sub(raw.hi),
                after - raw.lo
            );
            // What the timer derives from it: "now" never later, a deadline never earlier.
            assert!(raw.now_floor() >= before.saturating_sub(raw.hi));
            assert!(raw.now_ceil() >= since);
        }
    }

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let origin = Instant::now();
        let ticks = TickSource::new(origin, Duration::from_millis(1));
        let d = origin + Duration::from_micros(1_500);
        assert_eq!(ticks.tick_ceil(d), 2);
        assert_eq!(ticks.tick_floor(d), 1);
        assert_eq!(ticks.tick_ceil(origin + Duration::from_millis(3)), 3);
        assert_eq!(ticks.tick_floor(origin + Duration::from_millis(3)), 3);
        assert_eq!(ticks.tick_ceil(origin), 0);
        assert_eq!(ticks.instant_of(2), Some(origin + Duration::from_millis(2)));
    }

    #[test]
    fn strength_reduced_division_matches_plain_division() {
        let origin = Instant::now();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for res in [1u64, 7, 1_000, 50_000, 999_983, 1_000_000, 1_000_000_007] {
            let ticks = TickSource::new(origin, Duration::from_nanos(res));
            for _ in 0..2_000 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let ns = x >> 8; // up to ~2 years, within the 64-bit fast path
                let t = origin + Duration::from_nanos(ns);
                assert_eq!(ticks.tick_ceil(t), ns.div_ceil(res), "ceil {ns} / {res}");
                assert_eq!(ticks.tick_floor(t), ns / res, "floor {ns} / {res}");
            }
        }
    }

    #[test]
    fn a_due_tick_is_never_early() {
        let origin = Instant::now();
        let ticks = TickSource::new(origin, Duration::from_micros(50));
        for d_us in 0..400u64 {
            for n_us in 0..400u64 {
                let d = origin + Duration::from_nanos(d_us * 1_013);
                let n = origin + Duration::from_nanos(n_us * 997);
                if ticks.tick_ceil(d) <= ticks.tick_floor(n) {
                    assert!(d <= n, "deadline {d_us} fired at now {n_us}");
                }
            }
        }
    }
}
