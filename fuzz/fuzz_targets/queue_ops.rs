//! Drives the job engine with arbitrary operation sequences (including restarts from its
//! durable changes) and checks every answer and event against beanstalkd's rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_testkit::{decode_queue_ops, queue_config_for_input, run_queue_ops_config};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the engine's configuration: bit 0 a 2.5 s memory window (far jobs
    // in the store), bit 1 a written `reserve-job`.
    let config = queue_config_for_input(data);
    let ops = decode_queue_ops(data);
    if let Err(report) = run_queue_ops_config(&ops, config) {
        panic!("engine broke a rule:\n{report}");
    }
});
