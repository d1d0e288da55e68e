//! [`Wheel`]: insert, remove, reset, poll, and the list surgery behind them.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use core::mem;
use core::num::NonZeroU32;

use crate::entry::{at, Entry, Timer, TimerKey, NIL};
use crate::level::{Level, UNSORTED};
use crate::pool::{addr, Chain, Pool, ITEMS, MAX_CHUNKS, WORDS};
use crate::tick::{
    level_for, place_for, slot_for, slot_start, Tick, BITS_PER_LEVEL, NUM_LEVELS, SLOTS,
};
use crate::InsertError;

/// The most timers a wheel holds. Bounded so that, whatever the garbage, the pool's item
/// addresses fit a `u32` (see [`Wheel::compact_all`]).
pub(crate) const MAX_TIMERS: usize = 1 << 30;

/// Slots are compacted, one per insert and round-robin, while the wheel's garbage exceeds
/// `GARBAGE_HALVES / 2 * len + slack` items (`Wheel::slack`, see `GARBAGE_SLACK`). With 3 halves (1.5 garbage items per
/// live timer) the slots hold about 2.5 items per live timer, 10.7 bytes with the chunk
/// links, so a `Wheel<u64>` stays under 35 bytes per timer; the slot compacted next is the
/// one compacted longest ago, so with cancels spread over the slots a compaction reads
/// about `live + garbage` entries to drop `garbage` items: measured ~1.35 reads per cancel
/// (0.35 live re-reads per garbage item dropped, churn at N = 1e6; ADR 0024).
const GARBAGE_HALVES: usize = 3;

/// Index in `Wheel::levels` of the staging table: a second level-0 table for the next
/// rotation, filled by [`Wheel::prepare`] (ADR 0011).
const STAGE: usize = NUM_LEVELS;

/// Tables in `Wheel::levels`: the levels and the staging table.
const TABLES: usize = NUM_LEVELS + 1;

/// For each table, the mask that turns a deadline filed there into its slot's start (the
/// staging table's slots are single ticks, as level 0's).
const START_MASK: [u64; TABLES] = {
    let mut masks = [0; TABLES];
    let mut level = 0;
    while level < NUM_LEVELS {
        masks[level] = u64::MAX << (level as u32 * BITS_PER_LEVEL);
        level += 1;
    }
    masks[STAGE] = u64::MAX;
    masks
};
/// The garbage allowed beyond `GARBAGE_HALVES / 2` per live timer: 64 items, or, once
/// [`Wheel::reserve`] (or [`Wheel::with_capacity`]) has made room for `n` timers, `4 × n` up to
/// `MAX_GARBAGE_SLACK`. A compaction reads `live + garbage` entries to drop `garbage` items,
/// so a small wheel with more garbage per live timer reads fewer entries per cancel (churn at
/// N = 1e3: 350 -> ~330 instructions per op, ADR 0015); at N >= 1e4 the 1.5 per timer
/// dominates. The extra memory is at most 4096 items (17.5 KiB) per wheel, a sixth of its
/// fixed slot tables. A wheel from [`Wheel::new`] that grows by inserts keeps 64.
const GARBAGE_SLACK: usize = 64;

/// The largest slack `reserve` sets (see `GARBAGE_SLACK`).
const MAX_GARBAGE_SLACK: usize = 4096;

/// Timers the inbox holds before they are filed into their slots (see `Wheel::inbox`).
const INBOX_LEN: u32 = 512;

/// The address of inbox item 0 (item `i` is at `INBOX | i`): above every pool address
/// (`pool::MAX_CHUNKS`).
const INBOX: u32 = u32::MAX - (INBOX_LEN - 1);
/// A poll files the inbox when it holds this many timers, even if none of them is due:
/// enough for the filing's fixed cost to be shared, few enough that the entries it re-reads
/// are still in cache (ADR 0043).
const INBOX_POLL_FLUSH: u32 = 64;
const _: () = assert!(INBOX_LEN.is_power_of_two() && INBOX.is_multiple_of(INBOX_LEN));
const _: () = assert!(MAX_CHUNKS as u64 * WORDS as u64 <= INBOX as u64);

/// A hierarchical timing wheel holding timers with values of type `T`.
///
/// See the [crate documentation](crate) for the model, the guarantees and the cost of each
/// operation.
///
/// # Examples
///
/// ```
/// use tickwheel_core::Wheel;
///
/// let mut wheel = Wheel::new();
/// let a = wheel.insert(30, "a");
/// wheel.insert(10, "b");
/// wheel.insert(10, "c");
/// assert_eq!(wheel.next_deadline(), Some(10));
/// assert_eq!(wheel.remove(a), Some("a"));
///
/// let mut fired = Vec::new();
/// while let Some((_key, value)) = wheel.poll(100) {
///     fired.push((wheel.now(), value));
/// }
/// assert_eq!(fired, [(10, "b"), (10, "c")]);
/// assert!(wheel.is_empty());
/// ```
#[derive(Clone)]
pub struct Wheel<T> {
    entries: Vec<Entry<T>>,
    /// Head of the free list threaded through vacant entries.
    free: u32,
    /// Timers inserted so far (wrapping). With `cancels` and `settled` it gives the number
    /// of pending timers ([`live`](Self::live)) and, with `pressure_base`, the garbage
    /// pressure ([`pressure`](Self::pressure)): an insert and a cancel, the hot pair, each
    /// bump one counter and store nothing else (ADR 0039).
    inserts: u64,
    /// What else changed the number of pending timers (wrapping): +1 per reset (which
    /// `cancels` counts), −1 per timer fired.
    settled: u64,
    /// The wheel's clock. Every pending timer has `deadline >= elapsed` and sits at
    /// `level_for(elapsed, deadline)`, slot `slot_for(deadline, level)`: a timer's place is a
    /// function of its deadline and the clock, so entries need not store it.
    elapsed: Tick,
    /// Bit `l` set: level `l` holds at least one timer.
    nonempty: u16,
    /// A lower bound of the start of the earliest occupied slot (`Tick::MAX` when empty): a
    /// poll before it has nothing to do. Lowered by every filing, made exact by polls.
    horizon: Tick,
    /// The levels, then the staging table (`STAGE`).
    levels: Box<[Level; TABLES]>,
    /// The slots' items (slab indices), in chains of one-cache-line chunks.
    pool: Pool,
    /// Reused buffer for sorting a slot (see `sort_slot`).
    scratch: Vec<u32>,
    /// Generation given to entries pushed onto the slab. Raised above every generation a
    /// discarded entry had (by `clear`, `drain`, `shrink_to_fit`) so old keys stay dead.
    fresh_gen: u32,
    /// The earliest pending effective deadline, exactly (meaningless when `len` is 0):
    /// lowered by every filing; recomputed (`refresh_next`) only when the timer removed,
    /// reset or fired had this deadline. Only a lower bound while `next_stale` is set.
    next: Tick,
    /// `true` after [`remove_lazy`](Self::remove_lazy) took the earliest timer out without
    /// recomputing `next`: `next` is then a lower bound of the pending deadlines until
    /// `refresh_next` or `clear` makes it exact (filings keep it a lower bound).
    next_stale: bool,
    /// The part of the garbage pressure (see [`pressure`](Self::pressure)) that the
    /// counters `inserts` and `cancels` do not give: −3 per reset (a reset counts +5 in
    /// `cancels` for a net +2, one more garbage item), +3 per firing, −2 per garbage item
    /// dropped, −2 per unit of `slack` (wrapping).
    pressure_base: i64,
    /// The garbage allowed beyond 1.5 items per live timer (see `GARBAGE_SLACK`): raised by
    /// `reserve`, never lowered.
    slack: usize,
    /// Cancels and resets so far: a slot's `min` is exact while this equals its `exact_at`.
    /// Also counts a cancel into `live` (−1) and `pressure` (+5).
    cancels: u64,
    /// Where the round-robin compaction looks next: `table * SLOTS + slot`.
    compact_cursor: usize,
    /// A cascade paused by [`Wheel::poll_budgeted`]: `(level, slot)` of the slot being moved
    /// down. The clock reads its start; the items not moved yet are still its chain, the
    /// moved ones are in the levels below. See `cascade_step`.
    /// `cascade_level` is 0 when no cascade is paused (level 0 never cascades): the hot paths
    /// test one integer.
    cascade_level: usize,
    cascade_slot: usize,
    /// 0, or the first tick of the window of the next level-0 rotation being pre-cascaded
    /// (see [`Wheel::prepare`]): the window's timers are moving from their level-1 slot to
    /// the staging table (`pre_moving`) or are all there.
    pre_window: Tick,
    pre_moving: bool,
    /// `pre_window >> 8` while a window is staged (not moving), else `u64::MAX` (no
    /// deadline's high digits): [`place`](Self::place) tests one integer.
    staged_block: u64,
    /// `true` while a window is staged or a cascade is paused: filing then needs
    /// [`place`](Self::place)'s and the paused cascade's checks. One flag for the hot path.
    odd: bool,
    /// Timers inserted or reset since the slots were last looked at, in order (slab
    /// indices; item `i`'s address is `INBOX | i`): filed into their slots in one pass
    /// ([`flush_inbox`](Self::flush_inbox)) when `INBOX_LEN` have come, and before anything
    /// reads a slot or the horizon (ADR 0039), except a poll while none of them is due and
    /// fewer than `INBOX_POLL_FLUSH` wait (see [`poll`](Self::poll)).
    inbox: Box<[u32; INBOX_LEN as usize]>,
    /// Items in `inbox`.
    inbox_len: u32,
}

/// What one [`Wheel::poll_budgeted`] call did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step<T> {
    /// A timer whose deadline has come, as [`Wheel::poll`] hands it out.
    Fired(TimerKey, T),
    /// Nothing is due at `now`: the clock now reads `now`, as after `poll`'s `None`.
    Idle,
    /// The budget was spent moving timers down a level before any could be handed out. Call
    /// again (now or later) to go on; nothing was skipped, and no timer is due earlier than
    /// [`Wheel::now`].
    Paused,
}

/// Start generations of different wheels far apart, so a key from one wheel is not taken for
/// a key of another.
fn wheel_seed() -> u32 {
    #[cfg(target_has_atomic = "32")]
    {
        use core::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0x2545_F491);
        NEXT.fetch_add(0x9E37_79B9, Ordering::Relaxed)
    }
    #[cfg(not(target_has_atomic = "32"))]
    {
        0
    }
}

impl<T> Wheel<T> {
    /// An empty wheel whose clock reads tick 0.
    ///
    /// # Examples
    ///
    /// ```
    /// let wheel = tickwheel_core::Wheel::<()>::new();
    /// assert_eq!(wheel.now(), 0);
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self::starting_at(0)
    }

    /// An empty wheel with room for `capacity` timers before it allocates again.
    ///
    /// # Examples
    ///
    /// ```
    /// let wheel = tickwheel_core::Wheel::<u64>::with_capacity(1000);
    /// assert!(wheel.capacity() >= 1000);
    /// ```
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        let mut wheel = Self::new();
        wheel.reserve(capacity);
        wheel
    }

    /// An empty wheel whose clock reads `now`. Useful when ticks count from an epoch, e.g.
    /// milliseconds since 1970.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::starting_at(1_700_000_000_000);
    /// wheel.insert(1_700_000_000_500, "half a second later");
    /// assert_eq!(wheel.poll(1_700_000_000_499), None);
    /// assert!(wheel.poll(1_700_000_000_500).is_some());
    /// ```
    #[must_use]
    pub fn starting_at(now: Tick) -> Self {
        Wheel {
            entries: Vec::new(),
            free: NIL,
            inserts: 0,
            settled: 0,
            elapsed: now,
            nonempty: 0,
            horizon: Tick::MAX,
            levels: Box::new([Level::EMPTY; TABLES]),
            pool: Pool::new(),
            scratch: Vec::new(),
            fresh_gen: wheel_seed(),
            next: Tick::MAX,
            next_stale: false,
            pressure_base: -2 * GARBAGE_SLACK as i64,
            slack: GARBAGE_SLACK,
            cancels: 0,
            compact_cursor: 0,
            cascade_level: 0,
            cascade_slot: 0,
            pre_window: 0,
            pre_moving: false,
            staged_block: u64::MAX,
            odd: false,
            inbox: Box::new([NIL; INBOX_LEN as usize]),
            inbox_len: 0,
        }
    }

    /// The wheel's clock: the latest `now` given to [`poll`](Self::poll), or, while polls
    /// are handing out timers, the deadline of the timer handed out last, or, while a
    /// [`poll_budgeted`](Self::poll_budgeted) cascade is paused, the start of the window it
    /// is moving down.
    #[must_use]
    pub fn now(&self) -> Tick {
        self.elapsed
    }

    /// Number of pending timers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.live()
    }

    /// `true` when no timer is pending.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.live() == 0
    }

    /// Number of timers the wheel can hold without allocating.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Makes room for at least `additional` more timers than are pending now.
    ///
    /// A small wheel that reserves room also keeps more cancelled timers' items before it
    /// compacts its slots (4 per timer reserved, at most 4096 in all, beyond the 1.5 per
    /// live timer every wheel allows): fewer reads per cancel, at most 17.5 KiB more.
    ///
    /// # Panics
    ///
    /// If the new capacity overflows `usize` (as [`Vec::reserve`]).
    pub fn reserve(&mut self, additional: usize) {
        let live = self.live();
        let vacant = self.entries.len() - live;
        if additional > vacant {
            self.entries.reserve(additional - vacant);
        }
        // More garbage allowed for a small wheel that reserved room (see `GARBAGE_SLACK`).
        let slack = (live.saturating_add(additional))
            .saturating_mul(4)
            .clamp(GARBAGE_SLACK, MAX_GARBAGE_SLACK);
        if slack > self.slack {
            self.add_pressure(-2 * (slack - self.slack) as i64);
            self.slack = slack;
        }
        // The chunks the slots may need for that many timers, garbage included (its bound,
        // plus what cancels can add while the round-robin compaction walks once over every
        // slot), and a partly filled head and tail chunk per slot.
        let items = (live + additional) * (2 + GARBAGE_HALVES) / 2 + self.slack + SLOTS * TABLES;
        self.pool
            .reserve_total(items / ITEMS as usize + 2 * SLOTS * TABLES);
        // The sort buffer (see `sort_slot`): 4 bytes per timer, touched only if a slot
        // that large is ever sorted.
        self.scratch.reserve(live + additional);
    }

    /// Adds a timer that fires at `deadline` and returns its key. O(1) amortised: the timer
    /// is queued in a 512-item inbox, and the insert that fills it files all 512 into their
    /// slots (as does the next poll that may find one of them due, or finds 64 queued). An
    /// insert that grows the wheel (no removed or fired timer's entry to reuse) files its
    /// timer at once.
    ///
    /// A `deadline` at or before [`now`](Self::now) fires at the next [`poll`](Self::poll);
    /// its effective deadline is `now()`. Every `u64` is a valid deadline.
    ///
    /// # Panics
    ///
    /// If the wheel already holds 2³⁰ timers (about a billion); see
    /// [`try_insert`](Self::try_insert) for the non-panicking form.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let key = wheel.insert(u64::MAX, "the end of time");
    /// assert_eq!(wheel.deadline(key), Some(u64::MAX));
    /// ```
    #[inline(always)]
    pub fn insert(&mut self, deadline: Tick, value: T) -> TimerKey {
        match self.try_insert(deadline, value) {
            Ok(key) => key,
            Err(_) => panic!("tickwheel: a wheel holds at most {MAX_TIMERS} timers"),
        }
    }

    /// Like [`insert`](Self::insert), but hands the value back instead of panicking when the
    /// wheel is full.
    ///
    /// # Errors
    ///
    /// [`InsertError`] (holding `value`) if 2³⁰ timers are pending.
    #[inline(always)]
    pub fn try_insert(&mut self, deadline: Tick, value: T) -> Result<TimerKey, InsertError<T>> {
        let deadline = deadline.max(self.elapsed);
        if self.free != NIL {
            // A vacant entry: fewer than `entries.len() <= MAX_TIMERS` timers are pending.
            debug_assert!(self.live() < MAX_TIMERS);
            self.inserts = self.inserts.wrapping_add(1);
            let index = self.free;
            // Queued before the entry is written: until then any item naming it is garbage.
            let pos = self.queue(index, deadline);
            let entry = &mut self.entries[index as usize];
            let Some((gen, next_free)) = entry.vacancy() else {
                unreachable!("free list links to an occupied entry")
            };
            *entry = Entry::Occupied(Timer {
                deadline,
                value,
                gen,
                pos,
            });
            self.free = next_free;
            self.flush_inbox_if_full();
            Ok(TimerKey { index, gen })
        } else {
            self.insert_growing(deadline, value)
        }
    }

    /// [`try_insert`](Self::try_insert) when every entry is occupied: the slab grows, up to
    /// `MAX_TIMERS` entries. Kept out of line so that the common path (a vacant entry) is
    /// small enough to be inlined into the caller's loop.
    #[cold]
    #[inline(never)]
    fn insert_growing(&mut self, deadline: Tick, value: T) -> Result<TimerKey, InsertError<T>> {
        if self.live() >= MAX_TIMERS {
            return Err(InsertError(value));
        }
        // The slab grows only while no entry is vacant, as when a wheel is first filled: the
        // timer is filed at once, without the inbox's round trip (the entry it would re-read
        // is the one written here). Whatever is queued is filed first: it is older, and ties
        // keep their order.
        self.flush_inbox_if_any();
        self.inserts = self.inserts.wrapping_add(1);
        let index = self.entries.len() as u32;
        let gen = self.fresh_gen;
        // Filed before the entry exists: a compaction the filing starts sees no item of it.
        let pos = self.file(index, deadline);
        self.entries.push(Entry::Occupied(Timer {
            deadline,
            value,
            gen,
            pos,
        }));
        Ok(TimerKey { index, gen })
    }

    /// Cancels a timer and returns its value. O(1).
    ///
    /// `None` if the key names no pending timer: it fired, was removed, the wheel was
    /// cleared, or it belongs to another wheel.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let key = wheel.insert(5, 'x');
    /// assert_eq!(wheel.remove(key), Some('x'));
    /// assert_eq!(wheel.remove(key), None);
    /// ```
    #[inline]
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        let timer = self.take_live(key)?;
        if timer.deadline == self.next {
            self.refresh_next();
        }
        Some(timer.value)
    }

    /// Like [`remove`](Self::remove), but when the removed timer was the earliest, the new
    /// earliest deadline is not looked up now: it is found by the next
    /// [`next_deadline_mut`](Self::next_deadline_mut) (or a poll that needs it). O(1), and cheaper
    /// than `remove` when the timers removed are the earliest ones and are replaced by later
    /// ones, as with timeouts that are mostly cancelled: `remove` then looks for the next
    /// timer each time (the timer service's schedule + cancel pair).
    ///
    /// Until then [`next_deadline`](Self::next_deadline) returns a lower bound of the
    /// pending deadlines (never later than the earliest one, so a loop sleeping until it
    /// may wake early, never late); `next_deadline_mut` is always exact.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let soon = wheel.insert(5, "soon");
    /// wheel.insert(50, "later");
    /// assert_eq!(wheel.remove_lazy(soon), Some("soon"));
    /// assert!(wheel.next_deadline().is_some_and(|d| d <= 50)); // a lower bound
    /// assert_eq!(wheel.next_deadline_mut(), Some(50)); // exact
    /// assert_eq!(wheel.next_deadline(), Some(50));
    /// ```
    #[inline]
    pub fn remove_lazy(&mut self, key: TimerKey) -> Option<T> {
        let timer = self.take_live(key)?;
        // `next` stays a lower bound: every other pending deadline is at or after it.
        self.next_stale |= timer.deadline == self.next;
        Some(timer.value)
    }

    /// Takes the timer `key` names out of its entry (`remove` and `remove_lazy` without the
    /// minimum's upkeep). The entry alone: its item in the slot is garbage from now on (no
    /// longer pointed at), and the slot is not touched (see `garbage`, `cancels`,
    /// `refresh_next`).
    #[inline(always)]
    fn take_live(&mut self, key: TimerKey) -> Option<Timer<T>> {
        let entry = self.entries.get_mut(key.index as usize)?;
        entry.live(key.gen)?;
        let vacant = Entry::vacant(key.gen.wrapping_add(1), self.free);
        let Entry::Occupied(timer) = mem::replace(entry, vacant) else {
            unreachable!("checked occupied above")
        };
        self.free = key.index;
        // One timer fewer, one more garbage item: `live` −1, `pressure` +5.
        self.cancels += 1;
        Some(timer)
    }

    /// Moves a pending timer to a new deadline. O(1). Returns `false` (and does nothing) if
    /// the key names no pending timer.
    ///
    /// For ordering, a reset counts as a new insertion: among timers with equal deadlines the
    /// reset one fires last. A `deadline` at or before [`now`](Self::now) fires at the next
    /// poll.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let key = wheel.insert(5, "idle timeout");
    /// assert!(wheel.reset(key, 50)); // activity: push the timeout back
    /// assert_eq!(wheel.poll(49), None);
    /// assert_eq!(wheel.poll(50), Some((key, "idle timeout")));
    /// ```
    pub fn reset(&mut self, key: TimerKey, deadline: Tick) -> bool {
        let deadline = deadline.max(self.elapsed);
        let Some(timer) = self
            .entries
            .get_mut(key.index as usize)
            .and_then(|e| e.live_mut(key.gen))
        else {
            return false;
        };
        let old = mem::replace(&mut timer.deadline, deadline);
        // The entry points at the new item: the old one is garbage from now on.
        let pos = self.queue(key.index, deadline);
        self.set_pos(key.index, pos);
        self.flush_inbox_if_full();
        // One more garbage item (`pressure` +2), the same number of timers.
        self.cancels += 1;
        self.settled = self.settled.wrapping_add(1);
        self.add_pressure(-3);
        if old == self.next {
            self.refresh_next();
        }
        self.bound_garbage_now();
        true
    }

    /// The effective deadline of a pending timer: the deadline it was given, or the clock
    /// reading at insert (or reset) if that deadline had already passed.
    #[must_use]
    pub fn deadline(&self, key: TimerKey) -> Option<Tick> {
        Some(
            self.entries
                .get(key.index as usize)?
                .live(key.gen)?
                .deadline,
        )
    }

    /// The value of a pending timer.
    #[must_use]
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        Some(&self.entries.get(key.index as usize)?.live(key.gen)?.value)
    }

    /// The value of a pending timer, mutably.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let key = wheel.insert(5, 1);
    /// *wheel.get_mut(key).unwrap() += 1;
    /// assert_eq!(wheel.get(key), Some(&2));
    /// ```
    #[must_use]
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        Some(
            &mut self
                .entries
                .get_mut(key.index as usize)?
                .live_mut(key.gen)?
                .value,
        )
    }

    /// `true` if the timer `key` named has fired or been removed, and no later timer in its
    /// slab entry has left the wheel since. `false` while it is pending, once a later timer of
    /// the same entry has fired or been removed, after [`clear`](Self::clear) or
    /// [`drain`](Self::drain), and for a key of another wheel (barring a generation clash, as
    /// for every stale key).
    ///
    /// This lets a caller keep a per-entry record of how the last timer left (indexed by the
    /// low 32 bits of [`TimerKey::to_u64`], the entry's index) without storing a generation
    /// beside it: the record is `key`'s while this returns `true`. The timer service keeps one
    /// byte per one-shot callback this way.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let first = wheel.insert(5, 'a');
    /// assert!(!wheel.left_last(first)); // pending
    /// wheel.remove(first);
    /// assert!(wheel.left_last(first));
    /// let second = wheel.insert(9, 'b'); // reuses the entry `first` left
    /// assert!(wheel.left_last(first)); // `second` is pending: the entry's last leaver is `first`
    /// assert_eq!(wheel.poll(9).map(|(_, v)| v), Some('b'));
    /// assert!(wheel.left_last(second)); // fired
    /// assert!(!wheel.left_last(first));
    /// ```
    #[must_use]
    #[inline]
    pub fn left_last(&self, key: TimerKey) -> bool {
        self.entries
            .get(key.index as usize)
            .is_some_and(|entry| entry.gen() == key.gen.wrapping_add(1))
    }

    /// `true` if the key names a pending timer of this wheel.
    #[must_use]
    pub fn contains(&self, key: TimerKey) -> bool {
        self.deadline(key).is_some()
    }

    /// The earliest pending deadline, exactly, or `None` if the wheel is empty. O(1).
    ///
    /// This is how long an event loop may sleep: until `next_deadline()`, or until new work
    /// arrives. It never walks empty slots; it reads at most one occupancy bitmap per level.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// assert_eq!(wheel.next_deadline(), None);
    /// wheel.insert(86_400_000 * 365 * 3, "reminder in 3 years");
    /// wheel.insert(30_000, "heartbeat");
    /// assert_eq!(wheel.next_deadline(), Some(30_000));
    /// ```
    ///
    /// After [`remove_lazy`](Self::remove_lazy) took out the earliest timer, this is only a
    /// lower bound (never later than the earliest pending deadline) until
    /// [`next_deadline_mut`](Self::next_deadline_mut) or a poll makes it exact again.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Tick> {
        (self.live() != 0).then_some(self.next)
    }

    /// The earliest pending deadline, exactly, or `None` if the wheel is empty, also after
    /// [`remove_lazy`](Self::remove_lazy). O(1) unless a `remove_lazy` left it to be looked
    /// up; then it costs what [`remove`](Self::remove) would have spent on it, once.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let first = wheel.insert(10, ());
    /// wheel.insert(20, ());
    /// wheel.remove_lazy(first);
    /// assert_eq!(wheel.next_deadline_mut(), Some(20));
    /// ```
    #[must_use]
    pub fn next_deadline_mut(&mut self) -> Option<Tick> {
        if self.next_stale {
            self.refresh_next();
        }
        self.next_deadline()
    }

    /// Advances the clock to `now` and hands out one timer whose deadline has come, or `None`
    /// when none is left. Call it until it returns `None`.
    ///
    /// Timers come out in order of effective deadline, timers with equal deadlines in the
    /// order they were inserted (or reset). Right after a timer is handed out, [`now`]
    /// reads its deadline, so timers inserted between two polls of one round are ordered
    /// correctly too; the round's `None` sets the clock to `now`. A `now` earlier than
    /// [`now`](Self::now) is taken as `now()`: the clock never runs backwards.
    ///
    /// Cost: O(1) per timer handed out plus O(1) per timer moved down a level ("cascaded";
    /// each timer moves at most once per level, 10 times in its life). Elapsed ticks cost
    /// nothing: a jump of years over an empty stretch reads a few bitmaps.
    ///
    /// [`now`]: Self::now
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// wheel.insert(100, "later");
    /// wheel.insert(20, "sooner");
    /// assert_eq!(wheel.poll(19), None);
    /// assert_eq!(wheel.poll(1_000).map(|(_, v)| v), Some("sooner"));
    /// assert_eq!(wheel.now(), 20);
    /// assert_eq!(wheel.poll(1_000).map(|(_, v)| v), Some("later"));
    /// assert_eq!(wheel.poll(1_000), None);
    /// assert_eq!(wheel.now(), 1_000);
    /// ```
    #[inline]
    pub fn poll(&mut self, now: Tick) -> Option<(TimerKey, T)> {
        if self.cascade_level != 0 {
            self.flush_inbox_if_any();
            self.finish_cascade();
        }
        let now = now.max(self.elapsed);
        // The inbox waits while none of its timers is due (`next` is a lower bound of their
        // deadlines) and it holds few: filing them at a later clock is what inserting them
        // later would do (they are newer than every filed timer, so ties keep their order),
        // and the slots this poll reaches (cascades, garbage) are the same either way.
        if now >= self.next || self.inbox_len >= INBOX_POLL_FLUSH {
            self.flush_inbox_if_any();
        }
        if now < self.horizon {
            self.elapsed = now;
            return None;
        }
        self.poll_due(now)
    }

    /// [`poll`](Self::poll) once `now` has reached the horizon.
    fn poll_due(&mut self, now: Tick) -> Option<(TimerKey, T)> {
        loop {
            let Some((level, slot)) = self.front() else {
                self.elapsed = now;
                self.horizon = Tick::MAX;
                return None;
            };
            if self.at_window(level, slot) {
                if now < self.pre_window {
                    self.elapsed = now;
                    self.horizon = self.pre_window;
                    return None;
                }
                self.finish_pre();
                self.enter_window();
                continue;
            }
            let start = slot_start(self.elapsed, level, slot);
            if start > now {
                self.elapsed = now;
                self.horizon = start;
                return None;
            }
            self.elapsed = start;
            if level == 0 {
                match self.pop_front(slot) {
                    Some(fired) => return Some(fired),
                    None => continue, // only garbage was left in the slot
                }
            }
            self.start_cascade(level, slot);
            self.finish_cascade();
        }
    }

    /// [`poll`](Self::poll) with bounded work: moves at most about `budget` timers down a
    /// level (whole 64-byte lines of 15, at least one line) before it returns, so one call
    /// never takes time proportional to the number of timers due in one slot.
    ///
    /// With 1 ms ticks, every timer due in the same 256 ms window sits in one slot until that
    /// window starts, and `poll` then moves them all to the slots of single ticks before it
    /// hands out the first: with a million timers that is milliseconds of work in one call.
    /// `poll_budgeted` does the same work in as many calls as the budget requires, returning
    /// [`Step::Paused`] in between, so a caller holding a lock can release it (producers keep
    /// inserting and removing), or an event loop can handle I/O. Each call resumes where the
    /// last one stopped, whatever `now` it is given.
    ///
    /// Every guarantee of `poll` holds: never early, exactly once, ties in insertion order,
    /// [`next_deadline`](Self::next_deadline) exact also while paused. While a cascade is
    /// paused, inserting, removing and resetting stay O(1), except that removing or
    /// resetting the earliest pending timer first completes the cascade (the next earliest
    /// may be on either side of it), as does a plain [`poll`](Self::poll) call. The clock reads the window's start while paused: a timer
    /// inserted then with an earlier deadline is due at that start, as with `poll`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel_core::{Step, Wheel};
    ///
    /// let mut wheel = Wheel::new();
    /// for i in 0..1_000u64 {
    ///     wheel.insert(300 + i % 200, i); // all in the window of ticks 256..512
    /// }
    /// let (mut fired, mut pauses) = (Vec::new(), 0);
    /// loop {
    ///     match wheel.poll_budgeted(1_000, 64) {
    ///         Step::Fired(_key, value) => fired.push(value),
    ///         Step::Paused => pauses += 1, // e.g. release a lock, handle I/O, then go on
    ///         Step::Idle => break,
    ///     }
    /// }
    /// assert_eq!(fired.len(), 1_000);
    /// assert!(pauses >= 10); // ~75 timers moved per call: 5 lines of 15
    /// assert_eq!(fired[..3], [0, 200, 400]); // deadline order, ties in insertion order
    /// ```
    pub fn poll_budgeted(&mut self, now: Tick, budget: usize) -> Step<T> {
        let mut budget = budget;
        let mut worked = false;
        self.flush_inbox_if_any();
        if let Some((level, slot)) = self.cascading() {
            worked = true;
            if !self.cascade_step(level, slot, &mut budget) {
                return Step::Paused;
            }
        }
        let now = now.max(self.elapsed);
        if now < self.horizon {
            self.elapsed = now;
            return Step::Idle;
        }
        loop {
            let Some((level, slot)) = self.front() else {
                self.elapsed = now;
                self.horizon = Tick::MAX;
                return Step::Idle;
            };
            if self.at_window(level, slot) {
                if now < self.pre_window {
                    self.elapsed = now;
                    self.horizon = self.pre_window;
                    return Step::Idle;
                }
                if self.pre_moving {
                    worked = true;
                    if !self.pre_step(&mut budget) {
                        return Step::Paused;
                    }
                }
                self.enter_window();
                continue;
            }
            let start = slot_start(self.elapsed, level, slot);
            if start > now {
                self.elapsed = now;
                self.horizon = start;
                return Step::Idle;
            }
            if level != 0 && budget == 0 && worked {
                // Spent on an earlier cascade of this call; start this one next time. The
                // clock must not move to the slot's start before its cascade begins: the
                // slot's timers would then not be where their deadlines say.
                return Step::Paused;
            }
            self.elapsed = start;
            if level == 0 {
                match self.pop_front(slot) {
                    Some((key, value)) => return Step::Fired(key, value),
                    None => continue, // only garbage was left in the slot
                }
            }
            worked = true;
            self.start_cascade(level, slot);
            if !self.cascade_step(level, slot, &mut budget) {
                return Step::Paused;
            }
        }
    }

    /// Removes every pending timer, dropping the values. Keys handed out before stay dead.
    pub fn clear(&mut self) {
        self.retire_entries();
        self.entries.clear();
    }

    /// Removes every pending timer and returns them as `(key, effective deadline, value)`, in
    /// no particular order (e.g. to persist what never fired at shutdown). The wheel is empty
    /// as soon as `drain` returns, whether or not the iterator is consumed.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// wheel.insert(7, "a");
    /// let left: Vec<_> = wheel.drain().map(|(_, deadline, value)| (deadline, value)).collect();
    /// assert_eq!(left, [(7, "a")]);
    /// assert!(wheel.is_empty());
    /// ```
    pub fn drain(&mut self) -> Drain<'_, T> {
        self.retire_entries();
        let entries = mem::take(&mut self.entries);
        Drain {
            entries: entries.into_iter().enumerate(),
            _wheel: PhantomData,
        }
    }

    /// Returns memory the wheel does not need: trailing free entries of the slab and the
    /// spare capacity. Keys of pending timers stay valid.
    pub fn shrink_to_fit(&mut self) {
        self.finish_cascade();
        // Repack the slots into a fresh pool without garbage: afterwards no item names a
        // vacant entry, so trailing vacant entries can go.
        self.rebuild_pool();
        let mut keep = self.entries.len();
        while keep > 0 && matches!(self.entries[keep - 1], Entry::Vacant { .. }) {
            keep -= 1;
            self.fresh_gen = newer(self.fresh_gen, self.entries[keep].gen());
        }
        self.entries.truncate(keep);
        self.entries.shrink_to_fit();
        self.scratch = Vec::new();
        // Rebuild the free list over the vacant entries that remain.
        self.free = NIL;
        for (index, entry) in self.entries.iter_mut().enumerate().rev() {
            if let Some((gen, _)) = entry.vacancy() {
                *entry = Entry::vacant(gen, self.free);
                self.free = index as u32;
            }
        }
    }

    /// Iterates over pending timers as `(key, effective deadline, &value)`, in no particular
    /// order.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            entries: self.entries.iter().enumerate(),
            left: self.live(),
        }
    }

    /// Iterates over pending timers as `(key, effective deadline, &mut value)`, in no
    /// particular order.
    pub fn iter_mut(&mut self) -> IterMut<'_, T> {
        let left = self.live();
        IterMut {
            entries: self.entries.iter_mut().enumerate(),
            left,
        }
    }

    // ----- internals -----

    /// Level and slot of the earliest pending timers.
    #[inline]
    fn front(&self) -> Option<(usize, usize)> {
        // Level 0 (the current rotation) first; then a staged window (never empty); then the
        // levels above (while a window moves, its level-1 slot is the earliest of those).
        let level = if self.nonempty & 1 != 0 {
            0
        } else if self.staged_block != u64::MAX {
            return self.levels[STAGE]
                .occupied
                .first()
                .map(|slot| (STAGE, slot));
        } else {
            // Also `None` when the wheel is empty (16 trailing zeros).
            let level = (self.nonempty & !(1 << STAGE)).trailing_zeros() as usize;
            if level >= NUM_LEVELS {
                return None;
            }
            level
        };
        let occupied = &self.levels[level].occupied;
        #[cfg(debug_assertions)]
        debug_assert_eq!(
            occupied.first_before(slot_for(self.elapsed, level)),
            None,
            "slot behind the clock; level={level} elapsed={}",
            self.elapsed
        );
        occupied.first().map(|slot| (level, slot))
    }

    /// Points entry `index` at its item.
    #[inline]
    fn set_pos(&mut self, index: u32, pos: NonZeroU32) {
        match &mut self.entries[index as usize] {
            Entry::Occupied(timer) => timer.pos = pos,
            Entry::Vacant { .. } => unreachable!("filed a vacant entry"),
        }
    }

    /// Files entry `index`, due at `deadline`, at the tail of its slot and returns the new
    /// item's address, which the caller stores in the entry.
    #[inline(always)]
    fn file(&mut self, index: u32, deadline: Tick) -> NonZeroU32 {
        // Stays a lower bound while `next_stale` (which a filing leaves set: one store less
        // per insert, and `next_deadline_mut` then recomputes once for nothing).
        // A branch, not `min`: a new deadline is rarely the earliest, and the store is then
        // skipped (one instruction less per filing than the load-compare-cmov-store).
        if deadline < self.next {
            self.next = deadline;
        }
        debug_assert_eq!(
            self.odd,
            self.cascade_level != 0 || self.staged_block != u64::MAX
        );
        if !self.odd {
            let (level, slot) = place_for(self.elapsed, deadline);
            return self.file_in(index, deadline, level, slot);
        }
        self.file_odd(index, deadline)
    }

    /// [`file`](Self::file) while a window is staged or a cascade is paused.
    #[cold]
    #[inline(never)]
    fn file_odd(&mut self, index: u32, deadline: Tick) -> NonZeroU32 {
        let (level, slot) = self.place(deadline);
        if level < self.cascade_level {
            // The window of a paused cascade (its slot's levels below): filed at the tail of
            // the cascading slot, behind the timers not moved yet, so ties keep their order.
            // (No window is pre-cascaded then, so `level` is `level_for`'s.)
            return self.file_in(index, deadline, self.cascade_level, self.cascade_slot);
        }
        self.file_in(index, deadline, level, slot)
    }

    /// The table and slot where a timer due at `deadline` belongs now: a function of the
    /// deadline, the clock and the pre-cascade state. A deadline in a staged window belongs
    /// to the staging table; while the window is still moving, to its level-1 slot (the
    /// items not moved yet are there, and a new one is filed behind them).
    #[inline]
    fn place(&self, deadline: Tick) -> (usize, usize) {
        if deadline >> BITS_PER_LEVEL == self.staged_block {
            return (STAGE, slot_for(deadline, 0));
        }
        place_for(self.elapsed, deadline)
    }

    /// [`file`](Self::file) into a given slot.
    ///
    /// The common case is inline: the slot already holds items and its tail chunk has
    /// room, so filing is the order bookkeeping and one `u32` store. A slot's first item
    /// and a new tail chunk (1 filing in 15) take [`file_cold`](Self::file_cold). The
    /// horizon is lowered only there, when a slot becomes occupied: an occupied slot's
    /// start is already at or after it (it is a lower bound of every occupied slot's start).
    #[inline]
    fn file_in(&mut self, index: u32, deadline: Tick, level: usize, slot: usize) -> NonZeroU32 {
        let lvl = &mut self.levels[level];
        // An empty chain's `end` is `WORDS` (`Chain::EMPTY`), so one test covers both. (`>=`,
        // though `end` never exceeds `WORDS`: the compiler then knows `end < WORDS` below and
        // drops the index mask of the append.)
        if lvl.chains[slot].end >= WORDS {
            return self.file_cold(index, deadline, level, slot);
        }
        debug_assert!(lvl.chains[slot].items != 0, "an empty chain with room");
        debug_assert!(
            self.horizon <= deadline & START_MASK[level],
            "horizon after an occupied slot"
        );
        lvl.note_filed(slot, deadline, self.cancels);
        let chain = &mut lvl.chains[slot];
        chain.items += 1;
        self.pool.append(chain, index)
    }

    /// [`file_in`](Self::file_in) when the slot is empty or its tail chunk is full.
    #[cold]
    #[inline(never)]
    fn file_cold(&mut self, index: u32, deadline: Tick, level: usize, slot: usize) -> NonZeroU32 {
        if self.pool.exhausted() {
            self.compact_all();
        }
        let lvl = &mut self.levels[level];
        if lvl.chains[slot].items == 0 {
            // The slot's start: the deadline without its digits below `level`.
            self.horizon = self.horizon.min(deadline & START_MASK[level]);
            lvl.occupied.set(slot);
            lvl.scanned.clear(slot);
            lvl.min[slot] = deadline;
            lvl.exact_at[slot] = self.cancels;
            lvl.last[slot] = deadline;
            self.nonempty |= 1 << level;
        } else {
            debug_assert!(self.horizon <= deadline & START_MASK[level]);
            lvl.note_filed(slot, deadline, self.cancels);
        }
        let chain = &mut lvl.chains[slot];
        chain.items += 1;
        self.pool.push(chain, index)
    }

    /// The number of pending timers.
    #[inline(always)]
    fn live(&self) -> usize {
        self.inserts
            .wrapping_add(self.settled)
            .wrapping_sub(self.cancels) as usize
    }

    /// `2 × garbage − 3 × live − 2 × slack`, where `garbage` is the number of items in all
    /// slots whose timer was cancelled or reset: positive when garbage exceeds its bound
    /// (see `GARBAGE_HALVES`). Computed from counters, so that an insert (−3) and a cancel
    /// (+5) each bump one counter and store nothing else; a firing (+3) and a dropped
    /// garbage item (−2) change `pressure_base`.
    #[inline(always)]
    fn pressure(&self) -> i64 {
        (self.pressure_base as u64)
            .wrapping_add(self.cancels.wrapping_mul(5))
            .wrapping_sub(self.inserts.wrapping_mul(3)) as i64
    }

    /// Adds `delta` to the garbage pressure.
    #[inline(always)]
    fn add_pressure(&mut self, delta: i64) {
        self.pressure_base = self.pressure_base.wrapping_add(delta);
    }

    /// Keeps the garbage bounded: while it exceeds 1.5 items per live timer (plus a little
    /// slack), a reset compacts one occupied slot, round-robin (an insert's share is done
    /// by [`flush_inbox`](Self::flush_inbox)).
    #[inline]
    fn bound_garbage_now(&mut self) {
        if self.pressure() > 0 {
            self.compact_next();
        }
    }

    /// Queues entry `index`, due at `deadline`, in the inbox and returns its item's
    /// address: an insert's whole filing. `next` is lowered here, so it stays exact; the
    /// slots see the timer at the next [`flush_inbox`](Self::flush_inbox). The inbox has
    /// room (a full one is flushed at once).
    #[inline(always)]
    fn queue(&mut self, index: u32, deadline: Tick) -> NonZeroU32 {
        // A branch, not `min`: a new deadline is rarely the earliest, and the store is then
        // skipped.
        if deadline < self.next {
            self.next = deadline;
        }
        let n = self.inbox_len;
        debug_assert!(n < INBOX_LEN);
        // `& (INBOX_LEN - 1)`: `n` is below `INBOX_LEN`; the mask drops a bounds check.
        self.inbox[(n & (INBOX_LEN - 1)) as usize] = index;
        self.inbox_len = n + 1;
        // `INBOX` has its top bits set: never 0, and above every pool address.
        match NonZeroU32::new(INBOX | (n & (INBOX_LEN - 1))) {
            Some(pos) => pos,
            None => unreachable!("an inbox address is never 0"),
        }
    }

    /// Files the inbox if an insert or a reset has just filled it.
    #[inline(always)]
    fn flush_inbox_if_full(&mut self) {
        if self.inbox_len == INBOX_LEN {
            self.flush_inbox();
        }
    }

    /// Files whatever the inbox holds: every path that reads a slot (or the horizon) calls
    /// this first, but a poll while none of the inbox's timers is due (see `poll`).
    #[inline(always)]
    fn flush_inbox_if_any(&mut self) {
        if self.inbox_len != 0 {
            self.flush_inbox();
        }
    }

    /// Files every live timer of the inbox into its slot, in the order they came, at the
    /// current clock (as a cascade moves a slot: 16 entries are read before any is filed,
    /// so their cache misses overlap; garbage is dropped without a look), then keeps the
    /// garbage bounded: while it exceeds its bound, compacts slots, round-robin, at most
    /// `INBOX_LEN / 32` of them.
    #[cold]
    #[inline(never)]
    fn flush_inbox(&mut self) {
        let n = self.inbox_len;
        // Emptied first: a filing that compacts every slot (`compact_all`) flushes again.
        self.inbox_len = 0;
        let mut from = 0;
        while from < n {
            let to = (from + 16).min(n);
            let mut words = [NIL; 16];
            let mut deadlines = [0; 16];
            let mut live = 0u32;
            for k in from..to {
                let w = (k - from) as usize;
                let index = self.inbox[(k & (INBOX_LEN - 1)) as usize];
                words[w] = index;
                if let Some(timer) = at(&self.entries, index, INBOX | k) {
                    deadlines[w] = timer.deadline;
                    live |= 1 << w;
                }
            }
            self.add_pressure(-2 * i64::from(to - from - live.count_ones()));
            for w in live_words(live) {
                let index = words[w];
                let pos = self.file(index, deadlines[w]);
                self.set_pos(index, pos);
            }
            from = to;
        }
        let mut compactions = INBOX_LEN / 32;
        while compactions > 0 && self.pressure() > 0 {
            self.compact_next();
            compactions -= 1;
        }
    }

    /// Debug builds: `pressure` agrees with a count of every slot's items.
    #[cfg(debug_assertions)]
    fn check_pressure(&self) {
        let items: usize = self
            .levels
            .iter()
            .flat_map(|lvl| lvl.chains.iter())
            .map(|chain| chain.items as usize)
            .sum::<usize>()
            + self.inbox_len as usize;
        let garbage = items - self.live();
        assert_eq!(
            self.pressure(),
            2 * garbage as i64 - 3 * self.live() as i64 - 2 * self.slack as i64,
            "garbage pressure out of step"
        );
    }

    /// Compacts the next occupied slot after the round-robin cursor (every table's slots in
    /// turn), so each slot is compacted once per round and the one compacted longest ago
    /// goes next: with cancels spread over the slots, the one holding the most garbage.
    #[cold]
    #[inline(never)]
    fn compact_next(&mut self) {
        #[cfg(debug_assertions)]
        self.check_pressure();
        let total = TABLES * SLOTS;
        let mut from = self.compact_cursor % total;
        for _ in 0..=TABLES {
            let (table, slot) = (from / SLOTS, from % SLOTS);
            if let Some(slot) = self.levels[table].occupied.first_from(slot) {
                self.compact_cursor = table * SLOTS + slot + 1;
                self.compact(table, slot);
                return;
            }
            from = ((table + 1) % TABLES) * SLOTS;
        }
    }

    /// Forgets `slot` of `table`, whose chain holds no item any more (or only garbage
    /// already counted out of `garbage`), and updates the occupancy bits.
    #[inline]
    fn empty_slot(&mut self, table: usize, slot: usize) {
        let lvl = &mut self.levels[table];
        self.pool.free_chain(&mut lvl.chains[slot]);
        lvl.set_empty(slot);
        if lvl.occupied.is_empty() {
            self.nonempty &= !(1 << table);
            if table == STAGE && !self.pre_moving {
                // The staged window emptied: nothing left to enter.
                self.set_pre(0, false);
            }
        }
        if self.pre_moving && table == 1 && slot == slot_for(self.pre_window, 1) {
            // The rest of a moving window is gone (moved, or a compaction found only
            // garbage): the window is staged, or empty.
            if self.nonempty & (1 << STAGE) == 0 {
                self.set_pre(0, false);
            } else {
                self.set_pre(self.pre_window, false);
            }
        }
    }

    /// Recomputes `next` after the timer with that deadline was removed, reset or fired:
    /// drops the garbage at the front of the earliest slots until one holds a live timer,
    /// and makes that slot's minimum exact (a level-0 or staged slot is a single tick; a
    /// higher slot's `min` is exact unless a timer was cancelled since it was last known
    /// exact). A sorted slot drops the garbage at its head (amortised O(1)); an unsorted one
    /// is compacted the first time (O(k)) and sorted the second (O(k log k)), after which
    /// removing its minimums in order is O(1).
    #[cold]
    #[inline(never)]
    fn refresh_next(&mut self) {
        #[cfg(debug_assertions)]
        self.check_pressure();
        self.next_stale = false;
        if self.live() == 0 {
            self.next = Tick::MAX;
            return;
        }
        self.flush_inbox_if_any();
        // The earliest timer may be in either part of a paused cascade: finish it.
        self.finish_cascade();
        loop {
            let Some((level, slot)) = self.front() else {
                unreachable!("a live timer is in no slot")
            };
            if level == 0 || level == STAGE {
                if self.first_live(level, slot) {
                    self.next = if level == 0 {
                        // The earliest occupied slot is this one: its start is the horizon,
                        // so a poll before it returns at once (as after every fired tick).
                        let start = slot_start(self.elapsed, 0, slot);
                        self.horizon = start;
                        start
                    } else {
                        self.pre_window + slot as Tick
                    };
                    return;
                }
                continue;
            }
            if self.at_window(level, slot) {
                // Part of the window is staged already: finish moving it.
                self.finish_pre();
                continue;
            }
            let lvl = &self.levels[level];
            if lvl.exact_at[slot] == self.cancels {
                self.next = lvl.min[slot];
                return;
            }
            let live = if lvl.last[slot] != UNSORTED {
                self.first_live(level, slot) && {
                    self.exact_head_min(level, slot);
                    true
                }
            } else if !lvl.scanned.get(slot) {
                let live = self.compact(level, slot);
                if live {
                    self.levels[level].scanned.set(slot);
                }
                live
            } else {
                self.sort_slot(level, slot)
            };
            if live {
                self.next = self.levels[level].min[slot];
                return;
            }
        }
    }

    /// Hands out the first live timer of level-0 slot `slot` (its tick is the clock),
    /// dropping the garbage before it; `None` (and the slot emptied) if only garbage was
    /// left.
    fn pop_front(&mut self, slot: usize) -> Option<(TimerKey, T)> {
        loop {
            let chain = &mut self.levels[0].chains[slot];
            if chain.items == 0 {
                self.empty_slot(0, slot);
                return None;
            }
            let (chunk, word) = (chain.head, chain.start);
            let index = self.pool.item(chunk, word);
            chain.items -= 1;
            chain.start += 1;
            if chain.start == WORDS && chunk != chain.tail {
                chain.head = self.pool.next(chunk);
                chain.start = 1;
                self.pool.free_one(chunk);
            }
            if at(&self.entries, index, addr(chunk, word)).is_none() {
                self.add_pressure(-2);
                continue;
            }
            let vacant = Entry::vacant(
                self.entries[index as usize].gen().wrapping_add(1),
                self.free,
            );
            let Entry::Occupied(timer) = mem::replace(&mut self.entries[index as usize], vacant)
            else {
                unreachable!("checked live above")
            };
            debug_assert_eq!(timer.deadline, self.elapsed, "fired off its tick");
            self.free = index;
            self.settled = self.settled.wrapping_sub(1);
            self.add_pressure(3);
            // `next` was this timer's deadline: it stays if another live timer follows in
            // this slot (dropping the garbage before it now is work the next poll saves).
            if self.levels[0].chains[slot].items == 0 {
                self.empty_slot(0, slot);
                self.refresh_next();
            } else if !self.first_live(0, slot) {
                self.refresh_next();
            }
            let key = TimerKey {
                index,
                gen: timer.gen,
            };
            return Some((key, timer.value));
        }
    }

    /// Begins moving the timers of `slot` at `level` (the earliest slot; the clock has
    /// reached its start) down to the levels their remaining time belongs to.
    #[inline]
    fn start_cascade(&mut self, level: usize, slot: usize) {
        debug_assert!(
            self.nonempty & ((1 << level) - 1) == 0,
            "levels below not empty"
        );
        self.cascade_level = level;
        self.cascade_slot = slot;
        self.odd = true;
    }

    /// Completes a cascade paused by [`poll_budgeted`](Self::poll_budgeted), if any.
    fn finish_cascade(&mut self) {
        if let Some((level, slot)) = self.cascading() {
            let mut unbounded = usize::MAX;
            let done = self.cascade_step(level, slot, &mut unbounded);
            debug_assert!(done);
        }
    }

    /// The paused cascade's level and slot, if any.
    #[inline]
    fn cascading(&self) -> Option<(usize, usize)> {
        (self.cascade_level != 0).then_some((self.cascade_level, self.cascade_slot))
    }

    /// Pre-cascades with bounded work: moves at most about `budget` timers (whole lines of
    /// 15, at least one line) of the next rotation's 256-tick window from their level-1 slot
    /// into a staging table, so that when the clock reaches the window its timers are
    /// already sorted by tick and the first can be handed out at once. Returns `true` while
    /// there is more to move.
    ///
    /// Without it, a window's slot is moved down only when the clock reaches the window's
    /// start, and its first timer waits until the whole slot has moved (a million timers due
    /// within a second: ~250k per window, milliseconds of work). `prepare` lets that work
    /// happen earlier, in small steps, while the current rotation's timers are still firing:
    /// e.g. call it with the same budget whenever [`poll_budgeted`](Self::poll_budgeted)
    /// returns [`Step::Idle`] (the timer service's driver does).
    ///
    /// It does nothing (returns `false`) while a [`poll_budgeted`](Self::poll_budgeted)
    /// cascade is paused, when the next window holds no timer, or when the next window
    /// starts a new level-2 rotation (its timers are then filed above level 1, 1 window in
    /// 256). Every guarantee holds: never early, exactly once, ties in insertion order,
    /// exact [`next_deadline`](Self::next_deadline). While the window is moving, inserting
    /// anything stays O(1) (a timer due in the window is filed behind the ones not moved
    /// yet), and so do removing and resetting, except that removing or resetting the
    /// earliest pending timer may first finish the move, as does a plain
    /// [`poll`](Self::poll) reaching the window.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel_core::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// wheel.insert(10, u64::MAX);
    /// for i in 0..1_000u64 {
    ///     wheel.insert(256 + i % 256, i); // the next rotation's window: ticks 256..512
    /// }
    /// let mut steps = 1;
    /// while wheel.prepare(64) {
    ///     steps += 1; // e.g. between two ticks of a driver, or with a lock released
    /// }
    /// assert!(steps >= 10); // ~75 timers moved per call: 5 lines of 15
    /// assert_eq!(wheel.next_deadline(), Some(10));
    /// assert_eq!(wheel.poll(255).map(|(_, v)| v), Some(u64::MAX));
    /// assert_eq!(wheel.poll(255), None);
    /// // The window's timers are in place: the first comes out with no cascade to do.
    /// assert_eq!(wheel.poll(256).map(|(_, v)| v), Some(0));
    /// ```
    pub fn prepare(&mut self, budget: usize) -> bool {
        self.flush_inbox_if_any();
        if self.cascade_level != 0 {
            return false;
        }
        if self.pre_window == 0 {
            let Some(window) = (self.elapsed | (SLOTS as Tick - 1)).checked_add(1) else {
                return false;
            };
            // The window's timers must sit in one level-1 slot.
            if level_for(self.elapsed, window) != 1 {
                return false;
            }
            let slot = slot_for(window, 1);
            if !self.levels[1].occupied.get(slot) {
                return false;
            }
            self.set_pre(window, true);
        }
        if !self.pre_moving {
            return false;
        }
        let mut budget = budget;
        !self.pre_step(&mut budget)
    }

    /// Sets the pre-cascade state (`window` 0: none) and the flags derived from it.
    fn set_pre(&mut self, window: Tick, moving: bool) {
        self.pre_window = window;
        self.pre_moving = moving;
        self.staged_block = if window != 0 && !moving {
            window >> BITS_PER_LEVEL
        } else {
            u64::MAX
        };
        self.odd = self.cascade_level != 0 || self.staged_block != u64::MAX;
    }

    /// `true` if `(level, slot)` (from [`front`](Self::front)) is the pre-cascaded window:
    /// staged, or the level-1 slot it is moving from.
    #[inline]
    fn at_window(&self, level: usize, slot: usize) -> bool {
        level == STAGE || (level == 1 && self.pre_moving && slot == slot_for(self.pre_window, 1))
    }

    /// Completes a moving pre-cascade, if any.
    fn finish_pre(&mut self) {
        if self.pre_moving {
            let mut unbounded = usize::MAX;
            let done = self.pre_step(&mut unbounded);
            debug_assert!(done);
        }
    }

    /// The clock reaches the staged window (level 0 is empty: the current rotation is
    /// over): the staging table becomes level 0, and the clock reads the window's start.
    fn enter_window(&mut self) {
        debug_assert!(!self.pre_moving && self.nonempty & 1 == 0);
        if self.pre_window == 0 {
            return; // the window emptied while it moved
        }
        self.levels.swap(0, STAGE);
        let staged = (self.nonempty >> STAGE) & 1;
        self.nonempty = (self.nonempty & !(1 << STAGE)) | staged;
        self.elapsed = self.pre_window;
        self.set_pre(0, false);
    }

    /// Moves the pre-cascading window's timers from its level-1 slot to the staging table,
    /// line by line from the slot's head, as [`cascade_step`](Self::cascade_step) does,
    /// until the slot is empty (returns `true`) or `budget` items have been read (returns
    /// `false`; at least one line per call). The slot's `min` is left alone: it stays the
    /// window's exact minimum, moved or not, until the move is done.
    fn pre_step(&mut self, budget: &mut usize) -> bool {
        let slot = slot_for(self.pre_window, 1);
        let mut moved = false;
        loop {
            let chain = self.levels[1].chains[slot];
            if chain.items == 0 {
                // Ends the move: the window is staged, or (every timer of it was removed) gone.
                self.empty_slot(1, slot);
                debug_assert!(!self.pre_moving);
                return true;
            }
            if *budget == 0 && moved {
                return false;
            }
            moved = true;
            let (chunk, word) = (chain.head, chain.start);
            let last = chunk == chain.tail;
            let end = if last { chain.end } else { WORDS };
            let words = self.pool.chunks[chunk as usize].0;
            let mut deadlines = [0; WORDS as usize];
            let live = gather_deadlines(&self.entries, &words, chunk, word, end, &mut deadlines);
            self.add_pressure(-2 * i64::from(end - word - live.count_ones()));
            let c = &mut self.levels[1].chains[slot];
            c.items -= end - word;
            if last {
                debug_assert_eq!(c.items, 0, "items past the tail");
                *c = Chain::EMPTY;
            } else {
                c.head = words[0];
                c.start = 1;
            }
            self.pool.free_one(chunk);
            *budget = budget.saturating_sub((end - word) as usize);
            for w in live_words(live) {
                let deadline = deadlines[w];
                debug_assert!(deadline.wrapping_sub(self.pre_window) < SLOTS as u64);
                let index = words[w];
                let pos = self.file_in(index, deadline, STAGE, slot_for(deadline, 0));
                self.set_pos(index, pos);
            }
        }
    }

    /// Moves the timers of the cascading slot down, line by line from its head, until the
    /// slot is empty (returns `true`, the cascade is over) or `budget` items have been read
    /// (returns `false`; at least one line is moved per call). Each line is copied and
    /// freed at once (the slots below refill it while it is hot), and the slot's counters
    /// drop by what the line held, so the slot's chain is always exactly the items not
    /// moved yet.
    fn cascade_step(&mut self, level: usize, slot: usize, budget: &mut usize) -> bool {
        let mut moved = false;
        loop {
            let chain = self.levels[level].chains[slot];
            if chain.items == 0 {
                self.empty_slot(level, slot);
                self.cascade_level = 0;
                self.odd = self.staged_block != u64::MAX;
                return true;
            }
            if *budget == 0 && moved {
                return false;
            }
            moved = true;
            let (chunk, word) = (chain.head, chain.start);
            let last = chunk == chain.tail;
            let end = if last { chain.end } else { WORDS };
            let words = self.pool.chunks[chunk as usize].0;
            // First read every entry of the line (independent loads, so their cache misses
            // overlap instead of waiting for each `file` in turn), then re-file the live ones.
            let mut deadlines = [0; WORDS as usize];
            let live = gather_deadlines(&self.entries, &words, chunk, word, end, &mut deadlines);
            self.add_pressure(-2 * i64::from(end - word - live.count_ones()));
            let c = &mut self.levels[level].chains[slot];
            c.items -= end - word;
            if last {
                debug_assert_eq!(c.items, 0, "items past the tail");
                *c = Chain::EMPTY;
            } else {
                c.head = words[0];
                c.start = 1;
            }
            self.pool.free_one(chunk);
            *budget = budget.saturating_sub((end - word) as usize);
            for w in live_words(live) {
                let deadline = deadlines[w];
                let (to, to_slot) = place_for(self.elapsed, deadline);
                debug_assert!(to < level);
                let index = words[w];
                let pos = self.file_in(index, deadline, to, to_slot);
                self.set_pos(index, pos);
            }
        }
    }

    /// `true` if `slot` of `table` holds a live timer and its first item is one; otherwise
    /// drops the garbage before the first live item ([`skip_head_garbage`]), emptying the
    /// slot if there is none.
    ///
    /// [`skip_head_garbage`]: Self::skip_head_garbage
    #[inline]
    fn first_live(&mut self, table: usize, slot: usize) -> bool {
        let chain = &self.levels[table].chains[slot];
        if chain.items != 0 {
            let (chunk, word) = (chain.head, chain.start);
            let index = self.pool.item(chunk, word);
            if at(&self.entries, index, addr(chunk, word)).is_some() {
                return true;
            }
        }
        self.skip_head_garbage(table, slot)
    }

    /// In a sorted slot whose first item is live: that item's deadline is the slot's exact
    /// minimum.
    fn exact_head_min(&mut self, level: usize, slot: usize) {
        let lvl = &mut self.levels[level];
        let chain = &lvl.chains[slot];
        let index = self.pool.item(chain.head, chain.start);
        if let Entry::Occupied(timer) = &self.entries[index as usize] {
            lvl.min[slot] = timer.deadline;
            lvl.exact_at[slot] = self.cancels;
        }
    }

    /// Drops the garbage before the first live item of `slot` in `table`. Returns `false`
    /// (and empties the slot) if there is none.
    #[cold]
    #[inline(never)]
    fn skip_head_garbage(&mut self, table: usize, slot: usize) -> bool {
        let chain = &mut self.levels[table].chains[slot];
        loop {
            if chain.items == 0 {
                self.empty_slot(table, slot);
                return false;
            }
            let (chunk, word) = (chain.head, chain.start);
            let index = self.pool.item(chunk, word);
            if at(&self.entries, index, addr(chunk, word)).is_some() {
                return true;
            }
            self.pressure_base = self.pressure_base.wrapping_sub(2);
            chain.items -= 1;
            chain.start += 1;
            if chain.start == WORDS && chunk != chain.tail {
                chain.head = self.pool.next(chunk);
                chain.start = 1;
                self.pool.free_one(chunk);
            }
        }
    }

    /// Drops the garbage of `slot` at `level`, keeping the order of its live items, frees
    /// the chunks no longer needed, and makes the slot's minimum exact. Returns `false`
    /// (and empties the slot) if no live item was left.
    #[cold]
    fn compact(&mut self, level: usize, slot: usize) -> bool {
        let chain = self.levels[level].chains[slot];
        let entries = &mut self.entries[..];
        let chunks = &mut self.pool.chunks[..];
        let (mut read_chunk, read_word) = (chain.head, chain.start);
        let (mut write_chunk, mut write_word) = (chain.head, chain.start);
        let mut min = Tick::MAX;
        let mut kept = 0;
        // A copy of the line: the writes below may land in it, but never ahead of the read
        // position and never on its link (word 0).
        let mut words = chunks[read_chunk as usize].0;
        let end = if read_chunk == chain.tail {
            chain.end
        } else {
            WORDS
        };
        let mut live = gather_live(entries, &words, read_chunk, read_word, end);
        loop {
            let last = read_chunk == chain.tail;
            // The next line's entries are read before this line's items move (independent
            // loads whose misses overlap the moves, issued ahead of the moves' branches). The
            // moves cannot change what is live there: they write positions at or before the
            // read position, never in a later line.
            let next_chunk = words[0];
            let (next_words, next_live) = if last {
                ([NIL; WORDS as usize], 0)
            } else {
                let next_words = chunks[next_chunk as usize].0;
                let end = if next_chunk == chain.tail {
                    chain.end
                } else {
                    WORDS
                };
                let next_live = gather_live(entries, &next_words, next_chunk, 1, end);
                (next_words, next_live)
            };
            // The live items only, in order: the garbage is skipped without a look. The line
            // written to is looked up once per line (not once per item: a bound check and the
            // address arithmetic each time).
            let mut line = &mut chunks[write_chunk as usize].0;
            for w in live_words(live) {
                let index = words[w];
                let Some(Entry::Occupied(timer)) = entries.get_mut(index as usize) else {
                    unreachable!("gathered as live")
                };
                min = min.min(timer.deadline);
                if write_word == WORDS {
                    write_chunk = line[0];
                    line = &mut chunks[write_chunk as usize].0;
                    write_word = 1;
                }
                // `& (WORDS - 1)`: the word is below WORDS here; the mask drops a bounds check.
                line[(write_word & (WORDS - 1)) as usize] = index;
                timer.pos = nonzero(addr(write_chunk, write_word));
                write_word += 1;
                kept += 1;
            }
            if last {
                break;
            }
            read_chunk = next_chunk;
            words = next_words;
            live = next_live;
        }
        self.add_pressure(-2 * i64::from(chain.items - kept));
        if write_chunk != chain.tail {
            let first_spare = self.pool.next(write_chunk);
            self.pool.free_run(first_spare, chain.tail);
        }
        let lvl = &mut self.levels[level];
        lvl.chains[slot] = Chain {
            tail: write_chunk,
            end: write_word,
            items: kept,
            ..chain
        };
        if kept == 0 {
            self.empty_slot(level, slot);
            return false;
        }
        lvl.min[slot] = min;
        lvl.exact_at[slot] = self.cancels;
        true
    }

    /// Stable-sorts the live items of `slot` at `level` by deadline (dropping its garbage)
    /// and makes its minimum exact. The buffer of indices it sorts is reserved by
    /// [`reserve`](Self::reserve) and kept between calls, so a wheel with room for its
    /// timers does not allocate here either.
    ///
    /// A level-1 slot spans 256 ticks: its deadlines differ only in their low digit, so a
    /// stable counting sort by that digit orders them in O(k) (two reads of each entry, in
    /// chain order). A slot of a higher level is sorted by comparison, O(k log k).
    #[cold]
    fn sort_slot(&mut self, level: usize, slot: usize) -> bool {
        if !self.compact(level, slot) {
            return false;
        }
        let chain = self.levels[level].chains[slot];
        let mut scratch = mem::take(&mut self.scratch);
        scratch.clear();
        if level == 1 {
            self.counting_sort(&chain, &mut scratch);
        } else {
            self.comparison_sort(&chain, &mut scratch);
        }
        let (mut chunk, mut word) = (chain.head, chain.start);
        let (mut min, mut max) = (Tick::MAX, 0);
        for &index in &scratch {
            if word == WORDS {
                chunk = self.pool.next(chunk);
                word = 1;
            }
            self.pool.set_item(chunk, word, index);
            if let Entry::Occupied(timer) = &mut self.entries[index as usize] {
                timer.pos = nonzero(addr(chunk, word));
                min = min.min(timer.deadline);
                max = max.max(timer.deadline);
            }
            word += 1;
        }
        scratch.clear();
        self.scratch = scratch;
        let lvl = &mut self.levels[level];
        lvl.min[slot] = min;
        // Sorted now (unless `max` is `Tick::MAX`, which reads as `UNSORTED`: only slower).
        lvl.last[slot] = max;
        lvl.exact_at[slot] = self.cancels;
        lvl.scanned.clear(slot);
        true
    }

    /// The items of `chain`, in order.
    fn chain_items<'a>(pool: &'a Pool, chain: &Chain) -> impl Iterator<Item = u32> + 'a {
        let (mut chunk, mut word, tail, end) = (chain.head, chain.start, chain.tail, chain.end);
        core::iter::from_fn(move || {
            if word == WORDS {
                if chunk == tail {
                    return None;
                }
                chunk = pool.next(chunk);
                word = 1;
            }
            if chunk == tail && word >= end {
                return None;
            }
            let index = pool.item(chunk, word);
            word += 1;
            Some(index)
        })
    }

    /// [`sort_slot`](Self::sort_slot) of a compacted level-1 slot: its items into `scratch`,
    /// stably ordered by the low digit of their deadlines (all their other digits are equal).
    fn counting_sort(&self, chain: &Chain, scratch: &mut Vec<u32>) {
        let deadline = |index: u32| match &self.entries[index as usize] {
            Entry::Occupied(timer) => timer.deadline,
            Entry::Vacant { .. } => unreachable!("compacted: every item is live"),
        };
        let mut starts = [0u32; SLOTS];
        for index in Self::chain_items(&self.pool, chain) {
            starts[slot_for(deadline(index), 0)] += 1;
        }
        let mut sum = 0;
        for start in &mut starts {
            let count = *start;
            *start = sum;
            sum += count;
        }
        debug_assert_eq!(sum, chain.items);
        #[cfg(debug_assertions)]
        {
            let high = deadline(self.pool.item(chain.head, chain.start)) >> BITS_PER_LEVEL;
            debug_assert!(
                Self::chain_items(&self.pool, chain).all(|i| deadline(i) >> BITS_PER_LEVEL == high),
                "a level-1 slot spans more than 256 ticks"
            );
        }
        // Within the reserved capacity (see `reserve`): no allocation.
        scratch.resize(chain.items as usize, 0);
        for index in Self::chain_items(&self.pool, chain) {
            let start = &mut starts[slot_for(deadline(index), 0)];
            scratch[*start as usize] = index;
            *start += 1;
        }
    }

    /// [`sort_slot`](Self::sort_slot) of a compacted slot above level 1: its items into
    /// `scratch`, stably ordered by deadline (a comparison sort; the positions hold each
    /// item's rank meanwhile, the tie-break that keeps filing order).
    fn comparison_sort(&mut self, chain: &Chain, scratch: &mut Vec<u32>) {
        let (mut chunk, mut word) = (chain.head, chain.start);
        loop {
            let last = chunk == chain.tail;
            let end = if last { chain.end } else { WORDS };
            while word < end {
                let index = self.pool.item(chunk, word);
                // Compacted above: every item is live. Its position is rewritten below, so
                // it holds the item's rank for now: the tie-break that keeps filing order.
                if let Entry::Occupied(timer) = &mut self.entries[index as usize] {
                    timer.pos = nonzero(scratch.len() as u32 + 1);
                }
                scratch.push(index);
                word += 1;
            }
            if last {
                break;
            }
            chunk = self.pool.next(chunk);
            word = 1;
        }
        let entries = &self.entries;
        scratch.sort_unstable_by_key(|&index| match &entries[index as usize] {
            Entry::Occupied(timer) => (timer.deadline, timer.pos.get()),
            Entry::Vacant { .. } => (Tick::MAX, u32::MAX),
        });
    }

    /// Compacts every slot. Called when the pool may not grow: afterwards it holds only
    /// live items: at most `MAX_TIMERS / 15` chunks plus two per slot (and, during a cascade,
    /// the chunks of the slot being cascaded, at most 2.5 items per live timer), far below
    /// `MAX_CHUNKS`.
    #[cold]
    fn compact_all(&mut self) {
        self.flush_inbox_if_any();
        for level in 0..TABLES {
            for slot in 0..SLOTS {
                if self.levels[level].occupied.get(slot) {
                    self.compact(level, slot);
                }
            }
        }
    }

    /// Repacks every slot into a new pool of exactly the chunks it needs (no garbage).
    fn rebuild_pool(&mut self) {
        // Drop the garbage first, in place: once items move to the new pool, an old garbage
        // item's address could equal a moved timer's new position.
        self.compact_all();
        let old = mem::replace(&mut self.pool, Pool::new());
        let chunks: usize = self
            .levels
            .iter()
            .flat_map(|lvl| lvl.chains.iter())
            .map(|chain| (chain.items as usize).div_ceil(ITEMS as usize))
            .sum();
        self.pool.chunks.reserve_exact(chunks);
        for level in 0..TABLES {
            for slot in 0..SLOTS {
                let chain = self.levels[level].chains[slot];
                if chain.items == 0 {
                    continue;
                }
                let mut fresh = Chain::EMPTY;
                let (mut chunk, mut word) = (chain.head, chain.start);
                loop {
                    let last = chunk == chain.tail;
                    let end = if last { chain.end } else { WORDS };
                    while word < end {
                        let index = old.item(chunk, word);
                        match &mut self.entries[index as usize] {
                            Entry::Occupied(timer) => {
                                timer.pos = self.pool.push(&mut fresh, index);
                            }
                            Entry::Vacant { .. } => unreachable!("garbage left after compaction"),
                        }
                        word += 1;
                    }
                    if last {
                        break;
                    }
                    chunk = old.next(chunk);
                    word = 1;
                }
                fresh.items = chain.items;
                self.levels[level].chains[slot] = fresh;
            }
        }
    }

    /// Empties the slots and makes sure no key issued so far can name an entry pushed later.
    fn retire_entries(&mut self) {
        for entry in &self.entries {
            let next_gen = match entry {
                Entry::Occupied(timer) => timer.gen.wrapping_add(1),
                Entry::Vacant { .. } => entry.gen(),
            };
            self.fresh_gen = newer(self.fresh_gen, next_gen);
        }
        for level in self.levels.iter_mut() {
            level.clear();
        }
        self.inbox_len = 0;
        self.pool.clear();
        self.cascade_level = 0;
        self.set_pre(0, false);
        self.odd = false;
        self.nonempty = 0;
        self.horizon = Tick::MAX;
        self.next = Tick::MAX;
        self.next_stale = false;
        // No timer left and no garbage: `live` 0, `pressure` −2 × slack.
        self.inserts = 0;
        self.settled = self.cancels;
        self.pressure_base =
            (-2 * self.slack as i64).wrapping_sub(self.cancels.wrapping_mul(5) as i64);
        self.free = NIL;
    }
}

/// For words `from..to` of the chunk `chunk` (copied into `words`): a mask with bit `w` set
/// for each live item, whose deadline goes to `out[w]` (a cascade's gather). The loads do not
/// depend on each other, so the CPU overlaps their cache misses. It branches on liveness, unlike
/// [`gather_live`]: a cascade needs the deadlines, and reading them back from the entries in
/// the move loop cost fire-all 11 instructions per timer (773 -> 784, ADR 0027).
#[inline]
fn gather_deadlines<T>(
    entries: &[Entry<T>],
    words: &[u32; WORDS as usize],
    chunk: u32,
    from: u32,
    to: u32,
    out: &mut [Tick; WORDS as usize],
) -> u32 {
    let mut live = 0;
    // `min`: `to <= WORDS` already; stated once per line, it drops the per-word index mask.
    for w in from as usize..to.min(WORDS) as usize {
        if let Some(timer) = at(entries, words[w], addr(chunk, w as u32)) {
            out[w] = timer.deadline;
            live |= 1 << w;
        }
    }
    live
}

/// For words `from..to` of the chunk `chunk` (copied into `words`): a mask with bit `w` set
/// for each live item (a compaction's gather). The loads do not depend on each other, so the
/// CPU overlaps their cache misses; and nothing branches, neither on the outcome (whether an
/// item is live is a coin toss in a slot being compacted: a branch on it mispredicted ~0.26
/// times per churn op at N = 1e5) nor on the range (all 15 item words are tested, and those
/// outside `from..to` masked off after: their entry reads are wasted but harmless, and cost
/// less than the loop's branches; ADR 0027). A vacant entry's position reads as 0, which no
/// item address is.
#[inline]
// An index loop: the word's index is also its address (ADR 0023 measured the forms).
#[allow(clippy::needless_range_loop)]
fn gather_live<T>(
    entries: &[Entry<T>],
    words: &[u32; WORDS as usize],
    chunk: u32,
    from: u32,
    to: u32,
) -> u32 {
    let mut live = 0;
    // Every item word, whatever the range (a loop of fixed length, unrolled: no loop branch);
    // the words outside `from..to` are masked off after.
    for w in 1..WORDS as usize {
        let pos = match entries.get(words[w] as usize) {
            Some(Entry::Occupied(timer)) => timer.pos.get(),
            _ => 0,
        };
        live |= u32::from(pos == addr(chunk, w as u32)) << w;
    }
    live & (u32::MAX << from) & !(u32::MAX << to.min(WORDS))
}

/// The words set in a [`gather_live`] mask, in increasing order.
#[inline]
fn live_words(mut live: u32) -> impl Iterator<Item = usize> {
    core::iter::from_fn(move || {
        if live == 0 {
            return None;
        }
        let w = live.trailing_zeros() as usize;
        live &= live - 1;
        // `& (WORDS - 1)`: a chunk's word; the mask drops a bounds check.
        Some(w & (WORDS as usize - 1))
    })
}

/// An item address or rank as a position (never 0: word 0 of a chunk is its link).
#[inline]
fn nonzero(pos: u32) -> NonZeroU32 {
    match NonZeroU32::new(pos) {
        Some(pos) => pos,
        None => unreachable!("an item address is never 0"),
    }
}

/// The later of two generations in wrapping order (generations only move forward).
fn newer(a: u32, b: u32) -> u32 {
    if b.wrapping_sub(a) as i32 > 0 {
        b
    } else {
        a
    }
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("now", &self.elapsed)
            .field("len", &self.live())
            .field("next_deadline", &self.next_deadline())
            .finish_non_exhaustive()
    }
}

impl<T> Extend<(Tick, T)> for Wheel<T> {
    /// Inserts every `(deadline, value)`; the keys are not returned.
    fn extend<I: IntoIterator<Item = (Tick, T)>>(&mut self, iter: I) {
        for (deadline, value) in iter {
            self.insert(deadline, value);
        }
    }
}

impl<T> FromIterator<(Tick, T)> for Wheel<T> {
    /// A wheel starting at tick 0 holding every `(deadline, value)`.
    fn from_iter<I: IntoIterator<Item = (Tick, T)>>(iter: I) -> Self {
        let mut wheel = Wheel::new();
        wheel.extend(iter);
        wheel
    }
}

impl<'a, T> IntoIterator for &'a Wheel<T> {
    type Item = (TimerKey, Tick, &'a T);
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// Iterator over pending timers, from [`Wheel::iter`].
pub struct Iter<'a, T> {
    entries: core::iter::Enumerate<core::slice::Iter<'a, Entry<T>>>,
    left: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = (TimerKey, Tick, &'a T);
    fn next(&mut self) -> Option<Self::Item> {
        for (index, entry) in self.entries.by_ref() {
            if let Entry::Occupied(timer) = entry {
                self.left -= 1;
                let key = TimerKey {
                    index: index as u32,
                    gen: timer.gen,
                };
                return Some((key, timer.deadline, &timer.value));
            }
        }
        None
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}

/// Iterator over pending timers with mutable values, from [`Wheel::iter_mut`].
pub struct IterMut<'a, T> {
    entries: core::iter::Enumerate<core::slice::IterMut<'a, Entry<T>>>,
    left: usize,
}

impl<'a, T> Iterator for IterMut<'a, T> {
    type Item = (TimerKey, Tick, &'a mut T);
    fn next(&mut self) -> Option<Self::Item> {
        for (index, entry) in self.entries.by_ref() {
            if let Entry::Occupied(timer) = entry {
                self.left -= 1;
                let key = TimerKey {
                    index: index as u32,
                    gen: timer.gen,
                };
                return Some((key, timer.deadline, &mut timer.value));
            }
        }
        None
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<T> ExactSizeIterator for IterMut<'_, T> {}

/// Owning iterator over the timers a wheel held, from [`Wheel::drain`].
///
/// The wheel is already empty (its slab memory went with the timers); dropping the iterator
/// drops the remaining values.
pub struct Drain<'a, T> {
    entries: core::iter::Enumerate<alloc::vec::IntoIter<Entry<T>>>,
    _wheel: PhantomData<&'a mut Wheel<T>>,
}

impl<T> Iterator for Drain<'_, T> {
    type Item = (TimerKey, Tick, T);
    fn next(&mut self) -> Option<Self::Item> {
        for (index, entry) in self.entries.by_ref() {
            if let Entry::Occupied(timer) = entry {
                let key = TimerKey {
                    index: index as u32,
                    gen: timer.gen,
                };
                return Some((key, timer.deadline, timer.value));
            }
        }
        None
    }
}
