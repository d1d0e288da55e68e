//! Feeds arbitrary bytes, as a damaged or stale log segment might hold them, to the store's
//! write-ahead log scanner and change decoder (`tickwheel_store::wal`): they must never panic,
//! every record the scanner accepts must encode back to the bytes it was found in, and a batch
//! the decoder accepts must encode and decode to itself. The checks live in
//! `tickwheel_store::wal::fuzz_check`, so the seeds are replayed by the crate's tests too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(report) = tickwheel_store::wal::fuzz_check(data) {
        panic!("{report}");
    }
});
