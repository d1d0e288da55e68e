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
//! - The applier is woken lazily (ADR 0019): a push wakes a parked applier only when the
//!   queue was empty while it parked (it then parks again with a timeout, [`LAZY_APPLY`])
//!   or once the queue holds [`WAKE_JOBS`] jobs or half its capacity; anyone who waits for
//!   the applier (a reader in [`Handoff::wait_applied`], a push held by back-pressure) wakes
//!   it first. So under a steady stream of commits the applier runs once per
//!   [`WAKE_JOBS`] commits instead of once per commit, and nobody's wait depends on the
//!   timeout. A condition variable is signalled only when someone waits on it (each signal
//!   is a system call).

use std::collections::{HashMap, VecDeque};

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

/// A push wakes the parked applier once this many jobs are queued.
pub const WAKE_JOBS: usize = 32;

/// How long the applier leaves a short queue (fewer than [`WAKE_JOBS`] jobs) before it
/// applies it anyway, so an idle store's fjall catches up with its log.
pub const LAZY_APPLY: std::time::Duration = std::time::Duration::from_millis(5);

/// How the applier waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parked {
    /// It runs (or is about to look at the queue again): nobody needs to wake it.
    No,
    /// It waits for the first job, without a timeout: the next push wakes it.
    Empty,
    /// It waits with a timeout ([`LAZY_APPLY`]) while a few jobs are queued: a push wakes it
    /// once the queue is long enough.
    Lazy,
}

/// The applier stopped after a failure: nothing more is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped;

struct State<B, V> {
    queue: VecDeque<Job<B>>,
    /// Summed cost of `queue`.
    queued: u64,
    /// Key → (sequence number of the last job that changed it, its value after that job).
    overlay: HashMap<u64, (u64, V)>,
    /// Every job up to this sequence number is applied.
    applied: u64,
    /// The last sequence number pushed.
    pushed: u64,
    failed: bool,
    closed: bool,
    /// How the applier waits, if it does.
    parked: Parked,
    /// Someone waits for the applier (a reader or a held push): it must not wait lazily.
    wanted: usize,
    /// The applier took a job and goes on until the queue is empty.
    draining: bool,
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
                overlay: HashMap::new(),
                applied,
                pushed: applied,
                failed: false,
                closed: false,
                parked: Parked::No,
                wanted: 0,
                draining: false,
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

    /// Waits on `progress` as one who needs the applier: wakes it first if it is parked (it
    /// then does not park lazily while `wanted` is set).
    fn wait_progress<'a>(
        &self,
        mut st: MutexGuard<'a, State<B, V>>,
    ) -> MutexGuard<'a, State<B, V>> {
        st.wanted += 1;
        if st.parked != Parked::No {
            st.parked = Parked::No;
            self.work.notify_one();
        }
        let mut st = self.wait(&self.progress, st);
        st.wanted -= 1;
        st
    }

    /// Signals `progress` if anyone waits on it.
    fn progressed(&self, st: MutexGuard<'_, State<B, V>>) {
        let wanted = st.wanted > 0;
        drop(st);
        if wanted {
            self.progress.notify_all();
        }
    }

    /// Queues `job`, first entering `values` (one per key of `job.keys`, in order) in the
    /// overlay; waits while the queue is full.
    ///
    /// # Errors
    ///
    /// [`Stopped`] if the applier failed (before or while waiting): the job is not queued.
    pub fn push(&self, job: Job<B>, values: impl IntoIterator<Item = V>) -> Result<(), Stopped> {
        let mut st = self.lock();
        while !st.failed && !st.queue.is_empty() && st.queued + job.cost > self.capacity {
            st = self.wait_progress(st);
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
        let wake = match st.parked {
            Parked::No => false,
            Parked::Empty => true,
            Parked::Lazy => {
                st.queue.len() >= WAKE_JOBS || st.queued.saturating_mul(2) >= self.capacity
            }
        };
        if wake {
            st.parked = Parked::No;
        }
        drop(st);
        if wake {
            self.work.notify_one();
        }
        Ok(())
    }

    /// The value of `key` after the last job that changed it and is not applied yet; `None`
    /// if no such job (then fjall holds the latest value).
    pub fn lookup(&self, key: u64) -> Option<V> {
        self.lock().overlay.get(&key).map(|(_, v)| v.clone())
    }

    /// The applier's next job, waiting for one; `None` once the hand-off is closed and
    /// drained, or failed.
    ///
    /// Once it takes a job it takes the next ones at once until the queue is empty. From an
    /// empty queue it takes a job only once the queue is long ([`WAKE_JOBS`] jobs or half the
    /// capacity), closed, or someone waits for the applier, or after it waited
    /// [`LAZY_APPLY`] with a job queued.
    pub fn next(&self) -> Option<Job<B>> {
        let mut st = self.lock();
        // This call waited lazily with a job queued: take it now.
        let mut waited = false;
        loop {
            if st.failed {
                return None;
            }
            if st.queue.is_empty() {
                st.draining = false;
                if st.closed {
                    return None;
                }
                st.parked = Parked::Empty;
                st = self.wait(&self.work, st);
                st.parked = Parked::No;
                continue;
            }
            let eager = st.draining
                || waited
                || st.closed
                || st.wanted > 0
                || st.queue.len() >= WAKE_JOBS
                || st.queued.saturating_mul(2) >= self.capacity;
            if eager {
                let job = st.queue.pop_front().expect("checked: not empty");
                st.queued -= job.cost;
                st.draining = true;
                self.progressed(st);
                return Some(job);
            }
            st.parked = Parked::Lazy;
            st = self
                .work
                .wait_timeout(st, LAZY_APPLY)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
            st.parked = Parked::No;
            waited = true;
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
        self.progressed(st);
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
            st = self.wait_progress(st);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Handoff, Job, WAKE_JOBS};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn job(seq: u64) -> Job<u64> {
        Job {
            seq,
            batch: seq,
            keys: vec![seq],
            then_persist: None,
            cost: 1,
        }
    }

    fn applier(handoff: &Arc<Handoff<u64, u64>>) -> std::thread::JoinHandle<Vec<u64>> {
        let handoff = Arc::clone(handoff);
        std::thread::spawn(move || {
            let mut order = Vec::new();
            while let Some(job) = handoff.next() {
                order.push(job.seq);
                handoff.applied(job.seq, &job.keys);
            }
            order
        })
    }

    /// Nobody waits and the queue stays short: the lazy wait's timeout still applies the job
    /// (without it the job would wait for the next reader).
    #[test]
    fn a_lone_job_is_applied_without_a_waiter() {
        let handoff = Arc::new(Handoff::<u64, u64>::new(1 << 20, 0));
        let thread = applier(&handoff);
        handoff.push(job(1), [1]).expect("applier runs");
        let give_up = Instant::now() + Duration::from_secs(30);
        while handoff.applied_seq() < 1 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(handoff.applied_seq(), 1, "the lone job was never applied");
        assert_eq!(handoff.lookup(1), None, "applied: out of the overlay");
        handoff.close();
        assert_eq!(thread.join().expect("applier"), vec![1]);
    }

    /// Short and long queues, readers in between: everything is applied once, in order, and
    /// every reader's wait returns with its sequence number applied.
    #[test]
    fn lazily_applied_jobs_stay_in_order_and_readers_see_them() {
        let handoff = Arc::new(Handoff::<u64, u64>::new(1 << 20, 0));
        let thread = applier(&handoff);
        let mut seq = 0;
        for round in 0..20u64 {
            // Alternately fewer and more jobs than wake the applier by themselves.
            let n = if round % 2 == 0 {
                3
            } else {
                WAKE_JOBS as u64 + 1
            };
            for _ in 0..n {
                seq += 1;
                handoff.push(job(seq), [seq]).expect("applier runs");
            }
            handoff.wait_applied(seq).expect("applier runs");
            assert!(handoff.applied_seq() >= seq);
            assert_eq!(handoff.lookup(seq), None);
        }
        handoff.close();
        let order = thread.join().expect("applier");
        assert_eq!(order, (1..=seq).collect::<Vec<_>>());
    }
}
