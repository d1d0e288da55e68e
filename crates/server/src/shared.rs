//! State shared by the connections and the timer driver.
//!
//! # Ground rules
//!
//! - The engine is reachable only through [`Shared::apply`] (an operation that may change it)
//!   and [`Shared::read`] (one that cannot). `apply` runs the operation, submits its changes
//!   to the store's group commit and hands its events to the waiting clients in one critical
//!   section, so the commit order is the engine order and no caller can forget a step. The
//!   lock is never held across an `.await`.
//! - Every reply waits for the ticket `apply` returns: the ticket of the operation's own
//!   changes, or of the latest batch submitted when it made none, so no client ever sees state
//!   that is not durable yet. The exception is a `RESERVED` reply, whose content is one job:
//!   it waits only until that job's latest change is durable ([`Shared::job_ticket`]), not for
//!   other clients' commits in flight (on PostgreSQL a commit can take tens of ms under load,
//!   and every delayed job that fell due waited for one).
//! - A waiting client (blocked in `reserve`) has an entry in `waiters`; an event for it is sent
//!   there together with the ticket of the commit it depends on.
//! - Every reading of the time goes through `clock` (the server's [`Clock`]): the engine's
//!   wall-clock milliseconds ([`Shared::clock_reading`]), `uptime`, and the timer driver's
//!   sleeps, which are [`tickwheel::Sleep`]s on a [`Timer`] of the same clock. So a
//!   [`ManualClock`](tickwheel::ManualClock) moves the whole server.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tickwheel::{Clock, Timer};
use tickwheel_proto::Reply;
use tickwheel_queue::{Change, ClientId, Engine, Event, JobId, Load, Millis};
use tickwheel_store::{GroupCommit, Store, StoreError, Ticket};
use tokio::sync::{mpsc, Notify};

use crate::http::metrics::{MeteredStore, Metrics};

/// A reply to send once its commit is durable.
pub(crate) type Pending = (Ticket, Reply);

/// Counters of the commands the engine does not see.
#[derive(Default)]
pub(crate) struct ServerCounters {
    pub(crate) reserve_with_timeout: AtomicU64,
    pub(crate) stats: AtomicU64,
    pub(crate) stats_job: AtomicU64,
    pub(crate) stats_tube: AtomicU64,
    pub(crate) list_tubes: AtomicU64,
    pub(crate) list_tube_used: AtomicU64,
    pub(crate) list_tubes_watched: AtomicU64,
}

pub(crate) struct Shared {
    /// Only through [`Shared::apply`] and [`Shared::read`].
    engine: Mutex<Engine>,
    /// The store, behind its group commit (reads go straight to the store).
    group: GroupCommit<Arc<dyn Store>>,
    /// Held while a window load is in flight: one at a time.
    loader: tokio::sync::Mutex<()>,
    pub(crate) waiters: Mutex<FxHashMap<ClientId, mpsc::Sender<Pending>>>,
    /// Wakes the timer driver when an earlier deadline appears.
    pub(crate) timer_changed: Notify,
    pub(crate) driver_target: AtomicU64,
    next_client: AtomicU64,
    pub(crate) counters: ServerCounters,
    /// Where the time comes from (the system clock outside tests).
    clock: Arc<dyn Clock>,
    /// The driver's sleeps: a timer service on `clock`, so that a manual clock wakes them.
    timer: Timer,
    /// `clock.now()` when the server started, for `uptime`.
    started: Instant,
    pub(crate) instance_id: String,
    /// beanstalkd's `-s`, shown in `stats` only ([`crate::Config::binlog_max_size`]).
    pub(crate) binlog_max_size: u64,
    /// Job records (a put, update or delete: what beanstalkd's binlog writes one record for)
    /// handed to a durable store since start: `stats`' `binlog-records-written`. Stays 0
    /// for a store in memory, as beanstalkd's without `-b`.
    binlog_records: AtomicU64,
    /// The store keeps nothing (`inline_commits`): no records are counted.
    in_memory: bool,
    /// The engine writes a `reserve-job` of a delayed or buried job
    /// ([`tickwheel_queue::Config::write_reserve_job`]), so it is checked with the store first.
    pub(crate) write_reserve_job: bool,
    /// Largest clock reading handed to the engine (the engine's clock never runs backwards).
    latest: AtomicU64,
    /// Set once the first failed commit has been logged (the store refuses every write after
    /// it, so one line says so instead of one per reply).
    failure_logged: AtomicBool,
    /// Writes are being refused for lack of free space (logged once when it starts and once
    /// when it ends).
    low_space: AtomicBool,
    /// What `/metrics` reports beyond the engine's own counts.
    pub(crate) metrics: Metrics,
    /// Writes are being refused because the database is unreachable (PostgreSQL backend).
    unreachable: AtomicBool,
    /// The jobs whose latest change may not be durable yet. Changed only under the engine
    /// lock (in [`Shared::after_op`]).
    unsettled: Mutex<Unsettled>,
    /// Set when the node serves a PostgreSQL schema beside other nodes (active-active):
    /// reserves are claimed in the database, holder-checked commands run there first.
    pub(crate) active: std::sync::OnceLock<Arc<crate::cluster::active::Active>>,
}

/// Which jobs' latest changes may still be in flight, so that a `RESERVED` reply waits only
/// for its own job ([`Shared::job_ticket`]).
///
/// Every batch goes through [`Shared::after_op`] to the group commit, which commits batches in
/// submission order and counts the changes it has made durable
/// ([`GroupStats::mutations`](tickwheel_store::GroupStats::mutations)). So a batch is durable
/// once that count reaches the number of changes submitted up to and including it: the mark
/// kept per job. A job without an entry has every change durable (recovered, loaded from the
/// store, or pruned once its mark was reached).
#[derive(Default)]
struct Unsettled {
    /// Changes submitted so far.
    submitted: u64,
    /// Job → `submitted` after the batch holding its latest change.
    /// Keyed by server-made ids: FxHash, not SipHash (no attacker picks the keys).
    marks: FxHashMap<JobId, u64>,
    /// Prune the durable entries when `marks` reaches this size.
    prune_at: usize,
}

impl Unsettled {
    const MIN_PRUNE_AT: usize = 1024;

    /// Records a batch about to be submitted.
    fn submitting(&mut self, batch: &[Change], durable: u64) {
        self.submitted += batch.len() as u64;
        for change in batch {
            match change {
                Change::Put(r) => {
                    self.marks.insert(r.id, self.submitted);
                }
                Change::Update { id, .. } => {
                    self.marks.insert(*id, self.submitted);
                }
                Change::Delete { id } => {
                    self.marks.remove(id);
                }
                Change::ReserveIds { .. } => {}
            }
        }
        if self.marks.len() >= self.prune_at {
            self.marks.retain(|_, mark| *mark > durable);
            self.prune_at = (self.marks.len() * 2).max(Self::MIN_PRUNE_AT);
        }
    }

    /// A batch recorded by [`submitting`](Self::submitting) was refused (never queued): the
    /// count must stay equal to the group commit's. Its jobs keep their entries, which is
    /// harmless: a reply then waits as for any other job with a change in flight.
    fn refused(&mut self, batch_len: usize) {
        self.submitted -= batch_len as u64;
    }

    fn is_durable(&self, id: JobId, durable: u64) -> bool {
        self.marks.get(&id).is_none_or(|mark| *mark <= durable)
    }
}

impl Shared {
    /// The shared state around `engine`. With `inline_commits` (a store in memory) each
    /// submit commits before it returns ([`GroupCommit::inline`]); else a committer thread
    /// commits each group ([`GroupCommit::with_thread`]).
    pub(crate) fn new(
        engine: Engine,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        inline_commits: bool,
    ) -> std::io::Result<Shared> {
        // One driver thread and no workers: its only timers are the driver's sleeps, whose
        // firing is a waker call.
        let timer = Timer::builder()
            .clock(clock.clone())
            .worker_threads(0)
            .shards(1)
            .thread_name("tickwheel-server-timer")
            .build()
            .map_err(std::io::Error::other)?;
        let started = clock.now();
        let metrics = Metrics::new();
        // Commits are timed and counted below the group commit: one store commit per batch.
        let store: Arc<dyn Store> = Arc::new(MeteredStore::new(store, &metrics));
        // A seed for the instance id, not a time: the real clock even under a manual one, so
        // that two servers of one test do not share an id.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let write_reserve_job = engine.config().write_reserve_job;
        Ok(Shared {
            engine: Mutex::new(engine),
            // A committer thread rather than leading waiters: see ADR 0005 (the fsync from
            // whichever tokio worker leads cost ~3 ms more per commit on ext4 here). In
            // memory the commit is a map update: made by the submitter, it spares every reply
            // a thread hand-off (docs/decisions/0030-in-memory-commits-inline.md).
            group: if inline_commits {
                GroupCommit::inline(store)
            } else {
                GroupCommit::with_thread(store)?
            },
            loader: tokio::sync::Mutex::new(()),
            waiters: Mutex::new(FxHashMap::default()),
            timer_changed: Notify::new(),
            driver_target: AtomicU64::new(u64::MAX),
            next_client: AtomicU64::new(1),
            counters: ServerCounters::default(),
            clock,
            timer,
            started,
            instance_id: format!(
                "{:016x}",
                (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
            ),
            binlog_max_size: crate::DEFAULT_BINLOG_MAX_SIZE,
            binlog_records: AtomicU64::new(0),
            in_memory: inline_commits,
            write_reserve_job,
            latest: AtomicU64::new(0),
            failure_logged: AtomicBool::new(false),
            low_space: AtomicBool::new(false),
            metrics,
            unreachable: AtomicBool::new(false),
            unsettled: Mutex::new(Unsettled::default()),
            active: std::sync::OnceLock::new(),
        })
    }

    /// Wall-clock milliseconds since the Unix epoch: delays are stored as absolute times so
    /// they survive restarts.
    pub(crate) fn now(&self) -> Millis {
        self.clock_reading().0
    }

    /// The clock in whole milliseconds (rounded down, so nothing is found due early), and
    /// whether the true time is past that millisecond. A deadline computed from the reading
    /// must add one millisecond when it is: a job put at 10.9 ms with a 1 s delay is due at
    /// 1010.9 ms, so the engine must see it due at 1011, not 1010.
    pub(crate) fn clock_reading(&self) -> (Millis, bool) {
        let (wall, fraction) = wall_millis(self.clock.system_time());
        let previous = self.latest.fetch_max(wall, Ordering::Relaxed);
        if previous > wall {
            // The wall clock stepped back: the engine keeps its later reading.
            return (previous, true);
        }
        (wall, fraction)
    }

    /// `binlog-records-written`: job records handed to a durable store since start.
    pub(crate) fn binlog_records_written(&self) -> u64 {
        self.binlog_records.load(Ordering::Relaxed)
    }

    /// Counts one job record written for this server without passing through its store (an
    /// active-active node's holder-checked delete, run in the database itself), as
    /// `binlog-records-written` counts the store's.
    pub(crate) fn count_record_written(&self) {
        self.binlog_records.fetch_add(1, Ordering::Relaxed);
    }

    /// Whole seconds since the server started, by its clock.
    pub(crate) fn uptime(&self) -> u64 {
        self.clock
            .now()
            .saturating_duration_since(self.started)
            .as_secs()
    }

    /// A sleep until the engine's clock reaches `deadline` (wall-clock ms), or until an
    /// hour has passed if that is sooner (the driver then looks again).
    ///
    /// Never later than `deadline` by the clock (but for the timer's 1 ms tick): the wait is
    /// measured from the monotonic reading taken *before* the wall-clock one, so a clock that
    /// moves between the two readings shortens the sleep, never lengthens it. Ending early is
    /// harmless: what is due is the engine's call on a wall-clock reading, so the driver
    /// finds nothing due and sleeps again (as when the wall clock runs behind the monotonic
    /// one).
    fn sleep_until(&self, deadline: Option<Millis>) -> tickwheel::Sleep {
        const AT_MOST: Duration = Duration::from_secs(3600);
        let base = self.clock.now();
        let wait = match deadline {
            Some(deadline) => Duration::from_millis(deadline.saturating_sub(self.now())),
            None => AT_MOST,
        };
        self.timer.sleep_until(base + wait.min(AT_MOST))
    }

    /// Waits until `ticket` is durable and returns `reply`, or `INTERNAL_ERROR` if the commit
    /// failed. The first failure is logged once, saying what it means and what to do.
    pub(crate) async fn settle(&self, ticket: &Ticket, reply: Reply) -> Reply {
        match ticket.durable().await {
            Ok(()) => reply,
            Err(error) => {
                self.log_store_failure(&error);
                Reply::InternalError
            }
        }
    }

    /// Logs a failed commit once (see [`Shared::settle`]).
    pub(crate) fn log_commit_failure(&self, error: &StoreError) {
        self.log_store_failure(error);
    }

    fn log_store_failure(&self, error: &StoreError) {
        let refused = match error {
            StoreError::LowSpace { .. } => true,
            other => matches!(other.poison_cause(), Some(StoreError::LowSpace { .. })),
        };
        if refused && !self.failure_logged.swap(true, Ordering::Relaxed) {
            // The commit-time check refused a batch the engine had already applied (free space
            // fell between the admission check and the commit, e.g. another process filled the
            // disk): nothing was written, but memory is ahead of the disk.
            tracing::error!(
                %error,
                "the disk filled up between a write's admission and its commit; nothing was \
                 written, but the server's memory holds the refused change, so from now on every \
                 write answers INTERNAL_ERROR (reads keep working); free space and restart the \
                 server to recover (nothing acknowledged is lost)"
            );
        }
        if !self.failure_logged.swap(true, Ordering::Relaxed) {
            tracing::error!(
                %error,
                "store commit failed: from now on every write answers INTERNAL_ERROR (the \
                 store refuses further writes; reads keep working); restart the server to \
                 recover"
            );
        }
    }

    /// Asked before a command that may make durable changes runs: whether the store would
    /// take about `bytes` more bytes now. A refused command must not touch the engine (so its
    /// memory never holds a change the store did not take); it answers `OUT_OF_MEMORY` if a
    /// `put` was refused for lack of disk space (beanstalkd's answer to a put its full disk
    /// cannot hold), `INTERNAL_ERROR` otherwise. Logs once when refusals for lack of space
    /// start and once when they end; they end by themselves once space is freed.
    pub(crate) fn admit(&self, bytes: u64) -> Result<(), Refused> {
        match self.group.writable(bytes) {
            Ok(()) => {
                if self.low_space.load(Ordering::Relaxed)
                    && self.low_space.swap(false, Ordering::Relaxed)
                {
                    tracing::info!(
                        "free space is back above the reserve: writes are accepted again"
                    );
                }
                if self.unreachable.load(Ordering::Relaxed)
                    && self.unreachable.swap(false, Ordering::Relaxed)
                {
                    tracing::info!("the database answers again: writes are accepted again");
                }
                Ok(())
            }
            Err(error @ StoreError::LowSpace { .. }) => {
                if !self.low_space.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %error,
                        "refusing writes (puts answer OUT_OF_MEMORY, as beanstalkd's on a full \
                         disk, other writes INTERNAL_ERROR) until space is freed; reads keep \
                         working and nothing acknowledged is affected (--min-free-space sets \
                         the reserve)"
                    );
                }
                Err(Refused::LowSpace)
            }
            Err(error @ StoreError::Unavailable { .. }) => {
                if !self.unreachable.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %error,
                        "refusing writes (INTERNAL_ERROR) while the database is unreachable; \
                         reads keep working, writes in flight wait for it, nothing acknowledged \
                         is affected"
                    );
                }
                Err(Refused::Other)
            }
            Err(error) => {
                self.log_store_failure(&error);
                Err(Refused::Other)
            }
        }
    }

    /// [`Shared::admit`] as a yes or no.
    pub(crate) fn writable(&self, bytes: u64) -> bool {
        self.admit(bytes).is_ok()
    }

    /// The ticket of the latest batch submitted: resolves once everything submitted so far
    /// is durable.
    pub(crate) fn last_ticket(&self) -> Ticket {
        self.group.last_ticket()
    }

    /// Batches submitted to the store so far (tests: did a command make durable changes?).
    #[cfg(test)]
    pub(crate) fn batches_submitted(&self) -> u64 {
        self.group.stats().caller_commits
    }

    pub(crate) fn next_client_id(&self) -> ClientId {
        ClientId(self.next_client.fetch_add(1, Ordering::Relaxed))
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock cannot leave the engine half-updated in a way that
        // matters more than stopping would: keep serving.
        self.engine
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `op` on the engine and, in the same critical section, submits the changes it made
    /// to the group commit, hands its events to the waiting clients and wakes the timer
    /// driver if a deadline moved earlier. Returns the ticket the operation's reply must wait
    /// for, and what `op` returned.
    pub(crate) fn apply<R>(&self, op: impl FnOnce(&mut Engine) -> R) -> (Ticket, R) {
        let mut engine = self.lock();
        if let Some(active) = self.active.get() {
            // Before the operation (it may advance the wheel): the due times the last commits
            // moved onto the database's clock.
            active.retime(&mut engine);
        }
        let r = op(&mut engine);
        let ticket = self.after_op(&mut engine);
        (ticket, r)
    }

    /// Runs `op` on the engine, read-only.
    pub(crate) fn read<R>(&self, op: impl FnOnce(&Engine) -> R) -> R {
        op(&self.lock())
    }

    /// What a `RESERVED` reply of job `id` waits for, given the ticket of the operation that
    /// reserved it (`op`): nothing if every change of the job is durable already (a delayed
    /// job that fell due, put long ago), else `op`, which covers everything submitted until
    /// then. Call it after the operation's [`apply`](Self::apply) returned.
    /// Keeps those of `ids` whose changes are all durable (no change of theirs in flight).
    pub(crate) fn retain_durable(&self, ids: &mut Vec<JobId>) {
        let durable = self.group.stats().mutations;
        let unsettled = self.unsettled();
        ids.retain(|id| unsettled.is_durable(*id, durable));
    }

    pub(crate) fn job_ticket(&self, id: JobId, op: &Ticket) -> Ticket {
        let durable = self.group.stats().mutations;
        if self.unsettled().is_durable(id, durable) {
            Ticket::done()
        } else {
            op.clone()
        }
    }

    fn unsettled(&self) -> MutexGuard<'_, Unsettled> {
        self.unsettled.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn after_op(&self, engine: &mut Engine) -> Ticket {
        let changes = engine.take_changes();
        let ticket = if changes.is_empty() {
            if self.group.poisoned().is_some() {
                // After a failed commit nothing becomes durable any more, so waiting for the
                // last batch would fail every read. Reads answer from memory instead: the
                // acknowledged state plus the changes whose commands were answered
                // INTERNAL_ERROR (outcome unknown: a failed fsync may or may not have kept
                // them). Writes are refused before they run (`writable`), so memory moves no
                // further from the disk. See docs/decisions/0010-fjall-3.md.
                Ticket::done()
            } else {
                self.group.last_ticket()
            }
        } else {
            let len = changes.len();
            if !self.in_memory {
                let records = changes
                    .iter()
                    .filter(|c| !matches!(c, Change::ReserveIds { .. }))
                    .count();
                self.binlog_records
                    .fetch_add(records as u64, Ordering::Relaxed);
            }
            let durable = self.group.stats().mutations;
            self.unsettled().submitting(&changes, durable);
            match self.group.submit(changes) {
                Ok(ticket) => ticket,
                Err(error) => {
                    self.unsettled().refused(len);
                    self.log_store_failure(&error);
                    Ticket::failed(error)
                }
            }
        };
        for ms in engine.take_lateness() {
            self.metrics.observe_lateness(ms);
        }
        let events = engine.take_events();
        if !events.is_empty() {
            let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            for event in events {
                let (client, reply, ticket) = match event {
                    Event::Reserved { client, job } => {
                        let ticket = self.job_ticket(job.id, &ticket);
                        (client, Reply::Reserved(job.id, job.body), ticket)
                    }
                    Event::TimedOut { client } => (client, Reply::TimedOut, ticket.clone()),
                    Event::DeadlineSoon { client } => (client, Reply::DeadlineSoon, ticket.clone()),
                };
                if let Some(tx) = waiters.get(&client) {
                    // Capacity 1 and one wait at a time: this never fails for a live waiter.
                    let _ = tx.try_send((ticket, reply));
                }
            }
        }
        if let Some(next) = engine.next_deadline() {
            if next < self.driver_target.load(Ordering::Acquire) {
                self.timer_changed.notify_one();
            }
        }
        ticket
    }
}

impl Shared {
    /// Moves the engine's memory window if it asks to (or widens it when `widen`), loading the
    /// far jobs of the new range from the store. Returns `false` if there was nothing to load.
    ///
    /// Loads run one at a time (`loader`); the store is read only after every change taken so
    /// far is durable, so a job put just before the load is in the read.
    pub(crate) async fn load_window(&self, widen: bool) -> Result<bool, StoreError> {
        let _one_at_a_time = self.loader.lock().await;
        let now = self.now();
        let (ticket, range) = self.apply(|engine| {
            if widen {
                engine.widen_window()
            } else {
                engine.window_load(now)
            }
        });
        let Some((from, to)) = range else {
            return Ok(false);
        };
        let _ = ticket.durable().await;
        let store = self.group.inner().clone();
        let records =
            tokio::task::spawn_blocking(move || store.delayed_between(from, to, usize::MAX))
                .await
                .unwrap_or_else(|_| Ok(Vec::new()));
        let records = match records {
            Ok(records) => records,
            Err(error) => {
                // Keep the engine consistent: complete the load empty-handed. The jobs stay
                // counted as far and are retried by id or at restart; report the failure.
                self.apply(|engine| engine.load_window(Vec::new()));
                return Err(error);
            }
        };
        self.metrics.window_loaded(records.len());
        self.apply(|engine| engine.load_window(records));
        Ok(true)
    }

    /// Carries out a load the engine asked for ([`Load`]): reads a job by id, or the next
    /// range of far jobs, from the store, once every change made so far is durable.
    pub(crate) async fn load(&self, load: Load) -> Result<(), StoreError> {
        match load {
            Load::Job(id) => {
                let _ = self.last_ticket().durable().await;
                let store = self.group.inner().clone();
                let record = tokio::task::spawn_blocking(move || store.get(id))
                    .await
                    .unwrap_or(Ok(None))?;
                self.apply(|engine| engine.load_job(id, record));
                Ok(())
            }
            Load::Widen => self.load_window(true).await.map(|_| ()),
        }
    }
}

/// Runs the engine's timers: sleeps until the next deadline (or an earlier one appears),
/// then advances the engine and moves its memory window when due.
pub(crate) async fn drive_timers(
    shared: Arc<Shared>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        // While the driver is awake every operation leaves a wake-up permit, so a deadline
        // added between reading `next` and going to sleep is not slept through.
        shared.driver_target.store(0, Ordering::Release);
        let now = shared.now();
        shared.apply(|engine| engine.advance(now));
        if let Err(error) = shared.load_window(false).await {
            tracing::error!(%error, "cannot load delayed jobs from the store");
        }
        let next = shared.read(|engine| {
            let next = engine.next_deadline();
            // Published under the engine lock: an operation that adds an earlier deadline
            // after this sees the new target and wakes the driver.
            shared
                .driver_target
                .store(next.unwrap_or(u64::MAX), Ordering::Release);
            next
        });
        let sleep = shared.sleep_until(next);
        tokio::select! {
            () = sleep => {}
            () = shared.timer_changed.notified() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// A wall-clock time in whole milliseconds since the Unix epoch (rounded down; 0 before it),
/// and whether it is past that millisecond.
pub(crate) fn wall_millis(time: SystemTime) -> (Millis, bool) {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
    (ms, !since_epoch.subsec_nanos().is_multiple_of(1_000_000))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use tickwheel_queue::{Change, DurableState, JobId, JobRecord, TubeName};

    use super::Unsettled;

    #[derive(Clone, Debug)]
    enum Op {
        /// A batch of (job, kind) changes: 0 put, 1 update, 2 delete, 3 id reservation.
        Submit(Vec<(JobId, u8)>),
        /// The oldest batch not yet durable becomes durable.
        Commit,
    }

    fn change(id: JobId, kind: u8) -> Change {
        match kind {
            0 => Change::Put(JobRecord {
                id,
                tube: TubeName::new("default").expect("valid name"),
                priority: 0,
                ttr: 1000,
                state: DurableState::Ready,
                created: 0,
                body: bytes::Bytes::new(),
                idempotency_key: None,
                history: Default::default(),
            }),
            1 => Change::Update {
                id,
                state: DurableState::Buried,
                priority: 1,
                history: Default::default(),
            },
            2 => Change::Delete { id },
            _ => Change::ReserveIds { end: id },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Against a model that remembers which batch changed each job last: a job counts as
        /// durable exactly when that batch is (or a delete was its last change, or it has none),
        /// across the pruning of durable entries (wide ids and big batches make it prune).
        #[test]
        fn a_job_is_durable_once_the_batch_of_its_latest_change_is(
            ops in prop::collection::vec(
                prop_oneof![
                    prop::collection::vec((0u64..3000, 0u8..4), 1..60).prop_map(Op::Submit),
                    Just(Op::Commit),
                ],
                1..150,
            )
        ) {
            let mut unsettled = Unsettled::default();
            // The model: batch sizes in order, the last batch index per job, batches durable.
            let mut batches: Vec<u64> = Vec::new();
            let mut last: HashMap<JobId, Option<usize>> = HashMap::new();
            let mut committed = 0usize;
            let mut mutations = 0u64; // what the group commit counts
            for op in ops {
                match op {
                    Op::Submit(items) => {
                        let batch: Vec<Change> =
                            items.iter().map(|&(id, kind)| change(id, kind)).collect();
                        unsettled.submitting(&batch, mutations);
                        for &(id, kind) in &items {
                            match kind {
                                0 | 1 => { last.insert(id, Some(batches.len())); }
                                2 => { last.insert(id, None); }
                                _ => {}
                            }
                        }
                        batches.push(batch.len() as u64);
                    }
                    Op::Commit => {
                        if committed < batches.len() {
                            mutations += batches[committed];
                            committed += 1;
                        }
                    }
                }
                prop_assert!(unsettled.is_durable(3000, mutations), "a job never changed");
                for (&id, batch) in &last {
                    let expected = batch.is_none_or(|b| b < committed);
                    prop_assert_eq!(unsettled.is_durable(id, mutations), expected, "job {}", id);
                }
            }
        }
    }
}

/// Why [`Shared::admit`] refused a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Less free disk space than the reserve would remain.
    LowSpace,
    /// The store refuses writes for another reason (a failed commit, an unreachable database).
    Other,
}
