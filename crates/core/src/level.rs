//! One level of the wheel: 64 slot lists, their occupancy bitmap, and what is known of each
//! slot's earliest deadline.
//!
//! Only slot heads and tails live here; the lists themselves are threaded through the slab
//! (see `entry.rs`), so a level is a fixed 1 KiB whatever the number of timers.
//!
//! # Earliest deadline per slot
//!
//! A level-0 slot holds a single tick, so its earliest deadline is its tick. A slot of a
//! higher level covers `64^level` ticks, and `Wheel::next_deadline` must still be exact, so
//! each slot keeps `min`:
//! - appending a deadline lowers `min` if it is smaller, and marks the slot *unsorted* if it is
//!   smaller than the list's tail;
//! - removing the minimum of a sorted list makes the new head the minimum (read while
//!   unlinking: no extra cache miss); removing the minimum of an unsorted list marks the slot
//!   *stale*: `min` is then only a lower bound.
//!
//! The wheel repairs a stale slot only when it is the wheel's earliest slot, so a stale slot
//! costs nothing until its minimum is needed. The first repair scans the list for its
//! minimum; a second repair of the same slot sorts the list (stable, in place), after which
//! it is sorted and exact. So a slot whose timers are cancelled at random pays one scan, and
//! a slot whose timers are cancelled in deadline order (request timeouts completed in order)
//! pays one sort and then O(1) per cancel; a slot filled in deadline order never needs
//! repair at all.

use crate::entry::NIL;
use crate::tick::{Tick, SLOTS};

/// Head and tail of one slot's doubly linked list (slab indices, [`NIL`] when empty).
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl List {
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };
}

#[derive(Clone, Debug)]
pub(crate) struct Level {
    /// Bit `s` set: slot `s` holds at least one timer.
    pub(crate) occupied: u64,
    /// Bit `s` set: slot `s`'s list is not in deadline order.
    pub(crate) unsorted: u64,
    /// Bit `s` set: `min[s]` is only a lower bound of slot `s`'s deadlines.
    pub(crate) stale: u64,
    /// Bit `s` set: slot `s` was repaired by a scan since it last became sorted or empty.
    pub(crate) scanned: u64,
    pub(crate) lists: [List; SLOTS],
    /// Earliest deadline in each slot, exact unless the slot is stale. Meaningless when empty.
    pub(crate) min: [Tick; SLOTS],
}

impl Level {
    pub(crate) const EMPTY: Level = Level {
        occupied: 0,
        unsorted: 0,
        stale: 0,
        scanned: 0,
        lists: [List::EMPTY; SLOTS],
        min: [0; SLOTS],
    };

    /// Forgets every slot (the entries themselves are handled by the caller).
    pub(crate) fn clear(&mut self) {
        *self = Level::EMPTY;
    }

    /// Marks `slot` as holding no timer.
    #[inline]
    pub(crate) fn set_empty(&mut self, slot: usize) {
        let bit = !(1u64 << slot);
        self.occupied &= bit;
        self.unsorted &= bit;
        self.stale &= bit;
        self.scanned &= bit;
        self.lists[slot] = List::EMPTY;
    }
}
