//! [`Engine`]: the job state machine.

use std::collections::{BTreeSet, HashMap};
use std::mem;

use bytes::Bytes;
use tickwheel_core::{TimerKey, Wheel};

use crate::stats::{CmdCounters, JobStats, Stats, TubeStats};
use crate::tube::{Pause, Tube, TubeId};
mod window;

use crate::types::{
    Change, ClientId, DurableState, Error, Event, JobId, JobRecord, JobState, JobView, Millis,
    Reserve, TubeName, SAFETY_MARGIN_MS,
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_job_size: 65_535,
            window: None,
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
    /// The delay given at put or the last release (for `stats-job`).
    delay: Millis,
    created: Millis,
    state: JobState,
    /// Delayed: when it becomes ready. Reserved: when the reservation expires.
    deadline: Millis,
    owner: Option<ClientId>,
    timer: Option<TimerKey>,
    /// Reserved: the safety-margin warning has been handled.
    warned: bool,
    bury_seq: u64,
    reserves: u32,
    timeouts: u32,
    releases: u32,
    buries: u32,
    kicks: u32,
    body: Bytes,
}

impl Job {
    fn new(
        tube: TubeId,
        priority: u32,
        ttr: Millis,
        delay: Millis,
        created: Millis,
        body: Bytes,
    ) -> Job {
        Job {
            tube,
            priority,
            ttr,
            delay,
            created,
            state: JobState::Ready,
            deadline: 0,
            owner: None,
            timer: None,
            warned: false,
            bury_seq: 0,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
            body,
        }
    }
}

struct Client {
    used: TubeId,
    watched: Vec<TubeId>,
    reserved: BTreeSet<JobId>,
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
    jobs: HashMap<JobId, Job>,
    tubes: Vec<Option<Tube>>,
    tube_ids: HashMap<TubeName, TubeId>,
    free_tubes: Vec<TubeId>,
    clients: HashMap<ClientId, Client>,
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
}

impl Engine {
    /// An empty engine whose clock reads `now`; job ids start at 1.
    #[must_use]
    pub fn new(config: Config, now: Millis) -> Engine {
        let mut engine = Engine {
            config,
            wheel: Wheel::starting_at(now),
            jobs: HashMap::new(),
            tubes: Vec::new(),
            tube_ids: HashMap::new(),
            free_tubes: Vec::new(),
            clients: HashMap::new(),
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
            engine.tube_mut(tube).total_jobs += count;
            engine.total_jobs += count;
        }
        let mut records: Vec<JobRecord> = records.into_iter().collect();
        records.sort_by_key(|r| r.id); // buried jobs keep their id order
        let mut max_id = 0;
        for record in records {
            max_id = max_id.max(record.id);
            let tube = engine.tube_ref(&record.tube);
            let created = record.created.min(now);
            let job = Job::new(tube, record.priority, record.ttr, 0, created, record.body);
            engine.add_job(record.id, job);
            match record.state {
                DurableState::Ready => engine.enter_ready(record.id),
                DurableState::Buried => engine.enter_buried(record.id),
                DurableState::Delayed { until } if until <= now => engine.enter_ready(record.id),
                DurableState::Delayed { until } => {
                    engine.job_mut(record.id).delay = until - now;
                    engine.enter_delayed(record.id, until);
                }
            }
        }
        engine.to_serve.clear(); // nobody is waiting yet
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
    fn serve_deferred(&mut self) {
        while let Some(tube) = self.to_serve.pop() {
            if self.tubes[tube as usize].is_some() {
                self.serve_waiters(tube);
                self.drop_if_unused(tube);
            }
        }
    }

    /// Replies owed to waiting clients, in the order they happened.
    pub fn take_events(&mut self) -> Vec<Event> {
        mem::take(&mut self.events)
    }

    /// The durable changes made since the last call, in order. A server persists them (one
    /// group commit) before sending the replies of the operations that made them.
    pub fn take_changes(&mut self) -> Vec<Change> {
        mem::take(&mut self.changes)
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

    // ----- connections -----

    /// A new connection: it uses and watches `default`.
    pub fn connect(&mut self, client: ClientId) {
        let default = self.tube_ref(&TubeName::default_tube());
        let tube = self.tube_mut(default);
        tube.using += 1;
        tube.watching += 1;
        self.total_connections += 1;
        self.clients.insert(
            client,
            Client {
                used: default,
                watched: vec![default],
                reserved: BTreeSet::new(),
                waiting: None,
                producer: false,
                worker: false,
            },
        );
    }

    /// A connection closed: its reserved jobs become ready again, its wait ends.
    pub fn disconnect(&mut self, now: Millis, client: ClientId) {
        self.advance(now);
        if self
            .clients
            .get(&client)
            .is_some_and(|c| c.waiting.is_some())
        {
            self.end_wait(client);
        }
        let Some(c) = self.clients.remove(&client) else {
            return;
        };
        for id in c.reserved {
            self.leave_state(id);
            self.enter_ready(id);
        }
        self.serve_deferred();
        self.tube_mut(c.used).using -= 1;
        self.drop_if_unused(c.used);
        for tube in c.watched {
            self.tube_mut(tube).watching -= 1;
            self.drop_if_unused(tube);
        }
    }

    /// `use <tube>`.
    pub fn use_tube(&mut self, now: Millis, client: ClientId, name: &TubeName) {
        self.advance(now);
        self.cmd.use_ += 1;
        let tube = self.tube_ref(name);
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let old = mem::replace(&mut c.used, tube);
        self.tube_mut(tube).using += 1;
        self.tube_mut(old).using -= 1;
        self.drop_if_unused(old);
    }

    /// `watch <tube>`: returns the number of watched tubes.
    pub fn watch(&mut self, now: Millis, client: ClientId, name: &TubeName) -> usize {
        self.advance(now);
        self.cmd.watch += 1;
        let tube = self.tube_ref(name);
        let Some(c) = self.clients.get_mut(&client) else {
            return 0;
        };
        if !c.watched.contains(&tube) {
            c.watched.push(tube);
            let count = c.watched.len();
            let waiting = c.waiting;
            let t = self.tube_mut(tube);
            t.watching += 1;
            // The server never lets a waiting client send commands, but keep the engine
            // consistent if a caller does: the wait now covers the new tube too.
            if let Some(wait) = waiting {
                t.waiters.insert(wait.seq, client);
                self.serve_waiters(tube);
            }
            return count;
        }
        let count = c.watched.len();
        self.drop_if_unused(tube);
        count
    }

    /// `ignore <tube>`: returns the number of watched tubes.
    ///
    /// # Errors
    ///
    /// [`Error::NotIgnored`] if it is the only watched tube.
    pub fn ignore(
        &mut self,
        now: Millis,
        client: ClientId,
        name: &TubeName,
    ) -> Result<usize, Error> {
        self.advance(now);
        self.cmd.ignore += 1;
        let Some(c) = self.clients.get_mut(&client) else {
            return Err(Error::NotFound);
        };
        let tube = self.tube_ids.get(name).copied();
        let Some(pos) = tube.and_then(|t| c.watched.iter().position(|&w| w == t)) else {
            return Ok(c.watched.len()); // not watched: nothing to do
        };
        if c.watched.len() == 1 {
            return Err(Error::NotIgnored);
        }
        let tube = c.watched.remove(pos);
        let count = c.watched.len();
        let waiting = c.waiting;
        let t = self.tube_mut(tube);
        t.watching -= 1;
        if let Some(wait) = waiting {
            t.waiters.remove(&wait.seq);
        }
        self.drop_if_unused(tube);
        Ok(count)
    }

    // ----- producers -----

    /// `put`: a new job in the client's used tube, ready or delayed by `delay` ms.
    /// `ttr` below one second is raised to one second.
    ///
    /// # Errors
    ///
    /// [`Error::Draining`] in drain mode, [`Error::JobTooBig`] over the size limit.
    pub fn put(
        &mut self,
        now: Millis,
        client: ClientId,
        priority: u32,
        delay: Millis,
        ttr: Millis,
        body: Bytes,
    ) -> Result<JobId, Error> {
        self.advance(now);
        self.cmd.put += 1;
        if self.draining {
            return Err(Error::Draining);
        }
        if body.len() > self.config.max_job_size {
            return Err(Error::JobTooBig);
        }
        let tube = match self.clients.get_mut(&client) {
            Some(c) => {
                c.producer = true;
                c.used
            }
            None => self.tube_ref(&TubeName::default_tube()),
        };
        let id = self.next_id;
        if id == JobId::MAX {
            return Err(Error::IdsExhausted);
        }
        if id >= self.ids_end {
            self.ids_end = id.saturating_add(ID_BLOCK);
            self.changes.push(Change::ReserveIds { end: self.ids_end });
        }
        self.next_id += 1;
        let now = self.now();
        let until = now.saturating_add(delay);
        let ttr = ttr.max(1000);
        let state = if delay == 0 {
            DurableState::Ready
        } else {
            DurableState::Delayed { until }
        };
        self.changes.push(Change::Put(JobRecord {
            id,
            tube: self.tube(tube).name.clone(),
            priority,
            ttr,
            state,
            created: now,
            body: body.clone(),
        }));
        if delay > 0 && until >= self.window_end {
            // Far in the future: durable in the store only, loaded when its time nears.
            self.tube_mut(tube).total_jobs += 1;
            self.total_jobs += 1;
            self.add_far(tube);
            return Ok(id);
        }
        self.add_job(id, Job::new(tube, priority, ttr, delay, now, body));
        if delay == 0 {
            self.enter_ready(id);
        } else {
            self.enter_delayed(id, until);
        }
        self.serve_deferred();
        Ok(id)
    }

    // ----- workers -----

    /// `reserve` / `reserve-with-timeout`: the most urgent ready job of the watched tubes
    /// (lowest priority, then lowest id; paused tubes skipped). `timeout` `None` waits
    /// forever, `Some(0)` answers at once.
    pub fn reserve(&mut self, now: Millis, client: ClientId, timeout: Option<Millis>) -> Reserve {
        self.advance(now);
        self.cmd.reserve += 1;
        let Some(c) = self.clients.get_mut(&client) else {
            return Reserve::TimedOut;
        };
        c.worker = true;
        if let Some(id) = self.best_ready(client) {
            return Reserve::Job(self.reserve_for(client, id));
        }
        if self.deadline_soon(client) {
            return Reserve::DeadlineSoon;
        }
        if timeout == Some(0) {
            return Reserve::TimedOut;
        }
        self.seq += 1;
        let seq = self.seq;
        let timer = timeout.map(|t| {
            self.wheel
                .insert(self.now().saturating_add(t), Timer::Wait(client, seq))
        });
        let watched = match self.clients.get_mut(&client) {
            Some(c) => {
                c.waiting = Some(Wait { seq, timer });
                c.watched.clone()
            }
            None => Vec::new(),
        };
        for tube in watched {
            self.tube_mut(tube).waiters.insert(seq, client);
        }
        Reserve::Waiting
    }

    /// `reserve-job <id>`: reserves a job that is ready, delayed or buried.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job or it is reserved.
    pub fn reserve_job(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
    ) -> Result<JobView, Error> {
        self.advance(now);
        self.cmd.reserve_job += 1;
        match self.clients.get_mut(&client) {
            Some(c) => c.worker = true,
            None => return Err(Error::NotFound),
        }
        let job = self.jobs.get(&id).ok_or(Error::NotFound)?;
        if job.state == JobState::Reserved {
            return Err(Error::NotFound);
        }
        if job.state != JobState::Ready {
            // Reserved jobs are stored as ready: a crash returns the job to ready.
            self.changes.push(Change::Update {
                id,
                state: DurableState::Ready,
                priority: job.priority,
            });
        }
        self.leave_state(id);
        Ok(self.reserve_for(client, id))
    }

    /// `delete <id>`: a job reserved by this client, or ready, delayed or buried.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job or another client holds it.
    pub fn delete(&mut self, now: Millis, client: ClientId, id: JobId) -> Result<(), Error> {
        self.advance(now);
        self.cmd.delete += 1;
        let job = self.jobs.get(&id).ok_or(Error::NotFound)?;
        if job.state == JobState::Reserved && job.owner != Some(client) {
            return Err(Error::NotFound);
        }
        let tube = job.tube;
        self.leave_state(id);
        self.jobs.remove(&id);
        self.tube_mut(tube).cmd_delete += 1;
        self.changes.push(Change::Delete { id });
        self.drop_if_unused(tube);
        Ok(())
    }

    /// `release <id> <pri> <delay>`: a job reserved by this client goes back to ready (or
    /// delayed) with a new priority.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] unless this client holds the job.
    pub fn release(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
        priority: u32,
        delay: Millis,
    ) -> Result<(), Error> {
        self.advance(now);
        self.cmd.release += 1;
        self.check_owner(client, id)?;
        self.leave_state(id);
        let until = self.now().saturating_add(delay);
        let job = self.job_mut(id);
        job.priority = priority;
        job.releases += 1;
        job.delay = delay;
        if delay == 0 {
            self.changes.push(Change::Update {
                id,
                state: DurableState::Ready,
                priority,
            });
            self.enter_ready(id);
        } else {
            self.changes.push(Change::Update {
                id,
                state: DurableState::Delayed { until },
                priority,
            });
            if until >= self.window_end {
                // Released far into the future: it leaves memory (its counters with it).
                let tube = self.job_mut(id).tube;
                self.jobs.remove(&id);
                self.add_far(tube);
            } else {
                self.enter_delayed(id, until);
            }
        }
        self.serve_deferred();
        Ok(())
    }

    /// `bury <id> <pri>`: a job reserved by this client is buried with a new priority.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] unless this client holds the job.
    pub fn bury(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
        priority: u32,
    ) -> Result<(), Error> {
        self.advance(now);
        self.cmd.bury += 1;
        self.check_owner(client, id)?;
        self.leave_state(id);
        let job = self.job_mut(id);
        job.priority = priority;
        job.buries += 1;
        self.changes.push(Change::Update {
            id,
            state: DurableState::Buried,
            priority,
        });
        self.enter_buried(id);
        Ok(())
    }

    /// `touch <id>`: the reservation of a job this client holds restarts its TTR.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] unless this client holds the job.
    pub fn touch(&mut self, now: Millis, client: ClientId, id: JobId) -> Result<(), Error> {
        self.advance(now);
        self.cmd.touch += 1;
        self.check_owner(client, id)?;
        self.arm_reservation(id);
        Ok(())
    }

    /// `kick <bound>` on the client's used tube: up to `bound` buried jobs become ready, or,
    /// if none is buried, up to `bound` delayed jobs (earliest first). Returns how many.
    pub fn kick(&mut self, now: Millis, client: ClientId, bound: u64) -> u64 {
        self.advance(now);
        self.cmd.kick += 1;
        let Some(tube) = self.clients.get(&client).map(|c| c.used) else {
            return 0;
        };
        let mut kicked = 0;
        let from_buried = !self.tube(tube).buried.is_empty();
        while kicked < bound {
            let t = self.tube(tube);
            let next = if from_buried {
                t.buried.values().next().copied()
            } else {
                t.delayed.iter().next().map(|&(_, id)| id)
            };
            let Some(id) = next else { break };
            self.kick_one(id);
            kicked += 1;
        }
        self.serve_deferred();
        kicked
    }

    /// `kick-job <id>`: a buried or delayed job becomes ready.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job or it is ready or reserved.
    pub fn kick_job(&mut self, now: Millis, id: JobId) -> Result<(), Error> {
        self.advance(now); // beanstalkd counts kick-job in no `cmd-*` counter
        match self.jobs.get(&id).map(|j| j.state) {
            Some(JobState::Buried | JobState::Delayed) => {
                self.kick_one(id);
                self.serve_deferred();
                Ok(())
            }
            _ => Err(Error::NotFound),
        }
    }

    // ----- inspection -----

    /// `peek <id>`: any job, in any state.
    pub fn peek(&mut self, now: Millis, id: JobId) -> Option<JobView> {
        self.advance(now);
        self.cmd.peek += 1;
        self.view(id)
    }

    /// `peek-ready`, `peek-delayed` or `peek-buried` on the client's used tube: the job a
    /// reserve, the clock or a kick would take next.
    pub fn peek_state(
        &mut self,
        now: Millis,
        client: ClientId,
        state: JobState,
    ) -> Option<JobView> {
        self.advance(now);
        match state {
            JobState::Ready => self.cmd.peek_ready += 1,
            JobState::Delayed => self.cmd.peek_delayed += 1,
            JobState::Buried => self.cmd.peek_buried += 1,
            JobState::Reserved => {}
        }
        let tube = self.clients.get(&client)?.used;
        let t = self.tube(tube);
        let id = match state {
            JobState::Ready => t.ready.iter().next().map(|&(_, id)| id),
            JobState::Delayed => t.delayed.iter().next().map(|&(_, id)| id),
            JobState::Buried => t.buried.values().next().copied(),
            JobState::Reserved => None,
        }?;
        self.view(id)
    }

    /// `pause-tube <tube> <delay>`: no job is reserved from the tube for `delay` ms.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if the tube does not exist.
    pub fn pause_tube(&mut self, now: Millis, name: &TubeName, delay: Millis) -> Result<(), Error> {
        self.advance(now);
        self.cmd.pause_tube += 1;
        let tube = *self.tube_ids.get(name).ok_or(Error::NotFound)?;
        let until = self.now().saturating_add(delay);
        if let Some(old) = self.tube_mut(tube).paused.take() {
            self.wheel.remove(old.timer);
        }
        let t = self.tube_mut(tube);
        t.cmd_pause_tube += 1;
        t.pause = delay;
        if delay == 0 {
            // A zero pause lifts any pause now.
            self.serve_waiters(tube);
            self.drop_if_unused(tube);
            return Ok(());
        }
        let timer = self.wheel.insert(until, Timer::Unpause(tube));
        self.tube_mut(tube).paused = Some(Pause { until, timer });
        Ok(())
    }

    /// `list-tube-used`.
    #[must_use]
    pub fn used_tube(&self, client: ClientId) -> Option<&TubeName> {
        let c = self.clients.get(&client)?;
        Some(&self.tube(c.used).name)
    }

    /// `list-tubes-watched`, in the order they were watched.
    #[must_use]
    pub fn watched_tubes(&self, client: ClientId) -> Vec<TubeName> {
        self.clients.get(&client).map_or_else(Vec::new, |c| {
            c.watched
                .iter()
                .map(|&t| self.tube(t).name.clone())
                .collect()
        })
    }

    /// `list-tubes`: every existing tube, in creation-slot order.
    #[must_use]
    pub fn tube_names(&self) -> Vec<TubeName> {
        self.tubes
            .iter()
            .flatten()
            .map(|t| t.name.clone())
            .collect()
    }

    /// `stats-job <id>`.
    #[must_use]
    pub fn job_stats(&self, id: JobId) -> Option<JobStats> {
        let job = self.jobs.get(&id)?;
        let now = self.now();
        let time_left = match job.state {
            JobState::Delayed | JobState::Reserved => job.deadline.saturating_sub(now),
            JobState::Ready | JobState::Buried => 0,
        };
        Some(JobStats {
            id,
            tube: self.tube(job.tube).name.clone(),
            state: job.state,
            priority: job.priority,
            age: now.saturating_sub(job.created),
            delay: job.delay,
            ttr: job.ttr,
            time_left,
            reserves: job.reserves,
            timeouts: job.timeouts,
            releases: job.releases,
            buries: job.buries,
            kicks: job.kicks,
        })
    }

    /// `stats-tube <tube>`.
    #[must_use]
    pub fn tube_stats(&self, name: &TubeName) -> Option<TubeStats> {
        let t = self.tube(*self.tube_ids.get(name)?);
        Some(TubeStats {
            name: t.name.clone(),
            urgent: t.urgent,
            ready: t.ready.len() as u64,
            reserved: t.reserved,
            delayed: t.delayed.len() as u64 + t.far_delayed,
            buried: t.buried.len() as u64,
            total_jobs: t.total_jobs,
            using: t.using,
            waiting: t.waiters.len() as u64,
            watching: t.watching,
            pause: t.pause,
            cmd_delete: t.cmd_delete,
            cmd_pause_tube: t.cmd_pause_tube,
            pause_time_left: t.paused.map_or(0, |p| p.until.saturating_sub(self.now())),
        })
    }

    /// `stats`: the engine's part of the server statistics.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut stats = Stats {
            cmd: self.cmd,
            job_timeouts: self.job_timeouts,
            total_jobs: self.total_jobs,
            max_job_size: self.config.max_job_size as u64,
            current_tubes: self.tube_ids.len() as u64,
            current_connections: self.clients.len() as u64,
            total_connections: self.total_connections,
            draining: self.draining,
            ..Stats::default()
        };
        for t in self.tubes.iter().flatten() {
            stats.urgent += t.urgent;
            stats.ready += t.ready.len() as u64;
            stats.reserved += t.reserved;
            stats.delayed += t.delayed.len() as u64 + t.far_delayed;
            stats.buried += t.buried.len() as u64;
        }
        for c in self.clients.values() {
            stats.producers += u64::from(c.producer);
            stats.workers += u64::from(c.worker);
            stats.waiting += u64::from(c.waiting.is_some());
        }
        stats
    }

    /// Number of jobs, in memory or far.
    #[must_use]
    pub fn job_count(&self) -> usize {
        self.jobs.len() + self.far as usize
    }

    /// The state of a job, if it exists.
    #[must_use]
    pub fn job_state(&self, id: JobId) -> Option<JobState> {
        self.jobs.get(&id).map(|j| j.state)
    }

    // ----- internals: state transitions -----

    fn job_timer(&mut self, id: JobId) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.timer = None;
        match job.state {
            JobState::Delayed => {
                let (tube, until) = (job.tube, job.deadline);
                self.tube_mut(tube).delayed.remove(&(until, id));
                self.enter_ready(id);
            }
            JobState::Reserved if !job.warned => {
                // The safety margin started: warn the owner if it waits, then wait for the end.
                job.warned = true;
                let (owner, deadline) = (job.owner, job.deadline);
                // The lease ends strictly after its deadline: with whole-millisecond clocks a
                // reservation taken at 10.9 ms with a 1 s TTR must not end at 1010 ms.
                job.timer = Some(
                    self.wheel
                        .insert(deadline.saturating_add(1), Timer::Job(id)),
                );
                if let Some(owner) = owner {
                    if self
                        .clients
                        .get(&owner)
                        .is_some_and(|c| c.waiting.is_some())
                    {
                        self.end_wait(owner);
                        self.events.push(Event::DeadlineSoon { client: owner });
                    }
                }
            }
            JobState::Reserved => {
                job.timeouts += 1;
                self.job_timeouts += 1;
                self.leave_state(id);
                self.enter_ready(id);
            }
            JobState::Ready | JobState::Buried => {}
        }
    }

    /// Takes a job out of whatever its state keeps it in (queue, timer, owner).
    fn leave_state(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        if let Some(timer) = job.timer.take() {
            self.wheel.remove(timer);
        }
        let (tube, state, priority, deadline, bury_seq) = (
            job.tube,
            job.state,
            job.priority,
            job.deadline,
            job.bury_seq,
        );
        let owner = job.owner.take();
        let t = self.tubes[tube as usize]
            .as_mut()
            .expect("job's tube exists");
        match state {
            JobState::Ready => t.remove_ready(priority, id),
            JobState::Delayed => {
                t.delayed.remove(&(deadline, id));
            }
            JobState::Buried => {
                t.buried.remove(&bury_seq);
            }
            JobState::Reserved => {
                t.reserved -= 1;
                if let Some(c) = owner.and_then(|o| self.clients.get_mut(&o)) {
                    c.reserved.remove(&id);
                }
            }
        }
    }

    fn enter_ready(&mut self, id: JobId) {
        let job = self.job_mut(id);
        job.state = JobState::Ready;
        let (tube, priority) = (job.tube, job.priority);
        self.tube_mut(tube).add_ready(priority, id);
        // Waiters are served when the operation (or the instant) is complete, so that they
        // get the most urgent of all the jobs it made ready.
        self.to_serve.push(tube);
    }

    fn enter_delayed(&mut self, id: JobId, until: Millis) {
        let timer = self.wheel.insert(until, Timer::Job(id));
        let job = self.job_mut(id);
        job.state = JobState::Delayed;
        job.deadline = until;
        job.timer = Some(timer);
        let tube = job.tube;
        self.tube_mut(tube).delayed.insert((until, id));
    }

    fn enter_buried(&mut self, id: JobId) {
        self.seq += 1;
        let seq = self.seq;
        let job = self.job_mut(id);
        job.state = JobState::Buried;
        job.bury_seq = seq;
        let tube = job.tube;
        self.tube_mut(tube).buried.insert(seq, id);
    }

    fn kick_one(&mut self, id: JobId) {
        self.leave_state(id);
        let job = self.job_mut(id);
        job.kicks += 1;
        let priority = job.priority;
        self.changes.push(Change::Update {
            id,
            state: DurableState::Ready,
            priority,
        });
        self.enter_ready(id);
    }

    /// Hands job `id` (already out of its previous state) to `client`.
    fn reserve_for(&mut self, client: ClientId, id: JobId) -> JobView {
        let job = self.job_mut(id);
        let (tube, priority) = (job.tube, job.priority);
        if job.state == JobState::Ready {
            self.tube_mut(tube).remove_ready(priority, id);
        }
        let job = self.job_mut(id);
        job.state = JobState::Reserved;
        job.owner = Some(client);
        job.reserves += 1;
        let view = JobView {
            id,
            body: job.body.clone(),
        };
        self.tube_mut(tube).reserved += 1;
        if let Some(c) = self.clients.get_mut(&client) {
            c.reserved.insert(id);
        }
        self.arm_reservation(id);
        view
    }

    /// Starts (or restarts) a reservation's TTR: a timer at the safety margin, then at the end.
    fn arm_reservation(&mut self, id: JobId) {
        let now = self.now();
        let job = self.jobs.get_mut(&id).expect("job exists");
        if let Some(timer) = job.timer.take() {
            self.wheel.remove(timer);
        }
        job.deadline = now.saturating_add(job.ttr);
        job.warned = false;
        let warn_at = job.deadline.saturating_sub(SAFETY_MARGIN_MS).max(now);
        job.timer = Some(self.wheel.insert(warn_at, Timer::Job(id)));
    }

    /// The most urgent ready job across the client's watched, unpaused tubes.
    fn best_ready(&self, client: ClientId) -> Option<JobId> {
        let c = self.clients.get(&client)?;
        c.watched
            .iter()
            .map(|&t| self.tube(t))
            .filter(|t| t.paused.is_none())
            .filter_map(|t| t.ready.iter().next().copied())
            .min()
            .map(|(_, id)| id)
    }

    /// Does the client hold a job in its safety margin?
    fn deadline_soon(&self, client: ClientId) -> bool {
        let now = self.now();
        self.clients.get(&client).is_some_and(|c| {
            c.reserved.iter().any(|id| {
                self.jobs
                    .get(id)
                    .is_some_and(|j| j.deadline.saturating_sub(SAFETY_MARGIN_MS) <= now)
            })
        })
    }

    /// Gives ready jobs of `tube` to its waiting clients, first come first served.
    fn serve_waiters(&mut self, tube: TubeId) {
        loop {
            let t = self.tube(tube);
            if t.paused.is_some() || t.ready.is_empty() {
                return;
            }
            let Some((&seq, &client)) = t.waiters.iter().next() else {
                return;
            };
            debug_assert_eq!(
                self.clients
                    .get(&client)
                    .and_then(|c| c.waiting)
                    .map(|w| w.seq),
                Some(seq)
            );
            let Some(id) = self.best_ready(client) else {
                return;
            };
            self.end_wait(client);
            let job = self.reserve_for(client, id);
            self.events.push(Event::Reserved { client, job });
        }
    }

    fn end_wait(&mut self, client: ClientId) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let Some(wait) = c.waiting.take() else {
            return;
        };
        if let Some(timer) = wait.timer {
            self.wheel.remove(timer);
        }
        let watched = c.watched.clone();
        for tube in watched {
            self.tube_mut(tube).waiters.remove(&wait.seq);
        }
    }

    fn check_owner(&self, client: ClientId, id: JobId) -> Result<(), Error> {
        match self.jobs.get(&id) {
            Some(job) if job.state == JobState::Reserved && job.owner == Some(client) => Ok(()),
            _ => Err(Error::NotFound),
        }
    }

    fn view(&self, id: JobId) -> Option<JobView> {
        self.jobs.get(&id).map(|job| JobView {
            id,
            body: job.body.clone(),
        })
    }

    // ----- internals: tubes -----

    /// The tube called `name`, created if needed.
    fn tube_ref(&mut self, name: &TubeName) -> TubeId {
        if let Some(&id) = self.tube_ids.get(name) {
            return id;
        }
        let tube = Tube::new(name.clone());
        let id = match self.free_tubes.pop() {
            Some(id) => {
                self.tubes[id as usize] = Some(tube);
                id
            }
            None => {
                self.tubes.push(Some(tube));
                (self.tubes.len() - 1) as TubeId
            }
        };
        self.tube_ids.insert(name.clone(), id);
        id
    }

    /// Deletes the tube if it has no jobs and nobody refers to it (never `default`).
    fn drop_if_unused(&mut self, tube: TubeId) {
        let Some(t) = self.tubes[tube as usize].as_ref() else {
            return;
        };
        if t.is_unused() && t.name.as_str() != "default" {
            // A pause does not keep a tube alive (as in beanstalkd); its timer goes with it.
            if let Some(pause) = t.paused {
                self.wheel.remove(pause.timer);
            }
            let name = t.name.clone();
            self.tube_ids.remove(&name);
            self.tubes[tube as usize] = None;
            self.free_tubes.push(tube);
        }
    }

    fn tube(&self, tube: TubeId) -> &Tube {
        self.tubes[tube as usize].as_ref().expect("tube exists")
    }

    fn tube_mut(&mut self, tube: TubeId) -> &mut Tube {
        self.tubes[tube as usize].as_mut().expect("tube exists")
    }

    /// A `put` that failed before reaching the engine (its body was not followed by CRLF)
    /// still counts, as in beanstalkd: `cmd-put`, and the client as a producer.
    pub fn count_failed_put(&mut self, client: ClientId) {
        self.cmd.put += 1;
        if let Some(c) = self.clients.get_mut(&client) {
            c.producer = true;
        }
    }

    /// Registers a new job (not yet in any state's queue) and counts it.
    fn add_job(&mut self, id: JobId, job: Job) {
        let tube = job.tube;
        self.jobs.insert(id, job);
        self.tube_mut(tube).total_jobs += 1;
        self.total_jobs += 1;
    }

    fn job_mut(&mut self, id: JobId) -> &mut Job {
        self.jobs.get_mut(&id).expect("job exists")
    }
}
