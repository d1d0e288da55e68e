//! Recovery promises: what was committed is there after reopen, deleted jobs stay deleted,
//! `next_id` never goes backwards, and the format version is checked.

use tickwheel_store::{
    Change, DiskOptions, DiskStore, Durability, DurableState, Store, StoreError,
};

use crate::util::{delayed, ready, tube};

fn open(dir: &std::path::Path) -> DiskStore {
    DiskStore::open(dir, DiskOptions::default()).unwrap()
}

#[test]
fn committed_jobs_survive_reopen_and_deleted_ones_stay_deleted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        let batch: Vec<_> = (1..=50)
            .map(|id| Change::Put(delayed(id, "t", id * 1000)))
            .collect();
        s.commit(&batch).unwrap();
        s.commit(&[Change::Delete { id: 7 }, Change::Delete { id: 50 }])
            .unwrap();
        s.commit(&[Change::Update {
            id: 3,
            state: DurableState::Buried,
            priority: 9,
            history: Default::default(),
        }])
        .unwrap();
    }
    let s = open(dir.path());
    assert_eq!(s.get(7).unwrap(), None);
    assert_eq!(s.get(50).unwrap(), None);
    let three = s.get(3).unwrap().unwrap();
    assert_eq!((three.state, three.priority), (DurableState::Buried, 9));
    assert_eq!(s.get(4).unwrap(), Some(delayed(4, "t", 4000)));
    // Next id stays past the deleted maximum.
    let r = s.recover(10_500).unwrap();
    assert_eq!(r.next_id, 51);
    // Resident: buried 3 plus delayed 1..=10 except 3 and 7 (due < 10.5 s).
    let ids: Vec<_> = r.resident.iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 8, 9, 10]);
    // Far: 11..=49 = 39 jobs.
    assert_eq!(r.far_delayed, vec![(tube("t"), 39)]);
}

#[test]
fn next_id_never_goes_backwards() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.reserve_ids(100).unwrap();
        s.reserve_ids(50).unwrap();
        assert_eq!(s.recover(0).unwrap().next_id, 100);
        s.commit(&[Change::Put(ready(150, "t"))]).unwrap();
        s.commit(&[Change::Delete { id: 150 }]).unwrap();
        s.commit(&[Change::Put(ready(20, "t"))]).unwrap();
    }
    let s = open(dir.path());
    assert_eq!(s.recover(0).unwrap().next_id, 151);
    s.reserve_ids(10).unwrap();
    drop(s);
    assert_eq!(open(dir.path()).recover(0).unwrap().next_id, 151);
}

#[test]
fn far_delayed_counts_track_moves_between_tubes_and_states() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.commit(&[
        Change::Put(delayed(1, "a", 5_000)),
        Change::Put(delayed(2, "a", 6_000)),
        Change::Put(delayed(3, "b", 7_000)),
    ])
    .unwrap();
    // Same job put again in another tube, then kicked to ready within one batch.
    s.commit(&[
        Change::Put(delayed(2, "b", 9_000)),
        Change::Update {
            id: 1,
            state: DurableState::Ready,
            priority: 0,
            history: Default::default(),
        },
    ])
    .unwrap();
    drop(s);
    let s = open(dir.path());
    let r = s.recover(0).unwrap();
    assert_eq!(r.far_delayed, vec![(tube("b"), 2)]);
    assert_eq!(r.resident.iter().map(|j| j.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(
        s.delayed_between(0, 8_000, 10)
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect::<Vec<_>>(),
        vec![3]
    );
}

#[test]
fn oversized_values_are_refused_without_poisoning() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let mut big = ready(1, "t");
    big.body = bytes::Bytes::from(vec![0u8; tickwheel_store::MAX_BODY_LEN + 1]);
    let err = s
        .commit(&[Change::Put(ready(2, "t")), Change::Put(big)])
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::TooLarge {
                what: "job body",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(s.get(2).unwrap(), None, "a refused batch is refused whole");
    s.commit(&[Change::Put(ready(3, "t"))]).unwrap();
    assert!(s.get(3).unwrap().is_some());
}

#[test]
fn unknown_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    {
        // Rewrite the version marker with the engine directly.
        let db = fjall::Database::builder(dir.path().join("engine"))
            .open()
            .unwrap();
        let meta = db
            .keyspace("meta", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        meta.insert("format_version", 4u32.to_be_bytes()).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let err = DiskStore::open(dir.path(), DiskOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::UnsupportedVersion {
                found: 4,
                supported: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("format version 4"), "{err}");
}

#[test]
fn every_durability_mode_survives_a_clean_reopen() {
    for durability in [
        Durability::Sync,
        Durability::Periodic { interval_ms: 5 },
        Durability::None,
    ] {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = DiskStore::open(dir.path(), DiskOptions::with_durability(durability)).unwrap();
            s.commit(&[Change::Put(ready(1, "t"))]).unwrap();
        }
        let s = open(dir.path());
        assert_eq!(s.get(1).unwrap(), Some(ready(1, "t")), "{durability:?}");
    }
}

/// A store opened with `-f`/`-F` durability writes no log records, but replays a log that a
/// `Sync` store left (here: after fjall lost its unsynced writes), and a later `Sync` open
/// numbers its records past it.
#[test]
fn periodic_and_none_replay_a_log_left_by_sync() {
    for durability in [Durability::Periodic { interval_ms: 5 }, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let snap = tempfile::tempdir().unwrap();
        let engine = dir.path().join("engine");
        {
            let s = open(dir.path());
            s.commit(&[Change::Put(ready(1, "t"))]).unwrap();
            s.checkpoint().unwrap();
            crate::util::copy_dir(&engine, snap.path());
            s.commit(&[Change::Put(ready(2, "t"))]).unwrap();
            s.commit(&[Change::Delete { id: 1 }]).unwrap();
        }
        // A power cut: fjall keeps only what it had synced at the checkpoint.
        std::fs::remove_dir_all(&engine).unwrap();
        crate::util::copy_dir(snap.path(), &engine);
        {
            let s = DiskStore::open(dir.path(), DiskOptions::with_durability(durability)).unwrap();
            assert_eq!(s.get(1).unwrap(), None, "{durability:?}");
            assert_eq!(s.get(2).unwrap(), Some(ready(2, "t")), "{durability:?}");
            s.commit(&[Change::Put(ready(3, "t"))]).unwrap();
        }
        let s = open(dir.path());
        s.commit(&[Change::Put(ready(4, "t"))]).unwrap();
        drop(s);
        let s = open(dir.path());
        let ids: Vec<_> = s
            .recover(u64::MAX)
            .unwrap()
            .resident
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![2, 3, 4], "{durability:?}");
    }
}

/// Deletes are planned from where the job is (its locator), not its record: a delayed job's
/// record and count go, and a ready one's, whether its put is still waiting for the applier
/// (the overlay answers) or already in the tables (the locator answers).
#[test]
fn deletes_remove_ready_and_delayed_jobs_applied_or_not() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.commit(&[
            Change::Put(ready(1, "a")),
            Change::Put(delayed(2, "a", 60_000)),
            Change::Put(ready(3, "a")),
            Change::Put(delayed(4, "a", 70_000)),
            Change::Put(delayed(5, "a", 80_000)),
        ])
        .unwrap();
        // A read waits for the applier: jobs 1..=5 are in the tables now.
        assert_eq!(s.get(1).unwrap(), Some(ready(1, "a")));
        s.commit(&[Change::Delete { id: 1 }, Change::Delete { id: 2 }])
            .unwrap();
        // Put and deleted in back-to-back commits: the second usually plans from the overlay.
        s.commit(&[
            Change::Put(ready(6, "b")),
            Change::Put(delayed(7, "b", 90_000)),
        ])
        .unwrap();
        s.commit(&[Change::Delete { id: 6 }, Change::Delete { id: 7 }])
            .unwrap();
        // Deleted in the batch that put it, and a delete of a job that never was.
        s.commit(&[
            Change::Put(delayed(8, "b", 95_000)),
            Change::Delete { id: 8 },
            Change::Delete { id: 99 },
        ])
        .unwrap();
        let r = s.recover(0).unwrap();
        assert_eq!(r.resident.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3]);
        assert_eq!(r.far_delayed, vec![(tube("a"), 2)]);
    }
    let s = open(dir.path());
    let r = s.recover(0).unwrap();
    assert_eq!(r.resident.iter().map(|j| j.id).collect::<Vec<_>>(), vec![3]);
    assert_eq!(r.far_delayed, vec![(tube("a"), 2)]);
    for id in [1, 2, 6, 7, 8] {
        assert_eq!(s.get(id).unwrap(), None, "job {id}");
    }
    assert_eq!(
        s.delayed_between(0, 100_000, 10)
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect::<Vec<_>>(),
        vec![4, 5]
    );
}
