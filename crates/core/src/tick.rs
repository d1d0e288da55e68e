//! Level arithmetic: which level and slot a deadline belongs to, seen from the wheel's clock.
//!
//! A deadline `when` is filed at the level of the highest 6-bit digit in which it differs from
//! the wheel's clock `elapsed`, and at the slot given by that digit of `when`. So level 0 holds
//! the deadlines that share everything but the lowest digit with the clock (the next < 64 ticks,
//! one tick per slot), level 1 those that share all but the two lowest digits, and so on. With
//! 6 bits per level, 11 levels cover the whole `u64`: the top level uses the remaining 4 bits
//! (16 of its 64 slots). This is why no deadline is ever out of range.
//!
//! Every function here is pure and tested exhaustively over its small domain below.

/// A point in time, in ticks. The caller decides what a tick means (1 ms, 100 µs, 1 ns, …).
pub type Tick = u64;

/// Bits of a deadline consumed by one level: 64 slots per level.
pub(crate) const BITS_PER_LEVEL: u32 = 6;

/// Slots per level.
pub(crate) const SLOTS: usize = 1 << BITS_PER_LEVEL;

/// Levels needed to cover every `u64` deadline: `ceil(64 / 6) = 11`; the top level is partial.
pub(crate) const NUM_LEVELS: usize = 64_usize.div_ceil(BITS_PER_LEVEL as usize);

/// The level at which `when` is filed while the wheel's clock reads `elapsed`.
///
/// Requires `when >= elapsed` (the wheel never holds a deadline in its past).
#[inline]
pub(crate) fn level_for(elapsed: Tick, when: Tick) -> usize {
    debug_assert!(elapsed <= when, "elapsed={elapsed}; when={when}");
    // Setting the low six bits makes a deadline equal to the clock land on level 0.
    let significant = 63 - ((elapsed ^ when) | (SLOTS as u64 - 1)).leading_zeros();
    (significant / BITS_PER_LEVEL) as usize
}

/// The slot of `when` within `level`: its `level`-th 6-bit digit.
#[inline]
pub(crate) fn slot_for(when: Tick, level: usize) -> usize {
    ((when >> (level as u32 * BITS_PER_LEVEL)) & (SLOTS as u64 - 1)) as usize
}

/// The first tick covered by `slot` of `level`, in the rotation of `level` that contains
/// `elapsed` (all digits above `level` are taken from `elapsed`).
#[inline]
pub(crate) fn slot_start(elapsed: Tick, level: usize, slot: usize) -> Tick {
    let shift = level as u32 * BITS_PER_LEVEL;
    let above = shift + BITS_PER_LEVEL;
    // The top level has no digits above it: `checked_shl` yields `None` for a 64-bit shift.
    let keep = 1u64
        .checked_shl(above)
        .map_or(0, |span| !(span.wrapping_sub(1)));
    (elapsed & keep) | ((slot as u64) << shift)
}

/// Bit mask of the slots of `level` that come at or after the clock's own digit.
///
/// Occupied slots of a level never lie before the clock's digit (their timers would have been
/// cascaded or fired already), so the first occupied slot is `(occupied & mask).trailing_zeros()`.
#[inline]
pub(crate) fn slots_from(elapsed: Tick, level: usize) -> u64 {
    u64::MAX << slot_for(elapsed, level)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: the highest differing bit decides the level.
    fn level_reference(elapsed: u64, when: u64) -> usize {
        for level in (0..NUM_LEVELS).rev() {
            let shift = level as u32 * BITS_PER_LEVEL;
            if shift < 64 && (elapsed >> shift) != (when >> shift) {
                return level;
            }
        }
        0
    }

    #[test]
    fn eleven_levels_cover_u64() {
        assert_eq!(NUM_LEVELS, 11);
        assert_eq!(level_for(0, u64::MAX), 10);
        assert_eq!(slot_for(u64::MAX, 10), 15);
    }

    #[test]
    fn level_for_every_single_bit_difference() {
        // Exhaustive over the position of the highest differing bit, at several clocks.
        for elapsed in [0u64, 1, 63, 64, 4095, 1 << 40, u64::MAX / 2, u64::MAX - 64] {
            for bit in 0..64 {
                let when = elapsed | (1u64 << bit);
                if when < elapsed {
                    continue;
                }
                assert_eq!(
                    level_for(elapsed, when),
                    level_reference(elapsed, when),
                    "elapsed={elapsed}; when={when}"
                );
            }
            assert_eq!(level_for(elapsed, elapsed), 0);
        }
    }

    #[test]
    fn level_for_small_domain_exhaustive() {
        for elapsed in 0..600u64 {
            for when in elapsed..5000u64 {
                assert_eq!(level_for(elapsed, when), level_reference(elapsed, when));
            }
        }
    }

    #[test]
    fn slot_start_contains_its_deadlines() {
        for elapsed in [0u64, 5, 64, 100_000, 1 << 50, u64::MAX - 1000] {
            for when in [
                elapsed,
                elapsed + 1,
                elapsed + 63,
                elapsed + 64,
                elapsed + 999,
            ] {
                let level = level_for(elapsed, when);
                let slot = slot_for(when, level);
                let start = slot_start(elapsed, level, slot);
                let span = 1u128 << (level as u32 * BITS_PER_LEVEL);
                assert!(start <= when, "start={start} when={when}");
                assert!(((when - start) as u128) < span, "when={when} start={start}");
                // The slot lies at or after the clock's digit.
                assert_ne!(slots_from(elapsed, level) & (1 << slot), 0);
            }
        }
        // The top level: every digit above is dropped.
        assert_eq!(slot_start(u64::MAX, 10, 15), 15 << 60);
        assert_eq!(slot_start(0, 10, 1), 1 << 60);
    }

    #[test]
    fn slots_from_masks_lower_slots() {
        assert_eq!(slots_from(0, 0), u64::MAX);
        assert_eq!(slots_from(63, 0), 1 << 63);
        assert_eq!(slots_from(64, 1), u64::MAX << 1);
        assert_eq!(slots_from(u64::MAX, 10), u64::MAX << 15);
    }
}
