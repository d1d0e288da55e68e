//! PostgreSQL backend for tickwheel: the [`Store`] trait on a database that outlives any one
//! machine, with SQL functions that put and delete jobs inside an application's own
//! transaction.
//!
//! The design is `docs/decisions/0008-postgresql-backend.md`. In short:
//!
//! - The database holds every job (table `<schema>.jobs`); a node's engine is a cache of it
//!   that decides which job to hand out, so no statement ever searches the table for the next
//!   job (the dead-tuple "graveyard" of table-as-queue designs); every write is by primary key.
//! - [`PgStore::commit`] writes a whole group commit (the batches of every client queued while
//!   the previous commit ran) as one prepared statement (data-modifying CTEs over `unnest`
//!   arrays: one round trip, one implicit transaction, one WAL flush), and returns after its
//!   commit. Batches are idempotent (upserts, absolute updates, deletes of
//!   missing rows are no-ops), so a commit whose outcome is unknown after a broken connection is
//!   replayed on a new one, for up to [`PgOptions::retry`]; meanwhile [`Store::writable`]
//!   refuses new writes with [`StoreError::Unavailable`].
//! - [`PgStore::open`] creates or migrates the schema ([`migrate`], versioned migrations
//!   embedded in the binary) and refuses a schema newer than it knows.
//! - `<schema>.put(tube, body, delay, pri, ttr)` and `<schema>.delete(id)` (created by the
//!   migrations) take part in the caller's transaction and announce committed changes with
//!   NOTIFY ([`SchemaName::put_channel`]); jobs put so get ids from
//!   [`FOREIGN_ID_BASE`] up.
//! - [`ActiveLock`]: the session advisory lock that makes one node the active one; standbys
//!   wait on it and take over when the active node's session ends.
//! - [`Node`] (active-active, ADR 0008 phase 2): several nodes serve one schema at once; each
//!   claims the jobs it hands out by primary key on the database clock, acts on held jobs only
//!   as their holder, and sweeps lapsed leases; [`PgStore::shared`] is its store (announces
//!   what it makes ready, moves due times onto the database clock, leaves held rows alone).
//!
//! # Examples
//!
//! ```no_run
//! use tickwheel_pg::{PgOptions, PgStore};
//! use tickwheel_store::{GroupCommit, Store};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PgStore::open(&PgOptions::new("postgres://app@db/jobs"))?;
//! let recovered = store.recover(u64::MAX)?;
//! println!("{} jobs, next id {}", recovered.resident.len(), recovered.next_id);
//! let store = GroupCommit::with_thread(store)?; // as the server runs it
//! # drop(store);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use postgres::{Client, NoTls, Row, Statement};
use tickwheel_queue::{
    Change, DurableState, JobHistory, JobId, JobRecord, TubeName, FOREIGN_ID_BASE,
};
use tickwheel_store::{validate, Recovered, Store, StoreError};

mod lock;
mod node;
mod note;
mod schema;

pub use lock::ActiveLock;
pub use node::{
    Claimed, Claims, Lost, Node, Peek, TubeCounts, NODE_CONNECTIONS, NODE_ID_BLOCK, STOCK_BIT,
    STOCK_HOLD_MS,
};
#[doc(hidden)]
pub use note::fuzz_check as fuzz_check_note;
pub use note::parse_ready;
pub use schema::{migrate, SchemaName, SCHEMA_VERSION};

/// A job as the database has it ([`PgStore::get_row`]).
#[derive(Clone, Debug)]
pub struct JobRow {
    /// Its record (a reserved job's as ready).
    pub record: JobRecord,
    /// Who holds it, if someone does under a live lease.
    pub held: Option<Held>,
}

/// A live lease on a job ([`JobRow::held`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The holder number ([`Node::holder`], [`Node::stock_holder`]).
    pub holder: i64,
    /// Time left on the lease, in ms (database clock).
    pub left_ms: u64,
}

/// How to reach the database.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// A libpq-style URL or key=value string (`postgres://user@host/db`).
    pub url: String,
    /// The schema holding tickwheel's tables and functions (default `tickwheel`).
    pub schema: SchemaName,
    /// How long a commit keeps retrying on broken connections before it fails (and the group
    /// commit poisons). Default 30 s.
    pub retry: Duration,
    /// Several nodes serve the schema at once (ADR 0008 phase 2; `--postgres-mode
    /// active-active`): each claims jobs in the database ([`Node`]). Off (the default), one
    /// node serves and the others wait as standbys ([`ActiveLock`]).
    pub active_active: bool,
    /// Active-active claims commit without waiting for their WAL flush
    /// (`synchronous_commit = off` for the claim's transaction alone; `--postgres-claim-commit
    /// async`): a reserve no longer waits for the database's disk. The price: if PostgreSQL
    /// itself crashes, claims of its last moments (at most 3 × `wal_writer_delay`, 600 ms by
    /// default) may be lost, so those jobs can be handed out once more after its restart, as
    /// beanstalkd hands out again every job reserved before its own restart. Nothing
    /// acknowledged is lost: puts, deletes and every other write stay synchronous, and each
    /// flushes the claims committed before it. Off (the default): a client hears `RESERVED`
    /// only once its claim is on disk. See [`Node::claim`].
    pub async_claims: bool,
    /// Active-active: jobs a node claims ahead for its reservers, at most (`--postgres-claim-ahead
    /// N`; 0, the default, claims each job as a client reserves it). When a reserve's claim
    /// runs while more jobs of its tube are ready in the node's engine, up to this many of
    /// them are claimed too (usually in the same statement) for the node's *stock*
    /// ([`Node::stock_holder`]); a later reserve that the engine hands a stocked job answers
    /// at once, and the job stays held by the stock in the database while the node's client
    /// has it. A worker connection then no longer waits a database round trip per job.
    /// What differs: a stocked job not handed out yet counts as reserved in `stats-tube`,
    /// is not shown by `peek-ready` and cannot be deleted through another node, for at most
    /// half of [`STOCK_HOLD_MS`] (then it goes back to ready); a handed-out job's lease runs
    /// up to [`STOCK_HOLD_MS`] past its client's TTR, so when its node is killed it is
    /// offered again that much later than a job reserved without the stock.
    pub claim_ahead: usize,
}

impl PgOptions {
    /// Options for `url` with the default schema and retry time.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            schema: SchemaName::default_name(),
            retry: Duration::from_secs(30),
            active_active: false,
            async_claims: false,
            claim_ahead: 0,
        }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The schema name is not a plain identifier.
    #[error(
        "bad schema name {0:?}: use 1-50 characters of a-z, 0-9 and _, not starting with a digit"
    )]
    BadSchemaName(String),
    /// The database's schema is newer than this build.
    #[error("schema {schema} has version {found}, but this build knows only up to version {known}: upgrade tickwheel-server (refusing to start)")]
    NewerSchema {
        /// The schema.
        schema: String,
        /// The version in the database.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
    /// The database answered with an error, or could not be reached.
    #[error("PostgreSQL: {0}")]
    Db(#[from] postgres::Error),
}

/// The commit connection, its prepared commit statement and (shared mode) its prepared
/// announcement ([`ANNOUNCE`]).
type CommitConn = (Client, Statement, Option<Statement>);

/// A [`Store`] on PostgreSQL. Thread-safe: one connection for commits, one for reads, each
/// reconnected when it breaks.
pub struct PgStore {
    options: PgOptions,
    sql: Sql,
    /// The commit connection, its prepared commit statement and (shared mode) its prepared
    /// announcement ([`ANNOUNCE`]).
    commit: Mutex<Option<CommitConn>>,
    read: Mutex<Option<Client>>,
    /// Shared mode: the connection [`PgStore::get_free`] runs on, with its statement prepared
    /// (every node reads announced jobs often: parsed and planned once per connection).
    free: Mutex<Option<(Client, Statement)>>,
    /// False from a commit that failed on a broken connection until one succeeds again.
    reachable: AtomicBool,
    /// The node's clock in Unix ms (shared mode: due times are moved from it onto the
    /// database's clock at commit).
    node_clock: NodeClock,
    /// Standby mode, once [`PgStore::fenced`]: the schema's active epoch this node raised;
    /// every commit checks that it is still the schema's.
    epoch: Option<i64>,
    /// Shared mode: how far the database's clock is ahead of the node's, at least (learnt
    /// from the group commits' round trips).
    offset: ClockOffset,
    /// Shared mode: the delayed jobs of the commits since the last [`PgStore::take_retimed`],
    /// with the node-clock time from which the database holds them due.
    retimed: Mutex<Vec<Retimed>>,
    /// `retimed` is not empty (read without the lock on every engine operation).
    retimed_pending: AtomicBool,
}

/// A delayed job a shared commit wrote: the engine scheduled it at `from` on the node's
/// clock; the database holds it due from its own clock's `from + (database clock − node
/// clock at the commit)`, which is no earlier than `to` on the node's clock (by the
/// [`PgStore::clock_offset`] bound). An engine that moves its wake-up from `from` to `to`
/// ([`Engine::retime_delayed`](tickwheel_queue::Engine::retime_delayed)) claims the job when
/// the database first holds it due instead of a round trip early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retimed {
    /// The job.
    pub id: JobId,
    /// Its due time as the engine computed it (node clock, Unix ms).
    pub from: u64,
    /// The node-clock time (Unix ms) from which the database holds it due.
    pub to: u64,
}

/// A lower bound on (database clock − node clock), in ms, from round trips: a statement that
/// read the database clock as `db` and whose answer came at node time `back` ran at some node time below `back + 1` (whole ms, rounded down), when the
/// database clock was at least `db`: so the offset is above `db − back − 1`. The largest such
/// bound seen in the last [`ClockOffset::KEEP_MS`] is kept (the tightest; an older one is
/// replaced, so a clock stepped since then is not trusted for long).
///
/// A bound that is too high would only make the node look a little early (a claim the
/// database refuses as not due yet, retried at the database's due time): the database stays
/// the authority; the bound only keeps the node from asking before it may.
#[derive(Debug, Default)]
pub struct ClockOffset {
    /// (bound, node time it was observed at).
    best: Mutex<Option<(i64, u64)>>,
}

impl ClockOffset {
    /// How long a bound is kept before a newer, looser one may replace it (ms).
    pub const KEEP_MS: u64 = 10_000;

    /// Takes in a round trip that read the database clock as `db` and was answered at node
    /// time `back` (both Unix ms, rounded down).
    pub fn observe(&self, db: i64, back: u64) {
        let bound = db.saturating_sub(big(back)).saturating_sub(1);
        let mut best = self.best.lock().unwrap_or_else(|p| p.into_inner());
        match *best {
            Some((b, at)) if b > bound && back.saturating_sub(at) < Self::KEEP_MS => {}
            _ => *best = Some((bound, back)),
        }
    }

    /// The bound (ms; `None` before the first round trip).
    pub fn lower_bound(&self) -> Option<i64> {
        self.best
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|(b, _)| b)
    }

    /// A database-clock time as a node-clock time no earlier than it: when the node's clock
    /// reads the result, the database's reads `db_ms` or later. Unchanged before the first
    /// round trip.
    pub fn to_node_clock(&self, db_ms: u64) -> u64 {
        self.lower_bound()
            .map_or(db_ms, |b| db_ms.saturating_add_signed(b.saturating_neg()))
    }
}

/// At most this many [`Retimed`] entries wait for [`PgStore::take_retimed`] (a store nobody
/// drains keeps no more; the engine then wakes at its own due times, a claim early).
const MAX_RETIMED: usize = 1 << 20;

/// Drops `value` (connections) on a thread of its own and waits for it. The synchronous
/// client's `Drop` runs its own runtime to say goodbye to the server, which panics on a thread
/// that drives an async runtime; the last reference to a store or node may well go there (a
/// server's `run` ends on one).
pub(crate) fn drop_off_runtime<T: Send + 'static>(value: T) {
    if let Ok(thread) = std::thread::Builder::new()
        .name("tickwheel-pg-drop".into())
        .spawn(move || drop(value))
    {
        let _ = thread.join();
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        let commit = self
            .commit
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let read = self
            .read
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let free = self
            .free
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if commit.is_some() || read.is_some() || free.is_some() {
            drop_off_runtime((commit, read, free));
        }
    }
}

/// A node's clock, Unix ms.
type NodeClock = Arc<dyn Fn() -> u64 + Send + Sync>;

fn system_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.options.schema)
            .finish_non_exhaustive()
    }
}

/// The statements, rendered for one schema.
struct Sql {
    commit: String,
    resident: String,
    far: String,
    next_id: String,
    get: String,
    between: String,
    /// Shared mode: the channel the ids a commit puts or makes ready are announced on, after
    /// the commit ([`PgStore::shared`]).
    announce: Option<String>,
}

const COLUMNS: &str = "id, tube, priority, ttr_ms, state, until_ms, created_ms, body, \
     idempotency_key, delay_ms, reserves, timeouts, releases, buries, kicks";

impl Sql {
    /// `shared`: the statement of an active-active node ([`PgStore::shared`]): the commit
    /// also NOTIFYs `<schema>_ready` with the ids it puts, moves delayed due times onto the
    /// database clock, and leaves alone the rows another node's client holds under a live
    /// lease. Otherwise (one active node) the statement is the phase-1 one.
    fn new(schema: &SchemaName, shared: bool) -> Sql {
        let s = schema.as_str();
        // Shared mode announces the ready ids after the commit, in a transaction of their own
        // (`announce`): a transaction that NOTIFYs holds PostgreSQL's cluster-wide notification
        // lock from its pre-commit until its commit is flushed, so group commits that NOTIFY
        // themselves would wait for each other's WAL flush across all nodes.
        // The job histories: one node alone writes its engine's with every put and update
        // (as the embedded store does: $18..$23 for the puts, $24..$29 for the updates).
        // Nodes sharing the schema count them in their own statements (`node.rs`), so a
        // node's cache of a job another node acted on never writes stale counters back: a put
        // sends only its delay ($18; the counters start at their default, 0), an update only
        // its kicks ($19, below).
        let history = if shared {
            HistorySql {
                insert: ", delay_ms",
                select: ", nullif(u.delay, 0)",
                params: ", $18::bigint[]",
                names: ", delay",
                conflict: ", delay_ms = excluded.delay_ms",
                // The one count that reaches a shared schema only through here: `kick-job`'s
                // (`kick`, release and bury count in their own statements). The node's engine
                // counted it on the kicks it read with the row, so the larger of the two
                // counts is the database's plus that kick ($19; a kick by another node in the
                // same moment may be counted once for both).
                update: ", kicks = nullif(greatest(coalesce(j.kicks, 0), u.kicks), 0)",
                update_params: ", $19::bigint[]",
                update_names: ", kicks",
            }
        } else {
            HistorySql {
                insert: ", delay_ms, reserves, timeouts, releases, buries, kicks",
                select: ", nullif(u.delay, 0), nullif(u.reserves, 0), nullif(u.timeouts, 0), \
                         nullif(u.releases, 0), nullif(u.buries, 0), nullif(u.kicks, 0)",
                params: ", $18::bigint[], $19::bigint[], $20::bigint[], $21::bigint[], \
                         $22::bigint[], $23::bigint[]",
                names: ", delay, reserves, timeouts, releases, buries, kicks",
                conflict: ", delay_ms = excluded.delay_ms, reserves = excluded.reserves, \
                           timeouts = excluded.timeouts, releases = excluded.releases, \
                           buries = excluded.buries, kicks = excluded.kicks",
                update: ", delay_ms = nullif(u.delay, 0), reserves = nullif(u.reserves, 0), \
                         timeouts = nullif(u.timeouts, 0), releases = nullif(u.releases, 0), \
                         buries = nullif(u.buries, 0), kicks = nullif(u.kicks, 0)",
                update_params: ", $24::bigint[], $25::bigint[], $26::bigint[], $27::bigint[], \
                                $28::bigint[], $29::bigint[]",
                update_names: ", delay, reserves, timeouts, releases, buries, kicks",
            }
        };
        let HistorySql {
            insert: h_insert,
            select: h_select,
            params: h_params,
            names: h_names,
            conflict: h_conflict,
            update: h_update,
            update_params: h_update_params,
            update_names: h_update_names,
        } = history;
        let (offset, free) = if shared {
            (
                // $16 is the node's clock when it sent the commit: a due time of the node's
                // clock plus (database clock − node clock) is the same delay on the database
                // clock, never shorter (the round trip only adds to it).
                format!("{s}.now_ms() - $16::bigint"),
                // Not held by anyone under a live lease (a holder acts through Node first).
                format!("NOT (j.state = 3 AND j.lease_until_ms > {s}.now_ms())"),
            )
        } else {
            ("0 * $16::bigint".to_owned(), "true".to_owned())
        };
        Sql {
            // The whole group commit in one statement (one round trip, one implicit
            // transaction): the data-modifying CTEs touch disjoint rows (the batch is folded
            // to one change per id first).
            //
            // `fence` (standby mode, after `PgStore::fenced`; $17 is the node's epoch, NULL
            // otherwise): the main query runs before the data-modifying CTEs, so the epoch
            // row is locked FOR SHARE (a take-over's raise waits for this commit to end) or
            // the statement raises (the raise came first: nothing of it is written).
            commit: format!(
                "WITH fence AS MATERIALIZED (
                     SELECT 1 FROM {s}.meta WHERE key = 'active_epoch' AND value = $17::bigint
                     FOR SHARE
                 ), off AS MATERIALIZED (SELECT {offset} AS d), up AS (
                     INSERT INTO {s}.jobs AS j (id, tube, priority, ttr_ms, state, until_ms,
                                                created_ms, body, idempotency_key{h_insert})
                     SELECT u.id, u.tube, u.priority, u.ttr, u.state,
                            CASE WHEN u.state = 1 THEN u.until_ms + off.d ELSE u.until_ms END,
                            u.created, u.body, u.key{h_select}
                     FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[],
                                 $5::smallint[], $6::bigint[], $7::bigint[], $8::bytea[],
                                 $15::text[]{h_params})
                          AS u(id, tube, priority, ttr, state, until_ms, created, body, key
                               {h_names}),
                          off
                     ON CONFLICT (id) DO UPDATE SET tube = excluded.tube,
                         priority = excluded.priority, ttr_ms = excluded.ttr_ms,
                         state = excluded.state, until_ms = excluded.until_ms,
                         created_ms = excluded.created_ms, body = excluded.body,
                         idempotency_key = excluded.idempotency_key{h_conflict},
                         holder = NULL, lease_until_ms = NULL
                     WHERE {free}
                 ), upd AS (
                     UPDATE {s}.jobs j SET state = u.state,
                         until_ms = CASE WHEN u.state = 1 THEN u.until_ms + off.d
                                         ELSE u.until_ms END,
                         priority = u.priority, holder = NULL, lease_until_ms = NULL{h_update}
                     FROM unnest($9::bigint[], $10::smallint[], $11::bigint[], $12::bigint[]
                                 {h_update_params})
                         AS u(id, state, until_ms, priority{h_update_names}), off
                     WHERE j.id = u.id AND {free}
                 ), del AS (
                     DELETE FROM {s}.jobs j WHERE j.id = ANY($13::bigint[]) AND {free}
                 ), ids AS (
                     UPDATE {s}.meta SET value = greatest(value, $14::bigint)
                     WHERE key = 'next_id' AND $14::bigint IS NOT NULL
                 )
                 SELECT CASE WHEN $17::bigint IS NULL OR EXISTS (SELECT 1 FROM fence) THEN 1
                             ELSE {s}.fenced_off($17::bigint) END,
                        (SELECT d FROM off)"
            ),
            resident: format!(
                "SELECT {COLUMNS} FROM {s}.jobs WHERE NOT (state = 1 AND until_ms >= $1)
                 ORDER BY id"
            ),
            far: format!(
                "SELECT tube, count(*) FROM {s}.jobs WHERE state = 1 AND until_ms >= $1
                 GROUP BY tube ORDER BY tube"
            ),
            next_id: format!(
                "SELECT greatest((SELECT value FROM {s}.meta WHERE key = 'next_id'),
                                 (SELECT coalesce(max(id), 0) + 1 FROM {s}.jobs WHERE id < $1))"
            ),
            get: format!("SELECT {COLUMNS} FROM {s}.jobs WHERE id = $1"),
            between: format!(
                "SELECT {COLUMNS} FROM {s}.jobs
                 WHERE state = 1 AND until_ms >= $1 AND until_ms < $2
                 ORDER BY until_ms, id LIMIT $3"
            ),
            announce: shared.then(|| schema.ready_channel()),
        }
    }
}

/// The shared commit's announcement, run right after the commit on the same connection: one
/// notification per payload of `$2` ([`note::payloads`]: ids, a delayed job's with its due
/// time, at most [`note::MAX_PAYLOAD`] bytes each) on channel `$1`, in a transaction of its
/// own (the statement's implicit one) that does not wait for its WAL flush (a lost
/// announcement after a database crash is only a missed wake-up): `set_config(…, true)`
/// lasts until the end of that transaction, and its commit record is written before the
/// setting is undone, so the commit is asynchronous and the connection's later commits are
/// not. One prepared statement (ADR 0008 session 12; before: `BEGIN; SET LOCAL
/// synchronous_commit = off; NOTIFY …; COMMIT` as text, four statements parsed each time).
const ANNOUNCE: &str = "SELECT set_config('synchronous_commit', 'off', true), \
     count(pg_notify($1::text, p)) FROM unnest($2::text[]) AS p";

/// `col = <one more>` for a history counter of `jobs j` (migration 4: NULL means 0), at most
/// `u32::MAX` as the engine's counters.
pub(crate) fn count_up(col: &str) -> String {
    format!("least(coalesce(j.{col}, 0) + 1, 4294967295)")
}

/// A `u64` as PostgreSQL `bigint`, saturating (ids, times and TTRs stay far below 2^63).
fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// One id's net change within a group commit.
enum Net {
    Upsert(JobRecord),
    Update(DurableState, u32, JobHistory),
    Delete,
}

/// The parts of the group commit's statement that carry job histories (see [`Sql::new`]).
struct HistorySql {
    insert: &'static str,
    select: &'static str,
    params: &'static str,
    names: &'static str,
    conflict: &'static str,
    update: &'static str,
    update_params: &'static str,
    update_names: &'static str,
}

/// The history columns of a group commit's upserts or updates, one array per column.
#[derive(Default)]
struct HistoryColumns([Vec<i64>; 6]);

impl HistoryColumns {
    fn push(&mut self, h: &JobHistory) {
        let [delay, counters @ ..] = &mut self.0;
        delay.push(big(h.delay));
        for (column, n) in counters.iter_mut().zip(h.counters()) {
            column.push(i64::from(n));
        }
    }
}

fn state_columns(state: DurableState) -> (i16, i64) {
    match state {
        DurableState::Ready => (0, 0),
        DurableState::Delayed { until } => (1, big(until)),
        DurableState::Buried => (2, 0),
    }
}

/// Folds a batch into one net change per id (engine order: a later change wins) and the
/// largest id reservation.
fn fold(batch: &[Change]) -> (BTreeMap<JobId, Net>, Option<JobId>) {
    let mut net: BTreeMap<JobId, Net> = BTreeMap::new();
    let mut ids_end = None;
    for change in batch {
        match change {
            Change::Put(r) => {
                net.insert(r.id, Net::Upsert(r.clone()));
            }
            Change::Update {
                id,
                state,
                priority,
                history,
            } => match net.get_mut(id) {
                Some(Net::Upsert(r)) => r.update(*state, *priority, *history),
                Some(Net::Delete) => {}
                Some(n @ Net::Update(..)) => *n = Net::Update(*state, *priority, *history),
                None => {
                    net.insert(*id, Net::Update(*state, *priority, *history));
                }
            },
            Change::Delete { id } => {
                net.insert(*id, Net::Delete);
            }
            Change::ReserveIds { end } => {
                ids_end = Some(ids_end.map_or(*end, |e: JobId| e.max(*end)));
            }
        }
    }
    (net, ids_end)
}

impl PgStore {
    /// Connects, creates or migrates the schema, and returns the store.
    ///
    /// # Errors
    ///
    /// [`PgError::Db`] if the database cannot be reached or refuses; [`PgError::NewerSchema`]
    /// if its schema is newer than this build knows.
    pub fn open(options: &PgOptions) -> Result<PgStore, PgError> {
        let mut client = Client::connect(&options.url, NoTls)?;
        migrate(&mut client, &options.schema)?;
        drop(client);
        Ok(PgStore {
            sql: Sql::new(&options.schema, false),
            options: options.clone(),
            commit: Mutex::new(None),
            read: Mutex::new(None),
            free: Mutex::new(None),
            reachable: AtomicBool::new(true),
            node_clock: Arc::new(system_ms),
            epoch: None,
            offset: ClockOffset::default(),
            retimed: Mutex::new(Vec::new()),
            retimed_pending: AtomicBool::new(false),
        })
    }

    /// Makes this store the only one whose commits reach the schema (standby mode: the node
    /// that took the [`ActiveLock`] calls it before it reads a single job). It raises the
    /// schema's active epoch (`meta.active_epoch`), which waits for the group commits any
    /// earlier active node still has in flight, and from then on each commit of this store
    /// checks, in its own statement, that the epoch is still the one it raised.
    ///
    /// Without it a node killed during a group commit could have that commit land after the
    /// node taking over had read the jobs (the killed node's lock session ends at once, its
    /// commit's backend finishes the statement first): jobs in the table that the new active
    /// node never hears of. With it, such a commit either ends before the raise (and is read)
    /// or fails, and so does any commit of a node that lost its lock but still runs.
    ///
    /// # Errors
    ///
    /// [`PgError::Db`] if the database cannot be reached or refuses. A commit of a store
    /// fenced off by a later one fails with [`StoreError::Engine`] (SQLSTATE `TW001`, "another
    /// node took over"), nothing of it written.
    pub fn fenced(mut self, _lock: &ActiveLock) -> Result<PgStore, PgError> {
        let mut client = Client::connect(&self.options.url, NoTls)?;
        let epoch: i64 = client
            .query_one(
                &format!(
                    "UPDATE {}.meta SET value = value + 1 WHERE key = 'active_epoch'
                     RETURNING value",
                    self.options.schema.as_str()
                ),
                &[],
            )?
            .get(0);
        self.epoch = Some(epoch);
        Ok(self)
    }

    /// The store of an active-active node ([`Node`]), in three ways:
    ///
    /// - every commit also announces the ids it puts or makes ready (kicks) on
    ///   [`SchemaName::ready_channel`], right after it committed and before
    ///   [`Store::commit`] returns, in a transaction of its own that does not wait for its
    ///   flush (a notifying transaction holds PostgreSQL's cluster-wide notification lock
    ///   until its commit is flushed; announcing in the group commit itself made the nodes'
    ///   group commits wait for each other's WAL flush), so the other nodes adopt the jobs
    ///   and nothing uncommitted is announced;
    /// - delayed due times are moved onto the database clock: `until` (node clock) plus the
    ///   database clock minus the node's clock at the commit ([`PgStore::with_node_clock`]),
    ///   so a node whose clock is behind cannot make a job due early by the database clock;
    /// - updates and deletes leave alone a row held under a live lease (state 3): a holder
    ///   acts through [`Node::release`], [`Node::delete`], … first, and a stale engine cannot
    ///   undo another node's claim;
    /// - every read (`get`, [`PgStore::get_free`], `delayed_between`, `recover`, …) gives
    ///   delayed due times back on the node's clock, no earlier than the database holds them
    ///   due ([`PgStore::clock_offset`]; unchanged before the first round trip).
    #[must_use]
    pub fn shared(mut self) -> PgStore {
        self.sql = Sql::new(&self.options.schema, true);
        *self.commit.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
        self
    }

    /// Reads the node's clock (Unix ms) from `clock` instead of the system clock: the clock
    /// the node's engine computes due times with (a server under a manual clock, or a test
    /// that plays a node whose clock is off).
    #[must_use]
    pub fn with_node_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> PgStore {
        self.node_clock = Arc::new(clock);
        self
    }

    /// The lower bound on (database clock − node clock) learnt from this store's commits
    /// (shared mode; see [`ClockOffset`]).
    pub fn clock_offset(&self) -> &ClockOffset {
        &self.offset
    }

    /// Reads the database clock once on the read connection, for [`PgStore::clock_offset`]
    /// (a node that has not committed lately has no fresh bound otherwise).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn sync_clock(&self) -> Result<(), StoreError> {
        let db: i64 = self.read_with(|c| {
            Ok(c.query_one(
                "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )?
            .get(0))
        })?;
        self.offset.observe(db, (self.node_clock)());
        Ok(())
    }

    /// The delayed jobs of the shared commits since the last call ([`Retimed`]; empty in
    /// standby mode). Cheap when there are none.
    pub fn take_retimed(&self) -> Vec<Retimed> {
        if !self.retimed_pending.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut retimed = self.retimed.lock().unwrap_or_else(|p| p.into_inner());
        self.retimed_pending.store(false, Ordering::Release);
        std::mem::take(&mut *retimed)
    }

    /// Records where the database's due times of `delayed` (`(id, until)`, node clock, each
    /// written as `until + d` on the database's) fall on the node's clock.
    fn note_retimed(&self, delayed: impl Iterator<Item = (i64, i64)>, d: i64) {
        let mut retimed = self.retimed.lock().unwrap_or_else(|p| p.into_inner());
        for (id, until) in delayed {
            if retimed.len() >= MAX_RETIMED {
                break;
            }
            let (Ok(id), Ok(from), Ok(db)) = (
                u64::try_from(id),
                u64::try_from(until),
                u64::try_from(until.saturating_add(d)),
            ) else {
                continue;
            };
            let to = self.offset.to_node_clock(db);
            if to > from {
                retimed.push(Retimed { id, from, to });
            }
        }
        if !retimed.is_empty() {
            self.retimed_pending.store(true, Ordering::Release);
        }
    }

    /// The options it was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.options
    }

    fn db_error(&self, e: postgres::Error) -> StoreError {
        StoreError::Engine {
            path: PathBuf::from(format!(
                "postgresql schema {}",
                self.options.schema.as_str()
            )),
            source: Arc::new(e),
        }
    }

    fn corrupt(&self, detail: String) -> StoreError {
        StoreError::Corrupt {
            file: PathBuf::from(format!(
                "postgresql table {}.jobs",
                self.options.schema.as_str()
            )),
            offset: 0,
            detail,
        }
    }

    /// Runs `f` on the read connection, reconnecting once if it was broken.
    fn read_with<T>(
        &self,
        f: impl Fn(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        self.on_connection(
            &self.read,
            || Client::connect(&self.options.url, NoTls),
            |c| c,
            f,
        )
    }

    /// Runs `f` on the connection in `slot` (opened with `open` when there is none or it is
    /// closed; `client` is its `Client`), reconnecting once if it broke.
    fn on_connection<C, T>(
        &self,
        slot: &Mutex<Option<C>>,
        open: impl Fn() -> Result<C, postgres::Error>,
        client: impl Fn(&C) -> &Client,
        f: impl Fn(&mut C) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut last = None;
        for _ in 0..2 {
            let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
            if guard.as_ref().is_none_or(|c| client(c).is_closed()) {
                *guard = None;
                match open() {
                    Ok(c) => *guard = Some(c),
                    Err(e) => {
                        last = Some(e);
                        continue;
                    }
                }
            }
            let conn = guard.as_mut().expect("filled above");
            match f(conn) {
                Ok(v) => return Ok(v),
                Err(e) if client(conn).is_closed() || is_connection_error(&e) => {
                    *guard = None;
                    last = Some(e);
                }
                Err(e) => return Err(self.db_error(e)),
            }
        }
        Err(self.db_error(last.expect("the loop ran")))
    }

    /// The commit connection, (re)connected with its statement prepared, on a generic plan
    /// ([`node::GENERIC_PLANS`]). PostgreSQL's own choice for the commit is a custom plan
    /// (`unnest` of a known array looks cheaper so), i.e. planned again on every group
    /// commit: ~0.5 ms of planning per commit against ~0.3 ms of execution (ADR 0008,
    /// session 14). The generic plan is made once, while the table may still be empty; the
    /// same `enable_*` settings as the node connections keep it on the primary key (without
    /// them the update of existing rows was a hash join over a sequential scan of `jobs`,
    /// kept once the table had filled: session 11's slower generic commit).
    fn commit_connection(&self) -> Result<MutexGuard<'_, Option<CommitConn>>, postgres::Error> {
        let mut guard = self.commit.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_none_or(|(c, _, _)| c.is_closed()) {
            *guard = None;
            let mut client = Client::connect(&self.options.url, NoTls)?;
            client.batch_execute(node::GENERIC_PLANS)?;
            let statement = client.prepare(&self.sql.commit)?;
            let announce = match &self.sql.announce {
                Some(_) => Some(client.prepare(ANNOUNCE)?),
                None => None,
            };
            *guard = Some((client, statement, announce));
        }
        Ok(guard)
    }

    fn commit_once(
        &self,
        client: &mut Client,
        statement: &Statement,
        announce: Option<&Statement>,
        batch: &[Change],
    ) -> Result<(), postgres::Error> {
        let (net, ids_end) = fold(batch);
        let mut up_id = Vec::new();
        let mut up_tube = Vec::new();
        let mut up_pri = Vec::new();
        let mut up_ttr = Vec::new();
        let mut up_state = Vec::new();
        let mut up_until = Vec::new();
        let mut up_created = Vec::new();
        let mut up_body: Vec<&[u8]> = Vec::new();
        let mut up_key: Vec<Option<&str>> = Vec::new();
        let (mut u_id, mut u_state, mut u_until, mut u_pri) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut up_history, mut u_history) =
            (HistoryColumns::default(), HistoryColumns::default());
        let mut deleted = Vec::new();
        for (id, n) in &net {
            match n {
                Net::Upsert(r) => {
                    let (state, until) = state_columns(r.state);
                    up_id.push(big(*id));
                    up_tube.push(r.tube.as_str());
                    up_pri.push(i64::from(r.priority));
                    up_ttr.push(big(r.ttr));
                    up_state.push(state);
                    up_until.push(until);
                    up_created.push(big(r.created));
                    up_body.push(&r.body[..]);
                    up_key.push(r.idempotency_key.as_deref());
                    up_history.push(&r.history);
                }
                Net::Update(s, priority, history) => {
                    let (state, until) = state_columns(*s);
                    u_id.push(big(*id));
                    u_state.push(state);
                    u_until.push(until);
                    u_pri.push(i64::from(*priority));
                    u_history.push(history);
                }
                Net::Delete => deleted.push(big(*id)),
            }
        }
        let ids_end: Option<i64> = ids_end.map(big);
        let sent = (self.node_clock)();
        let sent_big = big(sent);
        let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![
            &up_id,
            &up_tube,
            &up_pri,
            &up_ttr,
            &up_state,
            &up_until,
            &up_created,
            &up_body,
            &u_id,
            &u_state,
            &u_until,
            &u_pri,
            &deleted,
            &ids_end,
            &up_key,
            &sent_big,
            &self.epoch,
        ];
        if self.sql.announce.is_some() {
            // Shared: the puts' delays ($18) and the updates' kicks ($19; see `Sql::new`).
            params.push(&up_history.0[0]);
            params.push(&u_history.0[5]);
        } else {
            // $18..$23, then $24..$29: the history columns of the puts, then of the updates.
            for column in up_history.0.iter().chain(&u_history.0) {
                params.push(column);
            }
        }
        let row = client.query_one(statement, &params)?;
        // Shared mode: `d` is (database clock − `sent`); every delayed due time went in as
        // `until + d`.
        let d: i64 = if self.sql.announce.is_some() {
            row.get(1)
        } else {
            0
        };
        if self.sql.announce.is_some() {
            let back = (self.node_clock)();
            self.offset.observe(sent_big.saturating_add(d), back);
            let delayed = up_until
                .iter()
                .zip(&up_state)
                .zip(&up_id)
                .chain(u_until.iter().zip(&u_state).zip(&u_id))
                .filter(|((_, state), _)| **state == 1)
                .map(|((until, _), id)| (*id, *until));
            self.note_retimed(delayed, d);
        }
        if let Some(channel) = &self.sql.announce {
            // Puts carry their due time on the database clock if delayed (`note`): the other
            // nodes leave those to their owner until then without reading them first.
            let ready = up_id
                .iter()
                .zip(&up_state)
                .zip(&up_until)
                .map(|((id, state), until)| (*id, (*state == 1).then(|| until.saturating_add(d))))
                .chain(
                    u_id.iter()
                        .zip(&u_state)
                        .filter(|(_, state)| **state == 0)
                        .map(|(id, _)| (*id, None)),
                );
            let payloads = note::payloads(ready);
            if let (false, Some(announce)) = (payloads.is_empty(), announce) {
                // Committed already: a failure here loses only the wake-up (other nodes
                // find the jobs when they resync, and the owner serves them meanwhile).
                if let Err(e) = client.execute(announce, &[channel, &payloads]) {
                    tracing::warn!(error = %e, "cannot announce committed jobs");
                }
            }
        }
        Ok(())
    }

    /// A due time read from the database (its clock) as the node's engine schedules it.
    /// Shared mode: moved onto the node's clock, no earlier ([`ClockOffset::to_node_clock`]),
    /// so a node whose clock is behind the database's does not wake late for it and one ahead
    /// does not claim it early. One active node: unchanged (its engine is the authority).
    fn on_node_clock(&self, db_ms: u64) -> u64 {
        if self.sql.announce.is_some() {
            self.offset.to_node_clock(db_ms)
        } else {
            db_ms
        }
    }

    fn decode(&self, row: &Row) -> Result<JobRecord, StoreError> {
        let id: i64 = row.get(0);
        let tube: &str = row.get(1);
        let priority: i64 = row.get(2);
        let ttr: i64 = row.get(3);
        let state: i16 = row.get(4);
        let until: i64 = row.get(5);
        let created: i64 = row.get(6);
        let body: &[u8] = row.get(7);
        let idempotency_key: Option<&str> = row.get(8);
        // Migration 4's columns: NULL is 0.
        let count = |i: usize| {
            let n: i64 = row.get::<_, Option<i64>>(i).unwrap_or(0);
            u32::try_from(n).map_err(|_| self.corrupt(format!("job {id}: a counter of {n}")))
        };
        let delay: i64 = row.get::<_, Option<i64>>(9).unwrap_or(0);
        let mut history = JobHistory::from_counters(
            u64::try_from(delay).unwrap_or(0),
            [count(10)?, count(11)?, count(12)?, count(13)?, count(14)?],
        );
        if state == 1 && delay == 0 {
            // A delayed row from before migration 4: the delay its put gave, as before.
            history.delay = u64::try_from(until.saturating_sub(created)).unwrap_or(0);
        }
        let bad = |what: &str| self.corrupt(format!("job {id}: {what}"));
        let id = u64::try_from(id).map_err(|_| bad("negative id"))?;
        let tube = TubeName::new(tube).map_err(|_| bad("invalid tube name"))?;
        let state = match state {
            0 => DurableState::Ready,
            1 => {
                let until = u64::try_from(until).map_err(|_| bad("negative until_ms"))?;
                DurableState::Delayed {
                    until: self.on_node_clock(until),
                }
            }
            2 => DurableState::Buried,
            // Reserved by a node (active-active): a reservation is not durable in the
            // engine's terms; a claim by primary key decides who holds it.
            3 => DurableState::Ready,
            _ => return Err(bad("unknown state")),
        };
        Ok(JobRecord {
            id,
            tube,
            priority: u32::try_from(priority).map_err(|_| bad("priority out of range"))?,
            ttr: u64::try_from(ttr).map_err(|_| bad("negative ttr"))?,
            state,
            created: u64::try_from(created).unwrap_or(0),
            body: Bytes::copy_from_slice(body),
            idempotency_key: idempotency_key.map(str::to_owned),
            history,
        })
    }

    /// Jobs put by SQL (ids from [`FOREIGN_ID_BASE`]) with ids above `after`, in id order, at
    /// most `limit`: what a node polls for in case a notification was missed.
    ///
    /// # Errors
    ///
    /// Database errors; [`StoreError::Corrupt`] for a row that does not decode.
    pub fn foreign_after(&self, after: JobId, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM {}.jobs WHERE id > $1 ORDER BY id LIMIT $2",
            self.options.schema.as_str()
        );
        let after = big(after.max(FOREIGN_ID_BASE - 1));
        let rows = self.read_with(|c| c.query(&sql, &[&after, &big(limit as u64)]))?;
        rows.iter().map(|r| self.decode(r)).collect()
    }
}

impl PgStore {
    /// The rows of `ids` that no client holds under a live lease (what an active-active node
    /// adopts when they are announced), in id order.
    ///
    /// # Errors
    ///
    /// Database errors; [`StoreError::Corrupt`] for a row that does not decode.
    pub fn get_free(&self, ids: &[JobId]) -> Result<Vec<JobRecord>, StoreError> {
        let ids: Vec<i64> = ids.iter().map(|id| big(*id)).collect();
        let rows = self.on_connection(
            &self.free,
            || self.free_connection(),
            |(c, _)| c,
            |(c, statement)| c.query(&*statement, &[&ids]),
        )?;
        rows.iter().map(|r| self.decode(r)).collect()
    }

    /// How the commit connection plans its commit statement (a test hook: the session's
    /// `pg_prepared_statements` row of the statement, and its plan with every parameter
    /// NULL, which under a generic plan is the plan every commit runs): generic plans chosen,
    /// custom plans chosen, the `EXPLAIN` text; `None` if the statement is not prepared.
    ///
    /// # Errors
    ///
    /// Database errors.
    #[doc(hidden)]
    pub fn commit_plans(&self) -> Result<Option<(i64, i64, String)>, StoreError> {
        let mut guard = self.commit_connection().map_err(|e| self.db_error(e))?;
        let (client, _, _) = guard.as_mut().expect("connected above");
        let row = client
            .query(
                "SELECT name, generic_plans, custom_plans, statement,
                        cardinality(parameter_types)
                 FROM pg_prepared_statements",
                &[],
            )
            .map_err(|e| self.db_error(e))?
            .into_iter()
            .find(|r| r.get::<_, &str>(3) == self.sql.commit);
        let Some(row) = row else {
            return Ok(None);
        };
        let name: String = row.get(0);
        let params = usize::try_from(row.get::<_, i32>(4)).unwrap_or(0);
        let nulls = vec!["NULL"; params].join(", ");
        let plan = client
            .query(&format!("EXPLAIN EXECUTE {name}({nulls})"), &[])
            .map_err(|e| self.db_error(e))?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Some((row.get(1), row.get(2), plan)))
    }

    /// A new connection for [`PgStore::get_free`] with its statement prepared, on a generic
    /// plan ([`node::GENERIC_PLANS`]: a primary-key lookup whatever the ids; a custom plan
    /// would be planned again on every call: ADR 0008, session 11).
    fn free_connection(&self) -> Result<(Client, Statement), postgres::Error> {
        let s = self.options.schema.as_str();
        let mut client = Client::connect(&self.options.url, NoTls)?;
        client.batch_execute(node::GENERIC_PLANS)?;
        let statement = client.prepare(&format!(
            "SELECT {COLUMNS} FROM {s}.jobs WHERE id = ANY($1::bigint[])
               AND NOT (state = 3 AND lease_until_ms > {s}.now_ms()) ORDER BY id"
        ))?;
        Ok((client, statement))
    }

    /// The ids of every job no client holds under a live lease, in id order: what a node
    /// reads again after its `LISTEN` connection broke (announcements sent meanwhile are lost).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn free_ids(&self) -> Result<Vec<JobId>, StoreError> {
        let s = self.options.schema.as_str();
        let sql = format!(
            "SELECT id FROM {s}.jobs
             WHERE NOT (state = 3 AND lease_until_ms > {s}.now_ms()) ORDER BY id"
        );
        let rows = self.read_with(|c| c.query(&sql, &[]))?;
        Ok(rows
            .iter()
            .filter_map(|r| u64::try_from(r.get::<_, i64>(0)).ok())
            .collect())
    }

    /// The ids in `range` (a node's id block) of every job no client holds under a live
    /// lease, in id order: what the other nodes read once when a node stops heartbeating (a
    /// node killed between a commit and its announcement leaves jobs nobody heard of).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn free_ids_in(&self, range: std::ops::Range<JobId>) -> Result<Vec<JobId>, StoreError> {
        let s = self.options.schema.as_str();
        let sql = format!(
            "SELECT id FROM {s}.jobs WHERE id >= $1 AND id < $2
               AND NOT (state = 3 AND lease_until_ms > {s}.now_ms()) ORDER BY id"
        );
        let rows = self.read_with(|c| c.query(&sql, &[&big(range.start), &big(range.end)]))?;
        Ok(rows
            .iter()
            .filter_map(|r| u64::try_from(r.get::<_, i64>(0)).ok())
            .collect())
    }

    /// Job `id` as the database has it now: its record (decoded as [`PgStore::get_free`]
    /// decodes one, a reserved job as ready) and, if someone holds it under a live lease,
    /// the holder and the lease's time left (ms, database clock). `None`: no such job.
    ///
    /// # Errors
    ///
    /// Database errors; a row that does not decode (corruption).
    pub fn get_row(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        let s = self.options.schema.as_str();
        let sql = format!(
            "SELECT {COLUMNS}, holder, lease_until_ms - {s}.now_ms() FROM {s}.jobs WHERE id = $1"
        );
        let rows = self.read_with(|c| c.query(&sql, &[&big(id)]))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let record = self.decode(row)?;
        let state: i16 = row.get(4);
        let left: Option<i64> = row.get(16);
        let held = match (state, left) {
            (3, Some(left)) if left > 0 => Some(Held {
                holder: row.get::<_, Option<i64>>(15).unwrap_or(0),
                left_ms: u64::try_from(left).unwrap_or(0),
            }),
            _ => None,
        };
        Ok(Some(JobRow { record, held }))
    }

    /// Which of `ids` have a row (the rest were deleted).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn existing(&self, ids: &[JobId]) -> Result<Vec<JobId>, StoreError> {
        let sql = format!(
            "SELECT id FROM {}.jobs WHERE id = ANY($1::bigint[])",
            self.options.schema.as_str()
        );
        let ids: Vec<i64> = ids.iter().map(|id| big(*id)).collect();
        let rows = self.read_with(|c| c.query(&sql, &[&ids]))?;
        Ok(rows
            .iter()
            .filter_map(|r| u64::try_from(r.get::<_, i64>(0)).ok())
            .collect())
    }
}

/// A broken connection (retry on a new one) rather than a statement the database refused.
fn is_connection_error(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        // Class 08: connection exception; 57P01..03: admin shutdown, crash shutdown, cannot
        // connect now (starting up or shutting down).
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
        }
        // No SQLSTATE: the error came from the socket or the protocol, not from a statement.
        None => true,
    }
}

impl Store for PgStore {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        validate(batch)?;
        if batch.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + self.options.retry;
        let mut backoff = Duration::from_millis(50);
        loop {
            let attempt = match self.commit_connection() {
                Ok(mut guard) => {
                    let (client, statement, announce) =
                        guard.as_mut().expect("commit_connection() fills the slot");
                    let r = self.commit_once(client, statement, announce.as_ref(), batch);
                    if r.as_ref()
                        .is_err_and(|e| client.is_closed() || is_connection_error(e))
                    {
                        *guard = None;
                    }
                    r
                }
                Err(e) => Err(e),
            };
            match attempt {
                Ok(()) => {
                    self.reachable.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) if is_connection_error(&e) && Instant::now() < deadline => {
                    self.reachable.store(false, Ordering::Relaxed);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(self.db_error(e)),
            }
        }
    }

    fn writable(&self, _bytes: u64) -> Result<(), StoreError> {
        if self.reachable.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err(StoreError::Unavailable {
                what: format!("PostgreSQL (schema {})", self.options.schema.as_str()),
                detail: "a commit is retrying on a broken connection".to_owned(),
            })
        }
    }

    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        let end = big(window_end_ms);
        let (rows, far, next_id) = self.read_with(|c| {
            let mut tx = c.build_transaction().read_only(true).start()?;
            // One snapshot for all three reads.
            tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
            let rows = tx.query(&self.sql.resident, &[&end])?;
            let far = tx.query(&self.sql.far, &[&end])?;
            let next: i64 = tx
                .query_one(&self.sql.next_id, &[&big(FOREIGN_ID_BASE)])?
                .get(0);
            tx.commit()?;
            Ok((rows, far, next))
        })?;
        let resident = rows
            .iter()
            .map(|r| self.decode(r))
            .collect::<Result<Vec<_>, _>>()?;
        let mut far_delayed = Vec::with_capacity(far.len());
        for row in &far {
            let tube: &str = row.get(0);
            let count: i64 = row.get(1);
            let tube = TubeName::new(tube)
                .map_err(|_| self.corrupt(format!("invalid tube name {tube:?}")))?;
            far_delayed.push((tube, u64::try_from(count).unwrap_or(0)));
        }
        Ok(Recovered {
            next_id: u64::try_from(next_id).unwrap_or(1).max(1),
            resident,
            far_delayed,
        })
    }

    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        let row = self.read_with(|c| c.query_opt(&self.sql.get, &[&big(id)]))?;
        row.map(|r| self.decode(&r)).transpose()
    }

    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        if from_ms >= to_ms || limit == 0 {
            return Ok(Vec::new());
        }
        let rows = self.read_with(|c| {
            c.query(
                &self.sql.between,
                &[&big(from_ms), &big(to_ms), &big(limit as u64)],
            )
        })?;
        rows.iter().map(|r| self.decode(r)).collect()
    }
}
