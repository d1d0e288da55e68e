//! A checker for [`tickwheel_queue::Engine`]: random operation sequences with a manual clock,
//! every answer and every event checked against a shadow model of what beanstalkd's rules
//! allow, and restarts from the durable changes checked against the shadow.
//!
//! The shadow knows each job's state as a function of time (a delayed job is ready from its
//! `until`; a reservation ends at its deadline), so it can judge each event at the instant it
//! happens: the runner steps the engine from one [`Engine::next_deadline`] to the next. What
//! it checks, after every operation and every instant:
//! - never early: a job is handed out only when it is ready by the shadow's clock;
//! - the most urgent ready job (priority, then id) of the client's watched, unpaused tubes;
//! - nothing lost: the engine holds exactly the shadow's jobs, each in the shadow's state,
//!   with the shadow's priority; the stats add up;
//! - every answer (`NOT_FOUND` or success) is the one the rules give;
//! - no waiting client is left waiting while a job is available to it;
//! - durability: after a restart from the persisted changes, every job is back in its
//!   durable state (reserved jobs ready, overdue delayed jobs ready); a `reserve-job` of a
//!   delayed or buried job writes nothing unless [`Config::write_reserve_job`] is set, so the
//!   job comes back as its last write left it (as beanstalkd's);
//! - `stats-job`'s delay and counters (reserves, releases, buries, kicks) are the shadow's,
//!   the persisted record holds them as of the job's last durable change, and a restart
//!   brings those back, with one more bury for a buried job as beanstalkd's replay counts
//!   (TTR timeouts are not modelled: the shadow's reservations lapse lazily).

use std::collections::BTreeMap;

use bytes::Bytes;
use tickwheel_queue::{
    Change, ClientId, Config, DurableState, Engine, Error, Event, JobHistory, JobId, JobRecord,
    JobState, Reserve, TubeName, SAFETY_MARGIN_MS,
};

/// The fields of a history the shadow keeps (all but `timeouts`).
fn counters(h: &JobHistory) -> (u64, u32, u32, u32, u32) {
    (h.delay, h.reserves, h.releases, h.buries, h.kicks)
}

/// Tubes the operations use (the first is `default`).
const TUBES: [&str; 3] = ["default", "alpha", "beta"];
/// Clients the operations use.
const CLIENTS: u8 = 4;

/// One step. Clients are `c % 4`, tubes `t % 3`, jobs `pick % (highest id issued)` + 1.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each variant is the engine operation of the same name"
)]
pub enum QueueOp {
    Connect(u8),
    Disconnect(u8),
    Use(u8, u8),
    Watch(u8, u8),
    Ignore(u8, u8),
    Put {
        c: u8,
        pri: u32,
        delay: u64,
        ttr: u64,
        len: u8,
    },
    Reserve(u8, Option<u64>),
    ReserveJob(u8, u64),
    Delete(u8, u64),
    Release(u8, u64, u32, u64),
    Bury(u8, u64, u32),
    Touch(u8, u64),
    Kick(u8, u64),
    KickJob(u64),
    Peek(u64),
    PeekState(u8, u8),
    Pause(u8, u64),
    /// Advance the clock by this many ms, stepping through every timer.
    Advance(u64),
    /// Crash and restart from the persisted changes.
    Restart,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum S {
    Ready,
    Delayed { until: u64 },
    Reserved { owner: u8, deadline: u64 },
    Buried { seq: u64 },
}

#[derive(Clone, Debug)]
struct SJob {
    tube: usize,
    pri: u32,
    ttr: u64,
    state: S,
    len: usize,
    /// Its delay and counters now (`timeouts` not kept).
    hist: JobHistory,
    /// The same as of its last durable change.
    stored: JobHistory,
    /// The state its last durable change left, when that is no longer the live one: a
    /// `reserve-job` of a delayed or buried job that wrote nothing.
    kept: Option<S>,
    /// When it was last handed out (the runner's count of reservations): a hang-up returns
    /// its client's jobs in this order.
    rseq: u64,
}

impl SJob {
    fn kick(&mut self) {
        self.state = S::Ready;
        self.hist.kicks += 1;
        self.store();
    }

    /// A change that the engine persists: the history goes with it.
    fn store(&mut self) {
        self.stored = self.hist;
        self.kept = None;
    }

    /// The state at time `t` (delays and reservations run out on their own).
    fn at(&self, t: u64) -> S {
        settled(self.state, t)
    }

    /// The state a restart at `t` would find in the store.
    fn durable_at(&self, t: u64) -> S {
        match self.kept.map_or(self.at(t), |kept| settled(kept, t)) {
            S::Reserved { .. } => S::Ready,
            s => s,
        }
    }
}

/// State `s` at time `t`: a delay or a reservation that has run out is ready.
fn settled(s: S, t: u64) -> S {
    match s {
        S::Delayed { until } if until <= t => S::Ready,
        S::Reserved { deadline, .. } if deadline < t => S::Ready,
        s => s,
    }
}

#[derive(Clone, Debug)]
struct SClient {
    used: usize,
    watched: Vec<usize>,
    /// Waiting in reserve: the timeout's deadline, if any.
    waiting: Option<Option<u64>>,
}

struct Runner {
    engine: Engine,
    config: Config,
    /// A window load handed out but not completed yet: its range start and the store's
    /// records as read when it was handed out. Completed before the clock reaches the start,
    /// so commands in between exercise loads racing with deletes and loads by id.
    pending_load: Option<(u64, Vec<JobRecord>)>,
    loads: u64,
    /// Reservations so far (`SJob::rseq`).
    handed_out: u64,
    t: u64,
    jobs: BTreeMap<JobId, SJob>,
    clients: BTreeMap<u8, SClient>,
    paused: [u64; 3],
    seq: u64,
    last_id: JobId,
    /// The persisted state: what the changes taken so far say.
    durable: BTreeMap<JobId, JobRecord>,
    ids_end: JobId,
}

/// Runs `ops` and checks the engine against the rules.
///
/// # Errors
///
/// A description of the first violation, with the operations before it.
pub fn run_queue_ops(ops: &[QueueOp]) -> Result<(), String> {
    run_queue_ops_with(ops, None)
}

/// Like [`run_queue_ops`], with the engine's memory window set to `window` ms: delayed jobs
/// due later than that stay in the (model) store, and the runner moves the window and loads
/// jobs by id as a server does.
///
/// # Errors
///
/// A description of the first violation, with the operations before it.
pub fn run_queue_ops_with(ops: &[QueueOp], window: Option<u64>) -> Result<(), String> {
    run_queue_ops_config(
        ops,
        Config {
            window,
            ..Config::default()
        },
    )
}

/// The engine configuration a fuzz input asks for with its first byte: bit 0 a 2.5 s memory
/// window, bit 1 [`Config::write_reserve_job`] (the fuzz target and its checked-in seeds).
#[must_use]
pub fn queue_config_for_input(bytes: &[u8]) -> Config {
    let first = bytes.first().copied().unwrap_or(0);
    Config {
        window: (first & 1 == 1).then_some(2_500),
        write_reserve_job: first & 2 == 2,
        ..Config::default()
    }
}

/// Like [`run_queue_ops`], with the engine made with `config` (its memory window, whether a
/// `reserve-job` is written).
///
/// # Errors
///
/// A description of the first violation, with the operations before it.
pub fn run_queue_ops_config(ops: &[QueueOp], config: Config) -> Result<(), String> {
    let mut r = Runner {
        engine: Engine::new(config.clone(), 0),
        config,
        pending_load: None,
        loads: 0,
        handed_out: 0,
        t: 0,
        jobs: BTreeMap::new(),
        clients: BTreeMap::new(),
        paused: [0; 3],
        seq: 0,
        last_id: 0,
        durable: BTreeMap::new(),
        ids_end: 1,
    };
    for (step, op) in ops.iter().enumerate() {
        r.move_window()
            .and_then(|()| r.step(op))
            .and_then(|()| r.events())
            .map(|()| r.forget_dropped_tubes())
            .and_then(|()| r.persist())
            .and_then(|()| r.check_all())
            .map_err(|e| {
                let from = step.saturating_sub(40);
                let recent: Vec<String> = ops[from..=step]
                    .iter()
                    .enumerate()
                    .map(|(i, op)| format!("{}: {op:?}", from + i))
                    .collect();
                format!(
                    "step {step} at t={} ({op:?}): {e}\n{}",
                    r.t,
                    recent.join("\n")
                )
            })?;
    }
    Ok(())
}

fn tube_name(t: usize) -> TubeName {
    TubeName::new(TUBES[t]).expect("valid tube name")
}

impl Runner {
    fn job_id(&self, pick: u64) -> JobId {
        if self.last_id == 0 {
            1
        } else {
            pick % (self.last_id + 1)
        }
    }

    fn step(&mut self, op: &QueueOp) -> Result<(), String> {
        let t = self.t;
        match *op {
            QueueOp::Connect(c) => {
                let c = c % CLIENTS;
                if self.clients.contains_key(&c) {
                    return Ok(());
                }
                self.engine.connect(ClientId(c.into()));
                self.clients.insert(
                    c,
                    SClient {
                        used: 0,
                        watched: vec![0],
                        waiting: None,
                    },
                );
            }
            QueueOp::Disconnect(c) => {
                let c = c % CLIENTS;
                if self.clients.remove(&c).is_none() {
                    return Ok(());
                }
                let mut held: Vec<(u64, JobId)> = self
                    .jobs
                    .iter()
                    .filter(|(_, j)| matches!(j.at(t), S::Reserved { owner, .. } if owner == c))
                    .map(|(&id, j)| (j.rseq, id))
                    .collect();
                held.sort_unstable();
                let held: Vec<JobId> = held.into_iter().map(|(_, id)| id).collect();
                self.engine.disconnect(t, ClientId(c.into()));
                // Back one at a time, in the order they were reserved, each served before the
                // next comes back (as beanstalkd).
                self.events_one_by_one(&held, |job| job.state = S::Ready)?;
            }
            QueueOp::Use(c, tube) => {
                let Some(client) = self.clients.get_mut(&(c % CLIENTS)) else {
                    return Ok(());
                };
                let tube = usize::from(tube) % TUBES.len();
                client.used = tube;
                self.engine
                    .use_tube(t, ClientId((c % CLIENTS).into()), &tube_name(tube));
            }
            QueueOp::Watch(c, tube) => {
                let Some(client) = self.clients.get_mut(&(c % CLIENTS)) else {
                    return Ok(());
                };
                let tube = usize::from(tube) % TUBES.len();
                if !client.watched.contains(&tube) {
                    client.watched.push(tube);
                }
                let want = client.watched.len();
                let got = self
                    .engine
                    .watch(t, ClientId((c % CLIENTS).into()), &tube_name(tube));
                expect_eq("watch count", got, want)?;
            }
            QueueOp::Ignore(c, tube) => {
                let Some(client) = self.clients.get_mut(&(c % CLIENTS)) else {
                    return Ok(());
                };
                let tube = usize::from(tube) % TUBES.len();
                let want = match client.watched.iter().position(|&w| w == tube) {
                    Some(_) if client.watched.len() == 1 => Err(Error::NotIgnored),
                    Some(pos) => {
                        client.watched.remove(pos);
                        Ok(client.watched.len())
                    }
                    None => Ok(client.watched.len()),
                };
                let got = self
                    .engine
                    .ignore(t, ClientId((c % CLIENTS).into()), &tube_name(tube));
                expect_eq("ignore", got, want)?;
            }
            QueueOp::Put {
                c,
                pri,
                delay,
                ttr,
                len,
            } => {
                let c = c % CLIENTS;
                let Some(client) = self.clients.get(&c) else {
                    return Ok(());
                };
                let tube = client.used;
                let body = Bytes::from(vec![b'x'; usize::from(len)]);
                let id = self
                    .engine
                    .put(t, ClientId(c.into()), pri, delay, ttr, body)
                    .map_err(|e| format!("put failed: {e}"))?;
                if id <= self.last_id {
                    return Err(format!("put gave id {id}, not above {}", self.last_id));
                }
                self.last_id = id;
                let state = if delay == 0 {
                    S::Ready
                } else {
                    S::Delayed { until: t + delay }
                };
                let hist = JobHistory {
                    delay,
                    ..JobHistory::default()
                };
                let job = SJob {
                    tube,
                    pri,
                    ttr: ttr.max(1000),
                    state,
                    len: usize::from(len),
                    hist,
                    stored: hist,
                    kept: None,
                    rseq: 0,
                };
                self.jobs.insert(id, job);
                self.events()?;
            }
            QueueOp::Reserve(c, timeout) => {
                let c = c % CLIENTS;
                if !self.clients.contains_key(&c) || self.clients[&c].waiting.is_some() {
                    return Ok(());
                }
                let got = self.engine.reserve(t, ClientId(c.into()), timeout);
                let best = self.best_for(c);
                match got {
                    Reserve::Job(view) => {
                        expect_eq("reserved job", Some(view.id), best)?;
                        self.hand_out(c, view.id, view.body.len())?;
                    }
                    Reserve::DeadlineSoon | Reserve::TimedOut | Reserve::Waiting
                        if best.is_some() =>
                    {
                        return Err(format!("reserve gave {got:?} though job {best:?} is ready"));
                    }
                    Reserve::DeadlineSoon => {
                        if !self.holds_job_in_margin(c) {
                            return Err("DEADLINE_SOON without a job in its last second".into());
                        }
                    }
                    Reserve::TimedOut | Reserve::Waiting if self.holds_job_in_margin(c) => {
                        return Err(format!("{got:?} though a held job is in its last second"));
                    }
                    Reserve::TimedOut => expect_eq("timeout of TIMED_OUT", timeout, Some(0))?,
                    Reserve::Waiting => {
                        if timeout == Some(0) {
                            return Err("waiting with a zero timeout".into());
                        }
                        let client = self.clients.get_mut(&c).expect("connected");
                        client.waiting = Some(timeout.map(|d| t + d));
                    }
                }
            }
            QueueOp::ReserveJob(c, pick) => {
                let Some((c, id)) = self.idle_client_and_job(c, pick) else {
                    return Ok(());
                };
                let ok = self
                    .jobs
                    .get(&id)
                    .is_some_and(|j| !matches!(j.at(t), S::Reserved { .. }));
                let got = self.engine.reserve_job(t, ClientId(c.into()), id);
                expect_eq("reserve-job succeeded", got.is_ok(), ok)?;
                if let Ok(view) = got {
                    let job = self.jobs.get_mut(&id).expect("reserved");
                    if matches!(job.at(t), S::Delayed { .. } | S::Buried { .. }) {
                        if self.config.write_reserve_job {
                            job.store(); // made ready durably, before the reserve
                        } else {
                            job.kept = Some(job.state); // nothing written
                        }
                    }
                    self.hand_out(c, id, view.body.len())?;
                }
            }
            QueueOp::Delete(c, pick) => {
                let Some((c, id)) = self.idle_client_and_job(c, pick) else {
                    return Ok(());
                };
                let ok = self
                    .jobs
                    .get(&id)
                    .is_some_and(|j| !matches!(j.at(t), S::Reserved { owner, .. } if owner != c));
                let got = self.engine.delete(t, ClientId(c.into()), id);
                expect_eq(
                    "delete",
                    got,
                    if ok { Ok(()) } else { Err(Error::NotFound) },
                )?;
                if ok {
                    self.jobs.remove(&id);
                }
                self.events()?;
            }
            QueueOp::Release(c, pick, pri, delay) => {
                let c = c % CLIENTS;
                let id = self.job_id(pick);
                if !self.owned_by(c, id)? {
                    let got = self.engine.release(t, ClientId(c.into()), id, pri, delay);
                    return expect_eq("release", got, Err(Error::NotFound));
                }
                self.engine
                    .release(t, ClientId(c.into()), id, pri, delay)
                    .map_err(|e| format!("release failed: {e}"))?;
                let job = self.jobs.get_mut(&id).expect("owned");
                job.pri = pri;
                job.state = if delay == 0 {
                    S::Ready
                } else {
                    S::Delayed { until: t + delay }
                };
                job.hist.releases += 1;
                job.hist.delay = delay;
                job.store();
                self.events()?;
            }
            QueueOp::Bury(c, pick, pri) => {
                let c = c % CLIENTS;
                let id = self.job_id(pick);
                if !self.owned_by(c, id)? {
                    let got = self.engine.bury(t, ClientId(c.into()), id, pri);
                    return expect_eq("bury", got, Err(Error::NotFound));
                }
                self.engine
                    .bury(t, ClientId(c.into()), id, pri)
                    .map_err(|e| format!("bury failed: {e}"))?;
                self.seq += 1;
                let job = self.jobs.get_mut(&id).expect("owned");
                job.pri = pri;
                job.state = S::Buried { seq: self.seq };
                job.hist.buries += 1;
                job.store();
            }
            QueueOp::Touch(c, pick) => {
                let c = c % CLIENTS;
                let id = self.job_id(pick);
                let owned = self.owned_by(c, id)?;
                let got = self.engine.touch(t, ClientId(c.into()), id);
                expect_eq(
                    "touch",
                    got,
                    if owned { Ok(()) } else { Err(Error::NotFound) },
                )?;
                if owned {
                    let job = self.jobs.get_mut(&id).expect("owned");
                    job.state = S::Reserved {
                        owner: c,
                        deadline: t + job.ttr,
                    };
                }
            }
            QueueOp::Kick(c, bound) => {
                let c = c % CLIENTS;
                let Some(client) = self.clients.get(&c) else {
                    return Ok(());
                };
                if client.waiting.is_some() {
                    return Ok(());
                }
                let tube = client.used;
                self.widen_for(c, bound.min(1000), true);
                let mut buried: Vec<(u64, JobId)> = Vec::new();
                let mut delayed: Vec<(u64, JobId)> = Vec::new();
                for (&id, job) in self.jobs.iter().filter(|(_, j)| j.tube == tube) {
                    match job.at(t) {
                        S::Buried { seq } => buried.push((seq, id)),
                        S::Delayed { until } => delayed.push((until, id)),
                        _ => {}
                    }
                }
                buried.sort_unstable();
                delayed.sort_unstable();
                let from = if buried.is_empty() { delayed } else { buried };
                let kicked: Vec<JobId> = from
                    .into_iter()
                    .take(bound.min(1000) as usize)
                    .map(|(_, id)| id)
                    .collect();
                let got = self
                    .engine
                    .kick(t, ClientId(c.into()), bound.min(1000))
                    .map_err(|e| format!("kick: {e}"))?;
                expect_eq("kicked", got, kicked.len() as u64)?;
                // Each kicked job is served before the next is kicked (as beanstalkd).
                self.events_one_by_one(&kicked, SJob::kick)?;
            }
            QueueOp::KickJob(pick) => {
                let id = self.job_id(pick);
                self.load_by_id(id);
                let ok = self
                    .jobs
                    .get(&id)
                    .is_some_and(|j| matches!(j.at(t), S::Buried { .. } | S::Delayed { .. }));
                let got = self.engine.kick_job(t, id);
                expect_eq(
                    "kick-job",
                    got,
                    if ok { Ok(()) } else { Err(Error::NotFound) },
                )?;
                if ok {
                    self.jobs.get_mut(&id).expect("kicked job").kick();
                }
                self.events()?;
            }
            QueueOp::Peek(pick) => {
                let id = self.job_id(pick);
                self.load_by_id(id);
                let got = self.engine.peek(t, id).ok().map(|v| (v.id, v.body.len()));
                expect_eq("peek", got, self.jobs.get(&id).map(|j| (id, j.len)))?;
            }
            QueueOp::PeekState(c, which) => {
                let c = c % CLIENTS;
                let Some(client) = self.clients.get(&c) else {
                    return Ok(());
                };
                let tube = client.used;
                let state =
                    [JobState::Ready, JobState::Delayed, JobState::Buried][usize::from(which) % 3];
                if state == JobState::Delayed {
                    self.widen_for(c, 1, false);
                }
                let mut candidates: Vec<(u64, u64, JobId)> = Vec::new();
                for (&id, job) in self.jobs.iter().filter(|(_, j)| j.tube == tube) {
                    match (state, job.at(t)) {
                        (JobState::Ready, S::Ready) => candidates.push((job.pri.into(), id, id)),
                        (JobState::Delayed, S::Delayed { until }) => {
                            candidates.push((until, id, id))
                        }
                        (JobState::Buried, S::Buried { seq }) => candidates.push((seq, 0, id)),
                        _ => {}
                    }
                }
                let want = candidates.into_iter().min().map(|(_, _, id)| id);
                let got = self
                    .engine
                    .peek_state(t, ClientId(c.into()), state)
                    .ok()
                    .map(|v| v.id);
                expect_eq("peek by state", got, want)?;
            }
            QueueOp::Pause(tube, delay) => {
                let tube = usize::from(tube) % TUBES.len();
                let exists = self.tube_exists(tube);
                let got = self.engine.pause_tube(t, &tube_name(tube), delay);
                expect_eq(
                    "pause-tube",
                    got,
                    if exists { Ok(()) } else { Err(Error::NotFound) },
                )?;
                if exists {
                    self.paused[tube] = t + delay;
                }
            }
            QueueOp::Advance(dt) => {
                let target = t + dt;
                loop {
                    // The next instant: a timer, or the start of an in-flight window load.
                    let pending = self.pending_load.as_ref().map(|(from, _)| *from);
                    let next = match (self.engine.next_deadline(), pending) {
                        (Some(a), Some(b)) => a.min(b),
                        (a, b) => match a.or(b) {
                            Some(n) => n,
                            None => break,
                        },
                    };
                    if next > target {
                        break;
                    }
                    self.t = next;
                    self.move_window()?;
                    self.engine.advance(next);
                    self.events()?;
                    self.check_all()?;
                }
                self.t = target;
                self.engine.advance(target);
                self.events()?;
            }
            QueueOp::Restart => {
                self.persist()?;
                self.pending_load = None; // the load died with the process
                let window_end = self.config.window_end_at(t);
                let mut far: BTreeMap<TubeName, u64> = BTreeMap::new();
                let mut records = Vec::new();
                for record in self.durable.values() {
                    match record.state {
                        DurableState::Delayed { until } if until >= window_end => {
                            *far.entry(record.tube.clone()).or_default() += 1;
                        }
                        _ => records.push(record.clone()),
                    }
                }
                self.engine = Engine::recover_windowed(
                    self.config.clone(),
                    t,
                    self.ids_end,
                    records,
                    far.into_iter().collect(),
                );
                self.clients.clear();
                self.paused = [0; 3];
                for job in self.jobs.values_mut() {
                    job.state = job.durable_at(t);
                    job.kept = None;
                    job.hist = job.stored;
                    if matches!(job.state, S::Buried { .. }) {
                        job.hist.buries += 1; // beanstalkd's replay buries it again
                    }
                }
                // Buried order after a restart is id order.
                let buried: Vec<JobId> = self
                    .jobs
                    .iter()
                    .filter(|(_, j)| matches!(j.state, S::Buried { .. }))
                    .map(|(&id, _)| id)
                    .collect();
                for id in buried {
                    self.seq += 1;
                    self.jobs.get_mut(&id).expect("buried job").state = S::Buried { seq: self.seq };
                }
            }
        }
        Ok(())
    }

    /// Plays the server: moves the engine's memory window when it asks, from the durable
    /// model (which holds every change taken so far).
    fn move_window(&mut self) -> Result<(), String> {
        self.persist()?;
        if let Some((_, records)) = self.pending_load.take() {
            self.engine.load_window(records);
        }
        while let Some((from, to)) = self.engine.window_load(self.t) {
            self.loads += 1;
            let records = self.records_between(from, to);
            if self.loads.is_multiple_of(2) {
                // Leave every other load in flight until the next step or instant.
                self.pending_load = Some((from, records));
                break;
            }
            self.engine.load_window(records);
        }
        Ok(())
    }

    fn records_between(&self, from: u64, to: u64) -> Vec<JobRecord> {
        self.durable
            .values()
            .filter(|r| matches!(r.state, DurableState::Delayed { until } if until >= from && until < to))
            .cloned()
            .collect()
    }

    fn load_range(&mut self, from: u64, to: u64) {
        let records = self.records_between(from, to);
        self.engine.load_window(records);
    }

    /// The client (if connected and not blocked in a reserve) and the job a command names,
    /// with the job brought into memory as a server would.
    fn idle_client_and_job(&mut self, c: u8, pick: u64) -> Option<(u8, JobId)> {
        let c = c % CLIENTS;
        if self.clients.get(&c)?.waiting.is_some() {
            return None;
        }
        let id = self.job_id(pick);
        self.load_by_id(id);
        Some((c, id))
    }

    /// Plays the server before a command on a job id: a far job is read from the store.
    fn load_by_id(&mut self, id: JobId) {
        if self.engine.needs_load(id) {
            self.engine.load_job(id, self.durable.get(&id).cloned());
        }
    }

    /// Plays the server before `peek-delayed` / `kick`: widen the window until the tube's
    /// earliest delayed jobs are in memory.
    fn widen_for(&mut self, c: u8, wanted: u64, kick: bool) {
        if let Some((_, records)) = self.pending_load.take() {
            self.engine.load_window(records);
        }
        while self
            .engine
            .needs_far_for_tube(ClientId(c.into()), wanted, kick)
        {
            match self.engine.widen_window() {
                Some((from, to)) => self.load_range(from, to),
                None => break,
            }
        }
    }

    /// Is `id` reserved by `c` now? Also the answer the engine must give to release etc.
    fn owned_by(&self, c: u8, id: JobId) -> Result<bool, String> {
        Ok(self.clients.contains_key(&c)
            && self
                .jobs
                .get(&id)
                .is_some_and(|j| matches!(j.at(self.t), S::Reserved { owner, .. } if owner == c)))
    }

    /// The job a reserve by `c` must get now, if any.
    fn best_for(&self, c: u8) -> Option<JobId> {
        let client = self.clients.get(&c)?;
        self.jobs
            .iter()
            .filter(|(_, j)| client.watched.contains(&j.tube) && self.paused[j.tube] <= self.t)
            .filter(|(_, j)| j.at(self.t) == S::Ready)
            .map(|(&id, j)| (j.pri, id))
            .min()
            .map(|(_, id)| id)
    }

    fn holds_job_in_margin(&self, c: u8) -> bool {
        self.jobs.values().any(|j| {
            matches!(j.at(self.t), S::Reserved { owner, deadline } if owner == c && deadline - SAFETY_MARGIN_MS.min(deadline) <= self.t)
        })
    }

    fn hand_out(&mut self, c: u8, id: JobId, len: usize) -> Result<(), String> {
        let t = self.t;
        let job = self
            .jobs
            .get_mut(&id)
            .ok_or_else(|| format!("handed out unknown job {id}"))?;
        if !matches!(job.at(t), S::Reserved { .. }) {
            expect_eq("body length", len, job.len)?;
            job.state = S::Reserved {
                owner: c,
                deadline: t + job.ttr,
            };
            job.hist.reserves += 1;
            self.handed_out += 1;
            job.rseq = self.handed_out;
            Ok(())
        } else {
            Err(format!("job {id} handed out while {:?}", job.at(t)))
        }
    }

    /// Checks the events of this instant and applies them to the shadow.
    fn events(&mut self) -> Result<(), String> {
        for event in self.engine.take_events() {
            self.event(event)?;
        }
        Ok(())
    }

    /// Checks the events of an operation that makes the jobs of `order` ready one at a time
    /// and serves waiting clients after each (a kick, a hang-up), applying `ready` to each job
    /// as it comes back: a waiter must be served as soon as a job it may take is back, with
    /// the most urgent of those back so far, before the next comes back.
    fn events_one_by_one(&mut self, order: &[JobId], ready: fn(&mut SJob)) -> Result<(), String> {
        let mut back = 0;
        for event in self.engine.take_events() {
            if matches!(event, Event::Reserved { .. }) {
                while !self.a_waiter_can_be_served() {
                    let Some(id) = order.get(back) else {
                        return Err(format!("{event:?} with no job back for it"));
                    };
                    ready(self.jobs.get_mut(id).expect("a job coming back"));
                    back += 1;
                }
            }
            self.event(event)?;
        }
        for id in &order[back..] {
            ready(self.jobs.get_mut(id).expect("a job coming back"));
        }
        Ok(())
    }

    fn a_waiter_can_be_served(&self) -> bool {
        self.clients
            .iter()
            .any(|(&c, s)| s.waiting.is_some() && self.best_for(c).is_some())
    }

    /// Checks one event and applies it to the shadow.
    fn event(&mut self, event: Event) -> Result<(), String> {
        {
            match event {
                Event::Reserved { client, job } => {
                    let c = client.0 as u8;
                    if self.clients.get(&c).and_then(|s| s.waiting).is_none() {
                        return Err(format!(
                            "{event:?} for a client not waiting",
                            event = Event::Reserved { client, job }
                        ));
                    }
                    expect_eq("job given to a waiter", Some(job.id), self.best_for(c))?;
                    self.hand_out(c, job.id, job.body.len())?;
                    self.clients.get_mut(&c).expect("waiting").waiting = None;
                }
                Event::TimedOut { client } => {
                    let c = client.0 as u8;
                    let deadline = self.clients.get(&c).and_then(|s| s.waiting).flatten();
                    expect_eq("timeout instant", deadline, Some(self.t))?;
                    self.clients.get_mut(&c).expect("waiting").waiting = None;
                }
                Event::DeadlineSoon { client } => {
                    let c = client.0 as u8;
                    if self.clients.get(&c).and_then(|s| s.waiting).is_none()
                        || !self.holds_job_in_margin(c)
                    {
                        return Err(format!(
                            "DEADLINE_SOON to client {c} not waiting or without a job in margin"
                        ));
                    }
                    self.clients.get_mut(&c).expect("waiting").waiting = None;
                }
            }
        }
        Ok(())
    }

    /// Applies the engine's changes to the durable model.
    fn persist(&mut self) -> Result<(), String> {
        for change in self.engine.take_changes() {
            match change {
                Change::Put(record) => {
                    if record.id >= self.ids_end {
                        return Err(format!(
                            "job {} put beyond the persisted ids {}",
                            record.id, self.ids_end
                        ));
                    }
                    self.durable.insert(record.id, record);
                }
                Change::Update {
                    id,
                    state,
                    priority,
                    history,
                } => {
                    self.durable
                        .get_mut(&id)
                        .ok_or_else(|| format!("update of unknown job {id}"))?
                        .update(state, priority, history);
                }
                Change::Delete { id } => {
                    self.durable
                        .remove(&id)
                        .ok_or_else(|| format!("delete of unknown job {id}"))?;
                }
                Change::ReserveIds { end } => self.ids_end = self.ids_end.max(end),
            }
        }
        Ok(())
    }

    /// A tube nobody refers to is gone, and its pause with it (as in beanstalkd).
    fn forget_dropped_tubes(&mut self) {
        for tube in 0..TUBES.len() {
            if !self.tube_exists(tube) {
                self.paused[tube] = 0;
            }
        }
    }

    fn tube_exists(&self, tube: usize) -> bool {
        tube == 0
            || self.jobs.values().any(|j| j.tube == tube)
            || self
                .clients
                .values()
                .any(|c| c.used == tube || c.watched.contains(&tube))
    }

    fn check_all(&self) -> Result<(), String> {
        let t = self.t;
        expect_eq("job count", self.engine.job_count(), self.jobs.len())?;
        let mut counts = [0u64; 4];
        for (&id, job) in &self.jobs {
            let want = match job.at(t) {
                S::Ready => JobState::Ready,
                S::Delayed { .. } => JobState::Delayed,
                S::Reserved { .. } => JobState::Reserved,
                S::Buried { .. } => JobState::Buried,
            };
            counts[want as usize] += 1;
            if self.engine.needs_load(id) {
                // Far: only in the store. It must be a delayed job beyond the window (or in
                // the range of a load in flight).
                let far_from = self
                    .pending_load
                    .as_ref()
                    .map_or(self.engine.window_end(), |(from, _)| *from);
                match job.at(t) {
                    S::Delayed { until } if until >= far_from => continue,
                    other => return Err(format!("job {id} is not in memory but is {other:?}")),
                }
            }
            let stats = self
                .engine
                .job_stats(id)
                .ok_or_else(|| format!("job {id} lost"))?;
            expect_eq(&format!("state of job {id}"), stats.state, want)?;
            expect_eq(&format!("priority of job {id}"), stats.priority, job.pri)?;
            expect_eq(
                &format!("tube of job {id}"),
                stats.tube.as_str(),
                TUBES[job.tube],
            )?;
            expect_eq(
                &format!("delay, reserves, releases, buries, kicks of job {id}"),
                (
                    stats.delay,
                    stats.reserves,
                    stats.releases,
                    stats.buries,
                    stats.kicks,
                ),
                counters(&job.hist),
            )?;
            // The durable record agrees, once the changes are persisted.
            let record = self
                .durable
                .get(&id)
                .ok_or_else(|| format!("job {id} not persisted"))?;
            // What a restart now would make of the record: an overdue delay is ready.
            let recovered = match record.state {
                DurableState::Delayed { until } if until <= t => DurableState::Ready,
                s => s,
            };
            let durable_ok = match (job.durable_at(t), recovered) {
                (S::Ready, DurableState::Ready) | (S::Buried { .. }, DurableState::Buried) => true,
                (S::Delayed { until }, DurableState::Delayed { until: u }) => until == u,
                _ => false,
            };
            if !durable_ok {
                return Err(format!(
                    "job {id}: durable {:?} vs shadow {:?}",
                    record.state, job.state
                ));
            }
            expect_eq(
                &format!("stored delay and counters of job {id}"),
                counters(&record.history),
                counters(&job.stored),
            )?;
        }
        if self.durable.len() != self.jobs.len() {
            return Err(format!(
                "{} durable jobs vs {} live",
                self.durable.len(),
                self.jobs.len()
            ));
        }
        let stats = self.engine.stats();
        expect_eq(
            "stats ready/delayed/reserved/buried",
            [stats.ready, stats.delayed, stats.reserved, stats.buried],
            [
                counts[JobState::Ready as usize],
                counts[JobState::Delayed as usize],
                counts[JobState::Reserved as usize],
                counts[JobState::Buried as usize],
            ],
        )?;
        // Nobody waits while a job is there for it.
        for (&c, client) in &self.clients {
            if let Some(timeout) = client.waiting {
                if let Some(id) = self.best_for(c) {
                    return Err(format!("client {c} waits while job {id} is ready"));
                }
                if timeout.is_some_and(|d| d <= t) {
                    return Err(format!("client {c} still waits past its timeout"));
                }
                if self.holds_job_in_margin(c) {
                    return Err(format!("client {c} waits holding a job in its last second"));
                }
            }
        }
        Ok(())
    }
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: engine {got:?}, rules {want:?}"))
    }
}

/// Decodes arbitrary bytes into operations, for fuzzing: every input is valid.
#[must_use]
pub fn decode_queue_ops(bytes: &[u8]) -> Vec<QueueOp> {
    let mut it = bytes.iter().copied();
    let mut next = move || it.next();
    let mut ops = Vec::new();
    while let Some(tag) = next() {
        let a = next().unwrap_or(0);
        let b = next().unwrap_or(0);
        let small = |x: u8| u64::from(x) * 50;
        let op = match tag % 20 {
            0 => QueueOp::Connect(a),
            1 => QueueOp::Disconnect(a),
            2 => QueueOp::Use(a, b),
            3 => QueueOp::Watch(a, b),
            4 => QueueOp::Ignore(a, b),
            5 | 6 => QueueOp::Put {
                c: a,
                pri: u32::from(b % 4) * 600,
                delay: if b & 0x80 != 0 { small(b & 0x7f) } else { 0 },
                ttr: 1000 + small(a & 0x3f) * 4,
                len: b,
            },
            7 | 8 => QueueOp::Reserve(
                a,
                match b % 3 {
                    0 => None,
                    1 => Some(0),
                    _ => Some(small(b)),
                },
            ),
            9 => QueueOp::ReserveJob(a, u64::from(b)),
            10 => QueueOp::Delete(a, u64::from(b)),
            11 => QueueOp::Release(
                a,
                u64::from(b),
                u32::from(a) * 300,
                if a & 1 == 0 { 0 } else { small(b) },
            ),
            12 => QueueOp::Bury(a, u64::from(b), u32::from(a)),
            13 => QueueOp::Touch(a, u64::from(b)),
            14 => QueueOp::Kick(a, u64::from(b % 5)),
            15 => QueueOp::KickJob(u64::from(b)),
            16 => {
                if a & 1 == 0 {
                    QueueOp::Peek(u64::from(b))
                } else {
                    QueueOp::PeekState(a, b)
                }
            }
            17 => QueueOp::Pause(a, small(b)),
            18 => QueueOp::Advance(small(a) + u64::from(b)),
            _ => {
                if a % 8 == 0 {
                    QueueOp::Restart
                } else {
                    QueueOp::Advance(u64::from(a))
                }
            }
        };
        ops.push(op);
    }
    ops
}
