//! Drives the job engine with arbitrary operation sequences (including restarts from its
//! durable changes) and checks every answer and event against beanstalkd's rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_testkit::{decode_queue_ops, run_queue_ops};

fuzz_target!(|data: &[u8]| {
    let ops = decode_queue_ops(data);
    if let Err(report) = run_queue_ops(&ops) {
        panic!("engine broke a rule:\n{report}");
    }
});
