//! Statistics the engine keeps: the job- and tube-related part of beanstalkd's `stats`,
//! `stats-tube` and `stats-job`. Times are in milliseconds; the protocol layer rounds them
//! to the seconds beanstalkd prints.

use crate::types::{JobId, JobState, Millis, TubeName};

/// Cumulative command counters (`cmd-*` in `stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each field is the beanstalkd counter of the same name"
)]
pub struct CmdCounters {
    pub put: u64,
    pub peek: u64,
    pub peek_ready: u64,
    pub peek_delayed: u64,
    pub peek_buried: u64,
    pub reserve: u64,
    pub reserve_job: u64,
    pub use_: u64,
    pub watch: u64,
    pub ignore: u64,
    pub delete: u64,
    pub release: u64,
    pub bury: u64,
    pub kick: u64,
    pub touch: u64,
    pub pause_tube: u64,
}

/// The engine's part of `stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each field is the beanstalkd statistic of the same name"
)]
pub struct Stats {
    pub urgent: u64,
    pub ready: u64,
    pub reserved: u64,
    pub delayed: u64,
    pub buried: u64,
    pub cmd: CmdCounters,
    pub job_timeouts: u64,
    pub total_jobs: u64,
    pub max_job_size: u64,
    pub current_tubes: u64,
    pub current_connections: u64,
    pub producers: u64,
    pub workers: u64,
    pub waiting: u64,
    pub total_connections: u64,
    pub draining: bool,
}

/// `stats-tube`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each field is the beanstalkd statistic of the same name"
)]
pub struct TubeStats {
    pub name: TubeName,
    pub urgent: u64,
    pub ready: u64,
    pub reserved: u64,
    pub delayed: u64,
    pub buried: u64,
    pub total_jobs: u64,
    pub using: u64,
    pub waiting: u64,
    pub watching: u64,
    /// The last pause requested, in ms.
    pub pause: Millis,
    pub cmd_delete: u64,
    pub cmd_pause_tube: u64,
    /// Until the tube unpauses, in ms (0 if not paused).
    pub pause_time_left: Millis,
    /// Reservations of this tube's jobs (this process; not a beanstalkd statistic).
    pub reserves: u64,
    /// Reservations of this tube's jobs that ran out (this process; not a beanstalkd
    /// statistic).
    pub timeouts: u64,
}

/// `stats-job`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each field is the beanstalkd statistic of the same name"
)]
pub struct JobStats {
    pub id: JobId,
    pub tube: TubeName,
    pub state: JobState,
    pub priority: u32,
    /// Since the put, in ms.
    pub age: Millis,
    /// The delay given at put or the last release, in ms.
    pub delay: Millis,
    pub ttr: Millis,
    /// Until a delayed job is ready or a reservation expires, in ms (0 otherwise).
    pub time_left: Millis,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
}
