//! Format compatibility: a store written by format version 1 (checked in under
//! `tests/fixtures/v1/`, made with the code of this commit) must open and recover exactly. If a
//! change breaks this test, it changed the on-disk format: bump `FORMAT_VERSION`, keep reading
//! v1 (or migrate it), and add a v2 fixture beside this one (docs/storage-format.md).
//!
//! The fixture holds: job 1 ready (priority changed to 7 by an update), job 2 delayed until
//! 1_700_000_060_000 in tube `emails`, job 3 buried in `emails`, job 4 delayed until
//! 4_000_000_000_000 in tube `far`, job 5 put then deleted, and ids reserved up to 4096.

use std::path::Path;

use tickwheel_store::{DiskOptions, DiskStore, DurableState, Store};

use crate::util::{copy_dir, tube};

#[test]
fn format_v1_fixture_opens_and_recovers() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, tmp.path()); // opening may write: never touch the checked-in copy
    let store = DiskStore::open(tmp.path(), DiskOptions::default()).unwrap();

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
