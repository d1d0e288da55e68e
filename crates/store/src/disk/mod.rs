//! [`DiskStore`]: the embedded on-disk [`Store`] on the fjall LSM engine.
//!
//! # Layout
//!
//! One fjall 3 database in `DIR/engine/` (one journal, so a batch across tables is atomic)
//! with four tables (fjall "keyspaces"), and the write-ahead log in `DIR/wal/`
//! ([`crate::wal`]); `docs/storage-format.md` has the full description.
//!
//! | table | key | value |
//! |-------|-----|-------|
//! | `jobs` | id (u64 BE) of every job | locator: where its record is |
//! | `resident` | id (u64 BE) of every ready or buried job | record, see [`crate::record`] |
//! | `due` | `until_ms` (u64 BE) ++ id (u64 BE) of every delayed job | record |
//! | `meta` | `format_version` / `next_id` / `delayed/<tube>` | u32 BE / u64 BE / u64 BE count |
//!
//! `recover` scans `resident`, the `due` range below the window and the `delayed/` counters,
//! all sequential reads with the records inline: its cost grows with the resident set, not with
//! the number of far-future jobs. `get` costs two lookups (locator, then record).
//!
//! # Ground rules
//!
//! Only [`Inner::write`] writes the tables, under [`Inner::write_lock`], so the read-modify-write
//! of index entries and counters in a commit sees no concurrent commit; the lock also guards the
//! cached `next_id` and counters, updated only after the batch is written. Once `poison` is set,
//! nothing is written again by this handle. The periodic fsync thread (`Durability::Periodic`)
//! and the persist thread (`Durability::Sync`: syncs fjall so the log may overwrite a
//! segment) only call fjall's `persist`, outside the write lock.
//!
//! With `Durability::Sync` a commit writes its log record and syncs it, and is settled
//! (acknowledged) then; the applier thread (`tickwheel-apply`) writes its fjall batch (with
//! `meta/wal_seq`) without a sync behind it, in sequence order: a failed log write or sync
//! leaves the tables untouched (nothing of that commit is acknowledged, and memory and tables
//! agree on everything acknowledged). Until the applier has written a commit, later commits
//! plan from its overlay ([`crate::wal::apply`]) and reads of the tables wait for it; a failed
//! fjall write there poisons the store, and the log replays the commit at the next open
//! (`docs/decisions/0018-settle-on-the-log-apply-behind.md`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

mod migrate;
mod ops;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch as Batch, PersistMode};

use crate::error::is_disk_full;
use crate::space::{FreeSpace, SpaceGuard, Statvfs, REFRESH};
use tickwheel_queue::{Change, JobId, JobRecord};

use crate::plan::Prior;
use crate::record::{decode, decode_locator, due_key, id_key, split_due_key, until};
use crate::{Durability, Recovered, Store, StoreError};

/// The on-disk format version this build reads and writes (stored in `meta/format_version`).
pub const FORMAT_VERSION: u32 = 3;
/// The previous format, upgraded in place at open (it has no log; see `check_version`).
const FORMAT_2: u32 = 2;

const META_VERSION: &[u8] = b"format_version";
const META_NEXT_ID: &[u8] = b"next_id";
const META_DELAYED: &[u8] = b"delayed/";
/// The sequence number of the last log record applied to the tables (u64 BE; absent: 0).
const META_WAL_SEQ: &[u8] = b"wal_seq";

/// The tables, in the order they are opened (and copied by a migration).
const TABLES: [&str; 4] = ["jobs", "resident", "due", "meta"];

/// fjall 3 refuses (panics on) a journal limit below 64 MiB; smaller settings are raised to it.
const MIN_JOURNAL_BYTES: u64 = 64 << 20;

/// The smallest memtable of one table (256 KiB): a smaller one would flush a table file per
/// few hundred jobs.
const MIN_MEMTABLE_BYTES: u64 = 256 << 10;

/// fjall's background workers (memtable flushes and compactions share them). Two, so a long
/// compaction never holds up a flush (the fjall 2 store ran one flush and one compaction
/// worker).
const ENGINE_WORKERS: usize = 2;

/// Options for [`DiskStore::open`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DiskOptions {
    /// When a commit is acknowledged; default [`Durability::Sync`].
    pub durability: Durability,
    /// Journal bytes kept before memtables are flushed to sorted tables. Bounds the replay
    /// work (and so the startup time) after a crash. Default 64 MiB, at least 64 MiB (the
    /// engine's minimum; smaller values are raised).
    pub max_journal_bytes: u64,
    /// Block cache size in bytes. Default 16 MiB.
    pub cache_bytes: u64,
    /// Memtable bytes (all tables together) kept in memory before they are flushed to sorted
    /// tables. Bounds resident memory. Default 32 MiB. fjall 3 limits each table's memtable,
    /// not their sum: each table gets half (at least 256 KiB), as two of the four tables hold
    /// the job records, so the sum stays near this budget (at most twice it, plus the small
    /// index tables). Fixed when the store is created (or migrated): fjall keeps each table's
    /// memtable size from its creation, so a later open with another value changes nothing.
    pub max_write_buffer_bytes: u64,
    /// Free bytes to keep on the data directory's file system: a write that would leave less
    /// is refused with [`StoreError::LowSpace`] before anything is applied, and accepted again
    /// once space is freed. Default [`DEFAULT_MIN_FREE_BYTES`]; 0 turns the guard off (then a
    /// full disk fails the commit that hits it and poisons the store until a restart, see
    /// `docs/decisions/0006-free-space-guard.md`).
    pub min_free_bytes: u64,
    /// Size of each of the write-ahead log's two segments (`DIR/wal/`), written with zeros
    /// when created. With [`Durability::Sync`] each commit is one record in the log (one
    /// write and one `fdatasync` of already-written blocks), and fjall is synced in the
    /// background once a segment fills. A batch larger than a segment is committed with a
    /// sync of fjall's journal instead. Default 1 MiB; at least 4 KiB. Only used when a
    /// segment is created: existing segments keep their size.
    pub log_segment_bytes: u64,
}

/// The default free-space reserve: 64 MiB. The engine needs room it does not ask for: a
/// memtable flush writes up to [`DiskOptions::max_write_buffer_bytes`] (32 MiB by default) of
/// sorted tables before the journal they replace is deleted, and a failed flush poisons fjall;
/// compactions write their output before removing their input. Twice the write buffer covers
/// a flush plus a compaction of the same size; a store with a bigger write buffer should
/// raise the reserve with it.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// The default size of a log segment ([`DiskOptions::log_segment_bytes`]): 1 MiB, about
/// 4 000 single-put commits between two background syncs of fjall; the log takes 2 MiB.
pub const DEFAULT_LOG_SEGMENT_BYTES: u64 = 1 << 20;
/// Bytes of settled commits the applier may lag behind (the bound of its queue): at ~250
/// bytes a put, ~130 000 puts, more than a 100 ms fjall stall holds at the measured rates.
const APPLY_QUEUE_BYTES: u64 = 32 << 20;
/// The smallest log segment.
const MIN_LOG_SEGMENT_BYTES: u64 = 4 << 10;

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions {
            durability: Durability::Sync,
            max_journal_bytes: 64 << 20,
            cache_bytes: 16 << 20,
            max_write_buffer_bytes: 32 << 20,
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            log_segment_bytes: DEFAULT_LOG_SEGMENT_BYTES,
        }
    }
}

impl DiskOptions {
    /// The default options with this durability.
    pub fn with_durability(durability: Durability) -> DiskOptions {
        DiskOptions {
            durability,
            ..DiskOptions::default()
        }
    }

    /// These options with [`min_free_bytes`](DiskOptions::min_free_bytes) set.
    #[must_use]
    pub fn min_free_bytes(mut self, bytes: u64) -> DiskOptions {
        self.min_free_bytes = bytes;
        self
    }

    /// These options with [`log_segment_bytes`](DiskOptions::log_segment_bytes) set.
    #[must_use]
    pub fn log_segment_bytes(mut self, bytes: u64) -> DiskOptions {
        self.log_segment_bytes = bytes;
        self
    }
}

/// The embedded on-disk [`Store`].
///
/// Commits are serialised; put a [`GroupCommit`](crate::GroupCommit) in front to merge the
/// batches of many threads into one fsync.
///
/// # Examples
///
/// ```
/// use tickwheel_store::{DiskOptions, DiskStore, Store};
///
/// # fn main() -> Result<(), tickwheel_store::StoreError> {
/// let dir = tempfile::tempdir().expect("temp dir");
/// let store = DiskStore::open(dir.path(), DiskOptions::default())?;
/// store.reserve_ids(128)?;
/// drop(store);
/// let store = DiskStore::open(dir.path(), DiskOptions::default())?;
/// assert_eq!(store.recover(0)?.next_id, 128);
/// # Ok(())
/// # }
/// ```
pub struct DiskStore {
    inner: Arc<Inner>,
    /// Dropping it stops the periodic fsync thread.
    stop: Option<mpsc::Sender<()>>,
    flusher: Option<JoinHandle<()>>,
    /// With a log: the applier thread (writes committed batches to fjall behind the log; it
    /// holds the persist thread's request sender, so stopping it stops that thread too).
    applier: Option<JoinHandle<()>>,
    persister: Option<JoinHandle<()>>,
}

/// What commits would otherwise read from the tables on every batch. Valid while the store is
/// not poisoned (after a failed write the tables may or may not hold the batch, and nothing is
/// written again).
#[derive(Default)]
struct WriteState {
    /// `meta/next_id`, once loaded.
    next_id: Option<JobId>,
    /// One past the largest id that may be stored (from the last `jobs` key, then raised by
    /// puts). A put of an id at or above it needs no lookup of an old record: the common case,
    /// as the engine hands out increasing ids (even when it reserved them in advance).
    jobs_end: Option<JobId>,
    /// `meta/delayed/<tube>` for the tubes loaded so far.
    delayed: std::collections::HashMap<String, u64>,
    /// The write-ahead log (with [`Durability::Sync`]).
    log: Option<crate::wal::Log>,
    /// The sequence number of the last commit written to the tables (`meta/wal_seq`).
    log_seq: u64,
    /// Where the jobs of the latest commits are: a delete of one is planned without a read.
    recent: crate::plan::Recent,
}

struct Inner {
    dir: PathBuf,
    durability: Durability,
    db: Database,
    jobs: Keyspace,
    resident: Keyspace,
    due: Keyspace,
    meta: Keyspace,
    /// Held for every write; caches what commits read back (see [`WriteState`]).
    write_lock: Mutex<WriteState>,
    poison: Mutex<Option<StoreError>>,
    /// Refuses writes that would eat into the free-space reserve.
    space: SpaceGuard,
    /// [`DiskOptions::max_write_buffer_bytes`]: memtable bytes beyond it are a flush backlog
    /// the reserve was not sized for (see `Inner::backlog`).
    write_buffer: u64,
    /// Written since the last periodic fsync.
    dirty: AtomicBool,
    /// Every log record up to this sequence number is durable in fjall (its segment may be
    /// overwritten).
    log_durable: crate::wal::recycle::Covered,
    /// Commits settled on the log and not yet written to fjall, for the applier thread; the
    /// overlay holds their jobs' new states (`None`: deleted) for the next commits' plans.
    handoff: crate::wal::apply::Handoff<Batch, Option<JobRecord>>,
    /// Test hook: the applier's next fjall write fails.
    #[cfg(test)]
    apply_fault: AtomicBool,
    /// Test hook: the applier waits before each write while this is set.
    #[cfg(test)]
    apply_hold: AtomicBool,
    /// One store per directory; last, so it is released after the engine is dropped.
    _lock: crate::lock::DirLock,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("dir", &self.inner.dir)
            .field("durability", &self.inner.durability)
            .finish_non_exhaustive()
    }
}

impl DiskStore {
    /// Opens (creating if needed) the store in `dir`, replaying fjall's journal and then the
    /// write-ahead log after a crash.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnsupportedVersion`] for a store of another format version;
    /// [`StoreError::Corrupt`] if the directory holds something unreadable; I/O errors.
    pub fn open(dir: impl AsRef<Path>, options: DiskOptions) -> Result<DiskStore, StoreError> {
        let dir = dir.as_ref();
        let source = Box::new(Statvfs(dir.to_path_buf()));
        std::panic::catch_unwind(|| Self::open_unguarded(dir, options, source, REFRESH))
            .unwrap_or_else(|panic| Err(engine_panic(dir, "opening the store", panic.as_ref())))
    }

    /// [`DiskStore::open`] with a fake free-space source, for tests.
    #[cfg(test)]
    pub(crate) fn open_with_space(
        dir: &Path,
        options: DiskOptions,
        source: Box<dyn FreeSpace>,
    ) -> Result<DiskStore, StoreError> {
        Self::open_unguarded(dir, options, source, Duration::ZERO)
    }

    fn open_unguarded(
        dir: &Path,
        options: DiskOptions,
        source: Box<dyn FreeSpace>,
        refresh: Duration,
    ) -> Result<DiskStore, StoreError> {
        let dir = dir.to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        let lock = crate::lock::DirLock::acquire(&dir)?;
        // fjall 3 sizes memtables per table (its global write-buffer limit is not implemented
        // in 3.1). Two tables hold the records (`resident`, `due`); `jobs` and `meta` hold
        // a few dozen bytes a job. Half the buffer each keeps the sum near the budget. fjall
        // stores the size with the table when it creates it and ignores it afterwards.
        let memtable = (options.max_write_buffer_bytes / 2).max(MIN_MEMTABLE_BYTES);
        // A format-1 directory (fjall 2) is rewritten into `engine/` first; see `migrate`.
        let engine = migrate::prepare(&dir, memtable)?;
        let db = Database::builder(&engine)
            .manual_journal_persist(true)
            .max_journaling_size(options.max_journal_bytes.max(MIN_JOURNAL_BYTES))
            .cache_size(options.cache_bytes)
            .worker_threads(ENGINE_WORKERS)
            .open()
            .map_err(|e| open_error(&engine, e))?;
        let part = |name: &str| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable)
            })
            .map_err(|e| open_error(&engine, e))
        };
        let inner = Inner {
            jobs: part("jobs")?,
            resident: part("resident")?,
            due: part("due")?,
            meta: part("meta")?,
            db,
            durability: options.durability,
            write_lock: Mutex::new(WriteState::default()),
            poison: Mutex::new(None),
            dirty: AtomicBool::new(false),
            log_durable: crate::wal::recycle::Covered::new(0),
            handoff: crate::wal::apply::Handoff::new(APPLY_QUEUE_BYTES, 0),
            #[cfg(test)]
            apply_fault: AtomicBool::new(false),
            #[cfg(test)]
            apply_hold: AtomicBool::new(false),
            space: SpaceGuard::new(&dir, source, options.min_free_bytes, refresh),
            write_buffer: options.max_write_buffer_bytes,
            dir,
            _lock: lock,
        };
        inner.check_version()?;
        let wal_dir = dir_of_log(&inner.dir);
        let applied = inner.log_seq()?;
        let segment = options.log_segment_bytes.max(MIN_LOG_SEGMENT_BYTES);
        let create = options.durability == Durability::Sync;
        let (log, replay) = crate::wal::Log::open(&wal_dir, segment, applied, create)
            .map_err(|e| StoreError::io(&wal_dir, e))?;
        {
            let mut ws = inner.lock_writes();
            ws.log = log;
            ws.log_seq = applied;
        }
        let inner = Arc::new(inner);
        let (stop, flusher) = match options.durability {
            Durability::Periodic { interval_ms } => {
                let (tx, rx) = mpsc::channel::<()>();
                let dir = inner.dir.clone();
                let inner = Arc::clone(&inner);
                let handle = std::thread::Builder::new()
                    .name("tickwheel-store-fsync".into())
                    .spawn(move || {
                        periodic_fsync(&inner, &rx, Duration::from_millis(interval_ms.max(1)))
                    })
                    .map_err(|e| StoreError::io(&dir, e))?;
                (Some(tx), Some(handle))
            }
            Durability::Sync | Durability::None => (None, None),
        };
        let mut store = DiskStore {
            inner,
            stop,
            flusher,
            applier: None,
            persister: None,
        };
        store.replay(replay)?;
        if create {
            let (tx, rx) = crate::wal::recycle::channel::<u64>();
            let inner = Arc::clone(&store.inner);
            let handle = std::thread::Builder::new()
                .name("tickwheel-store-persist".into())
                .spawn(move || persist_thread(&inner, &rx))
                .map_err(|e| StoreError::io(&wal_dir, e))?;
            store.persister = Some(handle);
            let inner = Arc::clone(&store.inner);
            let handle = std::thread::Builder::new()
                .name("tickwheel-apply".into())
                .spawn(move || apply_thread(&inner, &tx))
                .map_err(|e| StoreError::io(&wal_dir, e))?;
            store.applier = Some(handle);
        }
        Ok(store)
    }

    /// Replays the log records fjall does not have, then makes everything durable in fjall,
    /// so the log may be overwritten from its start.
    fn replay(&self, replay: crate::wal::Replay) -> Result<(), StoreError> {
        let s = &*self.inner;
        let wal_dir = dir_of_log(&s.dir);
        for found in replay.records {
            let batch = crate::wal::codec::decode_changes(&found.payload).map_err(|d| {
                StoreError::Corrupt {
                    file: wal_dir.clone(),
                    offset: found.offset,
                    detail: format!("log record {} checks but does not decode: {d}", found.seq),
                }
            })?;
            self.apply(&batch, Some(found.seq))?;
        }
        let mut ws = s.lock_writes();
        if replay.max_seen > ws.log_seq {
            // Records past a gap (never replayed): number new records past them.
            let mut b = s.db.batch();
            b.insert(&s.meta, META_WAL_SEQ, replay.max_seen.to_be_bytes());
            s.write_unchecked(b, PersistMode::Buffer)?;
            ws.log_seq = replay.max_seen;
        }
        // Also covers what fjall has only in the page cache (written before a process crash
        // and not synced): the log is about to overwrite the records that hold it.
        s.persist_all()?;
        s.log_durable.cover(ws.log_seq);
        Ok(())
    }

    /// Makes every commit so far durable in fjall's own files (one sync of its journal), so
    /// the write-ahead log holds nothing that must be replayed. Commits do not need it (they
    /// are durable when they return); it shortens the next open's replay.
    ///
    /// # Errors
    ///
    /// The engine's I/O error; the store is poisoned then.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let s = &*self.inner;
        let ws = s.lock_writes();
        if let Some(p) = s.poisoned() {
            return Err(p);
        }
        s.drain()?;
        s.persist_all()?;
        s.log_durable.cover(ws.log_seq);
        Ok(())
    }

    /// Holds the applier before its next write (`true`) or lets it go on (tests).
    #[cfg(test)]
    pub(crate) fn hold_applier(&self, hold: bool) {
        self.inner.apply_hold.store(hold, Ordering::SeqCst);
    }

    /// The last commit the applier wrote to fjall (tests).
    #[cfg(test)]
    pub(crate) fn applied_seq(&self) -> u64 {
        self.inner.handoff.applied_seq()
    }

    /// The last commit settled in the log (tests).
    #[cfg(test)]
    pub(crate) fn settled_seq(&self) -> u64 {
        self.inner.lock_writes().log_seq
    }

    /// Makes the applier's next fjall write fail (tests).
    #[cfg(test)]
    pub(crate) fn set_apply_fault(&self) {
        self.inner.apply_fault.store(true, Ordering::SeqCst);
    }

    /// Fails the log's next appends (tests).
    #[cfg(test)]
    pub(crate) fn set_log_fault(&self, fault: Option<crate::wal::LogFault>) {
        if let Some(log) = self.inner.lock_writes().log.as_mut() {
            log.fault = fault;
        }
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Bytes the store uses on disk (journals and tables).
    ///
    /// # Errors
    ///
    /// I/O errors while listing the engine's files.
    pub fn disk_space(&self) -> Result<u64, StoreError> {
        let log = self
            .inner
            .lock_writes()
            .log
            .as_ref()
            .map_or(0, |l| l.bytes());
        self.inner
            .db
            .disk_space()
            .map(|b| b + log)
            .map_err(|e| self.inner.engine_error(e))
    }
}

fn periodic_fsync(inner: &Inner, stop: &mpsc::Receiver<()>, every: Duration) {
    loop {
        match stop.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        if inner.dirty.swap(false, Ordering::AcqRel) {
            // Not under the write lock: commits go on (acknowledged before this fsync, as
            // `Periodic` promises) while fjall's journal lock orders them around the fsync. If
            // the fsync fails, fjall refuses every later batch itself, and we poison too.
            if inner.poisoned().is_some() {
                return;
            }
            if let Err(e) = inner.db.persist(PersistMode::SyncData) {
                let err = inner.engine_error(e);
                inner.set_poison(&err);
                return;
            }
        }
    }
}

/// The persist thread of a store with a log: on request, syncs fjall (everything committed
/// so far) and records the sequence number it covers, so the log may overwrite a segment
/// without waiting for that sync on a commit (see [`crate::wal::recycle`]).
fn persist_thread(inner: &Inner, requests: &crate::wal::recycle::Receiver<u64>) {
    crate::wal::recycle::persist_loop(
        requests,
        &inner.log_durable,
        || inner.poisoned().is_some(),
        || inner.persist_all(),
    );
}

/// The applier thread of a store with a log: writes each settled commit's fjall batch (without
/// a sync) in sequence order, then forwards the persist requests queued with it, so a request
/// reaches the persist thread only after every commit it covers is in fjall. On a failed
/// write it poisons the store and stops: the log keeps the commit (its segment is not
/// recycled: no later persist request is sent), and the next open replays it.
fn apply_thread(inner: &Inner, persist: &crate::wal::recycle::Sender<u64>) {
    while let Some(job) = inner.handoff.next() {
        #[cfg(test)]
        while inner.apply_hold.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        #[cfg(test)]
        if inner.apply_fault.swap(false, Ordering::SeqCst) {
            let err = StoreError::io(&inner.dir, std::io::Error::from_raw_os_error(5));
            inner.set_poison(&err);
            inner.handoff.fail();
            return;
        }
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            inner.write_unchecked(job.batch, PersistMode::Buffer)
        }))
        .unwrap_or_else(|panic| {
            let err = engine_panic(&inner.dir, "applying a commit", panic.as_ref());
            inner.set_poison(&err);
            Err(err)
        });
        if written.is_err() {
            // `write_unchecked` poisoned the store.
            inner.handoff.fail();
            return;
        }
        inner.handoff.applied(job.seq, &job.keys);
        if let Some(upto) = job.then_persist {
            let _ = persist.send(upto);
        }
    }
}

/// The log's directory in a data directory.
fn dir_of_log(dir: &Path) -> PathBuf {
    dir.join(crate::wal::WAL_DIR)
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.flusher.take() {
            // A panic in the fsync thread already poisoned nothing we could report here.
            let _ = h.join();
        }
        self.inner.handoff.close();
        if let Some(h) = self.applier.take() {
            // It applies what is queued, then drops the persist thread's sender.
            let _ = h.join();
        }
        if let Some(h) = self.persister.take() {
            let _ = h.join();
        }
        if self.inner.poisoned().is_none() {
            // Best effort on a clean close; errors cannot be reported from drop.
            let _ = self.inner.db.persist(PersistMode::SyncAll);
        }
    }
}

fn open_error(dir: &Path, e: fjall::Error) -> StoreError {
    let corrupt = |detail: String| StoreError::Corrupt {
        file: dir.to_path_buf(),
        offset: 0,
        detail,
    };
    match e {
        fjall::Error::JournalRecovery(r) => StoreError::Corrupt {
            file: dir.to_path_buf(),
            offset: 0,
            detail: format!("journal recovery failed: {r:?}"),
        },
        fjall::Error::InvalidVersion(v) => corrupt(format!(
            "the engine's own version marker is unknown or unreadable: {v:?}"
        )),
        fjall::Error::Unrecoverable | fjall::Error::Storage(lsm_tree::Error::Unrecoverable) => {
            corrupt("the engine cannot recover its files (see its log)".into())
        }
        fjall::Error::InvalidTrailer
        | fjall::Error::InvalidTag(_)
        | fjall::Error::Decompress(_) => corrupt(format!("engine metadata does not decode: {e:?}")),
        fjall::Error::Storage(
            d @ (lsm_tree::Error::Decompress(_)
            | lsm_tree::Error::InvalidVersion(_)
            | lsm_tree::Error::ChecksumMismatch { .. }
            | lsm_tree::Error::InvalidTag(_)
            | lsm_tree::Error::InvalidTrailer
            | lsm_tree::Error::InvalidHeader(_)
            | lsm_tree::Error::Utf8(_)),
        ) => corrupt(format!("a table file does not decode: {d:?}")),
        fjall::Error::Storage(lsm_tree::Error::Io(io)) | fjall::Error::Io(io)
            if io.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            corrupt(format!("a file is shorter than its contents say: {io}"))
        }
        fjall::Error::Storage(lsm_tree::Error::Io(io)) | fjall::Error::Io(io) => {
            StoreError::io(dir, io)
        }
        other => StoreError::Engine {
            path: dir.to_path_buf(),
            source: Arc::new(other),
        },
    }
}

/// Finds an I/O error in an error's source chain.
fn find_io<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cur = err.source();
    }
    None
}

fn be_u64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

impl Inner {
    fn lock_writes(&self) -> MutexGuard<'_, WriteState> {
        self.write_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the applier has written every settled commit to fjall (before a read of
    /// the tables, or a write or sync of fjall on the commit path).
    fn drain(&self) -> Result<(), StoreError> {
        self.stopped(self.handoff.drain())
    }

    /// Waits until the applier has written every commit up to `seq` to fjall.
    fn wait_applied(&self, seq: u64) -> Result<(), StoreError> {
        self.stopped(self.handoff.wait_applied(seq))
    }

    fn stopped(&self, r: Result<(), crate::wal::apply::Stopped>) -> Result<(), StoreError> {
        r.map_err(|crate::wal::apply::Stopped| {
            // The applier poisons the store before it stops.
            self.poisoned().unwrap_or_else(|| {
                StoreError::io(&self.dir, std::io::Error::other("the applier stopped"))
                    .into_poisoned()
            })
        })
    }

    fn poisoned(&self) -> Option<StoreError> {
        self.poison
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_poison(&self, cause: &StoreError) {
        let mut p = self.poison.lock().unwrap_or_else(|e| e.into_inner());
        if p.is_none() {
            *p = Some(cause.clone().into_poisoned());
        }
    }

    /// Classifies an engine error. fjall turns a failed journal write or fsync into
    /// `Error::Poisoned` and keeps the cause to its log, so for that case we probe the
    /// directory for free space to tell a full disk from other failures.
    fn engine_error(&self, e: fjall::Error) -> StoreError {
        if let Some(io) = find_io(&e) {
            let kind = io.kind();
            let raw = io.raw_os_error();
            let copy = match raw {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(kind, io.to_string()),
            };
            return StoreError::io(&self.dir, copy);
        }
        if matches!(e, fjall::Error::Poisoned) {
            if let Some(full) = probe_disk_full(&self.dir) {
                return full;
            }
        }
        StoreError::Engine {
            path: self.dir.clone(),
            source: Arc::new(e),
        }
    }

    fn corrupt(&self, table: &Keyspace, detail: String) -> StoreError {
        StoreError::Corrupt {
            file: table.path().to_path_buf(),
            offset: 0,
            detail,
        }
    }

    fn check_version(&self) -> Result<(), StoreError> {
        let read = |e| self.engine_error(e);
        match self.meta.get(META_VERSION).map_err(read)? {
            Some(v) => {
                let found = <[u8; 4]>::try_from(&*v)
                    .map(u32::from_be_bytes)
                    .map_err(|_| {
                        self.corrupt(
                            &self.meta,
                            format!("format_version is {} bytes, not 4", v.len()),
                        )
                    })?;
                if found == FORMAT_2 {
                    // Format 2 is format 3 without a log: nothing to convert. Marking it 3
                    // before the log is written keeps a format-2 build (which would ignore
                    // the log and lose what only the log holds) from opening it again.
                    let mut b = self.db.batch();
                    b.insert(&self.meta, META_VERSION, FORMAT_VERSION.to_be_bytes());
                    return self.write(b, 64);
                }
                if found != FORMAT_VERSION {
                    return Err(StoreError::UnsupportedVersion {
                        path: self.dir.clone(),
                        found,
                        supported: FORMAT_VERSION,
                    });
                }
                Ok(())
            }
            None => {
                let empty =
                    self.jobs.first_key_value().is_none() && self.meta.first_key_value().is_none();
                if !empty {
                    return Err(self.corrupt(
                        &self.meta,
                        "format_version is missing but the store holds data".into(),
                    ));
                }
                let mut b = self.db.batch();
                b.insert(&self.meta, META_VERSION, FORMAT_VERSION.to_be_bytes());
                self.write(b, 64)
            }
        }
    }

    /// Commits a fjall batch of about `bytes` bytes with this store's durability, poisoning on
    /// failure. Refuses (without poisoning) a batch the disk may not hold (see
    /// [`crate::space`]).
    fn write(&self, batch: Batch, bytes: u64) -> Result<(), StoreError> {
        self.admit(bytes)?;
        let result = self.write_unchecked(batch, self.mode());
        self.space.spent(bytes);
        result
    }

    /// Refuses (without poisoning) a commit of about `bytes` bytes the disk may not hold.
    fn admit(&self, bytes: u64) -> Result<(), StoreError> {
        self.space
            .check_commit(bytes.saturating_add(self.backlog()))
    }

    /// Bytes of fjall memtables (active and sealed) beyond the configured write buffer: a
    /// backlog of flushes that will write about that many bytes of tables in the background,
    /// which the reserve ([`DEFAULT_MIN_FREE_BYTES`]: twice the write buffer) was not sized
    /// for; a flush that fails for want of space poisons fjall. Without fsyncs on fjall's
    /// commit path (the write-ahead log, ADR 0014) writes can outrun the flushes: a full-tmpfs
    /// test lost its store to such a flush in 3 of 20 runs before the backlog was counted.
    /// (`write_buffer_size` is fjall's own count, marked experimental; the lock file pins the
    /// version.)
    ///
    /// Settled commits still queued for the applier (ADR 0018) count too: their bytes reach
    /// the memtables later.
    fn backlog(&self) -> u64 {
        self.backlog_with(self.handoff.queued())
    }

    /// [`backlog`](Self::backlog) with the applier's queued bytes already read.
    fn backlog_with(&self, queued: u64) -> u64 {
        self.db
            .write_buffer_size()
            .saturating_add(queued)
            .saturating_sub(self.write_buffer)
    }

    /// The fjall persist mode of a commit that does not go through the log.
    fn mode(&self) -> PersistMode {
        match self.durability {
            Durability::Sync => PersistMode::SyncData,
            Durability::Periodic { .. } | Durability::None => PersistMode::Buffer,
        }
    }

    /// Syncs fjall (every journal), poisoning on failure.
    fn persist_all(&self) -> Result<(), StoreError> {
        self.db.persist(PersistMode::SyncAll).map_err(|e| {
            let err = self.engine_error(e);
            self.set_poison(&err);
            err
        })
    }

    /// `meta/wal_seq`: the last log record applied to the tables.
    fn log_seq(&self) -> Result<u64, StoreError> {
        self.meta_u64(META_WAL_SEQ, "wal_seq")
    }

    /// A big-endian `u64` kept in `meta` under `key` (0 when absent); `name` names it in a
    /// corruption error.
    fn meta_u64(&self, key: &[u8], name: &str) -> Result<u64, StoreError> {
        match self.meta.get(key).map_err(|e| self.engine_error(e))? {
            None => Ok(0),
            Some(v) => {
                be_u64(&v).ok_or_else(|| self.corrupt(&self.meta, format!("{name} is not 8 bytes")))
            }
        }
    }

    fn write_unchecked(&self, batch: Batch, mode: PersistMode) -> Result<(), StoreError> {
        match batch.durability(Some(mode)).commit() {
            Ok(()) => {
                self.dirty.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                let err = self.engine_error(e);
                self.set_poison(&err);
                Err(err)
            }
        }
    }

    /// Job `id`'s locator: `None` if there is no such job, else `Some(None)` for a ready or
    /// buried job (in `resident`), `Some(Some(until))` for a delayed one (in `due`).
    fn locator(&self, id: JobId) -> Result<Option<Option<u64>>, StoreError> {
        let loc = self
            .jobs
            .get(id_key(id))
            .map_err(|e| self.engine_error(e))?;
        let Some(loc) = loc else { return Ok(None) };
        match decode_locator(&loc) {
            Some(place) => Ok(Some(place)),
            None => Err(self.corrupt(
                &self.jobs,
                format!("job {id}: bad locator of {} bytes", loc.len()),
            )),
        }
    }

    /// Where job `id` is stored, if it is: its locator alone for a ready or buried job; its
    /// record too for a delayed one (the tube is in the record).
    fn locate(&self, id: JobId) -> Result<Option<Prior>, StoreError> {
        match self.locator(id)? {
            None => Ok(None),
            Some(None) => Ok(Some(Prior::Resident)),
            Some(place) => self.record_at(id, place).map(|r| Some(Prior::of(&r))),
        }
    }

    fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        match self.locator(id)? {
            None => Ok(None),
            Some(place) => self.record_at(id, place).map(Some),
        }
    }

    /// The record of job `id`, which its locator places at `place` (see [`Self::locator`]).
    fn record_at(&self, id: JobId, place: Option<u64>) -> Result<JobRecord, StoreError> {
        let (table, value) = match place {
            None => (&self.resident, self.resident.get(id_key(id))),
            Some(until) => (&self.due, self.due.get(due_key(until, id))),
        };
        match value.map_err(|e| self.engine_error(e))? {
            Some(v) => decode(id, &v).map_err(|d| self.corrupt(table, d)),
            None => Err(self.corrupt(
                table,
                format!("job {id} is listed in `jobs` but its record is missing"),
            )),
        }
    }

    fn delayed_count(&self, tube: &str) -> Result<u64, StoreError> {
        let key = [META_DELAYED, tube.as_bytes()].concat();
        match self.meta.get(&key).map_err(|e| self.engine_error(e))? {
            None => Ok(0),
            Some(v) => be_u64(&v).ok_or_else(|| {
                self.corrupt(
                    &self.meta,
                    format!("counter for tube {tube:?} is not 8 bytes"),
                )
            }),
        }
    }

    /// Decodes an entry of the `due` table, checking that key and record agree.
    fn due_record(&self, k: &[u8], v: &[u8]) -> Result<JobRecord, StoreError> {
        let (due, id) = split_due_key(k)
            .ok_or_else(|| self.corrupt(&self.due, format!("key of {} bytes", k.len())))?;
        let r = decode(id, v).map_err(|d| self.corrupt(&self.due, d))?;
        if until(&r) != Some(due) {
            return Err(self.corrupt(
                &self.due,
                format!(
                    "job {id} is indexed as due at {due} but its record says {:?}",
                    r.state
                ),
            ));
        }
        Ok(r)
    }

    /// One past the largest stored job id (0 if none).
    fn jobs_end(&self) -> Result<JobId, StoreError> {
        let k = match self.jobs.last_key_value() {
            None => return Ok(0),
            Some(kv) => kv.key().map_err(|e| self.engine_error(e))?,
        };
        be_u64(&k)
            .map(|id| id.saturating_add(1))
            .ok_or_else(|| self.corrupt(&self.jobs, format!("key of {} bytes", k.len())))
    }

    fn next_id(&self) -> Result<JobId, StoreError> {
        self.meta_u64(META_NEXT_ID, "next_id")
    }
}

/// Writes and syncs a small file in `dir`; `Some(DiskFull)` if that fails for lack of space.
fn probe_disk_full(dir: &Path) -> Option<StoreError> {
    use std::io::Write;
    let path = dir.join(".space-probe");
    let result = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(&[0u8; 64 << 10])?;
        f.sync_data()
    });
    let _ = std::fs::remove_file(&path);
    match result {
        Err(e) if is_disk_full(&e) => Some(StoreError::DiskFull {
            path: dir.to_path_buf(),
            source: Some(Arc::new(e)),
        }),
        _ => None,
    }
}

impl DiskStore {
    /// Runs `f`, turning a panic inside the engine into [`StoreError::Corrupt`] and poisoning
    /// the store. fjall 2.11 could panic on damaged table files (e.g. a varint overflow while
    /// decoding a block, found by `tests/it/corrupt.rs`); invariant 4 says no input panics us.
    fn guarded<T>(
        &self,
        what: &str,
        f: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(r) => r,
            Err(panic) => {
                let err = engine_panic(&self.inner.dir, what, panic.as_ref());
                self.inner.set_poison(&err);
                Err(err)
            }
        }
    }
}

fn engine_panic(dir: &Path, what: &str, panic: &(dyn std::any::Any + Send)) -> StoreError {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    StoreError::Corrupt {
        file: dir.to_path_buf(),
        offset: 0,
        detail: format!("the storage engine panicked while {what}: {msg}"),
    }
}

impl Store for DiskStore {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        let result = self.commit_deferred(batch);
        self.after_commit();
        result
    }

    /// Leaves the applier's wake-up to [`after_commit`](Store::after_commit): a
    /// [`Durability::Sync`] commit queues its fjall batch for the applier without waking it.
    fn commit_deferred(&self, batch: &[Change]) -> Result<(), StoreError> {
        self.guarded("committing", || self.commit_unguarded(batch))
    }

    /// Wakes the applier for the batches [`commit_deferred`](Store::commit_deferred) queued.
    fn after_commit(&self) {
        self.inner.handoff.wake();
    }

    fn writable(&self, bytes: u64) -> Result<(), StoreError> {
        if let Some(p) = self.inner.poisoned() {
            return Err(p);
        }
        let queued = self.inner.handoff.queued();
        match self.inner.space.check(
            bytes
                .saturating_add(self.inner.backlog_with(queued))
                .saturating_add(queued),
        ) {
            // Near the reserve while settled commits wait for the applier (ADR 0018): their
            // bytes reach fjall's journal later and are not in the free-space reading yet.
            // Wait for the applier, then decide on a fresh reading that has them (only near
            // the reserve, so the hot path never waits here).
            Err(StoreError::LowSpace { .. }) if queued > 0 => {
                self.inner.drain()?;
                self.inner
                    .space
                    .check_fresh(bytes.saturating_add(self.inner.backlog()))
            }
            other => other,
        }
    }

    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        self.guarded("recovering", || self.recover_unguarded(window_end_ms))
    }

    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.guarded("reading a job", || self.get_unguarded(id))
    }

    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.guarded("reading the due index", || {
            self.delayed_between_unguarded(from_ms, to_ms, limit)
        })
    }
}
