//! The slab entry that holds one timer, and the key that names it.
//!
//! # Layout
//!
//! Timers live in one `Vec<Entry<T>>`. An occupied entry is a [`Timer`]: deadline, value,
//! generation, and the address of its item in the pool (see `pool.rs`). For `T = u64` that is
//! `8 (deadline) + 8 (value) + 4 (generation) + 4 (position)` = 24 bytes; the position is
//! never 0, so the enum's tag hides in that niche and costs nothing (a unit test pins the
//! size). A vacant entry keeps the generation and threads the free list: both in one `u64`
//! (`link`), so that vacating an entry is two stores (the link and the niche), not three
//! (ADR 0039).
//!
//! Cancelling a timer touches its own entry and nothing else: the entry becomes vacant, and
//! the item that pointed at it becomes garbage that its slot drops later.

use core::fmt;
use core::num::NonZeroU32;

use crate::tick::Tick;

/// The "no entry" index ending a list. Entry indices are therefore at most `u32::MAX - 1`.
pub(crate) const NIL: u32 = u32::MAX;

/// A live timer.
#[derive(Clone)]
pub(crate) struct Timer<T> {
    /// The effective deadline: `max(requested deadline, clock at insert or reset)`.
    pub(crate) deadline: Tick,
    pub(crate) value: T,
    pub(crate) gen: u32,
    /// Address of this timer's live item in the pool.
    pub(crate) pos: NonZeroU32,
}

/// One slot of the slab.
#[derive(Clone)]
pub(crate) enum Entry<T> {
    Occupied(Timer<T>),
    /// The generation of the entry's next timer (low 32 bits) and the next vacant entry of
    /// the free list (high 32 bits; `NIL` ends it).
    Vacant {
        link: u64,
    },
}

impl<T> Entry<T> {
    /// A vacant entry whose next timer gets generation `gen`, linking to `next_free`.
    #[inline(always)]
    pub(crate) fn vacant(gen: u32, next_free: u32) -> Self {
        Entry::Vacant {
            link: u64::from(gen) | u64::from(next_free) << 32,
        }
    }

    /// The generation a key must carry to name this entry's current (or next) timer.
    #[inline]
    pub(crate) fn gen(&self) -> u32 {
        match self {
            Entry::Occupied(timer) => timer.gen,
            Entry::Vacant { link } => *link as u32,
        }
    }

    /// A vacant entry's next generation and free-list link, `None` if occupied.
    #[inline(always)]
    pub(crate) fn vacancy(&self) -> Option<(u32, u32)> {
        match self {
            Entry::Vacant { link } => Some((*link as u32, (*link >> 32) as u32)),
            Entry::Occupied(_) => None,
        }
    }

    /// The timer, if the entry is occupied by the timer of generation `key_gen`.
    #[inline]
    pub(crate) fn live(&self, key_gen: u32) -> Option<&Timer<T>> {
        match self {
            Entry::Occupied(timer) if timer.gen == key_gen => Some(timer),
            _ => None,
        }
    }

    /// Mutable form of [`Entry::live`].
    #[inline]
    pub(crate) fn live_mut(&mut self, key_gen: u32) -> Option<&mut Timer<T>> {
        match self {
            Entry::Occupied(timer) if timer.gen == key_gen => Some(timer),
            _ => None,
        }
    }
}

/// The timer whose live item sits at pool address `addr`, if `index` names one: the test
/// that tells a live item from garbage.
#[inline]
pub(crate) fn at<T>(entries: &[Entry<T>], index: u32, addr: u32) -> Option<&Timer<T>> {
    match entries.get(index as usize) {
        Some(Entry::Occupied(timer)) if timer.pos.get() == addr => Some(timer),
        _ => None,
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
    fn entry_of_u64_is_24_bytes() {
        assert_eq!(core::mem::size_of::<Entry<u64>>(), 24);
        assert_eq!(core::mem::size_of::<Entry<u32>>(), 24);
        assert_eq!(core::mem::size_of::<Entry<()>>(), 16);
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
