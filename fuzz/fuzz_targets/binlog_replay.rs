//! Feeds arbitrary bytes, as a damaged or foreign file named `binlog.N` might hold them, to
//! the reader of beanstalkd's binlog (`tickwheel_store::beanstalkd::Replay`): it must never
//! panic, and every job a replay keeps must be one the store accepts (a body within its
//! limit, an id no larger than the largest one replayed). The first byte picks whether the
//! rest starts with the real format version, so most inputs get past it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwheel_store::beanstalkd::{Replay, BINLOG_VERSION};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = Vec::with_capacity(rest.len() + 4);
    if first & 1 == 1 {
        bytes.extend_from_slice(&BINLOG_VERSION.to_le_bytes());
    }
    bytes.extend_from_slice(rest);
    let mut replay = Replay::default();
    if replay.file(&bytes).is_ok() {
        let (jobs, max_id) = replay.into_jobs();
        for job in &jobs {
            assert!(job.id <= max_id && job.id > 0, "job {} beyond max {max_id}", job.id);
            assert!(job.body.len() <= tickwheel_store::MAX_BODY_LEN);
        }
        tickwheel_store::validate(
            &jobs
                .into_iter()
                .map(tickwheel_store::Change::Put)
                .collect::<Vec<_>>(),
        )
        .expect("a replayed job the store refuses");
    }
});
