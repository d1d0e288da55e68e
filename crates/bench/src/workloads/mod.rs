//! The workloads. Each is a generic function over [`TimerImpl`](crate::peers::TimerImpl)
//! returning one timed run, already verified.

pub(crate) mod churn;
pub(crate) mod far_mix;
pub(crate) mod fire_all;
pub(crate) mod memory;

/// One verified run.
#[derive(Clone, Debug)]
pub(crate) struct RunResult {
    /// The measured cost, in ns per op (or per timer, or bytes per timer for memory).
    pub(crate) value: f64,
    /// Wall time of the whole run including untimed setup, for skip estimates.
    pub(crate) wall_secs: f64,
    /// The timed part of `wall_secs`.
    pub(crate) timed_secs: f64,
    /// Ops (or timers) the value is divided by.
    pub(crate) ops: u64,
    /// Remarks worth printing under the table (lateness, empty jumps, ...).
    pub(crate) note: String,
}

/// Ticks are milliseconds.
pub(crate) const SECOND: u64 = 1_000;
pub(crate) const HOUR: u64 = 3_600 * SECOND;
pub(crate) const DAY: u64 = 24 * HOUR;
