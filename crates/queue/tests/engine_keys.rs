//! Idempotency keys (`Engine::put_job`): checked against a model (a map of live keys) over
//! random puts, deletes, time passing and restarts, with a memory window so that keyed jobs
//! also live on "disk" only. The disk is a map of records built from the engine's
//! [`Change`]s, as a store would, and serves the engine's loads.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use proptest::prelude::*;
use tickwheel_queue::{
    Change, ClientId, Config, DurableState, Engine, Error, JobId, JobRecord, Load, NewJob, TubeName,
};

const WINDOW: u64 = 1_000;

fn config() -> Config {
    Config {
        max_job_size: 1024,
        window: Some(WINDOW),
        ..Config::default()
    }
}

/// The store: records by id, as `Change`s leave them.
#[derive(Default)]
struct Disk {
    jobs: BTreeMap<JobId, JobRecord>,
    next_id: JobId,
}

impl Disk {
    fn apply(&mut self, changes: Vec<Change>) {
        for c in changes {
            match c {
                Change::Put(r) => {
                    self.next_id = self.next_id.max(r.id + 1);
                    self.jobs.insert(r.id, r);
                }
                Change::Update {
                    id,
                    state,
                    priority,
                    history,
                } => {
                    if let Some(r) = self.jobs.get_mut(&id) {
                        r.state = state;
                        r.priority = priority;
                        r.history = history;
                    }
                }
                Change::Delete { id } => {
                    self.jobs.remove(&id);
                }
                Change::ReserveIds { end } => self.next_id = self.next_id.max(end),
            }
        }
    }

    fn delayed_between(&self, from: u64, to: u64) -> Vec<JobRecord> {
        let mut v: Vec<JobRecord> = self
            .jobs
            .values()
            .filter(|r| matches!(r.state, DurableState::Delayed { until } if until >= from && until < to))
            .cloned()
            .collect();
        v.sort_by_key(|r| match r.state {
            DurableState::Delayed { until } => (until, r.id),
            _ => (0, r.id),
        });
        v
    }

    /// A restart: what `Store::recover` hands the engine, and the far keys the server reads.
    fn restart(&self, now: u64) -> Engine {
        let end = config().window_end_at(now);
        let far =
            |r: &JobRecord| matches!(r.state, DurableState::Delayed { until } if until >= end);
        let resident: Vec<JobRecord> = self.jobs.values().filter(|r| !far(r)).cloned().collect();
        let mut counts: BTreeMap<TubeName, u64> = BTreeMap::new();
        let mut keys = Vec::new();
        for r in self.jobs.values().filter(|r| far(r)) {
            *counts.entry(r.tube.clone()).or_default() += 1;
            if let Some(k) = &r.idempotency_key {
                keys.push((r.tube.clone(), k.clone(), r.id));
            }
        }
        let mut e = Engine::recover_windowed(
            config(),
            now,
            self.next_id.max(1),
            resident,
            counts.into_iter().collect(),
        );
        e.add_far_keys(keys);
        e
    }
}

/// Runs `op` until it stops asking for loads, serving them from `disk`.
fn with_loads<R>(
    e: &mut Engine,
    disk: &mut Disk,
    mut op: impl FnMut(&mut Engine) -> Result<R, Error>,
) -> Result<R, Error> {
    for _ in 0..64 {
        match op(e) {
            Err(Error::NeedsLoad(Load::Job(id))) => {
                disk.apply(e.take_changes());
                e.load_job(id, disk.jobs.get(&id).cloned());
            }
            Err(Error::NeedsLoad(Load::Widen)) => {
                disk.apply(e.take_changes());
                match e.widen_window() {
                    Some((from, to)) => e.load_window(disk.delayed_between(from, to)),
                    None => e.skip_load(Load::Widen),
                }
            }
            other => {
                disk.apply(e.take_changes());
                return other;
            }
        }
    }
    panic!("the engine kept asking for loads");
}

#[derive(Clone, Debug)]
enum Op {
    /// Put with key `key` in tube `tube`, delayed by `delay` ms.
    Put { tube: u8, key: u8, delay: u64 },
    /// Delete the live job with this key, through its id.
    DeleteByKey { tube: u8, key: u8 },
    /// A worker reserves whatever is ready and deletes it.
    ReserveDelete,
    /// Time passes.
    Advance(u64),
    /// The server restarts from the disk.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..2, 0u8..4, prop_oneof![Just(0u64), 1u64..500, 1_000u64..5_000])
            .prop_map(|(tube, key, delay)| Op::Put { tube, key, delay }),
        2 => (0u8..2, 0u8..4).prop_map(|(tube, key)| Op::DeleteByKey { tube, key }),
        1 => Just(Op::ReserveDelete),
        2 => (1u64..3_000).prop_map(Op::Advance),
        1 => Just(Op::Restart),
    ]
}

fn tube(i: u8) -> TubeName {
    TubeName::new(&format!("t{i}")).expect("valid tube name")
}

fn key(i: u8) -> String {
    format!("key-{i}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_key_names_one_live_job_per_tube(ops in proptest::collection::vec(op(), 1..80)) {
        let worker = ClientId(1);
        let mut now = 1_000_000u64;
        let mut disk = Disk::default();
        let mut e = Engine::new(config(), now);
        e.connect(worker);
        e.watch(now, worker, &tube(0));
        e.watch(now, worker, &tube(1));
        // The model: live keyed jobs.
        let mut live: HashMap<(u8, u8), JobId> = HashMap::new();
        for op in ops {
            match op {
                Op::Put { tube: t, key: k, delay } => {
                    let job = NewJob {
                        tube: tube(t),
                        priority: 10,
                        delay,
                        ttr: 60_000,
                        body: Bytes::from(format!("{t}/{k}")),
                        idempotency_key: Some(key(k)),
                    };
                    let (id, created) = with_loads(&mut e, &mut disk, |e| e.put_job(now, job.clone()))
                        .expect("put accepted");
                    match live.get(&(t, k)) {
                        Some(&existing) => prop_assert_eq!((id, created), (existing, false)),
                        None => {
                            prop_assert!(created);
                            prop_assert!(!live.values().any(|&other| other == id), "id reused");
                            live.insert((t, k), id);
                        }
                    }
                    // The record the disk holds carries the key.
                    prop_assert_eq!(disk.jobs.get(&id).and_then(|r| r.idempotency_key.clone()), Some(key(k)));
                }
                Op::DeleteByKey { tube: t, key: k } => {
                    let found = e.job_by_key(&tube(t), &key(k));
                    prop_assert_eq!(found, live.get(&(t, k)).copied());
                    if let Some(id) = found {
                        // The worker may hold it (reserved): then deleting is refused.
                        let r = with_loads(&mut e, &mut disk, |e| e.delete(now, ClientId(99), id));
                        if r.is_ok() {
                            live.remove(&(t, k));
                        } else {
                            prop_assert_eq!(e.job_state(id), Some(tickwheel_queue::JobState::Reserved));
                        }
                    }
                }
                Op::ReserveDelete => {
                    if let tickwheel_queue::Reserve::Job(job) = e.reserve(now, worker, Some(0)) {
                        e.delete(now, worker, job.id).expect("the holder deletes");
                        disk.apply(e.take_changes());
                        live.retain(|_, id| *id != job.id);
                    }
                    disk.apply(e.take_changes());
                }
                Op::Advance(ms) => {
                    now += ms;
                    e.advance(now);
                    if let Some((from, to)) = e.window_load(now) {
                        disk.apply(e.take_changes());
                        e.load_window(disk.delayed_between(from, to));
                    }
                    disk.apply(e.take_changes());
                }
                Op::Restart => {
                    disk.apply(e.take_changes());
                    e = disk.restart(now);
                    e.connect(worker);
                    e.watch(now, worker, &tube(0));
                    e.watch(now, worker, &tube(1));
                }
            }
            for t in 0..2 {
                for k in 0..4 {
                    prop_assert_eq!(e.job_by_key(&tube(t), &key(k)), live.get(&(t, k)).copied(), "tube {} key {}", t, k);
                }
            }
        }
    }
}

#[test]
fn a_far_keyed_job_is_found_by_key_after_a_restart_and_deleted_through_a_load() {
    let now = 1_000_000;
    let mut disk = Disk::default();
    let mut e = Engine::new(config(), now);
    let job = NewJob {
        tube: tube(0),
        priority: 1,
        delay: 86_400_000, // a day: far beyond the 1 s window, on disk only
        ttr: 1_000,
        body: Bytes::from_static(b"tomorrow"),
        idempotency_key: Some("daily-report".into()),
    };
    let (id, created) = e.put_job(now, job.clone()).expect("put");
    assert!(created);
    disk.apply(e.take_changes());
    assert_eq!(e.job_state(id), None, "far jobs are not in memory");
    let mut e = disk.restart(now + 10);
    assert_eq!(e.job_by_key(&tube(0), "daily-report"), Some(id));
    assert_eq!(e.put_job(now + 10, job.clone()), Ok((id, false)));
    assert!(
        e.take_changes().is_empty(),
        "a repeated put changes nothing"
    );
    with_loads(&mut e, &mut disk, |e| e.delete(now + 20, ClientId(7), id)).expect("deleted");
    assert_eq!(e.job_by_key(&tube(0), "daily-report"), None);
    let (again, created) = e.put_job(now + 30, job).expect("put");
    assert!(created && again > id);
}

#[test]
fn a_key_is_per_tube_and_a_too_big_body_is_refused_before_the_key() {
    let mut e = Engine::new(Config::default(), 0);
    let job = |t: u8, body: &'static [u8]| NewJob {
        tube: tube(t),
        priority: 1,
        delay: 0,
        ttr: 1_000,
        body: Bytes::from_static(body),
        idempotency_key: Some("k".into()),
    };
    let (a, _) = e.put_job(0, job(0, b"a")).expect("put");
    let (b, created) = e.put_job(0, job(1, b"b")).expect("put");
    assert!(created && a != b);
    let mut small = Engine::new(
        Config {
            max_job_size: 1,
            ..Config::default()
        },
        0,
    );
    small.put_job(0, job(0, b"a")).expect("put");
    assert_eq!(small.put_job(0, job(0, b"too big")), Err(Error::JobTooBig));
}
