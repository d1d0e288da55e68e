//! `PgStore` against a real, throw-away PostgreSQL (Debian's `postgresql`; under `CI=true` a
//! missing PostgreSQL fails these tests instead of skipping them).

use std::time::Duration;

use bytes::Bytes;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};
use tickwheel_pg::{ActiveLock, PgError, PgOptions, PgStore, SchemaName, SCHEMA_VERSION};
use tickwheel_queue::{Change, DurableState, JobHistory, JobRecord, TubeName, FOREIGN_ID_BASE};
use tickwheel_store::{MemStore, Store, StoreError};
use tickwheel_testkit::pg::{cluster_for_test, Cluster};

fn setup() -> Option<(Cluster, PgOptions)> {
    let cluster = cluster_for_test()?;
    let url = cluster.url();
    Some((cluster, PgOptions::new(url)))
}

fn job(id: u64, tube: &str, state: DurableState, body: &[u8]) -> JobRecord {
    JobRecord {
        id,
        tube: TubeName::new(tube).expect("valid tube"),
        priority: (id % 7) as u32 * 100,
        ttr: 1000 + id,
        state,
        created: 500 + id,
        body: Bytes::copy_from_slice(body),
        // Every third job carries a key, so keys round-trip through the database too.
        idempotency_key: id.is_multiple_of(3).then(|| format!("key-{id}")),
        // As put (a delayed job's delay is its due time less its creation).
        history: tickwheel_store::implied_history(state, 500 + id),
    }
}

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The same random batches into `PgStore` and the reference `MemStore`: every read agrees.
#[test]
fn pg_store_matches_the_memory_store() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let pg = PgStore::open(&options).expect("open");
    let mem = MemStore::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next = 1u64;
    let mut live: Vec<u64> = Vec::new();
    for round in 0..60 {
        let mut batch = Vec::new();
        for _ in 0..rng.below(20) {
            match rng.below(6) {
                0 | 1 => {
                    let state = match rng.below(3) {
                        0 => DurableState::Ready,
                        1 => DurableState::Delayed {
                            until: rng.below(10_000),
                        },
                        _ => DurableState::Buried,
                    };
                    let tube = ["a", "b", "c.d"][rng.below(3) as usize];
                    let body = vec![rng.below(256) as u8; rng.below(100) as usize];
                    batch.push(Change::Put(job(next, tube, state, &body)));
                    live.push(next);
                    next += 1;
                }
                2 | 3 if !live.is_empty() => {
                    let id = live[rng.below(live.len() as u64) as usize];
                    let state = match rng.below(3) {
                        0 => DurableState::Ready,
                        1 => DurableState::Delayed {
                            until: rng.below(10_000),
                        },
                        _ => DurableState::Buried,
                    };
                    // A delay and counters as a job that was reserved, released, buried
                    // or kicked has them (a delayed job's delay is never 0).
                    let mut count = || rng.below(4) as u32;
                    let (reserves, timeouts, releases, buries, kicks) =
                        (count(), count(), count(), count(), count());
                    batch.push(Change::Update {
                        id,
                        state,
                        priority: rng.below(5000) as u32,
                        history: JobHistory {
                            delay: 1 + rng.below(100_000),
                            reserves,
                            timeouts,
                            releases,
                            buries,
                            kicks,
                        },
                    });
                }
                4 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    batch.push(Change::Delete {
                        id: live.swap_remove(i),
                    });
                }
                _ => batch.push(Change::ReserveIds {
                    end: next + rng.below(50),
                }),
            }
        }
        mem.commit(&batch).expect("mem commit");
        pg.commit(&batch).expect("pg commit");
        if round % 10 == 9 {
            // A replayed batch (a commit whose outcome was unknown) changes nothing.
            pg.commit(&batch).expect("replay");
            mem.commit(&batch).expect("replay");
        }
        let window = rng.below(12_000);
        assert_eq!(
            pg.recover(window).expect("pg recover"),
            mem.recover(window).expect("mem recover"),
            "round {round}, window {window}"
        );
        let (from, to) = (rng.below(10_000), rng.below(10_000));
        assert_eq!(
            pg.delayed_between(from, to, 7).expect("pg"),
            mem.delayed_between(from, to, 7).expect("mem"),
            "round {round}: delayed_between({from}, {to}, 7)"
        );
        for id in [1, next / 2, next - 1, next + 5] {
            assert_eq!(pg.get(id).expect("pg get"), mem.get(id).expect("mem get"));
        }
    }
    assert!(next > 100, "the run put jobs ({next})");
}

#[test]
fn migrations_are_idempotent_and_a_newer_schema_is_refused() {
    let Some((cluster, options)) = setup() else {
        return;
    };
    let store = PgStore::open(&options).expect("first open creates the schema");
    store
        .commit(&[Change::Put(job(1, "t", DurableState::Ready, b"x"))])
        .expect("commit");
    drop(store);
    let store = PgStore::open(&options).expect("second open finds it current");
    assert_eq!(store.recover(u64::MAX).expect("recover").resident.len(), 1);

    let mut other = options.clone();
    other.schema = SchemaName::new("other").expect("valid");
    let store = PgStore::open(&other).expect("another schema in the same database");
    assert!(store
        .recover(u64::MAX)
        .expect("recover")
        .resident
        .is_empty());

    let mut client = Client::connect(&cluster.url(), NoTls).expect("connect");
    client
        .execute(
            "INSERT INTO tickwheel.schema_version (version) VALUES ($1)",
            &[&(SCHEMA_VERSION + 1)],
        )
        .expect("insert");
    let err = PgStore::open(&options).expect_err("newer schema");
    assert!(
        matches!(err, PgError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{err}"
    );
    assert!(err.to_string().contains("refusing to start"), "{err}");
}

/// `tickwheel.put` inside an application's transaction: the job exists, and is announced,
/// only if that transaction commits; ids come from the foreign range.
#[test]
fn sql_put_takes_part_in_the_callers_transaction() {
    let Some((cluster, options)) = setup() else {
        return;
    };
    let store = PgStore::open(&options).expect("open");
    let mut listener = Client::connect(&cluster.url(), NoTls).expect("connect");
    listener
        .batch_execute("LISTEN tickwheel_put")
        .expect("listen");
    let mut app = Client::connect(&cluster.url(), NoTls).expect("connect");

    let mut tx = app.transaction().expect("begin");
    let rolled: i64 = tx
        .query_one(
            "SELECT tickwheel.put('orders', 'cancel 1', interval '30 minutes')",
            &[],
        )
        .expect("put")
        .get(0);
    tx.rollback().expect("rollback");
    let mut tx = app.transaction().expect("begin");
    let id: i64 = tx
        .query_one(
            "SELECT tickwheel.put('orders', 'cancel 2', interval '1.0001 seconds', 7, 0)",
            &[],
        )
        .expect("put")
        .get(0);
    tx.commit().expect("commit");
    assert!(id as u64 >= FOREIGN_ID_BASE && rolled as u64 >= FOREIGN_ID_BASE);

    let mut notes = listener.notifications();
    let mut it = notes.timeout_iter(Duration::from_secs(10));
    let note = it.next().expect("notification").expect("one arrives");
    assert_eq!(note.payload(), id.to_string(), "only the committed put");
    drop(it);

    let got = store.get(id as u64).expect("get").expect("committed job");
    assert_eq!(got.tube.as_str(), "orders");
    assert_eq!(got.priority, 7);
    assert_eq!(got.ttr, 1000, "ttr 0 is raised to 1 s");
    let DurableState::Delayed { until } = got.state else {
        panic!("delayed: {got:?}");
    };
    assert_eq!(until - got.created, 1001, "delay rounded up to whole ms");
    assert_eq!(store.get(rolled as u64).expect("get"), None, "rolled back");
    assert_eq!(
        store.foreign_after(0, 10).expect("foreign").len(),
        1,
        "one foreign job"
    );
    // The engine's own ids are not moved by foreign ones.
    assert_eq!(store.recover(u64::MAX).expect("recover").next_id, 1);

    // Bad input is an error, never a job.
    for bad in [
        "SELECT tickwheel.put('-bad', 'x', interval '0')",
        "SELECT tickwheel.put('t', 'x', interval '-1 second')",
        "SELECT tickwheel.put('t', 'x', interval '0', -1)",
    ] {
        assert!(app.query_one(bad, &[]).is_err(), "{bad}");
    }

    // delete in the caller's transaction.
    let mut tx = app.transaction().expect("begin");
    let deleted: bool = tx
        .query_one("SELECT tickwheel.delete($1)", &[&id])
        .expect("delete")
        .get(0);
    assert!(deleted);
    tx.rollback().expect("rollback");
    assert!(
        store.get(id as u64).expect("get").is_some(),
        "rollback keeps it"
    );
    let deleted: bool = app
        .query_one("SELECT tickwheel.delete($1)", &[&id])
        .expect("delete")
        .get(0);
    assert!(deleted);
    assert_eq!(store.get(id as u64).expect("get"), None);
}

/// The database goes away and comes back: a commit in flight waits and lands, writes are
/// refused (not poisoned) meanwhile, and nothing is lost.
#[test]
fn a_commit_rides_out_a_database_restart() {
    let Some((mut cluster, mut options)) = setup() else {
        return;
    };
    options.retry = Duration::from_secs(60);
    let store = std::sync::Arc::new(PgStore::open(&options).expect("open"));
    store
        .commit(&[Change::Put(job(1, "t", DurableState::Ready, b"before"))])
        .expect("commit");
    cluster.stop().expect("stop");
    let s = store.clone();
    let committer = std::thread::spawn(move || {
        s.commit(&[Change::Put(job(2, "t", DurableState::Ready, b"during"))])
    });
    // Wait until the commit has seen the outage.
    let mut refused = false;
    for _ in 0..200 {
        if matches!(store.writable(1), Err(StoreError::Unavailable { .. })) {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused, "writable() refuses while the database is down");
    cluster.restart().expect("restart");
    committer
        .join()
        .expect("no panic")
        .expect("the commit lands after the restart");
    assert!(store.writable(1).is_ok(), "writes accepted again");
    let ids: Vec<u64> = store
        .recover(u64::MAX)
        .expect("recover")
        .resident
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn a_standby_waits_for_the_active_node_and_takes_over() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let active =
        ActiveLock::acquire(&options, || panic!("the first node does not wait")).expect("acquire");
    let (tx, rx) = std::sync::mpsc::channel();
    let o = options.clone();
    let standby = std::thread::spawn(move || {
        let waited = std::sync::atomic::AtomicBool::new(false);
        let lock = ActiveLock::acquire(&o, || {
            waited.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = tx.send(());
        });
        (lock.map(|_| ()), waited.into_inner())
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the standby reports that it waits");
    drop(active); // the active node's session ends
    let (lock, waited) = standby.join().expect("no panic");
    lock.expect("the standby holds the lock");
    assert!(waited);
}

/// Waits until `n` backends of the database wait for a heavyweight lock (a commit held back by
/// the test's own lock, a take-over held back by that commit), for at most 30 s.
fn wait_for_lock_waits(observer: &mut Client, n: i64) {
    for _ in 0..600 {
        let waiting: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .expect("pg_stat_activity")
            .get(0);
        if waiting >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("fewer than {n} backends wait for a lock");
}

fn ids_of(store: &PgStore) -> Vec<u64> {
    store
        .recover(u64::MAX)
        .expect("recover")
        .resident
        .iter()
        .map(|r| r.id)
        .collect()
}

/// A group commit of the active node still running in the database when its lock's session
/// ends (a `kill -9`: the lock's backend exits at once, the commit's finishes its statement)
/// must not land after the node taking over has read the jobs: that job would sit in the
/// table, never served (the fail-over e2e test's "7 jobs never deleted" under load). A commit
/// held back until after the take-over fails, nothing of it written; one that holds the fence
/// when the take-over starts makes the take-over wait, and is read.
#[test]
fn a_commit_in_flight_at_a_take_over_lands_before_the_new_node_reads_or_not_at_all() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let mut observer = Client::connect(&options.url, NoTls).expect("connect");
    let first_lock =
        ActiveLock::acquire(&options, || panic!("the first node does not wait")).expect("lock");
    let first = std::sync::Arc::new(
        PgStore::open(&options)
            .expect("open")
            .fenced(&first_lock)
            .expect("fence"),
    );
    first
        .commit(&[Change::Put(job(1, "t", DurableState::Ready, b"one"))])
        .expect("commit");

    // 1. The commit is held back before it runs (a SHARE lock on the table: its INSERT waits,
    //    reads do not) while the first node's session ends and a second node takes over.
    let mut blocker = Client::connect(&options.url, NoTls).expect("connect");
    let mut hold = blocker.transaction().expect("begin");
    hold.batch_execute("LOCK TABLE tickwheel.jobs IN SHARE MODE")
        .expect("lock");
    let f = first.clone();
    let in_flight = std::thread::spawn(move || {
        f.commit(&[Change::Put(job(2, "t", DurableState::Ready, b"two"))])
    });
    wait_for_lock_waits(&mut observer, 1);
    drop(first_lock);
    let second_lock = ActiveLock::acquire(&options, || panic!("the lock is free")).expect("lock");
    let second = PgStore::open(&options)
        .expect("open")
        .fenced(&second_lock)
        .expect("fence");
    let read = ids_of(&second);
    hold.commit().expect("release the table");
    let outcome = in_flight.join().expect("no panic");
    let now = ids_of(&second);
    assert_eq!(read, vec![1], "the take-over read the committed job");
    match outcome {
        Ok(()) => panic!(
            "the old node's commit landed after the new node read the jobs: job 2 is in the \
             table ({now:?}) but not among what the new node serves ({read:?})"
        ),
        Err(e) => {
            let e = format!("{e:?}");
            assert!(
                e.contains("TW001") && e.contains("another node took over"),
                "{e}"
            );
            assert_eq!(now, vec![1], "nothing of the fenced-off commit was written");
        }
    }
    // Later commits of the old node fail too (a node that lost its lock but still runs).
    let late = first.commit(&[Change::Put(job(3, "t", DurableState::Ready, b"three"))]);
    assert!(late.is_err(), "a fenced-off store cannot commit");
    assert_eq!(ids_of(&second), vec![1]);

    // 2. The second node's commit holds the fence (it waits for a row lock after its check):
    //    a third node's take-over waits for it and reads what it wrote.
    second
        .commit(&[Change::Put(job(4, "t", DurableState::Ready, b"four"))])
        .expect("commit");
    let second = std::sync::Arc::new(second);
    let mut hold = blocker.transaction().expect("begin");
    hold.batch_execute("SELECT 1 FROM tickwheel.jobs WHERE id = 4 FOR UPDATE")
        .expect("row lock");
    let s = second.clone();
    let in_flight = std::thread::spawn(move || {
        s.commit(&[Change::Update {
            id: 4,
            state: DurableState::Buried,
            priority: 7,
            history: Default::default(),
        }])
    });
    wait_for_lock_waits(&mut observer, 1);
    drop(second_lock);
    let third_lock = ActiveLock::acquire(&options, || panic!("the lock is free")).expect("lock");
    let o = options.clone();
    let take_over = std::thread::spawn(move || {
        let third = PgStore::open(&o)
            .expect("open")
            .fenced(&third_lock)
            .expect("fence");
        let recovered = third.recover(u64::MAX).expect("recover");
        (third_lock, recovered)
    });
    // The take-over waits for the commit holding the fence, which waits for the row lock.
    wait_for_lock_waits(&mut observer, 2);
    hold.commit().expect("release the row");
    in_flight
        .join()
        .expect("no panic")
        .expect("the commit that held the fence lands");
    let (_third_lock, recovered) = take_over.join().expect("no panic");
    let four = recovered
        .resident
        .iter()
        .find(|r| r.id == 4)
        .expect("job 4 read by the take-over");
    assert_eq!(
        (four.state, four.priority),
        (DurableState::Buried, 7),
        "the take-over read the commit that ended before it"
    );
}

/// The group commit's statement runs on a generic plan (planned once per connection, not
/// on every commit), and that plan, made while `jobs` is still empty, finds existing rows by
/// primary key: no sequential scan or hash join, which would read the whole table on every
/// commit once it has filled (ADR 0008, session 14). Both modes use the same statement
/// shape (standby and shared).
#[test]
fn the_group_commit_is_planned_once_and_looks_rows_up_by_primary_key() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    for shared in [false, true] {
        let schema = if shared {
            "plans_shared"
        } else {
            "plans_standby"
        };
        let mut options = options.clone();
        options.schema = SchemaName::new(schema).expect("valid");
        let store = PgStore::open(&options).expect("open");
        let store = if shared { store.shared() } else { store };
        let tube = "t";
        let commits = 12u64;
        for i in 0..commits {
            // Puts, updates and deletes of existing rows: every part of the statement runs.
            let id = 10 * i + 1;
            let mut batch = vec![
                Change::Put(job(id, tube, DurableState::Ready, b"a")),
                Change::Put(job(id + 1, tube, DurableState::Ready, b"b")),
            ];
            if i > 0 {
                batch.push(Change::Update {
                    id: id - 10,
                    state: DurableState::Buried,
                    priority: 7,
                    history: Default::default(),
                });
                batch.push(Change::Delete { id: id - 9 });
            }
            store.commit(&batch).expect("commit");
        }
        let (generic, custom, plan) = store
            .commit_plans()
            .expect("plans")
            .expect("the commit statement is prepared");
        assert_eq!(
            custom, 0,
            "{schema}: custom plans made (planned per commit)"
        );
        // `generic_plans` counts executions on the generic plan.
        assert!(
            generic >= commits as i64,
            "{schema}: {generic} generic plans for {commits} commits"
        );
        assert!(
            !plan.contains("Seq Scan on jobs") && !plan.contains("Hash Join"),
            "{schema}: the commit's plan scans the table:\n{plan}"
        );
        assert!(plan.contains("jobs_pkey"), "{schema}: {plan}");
    }
}
