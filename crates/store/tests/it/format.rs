//! Format compatibility: a store written by format version 1 (fjall 2, checked in under
//! `tests/fixtures/v1/`) must open, be migrated to format 2 (fjall 3, `DIR/engine/`) and
//! recover exactly; a migration that fails or is interrupted must leave the format-1 directory
//! usable (docs/storage-format.md). If a change breaks these tests, it changed the on-disk
//! format: bump `FORMAT_VERSION`, keep reading the old one (or migrate it), and add a fixture.
//!
//! The fixture holds: job 1 ready (priority changed to 7 by an update), job 2 delayed until
//! 1_700_000_060_000 in tube `emails`, job 3 buried in `emails`, job 4 delayed until
//! 4_000_000_000_000 in tube `far`, job 5 put then deleted, and ids reserved up to 4096.

use std::path::Path;

use tickwheel_store::{DiskOptions, DiskStore, DurableState, Store};

use crate::util::{copy_dir, tube};

fn fixture() -> tempfile::TempDir {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, tmp.path()); // opening writes: never touch the checked-in copy
    tmp
}

/// The fixture is format 1: fjall 2's files at the root.
fn is_format_1(dir: &Path) -> bool {
    dir.join("journals").is_dir()
        && dir.join("partitions").is_dir()
        && std::fs::read(dir.join("version")).unwrap() == b"FJL\x02"
}

/// The fixture's jobs, read through the engine of format 1 (fjall 2) directly: the old
/// directory is still usable by the old build.
fn format_1_job_count(dir: &Path) -> usize {
    let ks = fjall2::Config::new(dir).open().unwrap();
    let jobs = ks
        .open_partition("jobs", fjall2::PartitionCreateOptions::default())
        .unwrap();
    jobs.iter().count()
}

#[test]
fn format_v1_fixture_opens_and_recovers() {
    let tmp = fixture();
    let store = DiskStore::open(tmp.path(), DiskOptions::default()).unwrap();
    check_fixture(&store);
    drop(store);
    // Migrated once: fjall 2's files are gone, the engine is in engine/, and the data is the
    // same on the next open.
    assert!(!is_format_1(tmp.path()));
    assert!(tmp.path().join("engine").is_dir());
    assert!(!tmp.path().join("engine.new").exists());
    check_fixture(&DiskStore::open(tmp.path(), DiskOptions::default()).unwrap());
}

/// Format 2 as this build writes it: the v1 fixture migrated by the server of the commit that
/// added it (`tickwheel-server -b` on a copy, stopped with SIGTERM, lock file removed). Opens
/// without a migration and recovers the same jobs; if a fjall upgrade cannot read it, that
/// upgrade is a format change.
#[test]
fn format_v2_fixture_opens_and_recovers() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, tmp.path());
    check_fixture(&DiskStore::open(tmp.path(), DiskOptions::default()).unwrap());
    assert!(
        !tmp.path().join("engine.new").exists(),
        "opened without a migration"
    );
    assert!(!tmp.path().join("journals").exists());
    // Upgraded in place to format 3: the version says so (a format-2 build refuses it, as
    // it would ignore the write-ahead log), and the log exists.
    let db = fjall::Database::builder(tmp.path().join("engine"))
        .open()
        .unwrap();
    let meta = db
        .keyspace("meta", fjall::KeyspaceCreateOptions::default)
        .unwrap();
    let version = meta.get("format_version").unwrap().unwrap();
    assert_eq!(&*version, &3u32.to_be_bytes());
    assert!(tmp.path().join("wal/0.seg").exists());
    assert!(tmp.path().join("wal/1.seg").exists());
}

/// A tickwheel built on fjall 2 must refuse a migrated directory, not start an empty store in
/// it (which would look like every job was lost).
#[test]
fn format_1_engine_refuses_a_migrated_directory() {
    let tmp = fixture();
    drop(DiskStore::open(tmp.path(), DiskOptions::default()).unwrap());
    let err = fjall2::Config::new(tmp.path()).open().err();
    assert!(
        matches!(err, Some(fjall2::Error::InvalidVersion(None))),
        "{err:?}"
    );
    check_fixture(&DiskStore::open(tmp.path(), DiskOptions::default()).unwrap());
}

/// A migration that fails before it is complete (here: `engine.new` cannot be made a
/// directory) leaves the format-1 directory as it was, readable by fjall 2, and the next
/// open migrates it.
#[test]
fn failed_migration_leaves_format_1_usable() {
    let tmp = fixture();
    // A plain file where the migration builds its directory: removing it as a directory
    // fails, so the migration stops before writing anything.
    let blocker = tmp.path().join("engine.new");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let err = DiskStore::open(tmp.path(), DiskOptions::default()).unwrap_err();
    assert!(err.to_string().contains("engine.new"), "{err}");
    assert!(is_format_1(tmp.path()));
    assert!(!tmp.path().join("engine").exists());
    assert_eq!(format_1_job_count(tmp.path()), 4);
    std::fs::remove_file(&blocker).unwrap();
    check_fixture(&DiskStore::open(tmp.path(), DiskOptions::default()).unwrap());
}

/// A crash while `engine.new/` was being built: it is half there, the format-1 files are
/// intact. The next open starts the migration over.
#[test]
fn migration_interrupted_before_the_rename_starts_over() {
    let tmp = fixture();
    let half = tmp.path().join("engine.new");
    std::fs::create_dir_all(half.join("keyspaces/1")).unwrap();
    std::fs::write(half.join("0.jnl"), b"torn").unwrap();
    check_fixture(&DiskStore::open(tmp.path(), DiskOptions::default()).unwrap());
    assert!(!half.exists());
    assert!(!is_format_1(tmp.path()));
}

/// A crash after `engine.new/` became `engine/` but before fjall 2's files were removed: the
/// engine is the store, and the next open finishes the clean-up.
#[test]
fn migration_interrupted_after_the_rename_finishes() {
    let tmp = fixture();
    {
        let store = DiskStore::open(tmp.path(), DiskOptions::default()).unwrap();
        // Written after the migration: must survive, the old files must not come back.
        store
            .commit(&[tickwheel_store::Change::Delete { id: 1 }])
            .unwrap();
    }
    // Put fjall 2's files (and its marker) back, as if the clean-up never ran.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1");
    copy_dir(&fixture, tmp.path());
    assert!(is_format_1(tmp.path()));
    let store = DiskStore::open(tmp.path(), DiskOptions::default()).unwrap();
    assert!(!is_format_1(tmp.path()));
    assert_eq!(
        store.get(1).unwrap(),
        None,
        "the migrated store was replaced"
    );
    assert!(store.get(3).unwrap().is_some());
}

fn check_fixture(store: &DiskStore) {
    let recovered = store.recover(1_700_000_100_000).unwrap();
    assert!(recovered.next_id >= 4096, "next_id {}", recovered.next_id);
    let mut resident: Vec<_> = recovered
        .resident
        .iter()
        .map(|j| (j.id, j.tube.as_str(), j.priority, j.state, j.body.clone()))
        .collect();
    resident.sort_by_key(|r| r.0);
    assert_eq!(
        resident,
        [
            (1, "default", 7, DurableState::Ready, "ready job".into()),
            (
                2,
                "emails",
                20,
                DurableState::Delayed {
                    until: 1_700_000_060_000
                },
                "delayed job".into()
            ),
            (3, "emails", 30, DurableState::Buried, "buried job".into()),
        ]
    );
    assert_eq!(recovered.far_delayed, [(tube("far"), 1)]);
    let far = store.get(4).unwrap().expect("far job stored");
    assert_eq!(
        far.state,
        DurableState::Delayed {
            until: 4_000_000_000_000
        }
    );
    assert_eq!(&far.body[..], b"far job");
    assert_eq!(store.get(5).unwrap(), None, "a deleted job came back");
    assert_eq!(
        store
            .delayed_between(0, u64::MAX, 10)
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect::<Vec<_>>(),
        [2, 4]
    );
}
