//! Feeds arbitrary bytes, as a notification from another build or a damaged one might carry
//! them, to the parser of an active-active node's `<schema>_ready` payloads
//! (`tickwheel_pg::parse_ready`): it must never panic, and what it accepts must survive a round
//! trip through the payload encoder. The check lives in the pg crate (`note::fuzz_check`), so
//! its unit tests run it too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = tickwheel_pg::fuzz_check_note(data) {
        panic!("{report}");
    }
});
