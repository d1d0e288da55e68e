//! Feeds arbitrary bytes, split at arbitrary points, to the beanstalkd decoder: it must never
//! panic, must decode the same frames however the input is split, and must keep its buffer
//! bounded (a line is at most 224 bytes, a body at most the maximum job size).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_testkit::check_decoder;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = check_decoder(data) {
        panic!("{report}");
    }
});
