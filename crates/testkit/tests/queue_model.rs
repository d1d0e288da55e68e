//! Property test: the job engine obeys beanstalkd's rules at every step, and restarts from its
//! durable changes restore every job (see `tickwheel_testkit::run_queue_ops`).

use proptest::prelude::*;
use tickwheel_queue::Config;
use tickwheel_testkit::{run_queue_ops, run_queue_ops_config, run_queue_ops_with, QueueOp};

fn op_strategy() -> impl Strategy<Value = QueueOp> {
    let c = 0u8..4;
    let tube = 0u8..3;
    let pick = 0u64..64;
    let ms = prop_oneof![Just(0u64), 1u64..3000, 1000u64..20_000];
    prop_oneof![
        2 => c.clone().prop_map(QueueOp::Connect),
        1 => c.clone().prop_map(QueueOp::Disconnect),
        1 => (c.clone(), tube.clone()).prop_map(|(c, t)| QueueOp::Use(c, t)),
        1 => (c.clone(), tube.clone()).prop_map(|(c, t)| QueueOp::Watch(c, t)),
        1 => (c.clone(), tube.clone()).prop_map(|(c, t)| QueueOp::Ignore(c, t)),
        6 => (c.clone(), 0u32..3000, ms.clone(), 0u64..5000, any::<u8>())
            .prop_map(|(c, pri, delay, ttr, len)| QueueOp::Put { c, pri, delay, ttr, len }),
        5 => (c.clone(), prop_oneof![Just(None), Just(Some(0)), (1u64..5000).prop_map(Some)])
            .prop_map(|(c, t)| QueueOp::Reserve(c, t)),
        1 => (c.clone(), pick.clone()).prop_map(|(c, p)| QueueOp::ReserveJob(c, p)),
        3 => (c.clone(), pick.clone()).prop_map(|(c, p)| QueueOp::Delete(c, p)),
        2 => (c.clone(), pick.clone(), 0u32..3000, ms.clone())
            .prop_map(|(c, p, pri, d)| QueueOp::Release(c, p, pri, d)),
        1 => (c.clone(), pick.clone(), 0u32..3000).prop_map(|(c, p, pri)| QueueOp::Bury(c, p, pri)),
        1 => (c.clone(), pick.clone()).prop_map(|(c, p)| QueueOp::Touch(c, p)),
        1 => (c.clone(), 0u64..4).prop_map(|(c, b)| QueueOp::Kick(c, b)),
        1 => pick.clone().prop_map(QueueOp::KickJob),
        1 => pick.clone().prop_map(QueueOp::Peek),
        1 => (c.clone(), 0u8..3).prop_map(|(c, s)| QueueOp::PeekState(c, s)),
        1 => (tube, ms.clone()).prop_map(|(t, d)| QueueOp::Pause(t, d)),
        5 => ms.prop_map(QueueOp::Advance),
        1 => Just(QueueOp::Restart),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn engine_obeys_the_rules(ops in prop::collection::vec(op_strategy(), 0..150)) {
        run_queue_ops(&ops).map_err(TestCaseError::fail)?;
    }

    /// The same with a 2.5 s memory window: far jobs live in the model store and come back
    /// through window loads, loads by id and widening, as the server drives them.
    #[test]
    fn engine_with_a_memory_window_obeys_the_rules(ops in prop::collection::vec(op_strategy(), 0..150)) {
        run_queue_ops_with(&ops, Some(2_500)).map_err(TestCaseError::fail)?;
    }

    /// As nodes serving side by side run it: a `reserve-job` of a delayed or buried job is
    /// written (the job stored ready), with the memory window.
    #[test]
    fn engine_writing_reserve_job_obeys_the_rules(ops in prop::collection::vec(op_strategy(), 0..150)) {
        let config = Config { window: Some(2_500), write_reserve_job: true, ..Config::default() };
        run_queue_ops_config(&ops, config).map_err(TestCaseError::fail)?;
    }
}
