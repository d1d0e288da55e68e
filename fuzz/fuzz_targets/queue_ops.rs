//! Drives the job engine with arbitrary operation sequences (including restarts from its
//! durable changes) and checks every answer and event against beanstalkd's rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_testkit::{decode_queue_ops, run_queue_ops_with};

fuzz_target!(|data: &[u8]| {
    // An odd first byte runs the engine with a 2.5 s memory window (far jobs in the store).
    let window = (data.first().is_some_and(|b| b & 1 == 1)).then_some(2_500);
    let ops = decode_queue_ops(data);
    if let Err(report) = run_queue_ops_with(&ops, window) {
        panic!("engine broke a rule:\n{report}");
    }
});
