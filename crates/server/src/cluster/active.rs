//! Every node serving at once (`--postgres-mode active-active`, ADR 0008 phase 2).
//!
//! # Ground rules
//!
//! - The engine is a cache and a wake-up schedule; the database decides. A job the engine
//!   hands to a client is [`claim`]ed in the database (by primary key, on the database clock)
//!   before the client hears of it; a lost claim drops the job from the engine
//!   ([`Engine::drop_cached`]) and the reserve runs again. A job not due yet by the database
//!   clock, or in a tube paused by another node, is dropped and adopted again when it may be.
//! - `delete`, `release`, `bury` and `touch` run in the database first, checked against the
//!   holder (this node and connection); the reply is the database's answer. The engine then
//!   runs the same command to keep its cache, writing nothing (`Engine::delete_stored`,
//!   `release_stored`, `bury_stored`; a touch writes nothing anyway): the database's
//!   statement wrote the row, and a second write through the group commit could land after
//!   another node had acted on the job since.
//! - `kick`, `kick-job` and `peek-ready`/`-delayed`/`-buried` are the database's answers,
//!   cluster-wide ([`kick`], [`kick_job`], [`peek`]); the engine follows kicks of jobs it
//!   holds, other nodes hear of them by announcement.
//! - Other nodes' jobs are adopted on demand ([`Active::wake_claimer`]): when a reserver
//!   waits here, at once when one starts waiting.
//! - Jobs other nodes make ready (puts, releases, expired leases, kicks) arrive as
//!   notifications and are adopted by the watcher ([`super::Watcher`]), which also returns
//!   lapsed leases to ready (any node's: a dead node's reservations come back this way).
//!
//! [`Engine::drop_cached`]: tickwheel_queue::Engine::drop_cached

use std::sync::Arc;
use std::time::Duration;

use tickwheel_pg::{Lost, Node, PgStore};
use tickwheel_proto::{Command, Reply};
use tickwheel_queue::{ClientId, JobId};

use crate::shared::Shared;

/// What a node serving beside others needs at hand: its registration (claims, holder-checked
/// commands) and the store (to read jobs it adopts).
pub(crate) struct Active {
    pub(crate) node: Arc<Node>,
    pub(crate) store: Arc<PgStore>,
    /// Claims and deletes of all of this node's clients, batched ([`Batcher`]).
    batch: Batcher,
    /// Other nodes' jobs this node looks at later ([`AFFINITY`]; claim on demand).
    deferred: std::sync::Mutex<Deferred>,
    /// Wakes the claimer thread ([`super::Watcher`]): a reserver started waiting here, or
    /// jobs were deferred. Holds one wake-up at most (more add nothing).
    wake: std::sync::mpsc::SyncSender<()>,
    /// The claimer's end, taken once by the thread that claims on demand.
    woken: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// Claims lost as not due yet by the database clock ([`Active::not_due_losses`]).
    not_due: std::sync::atomic::AtomicU64,
    /// Rows read to adopt them ([`Active::rows_read`]).
    rows_read: std::sync::atomic::AtomicU64,
    /// The connected clients that have sent a claim: only they can hold a row, so only their
    /// hang-up needs [`Node::release_all`] (a statement that walks every live lease).
    claimers: std::sync::Mutex<std::collections::HashSet<ClientId>>,
    /// [`Node::release_all`] statements run for hung-up clients ([`Active::releases`]).
    releases: std::sync::atomic::AtomicU64,
    /// Jobs with a claim in flight ([`InFlight`]).
    in_flight: std::sync::Mutex<InFlight>,
    /// Jobs claimed ahead for this node's reservers ([`Stock`]); locked before the engine,
    /// never after.
    stock: std::sync::Mutex<Stock>,
    /// Woken when a stock claim is answered.
    restocked: tokio::sync::Notify,
    /// Stocked jobs handed out without a claim round trip ([`Active::stock_handouts`]).
    handouts: std::sync::atomic::AtomicU64,
}

impl Active {
    /// The node's state, with its batching threads started.
    ///
    /// # Errors
    ///
    /// The OS refused to start a thread.
    pub(crate) fn new(node: Node, store: Arc<PgStore>) -> std::io::Result<Active> {
        let node = Arc::new(node);
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        Ok(Active {
            batch: Batcher::start(&node)?,
            node,
            store,
            deferred: std::sync::Mutex::new(Deferred::default()),
            wake,
            woken: std::sync::Mutex::new(Some(woken)),
            not_due: std::sync::atomic::AtomicU64::new(0),
            rows_read: std::sync::atomic::AtomicU64::new(0),
            claimers: std::sync::Mutex::new(std::collections::HashSet::new()),
            releases: std::sync::atomic::AtomicU64::new(0),
            in_flight: std::sync::Mutex::new(InFlight::default()),
            stock: std::sync::Mutex::new(Stock::default()),
            restocked: tokio::sync::Notify::new(),
            handouts: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Other nodes' jobs this node looks at later, locked (before the engine, never after).
    pub(crate) fn deferred(&self) -> std::sync::MutexGuard<'_, Deferred> {
        self.deferred.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the claimer thread at once: a reserver started waiting on this node (it adopts
    /// the deferred jobs whose affinity time has passed now, not at its next look), or jobs
    /// were deferred (it recomputes its wait).
    pub(crate) fn wake_claimer(&self) {
        let _ = self.wake.try_send(());
    }

    /// Notes that `id` was announced free while the engine has it (the caller holds the
    /// engine lock and skips the announcement): if a claim of it is in flight and loses, the
    /// job is read again rather than left to no one ([`InFlight`]).
    pub(crate) fn announced_while_cached(&self, id: JobId) {
        self.in_flight().announced(id);
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this node claims ahead (`--postgres-claim-ahead`): without, no path locks the
    /// (empty) stock.
    fn stocking(&self) -> bool {
        self.node.claim_ahead() > 0
    }

    fn stock(&self) -> std::sync::MutexGuard<'_, Stock> {
        self.stock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stocked jobs handed out at once so far (`--postgres-claim-ahead`).
    pub(crate) fn stock_handouts(&self) -> u64 {
        self.handouts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes job `id` out of the stock, once its stock claim (if one is in flight) is
    /// answered: whether the stock held it (under a lease of which `fresh` says whether
    /// it may still be handed out).
    async fn take_stocked(&self, id: JobId) -> Option<Stocked> {
        if !self.stocking() {
            return None;
        }
        loop {
            let notified = self.restocked.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut stock = self.stock();
                match stock.jobs.get(&id) {
                    None => return None,
                    Some(None) => {}
                    Some(Some(sent)) => {
                        let fresh = sent.elapsed() < STOCK_FRESH;
                        stock.jobs.remove(&id);
                        return Some(Stocked { fresh });
                    }
                }
            }
            notified.await;
        }
    }

    /// Returns the stocked jobs not handed out in time ([`STOCK_FRESH`]) to ready (called by
    /// the watcher every sweep): the engine keeps them ready, other nodes may take them.
    pub(crate) fn unstock_stale(&self) {
        self.unstock_where(|sent| sent.elapsed() >= STOCK_FRESH);
    }

    /// Returns every stocked job not handed out to ready (the node stops).
    pub(crate) fn unstock_all(&self) {
        self.unstock_where(|_| true);
    }

    /// Returns the stocked jobs (claims answered) whose claim was sent at a time `which`
    /// matches to ready, in the database (announced) and out of the stock.
    fn unstock_where(&self, which: impl Fn(std::time::Instant) -> bool) {
        if !self.stocking() {
            return;
        }
        let stale: Vec<JobId> = (self.stock().jobs)
            .extract_if(|_, sent| sent.is_some_and(&which))
            .map(|(id, _)| id)
            .collect();
        if !stale.is_empty() {
            if let Err(error) = self.node.unstock(&stale, false) {
                tracing::warn!(%error, "cannot return stocked jobs (their leases end them)");
            }
        }
    }

    /// The claimer's end of the wake-ups (`None` after the first call).
    pub(crate) fn take_wake_ups(&self) -> Option<std::sync::mpsc::Receiver<()>> {
        self.woken.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// One client's request to a [`Batcher`] thread and where its answer goes.
type Request<T> = (
    (JobId, i64),
    tokio::sync::oneshot::Sender<Result<T, String>>,
);

/// Where a request's answer comes ([`Batcher::send`]).
type Answer<T> = tokio::sync::oneshot::Receiver<Result<T, String>>;

/// One statement for a batch of `(job, holder)` requests: an answer per request, in order.
type BatchFn<T> = fn(&Node, &[(JobId, i64)]) -> Result<Vec<T>, String>;

/// What one claim came to: won, or lost and why (at the database time of the claim).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClaimOutcome {
    won: bool,
    lost: Option<Lost>,
    at_ms: u64,
}

/// Claims and holder-checked deletes from all of a node's clients, gathered into one
/// statement per round trip: each of a few threads per kind ([`Batcher::THREADS`],
/// [`Batcher::ASYNC_CLAIM_THREADS`]) takes every request
/// queued while the previous statement ran (up to [`Batcher::MAX`]), so many reservers and
/// deleters share a round trip and a node connection instead of each waiting for one of
/// their own. Threads end when the node's state is dropped.
struct Batcher {
    claims: std::sync::mpsc::Sender<Request<ClaimOutcome>>,
    deletes: std::sync::mpsc::Sender<Request<bool>>,
}

impl Batcher {
    /// Statements in flight per kind (the node has [`tickwheel_pg::NODE_CONNECTIONS`]).
    ///
    /// Two: each statement carries every request queued while the other ran, and one can wait
    /// for its WAL flush while the next executes. Measured with 1, 2 and 3 (3 was the value
    /// before session 19; ADR 0008, session 19): at 10 000 due jobs/s through 3 nodes, 22.4k
    /// claim statements for 50 000 jobs with 3, 19.2k with 2, 14.1k with 1, each its own
    /// transaction; p99 lateness at 5 000/s lowest with 2, at 10 000/s the same with 1 or 2;
    /// put/reserve/delete cycles not told apart.
    const THREADS: usize = 2;
    /// Claim statements in flight when claims do not wait for their WAL flush
    /// ([`tickwheel_pg::PgOptions::async_claims`]): with nothing to wait for, a second
    /// statement only splits the queued claims in two. Measured with 1 and 2 (ADR 0037): p99
    /// lateness at 10 000 due jobs/s through 3 nodes 1.02 s against 1.62 s, at 5 000/s
    /// 13.9 ms against 38.6 ms (medians of 5, same invocations).
    const ASYNC_CLAIM_THREADS: usize = 1;
    /// Requests per statement at most.
    const MAX: usize = 256;

    fn start(node: &Arc<Node>) -> std::io::Result<Batcher> {
        let threads = if node.async_claims() {
            Self::ASYNC_CLAIM_THREADS
        } else {
            Self::THREADS
        };
        let claims = Self::spawn("tickwheel-pg-claim", node, threads, |node, wanted| {
            let claims = node.claim(wanted).map_err(|e| e.to_string())?;
            Ok(wanted
                .iter()
                .map(|(id, holder)| ClaimOutcome {
                    won: claims
                        .won
                        .iter()
                        .any(|c| c.id == *id && c.holder == *holder),
                    lost: claims
                        .lost
                        .iter()
                        .find(|(lost, _)| lost == id)
                        .map(|(_, why)| *why),
                    at_ms: claims.at_ms,
                })
                .collect())
        })?;
        let deletes = Self::spawn(
            "tickwheel-pg-delete",
            node,
            Self::THREADS,
            |node, wanted| node.delete_many(wanted).map_err(|e| e.to_string()),
        )?;
        Ok(Batcher { claims, deletes })
    }

    fn spawn<T: Send + 'static>(
        name: &str,
        node: &Arc<Node>,
        threads: usize,
        run: BatchFn<T>,
    ) -> std::io::Result<std::sync::mpsc::Sender<Request<T>>> {
        let (tx, rx) = std::sync::mpsc::channel::<Request<T>>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for _ in 0..threads {
            let (rx, node) = (rx.clone(), node.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || loop {
                    let mut batch: Vec<Request<T>> = {
                        let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
                        let Ok(first) = rx.recv() else { return };
                        std::iter::once(first)
                            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
                            .take(Self::MAX)
                            .collect()
                    };
                    // Rows are locked in id order by every batch (and by the group commit,
                    // which writes in id order too): two statements locking the same rows
                    // cannot deadlock.
                    batch.sort_by_key(|((id, _), _)| *id);
                    let wanted: Vec<(JobId, i64)> = batch.iter().map(|(w, _)| *w).collect();
                    match run(&node, &wanted) {
                        Ok(outcomes) => {
                            for ((_, reply), outcome) in batch.into_iter().zip(outcomes) {
                                let _ = reply.send(Ok(outcome));
                            }
                        }
                        Err(error) => {
                            for (_, reply) in batch {
                                let _ = reply.send(Err(error.clone()));
                            }
                        }
                    }
                })?;
        }
        Ok(tx)
    }

    async fn ask<T>(
        queue: &std::sync::mpsc::Sender<Request<T>>,
        wanted: (JobId, i64),
    ) -> Result<T, String> {
        Self::answer(Self::send(queue, wanted)).await
    }

    /// Queues `wanted` for the next statement; its answer comes through [`Batcher::answer`].
    fn send<T>(queue: &std::sync::mpsc::Sender<Request<T>>, wanted: (JobId, i64)) -> Answer<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // If the threads ended, `tx` is dropped with the request and `answer` says so.
        let _ = queue.send((wanted, tx));
        rx
    }

    async fn answer<T>(rx: Answer<T>) -> Result<T, String> {
        rx.await
            .map_err(|_| "the node's batching threads ended".to_owned())?
    }
}

impl Active {
    fn holder(&self, client: ClientId) -> i64 {
        self.node.holder(client.0)
    }
}

/// Runs a blocking database call off the runtime's workers (the synchronous client refuses
/// to run on them).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Claims `id`, which the engine just reserved for `client`, in the database. `Some(true)`:
/// the client holds it. `Some(false)`: lost (the engine no longer has it; reserve again).
/// `None`: the database could not be asked (answer `INTERNAL_ERROR`; a claim that did commit
/// ends with its lease).
pub(crate) async fn claim(
    shared: &Arc<Shared>,
    active: &Arc<Active>,
    client: ClientId,
    id: JobId,
) -> Option<bool> {
    let stale_stock = match active.take_stocked(id).await {
        Some(Stocked { fresh: true }) => return Some(hand_over(shared, active, client, id)),
        // Its lease lapses soon: claimed as any job (a claim takes the node's own stock over
        // while its lease lasts).
        Some(Stocked { fresh: false }) => true,
        None => false,
    };
    let holder = claim_starts(active, client, id);
    // Queued beside this claim: usually one statement.
    if active.stocking() && !stale_stock {
        restock(shared, active, id);
    }
    let claim = Batcher::ask(&active.batch.claims, (id, holder)).await;
    lost_or_won(shared, active, id, claim)
}

/// What a reserve's claim came to ([`claim`]).
fn lost_or_won(
    shared: &Arc<Shared>,
    active: &Arc<Active>,
    id: JobId,
    claim: Result<ClaimOutcome, String>,
) -> Option<bool> {
    if matches!(claim, Ok(ClaimOutcome { won: true, .. })) {
        // A job the stock held for another client of this node (its TTR ran out here) is
        // this client's now.
        if active.stocking() {
            active.stock().held.remove(&id);
        }
        active.in_flight().finish(id);
        return Some(true);
    }
    let announced = claim_lost(shared, active, id);
    let claim = match claim {
        Ok(claim) => claim,
        Err(error) => {
            tracing::warn!(%error, id, "cannot claim a job in PostgreSQL");
            readopt_later(
                shared.clone(),
                active.clone(),
                id,
                Duration::from_millis(100),
            );
            return None;
        }
    };
    // Gone, held or buried elsewhere: it comes back announced if it is ever ready again (and
    // if that announcement came while this claim was in flight, it is read again now). Not
    // due yet by the database clock, or paused: adopted again then.
    if let Some(Lost::NotDue { .. }) = claim.lost {
        active
            .not_due
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(Lost::NotDue { until_ms } | Lost::Paused { until_ms }) = claim.lost {
        let wait = Duration::from_millis(until_ms.saturating_sub(claim.at_ms));
        readopt_later(shared.clone(), active.clone(), id, wait);
    } else if announced {
        readopt_later(shared.clone(), active.clone(), id, Duration::ZERO);
    }
    Some(false)
}

/// A reserve the engine answered with stocked job `id`: the client has it at once, and the
/// stock's lease (the TTR plus [`tickwheel_pg::STOCK_HOLD_MS`] from a claim sent less than
/// [`STOCK_FRESH`] ago) outlives the client's TTR. The database keeps the stock as the holder
/// ([`Stock::held`]). Tops the stock up when it runs low.
fn hand_over(shared: &Arc<Shared>, active: &Arc<Active>, client: ClientId, id: JobId) -> bool {
    active.stock().held.insert(id, client);
    active
        .claimers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(client);
    active
        .handouts
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let low = active.stock().jobs.len() < active.node.claim_ahead().div_ceil(2);
    if low {
        restock(shared, active, id);
    }
    true
}

/// Claims ready jobs of `id`'s tube for the stock ([`stock_up`], [`stock_claims`]).
fn restock(shared: &Arc<Shared>, active: &Arc<Active>, id: JobId) {
    let picked = stock_up(shared, active, id);
    if picked.is_empty() {
        return;
    }
    // Queued now, so they share a statement with whatever is queued beside them.
    let sent = std::time::Instant::now();
    let holder = active.node.stock_holder();
    let answers = picked
        .into_iter()
        .map(|j| (j, Batcher::send(&active.batch.claims, (j, holder))))
        .collect();
    tokio::spawn(stock_claims(shared.clone(), active.clone(), sent, answers));
}

/// Picks the ready jobs of `id`'s tube the stock does not have yet, up to
/// [`tickwheel_pg::PgOptions::claim_ahead`] stocked in all, and marks them as being claimed
/// ([`restock`] claims them). Only jobs whose puts are in the database already: a claim of
/// one whose put is still being committed (another connection's) would find no row and lose
/// the job.
fn stock_up(shared: &Shared, active: &Active, id: JobId) -> Vec<JobId> {
    let most = active.node.claim_ahead();
    let mut stock = active.stock();
    let room = most.saturating_sub(stock.jobs.len());
    if room == 0 {
        return Vec::new();
    }
    // Stocked jobs are ready in the engine too: look past them.
    let mut ready = shared.read(|engine| engine.ready_in_tube_of(id, most + room));
    shared.retain_durable(&mut ready);
    let mut in_flight = active.in_flight();
    let picked: Vec<JobId> = ready
        .into_iter()
        .filter(|j| !stock.jobs.contains_key(j) && !in_flight.contains(*j))
        .take(room)
        .collect();
    for &j in &picked {
        stock.jobs.insert(j, None);
        in_flight.start(j);
    }
    picked
}

/// Records what the stock claims sent at `sent` ([`restock`]) came to: a won job joins the
/// stock (if it is still wanted there), its freshness counted from before its claim was
/// sent; a lost one that is still ready in the engine is handled as a lost
/// reserve's claim is (one the engine has handed to a reserver meanwhile is left to that
/// reserver's own claim).
async fn stock_claims(
    shared: Arc<Shared>,
    active: Arc<Active>,
    sent: std::time::Instant,
    answers: Vec<(JobId, Answer<ClaimOutcome>)>,
) {
    for (id, rx) in answers {
        let answer = Batcher::answer(rx).await;
        let won = matches!(answer, Ok(ClaimOutcome { won: true, .. }));
        let wanted = {
            let mut stock = active.stock();
            let wanted = stock.jobs.get(&id) == Some(&None);
            if wanted && won {
                stock.jobs.insert(id, Some(sent));
            } else if wanted {
                stock.jobs.remove(&id);
            }
            wanted
        };
        active.restocked.notify_waiters();
        let ready =
            shared.read(|engine| engine.job_state(id)) == Some(tickwheel_queue::JobState::Ready);
        match (won, wanted) {
            (true, true) => {
                active.in_flight().finish(id);
            }
            (true, false) => {
                // Taken out of the stock while its claim was in flight (a delete through
                // this node): back to ready if it is still there.
                active.in_flight().finish(id);
                let a = active.clone();
                let _ = blocking(move || a.node.unstock(&[id], false)).await;
            }
            (false, true) if ready => {
                let _ = lost_or_won(&shared, &active, id, answer);
            }
            (false, _) => {
                active.in_flight().finish(id);
            }
        }
    }
}

/// Reads `id` again after `wait` and adopts it if no one holds it.
fn readopt_later(shared: Arc<Shared>, active: Arc<Active>, id: JobId, wait: Duration) {
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let store = active.store.clone();
        if let Some(Ok(records)) = blocking(move || store.get_free(&[id])).await {
            adopt_fresh(&shared, records);
        }
    });
}

impl Active {
    /// Moves the engine's wake-ups of this node's delayed jobs committed since the last call
    /// to when the database holds them due ([`PgStore::take_retimed`]): called under the
    /// engine lock before every engine operation, so the wheel does not fire them a commit
    /// round trip early (a claim the database would refuse as not due yet).
    pub(crate) fn retime(&self, engine: &mut tickwheel_queue::Engine) {
        for r in self.store.take_retimed() {
            engine.retime_delayed(r.id, r.from, r.to);
        }
    }

    /// Claims this node lost because the database did not hold the job due yet (by its
    /// clock): a wake-up too early.
    pub(crate) fn not_due_losses(&self) -> u64 {
        self.not_due.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Rows this node read from the database to adopt them (announced, deferred, orphaned
    /// jobs: [`read_and_adopt`]).
    pub(crate) fn rows_read(&self) -> u64 {
        self.rows_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Hung-up clients whose jobs this node released in the database ([`disconnected`]).
    pub(crate) fn releases(&self) -> u64 {
        self.releases.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Adopts records read from the database, replacing what the engine had for them unless one
/// of its clients holds the job.
pub(crate) fn adopt_fresh(shared: &Shared, records: Vec<tickwheel_queue::JobRecord>) {
    if records.is_empty() {
        return;
    }
    shared.apply(|engine| {
        for record in records {
            match engine.job_state(record.id) {
                Some(tickwheel_queue::JobState::Reserved) => continue,
                Some(_) => {
                    engine.drop_cached(record.id);
                }
                None => {}
            }
            engine.adopt(record);
        }
    });
}

/// `delete`, `release`, `bury`, `touch` on the database, checked against the holder: the
/// reply, or `None` for another command. The engine runs the command afterwards (the caller
/// does) only when this answered with success.
pub(crate) async fn run_checked(
    active: &Arc<Active>,
    client: ClientId,
    command: &Command,
) -> Option<Reply> {
    let mut holder = active.holder(client);
    let id = match command {
        Command::Delete(id) | Command::Touch(id) => *id,
        Command::Release { id, .. } | Command::Bury { id, .. } => *id,
        _ => return None,
    };
    // A stocked job this client was handed is held by the stock in the database; one not
    // handed out yet is ready for this node's clients, so a delete takes it as the stock.
    let as_stock = active.stocking()
        && (active.stock().held.get(&id) == Some(&client)
            || (matches!(command, Command::Delete(_)) && active.take_stocked(id).await.is_some()));
    if as_stock {
        holder = active.node.stock_holder();
    }
    let reply = run_as(active, holder, command).await;
    if as_stock
        && matches!(
            reply,
            Some(Reply::Deleted | Reply::Released | Reply::Buried | Reply::NotFound)
        )
    {
        active.stock().held.remove(&id);
    }
    reply
}

/// [`run_checked`] as `holder`.
async fn run_as(active: &Arc<Active>, holder: i64, command: &Command) -> Option<Reply> {
    if let Command::Delete(id) = command {
        return Some(
            match Batcher::ask(&active.batch.deletes, (*id, holder)).await {
                Ok(true) => Reply::Deleted,
                Ok(false) => Reply::NotFound,
                Err(error) => {
                    tracing::warn!(%error, "a holder-checked delete failed in PostgreSQL");
                    Reply::InternalError
                }
            },
        );
    }
    let a = active.clone();
    let command = command.clone();
    let outcome = blocking(move || -> Option<Result<Reply, tickwheel_pg::PgError>> {
        let n = &a.node;
        let ok = |done: bool, reply: Reply| if done { reply } else { Reply::NotFound };
        Some(match command {
            Command::Delete(id) => n.delete(holder, id).map(|d| ok(d, Reply::Deleted)),
            Command::Release {
                id,
                priority,
                delay,
            } => n
                .release(holder, id, priority, u64::from(delay) * 1000)
                .map(|d| ok(d, Reply::Released)),
            Command::Bury { id, priority } => {
                n.bury(holder, id, priority).map(|d| ok(d, Reply::Buried))
            }
            Command::Touch(id) => n.touch(holder, id).map(|d| ok(d.is_some(), Reply::Touched)),
            _ => return None,
        })
    })
    .await;
    match outcome {
        None => Some(Reply::InternalError),
        Some(None) => None,
        Some(Some(Ok(reply))) => Some(reply),
        Some(Some(Err(error))) => {
            tracing::warn!(%error, "a holder-checked command failed in PostgreSQL");
            Some(Reply::InternalError)
        }
    }
}

/// Before a command naming job `id` runs on the engine (`reserve-job`, `peek`, `stats-job`),
/// the cache is brought up to the database's view of it: a job no one holds is read and
/// adopted (another node's, not adopted here yet, or a stale copy: say, delayed here while
/// another node kicked it); a job the database no longer has is forgotten (deleted through
/// another node while reserved there, which no one announces). A job held through another
/// node is returned, with its lease's time left (ms), for the command to answer from (the
/// cache does not know it is reserved); a `reserve-job` of it loses its claim and answers
/// `NOT_FOUND`. A job held through this node is the engine's to answer for. A failed read is
/// logged and the command runs on what the engine has.
pub(crate) async fn refresh(
    shared: &Arc<Shared>,
    active: &Arc<Active>,
    id: JobId,
) -> Option<(tickwheel_queue::JobRecord, u64)> {
    let store = active.store.clone();
    match blocking(move || store.get_row(id)).await? {
        Ok(None) => {
            shared.apply(|engine| engine.forget(id));
            None
        }
        Ok(Some(tickwheel_pg::JobRow { record, held: None })) => {
            active
                .rows_read
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            adopt_fresh(shared, vec![record]);
            None
        }
        Ok(Some(tickwheel_pg::JobRow {
            record,
            held: Some(held),
        })) => (held.holder >> 32 != active.node.id()).then_some((record, held.left_ms)),
        Err(error) => {
            tracing::warn!(%error, id, "cannot read a job to refresh");
            None
        }
    }
}

/// Before a claim of `id` for `client` is sent: a hang-up from now on releases what the
/// client may hold, and the claim is in flight ([`InFlight`]). Returns the holder.
fn claim_starts(active: &Active, client: ClientId, id: JobId) -> i64 {
    active
        .claimers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(client);
    active.in_flight().start(id);
    active.holder(client)
}

/// A claim of `id` lost (or not asked): the engine drops the job first, then the in-flight
/// mark goes, so an announcement the watcher skipped because the engine still had it is
/// seen. Returns whether one came.
fn claim_lost(shared: &Shared, active: &Active, id: JobId) -> bool {
    shared.apply(|engine| engine.drop_cached(id));
    active.in_flight().finish(id)
}

/// [`claim`] for `reserve-job`: the job whatever its state (the engine has just reserved it
/// for `client`, from ready, delayed or buried), unless someone holds it. Not batched (a rare
/// command); a lost claim drops the job from the engine as [`claim`] does.
pub(crate) async fn claim_job(
    shared: &Arc<Shared>,
    active: &Arc<Active>,
    client: ClientId,
    id: JobId,
) -> Option<bool> {
    // A stocked job: the claim takes it over from the stock.
    let _ = active.take_stocked(id).await;
    let holder = claim_starts(active, client, id);
    let claim = in_database(active, "claim a job", move |node| {
        node.claim_job(holder, id)
    })
    .await;
    if matches!(claim, Some(Some(_))) {
        active.in_flight().finish(id);
        return Some(true);
    }
    let announced = claim_lost(shared, active, id);
    match claim {
        // Held elsewhere, or gone: it comes back announced if it is ever free again.
        Some(_) => {
            if announced {
                readopt_later(shared.clone(), active.clone(), id, Duration::ZERO);
            }
            Some(false)
        }
        None => {
            readopt_later(
                shared.clone(),
                active.clone(),
                id,
                Duration::from_millis(100),
            );
            None
        }
    }
}

/// Runs `ask` with this node's registration on a blocking thread; `None` (logged, with
/// `what` it was doing) if the database could not be asked.
async fn in_database<T: Send + 'static>(
    active: &Arc<Active>,
    what: &'static str,
    ask: impl FnOnce(&Node) -> Result<T, tickwheel_pg::PgError> + Send + 'static,
) -> Option<T> {
    let a = active.clone();
    match blocking(move || ask(&a.node)).await? {
        Ok(answer) => Some(answer),
        Err(error) => {
            tracing::warn!(%error, "cannot {what} in PostgreSQL");
            None
        }
    }
}

/// Cluster-wide job counts of `tube` (`stats-tube`), or `None` if the database could not be
/// asked.
pub(crate) async fn tube_counts(
    active: &Arc<Active>,
    tube: &str,
) -> Option<tickwheel_pg::TubeCounts> {
    let tube = tube.to_owned();
    in_database(active, "count a tube's jobs", move |node| {
        node.tube_counts(&tube)
    })
    .await
}

/// Every tube's job counts together, by the database clock (`stats`). `None`: the database
/// could not be asked.
pub(crate) async fn all_counts(active: &Arc<Active>) -> Option<tickwheel_pg::TubeCounts> {
    in_database(active, "count the jobs", Node::counts).await
}

/// `kick <bound>` on `tube`, cluster-wide, as beanstalkd: up to `bound` buried jobs, or,
/// when the tube has none, up to `bound` delayed ones. The engine follows for those it holds
/// (the rest come by their announcement). `None`: the database could not be asked.
pub(crate) async fn kick(
    shared: &Arc<Shared>,
    active: &Arc<Active>,
    tube: &str,
    bound: u64,
) -> Option<u64> {
    let tube = tube.to_owned();
    let ids = in_database(active, "kick", move |node| {
        let buried = node.kick(&tube, bound)?;
        if buried.is_empty() {
            node.kick_delayed(&tube, bound)
        } else {
            Ok(buried)
        }
    })
    .await?;
    let now = shared.now();
    shared.apply(|engine| engine.kick_stored(now, &ids));
    Some(u64::try_from(ids.len()).unwrap_or(u64::MAX))
}

/// `kick-job <id>`, cluster-wide: `Some(false)` if the job is not buried or delayed (or
/// does not exist); `None`: the database could not be asked.
pub(crate) async fn kick_job(
    shared: &Arc<Shared>,
    active: &Arc<Active>,
    id: JobId,
) -> Option<bool> {
    let kicked = in_database(active, "kick a job", move |node| node.kick_job(id)).await?;
    if kicked {
        let now = shared.now();
        shared.apply(|engine| engine.kick_job_stored(now, id));
    }
    Some(kicked)
}

/// `peek-ready`, `peek-delayed` or `peek-buried` of `tube`, cluster-wide (the database
/// sees every node's jobs; a node's engine only those it has adopted). `None`: the
/// database could not be asked.
pub(crate) async fn peek(
    active: &Arc<Active>,
    which: tickwheel_pg::Peek,
    tube: &str,
) -> Option<Option<(JobId, Vec<u8>)>> {
    let tube = tube.to_owned();
    in_database(active, "peek", move |node| node.peek(which, &tube)).await
}

/// `pause-tube` on every node (the claims refuse the tube's jobs until then).
pub(crate) async fn pause(active: &Arc<Active>, tube: &str, seconds: u32) -> bool {
    let tube = tube.to_owned();
    in_database(active, "pause a tube", move |node| {
        node.pause(&tube, u64::from(seconds) * 1000)
    })
    .await
    .is_some()
}

/// A client hung up: what it held is ready again at once, on every node (as beanstalkd makes
/// a closed connection's reserved jobs ready). A client that never sent a claim holds no row
/// (only a claim writes a holder), so nothing is asked for it: producers' connections cost
/// the database nothing when they close (ADR 0008, session 14).
pub(crate) async fn disconnected(active: &Arc<Active>, client: ClientId) {
    let claimed = active
        .claimers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&client);
    if !claimed {
        return;
    }
    // Stocked jobs it was given: back to ready (a reserve ended) as the stock.
    let stocked: Vec<JobId> = if active.stocking() {
        (active.stock().held)
            .extract_if(|_, c| *c == client)
            .map(|(id, _)| id)
            .collect()
    } else {
        Vec::new()
    };
    if !stocked.is_empty() {
        let a = active.clone();
        if let Some(Err(error)) = blocking(move || a.node.unstock(&stocked, true)).await {
            tracing::warn!(%error, "cannot release a closed connection's stocked jobs (their leases end them)");
        }
    }
    active
        .releases
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let holder = active.holder(client);
    let a = active.clone();
    if let Some(Err(error)) = blocking(move || a.node.release_all(&[holder])).await {
        tracing::warn!(%error, "cannot release a closed connection's jobs (their leases end them)");
    }
}

/// How long a node leaves a job another node made ready (put, released, kicked; or due, for a
/// delayed one) to that node before adopting it itself: the owner's reservers take their own
/// jobs without racing the others for the same row, and another node steps in only for jobs
/// the owner has not claimed by then (busy or dead). Also the extra delay, at most, before a
/// job of a dead node's id block is served elsewhere.
pub(crate) const AFFINITY: Duration = Duration::from_millis(25);

/// Jobs of other nodes this node will look at later ([`AFFINITY`]): ids by the node-clock time
/// (Unix ms) from which to read and adopt them if they are still free.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, JobId)>>,
}

impl Deferred {
    /// Looks at `id` again from `at_ms`.
    pub(crate) fn push(&mut self, at_ms: u64, id: JobId) {
        self.heap.push(std::cmp::Reverse((at_ms, id)));
    }

    /// The ids whose time has come by `now_ms` (earliest first, each once), at most `limit`.
    pub(crate) fn due(&mut self, now_ms: u64, limit: usize) -> Vec<JobId> {
        let mut out = Vec::new();
        while out.len() < limit {
            match self.heap.peek() {
                Some(std::cmp::Reverse((at, _))) if *at <= now_ms => {
                    if let Some(std::cmp::Reverse((_, id))) = self.heap.pop() {
                        out.push(id);
                    }
                }
                _ => break,
            }
        }
        out
    }

    /// How long from `now_ms` until the next id's time (`None`: nothing deferred).
    pub(crate) fn next_in(&self, now_ms: u64) -> Option<Duration> {
        self.heap
            .peek()
            .map(|std::cmp::Reverse((at, _))| Duration::from_millis(at.saturating_sub(now_ms)))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

/// Whether this node adopts `id` as soon as it is announced: its own jobs (its id block; its
/// engine has them already, unless a restart or lease sweep brought them back) and jobs put by
/// SQL (no owner). Every other node's jobs wait [`AFFINITY`].
pub(crate) fn owns(active: &Active, id: JobId) -> bool {
    active.node.ids().contains(&id) || id >= tickwheel_queue::FOREIGN_ID_BASE
}

/// Reads the free ones of `ids` from `store` in chunks of `chunk` and adopts them with
/// [`adopt_with_affinity`]; a chunk that cannot be read is logged and left (the periodic pass
/// finds its jobs again). Returns whether any chunk was read.
pub(crate) fn read_and_adopt(
    shared: &Shared,
    active: &Active,
    store: &PgStore,
    ids: &[JobId],
    chunk: usize,
    now_ms: u64,
    deferred_now: bool,
) -> bool {
    let mut read = false;
    for chunk in ids.chunks(chunk) {
        match store.get_free(chunk) {
            Ok(records) => {
                active.rows_read.fetch_add(
                    u64::try_from(records.len()).unwrap_or(u64::MAX),
                    std::sync::atomic::Ordering::Relaxed,
                );
                adopt_with_affinity(
                    shared,
                    active,
                    records,
                    &mut active.deferred(),
                    now_ms,
                    deferred_now,
                );
                read = true;
            }
            Err(error) => tracing::warn!(%error, "cannot read free jobs to adopt"),
        }
    }
    read
}

/// Adopts announced or deferred `records` (read just now, free of live leases, due times on
/// the node's clock: [`PgStore::shared`]): ready ones
/// this node owns, or whose [`AFFINITY`] time has passed (`deferred_now` true), at once;
/// delayed ones (the owner's wheel fires them) are deferred to their due time plus
/// [`AFFINITY`] unless this node owns them.
pub(crate) fn adopt_with_affinity(
    shared: &Shared,
    active: &Active,
    records: Vec<tickwheel_queue::JobRecord>,
    deferred: &mut Deferred,
    now_ms: u64,
    deferred_now: bool,
) {
    let affinity = u64::try_from(AFFINITY.as_millis()).unwrap_or(u64::MAX);
    let mut now = Vec::new();
    for record in records {
        let mine = owns(active, record.id);
        match record.state {
            tickwheel_queue::DurableState::Delayed { until } if !mine && until > now_ms => {
                deferred.push(until.saturating_add(affinity), record.id);
            }
            _ if mine || deferred_now => now.push(record),
            _ => deferred.push(now_ms.saturating_add(affinity), record.id),
        }
    }
    adopt_fresh(shared, now);
}

/// How long after its claim was sent a stocked job may still be handed out: half of
/// [`tickwheel_pg::STOCK_HOLD_MS`], so its lease outlives the TTR of the client that gets it.
/// Older ones go back to ready ([`Active::unstock_stale`]).
pub(crate) const STOCK_FRESH: Duration = Duration::from_millis(tickwheel_pg::STOCK_HOLD_MS / 2);

/// The jobs a node claimed ahead for its reservers (`--postgres-claim-ahead`): in the
/// database they are held by the node's stock holder; in the engine they are ready, and a
/// reserve the engine hands one answers at once ([`claim`]).
#[derive(Debug, Default)]
pub(crate) struct Stock {
    /// Stocked jobs: `None` while the stock claim is in flight, then when it was sent.
    jobs: std::collections::HashMap<JobId, Option<std::time::Instant>>,
    /// Stocked jobs handed out, and to which client: the database still has the stock as
    /// their holder, so that client's holder-checked commands on them run as the stock.
    held: std::collections::HashMap<JobId, ClientId>,
}

/// A job taken out of the stock.
struct Stocked {
    /// Young enough to hand out ([`STOCK_FRESH`]).
    fresh: bool,
}

/// Jobs whose claim is in flight, each with whether an announcement of it came meanwhile.
///
/// The watcher skips an announced job the engine already has (its state there is settled by
/// the claim). A claim that loses drops the job from the engine; if the announcement that
/// makes it free again (a release by its holder, a lapsed lease) was skipped while the claim
/// was in flight, no one would read the job again: on a node alone it would stay ready in
/// the database and unseen. So the watcher marks such an id under the engine lock, the claim
/// drops the job under the engine lock before it takes its mark off, and a lost claim with
/// the mark reads the job again.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    ids: std::collections::HashMap<JobId, bool>,
}

impl InFlight {
    /// A claim of `id` is about to be sent.
    pub(crate) fn start(&mut self, id: JobId) {
        self.ids.insert(id, false);
    }

    /// `id` was announced free while the engine had it: noted if its claim is in flight.
    pub(crate) fn announced(&mut self, id: JobId) {
        if let Some(seen) = self.ids.get_mut(&id) {
            *seen = true;
        }
    }

    /// Whether a claim of `id` is in flight.
    pub(crate) fn contains(&self, id: JobId) -> bool {
        self.ids.contains_key(&id)
    }

    /// The claim of `id` is answered: whether an announcement came while it was in flight.
    pub(crate) fn finish(&mut self, id: JobId) -> bool {
        self.ids.remove(&id).unwrap_or(false)
    }

    /// Claims in flight.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Deferred, InFlight};
    use proptest::prelude::*;

    #[test]
    fn an_announcement_counts_only_while_a_claim_is_in_flight() {
        let mut f = InFlight::default();
        f.announced(7); // no claim of 7: nothing to note
        f.start(7);
        assert!(!f.finish(7), "no announcement came during the claim");
        f.start(7);
        f.start(8);
        f.announced(8);
        assert!(!f.finish(7));
        assert!(f.finish(8), "8 was announced while its claim was in flight");
        assert!(!f.finish(8), "a mark ends with its claim");
        assert_eq!(f.len(), 0);
    }

    proptest! {
        /// Against a model (a sorted list): `due` hands out exactly the entries whose time has
        /// come, earliest first, each once; `next_in` is the wait for the earliest left.
        #[test]
        fn deferred_matches_a_sorted_list(
            ops in proptest::collection::vec((any::<bool>(), 0u64..1000, 0u64..50, 1usize..8), 1..200)
        ) {
            let mut d = Deferred::default();
            let mut model: Vec<(u64, u64)> = Vec::new();
            for (is_push, at, id, limit) in ops {
                if is_push {
                    d.push(at, id);
                    model.push((at, id));
                } else {
                    model.sort_unstable();
                    let n = model.iter().take_while(|(t, _)| *t <= at).count().min(limit);
                    let want: Vec<u64> = model.drain(..n).map(|(_, id)| id).collect();
                    prop_assert_eq!(d.due(at, limit), want);
                    model.sort_unstable();
                    let next = model.first().map(|(t, _)| std::time::Duration::from_millis(t.saturating_sub(at)));
                    prop_assert_eq!(d.next_in(at), next);
                }
                prop_assert_eq!(d.len(), model.len());
            }
        }
    }
}
