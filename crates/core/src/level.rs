//! One level of the wheel: 256 slot chains, their occupancy bitmap, and what is known of each
//! slot's earliest deadline.
//!
//! A slot's timers are a chain of chunks in the pool (see `pool.rs`); a level holds only the
//! chains' ends and counters, so it is a fixed 11 KiB whatever the number of timers.
//!
//! # Earliest deadline per slot
//!
//! A level-0 slot holds a single tick, so its earliest deadline is its tick. A slot of a
//! higher level covers `256^level` ticks, so each slot keeps `min`, a lower bound of its
//! live deadlines:
//! - filing a deadline lowers `min` if it is smaller (and then `min` is exact), and marks
//!   the slot *unsorted* (`last = UNSORTED`) if it is smaller than the last deadline filed
//!   there;
//! - cancels do not touch the slot at all, so `min` may be a cancelled timer's deadline. It
//!   is exact while the wheel's cancel count still equals the slot's `exact_at`.
//!
//! The wheel needs a slot's exact minimum only when that slot holds its earliest timer and
//! the cached earliest deadline was just removed (`Wheel::refresh_next`). A sorted slot is
//! then repaired by skipping the garbage at its head (each item once: amortised O(1)); an
//! unsorted slot the first time by a scan, which also compacts it (O(k)); a second time by a
//! stable sort of its live items (a counting sort by the low digit at level 1, whose slots
//! span 256 ticks: O(k); a comparison sort above, O(k log k)), after which it is sorted and
//! exact. So a slot whose timers are
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

    /// The lowest set bit at or after `from`.
    #[inline]
    pub(crate) fn first_from(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.0.get(word)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.0.get(word)?;
        }
    }

    /// The lowest set bit, if it lies before `before`.
    #[cfg(debug_assertions)]
    pub(crate) fn first_before(&self, before: usize) -> Option<usize> {
        self.first().filter(|&s| s < before)
    }
}

/// `Level::last` of a slot whose items are not in deadline order. A sorted slot whose last
/// deadline is `Tick::MAX` reads as unsorted too: it is then scanned or sorted when its
/// minimum is needed, which is slower but exact (only the reverse mistake would be wrong).
/// One value instead of a bit: filing writes `last` branch-free.
pub(crate) const UNSORTED: Tick = Tick::MAX;

/// `repr(C)`, chains first: a filing keeps a pointer to its slot's chain (for the counter
/// and the tail updates), and at offset 0 that pointer is one `lea` instead of two.
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Level {
    pub(crate) chains: [Chain; SLOTS],
    /// A lower bound of each slot's live deadlines, exact while no timer has been cancelled
    /// since `exact_at[s]`. Meaningless when empty.
    pub(crate) min: [Tick; SLOTS],
    /// The largest deadline filed into each slot while its items are in deadline order (the
    /// order check), or [`UNSORTED`] once one was filed out of order.
    pub(crate) last: [Tick; SLOTS],
    /// The wheel's cancel count (`Wheel::cancels`) when `min[s]` was last known exact.
    pub(crate) exact_at: [u64; SLOTS],
    /// Bit `s` set: slot `s` holds at least one live timer.
    pub(crate) occupied: Bits,
    /// Bit `s` set: slot `s` was repaired by a scan since it last became sorted or empty.
    pub(crate) scanned: Bits,
}

impl Level {
    pub(crate) const EMPTY: Level = Level {
        occupied: Bits::EMPTY,
        scanned: Bits::EMPTY,
        min: [0; SLOTS],
        exact_at: [0; SLOTS],
        last: [0; SLOTS],
        chains: [Chain::EMPTY; SLOTS],
    };

    /// Forgets every slot (the pool and the entries are handled by the caller).
    pub(crate) fn clear(&mut self) {
        *self = Level::EMPTY;
    }

    /// Notes a timer with `deadline` filed into the occupied `slot`: lowers the slot's minimum
    /// (exact as of `cancels`, the wheel's cancel count) and keeps the order check.
    #[inline(always)]
    pub(crate) fn note_filed(&mut self, slot: usize, deadline: Tick, cancels: u64) {
        if deadline <= self.min[slot] {
            // Below every deadline in the slot, even if `min` was only a lower bound.
            self.min[slot] = deadline;
            self.exact_at[slot] = cancels;
        }
        // Out of order: the slot is unsorted (`UNSORTED`) from now on.
        self.last[slot] = if deadline < self.last[slot] {
            UNSORTED
        } else {
            deadline
        };
    }

    /// Marks `slot` as holding no timer; its chain must already have been freed or taken.
    #[inline]
    pub(crate) fn set_empty(&mut self, slot: usize) {
        self.occupied.clear(slot);
        self.scanned.clear(slot);
        self.chains[slot] = Chain::EMPTY;
    }
}
