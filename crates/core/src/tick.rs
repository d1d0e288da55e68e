//! Level arithmetic: which level and slot a deadline belongs to, seen from the wheel's clock.
//!
//! A deadline `when` is filed at the level of the highest 8-bit digit in which it differs from
//! the wheel's clock `elapsed`, and at the slot given by that digit of `when`. So level 0 holds
//! the deadlines that share everything but the lowest digit with the clock (the next < 256
//! ticks, one tick per slot), level 1 those that share all but the two lowest digits, and so
//! on. With 8 bits per level, 8 levels cover the whole `u64` exactly. This is why no deadline
//! is ever out of range.
//!
//! Why 256 slots and not 64 (Linux, tokio): each level a timer passes through is one more
//! cascade, one more read of its entry. With 1 ms ticks, 256 slots put everything due within
//! 65 s at level 1 (one cascade before firing, against two with 64 slots) and everything
//! within 4.7 h at level 2; the price is 8 KiB of slot tables per level instead of 2.5 KiB.
//!
//! Every function here is pure and tested exhaustively over its small domain below.

/// A point in time, in ticks. The caller decides what a tick means (1 ms, 100 µs, 1 ns, …).
pub type Tick = u64;

/// Bits of a deadline consumed by one level: 256 slots per level.
pub(crate) const BITS_PER_LEVEL: u32 = 8;

/// Slots per level.
pub(crate) const SLOTS: usize = 1 << BITS_PER_LEVEL;

/// Levels needed to cover every `u64` deadline: `64 / 8 = 8`.
pub(crate) const NUM_LEVELS: usize = 64_usize.div_ceil(BITS_PER_LEVEL as usize);

/// The level at which `when` is filed while the wheel's clock reads `elapsed`.
///
/// Requires `when >= elapsed` (the wheel never holds a deadline in its past).
#[inline]
pub(crate) fn level_for(elapsed: Tick, when: Tick) -> usize {
    debug_assert!(elapsed <= when, "elapsed={elapsed}; when={when}");
    // Setting the low digit's bits makes a deadline equal to the clock land on level 0.
    let significant = 63 - ((elapsed ^ when) | (SLOTS as u64 - 1)).leading_zeros();
    (significant / BITS_PER_LEVEL) as usize
}

/// `(level_for(elapsed, when), slot_for(when, level))` in one: the highest differing bit's
/// index gives both the level (`>> 3`) and the digit's shift (`& !7`), so a filing costs one
/// `bsr` and three cheap instructions instead of six (LLVM turns `63 - leading_zeros`
/// followed by `/ 8` into `bsr`, two `xor`s and a shift, then shifts the level back for the
/// digit).
///
/// Requires `when >= elapsed`.
#[inline(always)]
pub(crate) fn place_for(elapsed: Tick, when: Tick) -> (usize, usize) {
    debug_assert!(elapsed <= when, "elapsed={elapsed}; when={when}");
    // Non-zero (the low digit's bits are set), so `ilog2` cannot panic; those bits also
    // make a deadline equal to the clock land on level 0.
    let significant = ((elapsed ^ when) | (SLOTS as u64 - 1)).ilog2();
    let shift = significant & !(BITS_PER_LEVEL - 1);
    let slot = ((when >> shift) & (SLOTS as u64 - 1)) as usize;
    ((significant / BITS_PER_LEVEL) as usize, slot)
}

/// The slot of `when` within `level`: its `level`-th 8-bit digit.
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
    fn eight_levels_cover_u64() {
        assert_eq!(NUM_LEVELS, 8);
        assert_eq!(SLOTS, 256);
        assert_eq!(level_for(0, u64::MAX), 7);
        assert_eq!(slot_for(u64::MAX, 7), 255);
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
    fn place_for_is_level_for_and_slot_for() {
        let clocks = [
            0u64,
            1,
            63,
            255,
            256,
            4095,
            65_535,
            1 << 40,
            u64::MAX / 2,
            u64::MAX - 64,
        ];
        for elapsed in clocks {
            let mut whens = alloc::vec![elapsed, u64::MAX];
            for bit in 0..64 {
                whens.extend([elapsed | (1u64 << bit), elapsed.saturating_add(1u64 << bit)]);
                whens.push(elapsed.saturating_add((1u64 << bit) - 1));
            }
            for when in whens.into_iter().filter(|&w| w >= elapsed) {
                let level = level_for(elapsed, when);
                assert_eq!(
                    place_for(elapsed, when),
                    (level, slot_for(when, level)),
                    "elapsed={elapsed}; when={when}"
                );
            }
        }
        for elapsed in 0..600u64 {
            for when in elapsed..5000u64 {
                let level = level_for(elapsed, when);
                assert_eq!(place_for(elapsed, when), (level, slot_for(when, level)));
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
                assert!(slot >= slot_for(elapsed, level));
            }
        }
        // The top level: every digit above is dropped.
        assert_eq!(slot_start(u64::MAX, 7, 255), 255 << 56);
        assert_eq!(slot_start(0, 7, 1), 1 << 56);
    }
}
