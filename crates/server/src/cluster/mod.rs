//! The server on PostgreSQL (`--postgres URL`): the active node of a schema, its standbys, and
//! the jobs applications put with SQL. Design: `docs/decisions/0008-postgresql-backend.md`.
//!
//! # Ground rules
//!
//! - A node serves only while it holds the schema's [`ActiveLock`]; it waits for the lock
//!   (standby) and fences off the previous holder's commits ([`PgStore::fenced`]) before it
//!   reads a single job, so two engines never decide about the same jobs and no commit of
//!   the old node lands after the new one read them.
//!   A node that loses the lock's session exits at once (status 75): it can no longer know
//!   that it is alone, and everything it acknowledged is committed already.
//! - Every PostgreSQL call here runs on a plain thread (the synchronous client refuses to run
//!   on an async runtime's worker): [`open`] on a scoped thread, [`Watcher`] on its own.
//! - Jobs put by `<schema>.put(...)` reach the engine only through [`Engine::adopt`]
//!   (notified after the application's commit; polled every [`POLL`] as a fallback, for ids
//!   above the largest seen), and SQL deletes through [`Engine::forget`]. Both go through
//!   [`Shared::apply`], so waiting reservers are served and the timer driver is woken as for a
//!   client's `put`.
//!
//! [`Engine::adopt`]: tickwheel_queue::Engine::adopt
//! [`Engine::forget`]: tickwheel_queue::Engine::forget

pub(crate) mod active;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use postgres::fallible_iterator::FallibleIterator as _;
use postgres::{Client, NoTls};
use tickwheel_pg::{ActiveLock, Node, PgOptions, PgStore};
use tickwheel_queue::{JobId, JobState, FOREIGN_ID_BASE};
use tickwheel_store::{Recovered, Store};

use crate::shared::Shared;

/// How often the watcher checks the active lock and polls for SQL puts whose notification it
/// may have missed: the bound on how late a committed SQL put reaches a node whose listening
/// connection broke.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// Exit status of a node that lost its active lock (EX_TEMPFAIL: a supervisor restarts it,
/// and it comes back as a standby).
const LOST_LOCK_EXIT: i32 = 75;

/// What [`open`] hands the server: the store, what it holds, and the lock.
pub(crate) struct Opened {
    pub(crate) store: Arc<PgStore>,
    pub(crate) recovered: Recovered,
    /// Standby mode: the active node's lock. Active-active: `None`.
    pub(crate) lock: Option<ActiveLock>,
    /// Active-active: this node's registration.
    pub(crate) node: Option<Node>,
}

/// Waits to become the active node of the schema (logging that it is a standby while it
/// waits), opens the store (creating or migrating the schema) and reads what the engine
/// starts from, on a plain thread.
///
/// # Errors
///
/// The database is unreachable, refuses, or has a newer schema than this build knows.
pub(crate) fn open(
    options: &PgOptions,
    window_end_ms: u64,
    clock: &Arc<dyn tickwheel::Clock>,
) -> anyhow::Result<Opened> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> anyhow::Result<Opened> {
                // The schema first, so a newer schema is refused before waiting for the lock.
                let store = PgStore::open(options).with_context(|| {
                    format!("cannot open PostgreSQL schema {}", options.schema.as_str())
                })?;
                if options.active_active {
                    let node = Node::join(options).context("cannot join the schema's nodes")?;
                    tracing::info!(
                        node = node.id(),
                        ids = ?node.ids(),
                        "serving beside any other nodes of this schema (active-active)"
                    );
                    // Due times move onto the database clock from the engine's clock (the
                    // server's), and back onto it for the wheel: the clock offset is read
                    // first, so the recovered jobs' due times are on the node's clock too.
                    let clock = clock.clone();
                    let store = store
                        .shared()
                        .with_node_clock(move || crate::shared::wall_millis(clock.system_time()).0);
                    store
                        .sync_clock()
                        .context("cannot read the database clock")?;
                    let recovered = store
                        .recover(window_end_ms)
                        .context("cannot read the jobs from PostgreSQL")?;
                    return Ok(Opened {
                        store: Arc::new(store),
                        recovered,
                        lock: None,
                        node: Some(node),
                    });
                }
                let lock = ActiveLock::acquire(options, || {
                    tracing::info!(
                        schema = options.schema.as_str(),
                        "another node is active on this schema: waiting as a standby"
                    );
                })
                .context("cannot take the schema's active-node lock")?;
                // Before the first read: the previous active node's commits still in flight
                // end first, and none of its commits lands after this (PgStore::fenced).
                let store = store
                    .fenced(&lock)
                    .context("cannot fence off the previous active node")?;
                let recovered = store
                    .recover(window_end_ms)
                    .context("cannot read the jobs from PostgreSQL")?;
                Ok(Opened {
                    store: Arc::new(store),
                    recovered,
                    lock: Some(lock),
                    node: None,
                })
            })
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the PostgreSQL start-up thread panicked")))
    })
}

/// The foreign ids among `recovered`'s jobs: the engine has them already.
pub(crate) fn foreign_ids(recovered: &Recovered) -> HashSet<JobId> {
    recovered
        .resident
        .iter()
        .map(|r| r.id)
        .filter(|id| *id >= FOREIGN_ID_BASE)
        .collect()
}

/// Foreign ids handed to the engine, each at most once: a job adopted (by notification or
/// poll), then reserved and deleted by a client, must not come back from a second
/// notification or a poll that read the row before the client's delete committed.
struct Adopted {
    ids: HashSet<JobId>,
    /// The largest id ever adopted: the poll looks above it.
    largest: JobId,
}

impl Adopted {
    /// Entries beyond this are pruned to the ids whose rows still exist (a deleted row can
    /// never be read again, so its id needs no guard).
    const PRUNE_AT: usize = 100_000;

    fn new(ids: HashSet<JobId>) -> Adopted {
        let largest = ids.iter().copied().max().unwrap_or(FOREIGN_ID_BASE - 1);
        Adopted { ids, largest }
    }

    /// Whether `id` is new (and records it).
    fn first_time(&mut self, id: JobId) -> bool {
        self.largest = self.largest.max(id);
        self.ids.insert(id)
    }

    fn prune(&mut self, store: &PgStore) {
        if self.ids.len() < Self::PRUNE_AT {
            return;
        }
        let ids: Vec<JobId> = self.ids.iter().copied().collect();
        match store.existing(&ids) {
            Ok(live) => self.ids = live.into_iter().collect(),
            Err(error) => tracing::warn!(%error, "cannot prune the adopted-id set"),
        }
    }
}

/// The node's watcher thread: holds the active lock, listens for SQL puts and deletes, polls
/// as a fallback. [`Watcher::stop`] ends it and waits for it; dropped, it is told to stop and
/// ends by itself (within [`POLL`]).
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Active-active: the thread that claims other nodes' deferred jobs on demand.
    claimer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Watcher {
    /// Starts the watcher.
    ///
    /// # Errors
    ///
    /// The OS refused to start a thread.
    pub(crate) fn start(
        shared: Arc<Shared>,
        store: Arc<PgStore>,
        lock: Option<ActiveLock>,
        adopted: HashSet<JobId>,
    ) -> std::io::Result<Watcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let claimer = match shared.active.get().cloned() {
            Some(active) => match active.take_wake_ups() {
                Some(woken) => {
                    let (shared, flag) = (shared.clone(), stop.clone());
                    Some(
                        std::thread::Builder::new()
                            .name("tickwheel-pg-claim-on-demand".into())
                            .spawn(move || claim_on_demand(&shared, &active, &woken, &flag))?,
                    )
                }
                None => None,
            },
            None => None,
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tickwheel-pg-watch".into())
            .spawn(move || watch(&shared, &store, lock, Adopted::new(adopted), &flag))?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
            claimer,
        })
    }

    /// Stops the thread and waits until it has ended (within [`POLL`] and a round trip): the
    /// active lock's session is closed when this returns, so a standby may take over, and
    /// nothing of this node touches the database any more (the server's `run` returns only
    /// after this).
    pub(crate) async fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in [self.thread.take(), self.claimer.take()]
            .into_iter()
            .flatten()
        {
            if !matches!(
                tokio::task::spawn_blocking(move || thread.join()).await,
                Ok(Ok(()))
            ) {
                tracing::error!("a PostgreSQL watcher thread panicked");
            }
        }
    }
}

/// The `LISTEN` connection; `node`: an active-active node's id, shown as the connection's
/// `application_name` (`tickwheel-listen-<node>`), which an operator (or a test) can look up in
/// `pg_stat_activity`.
fn listen(store: &PgStore, node: Option<i64>) -> Result<Client, postgres::Error> {
    let options = store.options();
    let mut client = Client::connect(&options.url, NoTls)?;
    if let Some(node) = node {
        client.batch_execute(&format!("SET application_name = 'tickwheel-listen-{node}'"))?;
    }
    client.batch_execute(&format!(
        "LISTEN {}; LISTEN {}; LISTEN {}",
        options.schema.put_channel(),
        options.schema.delete_channel(),
        options.schema.ready_channel()
    ))?;
    Ok(client)
}

/// Once `LISTEN` is up (active-active), the first time (`again` false: jobs other nodes
/// announced between this node's start-up read and its `LISTEN`) or after the connection
/// broke: adopts every free job the engine lacks, as if it had just been announced (this
/// node's own at once, others' after the affinity time, if still free then).
fn resync(shared: &Shared, store: &PgStore, active: &active::Active, again: bool) {
    let ids = match store.free_ids() {
        Ok(ids) => ids,
        Err(error) => {
            tracing::warn!(%error, again, "cannot read the free jobs after LISTEN");
            return;
        }
    };
    let missing = adopt_missing(shared, store, active, ids);
    if again {
        tracing::info!(
            missing,
            "listening again after the LISTEN connection broke: adopting the jobs missed meanwhile"
        );
    } else {
        tracing::debug!(missing, "listening: adopting the jobs announced before");
    }
}

/// Once per node that stopped heartbeating for [`STALE`] (killed, or cut off): adopts the
/// free jobs of its id block that this node lacks, as if announced. A node killed between
/// its group commit and the announcement that follows it leaves jobs no other node heard of.
fn adopt_orphans(
    shared: &Shared,
    store: &PgStore,
    active: &active::Active,
    handled: &mut HashSet<i64>,
) {
    let stale = match active
        .node
        .stale_nodes(u64::try_from(STALE.as_millis()).unwrap_or(u64::MAX))
    {
        Ok(stale) => stale,
        Err(error) => {
            tracing::warn!(%error, "cannot look for nodes that stopped heartbeating");
            return;
        }
    };
    for (node, ids) in stale {
        if !handled.insert(node) {
            continue;
        }
        match store.free_ids_in(ids) {
            Ok(ids) => {
                let missing = adopt_missing(shared, store, active, ids);
                tracing::info!(
                    node,
                    missing,
                    "a node stopped heartbeating: adopting its free jobs"
                );
            }
            Err(error) => {
                handled.remove(&node);
                tracing::warn!(%error, node, "cannot read the jobs of a node that stopped heartbeating");
            }
        }
    }
}

/// Reads and adopts those of `ids` the engine lacks (own ones at once, others' after the
/// affinity time); returns how many it lacked.
fn adopt_missing(
    shared: &Shared,
    store: &PgStore,
    active: &active::Active,
    mut ids: Vec<JobId>,
) -> usize {
    shared.read(|engine| ids.retain(|id| engine.job_state(*id).is_none()));
    let now = shared.now();
    if active::read_and_adopt(shared, active, store, &ids, 1000, now, false) {
        active.wake_claimer();
    }
    ids.len()
}

/// The longest the watcher waits without looking at its stop flag.
const SLICE: Duration = Duration::from_millis(50);

/// How often an active-active node sweeps lapsed leases back to ready (any node's): the bound
/// on how late after its lease ends a dead node's reserved job is offered again.
pub(crate) const SWEEP: Duration = Duration::from_millis(200);

/// A node whose heartbeat (about once a second) is older than this is taken for dead: the
/// others adopt its free jobs once ([`adopt_orphans`]).
pub(crate) const STALE: Duration = Duration::from_secs(3);

/// How often an active-active node reads other nodes' deferred jobs while none of its
/// reservers waits (claim on demand: with a reserver waiting they are read at their
/// [`active::AFFINITY`] time, and a reserver that starts waiting wakes the claimer at once).
pub(crate) const LAZY: Duration = Duration::from_secs(1);

/// How long after their [`active::AFFINITY`] time the lazy pass leaves other nodes' deferred
/// jobs alone while this node's engine has ready jobs (its reservers have work): adopted then,
/// those jobs queue behind that work and their claims come late, mostly after their owners'
/// (a lost claim each, whichever wins: ADR 0008, session 15). Waiting reservers still adopt
/// them at their time; this only bounds how long a busy node keeps them deferred.
pub(crate) const LAZY_BUSY: Duration = Duration::from_secs(5);

/// Claim on demand (active-active), on a thread of its own: adopts other nodes' deferred jobs
/// whose [`active::AFFINITY`] time has passed, at that time while reservers wait on this node
/// and at once when one starts waiting ([`active::Active::wake_claimer`], sent by `reserve`);
/// with no reserver waiting, together at most every [`LAZY`] (the fallback pass; on a node
/// with ready jobs of its own only those deferred [`LAZY_BUSY`] or longer).
fn claim_on_demand(
    shared: &Shared,
    active: &active::Active,
    woken: &std::sync::mpsc::Receiver<()>,
    stop: &AtomicBool,
) {
    let mut lazy_read = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // The node's clock (the engine's): deferred times are on it (a shared store's reads are).
        let next = active.deferred().next_in(shared.now());
        let wait = match next {
            Some(next) if reservers_waiting(shared) => next,
            Some(next) => next.max(LAZY.saturating_sub(lazy_read.elapsed())),
            None => LAZY,
        };
        // At most SLICE, to see a stop; a wake-up ends the wait at once.
        match woken.recv_timeout(wait.min(SLICE)) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        }
        let now = shared.now();
        // Nothing due (one node alone, above all): no engine lock taken for the wake-up.
        if active.deferred().next_in(now) != Some(Duration::ZERO) {
            continue;
        }
        let (waiting, ready) = shared.read(|engine| {
            let stats = engine.stats();
            (stats.waiting, stats.ready)
        });
        let mut due = if waiting > 0 {
            active.deferred().due(now, 3000)
        } else if lazy_read.elapsed() >= LAZY {
            lazy_read = std::time::Instant::now();
            let until = if ready > 0 {
                let busy = u64::try_from(LAZY_BUSY.as_millis()).unwrap_or(u64::MAX);
                now.saturating_sub(busy)
            } else {
                now
            };
            active.deferred().due(until, usize::MAX)
        } else {
            continue;
        };
        // Whatever of them is still free (not deleted or claimed by its owner meanwhile) and
        // not in the engine already.
        shared.read(|engine| due.retain(|id| engine.job_state(*id).is_none()));
        active::read_and_adopt(shared, active, &active.store, &due, 3000, now, true);
    }
}

/// Whether a client of this node waits in `reserve` (it has nothing to give it).
fn reservers_waiting(shared: &Shared) -> bool {
    shared.read(|engine| engine.stats().waiting) > 0
}

fn watch(
    shared: &Shared,
    store: &PgStore,
    mut lock: Option<ActiveLock>,
    mut adopted: Adopted,
    stop: &AtomicBool,
) {
    let put_channel = store.options().schema.put_channel();
    let ready_channel = store.options().schema.ready_channel();
    let active = shared.active.get().cloned();
    let wait = if active.is_some() { SWEEP } else { POLL };
    let mut listener: Option<Client> = None;
    let mut rounds: u64 = 0;
    let mut swept = std::time::Instant::now();
    let mut polled = std::time::Instant::now();
    // A LISTEN connection was up before: announcements may have been lost since it broke.
    let mut listened = false;
    // Nodes that stopped heartbeating whose free jobs this node has read.
    let mut orphans_of: HashSet<i64> = HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        if let Some(active) = active.as_ref().filter(|_| swept.elapsed() >= SWEEP) {
            swept = std::time::Instant::now();
            rounds += 1;
            // Lapsed leases (a dead node's too) back to ready; announced, so every node
            // (this one included) adopts them below or in the next round.
            if let Err(error) = active.node.expire(300) {
                tracing::warn!(%error, "cannot sweep lapsed leases");
            }
            // Stocked jobs not handed out in time back to ready (`--postgres-claim-ahead`).
            active.unstock_stale();
            if rounds.is_multiple_of(5) {
                // About once a second.
                if let Err(error) = active.node.heartbeat() {
                    tracing::warn!(%error, "cannot record this node's heartbeat");
                }
                adopt_orphans(shared, store, active, &mut orphans_of);
                // A fresh bound on the database clock's offset (`ClockOffset`): a read's
                // round trip is short (a commit's includes its WAL flush, so its bound is
                // looser by that), and the tightest bound of the last 10 s is the one used.
                if let Err(error) = store.sync_clock() {
                    tracing::warn!(%error, "cannot read the database clock");
                }
            }
        }
        if lock
            .as_mut()
            .is_some_and(|l| !l.still_held(Duration::from_secs(10)))
        {
            if stop.load(Ordering::Relaxed) {
                // Shutting down: the server stopped serving before it asked this thread to
                // stop, so a standby taking over now is the hand-over, not a split.
                break;
            }
            tracing::error!(
                "lost the connection holding this node's active lock: another node may take \
                 over, so this one stops now (everything acknowledged is committed)"
            );
            std::process::exit(LOST_LOCK_EXIT);
        }
        if listener.as_ref().is_none_or(Client::is_closed) {
            listener = match listen(store, active.as_ref().map(|a| a.node.id())) {
                Ok(c) => {
                    if let Some(active) = active.as_ref() {
                        // Listening (before the read, so nothing falls between): whatever
                        // other nodes announced since this node's start-up read, or while
                        // the connection was down, is read from the table.
                        resync(shared, store, active, listened);
                    }
                    listened = true;
                    Some(c)
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot LISTEN for SQL puts; polling meanwhile");
                    None
                }
            };
        }
        let mut puts: Vec<JobId> = Vec::new();
        let mut deletes: Vec<JobId> = Vec::new();
        let mut ready: Vec<JobId> = Vec::new();
        // Due times (database clock) announced with delayed jobs (`tickwheel_pg::parse_ready`).
        let mut dues: HashMap<JobId, u64> = HashMap::new();
        if let Some(client) = listener.as_mut() {
            let mut notes = client.notifications();
            // (Other nodes' deferred jobs are the claimer thread's: claim_on_demand.)
            // Waits in slices, so a stop is seen within one (a server's `run` waits for this
            // thread) and a quiet slice hands over what arrived.
            let mut it = notes.timeout_iter(wait.min(SLICE));
            // Active-active: hand what arrived to the engine (and sweep) at least every 20 ms
            // while notifications keep coming, every SWEEP when none do.
            let collecting = std::time::Instant::now();
            loop {
                if stop.load(Ordering::Relaxed)
                    || (active.is_some() && collecting.elapsed() >= Duration::from_millis(20))
                {
                    break;
                }
                match it.next() {
                    Ok(Some(note)) => {
                        if note.channel() == ready_channel {
                            // Notifications come in commit order: an id's latest one says
                            // when it is due (a delayed put kicked in the same batch is
                            // ready now, not at its put's due time).
                            for (id, due) in tickwheel_pg::parse_ready(note.payload()) {
                                ready.push(id);
                                match due {
                                    Some(due) => dues.insert(id, due),
                                    None => dues.remove(&id),
                                };
                            }
                            if ready.len() >= 3000 {
                                break;
                            }
                            continue;
                        }
                        let Ok(id) = note.payload().parse::<JobId>() else {
                            continue;
                        };
                        if note.channel() == put_channel {
                            puts.push(id);
                        } else {
                            deletes.push(id);
                        }
                        // Drain what is queued without waiting again.
                        if puts.len() + deletes.len() >= 1000 {
                            break;
                        }
                    }
                    Ok(None) => {
                        let got = !(puts.is_empty() && deletes.is_empty() && ready.is_empty());
                        if got || collecting.elapsed() >= wait {
                            break;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the LISTEN connection broke; reconnecting");
                        break;
                    }
                }
            }
        } else {
            let sleeping = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) && sleeping.elapsed() < wait {
                std::thread::sleep(wait.min(SLICE));
            }
        }
        if let Some(active) = active.as_ref() {
            let now = shared.now();
            let affinity = u64::try_from(active::AFFINITY.as_millis()).unwrap_or(0);
            ready.sort_unstable();
            ready.dedup();
            // Jobs the engine has already (this node's own puts, above all) are not read
            // again: a stale state there is settled by the claim, which says why it lost.
            // One whose claim is in flight is noted: if that claim loses, the job is read
            // again (`active::InFlight`). The exception is a job the engine holds buried, or
            // delayed while the announcement says it is ready now (another node kicked it):
            // the engine would never claim it, so it is read again like a missing one.
            shared.read(|engine| {
                ready.retain(|id| {
                    let read = match engine.job_state(*id) {
                        None | Some(JobState::Buried) => true,
                        Some(JobState::Delayed) => !dues.contains_key(id),
                        Some(JobState::Ready | JobState::Reserved) => false,
                    };
                    if !read {
                        active.announced_while_cached(*id);
                    }
                    read
                });
            });
            // This node's own jobs now; every other node's after the affinity time, by the
            // claimer thread (claim_on_demand: at that time if reservers wait here, else at
            // its next lazy pass; by then their owners have mostly taken and deleted them, so
            // the read finds few rows and this node's cache does not fill with them). A
            // delayed job announced with its due time is looked at first the affinity time
            // after it is due (on the node's clock, no earlier), not read now only to learn
            // that time; the read then (`get_free`) still decides what is adopted.
            let mut later = 0;
            {
                let mut deferred = active.deferred();
                let offset = store.clock_offset();
                ready.retain(|id| {
                    let mine = active::owns(active, *id);
                    if !mine {
                        let from = dues
                            .get(id)
                            .map_or(now, |due| offset.to_node_clock(*due).max(now));
                        deferred.push(from.saturating_add(affinity), *id);
                        later += 1;
                    }
                    mine
                });
            }
            if later > 0 {
                active.wake_claimer();
            }
            active::read_and_adopt(shared, active, store, &ready, 3000, now, false);
        }
        if !deletes.is_empty() {
            shared.apply(|engine| {
                for id in &deletes {
                    engine.forget(*id);
                }
            });
        }
        let mut records = Vec::new();
        for id in puts {
            if adopted.ids.contains(&id) {
                continue;
            }
            match store.get(id) {
                Ok(Some(record)) => records.push(record),
                Ok(None) => {} // deleted again before we read it
                Err(error) => tracing::warn!(%error, id, "cannot read a job put by SQL"),
            }
        }
        // The fallback: SQL puts above the largest id seen (a notification lost with a broken
        // LISTEN connection); an active-active node's rounds are shorter, it polls every POLL.
        if active.is_none() || polled.elapsed() >= POLL {
            polled = std::time::Instant::now();
            match store.foreign_after(adopted.largest, 1000) {
                Ok(more) => records.extend(more),
                Err(error) => tracing::warn!(%error, "cannot poll for jobs put by SQL"),
            }
        }
        records.retain(|r| adopted.first_time(r.id));
        adopted.prune(store);
        if !records.is_empty() {
            shared.apply(|engine| {
                for record in records {
                    engine.adopt(record);
                }
            });
        }
    }
    // Stopping: the stock's jobs not handed out go back to ready for the other nodes now
    // rather than when their leases lapse.
    if let Some(active) = active.as_ref() {
        active.unstock_all();
    }
}
