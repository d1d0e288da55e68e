//! The free-space guard of [`DiskStore`](crate::DiskStore): refuse a write while the data
//! directory's file system has less than a reserve free, before anything is written.
//!
//! # Why
//!
//! A write the disk cannot hold poisons the store: every later write is refused until a
//! restart. The guard refuses such a write *before* it starts, without poisoning, so writes
//! resume by themselves once space is freed. (It was first a correctness fix: fjall 2.11
//! discarded the error of the journal write itself, fjall-rs/fjall#304 and #308, and could
//! acknowledge a torn batch on a full disk. fjall 3, which the store uses since format 2,
//! returns that error, so without the guard a full disk now fails the commit instead of
//! losing it.) See `docs/decisions/0006-free-space-guard.md` and `0010-fjall-3.md`.
//!
//! # Two checks
//!
//! - [`SpaceGuard::check`], the *admission* check, asked before an operation runs (the server
//!   asks through [`Store::writable`](crate::Store::writable) before it lets a command change
//!   the engine): free space, less the bytes the caller says it is about to write, must stay at
//!   or above the reserve. An acceptance may rest on a cached reading (taken by each
//!   commit's backstop, less the bytes it wrote, and read again when older than
//!   [`REFRESH`]), so it costs a clock read on the hot path; a refusal always rests on a fresh
//!   one, so space freed by an operator is seen at once.
//!   A refusal is [`StoreError::LowSpace`]: nothing was applied and nothing is poisoned;
//!   once space returns, the next check passes.
//! - [`SpaceGuard::check_commit`], the *backstop*, right before the engine writes a batch,
//!   with a fresh `statvfs` and the batch's real size: it refuses only when the batch would eat
//!   into the second half of the reserve (admission estimates were too low, or another
//!   process filled the disk). That refusal still prevents the torn write, but the caller
//!   already changed its memory for the batch, so a group commit treats it as a failure.
//!
//! Neither closes the race with another process filling the disk between the check and the
//! write; the reserve only makes it unlikely (see the ADR).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::StoreError;

/// How long a cached free-space reading is used by [`SpaceGuard::check`] before it is read
/// again. `statvfs` costs about a microsecond; at most 20 readings a second keeps it off the
/// hot path, and a disk freed by an operator is noticed within this time.
pub(crate) const REFRESH: Duration = Duration::from_millis(50);

/// Where free space comes from: `statvfs` on the data directory, or a fake in tests.
pub(crate) trait FreeSpace: Send + Sync {
    /// Bytes an unprivileged writer can still allocate on the file system.
    fn free_bytes(&self) -> std::io::Result<u64>;
}

/// `statvfs(2)` of a directory: `f_bavail * f_frsize` (the space an unprivileged process may
/// use; root may use the blocks reserved for it too, which we leave alone).
pub(crate) struct Statvfs(pub(crate) PathBuf);

impl FreeSpace for Statvfs {
    fn free_bytes(&self) -> std::io::Result<u64> {
        let st = rustix::fs::statvfs(&self.0).map_err(std::io::Error::from)?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }
}

/// The guard: a reserve, a source of free space, and a cached reading.
pub(crate) struct SpaceGuard {
    dir: PathBuf,
    source: Box<dyn FreeSpace>,
    /// The reserve in bytes; 0 turns both checks off.
    min_free: u64,
    refresh: Duration,
    /// The last reading and when it was taken (`None` before the first).
    cached: Mutex<Option<(Instant, u64)>>,
}

impl std::fmt::Debug for SpaceGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpaceGuard")
            .field("dir", &self.dir)
            .field("min_free", &self.min_free)
            .finish_non_exhaustive()
    }
}

impl SpaceGuard {
    pub(crate) fn new(
        dir: &Path,
        source: Box<dyn FreeSpace>,
        min_free: u64,
        refresh: Duration,
    ) -> SpaceGuard {
        SpaceGuard {
            dir: dir.to_path_buf(),
            source,
            min_free,
            refresh,
            cached: Mutex::new(None),
        }
    }

    /// Reads free space now and caches it, unless a reading begun later is cached already
    /// (a reading begun before a commit's refresh must not replace it: the commit's bytes
    /// would count neither in the reading nor as queued).
    fn read(&self) -> Result<u64, StoreError> {
        let at = Instant::now();
        let free = self
            .source
            .free_bytes()
            .map_err(|e| StoreError::io(&self.dir, e))?;
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if cached.is_none_or(|(then, _)| then <= at) {
            *cached = Some((at, free));
        }
        Ok(free)
    }

    /// The cached reading if fresh enough, else a new one.
    fn free(&self) -> Result<u64, StoreError> {
        let cached = *self.cached.lock().unwrap_or_else(|e| e.into_inner());
        match cached {
            Some((at, free)) if at.elapsed() < self.refresh => Ok(free),
            _ => self.read(),
        }
    }

    fn refuse(&self, free: u64, need: u64, reserve: u64) -> StoreError {
        StoreError::LowSpace {
            path: self.dir.clone(),
            free,
            need,
            reserve,
        }
    }

    /// Admission: `Ok` if `need` more bytes leave at least the reserve free.
    ///
    /// # Errors
    ///
    /// [`StoreError::LowSpace`] if not; an I/O error (not poisoning either) if free space
    /// cannot be read: a store that cannot tell must not promise.
    pub(crate) fn check(&self, need: u64) -> Result<(), StoreError> {
        if self.min_free == 0 {
            return Ok(());
        }
        if self.free()? >= need.saturating_add(self.min_free) {
            return Ok(());
        }
        // A refusal always rests on a fresh reading: space freed by an operator is seen at
        // once, and a refused write costs one `statvfs`.
        self.check_fresh(need)
    }

    /// Admission on a fresh reading, never the cached one: for a caller that just waited for
    /// bytes to reach the disk (the store's `writable` after waiting for its applier).
    ///
    /// # Errors
    ///
    /// As [`check`](SpaceGuard::check).
    pub(crate) fn check_fresh(&self, need: u64) -> Result<(), StoreError> {
        if self.min_free == 0 {
            return Ok(());
        }
        let free = self.read()?;
        if free >= need.saturating_add(self.min_free) {
            return Ok(());
        }
        Err(self.refuse(free, need, self.min_free))
    }

    /// Backstop before a batch of `bytes` is written: a fresh reading; refuses if the batch
    /// would leave less than half the reserve.
    ///
    /// # Errors
    ///
    /// As [`check`](SpaceGuard::check).
    pub(crate) fn check_commit(&self, bytes: u64) -> Result<(), StoreError> {
        if self.min_free == 0 {
            return Ok(());
        }
        let free = self.read()?;
        let floor = self.min_free / 2;
        if free < bytes.saturating_add(floor) {
            return Err(self.refuse(free, bytes, floor));
        }
        Ok(())
    }

    /// Counts `bytes` just written (after a commit) against the cached reading, so the next
    /// admission sees what the commit took without a second `statvfs`: the commit's backstop
    /// ([`check_commit`](SpaceGuard::check_commit)) read free space moments before, and a
    /// buffered write may not even be allocated yet, so a reading now would see no less.
    /// The next commit's backstop (or the [`REFRESH`] age) replaces the estimate with a
    /// reading.
    pub(crate) fn spent(&self, bytes: u64) {
        if self.min_free > 0 {
            let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, free)) = cached.as_mut() {
                *free = free.saturating_sub(bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Free space set by the test; `u64::MAX` means "fail to read".
    struct Fake(Arc<AtomicU64>);

    impl FreeSpace for Fake {
        fn free_bytes(&self) -> std::io::Result<u64> {
            match self.0.load(Ordering::Relaxed) {
                u64::MAX => Err(std::io::Error::from_raw_os_error(5)),
                n => Ok(n),
            }
        }
    }

    fn guard(min_free: u64, refresh: Duration) -> (SpaceGuard, Arc<AtomicU64>) {
        let free = Arc::new(AtomicU64::new(0));
        let g = SpaceGuard::new(
            Path::new("/data"),
            Box::new(Fake(free.clone())),
            min_free,
            refresh,
        );
        (g, free)
    }

    #[test]
    fn admission_keeps_the_reserve_and_passes_again_when_space_returns() {
        let (g, free) = guard(1000, Duration::ZERO);
        free.store(1500, Ordering::Relaxed);
        assert!(g.check(500).is_ok(), "exactly the reserve left");
        let err = g.check(501).expect_err("one byte into the reserve");
        assert!(
            matches!(
                err,
                StoreError::LowSpace {
                    free: 1500,
                    need: 501,
                    reserve: 1000,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.poisons(), "a refusal must not poison");
        assert!(err.to_string().contains("/data"), "{err}");
        free.store(999, Ordering::Relaxed);
        assert!(g.check(0).is_err(), "below the reserve even for nothing");
        free.store(10_000, Ordering::Relaxed);
        assert!(g.check(501).is_ok(), "space returned: accepted again");
    }

    #[test]
    fn admission_uses_the_cached_reading_until_refreshed() {
        let (g, free) = guard(1000, Duration::from_secs(3600));
        free.store(5000, Ordering::Relaxed);
        assert!(g.check(0).is_ok());
        free.store(0, Ordering::Relaxed);
        assert!(g.check(0).is_ok(), "cached reading within the refresh time");
        free.store(5000, Ordering::Relaxed);
        assert!(g.check_commit(3000).is_ok(), "the backstop reads afresh");
        // The commit took the space; the guard counts it without reading again.
        free.store(1200, Ordering::Relaxed);
        g.spent(3000);
        assert!(
            g.check(1500).is_err(),
            "the bytes a commit spent count against the cached reading"
        );
        free.store(5000, Ordering::Relaxed);
        assert!(g.check(1500).is_ok(), "a refusal reads afresh");
        g.spent(3000);
        assert!(g.check(1000).is_ok(), "the estimate alone still has room");
        free.store(0, Ordering::Relaxed);
        assert!(g.check_commit(0).is_err(), "the next backstop reads afresh");
        free.store(5000, Ordering::Relaxed);
        assert!(g.check(0).is_ok(), "a refusal reads afresh first");
        free.store(0, Ordering::Relaxed);
        assert!(g.check_commit(100).is_err(), "the backstop reads afresh");
        free.store(5000, Ordering::Relaxed);
        assert!(g.check_commit(100).is_ok());
    }

    #[test]
    fn backstop_allows_half_the_reserve() {
        let (g, free) = guard(1000, Duration::ZERO);
        free.store(600, Ordering::Relaxed);
        assert!(g.check(0).is_err(), "admission refuses below the reserve");
        assert!(g.check_commit(100).is_ok(), "the backstop keeps half of it");
        let err = g.check_commit(101).expect_err("into the last half");
        assert!(
            matches!(err, StoreError::LowSpace { reserve: 500, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn unreadable_free_space_refuses_without_poisoning() {
        let (g, free) = guard(1000, Duration::ZERO);
        free.store(u64::MAX, Ordering::Relaxed);
        let err = g.check(0).expect_err("cannot tell, cannot promise");
        assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
        assert!(g.check_commit(0).is_err());
        free.store(5000, Ordering::Relaxed);
        assert!(g.check(0).is_ok());
    }

    #[test]
    fn a_zero_reserve_turns_the_guard_off() {
        let (g, free) = guard(0, Duration::ZERO);
        free.store(u64::MAX, Ordering::Relaxed);
        assert!(g.check(u64::MAX).is_ok());
        assert!(g.check_commit(u64::MAX).is_ok());
    }

    fn put(id: u64, body_len: usize) -> crate::Change {
        crate::Change::Put(crate::JobRecord {
            id,
            tube: crate::TubeName::default_tube(),
            priority: 0,
            ttr: 1000,
            state: crate::DurableState::Ready,
            created: 0,
            body: bytes::Bytes::from(vec![b'x'; body_len]),
            idempotency_key: None,
            history: Default::default(),
        })
    }

    fn disk(dir: &Path, free: &Arc<AtomicU64>, min_free: u64) -> crate::DiskStore {
        let options = crate::DiskOptions {
            min_free_bytes: min_free,
            ..crate::DiskOptions::default()
        };
        crate::DiskStore::open_with_space(dir, options, Box::new(Fake(free.clone()))).expect("open")
    }

    #[test]
    fn disk_store_refuses_below_the_reserve_and_accepts_again_without_reopening() {
        use crate::Store;
        let dir = tempfile::tempdir().expect("temp dir");
        let free = Arc::new(AtomicU64::new(1 << 40));
        let store = disk(dir.path(), &free, 1 << 20);
        store.commit(&[put(1, 1000)]).expect("room");
        free.store(600 << 10, Ordering::Relaxed);
        let err = store.writable(0).expect_err("below the reserve");
        assert!(matches!(err, StoreError::LowSpace { .. }), "{err:?}");
        let err = store
            .commit(&[put(2, 200 << 10)])
            .expect_err("the backstop refuses a batch into the last half of the reserve");
        assert!(matches!(err, StoreError::LowSpace { .. }), "{err:?}");
        assert_eq!(store.get(1).expect("reads work").map(|r| r.id), Some(1));
        assert_eq!(
            store.get(2).expect("reads work"),
            None,
            "nothing of it applied"
        );
        free.store(1 << 40, Ordering::Relaxed);
        store.writable(0).expect("space returned");
        store.commit(&[put(3, 1000)]).expect("not poisoned");
        drop(store);
        let store = disk(dir.path(), &free, 1 << 20);
        let ids: Vec<u64> = store
            .recover(0)
            .expect("recover")
            .resident
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![1, 3]);
    }

    #[test]
    fn group_counts_submitted_bytes_until_they_are_committed() {
        use crate::Store;
        let dir = tempfile::tempdir().expect("temp dir");
        let free = Arc::new(AtomicU64::new((1 << 20) + (100 << 10)));
        let group = crate::GroupCommit::new(disk(dir.path(), &free, 1 << 20));
        group.writable(90 << 10).expect("fits beside the reserve");
        let ticket = group.submit(vec![put(1, 60 << 10)]).expect("submit");
        let err = group
            .writable(60 << 10)
            .expect_err("the queued 60 KiB count against the free space");
        assert!(matches!(err, StoreError::LowSpace { .. }), "{err:?}");
        assert!(
            Store::writable(&group, 10 << 10).is_ok(),
            "a small write still fits"
        );
        ticket.wait().expect("commit");
        // The fake disk did not shrink: with the batch committed, only the caller's bytes count.
        group
            .writable(90 << 10)
            .expect("nothing in flight any more");
    }

    #[test]
    fn a_refusal_at_commit_fails_the_group_but_not_the_store() {
        use crate::Store;
        let dir = tempfile::tempdir().expect("temp dir");
        let free = Arc::new(AtomicU64::new(1 << 40));
        let group = crate::GroupCommit::new(disk(dir.path(), &free, 1 << 20));
        group.commit(&[put(1, 10)]).expect("room");
        free.store(512 << 10, Ordering::Relaxed);
        let err = group.commit(&[put(2, 10)]).expect_err("backstop");
        assert!(matches!(err, StoreError::LowSpace { .. }), "{err:?}");
        // The caller may already have applied the refused batch in memory, so the group
        // refuses everything after it (ADR 0006); the store itself is not poisoned.
        free.store(1 << 40, Ordering::Relaxed);
        let later = group.writable(0).expect_err("the group is poisoned");
        assert!(
            matches!(later.poison_cause(), Some(StoreError::LowSpace { .. })),
            "{later:?}"
        );
        group.inner().writable(0).expect("the store is not");
        group.inner().commit(&[put(3, 10)]).expect("and writes");
    }

    #[test]
    fn statvfs_reads_a_real_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let free = Statvfs(dir.path().to_path_buf())
            .free_bytes()
            .expect("statvfs");
        assert!(free > 0, "a test machine has some free space");
        let missing = Statvfs(dir.path().join("missing")).free_bytes();
        assert!(
            missing.is_err(),
            "a missing directory is an error, not 0 bytes"
        );
    }
    /// A batch the backstop refuses changes nothing the next commits plan from: here it
    /// would have made a delayed job ready, so a delete planned from that (the recent
    /// places of `plan::Recent`, recorded only for written batches) would leave the job's
    /// record in the due table, and it would come back at the next open.
    #[test]
    fn a_refused_batch_leaves_the_places_of_its_jobs_as_they_were() {
        use crate::Store;
        let dir = tempfile::tempdir().expect("temp dir");
        let free = Arc::new(AtomicU64::new(1 << 40));
        {
            let store = disk(dir.path(), &free, 1 << 20);
            let crate::Change::Put(mut job) = put(1, 10) else {
                unreachable!("put makes a put")
            };
            job.state = crate::DurableState::Delayed { until: 60_000 };
            store.commit(&[crate::Change::Put(job)]).expect("room");
            free.store(600 << 10, Ordering::Relaxed);
            let err = store
                .commit(&[
                    crate::Change::Update {
                        id: 1,
                        state: crate::DurableState::Ready,
                        priority: 0,
                        history: Default::default(),
                    },
                    put(2, 200 << 10),
                ])
                .expect_err("the backstop refuses it");
            assert!(matches!(err, StoreError::LowSpace { .. }), "{err:?}");
            free.store(1 << 40, Ordering::Relaxed);
            store
                .commit(&[crate::Change::Delete { id: 1 }])
                .expect("room again");
        }
        let store = disk(dir.path(), &free, 1 << 20);
        let r = store.recover(0).expect("recovers");
        assert!(r.resident.is_empty(), "{:?}", r.resident);
        assert!(r.far_delayed.is_empty(), "{:?}", r.far_delayed);
        assert_eq!(store.get(1).expect("reads"), None);
    }
}
