//! Several nodes serving one schema at once (ADR 0008, phase 2, "active-active"): what a node
//! says to the database to hand out, act on and expire jobs that any node may also see.
//!
//! # Ground rules
//!
//! - **The database decides, by primary key, on its own clock.** A node picks a candidate from
//!   its engine (a cache) and [`Node::claim`]s it: one conditional `UPDATE … WHERE id = $1 AND
//!   <ready by now_ms()>` per job, batched. Zero rows means another node won, the job is not
//!   due yet by the database clock, its tube is paused, or it is gone: the node drops it from
//!   its cache and tries the next. No statement searches the table for "the next job", so no
//!   dead-tuple graveyard is walked per reserve.
//! - **One holder.** A claim sets `state = 3`, `holder`, and `lease_until_ms = now_ms() + ttr`.
//!   Only a claim whose `holder` matches and whose lease has not lapsed (database clock) may
//!   [`Node::delete`], [`Node::release`], [`Node::bury`] or [`Node::touch`] the job; anyone
//!   else gets `false` (the server answers `NOT_FOUND`, as beanstalkd does for a job the
//!   connection does not hold). A lapsed lease is no hold: the job is claimable again at once,
//!   whether or not [`Node::expire`] has swept it back to ready yet.
//! - **Other nodes hear of it.** Jobs that become ready for everyone (puts, releases, expiries,
//!   kicks) are announced with `NOTIFY <schema>_ready` (payload: comma-separated ids, a delayed
//!   put's or release's followed by its due time: [`crate::parse_ready`]), and the delete of
//!   a job the deleter did not hold with `NOTIFY <schema>_delete` (so other nodes' caches drop
//!   it; a held job's delete announces nothing): in the
//!   same transaction for this type's statements, right after the commit for the group
//!   commit's puts ([`crate::PgStore::shared`]), so a committed change wakes reservers on every
//!   listening node and a rolled-back one wakes nobody. A node killed between a group commit
//!   and its announcement is covered by [`Node::stale_nodes`]: the others read its id block.
//! - **The database counts each job's history** (`reserves`, `timeouts`, `releases`,
//!   `buries`, `kicks`, `delay_ms`: what `stats-job` shows, migration 4) in the statements
//!   that end a reservation (release, bury, expire, a hung-up client's release, a claim over a
//!   lapsed lease) and kick, so the counts are the cluster's whatever node acted, as of the
//!   job's last write like beanstalkd's binlog; a node's engine reads them with the row. A
//!   claim that ends in a delete writes no counter.
//! - `holder` is an opaque number the server chooses; it must be unique across the nodes of a
//!   schema while a lease lives ([`Node::holder`] builds one from the node id and a client).

use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use postgres::{Client, NoTls, Statement};
use tickwheel_queue::{JobId, FOREIGN_ID_BASE};

use crate::{big, PgError, PgOptions};

/// The engine ids each node takes when it starts (2^36: a node that puts a million jobs a
/// second for a day uses 0.1% of it). Blocks come from `meta.next_id`, so they never overlap
/// each other, a phase-1 node's ids, or the SQL puts' ids (from 2^62).
pub const NODE_ID_BLOCK: u64 = 1 << 36;

/// The bit of a holder number that marks a node's stock ([`Node::stock_holder`]): jobs it
/// claimed ahead for its reservers ([`PgOptions::claim_ahead`]). Client holders never set it
/// ([`Node::holder`] keeps a client's low 31 bits).
pub const STOCK_BIT: i64 = 1 << 31;

/// How much longer than its TTR a stocked job's lease runs ([`PgOptions::claim_ahead`]): a
/// node hands a stocked job out only within half of this after it sent the claim, so the
/// lease outlives the TTR of the client that gets it.
pub const STOCK_HOLD_MS: u64 = 1000;

/// The most ids announced in one notification (a NOTIFY payload must stay below 8000 bytes;
/// an id is at most 19 digits and a comma).
const IDS_PER_NOTE: i64 = 300;

/// The session settings of the connections that run a node's statements (and
/// [`PgStore::get_free`](crate::PgStore::get_free) and the group commit): every one of them looks its rows up by
/// primary key or a partial index whatever its parameters, so each is planned once per
/// connection (a generic plan) instead of on every call (PostgreSQL's custom plans, its
/// choice for them: ADR 0008, session 11, about a fifth of the database's CPU per due job).
/// A generic plan is made once, perhaps while the table is still empty (when a sequential
/// scan and a hash join look cheapest) and kept until the table's statistics change; with
/// those disabled the planner takes the index plans the statements are written for whatever
/// the statistics (a statement with no index to use still scans, at a nominal cost). That
/// nominal cost is far above `jit_above_cost`, so JIT is off as well: with it, such a
/// statement (a scan of the 3-row `nodes` table) was compiled on every call, 0.4–0.5 s each.
pub(crate) const GENERIC_PLANS: &str = "SET plan_cache_mode = force_generic_plan; \
     SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off; \
     SET jit = off";

/// A job a node claimed: who holds it and until when, by the database clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The job.
    pub id: JobId,
    /// The holder it was claimed for.
    pub holder: i64,
    /// The database clock when it claimed (Unix ms): the job was due by then.
    pub at_ms: u64,
    /// The lease's end (Unix ms, database clock): after it the job is ready for anyone.
    pub lease_until_ms: u64,
}

/// What [`Node::claim`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    /// The database clock when the claim ran (Unix ms; 0 if nothing was asked).
    pub at_ms: u64,
    /// The claims that won.
    pub won: Vec<Claimed>,
    /// The others, and why (from the state the claim saw).
    pub lost: Vec<(JobId, Lost)>,
}

/// Why a claim lost, which tells a node what to do with the job in its cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// No such job: drop it.
    Gone,
    /// Another holder has it under a live lease: drop it (it is announced again if it comes
    /// back: release, lease expiry).
    Held {
        /// The lease's end, database clock (Unix ms).
        lease_until_ms: u64,
    },
    /// Delayed and not due yet by the database clock: keep it, try again then.
    NotDue {
        /// The due time, database clock (Unix ms).
        until_ms: u64,
    },
    /// Buried (by another node): drop it from the ready jobs.
    Buried,
    /// Its tube is paused cluster-wide.
    Paused {
        /// The pause's end, database clock (Unix ms).
        until_ms: u64,
    },
    /// Another claim (another node, or another entry of the same batch) or change won.
    Taken,
}

/// Which job [`Node::peek`] looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peek {
    /// `peek-ready`.
    Ready,
    /// `peek-delayed`.
    Delayed,
    /// `peek-buried`.
    Buried,
}

/// Cluster-wide counts of one tube's jobs, by the database clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TubeCounts {
    /// Ready: ready, delayed and due, or reserved with a lapsed lease.
    pub ready: u64,
    /// Ready with priority below 1024 (beanstalkd's "urgent").
    pub urgent: u64,
    /// Reserved under a live lease, on any node.
    pub reserved: u64,
    /// Delayed and not due yet.
    pub delayed: u64,
    /// Buried.
    pub buried: u64,
    /// The tube is paused until this time (Unix ms, database clock); 0 if never paused.
    pub paused_until_ms: u64,
}

/// Connections a [`Node`] keeps for claims and holder-checked commands: that many run at
/// once (each is one round trip; a reserve on a busy node waits for a free one).
pub const NODE_CONNECTIONS: usize = 8;

/// One node of a schema served by several at once: its id, its block of job ids, and
/// [`NODE_CONNECTIONS`] connections for claims and the holder-checked commands (opened when
/// first needed, reopened when they break).
pub struct Node {
    options: PgOptions,
    id: i64,
    ids: Range<u64>,
    clients: Vec<Mutex<Option<Conn>>>,
    next: std::sync::atomic::AtomicUsize,
    sql: NodeSql,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let clients: Vec<Client> = self
            .clients
            .iter_mut()
            .filter_map(|slot| slot.get_mut().unwrap_or_else(|p| p.into_inner()).take())
            .map(|conn| conn.client)
            .collect();
        if !clients.is_empty() {
            crate::drop_off_runtime(clients);
        }
    }
}

/// A node connection and the statements prepared on it (by the address of their text in
/// [`NodeSql`], which lives as long as the node): each is parsed and planned once per
/// connection, not once per call, and runs in one round trip.
struct Conn {
    client: Client,
    prepared: std::collections::HashMap<usize, Statement>,
}

impl Conn {
    /// Statements run on generic plans ([`GENERIC_PLANS`]).
    fn connect(url: &str) -> Result<Conn, postgres::Error> {
        let mut client = Client::connect(url, NoTls)?;
        client.batch_execute(GENERIC_PLANS)?;
        Ok(Conn {
            client,
            prepared: std::collections::HashMap::new(),
        })
    }

    /// `sql` prepared on this connection (prepared now if it was not yet).
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        let key = sql.as_ptr() as usize;
        if let Some(statement) = self.prepared.get(&key) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.prepared.insert(key, statement.clone());
        Ok(statement)
    }
}

struct NodeSql {
    claim: String,
    claim_job: String,
    unstock: String,
    delete: String,
    delete_many: String,
    release: String,
    bury: String,
    release_all: String,
    touch: String,
    kick: String,
    kick_delayed: String,
    kick_job: String,
    peek_ready: String,
    peek_delayed: String,
    peek_buried: String,
    expire: String,
    counts: String,
    counts_all: String,
    pause: String,
    heartbeat: String,
    leave: String,
    now: String,
    stale: String,
}

impl NodeSql {
    fn new(options: &PgOptions) -> NodeSql {
        let s = options.schema.as_str();
        let ch = options.schema.ready_channel();
        let del = options.schema.delete_channel();
        // Ready for anyone at `now`: the claim's condition and the counts' "ready".
        let ready = "(j.state = 0 OR (j.state = 1 AND j.until_ms <= t.now) \
                     OR (j.state = 3 AND j.lease_until_ms <= t.now))";
        // A client's claim of a job its own node stocked: the stock's lease becomes the
        // client's (a claim by the stock itself does not take it again).
        let own_stock = format!(
            "(j.state = 3 AND c.holder & {STOCK_BIT} = 0 \
              AND j.holder = ((c.holder >> 32) << 32) | {STOCK_BIT} AND j.lease_until_ms > t.now)"
        );
        // Whether claiming the row ends a client's reservation whose lease lapsed (a
        // reserve and a time-out in its history; a stock's lapse is neither).
        let lapsed_client = format!("j.state = 3 AND j.holder & {STOCK_BIT} = 0");
        let stock_hold = STOCK_HOLD_MS;
        // One more of a job's counter (migration 4: NULL is 0; u32 at most, as in the engine).
        let [reserves_up, timeouts_up, releases_up, buries_up, kicks_up] =
            ["reserves", "timeouts", "releases", "buries", "kicks"].map(crate::count_up);
        let claim_commit = if options.async_claims {
            ", set_config('synchronous_commit', 'off', true) AS sync"
        } else {
            ""
        };
        // Held by holder $2 under a live lease.
        let held = format!("j.state = 3 AND j.holder = $2 AND j.lease_until_ms > {s}.now_ms()");
        // Announce the ids of `x` (one notification per IDS_PER_NOTE ids) and return them as
        // text lists: the lateral join makes the notifications part of the statement.
        // `token` is each row's part of the payload (`crate::note`), at most `per_note` rows
        // per notification.
        let announce_tokens = |cte: &str, token: &str, per_note: i64| {
            format!(
                "SELECT a.ids FROM (
                     SELECT string_agg(tok, ',') AS ids FROM (
                         SELECT {token} AS tok, (row_number() OVER () - 1) / {per_note} AS g
                         FROM {cte}
                     ) x GROUP BY g
                 ) a, LATERAL (SELECT pg_notify('{ch}', a.ids)) n"
            )
        };
        let announce = |cte: &str| announce_tokens(cte, "id::text", IDS_PER_NOTE);
        // A tube's job counts by state, or (no `filter`) every tube's, by the database clock.
        let counts = |paused: &str, filter: &str| {
            format!(
                "WITH t AS MATERIALIZED (SELECT {s}.now_ms() AS now)
                 SELECT count(*) FILTER (WHERE {ready}),
                        count(*) FILTER (WHERE {ready} AND j.priority < 1024),
                        count(*) FILTER (WHERE j.state = 3 AND j.lease_until_ms > t.now),
                        count(*) FILTER (WHERE j.state = 1 AND j.until_ms > t.now),
                        count(*) FILTER (WHERE j.state = 2),
                        {paused}
                 FROM {s}.jobs j, t {filter}"
            )
        };
        NodeSql {
            // `t.now` is read once, before any row lock wait: after a wait the row is checked
            // again (READ COMMITTED re-evaluates the WHERE on the new version) against that
            // earlier time, which can only make a job look less due, never early.
            // The main query reads the snapshot from before the UPDATE (a statement does not
            // see its own CTEs' writes), which says why a claim lost.
            // With `async_claims`, `set_config(…, true)` is `SET LOCAL synchronous_commit =
            // off` for the claim's own transaction (the setting is read at its commit).
            claim: format!(
                "WITH t AS MATERIALIZED (SELECT {s}.now_ms() AS now{claim_commit}),
                 c AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS c(id, holder)),
                 w AS (
                     UPDATE {s}.jobs j SET state = 3, holder = c.holder,
                         lease_until_ms = t.now + j.ttr_ms
                             + CASE WHEN c.holder & {STOCK_BIT} <> 0 THEN {stock_hold} ELSE 0 END,
                         reserves = CASE WHEN {lapsed_client} THEN {reserves_up} ELSE j.reserves END,
                         timeouts = CASE WHEN {lapsed_client} THEN {timeouts_up} ELSE j.timeouts END
                     FROM c, t
                     WHERE j.id = c.id
                       AND (({ready}
                             AND NOT EXISTS (SELECT 1 FROM {s}.tubes p
                                             WHERE p.name = j.tube AND p.paused_until_ms > t.now))
                            OR {own_stock})
                     RETURNING j.id, j.holder, j.lease_until_ms
                 )
                 SELECT c.id, c.holder, t.now, w.holder, w.lease_until_ms,
                        j.state, j.until_ms, j.lease_until_ms, p.paused_until_ms
                 FROM c CROSS JOIN t
                 LEFT JOIN w ON w.id = c.id
                 LEFT JOIN {s}.jobs j ON j.id = c.id
                 LEFT JOIN {s}.tubes p ON p.name = j.tube"
            ),
            // Jobs of a node's stock back to ready, announced: not handed out in time (no
            // counter moves), or held by a client that hung up ($3: a reserve ended).
            unstock: format!(
                "WITH r AS (
                     UPDATE {s}.jobs j SET state = 0, holder = NULL, lease_until_ms = NULL,
                         reserves = CASE WHEN $3 THEN {reserves_up} ELSE j.reserves END
                     WHERE j.id = ANY($1::bigint[]) AND j.state = 3 AND j.holder = $2
                     RETURNING j.id
                 ) {}",
                announce("r")
            ),
            // `reserve-job`: the job whatever its state (ready, delayed, buried), unless
            // someone holds it under a live lease (but its own node's stock: a claim takes
            // that over); a paused tube does not stop it (as beanstalkd). Counted as a claim
            // is.
            claim_job: format!(
                "WITH t AS MATERIALIZED (SELECT {s}.now_ms() AS now)
                 UPDATE {s}.jobs j SET state = 3, holder = $2,
                     lease_until_ms = t.now + j.ttr_ms,
                     reserves = CASE WHEN {lapsed_client} THEN {reserves_up} ELSE j.reserves END,
                     timeouts = CASE WHEN {lapsed_client} THEN {timeouts_up} ELSE j.timeouts END
                 FROM t, (SELECT $2::bigint AS holder) c
                 WHERE j.id = $1 AND (NOT (j.state = 3 AND j.lease_until_ms > t.now) OR {own_stock})
                 RETURNING j.lease_until_ms"
            ),
            // beanstalkd: anyone may delete a job that is not reserved; a reserved one only
            // its holder.
            // A job the deleter did not hold (ready, delayed, buried) may sit in other nodes'
            // caches: its delete is announced on the delete channel, which they listen to
            // (as for `delete()` by SQL), so they forget it. A held job's delete, the usual
            // end of a reserve, announces nothing: no notification, so no wait for
            // PostgreSQL's notification lock at commit.
            delete: format!(
                "WITH d AS (
                     DELETE FROM {s}.jobs j WHERE j.id = $1
                       AND NOT (j.state = 3 AND j.holder <> $2
                                AND j.lease_until_ms > {s}.now_ms())
                     RETURNING j.id, j.state, j.holder
                 )
                 SELECT d.id FROM d LEFT JOIN LATERAL (
                     SELECT pg_notify('{del}', d.id::text)
                     WHERE NOT (d.state = 3 AND d.holder = $2)
                 ) n ON true"
            ),
            // The same for many (id, holder) pairs in one round trip.
            delete_many: format!(
                "WITH c AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS c(id, holder)),
                 d AS (
                     DELETE FROM {s}.jobs j USING c WHERE j.id = c.id
                       AND NOT (j.state = 3 AND j.holder <> c.holder
                                AND j.lease_until_ms > {s}.now_ms())
                     RETURNING j.id, c.holder, j.state, j.holder AS held_by
                 )
                 SELECT d.id, d.holder FROM d LEFT JOIN LATERAL (
                     SELECT pg_notify('{del}', d.id::text)
                     WHERE NOT (d.state = 3 AND d.held_by = d.holder)
                 ) n ON true"
            ),
            release: format!(
                "WITH r AS (
                     UPDATE {s}.jobs j SET state = CASE WHEN $4::bigint > 0 THEN 1 ELSE 0 END,
                         until_ms = CASE WHEN $4::bigint > 0 THEN {s}.now_ms() + $4 ELSE 0 END,
                         priority = $3, holder = NULL, lease_until_ms = NULL,
                         reserves = {reserves_up}, releases = {releases_up},
                         delay_ms = nullif($4::bigint, 0)
                     WHERE j.id = $1 AND {held}
                     RETURNING j.id, j.state, j.until_ms
                 ) {}",
                // A job released with a delay is announced with its due time, as a delayed
                // put is: the listeners (this node's own included) need not read it now.
                announce_tokens(
                    "r",
                    "CASE WHEN state = 1 THEN id || ',@' || until_ms ELSE id::text END",
                    IDS_PER_NOTE / 2
                )
            ),
            release_all: format!(
                "WITH r AS (
                     UPDATE {s}.jobs j SET state = 0, holder = NULL, lease_until_ms = NULL,
                         reserves = {reserves_up}
                     WHERE j.state = 3 AND j.holder = ANY($1::bigint[])
                       AND j.lease_until_ms > {s}.now_ms()
                     RETURNING j.id
                 ) {}",
                announce("r")
            ),
            bury: format!(
                "UPDATE {s}.jobs j SET state = 2, priority = $3, holder = NULL,
                     lease_until_ms = NULL, reserves = {reserves_up}, buries = {buries_up}
                 WHERE j.id = $1 AND {held} RETURNING j.id"
            ),
            touch: format!(
                "UPDATE {s}.jobs j SET lease_until_ms = {s}.now_ms() + j.ttr_ms
                 WHERE j.id = $1 AND {held} RETURNING j.lease_until_ms"
            ),
            kick: format!(
                "WITH k AS (
                     UPDATE {s}.jobs j SET state = 0, kicks = {kicks_up}
                     WHERE j.id IN (SELECT id FROM {s}.jobs
                                    WHERE tube = $1 AND state = 2 ORDER BY id LIMIT $2
                                    FOR UPDATE SKIP LOCKED)
                       AND j.state = 2
                     RETURNING j.id
                 ) {}",
                announce("k")
            ),
            // beanstalkd's `kick` when the tube has no buried job: its delayed ones, earliest
            // due first (not due yet by the database clock: a due one is ready already).
            kick_delayed: format!(
                "WITH t AS MATERIALIZED (SELECT {s}.now_ms() AS now),
                 k AS (
                     UPDATE {s}.jobs j SET state = 0, until_ms = 0, kicks = {kicks_up}
                     WHERE j.id IN (SELECT id FROM {s}.jobs
                                    WHERE tube = $1 AND state = 1
                                      AND until_ms > (SELECT now FROM t)
                                    ORDER BY until_ms, id LIMIT $2
                                    FOR UPDATE SKIP LOCKED)
                       AND j.state = 1
                     RETURNING j.id
                 ) {}",
                announce("k")
            ),
            // `kick-job`: a buried job, or a delayed one not due yet, becomes ready.
            kick_job: format!(
                "WITH k AS (
                     UPDATE {s}.jobs j SET state = 0, until_ms = 0, kicks = {kicks_up}
                     WHERE j.id = $1
                       AND (j.state = 2 OR (j.state = 1 AND j.until_ms > {s}.now_ms()))
                     RETURNING j.id
                 ) {}",
                announce("k")
            ),
            // The `peek-*` of a tube, cluster-wide, in the order `reserve` and `kick` take
            // them: ready by priority then id, delayed by due time, buried by id.
            peek_ready: format!(
                "WITH t AS MATERIALIZED (SELECT {s}.now_ms() AS now)
                 SELECT j.id, j.body FROM {s}.jobs j, t WHERE j.tube = $1 AND {ready}
                 ORDER BY j.priority, j.id LIMIT 1"
            ),
            peek_delayed: format!(
                "SELECT id, body FROM {s}.jobs
                 WHERE tube = $1 AND state = 1 AND until_ms > (SELECT {s}.now_ms())
                 ORDER BY until_ms, id LIMIT 1"
            ),
            peek_buried: format!(
                "SELECT id, body FROM {s}.jobs WHERE tube = $1 AND state = 2 ORDER BY id LIMIT 1"
            ),
            // The sweep: any live node returns lapsed leases (its own or a dead node's) to
            // ready and announces them. SKIP LOCKED only among the lapsed leases (the
            // `jobs_leases` partial index), so two sweeping nodes do not wait for each other.
            // The clock is read once, as a scalar subquery (an init plan): `now_ms()` is
            // volatile, so compared directly it is a filter evaluated on every reserved row
            // (the whole `jobs_leases` index, every 200 ms on every node: 10–14 ms a sweep
            // with 1 000–5 000 jobs reserved), while the init plan's value bounds the index
            // range and the sweep reads only the lapsed leases.
            expire: format!(
                "WITH t AS MATERIALIZED (SELECT {s}.now_ms() AS now),
                 e AS (
                     UPDATE {s}.jobs j SET state = 0, holder = NULL, lease_until_ms = NULL,
                         reserves = CASE WHEN {lapsed_client} THEN {reserves_up} ELSE j.reserves END,
                         timeouts = CASE WHEN {lapsed_client} THEN {timeouts_up} ELSE j.timeouts END
                     WHERE j.id IN (SELECT id FROM {s}.jobs
                                    WHERE state = 3 AND lease_until_ms <= (SELECT now FROM t)
                                    ORDER BY lease_until_ms LIMIT $1
                                    FOR UPDATE SKIP LOCKED)
                       AND j.state = 3 AND j.lease_until_ms <= (SELECT now FROM t)
                     RETURNING j.id
                 ) {}",
                announce("e")
            ),
            counts: counts(
                &format!("coalesce((SELECT paused_until_ms FROM {s}.tubes WHERE name = $1), 0)"),
                "WHERE j.tube = $1",
            ),
            // The same over every tube (`stats`): one scan of the table.
            counts_all: counts("0::bigint", ""),
            pause: format!(
                "INSERT INTO {s}.tubes (name, paused_until_ms) VALUES ($1, {s}.now_ms() + $2)
                 ON CONFLICT (name) DO UPDATE SET paused_until_ms = excluded.paused_until_ms"
            ),
            heartbeat: format!("UPDATE {s}.nodes SET heartbeat = clock_timestamp() WHERE id = $1"),
            leave: format!("DELETE FROM {s}.nodes WHERE id = $1"),
            now: format!("SELECT {s}.now_ms()"),
            stale: format!(
                "SELECT id, ids_from, ids_to FROM {s}.nodes
                 WHERE id <> $1 AND heartbeat < clock_timestamp() - $2::bigint * interval '1 millisecond'"
            ),
        }
    }
}

/// Parses the comma-separated id lists the announcing statements return.
fn ids_of(rows: &[postgres::Row]) -> Vec<JobId> {
    rows.iter()
        .flat_map(|r| {
            let list: &str = r.get(0);
            list.split(',')
                .filter_map(|id| id.parse::<JobId>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A counts statement's row.
fn counts_of(r: &postgres::Row) -> TubeCounts {
    TubeCounts {
        ready: unsigned(r.get(0)),
        urgent: unsigned(r.get(1)),
        reserved: unsigned(r.get(2)),
        delayed: unsigned(r.get(3)),
        buried: unsigned(r.get(4)),
        paused_until_ms: unsigned(r.get(5)),
    }
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Node {
    /// Joins the schema's nodes: creates or migrates the schema (as [`crate::PgStore::open`]
    /// does), registers the node and takes its block of [`NODE_ID_BLOCK`] job ids.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use tickwheel_pg::{Node, PgOptions, PgStore};
    /// use tickwheel_queue::{Change, DurableState, JobRecord, TubeName};
    /// use tickwheel_store::Store;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut options = PgOptions::new("postgres://app@db/jobs");
    /// options.active_active = true;
    /// let node = Node::join(&options)?;
    /// let store = PgStore::open(&options)?.shared();
    /// let id = node.ids().start; // this node's first job id
    /// let job = JobRecord {
    ///     id,
    ///     tube: TubeName::new("emails")?,
    ///     priority: 1024,
    ///     ttr: 60_000,
    ///     state: DurableState::Ready,
    ///     created: 0,
    ///     body: "send the welcome mail".into(),
    ///     idempotency_key: None,
    ///     history: Default::default(), // not reserved, released, buried or kicked yet
    /// };
    /// store.commit(&[Change::Put(job)])?; // committed, and announced to every node
    /// let claims = node.claim(&[(id, node.holder(1))])?;
    /// if let Some(won) = claims.won.first() {
    ///     println!("client 1 holds job {} until {} (database clock)", won.id, won.lease_until_ms);
    ///     node.delete(won.holder, won.id)?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`PgError::Db`] if the database cannot be reached or refuses; [`PgError::NewerSchema`]
    /// if its schema is newer than this build knows.
    pub fn join(options: &PgOptions) -> Result<Node, PgError> {
        let mut client = Client::connect(&options.url, NoTls)?;
        crate::migrate(&mut client, &options.schema)?;
        let s = options.schema.as_str();
        // The block starts past every id in use (a phase-1 node's ids may be above the mark
        // it recorded, within its last reserved block).
        let row = client.query_one(
            &format!(
                "WITH b AS (
                     UPDATE {s}.meta SET value = greatest(value,
                         (SELECT coalesce(max(id), 0) + 1 FROM {s}.jobs WHERE id < $2)) + $1
                     WHERE key = 'next_id'
                     RETURNING value - $1 AS lo, value AS hi
                 )
                 INSERT INTO {s}.nodes (ids_from, ids_to) SELECT lo, hi FROM b
                 RETURNING id, ids_from, ids_to"
            ),
            &[&big(NODE_ID_BLOCK), &big(FOREIGN_ID_BASE)],
        )?;
        let (id, from, to): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        // This connection becomes the first node connection: the same settings as those
        // `Conn::connect` opens (without them its statements, claims among them, were
        // planned on every call: ADR 0008, session 14).
        client.batch_execute(GENERIC_PLANS)?;
        Ok(Node {
            sql: NodeSql::new(options),
            options: options.clone(),
            id,
            ids: unsigned(from)..unsigned(to),
            clients: std::iter::once(Mutex::new(Some(Conn {
                client,
                prepared: std::collections::HashMap::new(),
            })))
            .chain((1..NODE_CONNECTIONS).map(|_| Mutex::new(None)))
            .collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The value of setting `name` on every node connection open now (a test hook: each runs
    /// its statements on generic plans, [`GENERIC_PLANS`], and a claim's
    /// `synchronous_commit = off` ends with its transaction, [`PgOptions::async_claims`]).
    ///
    /// # Errors
    ///
    /// Database errors.
    #[doc(hidden)]
    pub fn settings(&self, name: &str) -> Result<Vec<String>, PgError> {
        let mut values = Vec::new();
        for slot in &self.clients {
            let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(conn) = guard.as_mut() {
                let row = conn
                    .client
                    .query_one("SELECT current_setting($1)", &[&name])?;
                values.push(row.get(0));
            }
        }
        Ok(values)
    }

    /// Jobs this node may claim ahead of its reservers ([`PgOptions::claim_ahead`]).
    pub fn claim_ahead(&self) -> usize {
        self.options.claim_ahead
    }

    /// This node's id (unique among the schema's nodes, never reused).
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The job ids this node's engine may give out (disjoint from every other node's).
    pub fn ids(&self) -> Range<u64> {
        self.ids.clone()
    }

    /// Whether this node's claims commit without waiting for their WAL flush
    /// ([`PgOptions::async_claims`]).
    pub fn async_claims(&self) -> bool {
        self.options.async_claims
    }

    /// A holder number for client `client` of this node: the node id in the high 32 bits,
    /// the client's low 31 bits below (unique across nodes; within a node, unique among
    /// clients alive at once unless 2^31 clients connect during one lease).
    pub fn holder(&self, client: u64) -> i64 {
        (self.id << 32) | i64::try_from(client & 0x7fff_ffff).unwrap_or(0)
    }

    /// The holder number of this node's stock: jobs it claimed ahead of its reservers
    /// ([`PgOptions::claim_ahead`]) and keeps holding under this number when it hands them
    /// out (the node knows which of its clients has each). A claim by one of this node's
    /// clients takes a job of it over; no other node's claim does until its lease
    /// ([`STOCK_HOLD_MS`] past the TTR from the stock's claim, or a TTR from a `touch`)
    /// lapses.
    pub fn stock_holder(&self) -> i64 {
        (self.id << 32) | STOCK_BIT
    }

    /// Returns those of `ids` this node's stock still holds to ready, and announces them:
    /// jobs not handed out in time, or (`reserve_ended`, counted in their history) jobs a
    /// client that hung up was given. Returns the ids it returned.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn unstock(&self, ids: &[JobId], reserve_ended: bool) -> Result<Vec<JobId>, PgError> {
        let ids: Vec<i64> = ids.iter().map(|id| big(*id)).collect();
        let holder = self.stock_holder();
        let rows = self.run(&self.sql.unstock, |c, st| {
            c.query(st, &[&ids, &holder, &reserve_ended])
        })?;
        Ok(ids_of(&rows))
    }

    /// A free connection if there is one, else the next in turn (waiting for it).
    fn connection(&self) -> Result<MutexGuard<'_, Option<Conn>>, postgres::Error> {
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let n = self.clients.len();
        let free = (0..n).find_map(|i| self.clients[(start + i) % n].try_lock().ok());
        let mut guard = match free {
            Some(guard) => guard,
            None => self.clients[start % n]
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        };
        if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
            *guard = Some(Conn::connect(&self.options.url)?);
        }
        Ok(guard)
    }

    /// Runs statement `sql` (prepared once per connection) on a node connection. Each is a
    /// transaction of its own, so one chosen as a deadlock victim changed nothing and is run
    /// again (up to 3 times).
    fn run<T>(
        &self,
        sql: &str,
        f: impl Fn(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, PgError> {
        let mut guard = self.connection()?;
        let conn = guard.as_mut().expect("connection() fills the slot");
        let mut r = conn.statement(sql).and_then(|st| f(&mut conn.client, &st));
        for _ in 0..2 {
            match &r {
                Err(e) if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED) => {
                    r = conn.statement(sql).and_then(|st| f(&mut conn.client, &st));
                }
                _ => break,
            }
        }
        if r.is_err() && conn.client.is_closed() {
            *guard = None;
        }
        Ok(r?)
    }

    /// Claims each `(job, holder)` whose job is ready by the database clock (ready; delayed
    /// and due; or reserved under a lapsed lease) and whose tube is not paused, or which the
    /// stock of the holder's own node holds ([`Node::stock_holder`]: taken over), in one
    /// statement. A claim for the stock holder leases the job for its TTR plus
    /// [`STOCK_HOLD_MS`]. Returns the claims that won and, for the others, why they lost; a job asked
    /// for twice is claimed at most once.
    ///
    /// The claim is on disk when this returns, unless [`PgOptions::async_claims`] is set:
    /// then it commits without waiting for the WAL flush (visible to every node at once,
    /// durable with the next synchronous commit or the WAL writer's next flush).
    ///
    /// # Errors
    ///
    /// Database errors. After a broken connection the outcome is unknown: a claim that did
    /// commit is released by its lease's expiry.
    pub fn claim(&self, wanted: &[(JobId, i64)]) -> Result<Claims, PgError> {
        // Rows are locked in id order, whatever order the caller asks in: two nodes claiming
        // overlapping ids in different orders would otherwise wait on each other's row locks
        // until PostgreSQL aborts one claim as a deadlock. Stable: an id's askers keep their
        // order.
        let mut wanted = wanted.to_vec();
        wanted.sort_by_key(|(id, _)| *id);
        let ids: Vec<i64> = wanted.iter().map(|(id, _)| big(*id)).collect();
        let holders: Vec<i64> = wanted.iter().map(|(_, h)| *h).collect();
        let rows = self.run(&self.sql.claim, |c, st| c.query(st, &[&ids, &holders]))?;
        let mut claims = Claims::default();
        let mut seen = std::collections::HashSet::new();
        for r in &rows {
            let id = unsigned(r.get(0));
            let asked: i64 = r.get(1);
            let now = unsigned(r.get(2));
            claims.at_ms = now;
            let winner: Option<i64> = r.get(3);
            if winner == Some(asked) && seen.insert(id) {
                claims.won.push(Claimed {
                    id,
                    holder: asked,
                    at_ms: now,
                    lease_until_ms: r.get::<_, Option<i64>>(4).map_or(0, unsigned),
                });
                continue;
            }
            let state: Option<i16> = r.get(5);
            let until = r.get::<_, Option<i64>>(6).map_or(0, unsigned);
            let lease = r.get::<_, Option<i64>>(7).map_or(0, unsigned);
            let paused = r.get::<_, Option<i64>>(8).map_or(0, unsigned);
            let why = match state {
                None => Lost::Gone,
                Some(_) if winner.is_some() => Lost::Taken,
                Some(3) if lease > now => Lost::Held {
                    lease_until_ms: lease,
                },
                Some(2) => Lost::Buried,
                Some(1) if until > now => Lost::NotDue { until_ms: until },
                Some(_) if paused > now => Lost::Paused { until_ms: paused },
                // Ready in the snapshot, but another claim or change committed first.
                Some(_) => Lost::Taken,
            };
            claims.lost.push((id, why));
        }
        Ok(claims)
    }

    /// `reserve-job`: claims job `id` for `holder` whatever its state (ready, delayed or
    /// buried), unless someone other than its own node's stock holds it under a live lease. Returns the lease's end
    /// (database clock), or `None` if there is no such job or it is held.
    ///
    /// # Errors
    ///
    /// Database errors. After a broken connection the outcome is unknown: a claim that did
    /// commit is released by its lease's expiry.
    pub fn claim_job(&self, holder: i64, id: JobId) -> Result<Option<u64>, PgError> {
        let row = self.run(&self.sql.claim_job, |c, st| {
            c.query_opt(st, &[&big(id), &holder])
        })?;
        Ok(row.map(|r| unsigned(r.get(0))))
    }

    /// Deletes `id` unless someone other than `holder` holds it under a live lease. False:
    /// no such job, or another holder has it (`NOT_FOUND`). The delete of a job `holder` did
    /// not hold is announced on the schema's delete channel, so other nodes drop it from
    /// their caches.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn delete(&self, holder: i64, id: JobId) -> Result<bool, PgError> {
        let rows = self.run(&self.sql.delete, |c, st| c.query(st, &[&big(id), &holder]))?;
        Ok(!rows.is_empty())
    }

    /// [`Node::delete`] for many `(job, holder)` pairs in one statement (one round trip):
    /// whether each was deleted, in order. A job asked for twice is deleted for one of them
    /// (one allowed to: never for another holder than the one holding it).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn delete_many(&self, wanted: &[(JobId, i64)]) -> Result<Vec<bool>, PgError> {
        // In id order, as `claim` locks them (see there); the answer is matched back by pair.
        let mut sorted = wanted.to_vec();
        sorted.sort_by_key(|(id, _)| *id);
        let ids: Vec<i64> = sorted.iter().map(|(id, _)| big(*id)).collect();
        let holders: Vec<i64> = sorted.iter().map(|(_, h)| *h).collect();
        let rows = self.run(&self.sql.delete_many, |c, st| {
            c.query(st, &[&ids, &holders])
        })?;
        let mut deleted: std::collections::HashSet<(JobId, i64)> = rows
            .iter()
            .map(|r| (unsigned(r.get(0)), r.get::<_, i64>(1)))
            .collect();
        Ok(wanted
            .iter()
            .map(|(id, holder)| deleted.remove(&(*id, *holder)))
            .collect())
    }

    /// Releases a job `holder` holds: ready (announced) or, with `delay_ms > 0`, delayed
    /// until `now_ms() + delay_ms` by the database clock. False if `holder` does not hold it.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn release(
        &self,
        holder: i64,
        id: JobId,
        priority: u32,
        delay_ms: u64,
    ) -> Result<bool, PgError> {
        let rows = self.run(&self.sql.release, |c, st| {
            c.query(
                st,
                &[&big(id), &holder, &i64::from(priority), &big(delay_ms)],
            )
        })?;
        Ok(!ids_of(&rows).is_empty())
    }

    /// Returns every job the `holders` hold to ready and announces them (a client hung up:
    /// beanstalkd makes its reserved jobs ready at once). Returns their ids.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn release_all(&self, holders: &[i64]) -> Result<Vec<JobId>, PgError> {
        let rows = self.run(&self.sql.release_all, |c, st| c.query(st, &[&holders]))?;
        Ok(ids_of(&rows))
    }

    /// Buries a job `holder` holds. False if it does not hold it.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn bury(&self, holder: i64, id: JobId, priority: u32) -> Result<bool, PgError> {
        let rows = self.run(&self.sql.bury, |c, st| {
            c.query(st, &[&big(id), &holder, &i64::from(priority)])
        })?;
        Ok(!rows.is_empty())
    }

    /// Renews the lease of a job `holder` holds to `now_ms() + ttr`; returns the new end, or
    /// `None` if it does not hold it.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn touch(&self, holder: i64, id: JobId) -> Result<Option<u64>, PgError> {
        let row = self.run(&self.sql.touch, |c, st| {
            c.query_opt(st, &[&big(id), &holder])
        })?;
        Ok(row.map(|r| unsigned(r.get(0))))
    }

    /// Kicks up to `bound` buried jobs of `tube` (lowest ids first), cluster-wide; returns
    /// their ids (announced as ready).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn kick(&self, tube: &str, bound: u64) -> Result<Vec<JobId>, PgError> {
        let rows = self.run(&self.sql.kick, |c, st| c.query(st, &[&tube, &big(bound)]))?;
        Ok(ids_of(&rows))
    }

    /// Kicks up to `bound` delayed jobs of `tube` that are not due yet (earliest due first),
    /// cluster-wide: what beanstalkd's `kick` does when the tube has no buried job. Returns
    /// their ids (announced as ready).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn kick_delayed(&self, tube: &str, bound: u64) -> Result<Vec<JobId>, PgError> {
        let rows = self.run(&self.sql.kick_delayed, |c, st| {
            c.query(st, &[&tube, &big(bound)])
        })?;
        Ok(ids_of(&rows))
    }

    /// `kick-job`: job `id`, if buried or delayed (not due yet), becomes ready, cluster-wide
    /// (announced). False if there is no such job or it is ready or reserved.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn kick_job(&self, id: JobId) -> Result<bool, PgError> {
        let rows = self.run(&self.sql.kick_job, |c, st| c.query(st, &[&big(id)]))?;
        Ok(!ids_of(&rows).is_empty())
    }

    /// The job `peek-ready`, `peek-delayed` or `peek-buried` shows for `tube`, cluster-wide:
    /// the next ready one by priority and id (by the database clock: delayed and due, or
    /// reserved under a lapsed lease, count as ready), the delayed one due first, or the
    /// buried one with the lowest id. A tube with no index for its ready jobs is read
    /// sequentially, as [`Node::tube_counts`] reads it.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn peek(&self, which: Peek, tube: &str) -> Result<Option<(JobId, Vec<u8>)>, PgError> {
        let sql = match which {
            Peek::Ready => &self.sql.peek_ready,
            Peek::Delayed => &self.sql.peek_delayed,
            Peek::Buried => &self.sql.peek_buried,
        };
        let row = self.run(sql, |c, st| c.query_opt(st, &[&tube]))?;
        Ok(row.map(|r| (unsigned(r.get(0)), r.get::<_, Vec<u8>>(1))))
    }

    /// Returns up to `limit` jobs whose lease lapsed (any node's: a dead node's reservations
    /// come back here) to ready, and announces them. Returns their ids.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn expire(&self, limit: u64) -> Result<Vec<JobId>, PgError> {
        let rows = self.run(&self.sql.expire, |c, st| c.query(st, &[&big(limit)]))?;
        Ok(ids_of(&rows))
    }

    /// Cluster-wide counts of `tube`'s jobs by the database clock (one scan of the tube's
    /// rows: `stats-tube` on a busy tube costs a sequential read).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn tube_counts(&self, tube: &str) -> Result<TubeCounts, PgError> {
        let r = self.run(&self.sql.counts, |c, st| c.query_one(st, &[&tube]))?;
        Ok(counts_of(&r))
    }

    /// The job counts of every tube together (`stats`), as [`Node::tube_counts`] counts one
    /// tube's (`paused_until_ms` 0). One scan of the job table.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn counts(&self) -> Result<TubeCounts, PgError> {
        let r = self.run(&self.sql.counts_all, |c, st| c.query_one(st, &[]))?;
        Ok(counts_of(&r))
    }

    /// Pauses `tube` on every node for `ms` (0 ends a pause), by the database clock.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn pause(&self, tube: &str, ms: u64) -> Result<(), PgError> {
        self.run(&self.sql.pause, |c, st| c.execute(st, &[&tube, &big(ms)]))?;
        Ok(())
    }

    /// The database clock, Unix ms (rounded down).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn db_now_ms(&self) -> Result<u64, PgError> {
        let r = self.run(&self.sql.now, |c, st| c.query_one(st, &[]))?;
        Ok(unsigned(r.get(0)))
    }

    /// The other nodes whose last heartbeat is more than `stale_ms` old (database clock):
    /// dead, or cut off from the database. Their ids and id blocks.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn stale_nodes(&self, stale_ms: u64) -> Result<Vec<(i64, Range<u64>)>, PgError> {
        let rows = self.run(&self.sql.stale, |c, st| {
            c.query(st, &[&self.id, &big(stale_ms)])
        })?;
        Ok(rows
            .iter()
            .map(|r| {
                let (from, to): (i64, i64) = (r.get(1), r.get(2));
                (r.get(0), unsigned(from)..unsigned(to))
            })
            .collect())
    }

    /// Records that the node is alive.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn heartbeat(&self) -> Result<(), PgError> {
        self.run(&self.sql.heartbeat, |c, st| c.execute(st, &[&self.id]))?;
        Ok(())
    }

    /// Leaves the schema's nodes (a clean shutdown; a killed node's row stays, harmless: its
    /// leases lapse like any other).
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn leave(self) -> Result<(), PgError> {
        self.run(&self.sql.leave, |c, st| c.execute(st, &[&self.id]))?;
        Ok(())
    }
}
