//! The vocabulary of the engine: ids, job states, what an operation tells the caller, and the
//! durable changes it asks the caller to persist.

use core::fmt;

use bytes::Bytes;

pub use tickwheel_tube::{BadTubeName, TubeName, MAX_TUBE_NAME};

/// A job id: unique for the life of the data directory, never reused.
pub type JobId = u64;

/// Milliseconds on the engine's clock (the caller's monotonic or wall clock).
pub type Millis = u64;

/// Names one client (a connection) of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// Priorities below this count as "urgent" in the stats (`current-jobs-urgent`).
pub const URGENT_PRIORITY: u32 = 1024;

/// How long before a reservation expires its owner is warned (`DEADLINE_SOON`): beanstalkd's
/// one-second safety margin.
pub const SAFETY_MARGIN_MS: Millis = 1000;

/// The state of a job (beanstalkd's four states).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for its delay to pass.
    Delayed,
    /// Ready to be reserved.
    Ready,
    /// Handed to a worker, who must delete, release, bury or touch it within its TTR.
    Reserved,
    /// Parked until kicked (a dead-letter list).
    Buried,
}

impl JobState {
    /// The word beanstalkd uses in `stats-job`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Delayed => "delayed",
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Buried => "buried",
        }
    }
}

/// A job as handed to a client: its id and body (a cheap reference-counted clone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobView {
    /// The job id.
    pub id: JobId,
    /// The job body, byte for byte as it was put.
    pub body: Bytes,
}

/// A new job for [`Engine::put_job`](crate::Engine::put_job): `put` with the tube named, and an
/// optional idempotency key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    /// The tube (created if needed).
    pub tube: TubeName,
    /// Priority: lower is more urgent.
    pub priority: u32,
    /// Delay in ms (0: ready at once).
    pub delay: Millis,
    /// Time to run in ms (raised to one second).
    pub ttr: Millis,
    /// The body.
    pub body: Bytes,
    /// A put whose key matches a live job of the same tube changes nothing and answers that
    /// job's id.
    pub idempotency_key: Option<String>,
}

/// Everything known about one job: [`Engine::job_detail`](crate::Engine::job_detail).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobDetail {
    /// The `stats-job` figures.
    pub stats: crate::JobStats,
    /// When a delayed job is due (engine clock ms); `None` in other states.
    pub due_at: Option<Millis>,
    /// The body.
    pub body: Bytes,
    /// The idempotency key given at put.
    pub idempotency_key: Option<String>,
}

/// Something that happened to a waiting client outside of its own command: the reply to a
/// `reserve` that was waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The client's waiting reserve got a job.
    Reserved {
        /// Who was waiting.
        client: ClientId,
        /// The job it now holds.
        job: JobView,
    },
    /// The client's reserve-with-timeout ran out.
    TimedOut {
        /// Who was waiting.
        client: ClientId,
    },
    /// A job the waiting client holds entered its last second: `DEADLINE_SOON`.
    DeadlineSoon {
        /// Who was waiting.
        client: ClientId,
    },
}

/// What `reserve` answers at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// A job was reserved.
    Job(JobView),
    /// The client holds a job in its last second and nothing is ready: `DEADLINE_SOON`.
    DeadlineSoon,
    /// Nothing was ready and the timeout was zero: `TIMED_OUT`.
    TimedOut,
    /// The client now waits; the answer will come as an [`Event`].
    Waiting,
}

/// Where a job is durably, as far as recovery is concerned. Reserved jobs are stored as
/// ready: a reservation dies with its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurableState {
    /// Ready (or reserved).
    Ready,
    /// Delayed until the given time.
    Delayed {
        /// When the job becomes ready.
        until: Millis,
    },
    /// Buried.
    Buried,
}

/// What `stats-job` reports of a job's past, kept with the job in the store (beanstalkd's
/// binlog keeps the same fields): the delay last given and how often each event happened to
/// it. Stored as of the job's last durable change (its put, a release, bury, kick or
/// `reserve-job`), so a reserve or a TTR timeout alone is forgotten by a restart, as in
/// beanstalkd, where those write nothing either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobHistory {
    /// The delay given at put or at the last release, in ms.
    pub delay: Millis,
    /// Times reserved.
    pub reserves: u32,
    /// Times its reservation ran out (TTR).
    pub timeouts: u32,
    /// Times released.
    pub releases: u32,
    /// Times buried.
    pub buries: u32,
    /// Times kicked.
    pub kicks: u32,
}

/// A job as persisted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// The job id.
    pub id: JobId,
    /// The tube's name.
    pub tube: TubeName,
    /// Priority: lower is more urgent.
    pub priority: u32,
    /// Time to run, in ms.
    pub ttr: Millis,
    /// Durable state.
    pub state: DurableState,
    /// Engine clock at put.
    pub created: Millis,
    /// The body.
    pub body: Bytes,
    /// The idempotency key given at put (HTTP API), unique among the live jobs of its tube.
    /// At most [`MAX_IDEMPOTENCY_KEY`] bytes.
    pub idempotency_key: Option<String>,
    /// The delay given and the job's counters, as of this change.
    pub history: JobHistory,
}

impl JobHistory {
    /// The five counters in their `stats-job` order: reserves, timeouts, releases, buries,
    /// kicks (the order the stores write them in).
    #[must_use]
    pub fn counters(&self) -> [u32; 5] {
        [
            self.reserves,
            self.timeouts,
            self.releases,
            self.buries,
            self.kicks,
        ]
    }

    /// A history from its delay and [`counters`](Self::counters).
    #[must_use]
    pub fn from_counters(delay: Millis, counters: [u32; 5]) -> JobHistory {
        let [reserves, timeouts, releases, buries, kicks] = counters;
        JobHistory {
            delay,
            reserves,
            timeouts,
            releases,
            buries,
            kicks,
        }
    }
}

impl JobRecord {
    /// What a [`Change::Update`] does to the stored record: its state, priority and history
    /// become the change's.
    pub fn update(&mut self, state: DurableState, priority: u32, history: JobHistory) {
        self.state = state;
        self.priority = priority;
        self.history = history;
    }
}

/// The longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 200;

/// A durable change an operation made. The caller must persist every change an operation
/// produced before telling the client it succeeded (see [`Engine::take_changes`]).
///
/// [`Engine::take_changes`]: crate::Engine::take_changes
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new job.
    Put(JobRecord),
    /// A job's durable state or priority changed.
    Update {
        /// The job.
        id: JobId,
        /// Its new durable state.
        state: DurableState,
        /// Its priority.
        priority: u32,
        /// Its delay and counters, as of this change.
        history: JobHistory,
    },
    /// A job is gone.
    Delete {
        /// The job.
        id: JobId,
    },
    /// Ids below `end` may be handed out: persist this so that ids are never reused.
    ReserveIds {
        /// The new exclusive upper bound of allocated ids.
        end: JobId,
    },
}

/// What an operation needs from the store before it can run, answered with
/// [`Error::NeedsLoad`]: with a memory window ([`Config::window`](crate::Config::window)) the
/// engine keeps far-future delayed jobs on disk only. The caller reads what it names (after
/// every change taken so far is durable), hands it to the engine, and runs the operation
/// again; the engine does no I/O itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// The job with this id may be on disk only: read it by id and pass the answer, found or
    /// not, to [`Engine::load_job`](crate::Engine::load_job).
    Job(JobId),
    /// The client's used tube may have earlier delayed jobs on disk: move the window on with
    /// [`Engine::widen_window`](crate::Engine::widen_window), read that range and complete it
    /// with [`Engine::load_window`](crate::Engine::load_window). If that cannot make progress,
    /// [`Engine::skip_load`](crate::Engine::skip_load) lets the next operation run on what is
    /// in memory.
    Widen,
}

/// Why an operation on a job or tube did nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// No such job, or not in a state (or not held by this client) the operation needs:
    /// beanstalkd's `NOT_FOUND`.
    NotFound,
    /// `ignore` of the only watched tube: `NOT_IGNORED`.
    NotIgnored,
    /// The server is draining and takes no new jobs: `DRAINING`.
    Draining,
    /// The body is larger than the configured maximum: `JOB_TOO_BIG`.
    JobTooBig,
    /// The id space is exhausted (2⁶⁴ jobs).
    IdsExhausted,
    /// Nothing was done: the operation needs this read from the store first (see [`Load`]).
    NeedsLoad(Load),
    /// The job is reserved by a worker, and the operation is one an operator may not do to a
    /// reserved job ([`Engine::bury_job`](crate::Engine::bury_job)).
    Reserved,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::NotFound => "no such job, or not in a state that allows this",
            Error::NotIgnored => "cannot ignore the only watched tube",
            Error::Draining => "the server is draining and accepts no new jobs",
            Error::JobTooBig => "the job body is larger than the maximum job size",
            Error::IdsExhausted => "job ids are exhausted",
            Error::NeedsLoad(_) => "the operation needs jobs read from the store first",
            Error::Reserved => "the job is reserved by a worker",
        })
    }
}

impl std::error::Error for Error {}
