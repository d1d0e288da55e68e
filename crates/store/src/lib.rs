//! Durable storage for tickwheel delayed jobs.
//!
//! The job engine (`tickwheel-queue`) keeps beanstalkd job semantics in memory and records a
//! [`Change`] for every state change a client is told about; the server commits those through
//! a [`Store`] and answers the client only once the commit is durable. The store speaks the
//! engine's vocabulary: it stores [`Change`]s and recovers [`JobRecord`]s, so nothing is
//! translated between the layers. This crate provides:
//!
//! - [`DiskStore`]: the embedded on-disk store, on the fjall LSM engine, with a write-ahead
//!   log of its own in front (one record written and `fdatasync`ed per commit into
//!   preallocated blocks; fjall written behind the acknowledgement and synced in the
//!   background; see `docs/decisions/0002-storage-engine.md`,
//!   `docs/decisions/0014-write-ahead-log.md`, `docs/decisions/0018-settle-on-the-log-apply-behind.md` and
//!   `docs/storage-format.md`).
//! - [`MemStore`]: the same semantics in memory (tests; an in-memory server).
//! - [`GroupCommit`]: many callers commit concurrently; every batch queued while a commit runs
//!   goes into the next store commit (one fsync). [`GroupCommit::submit`] returns a [`Ticket`]
//!   to wait on, blocking or as a future; see `docs/decisions/0005-one-committer.md`.
//! - [`FaultyStore`]: a wrapper failing writes or fsyncs after a countdown, for tests.
//!
//! A [`DiskStore`] keeps a free-space reserve ([`DiskOptions::min_free_bytes`]): a write that
//! would eat into it is refused with [`StoreError::LowSpace`] before anything is written, and
//! [`Store::writable`] asks the same question before a caller changes its own state for a
//! write; neither poisons the store. See `docs/decisions/0006-free-space-guard.md`.
//!
//! Far-future delayed jobs stay on disk: [`Store::recover`] loads ready and buried jobs and the
//! delayed jobs due inside a window, and reports only per-tube counts for the rest, which the
//! engine pages in with [`Store::delayed_between`] as its window moves.
//!
//! # Examples
//!
//! ```
//! use bytes::Bytes;
//! use tickwheel_queue::{Change, DurableState, JobHistory, JobRecord, TubeName};
//! use tickwheel_store::{DiskOptions, DiskStore, GroupCommit, Store};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = GroupCommit::new(DiskStore::open(dir.path(), DiskOptions::default())?);
//! let emails = TubeName::new("emails")?;
//! let job = JobRecord {
//!     id: 1,
//!     tube: emails.clone(),
//!     priority: 1024,
//!     ttr: 60_000,
//!     state: DurableState::Delayed { until: 86_400_000 },
//!     created: 0,
//!     body: Bytes::from_static(b"send the report"),
//!     idempotency_key: None,
//!     // The delay given at put, and counters that `stats-job` shows (none yet).
//!     history: JobHistory { delay: 86_400_000, ..JobHistory::default() },
//! };
//! // Durable (fsynced) once this returns: the id block and the job, in one atomic batch.
//! store.commit(&[Change::ReserveIds { end: 1000 }, Change::Put(job.clone())])?;
//! drop(store);
//!
//! let store = DiskStore::open(dir.path(), DiskOptions::default())?;
//! let recovered = store.recover(3_600_000)?; // load what is due within the first hour
//! assert_eq!(recovered.next_id, 1000);
//! assert!(recovered.resident.is_empty());
//! assert_eq!(recovered.far_delayed, vec![(emails, 1)]);
//! assert_eq!(store.delayed_between(0, u64::MAX, 10)?, vec![job]);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod beanstalkd;
mod disk;
mod due;
mod error;
mod fault;
mod group;
mod lock;
mod mem;
mod plan;
mod record;
mod space;
#[doc(hidden)]
pub mod wal;

pub use disk::{
    DiskOptions, DiskStore, DEFAULT_LOG_SEGMENT_BYTES, DEFAULT_MIN_FREE_BYTES, FORMAT_VERSION,
};
pub use error::StoreError;
pub use fault::{Fault, FaultyStore};
pub use group::{batch_bytes, Durable, GroupCommit, GroupStats, Ticket};
pub use lock::LOCK_FILE;
pub use mem::MemStore;
pub use record::{implied_history, validate, Recovered, MAX_BODY_LEN, RECORD_LAYOUT};
pub use tickwheel_queue::{Change, DurableState, JobHistory, JobId, JobRecord, TubeName};

/// How durable a commit is when [`Store::commit`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledge after fsync (the default): an acknowledged commit survives a power cut.
    #[default]
    Sync,
    /// Write to the OS at once, fsync at most every `interval_ms` in the background, acknowledge
    /// before the fsync (beanstalkd `-f N`): a power cut loses up to `interval_ms` of
    /// acknowledged commits; a process crash loses nothing.
    Periodic {
        /// Milliseconds between background fsyncs.
        interval_ms: u64,
    },
    /// Write to the OS, never fsync (beanstalkd `-F`): survives a process crash only.
    None,
}

/// Durable storage of jobs. Implementations are [`DiskStore`], [`MemStore`], and the wrappers
/// [`GroupCommit`] and [`FaultyStore`].
pub trait Store: Send + Sync {
    /// Applies the batch atomically (all of it or none of it survives a crash); returns once it
    /// is as durable as the store's [`Durability`] says.
    ///
    /// `Put` of an existing id replaces the job; `Update` and `Delete` of a missing id are
    /// no-ops. A put raises the id high-water mark past its id, `ReserveIds { end }` to `end`
    /// (never lowering it).
    ///
    /// # Errors
    ///
    /// [`StoreError::TooLarge`] and [`StoreError::LowSpace`] (nothing applied, the store stays
    /// usable); I/O failures
    /// ([`StoreError::Io`], [`StoreError::DiskFull`], [`StoreError::Engine`]), after which the
    /// store is poisoned and every later commit returns [`StoreError::Poisoned`].
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError>;

    /// As [`commit`](Store::commit), for a caller that calls
    /// [`after_commit`](Store::after_commit) right after it has acknowledged the batch (the
    /// group commit does): the store may leave work that durability does not need — a
    /// [`DiskStore`] in [`Durability::Sync`] wakes its applier thread there — so that work is
    /// off the acknowledgement's path (`docs/decisions/0022-ack-before-the-applier.md`).
    /// Nothing the store promises waits for `after_commit`: it only bounds how long that work
    /// waits. The default is `commit`.
    ///
    /// # Errors
    ///
    /// As [`Store::commit`].
    fn commit_deferred(&self, batch: &[Change]) -> Result<(), StoreError> {
        self.commit(batch)
    }

    /// The work a [`commit_deferred`](Store::commit_deferred) left, if any; call once after
    /// each, whatever it returned. The default does nothing.
    fn after_commit(&self) {}

    /// Reserves job ids up to (exclusive) `end` durably, so [`Recovered::next_id`] after a
    /// restart is `>= end`: a commit of `[Change::ReserveIds { end }]`. Never lowers the mark.
    ///
    /// # Errors
    ///
    /// As [`Store::commit`].
    fn reserve_ids(&self, end: JobId) -> Result<(), StoreError> {
        self.commit(&[Change::ReserveIds { end }])
    }

    /// Whether a write of about `bytes` bytes would be accepted now, asked *before* the
    /// caller changes anything for it: a server asks before it lets a command change its
    /// engine, so a refused write leaves no trace in memory either. The default (stores
    /// without a disk, like [`MemStore`]) accepts everything.
    ///
    /// # Errors
    ///
    /// [`StoreError::LowSpace`] when the write would eat into the free-space reserve of a
    /// [`DiskStore`] (not poisoning: a later call passes once space is freed);
    /// [`StoreError::Poisoned`] when the store refuses every write.
    fn writable(&self, bytes: u64) -> Result<(), StoreError> {
        let _ = bytes;
        Ok(())
    }

    /// The state to start the engine from: see [`Recovered`].
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] if stored bytes do not decode; I/O errors.
    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError>;

    /// The job with this id, if stored.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`]; I/O errors.
    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError>;

    /// Delayed jobs with `from_ms <= until_ms < to_ms`, in `(until_ms, id)` order, at most
    /// `limit`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`]; I/O errors.
    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError>;

    /// Calls `f(record)` for every delayed job with `from_ms <= until_ms < u64::MAX`, in
    /// `(until_ms, id)` order, each once: at start-up a server counts the far-future jobs it did
    /// not load ([`Recovered::far_delayed`]) in its due timeline and keeps their idempotency
    /// keys, in this one pass. The default reads [`delayed_between`](Self::delayed_between)
    /// in pages of 4096 records, so memory stays bounded; it costs one read of every such job.
    ///
    /// # Errors
    ///
    /// As [`delayed_between`](Self::delayed_between).
    fn for_each_due(&self, from_ms: u64, f: &mut dyn FnMut(&JobRecord)) -> Result<(), StoreError> {
        due::for_each_due(self, from_ms, f, due::PAGE)
    }
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        (**self).commit(batch)
    }
    fn commit_deferred(&self, batch: &[Change]) -> Result<(), StoreError> {
        (**self).commit_deferred(batch)
    }
    fn after_commit(&self) {
        (**self).after_commit();
    }
    fn writable(&self, bytes: u64) -> Result<(), StoreError> {
        (**self).writable(bytes)
    }
    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        (**self).recover(window_end_ms)
    }
    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        (**self).get(id)
    }
    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        (**self).delayed_between(from_ms, to_ms, limit)
    }
}
