//! `DiskStore` (and `MemStore`) against a `BTreeMap` model: random batches of puts, updates
//! and deletes, reopens at random points, and after every step `get`, `recover` and
//! `delayed_between` compared with what the model computes by brute force.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tickwheel_store::{
    Change, DiskOptions, DiskStore, DurableState, JobHistory, JobId, JobRecord, MemStore,
    Recovered, Store, TubeName,
};

use crate::util::{due, job};

const IDS: u64 = 16;

#[derive(Clone, Debug)]
enum Op {
    Batch(Vec<Change>),
    ReserveIds(JobId),
    Reopen,
}

fn state_strategy() -> impl Strategy<Value = DurableState> {
    prop_oneof![
        Just(DurableState::Ready),
        Just(DurableState::Buried),
        (0u64..40).prop_map(|until_ms| DurableState::Delayed { until: until_ms }),
    ]
}

/// Mostly small histories (jobs released or buried a few times), sometimes none.
fn history_strategy() -> impl Strategy<Value = JobHistory> {
    prop_oneof![
        Just(JobHistory::default()),
        (0u64..100_000, proptest::array::uniform5(0u32..4))
            .prop_map(|(delay, counters)| JobHistory::from_counters(delay, counters)),
    ]
}

fn mutation_strategy() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..IDS, 0usize..3, state_strategy()).prop_map(|(id, t, s)| Change::Put(job(id, ["a", "b", "tube-c"][t], s))),
        2 => (0..IDS, state_strategy(), 0u32..5, history_strategy()).prop_map(|(id, state, priority, history)| Change::Update { id, state, priority, history }),
        1 => (0..IDS).prop_map(|id| Change::Delete { id }),
        1 => (0u64..40).prop_map(|end| Change::ReserveIds { end }),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::collection::vec(mutation_strategy(), 1..6).prop_map(Op::Batch),
        1 => (0u64..40).prop_map(Op::ReserveIds),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Default)]
struct Model {
    jobs: BTreeMap<JobId, JobRecord>,
    next_id: JobId,
}

impl Model {
    fn apply(&mut self, batch: &[Change]) {
        for m in batch {
            match m {
                Change::Put(r) => {
                    self.next_id = self.next_id.max(r.id + 1);
                    self.jobs.insert(r.id, r.clone());
                }
                Change::Update {
                    id,
                    state,
                    priority,
                    history,
                } => {
                    if let Some(r) = self.jobs.get_mut(id) {
                        r.update(*state, *priority, *history);
                    }
                }
                Change::Delete { id } => {
                    self.jobs.remove(id);
                }
                Change::ReserveIds { end } => self.next_id = self.next_id.max(*end),
            }
        }
    }

    fn recover(&self, window: u64) -> Recovered {
        let mut far: BTreeMap<TubeName, u64> = BTreeMap::new();
        let mut resident = Vec::new();
        for r in self.jobs.values() {
            match r.state {
                DurableState::Delayed { until } if until >= window => {
                    *far.entry(r.tube.clone()).or_default() += 1;
                }
                _ => resident.push(r.clone()),
            }
        }
        Recovered {
            next_id: self.next_id,
            resident,
            far_delayed: far.into_iter().collect(),
        }
    }

    fn delayed_between(&self, from: u64, to: u64, limit: usize) -> Vec<JobRecord> {
        let mut v: Vec<_> = self
            .jobs
            .values()
            .filter(|r| matches!(r.state, DurableState::Delayed { until } if from <= until && until < to))
            .cloned()
            .collect();
        v.sort_by_key(|r| (due(r), r.id));
        v.truncate(limit);
        v
    }
}

fn check(store: &dyn Store, model: &Model, probe: Probe) -> Result<(), TestCaseError> {
    for id in 0..IDS {
        prop_assert_eq!(
            store.get(id).unwrap(),
            model.jobs.get(&id).cloned(),
            "get({})",
            id
        );
    }
    let (window, from, to, limit) = probe;
    prop_assert_eq!(
        store.recover(window).unwrap(),
        model.recover(window),
        "recover({})",
        window
    );
    prop_assert_eq!(
        store.recover(u64::MAX).unwrap(),
        model.recover(u64::MAX),
        "recover(MAX)"
    );
    prop_assert_eq!(
        store.delayed_between(from, to, limit).unwrap(),
        model.delayed_between(from, to, limit),
        "delayed_between({}, {}, {})",
        from,
        to,
        limit
    );
    Ok(())
}

/// What [`check`] probes besides every id: `recover(window)` and `delayed_between(from, to, limit)`.
type Probe = (u64, u64, u64, usize);

fn probe_strategy() -> impl Strategy<Value = Probe> {
    (0u64..45, 0u64..45, 0u64..45, 0usize..8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn disk_store_matches_model(ops in proptest::collection::vec((op_strategy(), probe_strategy()), 1..14)) {
        let ops = ops.into_iter().map(|(op, probe)| (op, probe, false)).collect();
        disk_matches_model(ops, DiskOptions::default())?;
    }

    #[test]
    fn mem_store_matches_model(ops in proptest::collection::vec((op_strategy(), probe_strategy()), 1..30)) {
        let store = MemStore::new();
        let mut model = Model::default();
        for (op, probe) in ops {
            match op {
                Op::Batch(b) => {
                    store.commit(&b).unwrap();
                    model.apply(&b);
                }
                Op::ReserveIds(end) => {
                    store.reserve_ids(end).unwrap();
                    model.next_id = model.next_id.max(end);
                }
                Op::Reopen => {}
            }
            check(&store, &model, probe)?;
        }
    }
}

/// What the write-ahead log must survive: fjall losing everything it had not synced.
#[derive(Clone, Debug)]
enum LossOp {
    Batch(Vec<Change>),
    /// `DiskStore::checkpoint`, then a copy of `engine/`: what fjall holds durably now.
    Checkpoint,
    /// A power cut: the store is dropped, `engine/` goes back to the last checkpoint's copy
    /// (fjall's unsynced writes are lost; the log's records were synced), and it is reopened.
    Crash,
}

fn loss_op_strategy() -> impl Strategy<Value = LossOp> {
    prop_oneof![
        6 => proptest::collection::vec(mutation_strategy(), 1..6).prop_map(LossOp::Batch),
        1 => Just(LossOp::Checkpoint),
        2 => Just(LossOp::Crash),
    ]
}

fn replace_engine(dir: &std::path::Path, snapshot: &std::path::Path) {
    let engine = dir.join("engine");
    std::fs::remove_dir_all(&engine).unwrap();
    crate::util::copy_dir(snapshot, &engine);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// Acknowledged commits survive fjall losing its unsynced suffix: the log replays them.
    /// (The default 1 MiB segments are not recycled within a case, so every state the test
    /// restores is one a power cut could leave.)
    #[test]
    fn the_log_restores_what_the_engine_lost(ops in proptest::collection::vec((loss_op_strategy(), probe_strategy()), 1..20)) {
        let dir = tempfile::tempdir().unwrap();
        let snap = tempfile::tempdir().unwrap();
        let snapshot = snap.path().join("engine");
        let mut store = Some(DiskStore::open(dir.path(), DiskOptions::default()).unwrap());
        store.as_ref().unwrap().checkpoint().unwrap();
        crate::util::copy_dir(&dir.path().join("engine"), &snapshot);
        let mut model = Model::default();
        for (op, probe) in ops {
            match op {
                LossOp::Batch(b) => {
                    store.as_ref().unwrap().commit(&b).unwrap();
                    model.apply(&b);
                }
                LossOp::Checkpoint => {
                    store.as_ref().unwrap().checkpoint().unwrap();
                    std::fs::remove_dir_all(&snapshot).unwrap();
                    crate::util::copy_dir(&dir.path().join("engine"), &snapshot);
                }
                LossOp::Crash => {
                    drop(store.take());
                    replace_engine(dir.path(), &snapshot);
                    store = Some(DiskStore::open(dir.path(), DiskOptions::default()).unwrap());
                    // The open replayed the log and synced fjall: that is durable now.
                    std::fs::remove_dir_all(&snapshot).unwrap();
                    crate::util::copy_dir(&dir.path().join("engine"), &snapshot);
                }
            }
            check(store.as_ref().unwrap(), &model, probe)?;
        }
    }

    /// Tiny log segments: records go round the two segments many times (recycled segments
    /// hold stale records), fjall is synced in the background or on the commit path, and a
    /// put larger than a segment goes through fjall's journal instead; reopens at random.
    #[test]
    fn tiny_log_segments_match_model(ops in proptest::collection::vec((op_strategy(), probe_strategy(), any::<bool>()), 1..40)) {
        disk_matches_model(ops, DiskOptions::default().log_segment_bytes(4096))?;
    }
}

/// Applies `ops` to a `DiskStore` opened with `options` in a fresh directory and to the model,
/// checking the store against the model after each; an op's flag gives a batch's first put a
/// 5 000-byte body (larger than a 4 KiB log segment).
fn disk_matches_model(
    ops: Vec<(Op, Probe, bool)>,
    options: DiskOptions,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = DiskStore::open(dir.path(), options.clone()).unwrap();
    let mut model = Model::default();
    for (op, probe, big) in ops {
        match op {
            Op::Batch(mut b) => {
                if big {
                    if let Some(Change::Put(r)) = b.first_mut() {
                        r.body = bytes::Bytes::from(vec![7u8; 5000]);
                    }
                }
                store.commit(&b).unwrap();
                model.apply(&b);
            }
            Op::ReserveIds(end) => {
                store.reserve_ids(end).unwrap();
                model.next_id = model.next_id.max(end);
            }
            Op::Reopen => {
                drop(store);
                store = DiskStore::open(dir.path(), options.clone()).unwrap();
            }
        }
        check(&store, &model, probe)?;
    }
    Ok(())
}
