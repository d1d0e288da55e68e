//! The server on a real, throw-away PostgreSQL (`--postgres`): the protocol answers as on the
//! embedded store, jobs survive a restart, jobs put by SQL inside an application's
//! transaction reach waiting clients (only if it commits), and a standby takes over.
//! Under `CI=true` a missing PostgreSQL fails these tests; elsewhere they are skipped.

#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use tickwheel_server::{Config, PgOptions};
use tickwheel_testkit::pg::{cluster_for_test, Cluster};
use util::Running;

fn config(cluster: &Cluster) -> Config {
    Config {
        postgres: Some(PgOptions::new(cluster.url())),
        max_job_size: 1024,
        ..Config::default()
    }
}

/// A PostgreSQL client on a plain thread (the synchronous client must not run on the
/// runtime's workers).
async fn sql<T: Send + 'static>(
    url: String,
    f: impl FnOnce(&mut postgres::Client) -> T + Send + 'static,
) -> T {
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        f(&mut client)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_and_a_restart_on_postgres() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let server = Running::open(&config(&cluster)).await;
    let mut c = server.client().await;
    let a = c.put(10, 0, 60, "first").await;
    let b = c.put(5, 3600, 60, "later").await;
    let d = c.put(1, 0, 60, "to bury").await;
    assert_eq!(c.reserve(0).await, (d, "to bury".to_owned()));
    assert_eq!(c.cmd(&format!("bury {d} 7")).await, "BURIED");
    assert_eq!(c.reserve(0).await, (a, "first".to_owned()));
    assert_eq!(c.cmd(&format!("release {a} 3 0")).await, "RELEASED");
    assert_eq!(c.field("stats", "current-jobs-ready").await, "1");
    assert_eq!(c.field("stats", "current-jobs-delayed").await, "1");
    assert_eq!(c.field("stats", "current-jobs-buried").await, "1");
    assert_eq!(c.reserve(0).await, (a, "first".to_owned()));
    assert_eq!(c.cmd(&format!("delete {a}")).await, "DELETED");
    // What the database holds is what was acknowledged.
    let rows: Vec<(i64, i16, i64)> = sql(cluster.url(), |db| {
        db.query(
            "SELECT id, state, priority FROM tickwheel.jobs ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    })
    .await;
    assert_eq!(rows, vec![(b as i64, 1, 5), (d as i64, 2, 7)]);
    server.shutdown().await;

    // A restart (the same or another node) finds the jobs; ids continue.
    let server = Running::open(&config(&cluster)).await;
    let mut c = server.client().await;
    assert_eq!(c.job_field(b, "state").await, "delayed");
    assert_eq!(c.job_field(d, "state").await, "buried");
    assert_eq!(c.cmd("kick 1").await, "KICKED 1");
    assert_eq!(c.reserve(0).await, (d, "to bury".to_owned()));
    let e = c.put(0, 0, 60, "new").await;
    assert!(e > d, "ids are never reused: {e} after {d}");
    server.shutdown().await;
}

/// "Cancel the order if unpaid": the job is put by SQL in the application's transaction; a
/// client waiting in `reserve` gets it once, and only once, that transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_put_reaches_a_waiting_client_only_after_commit() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let server = Running::open(&config(&cluster)).await;
    let mut worker = server.client().await;
    assert_eq!(worker.cmd("watch orders").await, "WATCHING 2");
    worker.send_line("reserve-with-timeout 30").await;
    let mut stats = server.client().await;
    stats.until_waiting(1).await;

    let (rolled_back, committed) = sql(cluster.url(), |db| {
        let mut tx = db.transaction().unwrap();
        let r: i64 = tx
            .query_one(
                "SELECT tickwheel.put('orders', 'order 1', interval '0')",
                &[],
            )
            .unwrap()
            .get(0);
        tx.rollback().unwrap();
        let mut tx = db.transaction().unwrap();
        tx.execute("CREATE TEMP TABLE orders (id int)", &[])
            .unwrap();
        let c: i64 = tx
            .query_one(
                "SELECT tickwheel.put('orders', 'order 2', interval '0', 9)",
                &[],
            )
            .unwrap()
            .get(0);
        tx.commit().unwrap();
        (r, c)
    })
    .await;
    let got = tokio::time::timeout(Duration::from_secs(20), worker.reserved())
        .await
        .expect("the committed SQL put reaches the waiting client");
    assert_eq!(got, committed as u64);
    assert_eq!(worker.job_field(got, "pri").await, "9");
    assert_eq!(
        worker.cmd(&format!("peek {rolled_back}")).await,
        "NOT_FOUND"
    );
    assert_eq!(worker.cmd(&format!("delete {got}")).await, "DELETED");
    let left: i64 = sql(cluster.url(), |db| {
        db.query_one("SELECT count(*) FROM tickwheel.jobs", &[])
            .unwrap()
            .get(0)
    })
    .await;
    assert_eq!(left, 0, "the protocol delete removed the row");

    // A delayed SQL put cancelled in another transaction (the payment) never reaches anyone.
    let id: i64 = sql(cluster.url(), |db| {
        db.query_one(
            "SELECT tickwheel.put('orders', 'cancel order 3', interval '2 seconds')",
            &[],
        )
        .unwrap()
        .get(0)
    })
    .await;
    let id = id as u64;
    // Seen by the node (within the notification bound), then cancelled by SQL.
    let mut seen = false;
    for _ in 0..200 {
        if worker.cmd(&format!("peek {id}")).await.starts_with("FOUND") {
            worker.body("cancel order 3".len()).await;
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen, "the node learned of the delayed SQL put");
    sql(cluster.url(), move |db| {
        let deleted: bool = db
            .query_one("SELECT tickwheel.delete($1)", &[&(id as i64)])
            .unwrap()
            .get(0);
        assert!(deleted);
    })
    .await;
    let mut gone = false;
    for _ in 0..200 {
        let (reply, _body) = worker.job_cmd(&format!("peek {id}")).await;
        if reply == "NOT_FOUND" {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the SQL delete reached the node");
    assert_eq!(worker.cmd("reserve-with-timeout 3").await, "TIMED_OUT");
    server.shutdown().await;
}

/// Two nodes on one schema: the second waits as a standby and, once the first stops, serves
/// the jobs the first acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_the_jobs() {
    let Some(cluster) = cluster_for_test() else {
        return;
    };
    let active = Running::open(&config(&cluster)).await;
    let mut c = active.client().await;
    let id = c.put(0, 0, 60, "survives the node").await;
    let (ready_tx, mut ready_rx) = tokio::sync::oneshot::channel();
    let cfg = config(&cluster);
    let standby = tokio::spawn(async move {
        // Server::open blocks while it waits for the active lock: off the async workers.
        let server = tokio::task::spawn_blocking(move || tickwheel_server::Server::open(&cfg))
            .await
            .unwrap()
            .unwrap();
        let _ = ready_tx.send(());
        server
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        ready_rx.try_recv().is_err(),
        "the standby does not open while the active node runs"
    );
    active.shutdown().await;
    let server = tokio::time::timeout(Duration::from_secs(30), standby)
        .await
        .expect("the standby takes over")
        .unwrap();
    let listener = tickwheel_server::Listener::bind("127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(server.run(listener, stop.clone()));
    let mut c = util::Client::connect(addr).await;
    assert_eq!(c.reserve(0).await, (id, "survives the node".to_owned()));
    stop.cancel();
    task.await.unwrap();
}
