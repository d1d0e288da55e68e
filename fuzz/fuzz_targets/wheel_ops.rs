//! Drives `tickwheel_core::Wheel` with arbitrary operation sequences and checks every step
//! against the reference model (the same runner the property test uses).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_testkit::{decode_wheel_ops, run_wheel_ops};

fuzz_target!(|data: &[u8]| {
    let (start, ops) = decode_wheel_ops(data);
    if let Err(report) = run_wheel_ops(start, &ops) {
        panic!("wheel disagrees with the model:\n{report}");
    }
});
