//! The driver: one thread that takes due timers out of the shards and hands them to the
//! workers in batches.
//!
//! # Ground rules
//!
//! - Timers live in shards (`shard.rs`): each a wheel, a slab of task slots and one
//!   short mutex. A producer thread always uses the same shard (a thread-local index), so
//!   two producers do not contend on one lock or one cache line; a cancel, a state query
//!   or a worker finishing a run goes to the timer's own shard, named by its handle. The
//!   driver takes each lock for one batch: every timer due in that shard moves out (the
//!   task itself, no reference count), then the lock is released before anything runs.
//! - **Waking.** Each shard's `sleep_until` is the tick the driver sleeps towards. A turn
//!   sets it to `AWAKE` while taking due timers out (producers then never wake it), reads
//!   the shard's next deadline under the same lock, and once every shard is read, sets
//!   every shard's `sleep_until` to the minimum, re-reading each shard's next deadline
//!   under its lock as it goes. A producer that links a timer either does so before that
//!   re-read (the driver sees it) or sees the target and unparks the driver; `unpark`
//!   before `park` makes `park` return, so no wake-up is lost.
//! - **Turns.** A turn (take what is due, dispatch it, publish the wake-up targets) runs
//!   under a token (`turning`), normally on the driver thread. With the system clock an
//!   idle worker waits for work only until the earliest deadline the last turn saw plus
//!   `LATE_MARGIN_NS`; if no turn has run by then it runs the turn itself, if the token
//!   is free (`worker_turn`). On a loaded machine the driver's wake-up sometimes ends
//!   milliseconds late, and a late turn hands out its whole backlog late; three threads
//!   waiting for the deadline instead of one make that rarer (`BENCHMARKS.md`, eleventh
//!   session). The driver never waits for the token: if a worker holds it, the driver
//!   looks again a tick later. One turner at a time, due timers taken out under their
//!   shard's lock, only those due by the timer's clock: no timer fires twice or early,
//!   whoever turns.
//! - **Cancel vs fire** is decided by whoever takes the shard lock first: a cancel finds
//!   the timer `WAITING` (and prevents the run) or `RUNNING` (too late, `false`); a
//!   repeating task cancelled while it runs is marked and not linked again.
//! - **Stop.** `collect_after_stop` closes each shard under its lock and drains its wheel;
//!   a schedule that finds a shard closed hands the task back to its caller. Batches not
//!   started yet are taken back from the channel, and a worker that sees `STOPPED` before
//!   a callback gives the rest of its batch back, so each callback runs, or is returned by
//!   `stop`, or is refused, exactly once. A repeating task whose run is in flight at
//!   `stop` is returned by `stop` too, once the run ends (`stop` waits for it).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use crossbeam_utils::CachePadded;

use crate::clock::{Clock, RawOrigin, TickSource};
use crate::metrics::{Counters, LatenessCounts};
use crate::shard::{Due, Fire, Shard, Task, Work, AWAKE, CASCADE_BUDGET};
use crate::sync::{Arc, AtomicU64, AtomicU8, AtomicUsize, Condvar, Mutex, Ordering};
use crate::task::{PendingTask, Tally};

pub(crate) const RUN: u8 = 0;
pub(crate) const SHUTTING_DOWN: u8 = 1;
pub(crate) const STOPPED: u8 = 2;

/// A batch of due callbacks for one worker, in reverse order (the next one last, so that
/// taking it and handing the rest on are O(1)); `None` dismisses the worker.
type WorkItem = Option<Vec<Fire>>;

/// Due callbacks are handed to workers in batches of at most this many: one channel
/// operation (and at most one worker wake-up) per batch instead of per callback, which
/// matters in bursts (1M timers due within a second), while a batch still takes only
/// microseconds to start.
const BATCH: usize = 64;

/// The driver takes at most this many due timers out of a shard per lock acquisition.
const CHUNK: usize = 256;

/// How many ticks before a far deadline the driver wakes to stage that deadline's 256-tick
/// window (`run_driver`). Under 256, so the wake lands in the window before the deadline's
/// or in the deadline's own: in the first case `prepare` stages the deadline's window, in
/// the second the wake's poll cascades it, both before the deadline.
const PREPARE_LEAD: u64 = 200;

/// The wheel's window: `tickwheel-core`'s level 0 spans 256 ticks, and `Wheel::prepare`
/// stages the next such window (ADR 0004, ADR 0011).
const WINDOW: u64 = 256;

/// Staging steps (of [`CASCADE_BUDGET`] timers each) per turn that fired something, while the
/// next window is more than [`URGENT`] ticks away (`prepare_window`). A 1M-per-second burst
/// puts ~290k timers in a window: ~280 steps, done in ~70 busy turns at this pace, well before
/// the window starts; the driver's tick then costs ~0.16 ms more instead of a whole core for
/// ~25 ticks, which the workers need.
const BUSY_STEPS: usize = 4;

/// Within this many ticks of the next window's start, staging is no longer paced: a window
/// too crowded to be staged at [`BUSY_STEPS`] per tick is finished before it starts.
const URGENT: u64 = 64;

/// An idle worker runs the driver's turn itself when the earliest deadline the last turn
/// saw is this far in the past and no turn has run since (`Inner::worker_turn`). Above the
/// driver's usual wake-up overshoot (~45 µs median, `BENCHMARKS.md`, eleventh session), so
/// an on-time driver keeps its turns; far below the 1–4.6 ms late wake-ups a driver waiting
/// for a core has on a busy 2-core machine. Also the least wait between two tries of a
/// worker whose try was refused (the token held), so no worker spins on it.
const LATE_MARGIN_NS: u64 = 150_000;

/// About 30 years: "never" for deadlines beyond `Instant`'s range.
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `t` plus about 30 years, or `t` itself where even that does not fit.
pub(crate) fn far_after(t: Instant) -> Instant {
    t.checked_add(FAR).unwrap_or(t)
}

/// One shard and a copy of its pending count that other shards read without its lock.
pub(crate) struct ShardCell {
    lock: Mutex<Shard>,
    pending: AtomicUsize,
}

/// One-shot callbacks handed to workers and not yet run (or given back): they left their
/// shard's `pending` when the driver took them out.
struct InFlight(CachePadded<AtomicUsize>);

/// Everything a timer's threads, handles and futures share.
pub(crate) struct Inner {
    driver_thread: OnceLock<Thread>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The clock is the default `SystemClock`: read `Instant::now()` directly, without
    /// the virtual call (it is on every schedule).
    system_clock: bool,
    /// With the default clock on Linux: the origin on the raw monotonic clock, so that a
    /// deadline's tick is computed from plain nanoseconds (see `now_ns`).
    raw: Option<RawOrigin>,
    pub(crate) ticks: TickSource,
    pub(crate) resolution: Duration,
    pub(crate) max_pending: usize,
    /// `max_pending / shards`: below it a shard need not look at the others.
    share: usize,
    /// `shards - 1` when the shard count is a power of two (a thread's shard is then its
    /// hint masked), else `usize::MAX` (`pick_shard` takes the remainder).
    shard_mask: usize,
    run_state: AtomicU8,
    pub(crate) counters: Counters,
    shards: Box<[CachePadded<ShardCell>]>,
    workers: Option<(Sender<WorkItem>, Receiver<WorkItem>)>,
    pub(crate) worker_count: usize,
    in_flight: InFlight,
    idle: (Mutex<()>, Condvar),
    /// Callbacks given back after `stop` closed their shard: a repeating run that was in
    /// flight, the unstarted rest of a worker's batch.
    returned: Mutex<Vec<PendingTask>>,
    /// The driver's buffer, kept between turns.
    due: Mutex<Due>,
    /// The tick the driver last parked towards (under `turning`; see `turn`).
    target: AtomicU64,
    /// The turn token: whoever holds it runs a turn (the driver, or a worker standing in
    /// for a late driver, `worker_turn`), so there is never more than one turner.
    turning: Mutex<()>,
    /// Nanoseconds (from the origin) of the earliest deadline the last turn saw pending,
    /// `u64::MAX` if none: a worker finding it more than [`LATE_MARGIN_NS`] in the past
    /// runs the turn itself.
    due_at_ns: CachePadded<AtomicU64>,
}

/// Seeds of slot generations: far apart per shard and per timer, so a handle of one timer
/// is not taken for a handle of another.
fn gen_seed() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    static NEXT: AtomicU32 = AtomicU32::new(0x6A09_E667);
    NEXT.fetch_add(0x9E37_79B9, Relaxed)
}

impl Inner {
    pub(crate) fn new(
        clock: Arc<dyn Clock>,
        system_clock: bool,
        resolution: Duration,
        max_pending: usize,
        worker_count: usize,
        shards: usize,
    ) -> Self {
        let (origin, raw) = if system_clock {
            RawOrigin::bracket()
        } else {
            (clock.now(), None)
        };
        let ticks = TickSource::new(origin, resolution);
        let shards = shards.clamp(1, 1024);
        Inner {
            driver_thread: OnceLock::new(),
            clock,
            system_clock,
            raw,
            ticks,
            resolution,
            max_pending,
            share: max_pending / shards,
            shard_mask: if shards.is_power_of_two() {
                shards - 1
            } else {
                usize::MAX
            },
            run_state: AtomicU8::new(RUN),
            counters: Counters::new(),
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(ShardCell {
                        lock: Mutex::new(Shard::new(gen_seed())),
                        pending: AtomicUsize::new(0),
                    })
                })
                .collect(),
            workers: (worker_count > 0).then(crossbeam_channel::unbounded),
            worker_count,
            in_flight: InFlight(CachePadded::new(AtomicUsize::new(0))),
            idle: (Mutex::new(()), Condvar::new()),
            returned: Mutex::new(Vec::new()),
            due: Mutex::new(Due::default()),
            target: AtomicU64::new(0),
            turning: Mutex::new(()),
            due_at_ns: CachePadded::new(AtomicU64::new(u64::MAX)),
        }
    }

    pub(crate) fn set_driver_thread(&self, thread: Thread) {
        let _ = self.driver_thread.set(thread);
    }

    pub(crate) fn worker_receiver(&self) -> Option<Receiver<WorkItem>> {
        self.workers.as_ref().map(|(_, rx)| rx.clone())
    }

    #[inline]
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The calling thread's shard: fixed per thread, spread round-robin over threads.
    #[inline]
    pub(crate) fn pick_shard(&self) -> usize {
        let mask = self.shard_mask;
        if mask == 0 {
            return 0; // one shard
        }
        thread_local! {
            static HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let hint = HINT.with(|h| {
            if h.get() == usize::MAX {
                h.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            }
            h.get()
        });
        if mask != usize::MAX {
            hint & mask // no division on the schedule path in the common case
        } else {
            hint % self.shards.len()
        }
    }

    /// Runs `f` on shard `i` under its lock (and publishes its pending count).
    #[inline]
    pub(crate) fn with_shard<R>(&self, i: usize, f: impl FnOnce(&mut Shard) -> R) -> R {
        let cell = &self.shards[i];
        let mut shard = cell.lock.lock();
        let r = f(&mut shard);
        // Release: a reader that sees a lowered count also sees the `in_flight` increase
        // made before it (see `pending`).
        cell.pending.store(shard.pending, Ordering::Release);
        r
    }

    /// Runs `f` on shard `i` under its lock, for operations that leave its pending count
    /// alone (async timers, which are not counted; state queries): no count to publish.
    #[inline]
    pub(crate) fn with_shard_quiet<R>(&self, i: usize, f: impl FnOnce(&mut Shard) -> R) -> R {
        let mut shard = self.shards[i].lock.lock();
        #[cfg(debug_assertions)]
        let pending = shard.pending;
        let r = f(&mut shard);
        #[cfg(debug_assertions)]
        debug_assert_eq!(shard.pending, pending, "with_shard_quiet changed the count");
        r
    }

    /// `true` if one more callback on shard `i` (holding `mine`) would exceed `max_pending`.
    /// Exact with one shard; with several, concurrent schedules on other shards may pass
    /// the limit by at most one each.
    #[inline]
    pub(crate) fn is_full(&self, i: usize, mine: usize) -> bool {
        if mine < self.share {
            return false;
        }
        self.is_full_slow(i, mine)
    }

    #[cold]
    fn is_full_slow(&self, i: usize, mine: usize) -> bool {
        let others: usize = self
            .shards
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, c)| c.pending.load(Ordering::Relaxed))
            .sum();
        mine + others >= self.max_pending
    }

    /// The current time by the timer's clock.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        if self.system_clock {
            Instant::now()
        } else {
            self.clock.now()
        }
    }

    /// Nanoseconds from the origin to now by the timer's clock, never later than the
    /// truth (the raw clock's reading rounds down; see `RawOrigin`).
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        match self.raw {
            Some(raw) => raw.now_floor(),
            None => self.ticks.nanos_of_instant(self.now()),
        }
    }

    /// The current tick (rounded down).
    pub(crate) fn now_tick(&self) -> u64 {
        match self.raw {
            Some(raw) => self.ticks.tick_floor_ns(raw.now_floor()),
            None => self.ticks.tick_floor(self.now()),
        }
    }

    /// Nanoseconds from the origin to `delay` from now, never earlier than the truth, by
    /// the raw clock; `None` without one, or past `u64` nanoseconds (584 years).
    #[inline(always)]
    pub(crate) fn ns_after(&self, delay: Duration) -> Option<u64> {
        let raw = self.raw?;
        let delay = delay
            .as_secs()
            .checked_mul(1_000_000_000)?
            .checked_add(u64::from(delay.subsec_nanos()))?;
        raw.now_ceil().checked_add(delay)
    }

    /// The tick of the deadline `delay` from now (rounded up): by the raw clock where
    /// there is one, else as `tick_ceil(now + delay)` (about 30 years where that
    /// overflows).
    #[inline(always)]
    pub(crate) fn tick_after(&self, delay: Duration) -> u64 {
        if let Some(ns) = self.ns_after(delay) {
            return self.ticks.tick_ceil_ns(ns);
        }
        let now = self.now();
        let at = now.checked_add(delay).unwrap_or_else(|| far_after(now));
        self.ticks.tick_ceil(at)
    }

    /// About 30 years from now by the timer's clock: "never".
    pub(crate) fn far_future(&self) -> Instant {
        far_after(self.now())
    }

    /// The instant of a tick, saturating far beyond any real deadline.
    pub(crate) fn instant_of(&self, tick: u64) -> Instant {
        self.ticks
            .instant_of(tick)
            .unwrap_or_else(|| self.far_future())
    }

    #[inline]
    pub(crate) fn run_state(&self) -> u8 {
        self.run_state.load(Ordering::SeqCst)
    }

    #[inline]
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.run_state() != RUN
    }

    /// Callbacks scheduled and not finished: the shards' counts, then those in flight
    /// (read second: a callback leaves its shard's count only after joining `in_flight`).
    pub(crate) fn pending(&self) -> usize {
        let in_shards: usize = self
            .shards
            .iter()
            .map(|c| c.pending.load(Ordering::Acquire))
            .sum();
        in_shards + self.in_flight.0.load(Ordering::SeqCst)
    }

    /// `n` one-shot callbacks in flight ran or were given back.
    fn landed(&self, n: usize) {
        if n > 0 {
            self.in_flight.0.fetch_sub(n, Ordering::SeqCst);
            self.released();
        }
    }

    /// A pending callback finished (ran, was cancelled or taken back): wakes a graceful
    /// `shutdown` waiting for the last one.
    #[inline]
    pub(crate) fn released(&self) {
        if self.run_state() == SHUTTING_DOWN {
            let _guard = self.idle.0.lock();
            self.idle.1.notify_all();
        }
    }

    /// Blocks until no callback is pending (graceful shutdown). Whoever releases a pending
    /// callback notifies under `idle` if it sees `SHUTTING_DOWN`; we hold `idle` from the
    /// check to the wait. A releaser's count store and its `run_state` load can still pass
    /// our `SHUTTING_DOWN` store and count loads the other way round (store-load
    /// reordering; fencing every cancel for it would cost more than it saves), so the wait
    /// also re-checks every millisecond.
    pub(crate) fn wait_idle(&self) {
        let mut guard = self.idle.0.lock();
        while self.pending() > 0 {
            guard = self.idle.1.wait_for(guard, Duration::from_millis(1));
        }
    }

    /// Applies what a batch of runs counted.
    pub(crate) fn settle(&self, tally: &Tally) {
        if tally.fired > 0 {
            self.counters
                .fired
                .fetch_add(tally.fired, Ordering::Relaxed);
        }
    }

    /// A snapshot of the metrics: the shared counters plus those kept in the shards.
    pub(crate) fn metrics(&self) -> crate::metrics::Metrics {
        let mut m = self.counters.snapshot();
        for i in 0..self.shards.len() {
            let (scheduled, cancelled) = self.with_shard(i, |s| (s.scheduled, s.cancelled));
            m.scheduled += scheduled;
            m.cancelled += cancelled;
        }
        m
    }

    pub(crate) fn unpark_driver(&self) {
        if let Some(thread) = self.driver_thread.get() {
            thread.unpark();
        }
    }

    /// One round: fire what is due, then arm the wake-up. Returns the tick to park
    /// towards.
    ///
    /// That tick is the earliest deadline in any shard, or the previous target if that is
    /// earlier and still ahead: a producer woke the driver for a timer that was cancelled
    /// since (schedule + cancel of near timers while far ones wait is the common case), and
    /// raising the target back to the far timers would make the next such schedule wake
    /// the driver again. Parking too short is always safe; the driver re-reads the shards.
    pub(crate) fn turn(self: &Arc<Self>) -> Option<u64> {
        let _token = self.turning.lock();
        self.turn_locked()
    }

    /// The driver thread's turn: `None` if a worker holds the token (it is turning for a
    /// late driver). The driver does not wait for it: blocking on the token would make it
    /// sleep once more and wait for a core again when the worker is done.
    fn driver_turn(self: &Arc<Self>) -> Option<Option<u64>> {
        let _token = self.turning.try_lock()?;
        Some(self.turn_locked())
    }

    /// An idle worker at the earliest deadline plus the margin (`run_worker`): if the
    /// driver's turn is late (the earliest deadline is more than [`LATE_MARGIN_NS`] past
    /// and no turn has run since) and no one else is turning, runs the turn here and
    /// returns `true`. The driver, whenever it gets its
    /// core back, finds nothing due and parks to the next deadline.
    ///
    /// The same turn as the driver's, under the same token: timers are taken out under
    /// their shard's lock (a cancel still decides against fire there), only those due by
    /// the timer's clock, and the wake-up targets are published as the driver does.
    pub(crate) fn worker_turn(self: &Arc<Self>) -> bool {
        let due_at = self.due_at_ns.load(Ordering::Acquire);
        if due_at == u64::MAX || self.run_state() == STOPPED {
            return false;
        }
        if self.now_ns() < due_at.saturating_add(LATE_MARGIN_NS) {
            return false;
        }
        let Some(_token) = self.turning.try_lock() else {
            return false; // the driver (or another worker) is turning
        };
        // A turn may have run between our reads and the token.
        if self.due_at_ns.load(Ordering::Acquire) != due_at || self.run_state() == STOPPED {
            return false;
        }
        Counters::bump(&self.counters.worker_turns);
        self.turn_locked();
        true
    }

    /// With the system clock: the instant from which the driver counts as late for the
    /// earliest deadline the last turn saw (`None`: no such deadline, or a custom clock);
    /// with `backoff`, at least [`LATE_MARGIN_NS`] from now.
    fn late_after(&self, backoff: bool) -> Option<Instant> {
        if !self.system_clock || self.raw.is_none() {
            return None;
        }
        let due_at = self.due_at_ns.load(Ordering::Acquire);
        if due_at == u64::MAX {
            return None;
        }
        let mut ahead = due_at
            .saturating_add(LATE_MARGIN_NS)
            .saturating_sub(self.now_ns());
        if backoff {
            ahead = ahead.max(LATE_MARGIN_NS);
        }
        Instant::now().checked_add(Duration::from_nanos(ahead))
    }

    /// `turn` with the token held.
    fn turn_locked(self: &Arc<Self>) -> Option<u64> {
        let mut due = std::mem::take(&mut *self.due.lock());
        let now = self.now_tick();
        let kept = self.target.load(Ordering::Relaxed);
        let mut next: Option<u64> = (kept > now).then_some(kept);
        let mut sources = 0;
        for i in 0..self.shards.len() {
            let before = due.fires.len() + due.wakers.len();
            let mut first = true;
            // This shard fired something in this turn (then staging is paced).
            let mut busy = false;
            let shard_next = loop {
                let taken = due.fires.len() + due.wakers.len();
                let (more, shard_next) = self.with_shard(i, |s| {
                    if first {
                        s.sleep_until = AWAKE;
                    }
                    let (more, once) = s.take_due(i as u32, now, &mut due, CHUNK);
                    if once > 0 {
                        // Before the shard's count drops (the mirror store after this).
                        self.in_flight.0.fetch_add(once, Ordering::SeqCst);
                    }
                    (more, s.wheel.next_deadline_mut())
                });
                first = false;
                busy |= due.fires.len() + due.wakers.len() > taken;
                if !more {
                    self.prepare_window(i, busy);
                    break shard_next;
                }
                // A burst: start the workers on this chunk while we take the next one (and
                // let producers and finishing workers have the lock in between). `more` also
                // comes from a paused cascade (`Shard::take_due`), possibly with nothing taken.
                if !due.fires.is_empty() || !due.wakers.is_empty() {
                    self.fire(&mut due);
                }
            };
            next = min_tick(next, shard_next);
            sources += usize::from(due.fires.len() + due.wakers.len() > before);
        }
        if sources > 1 {
            // Several shards fired in this turn: keep deadline order across them.
            due.fires.sort_by_key(|f| f.tick);
        }
        if !due.fires.is_empty() || !due.wakers.is_empty() {
            self.fire(&mut due);
        }
        *self.due.lock() = due;
        // Publish the minimum next deadline; re-read each shard under its lock (ground rules).
        for i in 0..self.shards.len() {
            next = self.with_shard(i, |s| {
                let next = min_tick(next, s.wheel.next_deadline_mut());
                s.sleep_until = next.unwrap_or(u64::MAX).max(1);
                next
            });
        }
        self.target.store(next.unwrap_or(0), Ordering::Relaxed);
        let due_at = next.map_or(u64::MAX, |t| self.ticks.nanos_of_tick(t).min(u64::MAX - 1));
        self.due_at_ns.store(due_at, Ordering::Release);
        next
    }

    /// Nothing is due in shard `i`: moves its next 256-tick window down ahead of time
    /// ([`Wheel::prepare`](tickwheel_core::Wheel::prepare)), in steps of [`CASCADE_BUDGET`]
    /// timers with the lock released in between, until the window is in place or a timer
    /// falls due. So a burst's first timer of that window does not wait for the whole window
    /// to cascade (tickwheel-core ADR 0011); a timer falling due meanwhile waits for at most
    /// one step.
    ///
    /// `busy`: this turn fired timers of the shard (a burst is under way). Then at most
    /// [`BUSY_STEPS`] steps, unless the next window starts within [`URGENT`] ticks: staging
    /// is spread over the current window's ticks instead of taking the driver's whole core
    /// for the ~25 ticks after the window starts (fifth session), time the workers need on a
    /// 2-core machine. An idle turn (the early wake before a burst) stages all of it.
    fn prepare_window(&self, i: usize, busy: bool) {
        // Under loom one step per turn (each lock hold is a point the model explores).
        let steps = if cfg!(loom) { 1 } else { usize::MAX };
        for step in 0..steps {
            // Staging moves timers between levels, never changes the pending count.
            let more = self.with_shard_quiet(i, |s| {
                let nothing_due = s
                    .wheel
                    .next_deadline_mut()
                    .is_none_or(|deadline| deadline > self.now_tick());
                // By the wheel's clock, not the real one: a driver that lags behind is
                // still in the window the wheel is in.
                let paced = busy && step >= BUSY_STEPS && WINDOW - s.wheel.now() % WINDOW > URGENT;
                nothing_due && !paced && s.wheel.prepare(CASCADE_BUDGET)
            });
            if !more {
                break;
            }
        }
    }

    /// Wakes the async timers and dispatches the callbacks of one turn.
    fn fire(self: &Arc<Self>, due: &mut Due) {
        let now = self.now_ns();
        // Lateness is counted for the whole batch before anything is woken or run, so a
        // woken task reading the metrics sees its own timer counted.
        let mut lateness = LatenessCounts::new();
        for &(tick, _) in &due.wakers {
            lateness.add(now.saturating_sub(self.ticks.nanos_of_tick(tick)));
        }
        for f in &due.fires {
            lateness.add(now.saturating_sub(self.ticks.nanos_of_tick(f.tick)));
        }
        self.counters.record_lateness(&lateness);
        let mut tally = Tally::default();
        for (_, waker) in due.wakers.drain(..) {
            tally.fired += 1;
            if let Some(w) = waker {
                w.wake();
            }
        }
        match &self.workers {
            Some((tx, _)) => {
                // Earliest last: each batch is then split off the end in one copy, already
                // in the order a batch travels in (`WorkItem`), earliest batch first. (It was
                // `drain(..64).rev().collect()`, which also shifted the rest down per batch.)
                due.fires.reverse();
                while !due.fires.is_empty() {
                    let at = due.fires.len().saturating_sub(BATCH);
                    let batch: Vec<Fire> = due.fires.split_off(at);
                    let _ = tx.send(Some(batch));
                }
            }
            None => {
                let mut batch = std::mem::take(&mut due.fires);
                batch.reverse();
                self.run_batch(batch, None);
            }
        }
        self.settle(&tally);
    }

    /// Runs a batch of callbacks on this thread (a worker, or the inline driver).
    ///
    /// A slow callback must not hold up the rest of its batch: with `share`, before each
    /// callback, if more are left and no other batch is waiting (so another worker may be
    /// idle), the rest goes back to the channel for whoever is free. In a burst the channel
    /// is never empty and batches stay whole.
    ///
    /// `batch` is in reverse order (see `WorkItem`).
    pub(crate) fn run_batch(
        self: &Arc<Self>,
        mut batch: Vec<Fire>,
        share: Option<(&Sender<WorkItem>, &Receiver<WorkItem>)>,
    ) {
        let mut tally = Tally::default();
        let mut landed = 0;
        while let Some(fire) = batch.pop() {
            if self.run_state() == STOPPED {
                batch.push(fire);
                self.give_back(batch);
                break;
            }
            if let Some((tx, rx)) = share {
                if !batch.is_empty() && rx.is_empty() {
                    let _ = tx.send(Some(std::mem::take(&mut batch)));
                }
            }
            tally.fired += 1;
            match fire.work {
                Work::Once(f) => {
                    if catch_unwind(AssertUnwindSafe(|| f.run())).is_err() {
                        Counters::bump(&self.counters.panicked);
                    }
                    landed += 1;
                }
                Work::Repeat(mut task) => {
                    let panicked = catch_unwind(AssertUnwindSafe(&mut task.f)).is_err();
                    if panicked {
                        Counters::bump(&self.counters.panicked);
                    }
                    let next =
                        task.behavior
                            .next_tick(task.due, self.now_tick(), task.period_ticks);
                    task.due = next;
                    // A panicking repeating task is not run again: it is likely to panic
                    // every time. A graceful shutdown ends it after this run.
                    let again = !panicked && self.run_state() != SHUTTING_DOWN;
                    let outcome = self.with_shard(fire.shard as usize, |s| {
                        s.finish_repeat(fire.slot, task, next, again)
                    });
                    match outcome {
                        Ok(wake) => {
                            if wake {
                                self.unpark_driver();
                            }
                        }
                        Err((task, to_stop)) => {
                            if to_stop {
                                let pending = PendingTask::repeating(self.instant_of(next), *task);
                                self.returned.lock().push(pending);
                            } else {
                                drop(task); // outside every lock
                            }
                            self.released();
                        }
                    }
                }
            }
        }
        self.landed(landed);
        self.settle(&tally);
    }

    /// Callbacks taken off the wheel that will not run because the timer stopped: free their
    /// slots as cancelled and hand them to `stop`.
    ///
    /// A one-shot callback's slot was freed when it fired (its handle reports `Done`); a
    /// repeating task's slot is freed as cancelled here.
    fn give_back(&self, fires: Vec<Fire>) {
        let mut tasks = Vec::with_capacity(fires.len());
        let mut once = 0;
        for fire in fires {
            let wanted = match &fire.work {
                Work::Once(_) => {
                    once += 1;
                    Counters::bump(&self.counters.cancelled);
                    true
                }
                Work::Repeat(_) => {
                    self.with_shard(fire.shard as usize, |s| s.give_back_repeat(fire.slot))
                }
            };
            if wanted {
                tasks.push(fire.work.into_pending(self.instant_of(fire.tick)));
            }
        }
        self.returned.lock().extend(tasks);
        self.landed(once);
    }

    /// The driver thread's loop.
    pub(crate) fn run_driver(self: &Arc<Self>) {
        exact_wake_ups();
        loop {
            let Some(next) = self.driver_turn() else {
                if self.run_state() == STOPPED {
                    return; // `collect_after_stop` takes what is left in the shards
                }
                // A worker is turning: look again at the next tick.
                let tick = self.now_tick().saturating_add(1);
                self.clock.park_until(Some(self.instant_of(tick)));
                continue;
            };
            if self.run_state() == STOPPED {
                return;
            }
            let now = self.now_tick();
            if next.is_some_and(|t| t <= now) {
                continue;
            }
            // A far deadline: wake once PREPARE_LEAD ticks before it, so the turn then moves
            // the wheel's clock into the window before the deadline's and `prepare_window`
            // can stage the deadline's window while nothing is due. Without it the driver
            // sleeps through the time it could have used, and the first window of a burst
            // scheduled in advance cascades only when its first timer is already due.
            // Producers still wake the driver only for timers before `next` (`sleep_until`).
            let park = next.map(|t| {
                if t - now > PREPARE_LEAD {
                    t - PREPARE_LEAD
                } else {
                    t
                }
            });
            self.clock
                .park_until(park.map(|tick| self.instant_of(tick)));
        }
    }

    /// Moves the service to `SHUTTING_DOWN` and cancels every waiting repeating task;
    /// `false` if it already was shutting down or stopped.
    pub(crate) fn begin_shutdown(&self) -> bool {
        let won = self
            .run_state
            .compare_exchange(RUN, SHUTTING_DOWN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if won {
            for i in 0..self.shards.len() {
                let swept: Vec<Task> = self.with_shard(i, Shard::sweep_repeating);
                drop(swept);
            }
        }
        self.unpark_driver();
        won
    }

    /// Marks the service stopped; returns `false` if it already was.
    pub(crate) fn mark_stopped(&self) -> bool {
        let was = self.run_state.swap(STOPPED, Ordering::SeqCst);
        self.unpark_driver();
        was != STOPPED
    }

    /// After the driver has exited: close every shard and take back every callback that
    /// never ran, tell async timers, and dismiss the workers (they finish the callback they
    /// are running). What workers give back later is in `take_returned`.
    pub(crate) fn collect_after_stop(&self) -> Vec<PendingTask> {
        let mut out = Vec::new();
        let mut wakers = Vec::new();
        for i in 0..self.shards.len() {
            let (work, w) = self.with_shard(i, Shard::close);
            out.extend(
                work.into_iter()
                    .map(|(tick, work)| work.into_pending(self.instant_of(tick))),
            );
            wakers.extend(w);
        }
        for w in wakers {
            w.wake();
        }
        if let Some((tx, rx)) = &self.workers {
            while let Ok(item) = rx.try_recv() {
                self.give_back(item.unwrap_or_default());
            }
            for _ in 0..self.worker_count {
                let _ = tx.send(None);
            }
        }
        out
    }

    /// Callbacks given back by workers after `stop` (see `returned`).
    pub(crate) fn take_returned(&self) -> Vec<PendingTask> {
        std::mem::take(&mut *self.returned.lock())
    }
}

/// Asks the kernel to end the driver's timed parks on time: Linux lets a sleeping thread's
/// timer expire up to its *timer slack* late (50 µs by default) to batch wake-ups, and every
/// tick's callbacks wait for the driver's wake-up. With a slack of 1 ns the park ends as soon
/// as the kernel's timer fires: a 1 ms `park_timeout` overshot by a median of ~98 µs with
/// the default slack and ~50 µs with this, on the 2-core KVM box (`BENCHMARKS.md`, ninth
/// session). Only the driver's own thread is changed, and only its timed waits (it wakes at
/// most once per tick with work, never while idle), so the cost is a few more distinct timer
/// interrupts; a failure (an unusual kernel) keeps the default slack.
fn exact_wake_ups() {
    #[cfg(target_os = "linux")]
    {
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    }
}

fn min_tick(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A worker thread's loop: run batches of callbacks until told to stop.
///
/// After the dismissal (`None`), batches still queued (a remainder handed back while
/// `stop` was collecting) are given back rather than lost (`run_batch` sees `STOPPED`).
pub(crate) fn run_worker(inner: &Arc<Inner>, rx: &Receiver<WorkItem>) {
    let share = match &inner.workers {
        Some((tx, _)) if inner.worker_count > 1 => Some((tx, rx)),
        _ => None,
    };
    // The last stand-in turn was refused (someone else is turning, or stopped): wait at
    // least a margin before trying again, so an idle worker never spins on the token.
    let mut refused = false;
    loop {
        // With the real clock an idle worker also waits only until the earliest deadline
        // plus the margin: if the driver has not turned by then, this worker does.
        let got = match inner.late_after(refused) {
            Some(at) => match rx.recv_deadline(at) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    refused = !inner.worker_turn();
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                Ok(item) => item,
            },
            None => match rx.recv() {
                Ok(item) => item,
                Err(_) => break,
            },
        };
        let Some(batch) = got else { break };
        refused = false;
        inner.run_batch(batch, share);
    }
    while let Ok(item) = rx.try_recv() {
        match item {
            Some(batch) => inner.run_batch(batch, None),
            None => {
                // Another worker's dismissal: hand it back, or that worker never exits.
                if let Some((tx, _)) = &inner.workers {
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

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    /// The driver's thread asks for a 1 ns timer slack and gets it; other threads keep theirs.
    #[test]
    fn the_driver_thread_parks_with_a_1_ns_timer_slack() {
        let before = rustix::thread::current_timer_slack().expect("PR_GET_TIMERSLACK");
        let on_driver = std::thread::spawn(|| {
            super::exact_wake_ups();
            rustix::thread::current_timer_slack().expect("PR_GET_TIMERSLACK")
        })
        .join()
        .expect("thread");
        assert_eq!(on_driver, 1);
        assert_eq!(
            rustix::thread::current_timer_slack().expect("PR_GET_TIMERSLACK"),
            before,
            "only the calling thread changes"
        );
    }
}
