//! The due timeline against a model: the delayed jobs the durable log says exist (a
//! `BTreeMap` of job → due time rebuilt from [`Engine::take_changes`], as a store holds them),
//! bucketed by scanning. Random puts, deletes, kicks, releases with delays and clock moves, with
//! and without a memory window (far jobs, loads by id and window loads), and a restart that
//! seeds far jobs with `note_far_due`.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use tickwheel_queue::{
    Change, ClientId, Config, DurableState, Engine, Error, JobId, JobRecord, Load, Reserve,
    Resolution, Timeline, TubeName,
};

const A: ClientId = ClientId(1);
const TUBES: [&str; 3] = ["default", "emails", "reports"];
const HOURS: usize = 30;

fn tube(i: usize) -> TubeName {
    TubeName::new(TUBES[i % TUBES.len()]).expect("valid name")
}

#[derive(Debug, Clone)]
enum Op {
    Put { tube: usize, delay: u64 },
    Delete(usize),
    Kick(usize),
    ReserveRelease { delay: u64 },
    Advance(u64),
    Restart,
}

fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        1u64..5_000,
        1u64..200_000,
        1u64..40_000_000,
        1u64..400_000_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, delay()).prop_map(|(tube, delay)| Op::Put { tube, delay }),
        1 => any::<usize>().prop_map(Op::Delete),
        1 => any::<usize>().prop_map(Op::Kick),
        1 => delay().prop_map(|delay| Op::ReserveRelease { delay }),
        2 => prop_oneof![1u64..2_000, 1u64..120_000, 1u64..5_000_000].prop_map(Op::Advance),
        1 => Just(Op::Restart),
    ]
}

struct Harness {
    e: Engine,
    config: Config,
    /// What a store would hold: the durable log applied.
    store: BTreeMap<JobId, JobRecord>,
    next_id: JobId,
    now: u64,
}

impl Harness {
    fn new(window: Option<u64>, now: u64) -> Harness {
        let config = Config {
            window,
            ..Config::default()
        };
        let mut h = Harness {
            e: Engine::new(config.clone(), now),
            config,
            store: BTreeMap::new(),
            next_id: 1,
            now,
        };
        h.connect();
        h
    }

    fn connect(&mut self) {
        self.e.connect(A);
        for i in 0..TUBES.len() {
            self.e.watch(self.now, A, &tube(i));
        }
    }

    fn persist(&mut self) {
        for change in self.e.take_changes() {
            match change {
                Change::Put(r) => {
                    self.next_id = self.next_id.max(r.id + 1);
                    self.store.insert(r.id, r);
                }
                Change::Update {
                    id,
                    state,
                    priority,
                    history,
                } => {
                    if let Some(r) = self.store.get_mut(&id) {
                        r.state = state;
                        r.priority = priority;
                        r.history = history;
                    }
                }
                Change::Delete { id } => {
                    self.store.remove(&id);
                }
                Change::ReserveIds { end } => self.next_id = self.next_id.max(end),
            }
        }
    }

    /// Runs `op` on the engine, doing the loads it asks for as a server does.
    fn with_load(&mut self, mut op: impl FnMut(&mut Engine, u64) -> Result<(), Error>) {
        for _ in 0..3 {
            match op(&mut self.e, self.now) {
                Err(Error::NeedsLoad(Load::Job(id))) => {
                    self.persist();
                    let record = self.store.get(&id).cloned();
                    self.e.load_job(id, record);
                }
                Err(Error::NeedsLoad(load)) => self.e.skip_load(load),
                _ => break,
            }
        }
        self.persist();
    }

    fn move_window(&mut self) {
        self.persist();
        if let Some((from, to)) = self.e.window_load(self.now) {
            let due = self.delayed_between(from, to);
            self.e.load_window(due);
        }
    }

    fn delayed_between(&self, from: u64, to: u64) -> Vec<JobRecord> {
        self.store
            .values()
            .filter(|r| matches!(r.state, DurableState::Delayed { until } if until >= from && until < to))
            .cloned()
            .collect()
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Put { tube: t, delay } => {
                self.e.use_tube(self.now, A, &tube(t));
                self.e
                    .put(self.now, A, 10, delay, 60_000, Bytes::from_static(b"x"))
                    .expect("put accepted");
                self.persist();
            }
            Op::Delete(i) => {
                let id = 1 + (i as u64) % self.next_id;
                self.with_load(|e, now| e.delete(now, A, id));
            }
            Op::Kick(i) => {
                let id = 1 + (i as u64) % self.next_id;
                self.with_load(|e, now| e.kick_job(now, id));
            }
            Op::ReserveRelease { delay } => {
                if let Reserve::Job(job) = self.e.reserve(self.now, A, Some(0)) {
                    self.e
                        .release(self.now, A, job.id, 5, delay)
                        .expect("own job released");
                }
                self.persist();
            }
            Op::Advance(dt) => {
                self.now += dt;
                self.e.advance(self.now);
                self.move_window();
            }
            Op::Restart => {
                self.persist();
                // A restart: the store's jobs below the window are handed over, the rest
                // counted per tube and then seeded one by one from the due index.
                let end = self.config.window_end_at(self.now);
                let mut resident = Vec::new();
                let mut far: BTreeMap<TubeName, u64> = BTreeMap::new();
                let mut far_due = Vec::new();
                for r in self.store.values() {
                    match r.state {
                        DurableState::Delayed { until } if until >= end => {
                            *far.entry(r.tube.clone()).or_default() += 1;
                            far_due.push((r.tube.clone(), until));
                        }
                        _ => resident.push(r.clone()),
                    }
                }
                self.e = Engine::recover_windowed(
                    self.config.clone(),
                    self.now,
                    self.next_id,
                    resident,
                    far.into_iter().collect(),
                );
                for (t, until) in far_due {
                    self.e.note_far_due(&t, until);
                }
                self.connect();
            }
        }
    }

    /// The model's timeline: delayed jobs of the durable log still due after `now`.
    fn model(&self, only: Option<&TubeName>) -> (Vec<Vec<u64>>, u64, u64) {
        let now = self.e.now();
        let mut series = Vec::new();
        let dues: Vec<u64> = self
            .store
            .values()
            .filter(|r| only.is_none_or(|t| &r.tube == t))
            .filter_map(|r| match r.state {
                DurableState::Delayed { until } if until > now => Some(until),
                _ => None,
            })
            .collect();
        let mut later = 0;
        for r in Resolution::ALL {
            let n = if r == Resolution::Hour { HOURS } else { 60 };
            let first = now / r.width_ms();
            let mut counts = vec![0; n];
            for &until in &dues {
                let b = until / r.width_ms();
                if b >= first && b - first < n as u64 {
                    counts[(b - first) as usize] += 1;
                } else if r == Resolution::Hour && b >= first + n as u64 {
                    later += 1;
                }
            }
            series.push(counts);
        }
        (series, later, dues.len() as u64)
    }

    fn check(&self) -> Result<(), TestCaseError> {
        for only in [None, Some(tube(0)), Some(tube(1)), Some(tube(2))] {
            let (series, later, delayed) = self.model(only.as_ref());
            let Some(Timeline {
                now_ms,
                series: got,
                later: got_later,
                delayed: got_delayed,
            }) = self.e.timeline(only.as_ref(), HOURS)
            else {
                // A tube that does not exist has no delayed job.
                prop_assert_eq!(delayed, 0, "tube {:?} gone with delayed jobs", only);
                continue;
            };
            prop_assert_eq!(now_ms, self.e.now());
            let got_counts: Vec<Vec<u64>> = got.iter().map(|s| s.counts.clone()).collect();
            prop_assert_eq!(&got_counts, &series, "tube {:?} at {}", only, now_ms);
            for s in &got {
                prop_assert_eq!(s.start_ms % s.width_ms(), 0);
                prop_assert!(s.start_ms <= now_ms && now_ms - s.start_ms < s.width_ms());
            }
            prop_assert_eq!(got_later, later);
            prop_assert_eq!(got_delayed, delayed);
            if only.is_none() {
                prop_assert_eq!(delayed, self.e.stats().delayed, "stats agree");
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn timeline_matches_the_durable_delayed_jobs(
        window in prop_oneof![Just(None), Just(Some(10_000u64)), Just(Some(600_000u64))],
        start in prop_oneof![Just(0u64), 1_000_000_000_000u64..2_000_000_000_000],
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut h = Harness::new(window, start);
        for op in ops {
            h.apply(op);
            h.check()?;
        }
    }
}
