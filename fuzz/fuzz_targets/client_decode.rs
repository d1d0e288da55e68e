//! Feeds arbitrary bytes, as a server might send them, to the client-side reply decoder
//! (`tickwheel_proto::ReplyDecoder`) and the YAML readers: they must never panic, must give the
//! same replies however the input is split, and must keep the waiting buffer bounded by a line
//! or the announced body. The checks live in `tickwheel_proto::client::fuzz_check`, so the
//! seeds are replayed by the crate's tests too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = tickwheel_proto::client::fuzz_check(data) {
        panic!("{report}");
    }
});
