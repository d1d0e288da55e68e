//! Two nodes serving one PostgreSQL schema at once (`--postgres-mode active-active`, ADR 0008
//! phase 2), in one process, on a real throw-away cluster: a job put on one node is reserved
//! through the other; only the holder acts on it; leases end by the database clock; a waiting
//! reserver on one node is woken by a put on the other; a closed connection's jobs return at
//! once; racing reservers on both nodes never share a job.
//! Under `CI=true` a missing PostgreSQL fails these tests; elsewhere they are skipped.

#![allow(clippy::unwrap_used)]

mod util;

use std::collections::HashMap;

use tickwheel_server::{Config, PgOptions};
use tickwheel_testkit::pg::{cluster_for_test, Cluster};
use util::Running;

fn config(cluster: &Cluster) -> Config {
    let mut options = PgOptions::new(cluster.url());
    options.active_active = true;
    Config {
        postgres: Some(options),
        max_job_size: 1024,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_serve_one_schema() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let (one, two, mut c1, mut c2) = two_nodes(&cluster).await;

    // Put on node 1, reserved through node 2 (announced, adopted, claimed).
    let a = c1.put(10, 0, 60, "a").await;
    assert_eq!(c2.reserve(10).await, (a, "a".to_owned()));
    // Node 1 does not hold it: NOT_FOUND for everything, and it is not handed out twice.
    for cmd in [
        format!("delete {a}"),
        format!("release {a} 0 0"),
        format!("bury {a} 0"),
        format!("touch {a}"),
    ] {
        assert_eq!(c1.cmd(&cmd).await, "NOT_FOUND", "{cmd}");
    }
    assert_eq!(c1.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    // stats-tube counts the cluster's jobs: node 1 sees node 2's reservation.
    assert_eq!(
        c1.field("stats-tube default", "current-jobs-reserved")
            .await,
        "1"
    );
    assert_eq!(
        c1.field("stats-tube default", "current-jobs-ready").await,
        "0"
    );
    assert_eq!(
        c1.field("stats-tube default", "current-jobs-urgent").await,
        "0"
    );
    // So does `stats` (its job counts; its connection and command counts are the node's).
    assert_eq!(c1.field("stats", "current-jobs-reserved").await, "1");
    assert_eq!(c1.field("stats", "current-jobs-ready").await, "0");
    let b = c2.put(0, 0, 60, "b").await;
    assert_eq!(c1.field("stats", "current-jobs-urgent").await, "1");
    assert_eq!(c1.field("stats", "current-jobs-ready").await, "1");
    assert_eq!(c2.cmd(&format!("delete {b}")).await, "DELETED");
    assert_eq!(c1.field("stats", "current-jobs-ready").await, "0");
    // `stats-job` and `peek` through node 1 of the job node 2's client holds: reserved, as the
    // database has it (node 1's cache has it ready); and a job node 1 never cached.
    assert_eq!(c1.job_field(a, "state").await, "reserved");
    assert_ne!(c1.job_field(a, "time-left").await, "0");
    let c = c2.put(0, 0, 60, "c").await;
    assert_eq!(c2.reserve(10).await, (c, "c".to_owned()));
    assert_eq!(
        c1.job_cmd(&format!("peek {c}")).await,
        (format!("FOUND {c} 1"), Some(b"c".to_vec()))
    );
    assert_eq!(c1.job_field(c, "state").await, "reserved");
    assert_eq!(c1.job_field(c, "tube").await, "default");
    assert_eq!(c2.cmd(&format!("delete {c}")).await, "DELETED");
    assert_eq!(c1.cmd(&format!("peek {c}")).await, "NOT_FOUND");
    assert_eq!(c2.cmd(&format!("touch {a}")).await, "TOUCHED");
    assert_eq!(c2.cmd(&format!("release {a} 3 0")).await, "RELEASED");
    assert_eq!(c1.reserve(10).await, (a, "a".to_owned()));
    assert_eq!(c2.cmd(&format!("delete {a}")).await, "NOT_FOUND");
    assert_eq!(c1.cmd(&format!("delete {a}")).await, "DELETED");
    assert_eq!(c1.cmd(&format!("delete {a}")).await, "NOT_FOUND");

    // A reserver waiting on node 2 is woken by a put on node 1.
    assert_eq!(c2.cmd("watch w").await, "WATCHING 2");
    assert_eq!(c2.cmd("ignore default").await, "WATCHING 1");
    c2.send_line("reserve-with-timeout 30").await;
    let mut s2 = two.client().await;
    s2.until_waiting(1).await;
    assert_eq!(c1.cmd("use w").await, "USING w");
    let b = c1.put(0, 0, 60, "b").await;
    assert_eq!(c2.reserved().await, b);
    assert_eq!(c2.cmd(&format!("delete {b}")).await, "DELETED");

    // The lease ends by the database clock (TTR 1 s): node 1 gets the job node 2 sat on,
    // and node 2's holder can no longer act on it.
    let c = c1.put(0, 0, 1, "c").await;
    assert_eq!(c2.reserve(10).await, (c, "c".to_owned()));
    let mut c3 = one.client().await;
    assert_eq!(c3.cmd("watch w").await, "WATCHING 2");
    assert_eq!(c3.reserve(10).await, (c, "c".to_owned()));
    assert_eq!(c2.cmd(&format!("release {c} 0 0")).await, "NOT_FOUND");
    assert_eq!(c2.cmd(&format!("touch {c}")).await, "NOT_FOUND");

    // A closed connection's job is ready at once on every node.
    drop(c3);
    assert_eq!(c2.reserve(10).await, (c, "c".to_owned()));
    assert_eq!(c2.cmd(&format!("delete {c}")).await, "DELETED");

    // Ids of the two nodes never collide.
    let x = c1.put(0, 0, 60, "x").await;
    let y = c2.put(0, 0, 60, "y").await;
    assert_ne!(x, y);

    drop((c1, c2, s2));
    one.shutdown().await;
    two.shutdown().await;
}

/// Claim on demand: a job put through node 1 while no one waits anywhere is handed to a
/// client that starts waiting on node 2 afterwards (its reserve wakes node 2's claimer; the
/// time this takes is measured by `crates/bench/scripts/pg_cross_node.py`, not here). A
/// delete of it through node 1 is refused by the database; its holder's delete is committed
/// when acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_on_one_node_claims_a_job_put_through_another_and_its_delete_commits() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let (one, two, mut c1, mut c2) = two_nodes(&cluster).await;
    let url = cluster.url();
    let rows = move |id: u64| {
        let url = url.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                let n: i64 = admin
                    .query_one(
                        "SELECT count(*) FROM tickwheel.jobs WHERE id = $1",
                        &[&i64::try_from(id).unwrap()],
                    )
                    .unwrap()
                    .get(0);
                n
            })
            .await
            .unwrap()
        }
    };
    for round in 0..3 {
        let body = format!("job {round}");
        let id = c1.put(0, 0, 60, &body).await;
        // Some rounds let node 2 hear of the job (and leave it to node 1) first.
        tokio::time::sleep(std::time::Duration::from_millis(100 * round)).await;
        assert_eq!(c2.reserve(30).await, (id, body), "round {round}");
        assert_eq!(c1.cmd(&format!("delete {id}")).await, "NOT_FOUND");
        assert_eq!(
            rows(id).await,
            1,
            "the job is there until its holder deletes it"
        );
        let written = c2.field("stats", "binlog-records-written").await;
        assert_eq!(c2.cmd(&format!("delete {id}")).await, "DELETED");
        assert_eq!(rows(id).await, 0, "DELETED is sent after the commit");
        // Written by the node's own statement, not its store, and counted all the same.
        let written_after = c2.field("stats", "binlog-records-written").await;
        assert_eq!(
            written_after.parse::<u64>().unwrap(),
            written.parse::<u64>().unwrap() + 1,
            "a holder-checked delete counts as a record written"
        );
        assert_eq!(c2.cmd(&format!("delete {id}")).await, "NOT_FOUND");
    }
    drop((c1, c2));
    one.shutdown().await;
    two.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_reservers_on_two_nodes_never_share_a_job() {
    racing_reservers(false, 0).await;
}

/// The same with claims that do not wait for their WAL flush (`--postgres-claim-commit
/// async`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_reservers_with_async_claims_never_share_a_job() {
    racing_reservers(true, 0).await;
}

/// The same with nodes that claim jobs ahead of their reservers (`--postgres-claim-ahead`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_reservers_claiming_ahead_never_share_a_job() {
    racing_reservers(false, 8).await;
}

async fn racing_reservers(async_claims: bool, claim_ahead: usize) {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let mut config = config(&cluster);
    if let Some(options) = config.postgres.as_mut() {
        options.async_claims = async_claims;
        options.claim_ahead = claim_ahead;
    }
    let one = Running::open(&config).await;
    let two = Running::open(&config).await;
    let mut producer = one.client().await;
    const JOBS: usize = 120;
    let mut put = Vec::new();
    for i in 0..JOBS {
        put.push(producer.put(0, 0, 60, &format!("job {i}")).await);
    }
    let mut workers = Vec::new();
    for n in 0..4 {
        let mut c = if n % 2 == 0 {
            one.client().await
        } else {
            two.client().await
        };
        workers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let (line, _) = c.job_cmd("reserve-with-timeout 1").await;
                let Some(rest) = line.strip_prefix("RESERVED ") else {
                    assert_eq!(line, "TIMED_OUT");
                    break;
                };
                let id: u64 = rest.split(' ').next().unwrap().parse().unwrap();
                // Held: the job is not deleted until every worker has stopped, so a second
                // holder (a double hand-out) would show as a duplicate below.
                got.push(id);
            }
            // The connection stays open until every worker is done: a closed connection's
            // jobs are ready again at once (beanstalkd), and would be handed out again.
            (n, got, c)
        }));
    }
    let mut holders: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut open = Vec::new();
    for w in workers {
        let (n, got, c) = w.await.unwrap();
        open.push(c);
        for id in got {
            holders.entry(id).or_default().push(n);
        }
    }
    let mut ids: Vec<u64> = holders.keys().copied().collect();
    ids.sort_unstable();
    put.sort_unstable();
    assert_eq!(ids, put, "every job handed out");
    for (id, h) in &holders {
        assert_eq!(h.len(), 1, "job {id} went to workers {h:?}");
    }
    let handouts = one.handle.stock_handouts().unwrap() + two.handle.stock_handouts().unwrap();
    assert_eq!(
        handouts > 0,
        claim_ahead > 0,
        "{handouts} jobs handed out from a stock"
    );
    drop((producer, open));
    one.shutdown().await;
    two.shutdown().await;
}

/// A node whose `LISTEN` connection is killed (`pg_terminate_backend`) while another node
/// puts jobs never hears those announcements; once it listens again it reads what it missed
/// from the table, and serves the job. Connections to the database are refused while the put
/// happens, so the node cannot be listening again before it (the put would then simply be
/// announced): only the re-read can bring the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_listen_connection_dropped_reads_what_it_missed() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    // The nodes use a database of their own, which the admin connection (on `postgres`) can
    // close to new connections.
    let mut cfg = config(&cluster);
    if let Some(pg) = cfg.postgres.as_mut() {
        pg.url = cluster.create_db("nodes").unwrap();
    }
    let one = Running::open(&cfg).await;
    let two = Running::open(&cfg).await;
    let mut c1 = one.client().await;
    let mut c2 = two.client().await;
    // Every connection either node needs below is open already: a put, a reserve and a
    // delete through each.
    for c in [&mut c1, &mut c2] {
        let id = c.put(0, 0, 60, "warm").await;
        assert_eq!(c.reserve(10).await, (id, "warm".to_owned()));
        assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED");
    }
    let url = cluster.url();
    let mut admin = tokio::task::spawn_blocking(move || {
        postgres::Client::connect(&url, postgres::NoTls).unwrap()
    })
    .await
    .unwrap();
    // Node 2 is the second to join a fresh schema: node id 2.
    admin = tokio::task::spawn_blocking(move || {
        admin
            .batch_execute("ALTER DATABASE nodes ALLOW_CONNECTIONS false")
            .unwrap();
        let killed: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name = 'tickwheel-listen-2' AND datname = 'nodes'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(killed, 1, "node 2's LISTEN connection");
        admin
    })
    .await
    .unwrap();
    // Put on node 1 while node 2 cannot listen: the announcement goes nowhere on node 2.
    let id = c1.put(0, 0, 60, "missed").await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // (Node 2's cache, not `stats`, which counts the cluster's jobs; `peek <id>` would read
    // the job's row and adopt it.)
    assert_eq!(
        two.handle.cached_ready_jobs(),
        0,
        "node 2 cannot have heard of the put"
    );
    tokio::task::spawn_blocking(move || {
        admin
            .batch_execute("ALTER DATABASE nodes ALLOW_CONNECTIONS true")
            .unwrap();
    })
    .await
    .unwrap();
    // Node 2 listens again, re-reads the table, and serves the job to its client.
    assert_eq!(c2.reserve(20).await, (id, "missed".to_owned()));
    assert_eq!(c2.cmd(&format!("delete {id}")).await, "DELETED");
    drop((c1, c2));
    one.shutdown().await;
    two.shutdown().await;
}

/// The system clock shifted by a fixed amount: a node whose clock is off from the database's.
#[derive(Debug)]
struct Skewed {
    ahead: bool,
    by: std::time::Duration,
}

impl tickwheel_server::Clock for Skewed {
    fn now(&self) -> std::time::Instant {
        tickwheel_server::SystemClock.now()
    }

    fn park_until(&self, deadline: Option<std::time::Instant>) {
        tickwheel_server::SystemClock.park_until(deadline);
    }

    fn system_time(&self) -> std::time::SystemTime {
        if self.ahead {
            std::time::SystemTime::now() + self.by
        } else {
            std::time::SystemTime::now() - self.by
        }
    }
}

fn skewed(cluster: &Cluster, ahead: bool) -> Config {
    Config {
        clock: std::sync::Arc::new(Skewed {
            ahead,
            by: std::time::Duration::from_secs(600),
        }),
        ..config(cluster)
    }
}

/// A node whose clock is ten minutes behind the database's wakes for a delayed job due by the
/// database's clock when the database holds it due, not ten minutes later: due times read
/// from the database go onto the node's clock by the offset it learnt (ADR 0008 session 10).
/// Before, the engine scheduled the database's due time on its own clock (the reserve below
/// timed out). The job is put through another node that serves no reserver (so this node
/// adopts it after the affinity time), and by SQL (adopted at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_is_behind_serves_delayed_jobs_when_the_database_holds_them_due() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let behind = Running::open(&skewed(&cluster, false)).await;
    let other = Running::open(&config(&cluster)).await;
    let mut c = behind.client().await;
    let mut p = other.client().await;
    let a = p.put(0, 1, 60, "a").await;
    assert_eq!(c.reserve(30).await, (a, "a".to_owned()));
    assert_eq!(c.cmd(&format!("delete {a}")).await, "DELETED");
    let url = cluster.url();
    let b: i64 = tokio::task::spawn_blocking(move || {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        db.query_one(
            "SELECT tickwheel.put('default', 'b', interval '1 second')",
            &[],
        )
        .unwrap()
        .get(0)
    })
    .await
    .unwrap();
    assert_eq!(c.reserve(30).await, (b as u64, "b".to_owned()));
    assert_eq!(behind.handle.claims_lost_not_due(), Some(0));
    drop((c, p));
    behind.shutdown().await;
    other.shutdown().await;
}

/// A node whose clock is ten minutes ahead of the database's does not claim a delayed job
/// before the database holds it due: none of its claims is refused as "not due yet". Before,
/// a job put by SQL (its due time on the database's clock) was ready at once on this node's
/// clock, and its first claim lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_is_ahead_loses_no_claim_as_not_due() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let ahead = Running::open(&skewed(&cluster, true)).await;
    let mut c = ahead.client().await;
    // Its own puts (their due times moved by the commit) and SQL puts.
    let mut want = Vec::new();
    for i in 0..3 {
        want.push(c.put(0, 1, 60, &format!("own{i}")).await);
    }
    let url = cluster.url();
    let sql: Vec<i64> = tokio::task::spawn_blocking(move || {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        (0..3)
            .map(|i| {
                db.query_one(
                    "SELECT tickwheel.put('default', $1::text::bytea, interval '1 second')",
                    &[&format!("sql{i}")],
                )
                .unwrap()
                .get(0)
            })
            .collect()
    })
    .await
    .unwrap();
    want.extend(sql.iter().map(|id| *id as u64));
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let (id, _) = c.reserve(30).await;
        assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED");
        got.push(id);
    }
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(ahead.handle.claims_lost_not_due(), Some(0));
    drop(c);
    ahead.shutdown().await;
}

/// Two nodes, an owner and a helper, with a client each (`p` on the owner, `c` on the
/// helper), returned once the helper is listening and has done its first read of the table
/// after `LISTEN` (which reads every free job it lacks, delayed ones too: those announced
/// before it listened): it serves a job put through the owner, and its listener thread does
/// that read before it looks at any announcement. Without this, a loaded machine could bring
/// the helper's `LISTEN` up after a test's next put, and that first read would read the job
/// early.
/// Two nodes on `cluster`'s schema and a client of each.
async fn two_nodes(cluster: &Cluster) -> (Running, Running, util::Client, util::Client) {
    let one = Running::open(&config(cluster)).await;
    let two = Running::open(&config(cluster)).await;
    let c1 = one.client().await;
    let c2 = two.client().await;
    (one, two, c1, c2)
}

async fn two_nodes_listening(cluster: &Cluster) -> (Running, Running, util::Client, util::Client) {
    let (owner, helper, mut p, mut c) = two_nodes(cluster).await;
    let warm = p.put(0, 0, 60, "warm").await;
    assert_eq!(c.reserve(10).await, (warm, "warm".to_owned()));
    assert_eq!(c.cmd(&format!("delete {warm}")).await, "DELETED");
    (owner, helper, p, c)
}

/// A node that leaves another node's delayed job to its owner reads it once, when it is due:
/// the announcement carries the due time (ADR 0008 session 11). Before, the node read the row
/// when it was announced (to learn the due time) and again when it was due. The owner serves
/// no reserver, so the other node's waiting reserve takes the job after the affinity time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_nodes_delayed_job_is_read_once_when_due_not_when_announced() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let (owner, helper, mut p, mut c) = two_nodes_listening(&cluster).await;
    let waiting = tokio::spawn(async move {
        let got = c.reserve(30).await;
        (c, got)
    });
    // The reserve waits on the helper (its claimer reads deferred jobs at their time then).
    helper.client().await.until_waiting(1).await;
    let read_before = helper.handle.rows_read_to_adopt().expect("active-active");
    let a = p.put(0, 3, 60, "a").await;
    // Announced (the helper hears within milliseconds) but not due for 3 s.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        helper.handle.rows_read_to_adopt(),
        Some(read_before),
        "the helper read the delayed job before it was due"
    );
    let (c, got) = waiting.await.expect("reserve");
    assert_eq!(got, (a, "a".to_owned()));
    assert_eq!(
        helper.handle.rows_read_to_adopt(),
        Some(read_before + 1),
        "read once, when due"
    );
    drop((c, p));
    helper.shutdown().await;
    owner.shutdown().await;
}

/// A hung-up client's jobs are released in the database only if it ever sent a claim: a
/// producer's connection closes without a statement (before, every hang-up ran one that walks
/// all live leases: ADR 0008, session 14), a reserver's still releases its job at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_client_that_claimed_costs_a_release_when_it_hangs_up() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let node = Running::open(&config(&cluster)).await;
    let before = node.handle.releases_on_hang_up().expect("active-active");
    let mut producer = node.client().await;
    let a = producer.put(0, 0, 60, "a").await;
    drop(producer);
    let mut worker = node.client().await;
    assert_eq!(worker.reserve(10).await, (a, "a".to_owned()));
    drop(worker);
    // The worker's job is ready again at once (its release ran), for another client.
    let mut other = node.client().await;
    assert_eq!(other.reserve(10).await, (a, "a".to_owned()));
    // Both hang-ups have been handled by now (the producer's came first, the worker's
    // released the job): one release, the worker's.
    assert_eq!(node.handle.releases_on_hang_up(), Some(before + 1));
    assert_eq!(other.cmd(&format!("delete {a}")).await, "DELETED");
    drop(other);
    node.shutdown().await;
}

/// A node whose engine has ready jobs of its own (its reservers have work) does not read
/// another node's ready job in its lazy pass once a second, only when one of its reservers
/// waits or `LAZY_BUSY` later: adopted earlier, such jobs queued behind the node's own and
/// their claims came late and mostly lost to their owners' (ADR 0008, session 15: ~0.6 lost
/// claims per due job at 10 000 due/s). The job is not left unseen: the busy pass reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_node_leaves_another_nodes_ready_job_to_its_owner() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let (owner, helper, mut p, mut c) = two_nodes_listening(&cluster).await;
    // Work of the helper's own, ready, that no reserver has taken yet.
    let own = c.put(0, 0, 60, "own").await;
    let read_before = helper.handle.rows_read_to_adopt().expect("active-active");
    let a = p.put(0, 0, 60, "a").await;
    // Announced within milliseconds; the lazy pass runs at least once a second.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        helper.handle.rows_read_to_adopt(),
        Some(read_before),
        "a busy node read another node's ready job in its lazy pass"
    );
    // Not left unseen: the busy pass reads it (LAZY_BUSY after its affinity time).
    let waited = std::time::Instant::now();
    while helper.handle.rows_read_to_adopt() == Some(read_before) {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "the busy pass never read the deferred job"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(helper.handle.rows_read_to_adopt(), Some(read_before + 1));
    let mut got = vec![c.reserve(10).await, c.reserve(10).await];
    got.sort();
    let mut want = vec![(own, "own".to_owned()), (a, "a".to_owned())];
    want.sort();
    assert_eq!(got, want);
    for id in [own, a] {
        assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED");
    }
    drop((c, p));
    helper.shutdown().await;
    owner.shutdown().await;
}

/// A release or bury on a node writes the job's row once, by the node's holder-checked
/// statement, and a reserve-job once, by its claim: the engine that follows sends nothing
/// through the group commit. Written
/// again there, it could land after another node had taken the job and released it with a
/// delay, or buried it, and make it ready again. A trigger logs every update of a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_bury_or_reserve_job_on_a_node_writes_its_row_once() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let node = Running::open(&config(&cluster)).await;
    let url = cluster.url();
    let sql = move |sql: &'static str| {
        let url = url.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                admin
                    .simple_query(sql)
                    .unwrap()
                    .into_iter()
                    .filter_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(r) => {
                            Some(r.get(0).unwrap_or("").to_owned())
                        }
                        _ => None,
                    })
                    .collect::<Vec<String>>()
            })
            .await
            .unwrap()
        }
    };
    sql(
        "CREATE TABLE public.writes (n serial, id bigint, state smallint, holder bigint);
         CREATE FUNCTION public.log_write() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO public.writes (id, state, holder) VALUES (NEW.id, NEW.state, NEW.holder);
               RETURN NEW; END $$;
         CREATE TRIGGER log_write AFTER UPDATE ON tickwheel.jobs
             FOR EACH ROW EXECUTE FUNCTION public.log_write();",
    )
    .await;
    let mut c = node.client().await;
    let a = c.put(0, 0, 60, "a").await;
    let b = c.put(0, 0, 60, "b").await;
    assert_eq!(c.reserve(10).await, (a, "a".to_owned()));
    assert_eq!(c.cmd(&format!("release {a} 5 0")).await, "RELEASED");
    assert_eq!(c.reserve(10).await, (b, "b".to_owned()));
    assert_eq!(c.cmd(&format!("bury {b} 7")).await, "BURIED");
    // A reserve-job of a delayed job is its claim alone (it used to write the job ready
    // through the group commit first).
    let d = c.put(0, 300, 60, "d").await;
    assert_eq!(
        c.job_cmd(&format!("reserve-job {d}")).await,
        (format!("RESERVED {d} 1"), Some(b"d".to_vec()))
    );
    // INSERTED comes after a group commit that covers every change submitted before it.
    let _ = c.put(0, 0, 60, "after").await;
    let writes = sql(
        "SELECT id || ':' || state || ':' || coalesce(holder::text, '-')
                      FROM public.writes ORDER BY n",
    )
    .await;
    let of = |id: u64| -> Vec<String> {
        writes
            .iter()
            .filter(|w| w.starts_with(&format!("{id}:")))
            .map(|w| w.split(':').nth(1).unwrap().to_owned())
            .collect()
    };
    // Claimed (3), then released (0) or buried (2): once each, nothing after.
    assert_eq!(of(a), ["3", "0"], "job {a}'s updates: {writes:?}");
    assert_eq!(of(b), ["3", "2"], "job {b}'s updates: {writes:?}");
    assert_eq!(of(d), ["3"], "job {d}'s updates: {writes:?}");
    assert_eq!(
        c.field(&format!("stats-job {a}"), "state").await,
        "ready",
        "the node's cache followed the release"
    );
    assert_eq!(c.field(&format!("stats-job {b}"), "state").await, "buried");
    drop(c);
    node.shutdown().await;
}

/// `kick`, `kick-job` and `peek-ready`/`-delayed`/`-buried` are cluster-wide: a node answers
/// from the database, which sees every node's jobs, not from its engine, which holds only
/// those it has adopted (before, node 2 answered `peek-buried` with `NOT_FOUND` and `kick`
/// with `KICKED 0` for a job buried through node 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kick_and_peek_see_every_nodes_jobs() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let (one, two, mut c1, mut c2) = two_nodes(&cluster).await;
    for c in [&mut c1, &mut c2] {
        assert_eq!(c.cmd("use k").await, "USING k");
        assert_eq!(c.cmd("watch k").await, "WATCHING 2");
        assert_eq!(c.cmd("ignore default").await, "WATCHING 1");
    }
    let found = |id: u64, body: &str| {
        (
            format!("FOUND {id} {}", body.len()),
            Some(body.as_bytes().to_vec()),
        )
    };
    let none = || ("NOT_FOUND".to_owned(), None);

    // Buried through node 1; node 2 sees it and kicks it.
    let a = c1.put(5, 0, 60, "a").await;
    let b = c1.put(9, 0, 60, "b").await;
    assert_eq!(c1.reserve(10).await, (a, "a".to_owned()));
    assert_eq!(c1.cmd(&format!("bury {a} 5")).await, "BURIED");
    assert_eq!(c2.job_cmd("peek-buried").await, found(a, "a"));
    assert_eq!(c2.job_cmd("peek-ready").await, found(b, "b"));
    assert_eq!(c2.job_cmd("peek-delayed").await, none());
    assert_eq!(c2.cmd("kick 10").await, "KICKED 1");
    assert_eq!(c2.job_cmd("peek-buried").await, none());
    assert_eq!(c1.job_cmd("peek-buried").await, none());
    // Kicked: ready again on every node, before `b` by priority.
    assert_eq!(c1.job_cmd("peek-ready").await, found(a, "a"));
    // Node 1, whose cache had `a` buried, reads it again on the kick's announcement and
    // serves it. (`b` goes first: ready in node 1's cache all along, it would be the answer
    // to a reserve there that came before the announcement.)
    assert_eq!(c2.cmd(&format!("delete {b}")).await, "DELETED");
    assert_eq!(c1.reserve(10).await, (a, "a".to_owned()));
    assert_eq!(c1.cmd(&format!("delete {a}")).await, "DELETED");
    assert_eq!(c1.job_cmd("peek-ready").await, none());

    // No buried job in the tube: `kick` takes delayed ones, earliest due first. Both are due
    // within node 1's memory window (600 s), so its cache holds them delayed; it reads a
    // kicked one again (the kick announces it ready now) and serves it.
    let d1 = c1.put(0, 500, 60, "d1").await;
    let d2 = c1.put(0, 300, 60, "d2").await;
    assert_eq!(c2.job_cmd("peek-delayed").await, found(d2, "d2"));
    assert_eq!(c2.cmd("kick 1").await, "KICKED 1");
    assert_eq!(c2.job_cmd("peek-delayed").await, found(d1, "d1"));
    assert_eq!(c1.reserve(10).await, (d2, "d2".to_owned()));
    assert_eq!(c1.cmd(&format!("delete {d2}")).await, "DELETED");

    // kick-job through the other node: a delayed job, then one buried through node 1.
    assert_eq!(c2.cmd(&format!("kick-job {d1}")).await, "KICKED");
    assert_eq!(
        c2.cmd(&format!("kick-job {d1}")).await,
        "NOT_FOUND",
        "ready now"
    );
    assert_eq!(c1.reserve(10).await, (d1, "d1".to_owned()));
    assert_eq!(
        c2.cmd(&format!("kick-job {d1}")).await,
        "NOT_FOUND",
        "reserved"
    );
    assert_eq!(c1.cmd(&format!("bury {d1} 0")).await, "BURIED");
    assert_eq!(c2.cmd(&format!("kick-job {d1}")).await, "KICKED");
    assert_eq!(c1.reserve(10).await, (d1, "d1".to_owned()));
    // Released with a delay through node 1 (announced with its due time): node 2 serves it
    // once it is due.
    assert_eq!(c1.cmd(&format!("release {d1} 0 1")).await, "RELEASED");
    assert_eq!(c2.job_cmd("peek-delayed").await, found(d1, "d1"));
    assert_eq!(c2.reserve(10).await, (d1, "d1".to_owned()));
    assert_eq!(c2.cmd(&format!("delete {d1}")).await, "DELETED");
    assert_eq!(c2.cmd("kick-job 999999").await, "NOT_FOUND");

    // Counted as on one node (per node).
    assert_eq!(c2.field("stats", "cmd-kick").await, "2");
    assert_eq!(c2.field("stats", "cmd-peek-buried").await, "2");
    assert_eq!(c2.field("stats", "cmd-peek-delayed").await, "4");
    drop((c1, c2));
    one.shutdown().await;
    two.shutdown().await;
}

/// `reserve-job` through any node takes a job put through another, whatever its state there
/// (ready, delayed, buried), once: the database claims it unless someone holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_job_takes_another_nodes_job_in_any_state_once() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let (one, two, mut c1, mut c2) = two_nodes(&cluster).await;
    let reserved = |id: u64, body: &str| {
        (
            format!("RESERVED {id} {}", body.len()),
            Some(body.as_bytes().to_vec()),
        )
    };
    let ready = c1.put(0, 0, 60, "ready").await;
    let delayed = c1.put(0, 300, 60, "delayed").await;
    let buried = c1.put(0, 0, 60, "buried").await;
    assert_eq!(
        c1.job_cmd(&format!("reserve-job {buried}")).await,
        reserved(buried, "buried")
    );
    assert_eq!(c1.cmd(&format!("bury {buried} 0")).await, "BURIED");
    for (id, body) in [(ready, "ready"), (delayed, "delayed"), (buried, "buried")] {
        assert_eq!(
            c2.job_cmd(&format!("reserve-job {id}")).await,
            reserved(id, body)
        );
        // Held through node 2: node 1 cannot take it, delete it or act on it.
        assert_eq!(c1.cmd(&format!("reserve-job {id}")).await, "NOT_FOUND");
        assert_eq!(c1.cmd(&format!("delete {id}")).await, "NOT_FOUND");
        assert_eq!(c1.cmd(&format!("kick-job {id}")).await, "NOT_FOUND");
        assert_eq!(
            c2.field(&format!("stats-job {id}"), "state").await,
            "reserved"
        );
    }
    // Released through node 2, taken through node 1.
    assert_eq!(c2.cmd(&format!("release {delayed} 0 0")).await, "RELEASED");
    assert_eq!(
        c1.job_cmd(&format!("reserve-job {delayed}")).await,
        reserved(delayed, "delayed")
    );
    assert_eq!(c2.cmd(&format!("delete {ready}")).await, "DELETED");
    assert_eq!(c1.cmd(&format!("delete {delayed}")).await, "DELETED");
    assert_eq!(c2.cmd(&format!("delete {buried}")).await, "DELETED");
    assert_eq!(c1.cmd(&format!("reserve-job {ready}")).await, "NOT_FOUND");
    drop((c1, c2));
    one.shutdown().await;
    two.shutdown().await;
}

/// A job deleted through another node than the one that holds it in its cache (buried or
/// delayed there) leaves that cache too: a delete of a job the deleter did not hold is
/// announced on the delete channel. Before, node 1 kept such jobs for good (its `stats`
/// counted them, its engine kept them in memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_deleted_through_another_node_leaves_every_cache() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let (one, two, mut c1, mut c2) = two_nodes(&cluster).await;
    let buried = c1.put(0, 0, 60, "buried").await;
    let delayed = c1.put(0, 300, 60, "delayed").await;
    assert_eq!(c1.reserve(10).await, (buried, "buried".to_owned()));
    assert_eq!(c1.cmd(&format!("bury {buried} 0")).await, "BURIED");
    assert_eq!(c1.field("stats", "current-jobs-buried").await, "1");
    assert_eq!(c1.field("stats", "current-jobs-delayed").await, "1");
    assert_eq!(c2.cmd(&format!("delete {buried}")).await, "DELETED");
    assert_eq!(c2.cmd(&format!("delete {delayed}")).await, "DELETED");
    // The announcement reaches node 1's listener within its next round (20 ms to 200 ms).
    let mut counts = (String::new(), String::new());
    for _ in 0..100 {
        counts = (
            c1.field("stats", "current-jobs-buried").await,
            c1.field("stats", "current-jobs-delayed").await,
        );
        if counts == ("0".to_owned(), "0".to_owned()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(counts, ("0".to_owned(), "0".to_owned()), "node 1's cache");
    assert_eq!(c1.cmd(&format!("delete {buried}")).await, "NOT_FOUND");
    drop((c1, c2));
    one.shutdown().await;
    two.shutdown().await;
}

/// Rows of `tickwheel.jobs` held by a node's stock (`--postgres-claim-ahead`), as ids.
async fn stocked(url: &str) -> Vec<u64> {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin
            .query(
                "SELECT id FROM tickwheel.jobs WHERE state = 3 AND holder & $1 <> 0 ORDER BY id",
                &[&tickwheel_pg::STOCK_BIT],
            )
            .unwrap()
            .iter()
            .map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap())
            .collect()
    })
    .await
    .unwrap()
}

/// Waits (up to 10 s) until the stock holds `want`.
async fn until_stocked(url: &str, want: &[u64]) {
    for _ in 0..200 {
        if stocked(url).await == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the stock holds {:?}, not {want:?}", stocked(url).await);
}

fn claiming_ahead(cluster: &Cluster, jobs: usize) -> Config {
    let mut config = config(cluster);
    if let Some(options) = config.postgres.as_mut() {
        options.claim_ahead = jobs;
    }
    config
}

/// `--postgres-claim-ahead`: a reserve's claim takes the next ready jobs of its tube for the
/// node too; the engine hands them out without a claim each, the database keeps the node's
/// stock as their holder, and only the client given one acts on it as its holder; a job not
/// handed out yet is deleted by any of the node's clients, and another node neither hands it
/// out nor deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_go_to_one_client_each_and_only_it_acts_on_them() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let one = Running::open(&claiming_ahead(&cluster, 3)).await;
    let two = Running::open(&config(&cluster)).await;
    let url = cluster.url();
    let mut p = one.client().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(p.put(0, 0, 60, &format!("j{i}")).await);
    }
    let (mut w1, mut w2) = (one.client().await, one.client().await);
    let mut other = two.client().await;

    // The first reserve claims job 0 for w1 and the next three for the node's stock.
    assert_eq!(w1.reserve(10).await.0, ids[0]);
    until_stocked(&url, &ids[1..4]).await;
    // The engine hands a stocked job out at once.
    assert_eq!(w2.reserve(10).await.0, ids[1]);
    assert_eq!(one.handle.stock_handouts(), Some(1));
    // Only the client given it acts on it; not another client, not another node.
    for (c, who) in [(&mut w1, "w1"), (&mut other, "node 2")] {
        for cmd in [
            format!("delete {}", ids[1]),
            format!("release {} 0 0", ids[1]),
            format!("touch {}", ids[1]),
        ] {
            assert_eq!(c.cmd(&cmd).await, "NOT_FOUND", "{who}: {cmd}");
        }
    }
    assert_eq!(w2.cmd(&format!("touch {}", ids[1])).await, "TOUCHED");
    assert_eq!(w2.cmd(&format!("bury {} 5", ids[1])).await, "BURIED");
    // A stocked job not handed out: ready for this node's clients (a delete takes it), held
    // for every other node (which neither deletes nor hands it out).
    assert_eq!(other.cmd(&format!("delete {}", ids[2])).await, "NOT_FOUND");
    assert_eq!(p.cmd(&format!("delete {}", ids[2])).await, "DELETED");
    assert_eq!(stocked(&url).await, [ids[3]]);
    // Node 2 gets the one job no one holds; nothing stocked (fresh) reaches it.
    assert_eq!(other.reserve(10).await.0, ids[4]);
    assert_eq!(w2.reserve(10).await.0, ids[3]);
    assert_eq!(one.handle.stock_handouts(), Some(2));
    assert_eq!(w2.cmd(&format!("release {} 0 0", ids[3])).await, "RELEASED");
    assert!(stocked(&url).await.is_empty());
    // Released, it is ready for anyone: a claim through node 2 takes it.
    assert_eq!(other.reserve(10).await.0, ids[3]);
    assert_eq!(w1.cmd(&format!("delete {}", ids[0])).await, "DELETED");
    for id in [ids[4], ids[3]] {
        assert_eq!(other.cmd(&format!("delete {id}")).await, "DELETED");
    }
    assert_eq!(p.cmd(&format!("kick-job {}", ids[1])).await, "KICKED");
    assert_eq!(w1.reserve(10).await.0, ids[1]);
    assert_eq!(w1.cmd(&format!("delete {}", ids[1])).await, "DELETED");
    assert_eq!(
        p.field("stats-tube default", "current-jobs-ready").await,
        "0"
    );
    drop((p, w1, w2, other));
    one.shutdown().await;
    two.shutdown().await;
}

/// Stocked jobs are never stranded: one not handed out in time goes back to ready (another
/// node serves it), and a stocked job given to a client that hangs up is ready again at once.
/// A `reserve-job` of a stocked job takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_return_when_not_taken_or_their_client_hangs_up() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let one = Running::open(&claiming_ahead(&cluster, 2)).await;
    let two = Running::open(&config(&cluster)).await;
    let url = cluster.url();
    let mut p = one.client().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(p.put(0, 0, 60, &format!("j{i}")).await);
    }
    let mut w1 = one.client().await;
    let mut w2 = one.client().await;
    assert_eq!(w1.reserve(10).await.0, ids[0]);
    until_stocked(&url, &ids[1..3]).await;
    // A `reserve-job` of a stocked job takes it over from the stock, as its holder.
    assert_eq!(
        w2.job_cmd(&format!("reserve-job {}", ids[2])).await,
        (format!("RESERVED {} 2", ids[2]), Some(b"j2".to_vec()))
    );
    assert_eq!(stocked(&url).await, [ids[1]]);
    assert_eq!(w2.cmd(&format!("release {} 0 0", ids[2])).await, "RELEASED");
    // w2 is given job 1 from the stock and hangs up: ready again, at once.
    assert_eq!(w2.reserve(10).await.0, ids[1]);
    drop(w2);
    // Job 2, never handed out, goes back to ready after half of STOCK_HOLD_MS; node 2 then
    // serves both (its reserve waits for them).
    let mut other = two.client().await;
    let mut got = vec![other.reserve(10).await.0, other.reserve(10).await.0];
    got.sort_unstable();
    assert_eq!(got, ids[1..3]);
    assert!(stocked(&url).await.is_empty());
    drop((p, w1, other));
    one.shutdown().await;
    two.shutdown().await;
}

/// Put → reserve → delete cycles on many connections of a node claiming ahead: the engine's
/// ready jobs include puts still being committed (other connections'), which the stock leaves
/// alone; every reserve gets a job and every delete of it succeeds. Before, a stock claim sent
/// before a put's commit found no row and lost the job, which then dropped from the engine
/// even when a reserver had been handed it: a delete answered `NOT_FOUND` (3 runs in 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycles_on_a_node_claiming_ahead_delete_every_job_they_reserve() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let node = Running::open(&claiming_ahead(&cluster, 64)).await;
    let mut tasks = Vec::new();
    for n in 0..40 {
        let mut c = node.client().await;
        tasks.push(tokio::spawn(async move {
            for i in 0..60 {
                let put = c.put(0, 0, 60, &format!("{n}-{i}")).await;
                let (line, _) = c.job_cmd("reserve-with-timeout 10").await;
                let id: u64 = line
                    .strip_prefix("RESERVED ")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|id| id.parse().ok())
                    .unwrap_or_else(|| panic!("job {put}: {line}"));
                assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED", "job {id}");
            }
            c
        }));
    }
    let mut open = Vec::new();
    for t in tasks {
        open.push(t.await.unwrap());
    }
    assert!(
        node.handle.stock_handouts().unwrap() > 0,
        "no job came from the stock"
    );
    let mut c = node.client().await;
    assert_eq!(c.field("stats", "current-jobs-ready").await, "0");
    drop((c, open));
    node.shutdown().await;
}
