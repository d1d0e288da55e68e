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
//!   then off the acknowledgement's path). Until then `unwoken` is set.
//! - The applier applies behind in bulk (ADR 0026): it takes every queued job at once
//!   ([`Handoff::take`]), and only when the queue's cost reaches the [`Pace`]'s threshold,
//!   when its delay has passed since it saw the first of them, or at once when someone waits
//!   for it (a push held by back-pressure, [`Handoff::wait_applied`], [`Handoff::drain`],
//!   [`Handoff::close`]). So it is woken only when it parks with an empty queue (the next
//!   push owes it a wake-up, `unwoken`) or when the threshold is crossed. A waiter counts
//!   itself in `waiters` and wakes the applier itself, and a push while anyone waits wakes
//!   it at once, so no wait depends on a late wake-up or on the delay (loom's timed waits
//!   never time out: the models check exactly that).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

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

/// When the applier applies what is queued (ADR 0026).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Apply once the queued jobs' summed cost reaches this.
    pub threshold: u64,
    /// Apply once this long has passed since the applier saw the oldest queued job (zero:
    /// at once, one wake-up per push; the ADR 0018 applier).
    pub delay: Duration,
}

impl Pace {
    /// Applies every job as soon as it is queued.
    pub const EAGER: Pace = Pace {
        threshold: 0,
        delay: Duration::ZERO,
    };
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
    /// The applier parked with an empty queue and nobody has woken it since.
    idle: bool,
    /// A job was pushed (quietly) to an idle applier, or the queue crossed the threshold:
    /// [`Handoff::wake`] owes the applier a wake-up.
    unwoken: bool,
    /// Threads waiting for the applier (for `applied`, or for room in the queue): while there
    /// are any, it applies what is queued without waiting for the threshold or the delay.
    waiters: usize,
}

/// The queue, the overlay and the applied mark, under one lock.
pub struct Handoff<B, V> {
    state: Mutex<State<B, V>>,
    /// The applier waits here for work.
    work: Condvar,
    /// The commit path waits here for room, and readers for `applied`.
    progress: Condvar,
    capacity: u64,
    pace: Pace,
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
    /// to `applied` is applied already. The applier applies as soon as a job is queued
    /// ([`Pace::EAGER`]).
    pub fn new(capacity: u64, applied: u64) -> Handoff<B, V> {
        Self::with_pace(capacity, applied, Pace::EAGER)
    }

    /// [`new`](Self::new), applying in bulk at `pace`.
    pub fn with_pace(capacity: u64, applied: u64, pace: Pace) -> Handoff<B, V> {
        Handoff {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued: 0,
                overlay: HashMap::new(),
                applied,
                pushed: applied,
                failed: false,
                closed: false,
                idle: false,
                unwoken: false,
                waiters: 0,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            capacity,
            pace,
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
            st = self.wait_for_applier(st);
        }
        if st.failed {
            return Err(Stopped);
        }
        for (&key, value) in job.keys.iter().zip(values) {
            st.overlay.insert(key, (job.seq, value));
        }
        let below = st.queued < self.pace.threshold;
        st.queued += job.cost;
        st.pushed = st.pushed.max(job.seq);
        st.queue.push_back(job);
        if st.waiters > 0 {
            // Someone waits for the applier already: no reason to leave it parked.
            st.unwoken = false;
            st.idle = false;
            drop(st);
            self.work.notify_one();
        } else if st.idle || (below && st.queued >= self.pace.threshold) {
            st.unwoken = true;
        }
        Ok(())
    }

    /// Wakes the applier if a push since it parked owes it a wake-up (it parked with an
    /// empty queue, or the queue crossed the threshold).
    pub fn wake(&self) {
        let mut st = self.lock();
        let wake = std::mem::take(&mut st.unwoken);
        if wake {
            st.idle = false;
        }
        drop(st);
        if wake {
            self.work.notify_one();
        }
    }

    /// Waits once on `progress` as a waiter for the applier: while it waits, the applier
    /// applies what is queued at once (it looks at `waiters` before it parks, and a push
    /// wakes it while there are waiters), and it is woken now in case it is parked.
    fn wait_for_applier<'a>(
        &self,
        mut st: MutexGuard<'a, State<B, V>>,
    ) -> MutexGuard<'a, State<B, V>> {
        st.waiters += 1;
        st.unwoken = false;
        st.idle = false;
        self.work.notify_one();
        st = self.wait(&self.progress, st);
        st.waiters -= 1;
        st
    }

    /// The value of `key` after the last job that changed it and is not applied yet; `None`
    /// if no such job (then fjall holds the latest value).
    pub fn lookup(&self, key: u64) -> Option<V> {
        self.lock().overlay.get(&key).map(|(_, v)| v.clone())
    }

    /// The applier's next jobs: every queued job, once the [`Pace`] says so or someone waits
    /// (see the module docs), waiting for them; `None` once the hand-off is closed and
    /// drained, or failed.
    pub fn take(&self) -> Option<Vec<Job<B>>> {
        let mut st = self.lock();
        // When the applier first saw the jobs now queued, plus the delay.
        let mut deadline: Option<Instant> = None;
        loop {
            if st.failed {
                return None;
            }
            if st.queue.is_empty() {
                if st.closed {
                    return None;
                }
                st.idle = true;
                deadline = None;
                st = self.wait(&self.work, st);
                st.idle = false;
                continue;
            }
            let due = st.waiters > 0
                || st.closed
                || st.queued >= self.pace.threshold
                || self.pace.delay.is_zero()
                || deadline.is_some_and(|d| Instant::now() >= d);
            if due {
                let jobs: Vec<Job<B>> = st.queue.drain(..).collect();
                st.queued = 0;
                // Awake: it looks at the queue again before it parks.
                st.unwoken = false;
                drop(st);
                self.progress.notify_all();
                return Some(jobs);
            }
            let d = *deadline.get_or_insert_with(|| Instant::now() + self.pace.delay);
            let left = d.saturating_duration_since(Instant::now());
            st = self
                .work
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// The applier's next job alone (the eager applier of ADR 0018, and tests): as
    /// [`take`](Self::take), but one job at a time, at once.
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
            st.idle = true;
            st = self.wait(&self.work, st);
            st.idle = false;
        }
    }

    /// The applier wrote every job up to `seq` (changing `keys`) to fjall.
    pub fn applied<'k>(&self, seq: u64, keys: impl IntoIterator<Item = &'k u64>) {
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
            st = self.wait_for_applier(st);
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
