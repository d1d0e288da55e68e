//! Callback tasks as the timer's threads see them, [`TimerHandle`], [`TaskState`] and
//! [`PendingTask`]. Where a task lives and who may touch it: see `shard.rs`.

use std::fmt;
use std::time::{Duration, Instant};

use crate::interval::MissedTickBehavior;
use crate::payload::Payload;

/// What a batch of runs did to the shared counters, applied once by `Inner::settle`.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) fired: u64,
}

/// A repeating callback and its schedule; out of its slot while a worker runs it.
pub(crate) struct Repeat {
    pub(crate) f: Box<dyn FnMut() + Send>,
    pub(crate) period: Duration,
    pub(crate) period_ticks: u64,
    pub(crate) behavior: MissedTickBehavior,
    /// The tick of the run being (or last) made due.
    pub(crate) due: u64,
}

/// The observable state of a scheduled callback, from [`Timer::state`](crate::Timer::state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskState {
    /// Not yet due.
    Waiting,
    /// A repeating task's run is due: handed to a worker and queued or running now. A
    /// cancel can no longer prevent this run, only the next ones.
    Running,
    /// A one-shot callback fired: it was due and handed to a worker, which runs it (or ran
    /// it, or it panicked). A cancel can no longer prevent it. Its slot is freed at that
    /// moment, so this is the state from then until the slot is reused; one exception is
    /// documented at [`Timer::stop`](crate::Timer::stop). A repeating task reports `Done`
    /// once it stopped after a panic or a graceful shutdown.
    Done,
    /// Cancelled (by [`Timer::cancel`](crate::Timer::cancel), or returned by
    /// [`Timer::stop`](crate::Timer::stop)) before it ran.
    Cancelled,
    /// The handle's own timer finished (ran or was cancelled) earlier and its slot has been
    /// reused: for a repeating task, as soon as a newer timer takes the slot; for a one-shot
    /// callback, once the newer timer in its slot has finished too (until then the handle
    /// still reports its own `Done` or `Cancelled`). Also the answer for a handle of
    /// another `Timer`.
    Unknown,
}

/// Names a callback scheduled on a [`Timer`](crate::Timer): a small `Copy` key (shard,
/// slot, generation), not a pointer. Pass it to [`Timer::cancel`](crate::Timer::cancel),
/// [`Timer::state`](crate::Timer::state) or [`Timer::deadline`](crate::Timer::deadline).
///
/// Dropping a handle does nothing (it does not cancel). A handle whose timer has finished
/// is inert: it cancels nothing and reports its own outcome or, once its slot has been
/// reused, [`TaskState::Unknown`]; it never acts on, or reports, a newer timer in its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    /// The shard's index, with [`TimerHandle::REPEATING`] set for a repeating task.
    pub(crate) shard: u32,
    /// A one-shot callback: its wheel entry; a repeating task: its side-slab slot.
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

impl TimerHandle {
    /// Bit of `shard` marking a repeating task's handle (shards are at most 1024).
    pub(crate) const REPEATING: u32 = 1 << 31;

    pub(crate) fn shard_index(self) -> usize {
        (self.shard & !Self::REPEATING) as usize
    }

    pub(crate) fn is_repeating(self) -> bool {
        self.shard & Self::REPEATING != 0
    }
}

/// A callback that never ran, handed back by [`Timer::stop`](crate::Timer::stop) so the
/// caller can run it, persist it, or drop it.
pub struct PendingTask {
    deadline: Instant,
    kind: PendingKind,
}

impl PendingTask {
    pub(crate) fn once(deadline: Instant, f: Payload) -> Self {
        PendingTask {
            deadline,
            kind: PendingKind::Once(f),
        }
    }

    pub(crate) fn repeating(deadline: Instant, task: Repeat) -> Self {
        PendingTask {
            deadline,
            kind: PendingKind::Repeating {
                f: task.f,
                period: task.period,
            },
        }
    }
}

enum PendingKind {
    Once(Payload),
    Repeating {
        f: Box<dyn FnMut() + Send>,
        period: Duration,
    },
}

impl PendingTask {
    /// When it was due (for a repeating task: its next run).
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The period of a repeating task; `None` for a one-shot callback.
    #[must_use]
    pub fn period(&self) -> Option<Duration> {
        match &self.kind {
            PendingKind::Once(_) => None,
            PendingKind::Repeating { period, .. } => Some(*period),
        }
    }

    /// Runs the callback once, on the calling thread.
    pub fn run(self) {
        match self.kind {
            PendingKind::Once(f) => f.run(),
            PendingKind::Repeating { mut f, .. } => f(),
        }
    }
}

impl fmt::Debug for PendingTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTask")
            .field("deadline", &self.deadline)
            .field("period", &self.period())
            .finish_non_exhaustive()
    }
}
