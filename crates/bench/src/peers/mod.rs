//! The timer implementations under test, each behind [`TimerImpl`].
//!
//! One tick is one millisecond everywhere. Timer values are `u64` ids chosen by the harness.

mod btree;
mod delay_queue;
mod floor;
mod hashed;
mod heap;
mod nexus;
mod slots;
mod tickwheel;

pub(crate) use btree::BTreeTimer;
pub(crate) use delay_queue::{advance_cost_ns, DelayQueueTimer};
pub(crate) use floor::SlabFloor;
pub(crate) use hashed::HashedWheelTimer;
pub(crate) use heap::HeapTimer;
pub(crate) use nexus::NexusTimer;
pub(crate) use tickwheel::TickwheelTimer;

/// What the workloads need from a timer structure, driven by a logical millisecond clock.
pub(crate) trait TimerImpl {
    /// Names one pending timer, for cancellation.
    type Handle;

    /// Display name in the result tables.
    const NAME: &'static str;

    /// How `next_deadline` is obtained (printed under the fire-all table).
    const PEEK: &'static str;

    /// An empty structure whose clock reads 0, sized for about `capacity` timers where the
    /// structure supports pre-sizing.
    fn create(capacity: usize) -> Self;

    /// Adds a timer firing at tick `deadline` (always in the future here) carrying `id`.
    fn insert(&mut self, deadline: u64, id: u64) -> Self::Handle;

    /// Cancels a pending timer and returns its id (`None` if the structure says it is gone).
    fn cancel(&mut self, handle: Self::Handle) -> Option<u64>;

    /// Gives back the handle of a timer that has fired (nexus-timer needs this to free its
    /// slot; everyone else just drops it).
    fn release_fired(&mut self, handle: Self::Handle) {
        drop(handle);
    }

    /// Advances the clock to `now` and appends the id of every timer due at or before `now`.
    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>);

    /// The earliest pending deadline as the structure reports it (see [`Self::PEEK`]).
    fn next_deadline(&mut self) -> Option<u64>;

    /// One step of "jumping": move the clock to the next deadline the structure knows of, fire
    /// what is due, and return the clock reading; `None` when empty.
    fn jump(&mut self, out: &mut Vec<u64>) -> Option<u64> {
        let next = self.next_deadline()?;
        self.poll_until(next, out);
        Some(next)
    }

    /// Number of pending timers.
    fn len(&self) -> usize;
}

/// The implementations, for `--peers` and dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Peer {
    /// `tickwheel_core::Wheel<u64>`.
    Tickwheel,
    /// `BinaryHeap` with lazy cancel (written here).
    Heap,
    /// `BTreeMap<(deadline, seq), id>` (written here).
    Btree,
    /// `nexus_timer::Wheel<u64>`.
    Nexus,
    /// `tokio_util::time::DelayQueue<u64>`.
    DelayQueue,
    /// A single hashed wheel, 512 one-tick slots with rounds (Netty's shape, written here).
    Hashed,
    /// Not a timer: a slot table only, the least a churn op must touch (churn (a) only; not
    /// in the default set).
    Floor,
}

impl Peer {
    pub(crate) const ALL: [Peer; 6] = [
        Peer::Tickwheel,
        Peer::Heap,
        Peer::Hashed,
        Peer::Nexus,
        Peer::DelayQueue,
        Peer::Btree,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Peer::Tickwheel => TickwheelTimer::NAME,
            Peer::Heap => HeapTimer::NAME,
            Peer::Btree => BTreeTimer::NAME,
            Peer::Nexus => NexusTimer::NAME,
            Peer::DelayQueue => DelayQueueTimer::NAME,
            Peer::Hashed => HashedWheelTimer::NAME,
            Peer::Floor => SlabFloor::NAME,
        }
    }

    /// The `--peers` spelling.
    pub(crate) fn cli_name(self) -> &'static str {
        match self {
            Peer::Tickwheel => "tickwheel",
            Peer::Heap => "heap",
            Peer::Btree => "btree",
            Peer::Nexus => "nexus",
            Peer::DelayQueue => "delay-queue",
            Peer::Hashed => "hashed",
            Peer::Floor => "floor",
        }
    }

    pub(crate) fn peek(self) -> &'static str {
        match self {
            Peer::Tickwheel => TickwheelTimer::PEEK,
            Peer::Heap => HeapTimer::PEEK,
            Peer::Btree => BTreeTimer::PEEK,
            Peer::Nexus => NexusTimer::PEEK,
            Peer::DelayQueue => DelayQueueTimer::PEEK,
            Peer::Hashed => HashedWheelTimer::PEEK,
            Peer::Floor => SlabFloor::PEEK,
        }
    }
}

/// Calls the generic function `$f::<Impl>($args)` for the implementation named by `$peer`.
macro_rules! dispatch {
    ($peer:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $peer {
            $crate::peers::Peer::Tickwheel => $f::<$crate::peers::TickwheelTimer>($($arg),*),
            $crate::peers::Peer::Heap => $f::<$crate::peers::HeapTimer>($($arg),*),
            $crate::peers::Peer::Btree => $f::<$crate::peers::BTreeTimer>($($arg),*),
            $crate::peers::Peer::Nexus => $f::<$crate::peers::NexusTimer>($($arg),*),
            $crate::peers::Peer::DelayQueue => $f::<$crate::peers::DelayQueueTimer>($($arg),*),
            $crate::peers::Peer::Hashed => $f::<$crate::peers::HashedWheelTimer>($($arg),*),
            $crate::peers::Peer::Floor => $f::<$crate::peers::SlabFloor>($($arg),*),
        }
    };
}
pub(crate) use dispatch;
