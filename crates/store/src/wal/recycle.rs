//! The hand-off that lets the log overwrite a segment (`docs/decisions/0014-write-ahead-log.md`,
//! "Recycling"): the commit path asks the background persist thread to sync fjall when the log
//! leaves a segment, and overwrites a segment later only once fjall is durable past every
//! record in it — or syncs fjall itself first. Model-checked with loom in
//! `tests/loom_recycle.rs` (`--cfg loom` swaps in loom's atomics and channel).
//!
//! # Ground rules
//!
//! - A request `upto` is sent only after every commit up to `upto` was written to fjall, by the
//!   thread that wrote them (the commit path, under the store's write lock).
//! - [`Covered`] only grows, and only to a sequence number whose commits a finished
//!   `persist` (a sync of every fjall journal) covered.

#[cfg(loom)]
use loom::sync::atomic::AtomicU64;
#[cfg(loom)]
pub use loom::sync::mpsc::{channel, Receiver, Sender};
#[cfg(not(loom))]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
#[cfg(not(loom))]
pub use std::sync::mpsc::{channel, Receiver, Sender};

/// Every log record up to this sequence number is durable in fjall.
#[derive(Debug)]
pub struct Covered(AtomicU64);

impl Covered {
    /// Starts at `seq` (what fjall held durably at open).
    pub fn new(seq: u64) -> Covered {
        Covered(AtomicU64::new(seq))
    }

    /// Whether a segment whose last record has sequence number `last` may be overwritten
    /// without syncing fjall first.
    pub fn may_overwrite(&self, last: u64) -> bool {
        last <= self.0.load(Ordering::Acquire)
    }

    /// Records that fjall is durable up to `seq` (never lowers it).
    pub fn cover(&self, seq: u64) {
        self.0.fetch_max(seq, Ordering::AcqRel);
    }

    /// The sequence number covered so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// The persist thread: for each request, takes every request queued behind it too, syncs
/// fjall (`persist`) and covers the largest. Returns when every sender is gone, when
/// `stopped()` says so before a sync, or after a failed sync (which its caller has poisoned
/// the store for).
pub fn persist_loop<E>(
    requests: &Receiver<u64>,
    covered: &Covered,
    mut stopped: impl FnMut() -> bool,
    mut persist: impl FnMut() -> Result<(), E>,
) {
    while let Ok(mut upto) = requests.recv() {
        while let Ok(more) = requests.try_recv() {
            upto = upto.max(more);
        }
        if stopped() || persist().is_err() {
            return;
        }
        covered.cover(upto);
    }
}
