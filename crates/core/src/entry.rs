//! The slab entry that holds one timer, and the key that names it.
//!
//! # Layout
//!
//! Timers live in one `Vec<Entry<T>>`. An occupied entry is its generation plus a [`Node`]:
//! deadline, value and the two list links (slab indices, not pointers). For `T = u64` that is
//! `1 (tag) + 3 (padding) + 4 (generation) + 8 (deadline) + 8 (value) + 4 (next) + 4 (prev)`
//! = 32 bytes, two timers per 64-byte cache line; a unit test pins this size. A vacant entry
//! keeps the generation and threads the free list through `next_free`.
//!
//! Cancelling a timer touches its own entry and its two list neighbours: three cache lines
//! at most, and no allocator call.

use core::fmt;

use crate::tick::Tick;

/// The "no entry" index ending a list. Entry indices are therefore at most `u32::MAX - 1`.
pub(crate) const NIL: u32 = u32::MAX;

/// A live timer: its deadline, value and links in its slot's list.
#[derive(Clone)]
pub(crate) struct Node<T> {
    /// The effective deadline: `max(requested deadline, clock at insert or reset)`.
    pub(crate) deadline: Tick,
    pub(crate) value: T,
    pub(crate) next: u32,
    pub(crate) prev: u32,
}

/// One slot of the slab.
#[derive(Clone)]
pub(crate) enum Entry<T> {
    Occupied { gen: u32, node: Node<T> },
    Vacant { gen: u32, next_free: u32 },
}

impl<T> Entry<T> {
    /// The node of an entry known to be linked into a list.
    ///
    /// # Panics
    ///
    /// If the entry is vacant: a list link pointed at a free entry, a broken invariant.
    #[inline]
    pub(crate) fn node(&self) -> &Node<T> {
        match self {
            Entry::Occupied { node, .. } => node,
            Entry::Vacant { .. } => unreachable!("timer list links to a vacant entry"),
        }
    }

    /// Mutable form of [`Entry::node`].
    ///
    /// # Panics
    ///
    /// If the entry is vacant (a broken invariant).
    #[inline]
    pub(crate) fn node_mut(&mut self) -> &mut Node<T> {
        match self {
            Entry::Occupied { node, .. } => node,
            Entry::Vacant { .. } => unreachable!("timer list links to a vacant entry"),
        }
    }

    /// The generation a key must carry to name this entry's current (or next) timer.
    #[inline]
    pub(crate) fn gen(&self) -> u32 {
        match self {
            Entry::Occupied { gen, .. } | Entry::Vacant { gen, .. } => *gen,
        }
    }

    /// The node, if the entry is occupied by the timer of generation `key_gen`.
    #[inline]
    pub(crate) fn live(&self, key_gen: u32) -> Option<&Node<T>> {
        match self {
            Entry::Occupied { gen, node } if *gen == key_gen => Some(node),
            _ => None,
        }
    }

    /// Mutable form of [`Entry::live`].
    #[inline]
    pub(crate) fn live_mut(&mut self, key_gen: u32) -> Option<&mut Node<T>> {
        match self {
            Entry::Occupied { gen, node } if *gen == key_gen => Some(node),
            _ => None,
        }
    }
}

/// Names one timer in one [`Wheel`](crate::Wheel).
///
/// A key stays valid until its timer fires, is removed, or the wheel is cleared. After that
/// every method given the key answers "no such timer" (`None`, `false`), even when the slab
/// entry has been reused for a newer timer: keys carry a generation that changes on every
/// reuse. Each wheel also starts its generations at a different offset, so a key from another
/// wheel is rejected in all but freak cases, and never causes a panic.
///
/// The generation is 32 bits: a stale key could match again only after its entry has been
/// reused 2³² times.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    pub(crate) index: u32,
    pub(crate) gen: u32,
}

impl TimerKey {
    /// The key as one `u64`, e.g. to store it in a message or a database column.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel_core::{TimerKey, Wheel};
    ///
    /// let mut wheel = Wheel::new();
    /// let key = wheel.insert(10, "x");
    /// assert_eq!(TimerKey::from_u64(key.to_u64()), key);
    /// ```
    #[must_use]
    pub const fn to_u64(self) -> u64 {
        ((self.gen as u64) << 32) | self.index as u64
    }

    /// Rebuilds a key from [`TimerKey::to_u64`]. Any `u64` is accepted: a value that never
    /// named a timer is simply a key that no wheel recognises.
    #[must_use]
    pub const fn from_u64(raw: u64) -> Self {
        TimerKey {
            index: raw as u32,
            gen: (raw >> 32) as u32,
        }
    }
}

impl fmt::Debug for TimerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerKey({}v{})", self.index, self.gen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_of_u64_is_half_a_cache_line() {
        assert_eq!(core::mem::size_of::<Entry<u64>>(), 32);
        assert_eq!(core::mem::size_of::<Entry<()>>(), 24);
        assert_eq!(core::mem::size_of::<TimerKey>(), 8);
    }

    #[test]
    fn key_roundtrips_through_u64() {
        for (index, gen) in [(0, 0), (1, 2), (u32::MAX - 1, u32::MAX), (7, 0)] {
            let key = TimerKey { index, gen };
            assert_eq!(TimerKey::from_u64(key.to_u64()), key);
        }
    }
}
