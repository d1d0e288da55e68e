//! The log against a model: random batches, background syncs of "fjall", crashes with torn
//! tails at random byte offsets, tiny segments so that recycled segments hold stale records.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    /// Log a commit with this payload (acknowledged once `append` returns).
    Append(Vec<u8>),
    /// fjall's background sync: everything applied so far becomes durable in fjall.
    Persist,
    /// A crash. The commit in flight (if any) is torn after `cut` of its bytes (the rest of
    /// its place keeps what was there); fjall kept `kept` per mille of its unsynced suffix.
    Crash {
        in_flight: Option<(Vec<u8>, usize)>,
        kept: u16,
    },
}

/// The ids of the jobs a store recovers as resident, in the order `recover` yields them.
fn resident_ids(store: &crate::DiskStore) -> Vec<u64> {
    crate::Store::recover(store, u64::MAX)
        .unwrap()
        .resident
        .iter()
        .map(|r| r.id)
        .collect()
}

/// [`encode_record`] of a payload a record can hold.
fn record(seq: u64, payload: &[u8]) -> Vec<u8> {
    encode_record(seq, payload).expect("a test payload fits a record")
}

#[test]
fn a_payload_beyond_a_records_length_field_is_refused_not_a_panic() {
    // Zeroed and never written: the allocation stays virtual (the check comes before any copy).
    let huge = vec![0u8; u32::MAX as usize + 1];
    assert!(encode_record(1, &huge).is_none());
    assert_eq!(record(7, b"x").len(), HEADER + 1);
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 1..90).prop_map(Op::Append),
        1 => Just(Op::Persist),
        1 => (
            proptest::option::of((proptest::collection::vec(any::<u8>(), 1..90), any::<usize>())),
            0u16..=1000,
        )
            .prop_map(|(in_flight, kept)| Op::Crash { in_flight, kept }),
    ]
}

/// What the store around the log does: state of "fjall" and the acknowledged commits.
struct Model {
    /// Acknowledged payloads by sequence number (all of them, ever).
    acked: BTreeMap<u64, Vec<u8>>,
    /// The last sequence applied to "fjall" (= the last logged commit).
    applied: u64,
    /// fjall has made everything up to here durable.
    durable: u64,
}

fn open(dir: &Path, seg: u64, applied: u64) -> (Log, Replay) {
    let (log, replay) = Log::open(dir, seg, applied, true).unwrap();
    (log.unwrap(), replay)
}

/// Appends as the store does: sync "fjall" first if the next segment is not yet covered.
fn append(log: &mut Log, m: &mut Model, seq: u64, payload: &[u8]) -> bool {
    let record = record(seq, payload);
    match log.room(record.len()) {
        Room::TooLarge => unreachable!("records are smaller than a segment"),
        Room::NextSegment { needs_durable } if needs_durable > m.durable => m.durable = m.applied,
        _ => {}
    }
    log.append(seq, &record).unwrap()
}

fn run(seg: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let (mut log, replay) = open(&dir, seg, 0);
    prop_assert!(replay.records.is_empty());
    let mut m = Model {
        acked: BTreeMap::new(),
        applied: 0,
        durable: 0,
    };
    for op in ops {
        match op {
            Op::Append(payload) => {
                let seq = m.applied + 1;
                if append(&mut log, &mut m, seq, &payload) {
                    // The store asks for a background sync of what the left segment holds;
                    // here it completes at once half of the time.
                    if seq.is_multiple_of(2) {
                        m.durable = seq - 1;
                    }
                }
                m.acked.insert(seq, payload);
                m.applied = seq;
            }
            Op::Persist => m.durable = m.applied,
            Op::Crash { in_flight, kept } => {
                let mut torn_whole = None;
                if let Some((payload, cut)) = in_flight {
                    let seq = m.applied + 1;
                    let record = record(seq, &payload);
                    // Where it will go, and what is there now.
                    let (path, at) = match log.room(record.len()) {
                        Room::Here => log.position(),
                        Room::NextSegment { needs_durable } => {
                            if needs_durable > m.durable {
                                m.durable = m.applied;
                            }
                            let cur = log.current;
                            let next = (cur + 1) % log.segments.len();
                            (log.segments[next].path.clone(), 0)
                        }
                        Room::TooLarge => unreachable!(),
                    };
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&path)
                        .unwrap();
                    let mut old = vec![0u8; record.len()];
                    f.read_exact_at(&mut old, at).unwrap();
                    log.append(seq, &record).unwrap();
                    let cut = cut % (record.len() + 1);
                    f.write_all_at(&old[cut..], at + cut as u64).unwrap();
                    // Whole also when the bytes after the cut were already there (a payload
                    // ending in zeros over a fresh segment's zeros).
                    if record[cut..] == old[cut..] {
                        torn_whole = Some((seq, payload));
                    }
                }
                drop(log);
                // fjall lost part of its unsynced suffix.
                let span = m.applied - m.durable;
                let applied = m.durable + span * u64::from(kept) / 1000;
                let (reopened, replay) = open(&dir, seg, applied);
                log = reopened;
                let mut expect: Vec<(u64, Vec<u8>)> = m
                    .acked
                    .range(applied + 1..)
                    .map(|(s, p)| (*s, p.clone()))
                    .collect();
                // A record written whole before the crash may be replayed (its commit's
                // outcome was unknown to its caller); a torn one never.
                let got: Vec<(u64, Vec<u8>)> = replay
                    .records
                    .iter()
                    .map(|f| (f.seq, f.payload.clone()))
                    .collect();
                if let Some(extra) = torn_whole {
                    if got.len() == expect.len() + 1 {
                        expect.push(extra);
                    }
                }
                prop_assert_eq!(&got, &expect, "applied {}", applied);
                // The store replays them, syncs fjall and numbers new records past
                // everything seen.
                for (seq, payload) in got {
                    m.acked.insert(seq, payload);
                }
                let last = m
                    .acked
                    .keys()
                    .next_back()
                    .copied()
                    .unwrap_or(0)
                    .max(applied);
                prop_assert!(replay.max_seen <= last.max(m.applied + 1));
                m.applied = last.max(replay.max_seen);
                m.durable = m.applied;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_log_replays_exactly_the_acknowledged_suffix(
        seg in 128u64..700,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run(seg, ops)?;
    }
}

#[test]
fn scan_stops_at_zeros_torn_records_and_bad_sums() {
    let a = record(1, b"first");
    let b = record(2, b"second");
    let mut seg = [a.clone(), b.clone(), vec![0; 64]].concat();
    let found = scan(&seg);
    assert_eq!(
        found.iter().map(|f| (f.seq, f.offset)).collect::<Vec<_>>(),
        vec![(1, 0), (2, a.len() as u64)]
    );
    // A flipped payload byte in the second record ends the scan after the first.
    seg[a.len() + HEADER] ^= 1;
    assert_eq!(scan(&seg).len(), 1);
    // Every cut of the second record ends the scan after the first.
    for cut in 0..b.len() {
        let torn = [a.clone(), b[..cut].to_vec()].concat();
        assert_eq!(scan(&torn).len(), 1, "cut {cut}");
    }
    assert!(scan(&[0u8; 100]).is_empty());
}

#[test]
fn select_replays_from_applied_and_stops_at_a_gap() {
    let f = |seq: u64| Found {
        seq,
        offset: 0,
        payload: vec![seq as u8],
    };
    // Segment 1 holds stale 1..=3 (recycled), then 7, 8; segment 0 holds 4..=6.
    let r = select(
        vec![vec![f(4), f(5), f(6)], vec![f(7), f(8), f(2), f(3)]],
        5,
    );
    assert_eq!(
        r.records.iter().map(|f| f.seq).collect::<Vec<_>>(),
        vec![6, 7, 8]
    );
    assert_eq!(r.max_seen, 8);
    let r = select(vec![vec![f(4), f(6)]], 3);
    assert_eq!(r.records.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![4]);
    assert_eq!(r.max_seen, 6);
}

/// An update carries the job's history (tag 5); a log written before that (tag 2) still
/// decodes, with an empty history.
#[test]
fn updates_carry_the_history_and_old_updates_still_decode() {
    use tickwheel_queue::{Change, DurableState, JobHistory};
    let update = Change::Update {
        id: 9,
        state: DurableState::Delayed { until: 77 },
        priority: 3,
        history: JobHistory {
            delay: 60_000,
            reserves: u32::MAX,
            timeouts: 2,
            releases: 3,
            buries: 4,
            kicks: 5,
        },
    };
    let bytes = codec::encode_changes(std::slice::from_ref(&update));
    assert_eq!(bytes[0], 5);
    assert_eq!(codec::decode_changes(&bytes), Ok(vec![update]));
    for cut in 1..bytes.len() {
        assert!(
            codec::decode_changes(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut old = vec![2u8];
    old.extend_from_slice(&9u64.to_le_bytes());
    old.push(1);
    old.extend_from_slice(&77u64.to_le_bytes());
    old.extend_from_slice(&3u32.to_le_bytes());
    assert_eq!(
        codec::decode_changes(&old),
        Ok(vec![Change::Update {
            id: 9,
            state: DurableState::Delayed { until: 77 },
            priority: 3,
            history: JobHistory::default(),
        }])
    );
}

#[test]
fn fuzz_seeds_pass_the_fuzz_checks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/wal_decode");
    let mut n = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let data = fs::read(entry.unwrap().path()).unwrap();
        fuzz_check(&data).unwrap();
        n += 1;
    }
    assert!(n > 0, "no seeds in {}", dir.display());
}

/// Writes the fuzz target's seeds (run by hand: `cargo test -p tickwheel-store --lib
/// write_fuzz_seeds -- --ignored`): a segment of real batches, a torn one, a bare payload.
/// (`*-before-histories` are the same written by the build before updates carried a job's
/// history: change tag 2.)
#[test]
#[ignore = "writes fuzz/seeds/wal_decode"]
fn write_fuzz_seeds() {
    use tickwheel_queue::{Change, DurableState, JobRecord, TubeName};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/wal_decode");
    fs::create_dir_all(&dir).unwrap();
    let job = |id: u64, key: Option<&str>| JobRecord {
        id,
        tube: TubeName::new("emails").unwrap(),
        priority: 7,
        ttr: 60_000,
        state: DurableState::Delayed { until: 5_000 },
        created: 3,
        body: bytes::Bytes::from_static(b"hello"),
        idempotency_key: key.map(str::to_owned),
        history: Default::default(),
    };
    let batches = [
        vec![Change::ReserveIds { end: 64 }, Change::Put(job(1, None))],
        vec![
            Change::Update {
                id: 1,
                state: DurableState::Buried,
                priority: 9,
                history: tickwheel_queue::JobHistory {
                    delay: 4_997,
                    reserves: 2,
                    timeouts: 1,
                    releases: 1,
                    buries: 1,
                    kicks: 0,
                },
            },
            Change::Put(job(2, Some("order-42"))),
        ],
        vec![Change::Delete { id: 1 }],
    ];
    let segment: Vec<u8> = batches
        .iter()
        .enumerate()
        .flat_map(|(i, b)| record(i as u64 + 1, &codec::encode_changes(b)))
        .collect();
    fs::write(dir.join("segment"), &segment).unwrap();
    fs::write(dir.join("torn"), &segment[..segment.len() - 3]).unwrap();
    fs::write(dir.join("payload"), codec::encode_changes(&batches[1])).unwrap();
}

/// A failed log write or sync: that commit (every batch of its group) is not acknowledged,
/// the store is poisoned, reads go on, and a reopen has every acknowledged commit.
mod faults {
    use bytes::Bytes;
    use tickwheel_queue::{Change, DurableState, JobRecord, TubeName};

    use super::{resident_ids, LogFault};
    use crate::{DiskOptions, DiskStore, GroupCommit, Store, StoreError};

    fn put(id: u64) -> Change {
        Change::Put(JobRecord {
            id,
            tube: TubeName::new("t").unwrap(),
            priority: 1,
            ttr: 1000,
            state: DurableState::Ready,
            created: 0,
            body: Bytes::from_static(b"body"),
            idempotency_key: None,
            history: Default::default(),
        })
    }

    fn check(fault: LogFault) {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
        store.commit(&[put(1)]).unwrap();
        store.set_log_fault(Some(fault));
        // Three batches, one group: the leader commits them together, and all three fail.
        let group = GroupCommit::new(store);
        let tickets: Vec<_> = (2..5)
            .map(|id| group.submit(vec![put(id)]).unwrap())
            .collect();
        for t in &tickets {
            let err = t.wait().unwrap_err();
            assert!(matches!(err, StoreError::Io { .. }), "{fault:?}: {err}");
        }
        assert!(matches!(
            group.commit(&[put(9)]),
            Err(StoreError::Poisoned { .. })
        ));
        let store = group.inner();
        assert!(matches!(
            store.commit(&[put(9)]),
            Err(StoreError::Poisoned { .. })
        ));
        // Reads go on; the failed group never reached the tables.
        assert!(store.get(1).unwrap().is_some());
        assert_eq!(store.get(2).unwrap(), None);
        // Tickets keep the group (and the store in it) alive.
        drop(tickets);
        drop(group);
        let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
        assert!(
            store.get(1).unwrap().is_some(),
            "{fault:?}: acknowledged job lost"
        );
        assert_eq!(store.get(9).unwrap(), None);
        let ids = resident_ids(&store);
        match fault {
            // Nothing of the group was written.
            LogFault::Write => assert_eq!(ids, vec![1]),
            // The record reached the page cache before the sync failed: it may come back
            // (here it does, whole: the group's outcome was unknown to its callers).
            LogFault::Sync => assert!(ids == vec![1] || ids == vec![1, 2, 3, 4], "{ids:?}"),
        }
        // The reopened store writes again.
        store.commit(&[put(10)]).unwrap();
    }

    #[test]
    fn a_failed_log_write_acknowledges_nothing_of_its_group() {
        check(LogFault::Write);
    }

    #[test]
    fn a_failed_log_sync_acknowledges_nothing_of_its_group() {
        check(LogFault::Sync);
    }
}

#[test]
fn a_missing_segment_is_recreated_without_touching_the_other() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let (mut log, _) = open(&dir, 256, 0);
    let mut seq = 0;
    let mut first_in_1 = None;
    while seq < 7 {
        seq += 1;
        if log.append(seq, &record(seq, &[seq as u8; 40])).unwrap() {
            first_in_1.get_or_insert(seq);
        }
    }
    let first_in_1 = first_in_1.expect("7 records of 60 bytes fill a 256-byte segment");
    assert_eq!(log.position().0, dir.join("1.seg"));
    drop(log);
    fs::remove_file(dir.join("0.seg")).unwrap();
    let (log, replay) = open(&dir, 256, first_in_1 - 1);
    assert_eq!(
        replay.records.iter().map(|f| f.seq).collect::<Vec<_>>(),
        (first_in_1..=7).collect::<Vec<_>>()
    );
    assert_eq!(log.bytes(), 512);
    assert_eq!(fs::read(dir.join("0.seg")).unwrap(), vec![0u8; 256]);
}

/// The applier (ADR 0018): commits are settled on the log and written to fjall behind it.
mod applier {
    use bytes::Bytes;
    use tickwheel_queue::{Change, DurableState, JobRecord, TubeName};

    use super::resident_ids;
    use crate::{DiskOptions, DiskStore, GroupCommit, Store, StoreError};

    fn job(id: u64, tube: &str, state: DurableState) -> JobRecord {
        JobRecord {
            id,
            tube: TubeName::new(tube).unwrap(),
            priority: 5,
            ttr: 1000,
            state,
            created: 0,
            body: Bytes::from(format!("body {id}")),
            idempotency_key: None,
            history: Default::default(),
        }
    }

    /// Every change kind, across commits that touch the same jobs.
    fn batches() -> Vec<Vec<Change>> {
        let delayed = DurableState::Delayed { until: 5_000 };
        vec![
            vec![
                Change::ReserveIds { end: 100 },
                Change::Put(job(1, "a", delayed)),
                Change::Put(job(2, "a", DurableState::Ready)),
                Change::Put(job(3, "b", delayed)),
            ],
            vec![
                Change::Update {
                    id: 1,
                    state: DurableState::Ready,
                    priority: 9,
                    history: Default::default(),
                },
                Change::Update {
                    id: 2,
                    state: DurableState::Delayed { until: 7_000 },
                    priority: 3,
                    history: Default::default(),
                },
            ],
            vec![
                Change::Delete { id: 3 },
                Change::Put(job(4, "b", DurableState::Buried)),
            ],
            vec![
                Change::Update {
                    id: 2,
                    state: DurableState::Buried,
                    priority: 4,
                    history: Default::default(),
                },
                Change::Delete { id: 4 },
                Change::ReserveIds { end: 200 },
            ],
        ]
    }

    fn snapshot(store: &DiskStore) -> (crate::Recovered, Vec<JobRecord>) {
        let r = store.recover(u64::MAX).unwrap();
        let d = store.delayed_between(0, u64::MAX, 100).unwrap();
        (r, d)
    }

    /// With the applier held, later commits plan their updates and deletes from the overlay
    /// (fjall has none of them yet), and reads wait for the applier: the result is the
    /// same as with every commit applied before the next.
    #[test]
    fn later_commits_plan_from_the_overlay_while_fjall_lags() {
        let lagging = tempfile::tempdir().unwrap();
        let store = DiskStore::open(lagging.path(), DiskOptions::default()).unwrap();
        store.hold_applier(true);
        for b in batches() {
            store.commit(&b).unwrap();
        }
        assert!(
            store.applied_seq() < store.settled_seq(),
            "the applier was held: fjall lags the log ({} < {})",
            store.applied_seq(),
            store.settled_seq()
        );
        store.hold_applier(false);
        let lagged = snapshot(&store);

        let direct = tempfile::tempdir().unwrap();
        let other = DiskStore::open(direct.path(), DiskOptions::default()).unwrap();
        for b in batches() {
            other.commit(&b).unwrap();
            other.checkpoint().unwrap();
        }
        assert_eq!(lagged, snapshot(&other));
        assert_eq!(lagged.0.next_id, 200);
        assert_eq!(lagged.0.far_delayed, vec![]);
        assert_eq!(
            lagged.0.resident.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        // And after a restart with the log replayed over whatever fjall had.
        drop(store);
        let store = DiskStore::open(lagging.path(), DiskOptions::default()).unwrap();
        assert_eq!(snapshot(&store), lagged);
    }

    /// `commit_deferred` queues the fjall batch without waking the applier (ADR 0022): a
    /// read before `after_commit` wakes it itself and sees the commit, and `after_commit`
    /// alone gets the queue applied with nobody waiting (without the wake-up the loop below
    /// never ends and the test runner's timeout fails the test).
    #[test]
    fn a_deferred_applier_wake_up_is_needed_by_no_reader() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
        let batches = batches();
        store.commit_deferred(&batches[0]).unwrap();
        assert_eq!(
            store.get(2).unwrap().map(|r| r.id),
            Some(2),
            "a read waits for the applier, waking it"
        );
        store.commit_deferred(&batches[1]).unwrap();
        store.after_commit();
        while store.applied_seq() < store.settled_seq() {
            std::thread::yield_now();
        }
        assert_eq!(
            store.get(1).unwrap().map(|r| r.priority),
            Some(9),
            "the second commit is applied"
        );
    }

    /// Replaying a record fjall already holds changes nothing, for every change kind: each
    /// batch is planned against the tables' current state.
    #[test]
    fn replaying_applied_records_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
        for b in batches() {
            store.commit(&b).unwrap();
        }
        store.checkpoint().unwrap();
        let before = snapshot(&store);
        let seq = store.settled_seq();
        for b in batches() {
            // As a replay at open would write it (the tables only), a second time.
            store.apply(&b, Some(seq)).unwrap();
        }
        let mut again = snapshot(&store);
        assert_eq!(again, before);
        // The last batch alone (the one a crash right after its fjall write would replay).
        store.apply(batches().last().unwrap(), Some(seq)).unwrap();
        again = snapshot(&store);
        assert_eq!(again, before);
    }

    /// A fjall write that fails after its commit was acknowledged: the store is poisoned
    /// (writes and reads of the tables answer the error), and a reopen replays the commit
    /// from the log: nothing acknowledged is lost.
    #[test]
    fn a_failed_apply_loses_nothing_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let group =
            GroupCommit::with_thread(DiskStore::open(dir.path(), DiskOptions::default()).unwrap())
                .unwrap();
        let put = |id| Change::Put(job(id, "t", DurableState::Ready));
        group.commit(&[put(1)]).unwrap();
        // Waits for the applier to write put 1, so the fault hits put 2's write.
        assert!(group.inner().get(1).unwrap().is_some());
        group.inner().set_apply_fault();
        // Acknowledged: the log holds it; its fjall write fails behind the ack.
        group.commit(&[put(2)]).unwrap();
        let err = group.inner().get(2).unwrap_err();
        assert!(matches!(err, StoreError::Poisoned { .. }), "{err}");
        let err = group.commit(&[put(3)]).unwrap_err();
        assert!(err.poisons(), "{err}");
        assert!(group.poisoned().is_some());
        drop(group);
        let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
        let ids = resident_ids(&store);
        assert_eq!(
            ids,
            vec![1, 2],
            "the acknowledged put 2 came back from the log"
        );
        store.commit(&[put(4)]).unwrap();
    }
}

/// The commit path encodes each put's record once, in place in the log record, and gives the
/// tables those bytes: the record is byte for byte what the payload-then-copy encoders wrote,
/// and each range the encoder reports is that put's own record.
#[test]
fn in_place_records_match_the_copying_encoders_and_their_puts() {
    use bytes::Bytes;
    use tickwheel_queue::{Change, DurableState, JobRecord, TubeName};

    let job = |id: u64, state, key: Option<&str>| JobRecord {
        id,
        tube: TubeName::new(if id.is_multiple_of(2) { "even" } else { "odd" }).unwrap(),
        priority: 7,
        ttr: 2_000,
        state,
        created: 11,
        body: Bytes::from(vec![b'b'; id as usize * 3]),
        idempotency_key: key.map(str::to_owned),
        history: Default::default(),
    };
    let batch = vec![
        Change::ReserveIds { end: 64 },
        Change::Put(job(1, DurableState::Ready, None)),
        Change::Update {
            id: 9,
            state: DurableState::Buried,
            priority: 1,
            history: Default::default(),
        },
        Change::Put(job(2, DurableState::Delayed { until: 77 }, Some("k"))),
        Change::Delete { id: 4 },
        Change::Put(job(3, DurableState::Buried, None)),
    ];
    let mut puts = Vec::new();
    let record = encode_record_with(42, |v| {
        codec::encode_changes_into(&batch, v, |i, at| puts.push((i, at)));
    })
    .unwrap();
    assert_eq!(
        Some(&record),
        encode_record_copying(42, &codec::encode_changes(&batch)).as_ref()
    );
    assert_eq!(
        Some(&record),
        encode_record(42, &codec::encode_changes(&batch)).as_ref()
    );
    assert_eq!(
        puts.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![1, 3, 5]
    );
    for (i, at) in puts {
        let Change::Put(r) = &batch[i] else {
            unreachable!("reported for puts only")
        };
        assert_eq!(record[at].to_vec(), crate::record::encode(r), "put {i}");
    }
    let found = scan(&record);
    assert_eq!(found.len(), 1);
    assert_eq!(codec::decode_changes(&found[0].payload).unwrap(), batch);
}
