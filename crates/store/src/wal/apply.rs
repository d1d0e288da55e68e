//! The hand-off between the commit path and the applier thread (ADR 0018): a commit is
//! acknowledged once its log record is synced, and its fjall batch is applied behind it by
//! one applier thread, fed through a bounded queue. Model-checked with loom in
//! `tests/loom_apply.rs` (`--cfg loom` swaps in loom's mutex and condition variables).
//!
//! # Ground rules
//!
//! - Jobs are pushed in sequence order by one writer (the commit path, under the store's
//!   write lock) and applied in that order by one applier, so fjall always holds a prefix of
//!   the log's commits (as before: `meta/wal_seq` is in each batch).
//! - The queue is bounded by the jobs' summed cost: a push waits while the queue is over its
//!   capacity (back-pressure), unless the queue is empty (one job larger than the capacity
//!   still goes through, alone).
//! - Each job's changed keys go into the overlay (key → the job's sequence number and the
//!   key's value after the job) before the job is queued, and leave it only once fjall
//!   holds a job at least as late ([`Handoff::applied`]): a lookup that finds no entry can
//!   read fjall, which then holds the key's latest value.
//! - `applied` only grows, and only after the job's fjall write returned. A reader waits for
//!   `applied >= s` for the last settled sequence `s` it must see ([`Handoff::wait_applied`]).
//! - After [`Handoff::fail`] nothing is applied again: pushes and waits that are not yet
//!   satisfied return [`Stopped`], so nobody waits for an applier that is gone.
//! - A job pushed with [`Handoff::push_quiet`] does not wake the applier; the commit path
//!   calls [`Handoff::wake`] once it has acknowledged the commit (ADR 0022: the wake-up is
//!   then off the acknowledgement's path). Until then `unwoken` is set, and whoever waits for
//!   the applier (a push held by back-pressure, [`Handoff::wait_applied`]) wakes it first, so
//!   no wait depends on the late wake-up coming. The applier clears `unwoken` whenever it
//!   takes a job: it looks at the queue again before it parks.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

/// One commit for the applier.
#[derive(Debug)]
pub struct Job<B> {
    /// The commit's log sequence number.
    pub seq: u64,
    /// What to write (a fjall batch).
    pub batch: B,
    /// The keys the commit changed (their overlay entries are dropped once it is applied).
    pub keys: Vec<u64>,
    /// After applying this job, ask the persist thread to make fjall durable up to this
    /// sequence number (the log left a segment with this job's record).
    pub then_persist: Option<u64>,
    /// The job's share of the queue's capacity (about its bytes).
    pub cost: u64,
}

/// The applier stopped after a failure: nothing more is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped;

struct State<B, V> {
    queue: VecDeque<Job<B>>,
    /// Summed cost of `queue`.
    queued: u64,
    /// Key → (sequence number of the last job that changed it, its value after that job).
    /// Keyed by job ids (server-made): FxHash, not SipHash.
    overlay: FxHashMap<u64, (u64, V)>,
    /// Every job up to this sequence number is applied.
    applied: u64,
    /// The last sequence number pushed.
    pushed: u64,
    failed: bool,
    closed: bool,
    /// Jobs were pushed quietly since the applier last took one: it may be parked with work
    /// queued, so the next waiter (or [`Handoff::wake`]) must wake it.
    unwoken: bool,
}

/// The queue, the overlay and the applied mark, under one lock.
pub struct Handoff<B, V> {
    state: Mutex<State<B, V>>,
    /// The applier waits here for work.
    work: Condvar,
    /// The commit path waits here for room, and readers for `applied`.
    progress: Condvar,
    capacity: u64,
}

impl<B, V> std::fmt::Debug for Handoff<B, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl<B, V: Clone> Handoff<B, V> {
    /// An empty hand-off whose queue holds jobs of summed cost up to `capacity`; everything up
    /// to `applied` is applied already.
    pub fn new(capacity: u64, applied: u64) -> Handoff<B, V> {
        Handoff {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued: 0,
                overlay: FxHashMap::default(),
                applied,
                pushed: applied,
                failed: false,
                closed: false,
                unwoken: false,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<B, V>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(
        &self,
        cv: &Condvar,
        g: MutexGuard<'a, State<B, V>>,
    ) -> MutexGuard<'a, State<B, V>> {
        cv.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`, first entering `values` (one per key of `job.keys`, in order) in the
    /// overlay; waits while the queue is full.
    ///
    /// # Errors
    ///
    /// [`Stopped`] if the applier failed (before or while waiting): the job is not queued.
    pub fn push(&self, job: Job<B>, values: impl IntoIterator<Item = V>) -> Result<(), Stopped> {
        self.push_quiet(job, values)?;
        self.wake();
        Ok(())
    }

    /// As [`push`](Self::push), without waking the applier: the caller calls
    /// [`wake`](Self::wake) later (after acknowledging the commit). A waiter for the applier
    /// in between wakes it itself.
    ///
    /// # Errors
    ///
    /// As [`push`](Self::push).
    pub fn push_quiet(
        &self,
        job: Job<B>,
        values: impl IntoIterator<Item = V>,
    ) -> Result<(), Stopped> {
        let mut st = self.lock();
        while !st.failed && !st.queue.is_empty() && st.queued + job.cost > self.capacity {
            self.wake_locked(&mut st);
            st = self.wait(&self.progress, st);
        }
        if st.failed {
            return Err(Stopped);
        }
        for (&key, value) in job.keys.iter().zip(values) {
            st.overlay.insert(key, (job.seq, value));
        }
        st.queued += job.cost;
        st.pushed = st.pushed.max(job.seq);
        st.queue.push_back(job);
        st.unwoken = true;
        Ok(())
    }

    /// Wakes the applier if jobs were pushed quietly since it last took one.
    pub fn wake(&self) {
        let mut st = self.lock();
        let wake = std::mem::take(&mut st.unwoken);
        drop(st);
        if wake {
            self.work.notify_one();
        }
    }

    /// [`wake`](Self::wake) for a caller that holds the lock and is about to wait for the
    /// applier.
    fn wake_locked(&self, st: &mut State<B, V>) {
        if std::mem::take(&mut st.unwoken) {
            self.work.notify_one();
        }
    }

    /// The value of `key` after the last job that changed it and is not applied yet; `None`
    /// if no such job (then fjall holds the latest value).
    pub fn lookup(&self, key: u64) -> Option<V> {
        self.lock().overlay.get(&key).map(|(_, v)| v.clone())
    }

    /// [`lookup`](Self::lookup) through `f`, which sees the value without a clone of it.
    pub fn lookup_with<R>(&self, key: u64, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.lock().overlay.get(&key).map(|(_, v)| f(v))
    }

    /// The applier's next job, waiting for one; `None` once the hand-off is closed and
    /// drained, or failed.
    pub fn next(&self) -> Option<Job<B>> {
        let mut st = self.lock();
        loop {
            if st.failed {
                return None;
            }
            if let Some(job) = st.queue.pop_front() {
                st.queued -= job.cost;
                // Awake: it looks at the queue again before it parks.
                st.unwoken = false;
                drop(st);
                self.progress.notify_all();
                return Some(job);
            }
            if st.closed {
                return None;
            }
            st = self.wait(&self.work, st);
        }
    }

    /// The applier wrote job `seq` (changing `keys`) to fjall.
    pub fn applied(&self, seq: u64, keys: &[u64]) {
        let mut st = self.lock();
        st.applied = st.applied.max(seq);
        for key in keys {
            if st.overlay.get(key).is_some_and(|&(s, _)| s <= seq) {
                st.overlay.remove(key);
            }
        }
        drop(st);
        self.progress.notify_all();
    }

    /// The applier failed: nothing more is applied; waiters return [`Stopped`].
    pub fn fail(&self) {
        self.lock().failed = true;
        self.progress.notify_all();
        self.work.notify_all();
    }

    /// No more jobs: the applier returns once it has applied the queue.
    pub fn close(&self) {
        self.lock().closed = true;
        self.work.notify_all();
    }

    /// Waits until every job up to `seq` is applied.
    ///
    /// # Errors
    ///
    /// [`Stopped`] if the applier failed before it got there.
    pub fn wait_applied(&self, seq: u64) -> Result<(), Stopped> {
        let mut st = self.lock();
        while st.applied < seq && !st.failed {
            self.wake_locked(&mut st);
            st = self.wait(&self.progress, st);
        }
        if st.applied >= seq {
            Ok(())
        } else {
            Err(Stopped)
        }
    }

    /// Waits until every job pushed so far is applied (before the commit path writes fjall
    /// itself or syncs it to cover the log).
    ///
    /// # Errors
    ///
    /// As [`wait_applied`](Self::wait_applied).
    pub fn drain(&self) -> Result<(), Stopped> {
        let pushed = self.lock().pushed;
        self.wait_applied(pushed)
    }

    /// Summed cost of the jobs queued and not yet taken by the applier.
    pub fn queued(&self) -> u64 {
        self.lock().queued
    }

    /// The last sequence number applied.
    pub fn applied_seq(&self) -> u64 {
        self.lock().applied
    }
}
