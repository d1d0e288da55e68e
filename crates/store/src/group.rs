//! [`GroupCommit`]: one store commit (one fsync) for every batch submitted while the previous
//! commit ran, by a committer thread ([`GroupCommit::with_thread`], what the server uses on
//! disk) or by the first caller that waits ([`GroupCommit::new`]); or, for a store in memory,
//! by the submitter before `submit` returns ([`GroupCommit::inline`], the server's
//! `--in-memory`).
//!
//! # Ground rules
//!
//! - A batch is appended to `State::pending` under the state lock and gets the next sequence
//!   number; batches are applied in sequence order, so a caller that submits in its own order
//!   (the server submits under its engine lock) gets that order on disk.
//! - At most one committer at a time (`State::leading`). It takes all of `pending` under the
//!   lock, commits it outside the lock, then, under the lock again, raises `durable` to the
//!   last sequence number it took (or records the failure and poisons) and wakes every
//!   waiter. So a [`Ticket`] with `seq <= durable` is durable, and a waiter never returns
//!   `Ok` for a batch that was not in a successful commit.
//! - Without a committer thread (or after it stopped), a waiter whose batch is not durable
//!   and that finds no commit running commits the group itself, on its own thread.
//! - The committer thread parks on `work` only after setting `State::idle` under the lock
//!   and finding nothing pending there; a submitter wakes it iff it cleared `idle` under the
//!   lock (the wake itself comes after the lock is released). Before parking the committer
//!   spins outside the lock (reading the atomic copy of `submitted`) for a budget learnt from
//!   the gaps it saw ([`Spin`]), then looks again under the lock, so a batch submitted during
//!   the spin is never left waiting.
//! - A group is committed with [`Store::commit_deferred`], and [`Store::after_commit`] runs
//!   once its waiters are woken: what the store does not need for durability (a
//!   [`DiskStore`](crate::DiskStore) wakes its applier there) stays off the acknowledgement's
//!   path (`docs/decisions/0022-ack-before-the-applier.md`).
//! - After a failed commit the group is poisoned: every batch not yet durable, and every later
//!   one, fails (the failing group with the store's error, later ones with
//!   [`StoreError::Poisoned`]); nothing is written again.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tickwheel_queue::{Change, JobId, JobRecord};

use crate::record::validate;
use crate::{Recovered, Store, StoreError};

/// Counters of a [`GroupCommit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Batches submitted (non-empty ones; `commit` calls count one each).
    pub caller_commits: u64,
    /// Commits of the underlying store (each one fsync with [`Durability::Sync`](crate::Durability::Sync)).
    pub store_commits: u64,
    /// Mutations committed.
    pub mutations: u64,
}

/// Merges concurrent commits into one commit of the inner store.
///
/// [`submit`](GroupCommit::submit) queues a batch and returns a [`Ticket`] at once;
/// [`Ticket::wait`] (blocking) or [`Ticket::durable`] (a future, for async servers) returns
/// once the batch is durable. Everything queued while a commit runs goes into the next one
/// (one fsync). Who commits: the committer thread of [`with_thread`](GroupCommit::with_thread),
/// or with [`new`](GroupCommit::new) the first waiter that finds no commit running.
/// [`Store::commit`] is `submit` then `wait`.
///
/// After a failed store commit every waiter of that group gets the error, and every later
/// commit gets [`StoreError::Poisoned`] without touching the store.
///
/// Dropping the `GroupCommit` commits what is still queued (tickets keep it alive, so this
/// only happens once no ticket is left).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tickwheel_store::{Change, GroupCommit, MemStore, Store};
///
/// let store = Arc::new(GroupCommit::new(MemStore::new()));
/// let threads: Vec<_> = (0..4u64)
///     .map(|t| {
///         let store = Arc::clone(&store);
///         std::thread::spawn(move || store.commit(&[Change::Delete { id: t }]))
///     })
///     .collect();
/// for t in threads {
///     t.join().expect("no panic").expect("in-memory commit");
/// }
/// assert_eq!(store.stats().caller_commits, 4);
/// assert!(store.stats().store_commits <= 4);
///
/// // Submit now, wait later (or `.await` `ticket.durable()` in async code).
/// let ticket = store.submit(vec![Change::Delete { id: 9 }])?;
/// ticket.wait()?;
/// # Ok::<(), tickwheel_store::StoreError>(())
/// ```
pub struct GroupCommit<S: Store + 'static> {
    shared: Arc<Shared<S>>,
    /// The committer thread of [`GroupCommit::with_thread`].
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared<S: ?Sized> {
    state: Mutex<State>,
    /// Signalled (with the wakers) whenever `durable` or `poison` changes.
    changed: Condvar,
    /// Wakes the committer thread, if there is one, when work arrives or at shutdown.
    work: Condvar,
    caller_commits: AtomicU64,
    store_commits: AtomicU64,
    mutations: AtomicU64,
    /// A copy of `State::submitted`, read without the lock by the committer thread while it
    /// spins for the next batch (see [`Shared::committer`]).
    submitted: AtomicU64,
    store: S,
}

#[derive(Default)]
struct State {
    /// Changes of the batches `durable + 1 ..= submitted` not yet taken by a committer.
    pending: Vec<Change>,
    /// Sequence number of the last batch submitted.
    submitted: u64,
    /// Every batch with a sequence number up to this one is durable.
    durable: u64,
    /// A caller is committing.
    leading: bool,
    /// A committer thread commits every group; callers only wait.
    thread: bool,
    /// The committer thread waits for work (so a submit must wake it).
    idle: bool,
    /// The committer thread must stop once nothing is pending.
    shutdown: bool,
    /// [`GroupCommit::inline`]: every submit commits before it returns.
    inline: bool,
    /// Batches up to this one were in the commit that failed, and get its error.
    failed_upto: u64,
    /// The error of the commit that failed.
    failure: Option<StoreError>,
    /// Set after a failed commit: the answer for every later batch.
    poison: Option<StoreError>,
    /// Estimated bytes of the batches submitted and not yet settled ([`batch_bytes`]): what
    /// [`GroupCommit::writable`] adds to the caller's own estimate.
    inflight_bytes: u64,
    /// Async waiters to wake when `durable` or `poison` changes.
    /// With the sequence number each waits for: a commit wakes only the waiters it settles.
    wakers: Vec<(u64, Waker)>,
    /// Threads blocked in [`Ticket::wait`] on `changed`: a commit signals the condition
    /// variable only when there are any (the server's waiters are all futures, and a
    /// broadcast is a system call per commit).
    sleepers: usize,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Nobody panics while holding the state lock (the store call is outside it); a poisoned
    // lock still holds consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: Store + 'static> GroupCommit<S> {
    /// Wraps `store`. No thread is started: each group is committed by the first caller that
    /// waits for it, on its own thread.
    pub fn new(store: S) -> GroupCommit<S> {
        GroupCommit {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                work: Condvar::new(),
                caller_commits: AtomicU64::new(0),
                store_commits: AtomicU64::new(0),
                mutations: AtomicU64::new(0),
                submitted: AtomicU64::new(0),
                store,
            }),
            thread: None,
        }
    }

    /// Wraps `store` with one committer thread that commits every group; waiters never commit
    /// themselves (while the thread runs). Same guarantees as [`GroupCommit::new`]; the
    /// difference is which thread calls the store, see `docs/decisions/0005-one-committer.md`.
    ///
    /// # Errors
    ///
    /// The OS refused to start a thread.
    pub fn with_thread(store: S) -> std::io::Result<GroupCommit<S>> {
        let mut group = GroupCommit::new(store);
        lock(&group.shared.state).thread = true;
        let shared = Arc::clone(&group.shared);
        let handle = std::thread::Builder::new()
            .name("tickwheel-commit".into())
            .spawn(move || shared.committer())
            .inspect_err(|_| lock(&group.shared.state).thread = false)?;
        group.thread = Some(handle);
        Ok(group)
    }

    /// Wraps `store` so that every [`submit`](GroupCommit::submit) commits its batch (with
    /// any other caller's still queued) before it returns, on the caller's thread: the ticket
    /// it returns is settled already. No thread is started.
    ///
    /// For a store whose commit is a memory update (a [`MemStore`](crate::MemStore) behind
    /// `--in-memory`): a hand-off to a committer thread would cost a thread wake-up per commit
    /// and a parked waiter per reply, for a commit that takes microseconds. Not for a store
    /// that syncs: the submitter (the server submits under its engine lock) would wait out
    /// the sync, and concurrent batches would not join one commit.
    ///
    /// # Examples
    ///
    /// ```
    /// use tickwheel_store::{Change, GroupCommit, MemStore, Store};
    ///
    /// let group = GroupCommit::inline(MemStore::new());
    /// let ticket = group.submit(vec![Change::ReserveIds { end: 8 }])?;
    /// // Committed already: nothing to wait for.
    /// assert_eq!(group.stats().store_commits, 1);
    /// ticket.wait()?;
    /// assert_eq!(group.recover(0)?.next_id, 8);
    /// # Ok::<(), tickwheel_store::StoreError>(())
    /// ```
    pub fn inline(store: S) -> GroupCommit<S> {
        let group = GroupCommit::new(store);
        lock(&group.shared.state).inline = true;
        group
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

    /// Queues `batch` after every batch submitted before, and returns its ticket without
    /// waiting (a [`GroupCommit::inline`] group commits it first). An empty batch returns the ticket of the last batch submitted: it resolves
    /// once everything submitted so far is durable.
    ///
    /// # Errors
    ///
    /// [`StoreError::TooLarge`] for an invalid batch (nothing is queued, and other callers'
    /// batches are unaffected).
    pub fn submit(&self, batch: Vec<Change>) -> Result<Ticket, StoreError> {
        // Refuse a bad batch here, so it cannot fail the merged commit of other callers.
        validate(&batch)?;
        let batch_empty = batch.is_empty();
        let mut st = lock(&self.shared.state);
        if !batch_empty {
            st.inflight_bytes = st.inflight_bytes.saturating_add(batch_bytes(&batch));
            st.submitted += 1;
            st.pending.extend(batch);
            self.shared.submitted.store(st.submitted, Ordering::Release);
            self.shared.caller_commits.fetch_add(1, Ordering::Relaxed);
        }
        let seq = st.submitted;
        let wake = !batch_empty && std::mem::take(&mut st.idle);
        let inline = st.inline && !batch_empty;
        // Woken after the lock is released: a committer woken under it would block at once on
        // the lock this caller still holds (one more futex round trip per commit, measured
        // under strace on the single-connection path).
        drop(st);
        if wake {
            self.shared.work.notify_one();
        }
        if inline {
            // Leads the commit (or waits for the caller leading one, which takes this batch
            // or leaves it to this caller). The outcome is recorded in the state, where the
            // ticket reads it: a failure is the ticket's, as for any other mode.
            let _ = self.shared.wait(seq);
        }
        Ok(Ticket {
            seq,
            shared: Some(self.shared.clone()),
            failed: None,
        })
    }

    /// Whether a write of about `bytes` bytes would be accepted now (see
    /// [`Store::writable`]): the group's poison if it has one, else the store's answer for
    /// `bytes` plus the estimated bytes of every batch submitted and not yet committed (so a
    /// burst of submissions between two free-space readings is counted).
    ///
    /// # Errors
    ///
    /// [`StoreError::Poisoned`] after a failed commit; the store's refusal
    /// ([`StoreError::LowSpace`]).
    pub fn writable(&self, bytes: u64) -> Result<(), StoreError> {
        let inflight = {
            let st = lock(&self.shared.state);
            if let Some(p) = &st.poison {
                return Err(p.clone());
            }
            st.inflight_bytes
        };
        self.shared.store.writable(bytes.saturating_add(inflight))
    }

    /// The error every later commit gets, once a commit has failed (`None` before). From then
    /// on nothing becomes durable any more; what was durable before stays readable through the
    /// store.
    pub fn poisoned(&self) -> Option<StoreError> {
        lock(&self.shared.state).poison.clone()
    }

    /// The ticket of the last batch submitted: resolves once everything submitted so far is
    /// durable.
    pub fn last_ticket(&self) -> Ticket {
        Ticket {
            seq: lock(&self.shared.state).submitted,
            shared: Some(self.shared.clone()),
            failed: None,
        }
    }
}

impl<S: Store + ?Sized> Shared<S> {
    /// `Some(outcome)` if batch `seq` is settled.
    fn settled(st: &State, seq: u64) -> Option<Result<(), StoreError>> {
        if seq <= st.durable {
            Some(Ok(()))
        } else if seq <= st.failed_upto {
            st.failure.clone().map(Err)
        } else {
            st.poison.clone().map(Err)
        }
    }

    /// Called with the lock held, not leading and `seq` unsettled: commits everything pending
    /// as the leader and returns the lock again.
    fn lead<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        st.leading = true;
        let batch = std::mem::take(&mut st.pending);
        let upto = st.submitted;
        drop(st);
        let result = self.commit_group(&batch);
        let mut st = lock(&self.state);
        st.leading = false;
        st.inflight_bytes = st.inflight_bytes.saturating_sub(batch_bytes(&batch));
        match result {
            Ok(()) => {
                st.durable = upto;
                self.mutations
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                // Any failure poisons the group, even one the store itself survives (batches
                // are validated at `submit`, so that should not happen): `durable` must stay
                // a prefix of the sequence numbers.
                st.poison = Some(e.clone().into_poisoned());
                st.failed_upto = upto;
                st.failure = Some(e);
            }
        }
        // With a committer thread, wake the settled waiters only: the others (batches of the
        // next group) keep waiting for the thread. Without one, wake all, so one of them leads.
        let wakers: Vec<(u64, Waker)> = if st.poison.is_some() || !st.thread {
            std::mem::take(&mut st.wakers)
        } else {
            let durable = st.durable;
            let (settled, waiting) = std::mem::take(&mut st.wakers)
                .into_iter()
                .partition(|(seq, _)| *seq <= durable);
            st.wakers = waiting;
            settled
        };
        if st.sleepers > 0 {
            self.changed.notify_all();
        }
        // Woken outside the lock: hundreds of waiters must not hold up the next submit (which
        // the server makes under its engine lock).
        drop(st);
        for (_, w) in wakers {
            w.wake();
        }
        // What the store left until the group was acknowledged (the applier's wake-up).
        self.store.after_commit();
        lock(&self.state)
    }

    fn commit_group(&self, batch: &[Change]) -> Result<(), StoreError> {
        // A panicking store must not leave `leading` set forever (every waiter would hang).
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.store.commit_deferred(batch)
        }))
        .unwrap_or(Err(StoreError::Closed))
        .inspect(|()| {
            self.store_commits.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// The committer thread of [`GroupCommit::with_thread`]: commits each group as it forms,
    /// until shutdown with nothing pending.
    fn committer(&self) {
        let mut st = lock(&self.state);
        // When the committer ran out of work (since the last commit or wake-up), and whether
        // it has spun since: the next idle turn parks.
        let mut idle_since: Option<Instant> = None;
        let mut spun = false;
        let mut spin = Spin::default();
        loop {
            let pending = st.submitted > st.durable && st.poison.is_none();
            if pending && !st.leading {
                if let Some(since) = idle_since.take() {
                    spin.learn(since.elapsed());
                }
                // `lead` takes every batch pending.
                spin.group(st.submitted - st.durable);
                st = self.lead(st);
                spun = false;
            } else if !pending && st.shutdown {
                st.thread = false;
                return;
            } else if !pending && !spun && st.poison.is_none() {
                // Outside the lock, so submitters are not held up; whatever the spin saw,
                // the loop looks again under the lock before parking (a submit during the
                // spin found `idle` false and woke nobody).
                let seen = st.submitted;
                drop(st);
                let start = Instant::now();
                // Kept from the first idle turn: a wake-up that finds nothing pending must
                // not shorten the gap learnt.
                idle_since.get_or_insert(start);
                self.spin_for_work(seen, start, spin.budget());
                st = lock(&self.state);
                spun = true;
            } else {
                st.idle = true;
                st = self.work.wait(st).unwrap_or_else(|e| e.into_inner());
                st.idle = false;
                spun = false;
            }
        }
    }

    /// Spins (yielding the CPU each turn) until a batch after `seen` is submitted or
    /// `budget` has passed since `start`. A committer that parked at once would have to be
    /// woken by the next submit: a futex wake and a scheduler round trip on the path of every
    /// reply to a client that sends one request at a time; see
    /// `docs/decisions/0012-commit-path.md` and `docs/decisions/0044-an-adaptive-commit-spin.md`.
    fn spin_for_work(&self, seen: u64, start: Instant, budget: Duration) {
        while self.submitted.load(Ordering::Acquire) <= seen && start.elapsed() < budget {
            std::thread::yield_now();
        }
    }

    fn wait(&self, seq: u64) -> Result<(), StoreError> {
        let mut st = lock(&self.state);
        loop {
            if let Some(outcome) = Self::settled(&st, seq) {
                return outcome;
            }
            st = if st.leading || st.thread {
                st.sleepers += 1;
                let mut st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                st.sleepers -= 1;
                st
            } else {
                self.lead(st)
            };
        }
    }

    fn poll_durable(&self, seq: u64, cx: &mut Context<'_>) -> Poll<Result<(), StoreError>> {
        let mut st = lock(&self.state);
        loop {
            if let Some(outcome) = Self::settled(&st, seq) {
                return Poll::Ready(outcome);
            }
            if st.leading || st.thread {
                // No de-duplication (that is quadratic in the waiters): a future is polled
                // again only when woken, and a spare wake-up is harmless.
                st.wakers.push((seq, cx.waker().clone()));
                return Poll::Pending;
            }
            st = self.lead(st);
        }
    }
}

impl<S: Store + 'static> Drop for GroupCommit<S> {
    fn drop(&mut self) {
        if let Some(handle) = self.thread.take() {
            // The thread commits what is pending, then stops; later waiters lead themselves.
            lock(&self.shared.state).shutdown = true;
            self.shared.work.notify_all();
            let _ = handle.join();
            lock(&self.shared.state).thread = false;
        }
        // Tickets hold the shared state, so this is the last handle only if none is left.
        if Arc::strong_count(&self.shared) == 1 {
            let seq = lock(&self.shared.state).submitted;
            // Best effort: an error has no caller left to report to.
            let _ = self.shared.wait(seq);
        }
    }
}

/// How long the committer thread looks for the next batch before it parks. After a group of
/// one batch (a lone client, as far as the committer can tell): twice the last gap between
/// running out of work and the next batch, within [`Spin::MIN`]..=[`Spin::MAX`], or `MIN`
/// after a gap longer than `MAX` (an idle server, a client that sends now and then). After a
/// larger group (a crowd): `MIN`.
///
/// A client with one request in flight sends its next put a loopback round trip plus the
/// reply's wake-ups after its last commit (150–300 µs on the 2-core VM, where a parked thread
/// on a halted vCPU takes tens of µs to wake): a committer that has parked by then must be
/// woken by that submit, one more hand-off on every request's path. Spinning that long costs
/// the CPU between a lone client's requests. In a crowd the gaps are spent better on the
/// connections (the box is CPU-bound there): a longer spin measurably cost cycles/s at 50
/// connections × 1 request; see `docs/decisions/0044-an-adaptive-commit-spin.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Spin {
    /// Twice the last gap, within the bounds.
    learnt: Duration,
    /// Batches in the last group committed.
    last_group: u64,
}

impl Default for Spin {
    fn default() -> Spin {
        Spin {
            learnt: Spin::MIN,
            last_group: 0,
        }
    }
}

impl Spin {
    /// About one loopback round trip of a client that sends its next request as soon as it
    /// has the reply, with every thread on a running CPU (server_bench's one-connection
    /// client: ~35 µs against beanstalkd).
    const MIN: Duration = Duration::from_micros(50);
    /// Longer gaps are not a synchronous client's turn-around: parking is cheaper.
    const MAX: Duration = Duration::from_micros(1000);

    fn budget(&self) -> Duration {
        if self.last_group == 1 {
            self.learnt
        } else {
            Spin::MIN
        }
    }

    /// Records that the committer is about to commit a group of `batches` batches.
    fn group(&mut self, batches: u64) {
        self.last_group = batches;
    }

    /// Records that the next batch came `gap` after the committer ran out of work.
    fn learn(&mut self, gap: Duration) {
        self.learnt = if gap > Spin::MAX {
            Spin::MIN
        } else {
            (gap * 2).clamp(Spin::MIN, Spin::MAX)
        };
    }
}

/// Estimated bytes a batch adds to the journal: a put's body and tube name plus a fixed
/// allowance per change for keys, index entries and framing. An update rewrites the job's
/// record (with its body) in the store, which this cannot see; the free-space reserve covers
/// that error (see `docs/decisions/0006-free-space-guard.md`).
pub fn batch_bytes(batch: &[Change]) -> u64 {
    /// Keys, locator, counters and journal framing of one change, rounded up.
    const PER_CHANGE: u64 = 128;
    batch
        .iter()
        .map(|c| match c {
            Change::Put(r) => PER_CHANGE + r.body.len() as u64 + r.tube.as_str().len() as u64,
            _ => PER_CHANGE,
        })
        .sum()
}

/// Resolves once its batch, and every batch submitted before it, is durable; see
/// [`GroupCommit::submit`]. Waiting may make this caller the one that commits (and fsyncs)
/// the group.
#[derive(Clone)]
pub struct Ticket {
    seq: u64,
    shared: Option<Arc<Shared<dyn Store>>>,
    /// Set for a ticket that failed before it was queued.
    failed: Option<StoreError>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").field("seq", &self.seq).finish()
    }
}

impl Ticket {
    /// A ticket for nothing: already resolved.
    pub fn done() -> Ticket {
        Ticket {
            seq: 0,
            shared: None,
            failed: None,
        }
    }

    /// A ticket that resolves at once to `error` (for a batch refused before it was queued).
    pub fn failed(error: StoreError) -> Ticket {
        Ticket {
            seq: 0,
            shared: None,
            failed: Some(error),
        }
    }

    /// Blocks until the batch is durable, committing the group on this thread if no other
    /// caller is.
    ///
    /// # Errors
    ///
    /// The error of the commit that covered the batch, or [`StoreError::Poisoned`] if an
    /// earlier commit failed.
    pub fn wait(&self) -> Result<(), StoreError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match &self.shared {
            None => Ok(()),
            Some(s) => s.wait(self.seq),
        }
    }

    /// As [`wait`](Ticket::wait), as a future: pending while another caller commits; if none
    /// does, the poll commits the group itself (blocking that poll for one store commit,
    /// typically one fsync).
    ///
    /// # Cancellation safety
    ///
    /// Dropping the future abandons nothing: the batch stays queued and is committed by the
    /// next waiter (or when the [`GroupCommit`] is dropped).
    pub fn durable(&self) -> Durable<'_> {
        Durable { ticket: self }
    }
}

/// The future of [`Ticket::durable`].
#[must_use = "futures do nothing unless polled"]
pub struct Durable<'a> {
    ticket: &'a Ticket,
}

impl Future for Durable<'_> {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(e) = &self.ticket.failed {
            return Poll::Ready(Err(e.clone()));
        }
        match &self.ticket.shared {
            None => Poll::Ready(Ok(())),
            Some(s) => s.poll_durable(self.ticket.seq, cx),
        }
    }
}

impl<S: Store + 'static> Store for GroupCommit<S> {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.submit(batch.to_vec())?.wait()
    }

    fn writable(&self, bytes: u64) -> Result<(), StoreError> {
        GroupCommit::writable(self, bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn the_spin_budget_is_twice_the_last_gap_within_its_bounds() {
        let mut spin = Spin::default();
        assert_eq!(spin.budget(), Spin::MIN);
        spin.group(1);
        // A lone synchronous client: its next batch came 180 µs after the commit.
        spin.learn(us(180));
        assert_eq!(spin.budget(), us(360));
        // Shorter gaps never spin less than the minimum.
        spin.learn(us(10));
        assert_eq!(spin.budget(), Spin::MIN);
        // Gaps near the maximum are capped at it.
        spin.learn(us(700));
        assert_eq!(spin.budget(), Spin::MAX);
        spin.learn(Spin::MAX);
        assert_eq!(spin.budget(), Spin::MAX);
        // A gap longer than the maximum is not a client's turn-around: back to the minimum.
        spin.learn(Spin::MAX + us(1));
        assert_eq!(spin.budget(), Spin::MIN);
        spin.learn(Duration::from_secs(30));
        assert_eq!(spin.budget(), Spin::MIN);
    }

    #[test]
    fn after_a_group_of_several_batches_the_spin_is_the_minimum() {
        let mut spin = Spin::default();
        spin.group(1);
        spin.learn(us(200));
        assert_eq!(spin.budget(), us(400));
        // A crowd: the gaps belong to the connections.
        spin.group(12);
        assert_eq!(spin.budget(), Spin::MIN);
        spin.learn(us(300));
        assert_eq!(spin.budget(), Spin::MIN);
        // A lone client again: the gap learnt meanwhile applies.
        spin.group(1);
        assert_eq!(spin.budget(), us(600));
        // An empty count (nothing committed yet) is not a lone client either.
        spin.group(0);
        assert_eq!(spin.budget(), Spin::MIN);
    }
}
