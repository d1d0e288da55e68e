//! Property test: `tickwheel_core::Wheel` against the `BTreeMap` reference model.

use proptest::prelude::*;
use tickwheel_testkit::{run_wheel_ops, WheelOp};

/// Distances from the clock: within a slot, within a level, across levels, and huge.
fn delta_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..70,
        3 => 0u64..5_000,
        2 => 0u64..300_000,
        1 => 0u64..(1 << 40),
        1 => any::<u64>(),
        1 => (0u64..64).prop_map(|d| u64::MAX - d),
    ]
}

/// Absolute ticks: the past, the far future, the end of time.
fn absolute_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..200,
        any::<u64>(),
        (0u64..64).prop_map(|d| u64::MAX - d),
    ]
}

fn op_strategy() -> impl Strategy<Value = WheelOp> {
    let pick = any::<usize>();
    prop_oneof![
        8 => delta_strategy().prop_map(WheelOp::InsertIn),
        1 => absolute_strategy().prop_map(WheelOp::InsertAt),
        4 => pick.prop_map(WheelOp::Remove),
        3 => pick.prop_map(WheelOp::RemoveLazy),
        1 => Just(WheelOp::NextExact),
        2 => (pick, delta_strategy()).prop_map(|(p, d)| WheelOp::Reset(p, d)),
        1 => (pick, absolute_strategy()).prop_map(|(p, d)| WheelOp::ResetAt(p, d)),
        3 => delta_strategy().prop_map(WheelOp::Advance),
        1 => absolute_strategy().prop_map(WheelOp::AdvanceTo),
        2 => (0u64..100).prop_map(WheelOp::PollOnce),
        2 => (0u64..600, 0usize..40).prop_map(|(d, b)| WheelOp::PollBudgeted(d, b)),
        1 => (0usize..40).prop_map(WheelOp::Prepare),
        1 => any::<u64>().prop_map(WheelOp::Forged),
        1 => Just(WheelOp::Check),
        1 => Just(WheelOp::Shrink),
        1 => prop_oneof![9 => Just(WheelOp::Check), 1 => Just(WheelOp::Clear)],
    ]
}

/// Mostly inserts into a few level-1 and level-2 slots, and budgeted polls.
fn crowded_op_strategy() -> impl Strategy<Value = WheelOp> {
    let pick = any::<usize>();
    prop_oneof![
        30 => (0u64..1_200).prop_map(WheelOp::InsertIn),
        1 => (60_000u64..140_000).prop_map(WheelOp::InsertIn),
        2 => pick.prop_map(WheelOp::Remove),
        2 => pick.prop_map(WheelOp::RemoveLazy),
        1 => Just(WheelOp::NextExact),
        2 => (pick, 0u64..1_200).prop_map(|(p, d)| WheelOp::Reset(p, d)),
        8 => (0u64..40, 0usize..8).prop_map(|(d, b)| WheelOp::PollBudgeted(d, b)),
        4 => (0usize..8).prop_map(WheelOp::Prepare),
        1 => (0u64..20).prop_map(WheelOp::PollOnce),
        1 => (0u64..100).prop_map(WheelOp::Advance),
        1 => Just(WheelOp::Check),
        1 => prop_oneof![4 => Just(WheelOp::Shrink), 1 => Just(WheelOp::Clear)],
    ]
}

/// Cancel-heavy (ADR 0013: cancels leave their slot alone): timers spread over a few slots
/// of levels 0-3 and mostly cancelled or reset again, so slots hold only garbage when they are
/// reached, the earliest timer is often the one removed, and the round-robin compaction runs
/// (garbage above 1.5 per live timer + 64) or `shrink_to_fit` compacts every slot, also
/// while a window is being pre-cascaded.
fn cancel_heavy_op_strategy() -> impl Strategy<Value = WheelOp> {
    let pick = any::<usize>();
    let near = prop_oneof![
        0u64..300,
        60_000u64..70_000,
        16_000_000u64..16_100_000,
        (0u64..4).prop_map(|d| 17_000_000 + d)
    ];
    prop_oneof![
        12 => near.clone().prop_map(WheelOp::InsertIn),
        6 => pick.prop_map(WheelOp::Remove),
        6 => pick.prop_map(WheelOp::RemoveLazy),
        2 => Just(WheelOp::NextExact),
        3 => (pick, near).prop_map(|(p, d)| WheelOp::Reset(p, d)),
        2 => (0u64..400).prop_map(WheelOp::Advance),
        1 => (0u64..20_000_000).prop_map(WheelOp::Advance),
        2 => (0u64..300, 0usize..20).prop_map(|(d, b)| WheelOp::PollBudgeted(d, b)),
        2 => (0usize..20).prop_map(WheelOp::Prepare),
        1 => (0u64..50).prop_map(WheelOp::PollOnce),
        1 => Just(WheelOp::Shrink),
        1 => Just(WheelOp::Check),
    ]
}

fn start_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        any::<u64>(),
        (0u64..1000).prop_map(|d| u64::MAX - d)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn wheel_matches_model(start in start_strategy(), ops in prop::collection::vec(op_strategy(), 0..300)) {
        run_wheel_ops(start, &ops).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Crowded higher-level slots polled with small budgets: cascades pause, and inserts,
    /// removals and resets (inside and outside the window being cascaded) land in between.
    #[test]
    fn budgeted_polls_match_model(start in start_strategy(), ops in prop::collection::vec(crowded_op_strategy(), 100..500)) {
        run_wheel_ops(start, &ops).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Mostly cancels (see `cancel_heavy_op_strategy`).
    #[test]
    fn cancel_heavy_ops_match_model(start in start_strategy(), ops in prop::collection::vec(cancel_heavy_op_strategy(), 200..700)) {
        run_wheel_ops(start, &ops).map_err(TestCaseError::fail)?;
    }
}

/// Many timers in few slots, removed in deadline order: exercises the stale-minimum repair
/// of a higher-level slot (`level.rs`).
#[test]
fn removing_minimums_of_an_unsorted_slot() {
    let mut ops = Vec::new();
    for i in 0..200u64 {
        // Out of order within one level-1 slot.
        ops.push(WheelOp::InsertIn(100 + (i * 37) % 60));
    }
    for i in 0..200 {
        ops.push(WheelOp::Remove(i * 7 % 200));
        if i % 10 == 0 {
            ops.push(WheelOp::InsertIn(101 + i as u64 % 50));
        }
    }
    run_wheel_ops(0, &ops).expect("model agrees");
}
