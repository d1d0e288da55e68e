//! [`GroupCommit`]: many committing threads, one store commit (one fsync) per group.
//!
//! # Ground rules
//!
//! Callers append their mutations to `Queue::pending` and take a clone of the current
//! `Queue::group` (an [`Arc<Group>`]) under the queue lock; the committer thread swaps both out
//! under the same lock, commits outside it, then publishes one result to the group and wakes
//! it. So every mutation appended to a group's `pending` is in exactly the store commit whose
//! result that group receives, and a caller returns only after its group's commit returned.
//! Each caller's batch is contiguous in the merged batch, and merged batches are applied in
//! arrival order, so the result equals applying the callers' batches one after another.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::record::validate;
use crate::{JobId, JobRecord, Mutation, Recovered, Store, StoreError};

/// Counters of a [`GroupCommit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// `commit` calls with a non-empty batch.
    pub caller_commits: u64,
    /// Commits of the underlying store (each one fsync with [`Durability::Sync`](crate::Durability::Sync)).
    pub store_commits: u64,
    /// Mutations committed.
    pub mutations: u64,
}

/// Merges concurrent commits into one commit of the inner store.
///
/// A committer thread takes every batch waiting, commits their concatenation to the inner
/// store (one fsync), and wakes all their callers with the result. While it commits, the next
/// group forms, so under load each fsync covers many callers.
///
/// After a failed store commit every caller of that group gets the error, and every later
/// commit gets [`StoreError::Poisoned`] without touching the store.
///
/// Dropping the `GroupCommit` commits what is still pending, then stops the thread.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tickwheel_store::{GroupCommit, MemStore, Mutation, Store};
///
/// let store = Arc::new(GroupCommit::new(MemStore::new()));
/// let threads: Vec<_> = (0..4u64)
///     .map(|t| {
///         let store = Arc::clone(&store);
///         std::thread::spawn(move || store.commit(&[Mutation::Delete { id: t }]))
///     })
///     .collect();
/// for t in threads {
///     t.join().expect("no panic").expect("in-memory commit");
/// }
/// assert_eq!(store.stats().caller_commits, 4);
/// assert!(store.stats().store_commits <= 4);
/// ```
pub struct GroupCommit<S: Store + 'static> {
    shared: Arc<Shared<S>>,
    committer: Option<JoinHandle<()>>,
}

struct Shared<S> {
    store: S,
    queue: Mutex<Queue>,
    /// Signalled when work arrives or on shutdown.
    work: Condvar,
    caller_commits: AtomicU64,
    store_commits: AtomicU64,
    mutations: AtomicU64,
}

struct Queue {
    pending: Vec<Mutation>,
    group: Arc<Group>,
    shutdown: bool,
    /// The committer is blocked on `work` (so an arriving batch must wake it).
    idle: bool,
    poison: Option<StoreError>,
}

#[derive(Default)]
struct Group {
    result: Mutex<Option<Result<(), StoreError>>>,
    done: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The committer never panics while holding these locks (the store call is outside them),
    // and callers only push to vectors; a poisoned lock still holds consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: Store + 'static> GroupCommit<S> {
    /// Wraps `store` and starts the committer thread.
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn new(store: S) -> GroupCommit<S> {
        let shared = Arc::new(Shared {
            store,
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                group: Arc::default(),
                shutdown: false,
                idle: false,
                poison: None,
            }),
            work: Condvar::new(),
            caller_commits: AtomicU64::new(0),
            store_commits: AtomicU64::new(0),
            mutations: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        let committer = std::thread::Builder::new()
            .name("tickwheel-group-commit".into())
            .spawn(move || committer(&s))
            .expect("spawning the group commit thread");
        GroupCommit {
            shared,
            committer: Some(committer),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.shared.store
    }

    /// Counters so far.
    pub fn stats(&self) -> GroupStats {
        GroupStats {
            caller_commits: self.shared.caller_commits.load(Ordering::Relaxed),
            store_commits: self.shared.store_commits.load(Ordering::Relaxed),
            mutations: self.shared.mutations.load(Ordering::Relaxed),
        }
    }
}

fn committer<S: Store>(s: &Shared<S>) {
    loop {
        let (batch, group) = {
            let mut q = lock(&s.queue);
            while q.pending.is_empty() && !q.shutdown {
                q.idle = true;
                q = s.work.wait(q).unwrap_or_else(|e| e.into_inner());
                q.idle = false;
            }
            if q.pending.is_empty() {
                return; // shutdown with nothing left
            }
            let batch = std::mem::take(&mut q.pending);
            let group = std::mem::take(&mut q.group);
            (batch, group)
        };
        let result = s.store.commit(&batch);
        s.store_commits.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &result {
            if e.poisons() {
                let mut q = lock(&s.queue);
                q.poison.get_or_insert_with(|| e.clone().into_poisoned());
            }
        } else {
            s.mutations.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        *lock(&group.result) = Some(result);
        group.done.notify_all();
    }
}

impl<S: Store + 'static> Drop for GroupCommit<S> {
    fn drop(&mut self) {
        lock(&self.shared.queue).shutdown = true;
        self.shared.work.notify_all();
        if let Some(h) = self.committer.take() {
            // A panic of the committer already failed its callers with `Closed`.
            let _ = h.join();
        }
    }
}

impl<S: Store + 'static> Store for GroupCommit<S> {
    fn commit(&self, batch: &[Mutation]) -> Result<(), StoreError> {
        // Refuse a bad batch here, so it cannot fail the merged commit of other callers.
        validate(batch)?;
        if batch.is_empty() {
            return Ok(());
        }
        let (group, wake) = {
            let mut q = lock(&self.shared.queue);
            if let Some(p) = &q.poison {
                return Err(p.clone());
            }
            if q.shutdown {
                return Err(StoreError::Closed);
            }
            q.pending.extend_from_slice(batch);
            // Wake the committer only if it sleeps; while it commits, it takes this batch
            // next without a wake-up (saves a syscall per caller under load).
            let wake = std::mem::take(&mut q.idle);
            (Arc::clone(&q.group), wake)
        };
        self.shared.caller_commits.fetch_add(1, Ordering::Relaxed);
        if wake {
            self.shared.work.notify_one();
        }
        let mut r = lock(&group.result);
        loop {
            if let Some(result) = r.as_ref() {
                return result.clone();
            }
            if self.committer.as_ref().is_none_or(JoinHandle::is_finished) {
                return Err(StoreError::Closed);
            }
            // Timed, so a caller notices a committer that died without publishing a result.
            r = group
                .done
                .wait_timeout(r, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn reserve_ids(&self, end: JobId) -> Result<(), StoreError> {
        if let Some(p) = &lock(&self.shared.queue).poison {
            return Err(p.clone());
        }
        self.shared.store.reserve_ids(end)
    }

    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        self.shared.store.recover(window_end_ms)
    }

    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.shared.store.get(id)
    }

    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.shared.store.delayed_between(from_ms, to_ms, limit)
    }
}
