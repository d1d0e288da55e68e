//! One level of the wheel: 256 slot chains, their occupancy bitmap, and what is known of each
//! slot's earliest deadline.
//!
//! A slot's timers are a chain of chunks in the pool (see `pool.rs`); a level holds only the
//! chains' ends and counters, so it is a fixed 10 KiB whatever the number of timers.
//!
//! # Earliest deadline per slot
//!
//! A level-0 slot holds a single tick, so its earliest deadline is its tick. A slot of a
//! higher level covers `64^level` ticks, and `Wheel::next_deadline` must still be exact, so
//! each slot keeps `min`:
//! - filing a deadline lowers `min` if it is smaller, and marks the slot *unsorted* if it is
//!   smaller than the last deadline filed there;
//! - removing a timer whose deadline equals `min` marks the slot *stale*: `min` is then only
//!   a lower bound (cancels are lazy, so the wheel does not look at the other items then).
//!
//! The wheel repairs a stale slot only when it is the wheel's earliest slot, so a stale slot
//! costs nothing until its minimum is needed. A sorted slot is repaired by skipping the
//! garbage at its head (each item is skipped once: amortised O(1)). An unsorted slot is
//! repaired the first time by a scan, which also compacts it (O(k)); a second time by a sort
//! of its live items, after which it is sorted and exact. So a slot whose timers are
//! cancelled at random pays one scan, and a slot whose timers are cancelled in deadline order
//! (request timeouts completed in order) pays one sort and then O(1) per cancel; a slot
//! filled in deadline order never needs more than the head skip.

use crate::pool::Chain;
use crate::tick::{Tick, SLOTS};

/// One bit per slot of a level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bits([u64; SLOTS / 64]);

impl Bits {
    pub(crate) const EMPTY: Bits = Bits([0; SLOTS / 64]);

    #[inline]
    pub(crate) fn get(&self, slot: usize) -> bool {
        self.0[slot / 64] & (1 << (slot % 64)) != 0
    }

    #[inline]
    pub(crate) fn set(&mut self, slot: usize) {
        self.0[slot / 64] |= 1 << (slot % 64);
    }

    #[inline]
    pub(crate) fn clear(&mut self, slot: usize) {
        self.0[slot / 64] &= !(1 << (slot % 64));
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The lowest set bit.
    #[inline]
    pub(crate) fn first(&self) -> Option<usize> {
        self.0
            .iter()
            .enumerate()
            .find(|(_, &w)| w != 0)
            .map(|(i, &w)| i * 64 + w.trailing_zeros() as usize)
    }

    /// The lowest set bit, if it lies before `before`.
    #[cfg(debug_assertions)]
    pub(crate) fn first_before(&self, before: usize) -> Option<usize> {
        self.first().filter(|&s| s < before)
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Level {
    /// Bit `s` set: slot `s` holds at least one live timer.
    pub(crate) occupied: Bits,
    /// Bit `s` set: slot `s`'s items are not in deadline order.
    pub(crate) unsorted: Bits,
    /// Bit `s` set: `min[s]` is only a lower bound of slot `s`'s deadlines.
    pub(crate) stale: Bits,
    /// Bit `s` set: slot `s` was repaired by a scan since it last became sorted or empty.
    pub(crate) scanned: Bits,
    /// Earliest deadline in each slot, exact unless the slot is stale. Meaningless when empty.
    pub(crate) min: [Tick; SLOTS],
    /// The largest deadline filed into each slot while it was sorted (the order check).
    pub(crate) last: [Tick; SLOTS],
    pub(crate) chains: [Chain; SLOTS],
}

impl Level {
    pub(crate) const EMPTY: Level = Level {
        occupied: Bits::EMPTY,
        unsorted: Bits::EMPTY,
        stale: Bits::EMPTY,
        scanned: Bits::EMPTY,
        min: [0; SLOTS],
        last: [0; SLOTS],
        chains: [Chain::EMPTY; SLOTS],
    };

    /// Forgets every slot (the pool and the entries are handled by the caller).
    pub(crate) fn clear(&mut self) {
        *self = Level::EMPTY;
    }

    /// Marks `slot` as holding no timer; its chain must already have been freed or taken.
    #[inline]
    pub(crate) fn set_empty(&mut self, slot: usize) {
        self.occupied.clear(slot);
        self.unsorted.clear(slot);
        self.stale.clear(slot);
        self.scanned.clear(slot);
        self.chains[slot] = Chain::EMPTY;
    }
}
