//! [`Engine`]: the job state machine.

use std::collections::{BTreeMap, HashMap};

use rustc_hash::FxHashMap;
use std::mem;

use bytes::Bytes;
use tickwheel_core::{TimerKey, Wheel};

use crate::stats::{CmdCounters, JobStats, Stats, TubeStats};
use crate::tube::{Pause, Tube, TubeId};

mod clients;
mod foreign;
mod inspect;
mod producer;
mod state;
pub use foreign::FOREIGN_ID_BASE;
mod timeline;
pub use timeline::{MAX_TIMELINE_HOURS, TIMELINE_FINE_BUCKETS};
mod tubes;
mod window;
mod worker;

use crate::types::{
    Change, ClientId, DurableState, Error, Event, JobDetail, JobHistory, JobId, JobRecord,
    JobState, JobView, Load, Millis, NewJob, Reserve, TubeName, SAFETY_MARGIN_MS,
};

/// How many ids one [`Change::ReserveIds`] allocates: ids are persisted in blocks so that a
/// put costs no extra write.
const ID_BLOCK: JobId = 4096;

/// Engine settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The largest job body accepted, in bytes (beanstalkd's `-z`; default 65 535).
    pub max_job_size: usize,
    /// Keep in memory only the delayed jobs due within this many ms; later ones ("far" jobs)
    /// live only in the store and are loaded as their time approaches (see
    /// [`Engine::window_load`]). `None` (the default) keeps every job in memory.
    pub window: Option<Millis>,
    /// Whether a `reserve-job` of a delayed or buried job writes the job as ready
    /// ([`Change::Update`]) before the reserve. `false` (the default) is beanstalkd's way: a
    /// reservation is not stored, so after a crash the job comes back as its last write left it
    /// (delayed until its old time, or buried). `true` for a store shared by nodes that claim
    /// jobs in it (PostgreSQL, several nodes serving at once), where the claim of a reserve
    /// takes only a job the store holds ready.
    pub write_reserve_job: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_job_size: 65_535,
            window: None,
            write_reserve_job: false,
        }
    }
}

impl Config {
    /// Where an engine started at `now` puts its window end: delayed jobs due at or after it
    /// stay in the store (`Millis::MAX` without a window).
    #[must_use]
    pub fn window_end_at(&self, now: Millis) -> Millis {
        self.window.map_or(Millis::MAX, |w| now.saturating_add(w))
    }
}

/// What a wheel timer stands for.
#[derive(Clone, Copy, Debug)]
enum Timer {
    /// A job's delay ended, or its reservation reached the safety margin or its end.
    Job(JobId),
    /// A client's `reserve-with-timeout` ran out (the `u64` tells waits apart).
    Wait(ClientId, u64),
    /// A tube's pause ended.
    Unpause(TubeId),
}

struct Job {
    tube: TubeId,
    priority: u32,
    ttr: Millis,
    /// The delay given at put or the last release and the counters (for `stats-job`; stored
    /// with each durable change).
    history: JobHistory,
    created: Millis,
    state: JobState,
    /// Delayed: when it becomes ready. Reserved: when the reservation expires.
    deadline: Millis,
    owner: Option<ClientId>,
    timer: Option<TimerKey>,
    /// Reserved: the safety-margin warning has been handled.
    warned: bool,
    /// Where it stands in its state's order, from `Engine::seq`: buried, its place in the
    /// tube's bury order; reserved, in its owner's order of reservations (the order in which a
    /// hang-up returns the owner's jobs, as beanstalkd's list of a connection's jobs).
    state_seq: u64,
    body: Bytes,
    /// The idempotency key (its entry in `Engine::keys` lives as long as the job).
    key: Option<String>,
}

impl Job {
    fn new(
        tube: TubeId,
        priority: u32,
        ttr: Millis,
        history: JobHistory,
        created: Millis,
        body: Bytes,
    ) -> Job {
        Job {
            tube,
            priority,
            ttr,
            history,
            created,
            state: JobState::Ready,
            deadline: 0,
            owner: None,
            timer: None,
            warned: false,
            state_seq: 0,
            body,
            key: None,
        }
    }

    /// A job read back from the store (its key, if any, still to be registered), ready to
    /// enter its state; a creation time after `now` is clamped to it.
    fn restored(tube: TubeId, record: &JobRecord, now: Millis) -> Job {
        Job::new(
            tube,
            record.priority,
            record.ttr,
            record.history,
            record.created.min(now),
            record.body.clone(),
        )
    }
}

struct Client {
    used: TubeId,
    watched: Vec<TubeId>,
    /// The jobs it holds, by `Job::state_seq`: in the order it reserved them.
    reserved: BTreeMap<u64, JobId>,
    /// How many of `reserved` are in their safety margin (`Job::warned`): `reserve` answers
    /// `DEADLINE_SOON` from this count, without visiting every job the client holds.
    warned: usize,
    waiting: Option<Wait>,
    producer: bool,
    worker: bool,
}

#[derive(Clone, Copy)]
struct Wait {
    seq: u64,
    timer: Option<TimerKey>,
}

/// The job engine: beanstalkd's job model as a deterministic state machine.
///
/// See the [crate documentation](crate) for the model and how a server drives it.
pub struct Engine {
    config: Config,
    wheel: Wheel<Timer>,
    /// Every job in memory, by id. A B-tree, not a hash map: a hash map doubles its table
    /// in one insert, and at 114 688 jobs that rehash moved ~20 MB under the engine lock (a
    /// 22 MB `munmap` of the old table; under `strace` the commit path's two longest idle gaps
    /// of a pipelined run, 138 and 150 ms, ended right after it; see
    /// `docs/decisions/0016-ack-tail-and-commit-cpu.md`). A B-tree grows one node at a time;
    /// ids are handed out in order, so inserts go to its right edge.
    jobs: BTreeMap<JobId, Job>,
    tubes: Vec<Option<Tube>>,
    tube_ids: HashMap<TubeName, TubeId>,
    free_tubes: Vec<TubeId>,
    /// The existing tubes in `list-tubes` order, kept as beanstalkd keeps its tube list: a
    /// new tube goes last, and a dropped tube's place is taken by the last one.
    tube_order: Vec<TubeId>,
    /// Keyed by server-made ids: FxHash, not SipHash (no attacker picks the keys).
    clients: FxHashMap<ClientId, Client>,
    next_id: JobId,
    ids_end: JobId,
    seq: u64,
    draining: bool,
    events: Vec<Event>,
    changes: Vec<Change>,
    /// Tubes that got ready jobs: their waiters are served when the operation completes.
    to_serve: Vec<TubeId>,
    pub(crate) cmd: CmdCounters,
    total_jobs: u64,
    job_timeouts: u64,
    total_connections: u64,
    /// Delayed jobs due at or after this are not in memory ("far").
    window_end: Millis,
    /// Number of far jobs.
    far: u64,
    /// A window load handed out by [`Engine::window_load`] and not yet completed.
    loading: Option<window::Loading>,
    /// A load the caller has done (or given up on): the next operation that would ask for it
    /// runs on what is in memory instead.
    loaded: Option<Load>,
    /// `(tube, idempotency key)` of every live keyed job, in memory or far.
    keys: HashMap<(TubeName, String), JobId>,
    /// Lateness (ms past the due time) of each delayed job that became ready, since the last
    /// [`Engine::take_lateness`].
    lateness: Vec<Millis>,
}

impl Engine {
    /// An empty engine whose clock reads `now`; job ids start at 1.
    #[must_use]
    pub fn new(config: Config, now: Millis) -> Engine {
        let mut engine = Engine {
            config,
            wheel: Wheel::starting_at(now),
            jobs: BTreeMap::new(),
            tubes: Vec::new(),
            tube_ids: HashMap::new(),
            free_tubes: Vec::new(),
            tube_order: Vec::new(),
            clients: FxHashMap::default(),
            next_id: 1,
            ids_end: 1,
            seq: 0,
            draining: false,
            events: Vec::new(),
            changes: Vec::new(),
            to_serve: Vec::new(),
            cmd: CmdCounters::default(),
            total_jobs: 0,
            job_timeouts: 0,
            total_connections: 0,
            window_end: Millis::MAX,
            far: 0,
            loading: None,
            loaded: None,
            keys: HashMap::new(),
            lateness: Vec::new(),
        };
        engine.window_end = engine.config.window_end_at(now);
        engine.tube_ref(&TubeName::default_tube());
        engine
    }

    /// Rebuilds an engine from persisted jobs (after a restart). Jobs whose delay passed
    /// while the server was down are ready at once; ids continue from `next_id`.
    #[must_use]
    pub fn recover(
        config: Config,
        now: Millis,
        next_id: JobId,
        records: impl IntoIterator<Item = JobRecord>,
    ) -> Engine {
        Engine::recover_windowed(config, now, next_id, records, Vec::new())
    }

    /// Like [`recover`](Self::recover) with a memory window: `records` are the stored jobs
    /// except the delayed ones due at or after [`Config::window_end_at`]`(now)`, and `far`
    /// counts those per tube.
    #[must_use]
    pub fn recover_windowed(
        config: Config,
        now: Millis,
        next_id: JobId,
        records: impl IntoIterator<Item = JobRecord>,
        far: Vec<(TubeName, u64)>,
    ) -> Engine {
        let mut engine = Engine::new(config, now);
        for (name, count) in far {
            let tube = engine.tube_ref(&name);
            engine.add_far_many(tube, count);
        }
        let mut records: Vec<JobRecord> = records.into_iter().collect();
        records.sort_by_key(|r| r.id); // buried jobs keep their id order
        let mut max_id = 0;
        for record in records {
            if record.id < FOREIGN_ID_BASE {
                max_id = max_id.max(record.id);
            }
            let tube = engine.tube_ref(&record.tube);
            let mut job = Job::restored(tube, &record, now);
            if let Some(key) = record.idempotency_key {
                engine
                    .keys
                    .insert((record.tube.clone(), key.clone()), record.id);
                job.key = Some(key);
            }
            engine.add_job(record.id, job);
            match record.state {
                DurableState::Ready => engine.enter_ready(record.id),
                DurableState::Buried => {
                    // beanstalkd's replay buries each buried job again, counting one more
                    // bury at every start (in memory: nothing is written); `stats-job`
                    // answers the same here.
                    engine.job_mut(record.id).history.buries += 1;
                    engine.enter_buried(record.id);
                }
                DurableState::Delayed { until } if until <= now => engine.enter_ready(record.id),
                DurableState::Delayed { until } => engine.enter_delayed(record.id, until),
            }
        }
        engine.to_serve.clear(); // nobody is waiting yet

        // `total-jobs` counts the puts of this process, as in beanstalkd: not recovered jobs.
        engine.total_jobs = 0;
        for tube in engine.tubes.iter_mut().flatten() {
            tube.total_jobs = 0;
        }
        engine.next_id = next_id.max(max_id + 1);
        engine.ids_end = engine.next_id;
        engine
    }

    /// The engine's clock.
    #[must_use]
    pub fn now(&self) -> Millis {
        self.wheel.now()
    }

    /// When [`advance`](Self::advance) next has something to do, if ever: the earliest delay
    /// end, reservation warning or expiry, reserve timeout or tube unpause.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Millis> {
        let timers = self.wheel.next_deadline();
        match self.window_refresh_at() {
            Some(refresh) => Some(timers.map_or(refresh, |t| t.min(refresh))),
            None => timers,
        }
    }

    /// Moves the clock to `now` and carries out everything due: delayed jobs become ready,
    /// expired reservations return to ready, waiting reserves time out or get jobs. Every
    /// operation calls it first, so a driver only needs it for timers.
    pub fn advance(&mut self, now: Millis) {
        self.slide_window(now);
        // Everything due at one instant happens before any waiter is served, so a waiter
        // gets the most urgent of all the jobs that became ready at that instant.
        while let Some((_, timer)) = self.wheel.poll(now) {
            match timer {
                Timer::Job(id) => self.job_timer(id),
                Timer::Wait(client, seq) => {
                    let waiting = self.clients.get(&client).and_then(|c| c.waiting);
                    if waiting.map(|w| w.seq) == Some(seq) {
                        self.end_wait(client);
                        self.events.push(Event::TimedOut { client });
                    }
                }
                Timer::Unpause(tube) => {
                    if let Some(t) = self.tubes[tube as usize].as_mut() {
                        t.paused = None;
                        t.pause = 0; // beanstalkd reports `pause: 0` once a pause is over
                        self.to_serve.push(tube);
                    }
                }
            }
            if self.wheel.next_deadline() != Some(self.wheel.now()) {
                self.serve_deferred();
            }
        }
        self.serve_deferred();
    }

    /// Serves the waiters of the tubes that got ready jobs (or unpaused) at this instant.
    pub(super) fn serve_deferred(&mut self) {
        if self.to_serve.is_empty() {
            return;
        }
        let mut candidates = mem::take(&mut self.to_serve);
        candidates.sort_unstable();
        candidates.dedup();
        self.serve_waiters(&candidates);
        for &tube in &candidates {
            if self.tubes[tube as usize].is_some() {
                self.drop_if_unused(tube);
            }
        }
        // Serving pushes no tube (a reservation makes nothing ready); keep the buffer.
        debug_assert!(self.to_serve.is_empty());
        candidates.clear();
        self.to_serve = candidates;
    }

    /// Replies owed to waiting clients, in the order they happened.
    pub fn take_events(&mut self) -> Vec<Event> {
        mem::take(&mut self.events)
    }

    /// The configuration the engine was made with.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The durable changes made since the last call, in order. A server persists them (one
    /// group commit) before sending the replies of the operations that made them.
    pub fn take_changes(&mut self) -> Vec<Change> {
        mem::take(&mut self.changes)
    }

    /// How late (ms past their due time) the delayed jobs that became ready since the last
    /// call were, by the clock handed to [`advance`](Self::advance). A server feeds these to
    /// its lateness histogram. Jobs found overdue at recovery are not included.
    pub fn take_lateness(&mut self) -> Vec<Millis> {
        mem::take(&mut self.lateness)
    }

    /// Puts the server in drain mode: `put` fails with [`Error::Draining`] from now on.
    pub fn set_draining(&mut self, draining: bool) {
        self.draining = draining;
    }

    /// `true` in drain mode.
    #[must_use]
    pub fn draining(&self) -> bool {
        self.draining
    }
}
