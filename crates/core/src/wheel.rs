//! [`Wheel`]: insert, remove, reset, poll, and the list surgery behind them.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use core::mem;

use crate::entry::{Entry, Node, TimerKey, NIL};
use crate::level::{Level, List};
use crate::tick::{level_for, slot_for, slot_start, slots_from, Tick, NUM_LEVELS};
use crate::InsertError;

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
    len: usize,
    /// The wheel's clock. Every pending timer has `deadline >= elapsed` and sits at
    /// `level_for(elapsed, deadline)`, slot `slot_for(deadline, level)`: a timer's place is a
    /// function of its deadline and the clock, so entries need not store it.
    elapsed: Tick,
    /// Bit `l` set: level `l` holds at least one timer.
    nonempty: u16,
    levels: Box<[Level; NUM_LEVELS]>,
    /// Generation given to entries pushed onto the slab. Raised above every generation a
    /// discarded entry had (by `clear`, `drain`, `shrink_to_fit`) so old keys stay dead.
    fresh_gen: u32,
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
            len: 0,
            elapsed: now,
            nonempty: 0,
            levels: Box::new([Level::EMPTY; NUM_LEVELS]),
            fresh_gen: wheel_seed(),
        }
    }

    /// The wheel's clock: the latest `now` given to [`poll`](Self::poll), or, while polls
    /// are handing out timers, the deadline of the timer handed out last.
    #[must_use]
    pub fn now(&self) -> Tick {
        self.elapsed
    }

    /// Number of pending timers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when no timer is pending.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of timers the wheel can hold without allocating.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Makes room for at least `additional` more timers than are pending now.
    ///
    /// # Panics
    ///
    /// If the new capacity overflows `usize` (as [`Vec::reserve`]).
    pub fn reserve(&mut self, additional: usize) {
        let vacant = self.entries.len() - self.len;
        if additional > vacant {
            self.entries.reserve(additional - vacant);
        }
    }

    /// Adds a timer that fires at `deadline` and returns its key. O(1).
    ///
    /// A `deadline` at or before [`now`](Self::now) fires at the next [`poll`](Self::poll);
    /// its effective deadline is `now()`. Every `u64` is a valid deadline.
    ///
    /// # Panics
    ///
    /// If the wheel already holds `u32::MAX` timers (about 4 billion); see
    /// [`try_insert`](Self::try_insert) for the non-panicking form.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = tickwheel_core::Wheel::new();
    /// let key = wheel.insert(u64::MAX, "the end of time");
    /// assert_eq!(wheel.deadline(key), Some(u64::MAX));
    /// ```
    pub fn insert(&mut self, deadline: Tick, value: T) -> TimerKey {
        match self.try_insert(deadline, value) {
            Ok(key) => key,
            Err(_) => panic!("tickwheel: a wheel holds at most {} timers", NIL),
        }
    }

    /// Like [`insert`](Self::insert), but hands the value back instead of panicking when the
    /// wheel is full.
    ///
    /// # Errors
    ///
    /// [`InsertError`] (holding `value`) if `u32::MAX` timers are pending.
    pub fn try_insert(&mut self, deadline: Tick, value: T) -> Result<TimerKey, InsertError<T>> {
        let deadline = deadline.max(self.elapsed);
        let node = Node {
            deadline,
            value,
            next: NIL,
            prev: NIL,
        };
        let key = if self.free != NIL {
            let index = self.free;
            let entry = &mut self.entries[index as usize];
            let (gen, next_free) = match *entry {
                Entry::Vacant { gen, next_free } => (gen, next_free),
                Entry::Occupied { .. } => unreachable!("free list links to an occupied entry"),
            };
            *entry = Entry::Occupied { gen, node };
            self.free = next_free;
            TimerKey { index, gen }
        } else {
            let index = self.entries.len();
            if index >= NIL as usize {
                return Err(InsertError(node.value));
            }
            let gen = self.fresh_gen;
            self.entries.push(Entry::Occupied { gen, node });
            TimerKey {
                index: index as u32,
                gen,
            }
        };
        self.len += 1;
        self.link(key.index, deadline);
        Ok(key)
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
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        let deadline = self
            .entries
            .get(key.index as usize)?
            .live(key.gen)?
            .deadline;
        self.unlink(key.index, deadline);
        let vacant = Entry::Vacant {
            gen: key.gen.wrapping_add(1),
            next_free: self.free,
        };
        let old = mem::replace(&mut self.entries[key.index as usize], vacant);
        self.free = key.index;
        self.len -= 1;
        self.repair_front();
        match old {
            Entry::Occupied { node, .. } => Some(node.value),
            Entry::Vacant { .. } => unreachable!("checked occupied above"),
        }
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
        let old = match self
            .entries
            .get(key.index as usize)
            .and_then(|e| e.live(key.gen))
        {
            Some(node) => node.deadline,
            None => return false,
        };
        let deadline = deadline.max(self.elapsed);
        self.unlink(key.index, old);
        self.entries[key.index as usize].node_mut().deadline = deadline;
        self.link(key.index, deadline);
        self.repair_front();
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
    #[must_use]
    pub fn next_deadline(&self) -> Option<Tick> {
        let (level, slot) = self.front()?;
        if level == 0 {
            return Some(slot_start(self.elapsed, 0, slot));
        }
        let lvl = &self.levels[level];
        debug_assert_eq!(
            lvl.stale & (1 << slot),
            0,
            "front slot stale; level={level}"
        );
        Some(lvl.min[slot])
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
    pub fn poll(&mut self, now: Tick) -> Option<(TimerKey, T)> {
        let now = now.max(self.elapsed);
        loop {
            let Some((level, slot)) = self.front() else {
                self.elapsed = now;
                return None;
            };
            let start = slot_start(self.elapsed, level, slot);
            if start > now {
                self.elapsed = now;
                return None;
            }
            self.elapsed = start;
            if level == 0 {
                return Some(self.pop_front(slot));
            }
            self.cascade(level, slot);
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
        let mut keep = self.entries.len();
        while keep > 0 && matches!(self.entries[keep - 1], Entry::Vacant { .. }) {
            keep -= 1;
            self.fresh_gen = newer(self.fresh_gen, self.entries[keep].gen());
        }
        self.entries.truncate(keep);
        self.entries.shrink_to_fit();
        // Rebuild the free list over the vacant entries that remain.
        self.free = NIL;
        for (index, entry) in self.entries.iter_mut().enumerate().rev() {
            if let Entry::Vacant { next_free, .. } = entry {
                *next_free = self.free;
                self.free = index as u32;
            }
        }
    }

    /// Iterates over pending timers as `(key, effective deadline, &value)`, in no particular
    /// order.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            entries: self.entries.iter().enumerate(),
            left: self.len,
        }
    }

    /// Iterates over pending timers as `(key, effective deadline, &mut value)`, in no
    /// particular order.
    pub fn iter_mut(&mut self) -> IterMut<'_, T> {
        IterMut {
            entries: self.entries.iter_mut().enumerate(),
            left: self.len,
        }
    }

    // ----- internals -----

    /// Level and slot of the earliest pending timers.
    #[inline]
    fn front(&self) -> Option<(usize, usize)> {
        if self.nonempty == 0 {
            return None;
        }
        let level = self.nonempty.trailing_zeros() as usize;
        let occupied = self.levels[level].occupied;
        debug_assert_eq!(
            occupied & !slots_from(self.elapsed, level),
            0,
            "slot behind the clock; level={level} elapsed={}",
            self.elapsed
        );
        Some((level, occupied.trailing_zeros() as usize))
    }

    /// Files entry `index` (already holding `deadline`) at the tail of its slot.
    #[inline]
    fn link(&mut self, index: u32, deadline: Tick) {
        let level = level_for(self.elapsed, deadline);
        let slot = slot_for(deadline, level);
        let lvl = &mut self.levels[level];
        let bit = 1u64 << slot;
        let tail = lvl.lists[slot].tail;
        if tail == NIL {
            lvl.lists[slot] = List {
                head: index,
                tail: index,
            };
            lvl.occupied |= bit;
            lvl.unsorted &= !bit;
            lvl.stale &= !bit;
            lvl.scanned &= !bit;
            lvl.min[slot] = deadline;
            self.nonempty |= 1 << level;
            let node = self.entries[index as usize].node_mut();
            node.prev = NIL;
            node.next = NIL;
            return;
        }
        lvl.lists[slot].tail = index;
        if deadline <= lvl.min[slot] {
            // Below every deadline in the slot, even if `min` was only a lower bound.
            lvl.min[slot] = deadline;
            lvl.stale &= !bit;
        }
        let tail_node = self.entries[tail as usize].node_mut();
        tail_node.next = index;
        if deadline < tail_node.deadline {
            lvl.unsorted |= bit;
        }
        let node = self.entries[index as usize].node_mut();
        node.prev = tail;
        node.next = NIL;
    }

    /// Takes entry `index` (whose effective deadline is `deadline`) out of its slot's list.
    #[inline]
    fn unlink(&mut self, index: u32, deadline: Tick) {
        let level = level_for(self.elapsed, deadline);
        let slot = slot_for(deadline, level);
        let (prev, next) = {
            let node = self.entries[index as usize].node();
            (node.prev, node.next)
        };
        let lvl = &mut self.levels[level];
        if prev == NIL {
            lvl.lists[slot].head = next;
        } else {
            self.entries[prev as usize].node_mut().next = next;
        }
        let next_deadline = if next == NIL {
            lvl.lists[slot].tail = prev;
            0
        } else {
            let node = self.entries[next as usize].node_mut();
            node.prev = prev;
            node.deadline
        };
        if lvl.lists[slot].head == NIL {
            lvl.set_empty(slot);
            if lvl.occupied == 0 {
                self.nonempty &= !(1 << level);
            }
            return;
        }
        let bit = 1u64 << slot;
        if deadline == lvl.min[slot] && lvl.stale & bit == 0 {
            if lvl.unsorted & bit != 0 {
                lvl.stale |= bit;
            } else if prev == NIL {
                // Sorted list: the new head holds the minimum.
                lvl.min[slot] = next_deadline;
            }
        }
    }

    /// Hands out the head of level-0 slot `slot` (its tick is the clock).
    fn pop_front(&mut self, slot: usize) -> (TimerKey, T) {
        let index = self.levels[0].lists[slot].head;
        debug_assert_ne!(index, NIL);
        let entry = &self.entries[index as usize];
        let gen = entry.gen();
        let deadline = entry.node().deadline;
        debug_assert_eq!(deadline, self.elapsed, "fired off its tick");
        self.unlink(index, deadline);
        let vacant = Entry::Vacant {
            gen: gen.wrapping_add(1),
            next_free: self.free,
        };
        let old = mem::replace(&mut self.entries[index as usize], vacant);
        self.free = index;
        self.len -= 1;
        self.repair_front();
        match old {
            Entry::Occupied { node, .. } => (TimerKey { index, gen }, node.value),
            Entry::Vacant { .. } => unreachable!("list head is vacant"),
        }
    }

    /// Moves every timer of `slot` at `level` (whose start the clock has reached) down to the
    /// level its deadline now belongs to, keeping their order.
    fn cascade(&mut self, level: usize, slot: usize) {
        let lvl = &mut self.levels[level];
        let mut index = lvl.lists[slot].head;
        lvl.set_empty(slot);
        if lvl.occupied == 0 {
            self.nonempty &= !(1 << level);
        }
        while index != NIL {
            let node = self.entries[index as usize].node();
            let (next, deadline) = (node.next, node.deadline);
            debug_assert!(level_for(self.elapsed, deadline) < level);
            self.link(index, deadline);
            index = next;
        }
    }

    /// Keeps [`next_deadline`](Self::next_deadline) exact: if the earliest slot is above
    /// level 0 and its minimum went stale, repair it. Called after every operation that can
    /// remove a slot's minimum or change which slot is earliest.
    ///
    /// The first repair of a slot is a scan for its minimum (O(k), the list stays as it is);
    /// a second one before the slot empties sorts it (O(k log k)), after which removing its
    /// minimums in order is O(1). A slot whose timers are cancelled at random pays one scan
    /// at most; one whose timers are cancelled in deadline order pays one sort.
    #[inline]
    fn repair_front(&mut self) {
        if self.nonempty & 1 != 0 {
            return; // a level-0 slot is one tick: always exact
        }
        let Some((level, slot)) = self.front() else {
            return;
        };
        let bit = 1u64 << slot;
        let lvl = &self.levels[level];
        if lvl.stale & bit == 0 {
            return;
        }
        if lvl.scanned & bit == 0 {
            self.scan_slot(level, slot);
        } else {
            self.sort_slot(level, slot);
        }
    }

    /// Recomputes the exact minimum of `slot` at `level` by walking its list.
    #[cold]
    fn scan_slot(&mut self, level: usize, slot: usize) {
        let mut index = self.levels[level].lists[slot].head;
        let mut min = Tick::MAX;
        while index != NIL {
            let node = self.entries[index as usize].node();
            min = min.min(node.deadline);
            index = node.next;
        }
        let lvl = &mut self.levels[level];
        lvl.min[slot] = min;
        lvl.stale &= !(1u64 << slot);
        lvl.scanned |= 1u64 << slot;
    }

    /// Stable-sorts the list of `slot` at `level` by deadline and makes its minimum exact.
    ///
    /// A bottom-up merge sort of the linked list itself (Simon Tatham's): O(k log k), stable,
    /// and no memory beyond the list, so a repair never allocates.
    #[cold]
    fn sort_slot(&mut self, level: usize, slot: usize) {
        let mut list = self.levels[level].lists[slot].head;
        let mut run = 1usize;
        let tail = loop {
            let mut p = list;
            list = NIL;
            let mut tail = NIL;
            let mut merges = 0;
            while p != NIL {
                merges += 1;
                // Run `p` has up to `run` entries; run `q` starts right after it.
                let mut q = p;
                let mut p_len = 0;
                while p_len < run && q != NIL {
                    p_len += 1;
                    q = self.entries[q as usize].node().next;
                }
                let mut q_len = run;
                while p_len > 0 || (q_len > 0 && q != NIL) {
                    let take_p = if p_len == 0 {
                        false
                    } else if q_len == 0 || q == NIL {
                        true
                    } else {
                        // `<=`: on equal deadlines the earlier run goes first (stability).
                        self.entries[p as usize].node().deadline
                            <= self.entries[q as usize].node().deadline
                    };
                    let e = if take_p {
                        let e = p;
                        p = self.entries[p as usize].node().next;
                        p_len -= 1;
                        e
                    } else {
                        let e = q;
                        q = self.entries[q as usize].node().next;
                        q_len -= 1;
                        e
                    };
                    if tail == NIL {
                        list = e;
                    } else {
                        self.entries[tail as usize].node_mut().next = e;
                    }
                    tail = e;
                }
                p = q;
            }
            self.entries[tail as usize].node_mut().next = NIL;
            if merges <= 1 {
                break tail;
            }
            run *= 2;
        };
        // Restore the back links.
        let mut prev = NIL;
        let mut index = list;
        while index != NIL {
            let node = self.entries[index as usize].node_mut();
            node.prev = prev;
            prev = index;
            index = node.next;
        }
        let min = self.entries[list as usize].node().deadline;
        let lvl = &mut self.levels[level];
        lvl.lists[slot] = List { head: list, tail };
        lvl.min[slot] = min;
        let bit = !(1u64 << slot);
        lvl.stale &= bit;
        lvl.unsorted &= bit;
        lvl.scanned &= bit;
    }

    /// Empties the lists and makes sure no key issued so far can name an entry pushed later.
    fn retire_entries(&mut self) {
        for entry in &self.entries {
            let next_gen = match entry {
                Entry::Occupied { gen, .. } => gen.wrapping_add(1),
                Entry::Vacant { gen, .. } => *gen,
            };
            self.fresh_gen = newer(self.fresh_gen, next_gen);
        }
        for level in self.levels.iter_mut() {
            level.clear();
        }
        self.nonempty = 0;
        self.free = NIL;
        self.len = 0;
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
            .field("len", &self.len)
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
            if let Entry::Occupied { gen, node } = entry {
                self.left -= 1;
                let key = TimerKey {
                    index: index as u32,
                    gen: *gen,
                };
                return Some((key, node.deadline, &node.value));
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
            if let Entry::Occupied { gen, node } = entry {
                self.left -= 1;
                let key = TimerKey {
                    index: index as u32,
                    gen: *gen,
                };
                return Some((key, node.deadline, &mut node.value));
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
            if let Entry::Occupied { gen, node } = entry {
                let key = TimerKey {
                    index: index as u32,
                    gen,
                };
                return Some((key, node.deadline, node.value));
            }
        }
        None
    }
}
