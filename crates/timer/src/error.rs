//! Errors. Each type is for one operation; its variants are the failures a caller handles
//! differently, and a refused task is always handed back.

use std::fmt;
use std::time::Instant;

/// `schedule*` refused a task; the task is inside, take it back with
/// [`into_inner`](Self::into_inner).
#[derive(PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError<F> {
    /// `max_pending` callbacks are already waiting: back off and retry, or shed load.
    Full(F),
    /// The timer is shutting down or stopped: it will never run this task.
    Shutdown(F),
}

impl<F> ScheduleError<F> {
    /// The task that was refused.
    pub fn into_inner(self) -> F {
        match self {
            ScheduleError::Full(f) | ScheduleError::Shutdown(f) => f,
        }
    }

    pub(crate) fn map<G>(self, f: impl FnOnce(F) -> G) -> ScheduleError<G> {
        match self {
            ScheduleError::Full(x) => ScheduleError::Full(f(x)),
            ScheduleError::Shutdown(x) => ScheduleError::Shutdown(f(x)),
        }
    }

    /// `true` for [`ScheduleError::Full`].
    pub fn is_full(&self) -> bool {
        matches!(self, ScheduleError::Full(_))
    }

    /// `true` for [`ScheduleError::Shutdown`].
    pub fn is_shutdown(&self) -> bool {
        matches!(self, ScheduleError::Shutdown(_))
    }
}

impl<F> fmt::Debug for ScheduleError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::Full(_) => f.write_str("Full(..)"),
            ScheduleError::Shutdown(_) => f.write_str("Shutdown(..)"),
        }
    }
}

impl<F> fmt::Display for ScheduleError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::Full(_) => f.write_str(
                "The timer already holds its maximum number of pending tasks; the task was not scheduled.",
            ),
            ScheduleError::Shutdown(_) => {
                f.write_str("The timer is shutting down; the task was not scheduled.")
            }
        }
    }
}

impl<F> std::error::Error for ScheduleError<F> {}

/// [`Builder::build`](crate::Builder::build) failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The tick resolution was zero.
    ZeroResolution,
    /// The operating system refused to start a thread.
    Spawn(std::io::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ZeroResolution => f.write_str("The tick resolution must be non-zero."),
            BuildError::Spawn(_) => f.write_str("Could not start a timer thread."),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Spawn(e) => Some(e),
            BuildError::ZeroResolution => None,
        }
    }
}

/// A [`Timeout`](crate::Timeout) future's deadline passed before its inner future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Elapsed {
    /// The deadline that passed.
    pub deadline: Instant,
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("The deadline passed before the future completed.")
    }
}

impl std::error::Error for Elapsed {}
