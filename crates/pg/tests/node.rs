//! Several nodes on one schema (ADR 0008 phase 2, active-active), against a real throw-away
//! PostgreSQL: claims by primary key on the database clock, one holder, leases, announcements.
//! Each `Node` here is what one server process would hold; they share nothing but the database.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};
use tickwheel_pg::{Lost, Node, PgOptions, PgStore, NODE_ID_BLOCK};
use tickwheel_queue::{Change, DurableState, JobRecord, TubeName};
use tickwheel_store::Store;
use tickwheel_testkit::pg::{cluster_for_test, Cluster};

fn setup() -> Option<(Cluster, PgOptions)> {
    let cluster = cluster_for_test()?;
    let url = cluster.url();
    Some((cluster, PgOptions::new(url)))
}

fn job(id: u64, tube: &str, state: DurableState, ttr_ms: u64) -> JobRecord {
    JobRecord {
        id,
        tube: TubeName::new(tube).expect("valid tube"),
        priority: 100,
        ttr: ttr_ms,
        state,
        created: 1,
        body: Bytes::from(format!("job {id}")),
        idempotency_key: None,
        history: Default::default(),
    }
}

fn put(store: &PgStore, jobs: Vec<JobRecord>) {
    let batch: Vec<Change> = jobs.into_iter().map(Change::Put).collect();
    store.commit(&batch).expect("commit");
}

/// The ids announced on `<schema>_ready` within `wait`, until `want` is among them.
fn heard(listener: &mut Client, want: u64, wait: Duration) -> Vec<u64> {
    let mut ids = Vec::new();
    let deadline = Instant::now() + wait;
    let mut notes = listener.notifications();
    while !ids.contains(&want) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match notes.timeout_iter(left).next() {
            Ok(Some(note)) => {
                assert_eq!(note.channel(), "tickwheel_ready");
                let jobs = tickwheel_pg::parse_ready(note.payload());
                assert!(
                    !jobs.is_empty(),
                    "a payload without ids: {}",
                    note.payload()
                );
                ids.extend(jobs.into_iter().map(|(id, _)| id));
            }
            Ok(None) => break,
            Err(e) => panic!("listener: {e}"),
        }
    }
    ids
}

/// A job put through node A is announced to node B and claimed there; from then on only B's
/// holder acts on it, and the holder-free commands (kick, delete of an unreserved job, the
/// SQL delete) follow beanstalkd's rules.
#[test]
fn a_put_on_one_node_is_claimed_through_another_and_only_the_holder_acts_on_it() {
    let Some((cluster, options)) = setup() else {
        return;
    };
    // A phase-1 node's jobs exist already: the nodes' id blocks start past them.
    let store = PgStore::open(&options).expect("open");
    put(&store, vec![job(41, "old", DurableState::Ready, 1000)]);
    drop(store);

    let a = Node::join(&options).expect("join a");
    let b = Node::join(&options).expect("join b");
    assert_ne!(a.id(), b.id());
    assert!(a.ids().start > 41 && b.ids().start > 41, "{a:?} {b:?}");
    assert!(a.ids().end <= b.ids().start || b.ids().end <= a.ids().start);
    assert_eq!(a.ids().end - a.ids().start, NODE_ID_BLOCK);
    let store_a = PgStore::open(&options).expect("open").shared();
    let mut listen_b = Client::connect(&cluster.url(), NoTls).expect("connect");
    listen_b
        .batch_execute("LISTEN tickwheel_ready")
        .expect("listen");

    let id = a.ids().start;
    put(&store_a, vec![job(id, "t", DurableState::Ready, 60_000)]);
    assert!(heard(&mut listen_b, id, Duration::from_secs(10)).contains(&id));

    let (ha, hb) = (a.holder(1), b.holder(1));
    assert_ne!(ha, hb);
    let won = b.claim(&[(id, hb)]).expect("claim").won;
    assert_eq!(won.len(), 1);
    assert_eq!((won[0].id, won[0].holder), (id, hb));
    assert_eq!(won[0].lease_until_ms, won[0].at_ms + 60_000);
    let lost = a.claim(&[(id, ha)]).expect("claim");
    assert!(
        matches!(&lost.lost[..], [(i, Lost::Held { lease_until_ms })]
            if *i == id && *lease_until_ms == won[0].lease_until_ms),
        "{lost:?}"
    );
    assert!(lost.won.is_empty(), "one holder");
    assert!(
        b.claim(&[(id, b.holder(2))]).expect("claim").won.is_empty(),
        "even on one node"
    );

    // Not the holder: NOT_FOUND for everything.
    assert!(!a.delete(ha, id).expect("delete"));
    assert!(!a.release(ha, id, 1, 0).expect("release"));
    assert!(!a.bury(ha, id, 1).expect("bury"));
    assert_eq!(a.touch(ha, id).expect("touch"), None);
    let mut app = Client::connect(&cluster.url(), NoTls).expect("connect");
    let sql_deleted: bool = app
        .query_one("SELECT tickwheel.delete($1)", &[&(id as i64)])
        .expect("sql delete")
        .get(0);
    assert!(!sql_deleted, "the SQL delete leaves a held job alone");
    let counts = a.tube_counts("t").expect("counts");
    assert_eq!((counts.ready, counts.reserved), (0, 1), "{counts:?}");

    // The holder: touch renews, release makes it ready and announces it.
    let lease = b.touch(hb, id).expect("touch").expect("held");
    assert!(lease >= won[0].lease_until_ms);
    assert!(b.release(hb, id, 7, 0).expect("release"));
    assert!(heard(&mut listen_b, id, Duration::from_secs(10)).contains(&id));
    assert!(!b.release(hb, id, 7, 0).expect("release"), "no longer held");
    let counts = b.tube_counts("t").expect("counts");
    assert_eq!((counts.ready, counts.urgent, counts.reserved), (1, 1, 0));

    // Now A claims it, buries it; kick (from B) brings it back for anyone.
    assert_eq!(a.claim(&[(id, ha)]).expect("claim").won.len(), 1);
    assert!(!b.bury(hb, id, 1).expect("bury"));
    assert!(a.bury(ha, id, 2000).expect("bury"));
    assert_eq!(b.tube_counts("t").expect("counts").buried, 1);
    assert_eq!(
        b.claim(&[(id, hb)]).expect("claim").lost,
        vec![(id, Lost::Buried)]
    );
    assert_eq!(b.kick("t", 10).expect("kick"), vec![id]);
    assert!(b.kick("t", 10).expect("kick").is_empty());
    let counts = b.tube_counts("t").expect("counts");
    assert_eq!((counts.ready, counts.urgent, counts.buried), (1, 0, 0));

    // An engine's kick through the shared commit is announced too.
    assert_eq!(a.claim(&[(id, ha)]).expect("claim").won.len(), 1);
    assert!(a.bury(ha, id, 2000).expect("bury"));
    store_a
        .commit(&[Change::Update {
            id,
            state: DurableState::Ready,
            priority: 2000,
            history: Default::default(),
        }])
        .expect("commit");
    assert!(heard(&mut listen_b, id, Duration::from_secs(10)).contains(&id));

    // A client hangs up: what it held is ready again at once (and announced).
    assert_eq!(b.claim(&[(id, hb)]).expect("claim").won.len(), 1);
    assert_eq!(
        a.release_all(&[ha]).expect("release all"),
        Vec::<u64>::new()
    );
    assert_eq!(b.release_all(&[hb, ha]).expect("release all"), vec![id]);
    assert!(heard(&mut listen_b, id, Duration::from_secs(10)).contains(&id));
    assert_eq!(b.tube_counts("t").expect("counts").ready, 1);

    // An unreserved job may be deleted by anyone (beanstalkd), once.
    assert!(a.delete(ha, id).expect("delete"));
    assert!(!b.delete(hb, id).expect("delete"));
    assert_eq!(
        b.claim(&[(id, hb)]).expect("claim").lost,
        vec![(id, Lost::Gone)]
    );
    assert!(b.claim(&[]).expect("claim").won.is_empty());
    a.leave().expect("leave");
    b.heartbeat().expect("heartbeat");
}

/// Four nodes race to claim the same 300 jobs in different orders, in batches: every job is
/// claimed exactly once.
#[test]
fn racing_claims_give_every_job_exactly_one_holder() {
    racing_claims(false);
}

/// The same with claims that commit before their WAL flush (`PgOptions::async_claims`):
/// visibility and row locks are the commit's, so still one holder each.
#[test]
fn racing_async_claims_give_every_job_exactly_one_holder() {
    racing_claims(true);
}

fn racing_claims(async_claims: bool) {
    let Some((_cluster, mut options)) = setup() else {
        return;
    };
    options.async_claims = async_claims;
    let first = Node::join(&options).expect("join");
    let store = PgStore::open(&options).expect("open");
    let base = first.ids().start;
    let ids: Vec<u64> = (base..base + 300).collect();
    put(
        &store,
        ids.iter()
            .map(|id| job(*id, "race", DurableState::Ready, 60_000))
            .collect(),
    );
    let nodes: Vec<Node> = std::iter::once(first)
        .chain((0..3).map(|_| Node::join(&options).expect("join")))
        .collect();
    let won: Vec<Vec<(u64, i64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let mut order = ids.clone();
                // A different order per node: forwards, backwards, odd/even interleavings.
                match n {
                    1 => order.reverse(),
                    2 => order.sort_by_key(|id| (id % 2, *id)),
                    3 => order.sort_by_key(|id| (id % 3, u64::MAX - id)),
                    _ => {}
                }
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for chunk in order.chunks(10) {
                        // Each id twice in the batch, for two clients of this node.
                        let wanted: Vec<(u64, i64)> = chunk
                            .iter()
                            .flat_map(|id| [(*id, node.holder(1)), (*id, node.holder(2))])
                            .collect();
                        for c in node.claim(&wanted).expect("claim").won {
                            mine.push((c.id, c.holder));
                        }
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    let mut holders: HashMap<u64, Vec<i64>> = HashMap::new();
    for (id, holder) in won.into_iter().flatten() {
        holders.entry(id).or_default().push(holder);
    }
    assert_eq!(holders.len(), ids.len(), "every job claimed");
    for (id, h) in &holders {
        assert_eq!(h.len(), 1, "job {id} has holders {h:?}");
    }
    let counts = nodes[0].tube_counts("race").expect("counts");
    assert_eq!((counts.ready, counts.reserved), (0, 300));
}

/// "Due" is the database's clock: a delayed job cannot be claimed before its time by that
/// clock (the claim says when it ran), and a paused tube hands out nothing, on every node.
#[test]
fn a_delayed_job_is_claimed_only_when_due_by_the_database_clock_and_pauses_are_cluster_wide() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let a = Node::join(&options).expect("join");
    let b = Node::join(&options).expect("join");
    let store = PgStore::open(&options).expect("open");
    let base = a.ids().start;
    let now = a.db_now_ms().expect("now");
    let (near, far, paused) = (base, base + 1, base + 2);
    put(
        &store,
        vec![
            job(near, "d", DurableState::Delayed { until: now + 300 }, 5000),
            job(
                far,
                "d",
                DurableState::Delayed {
                    until: now + 3_600_000,
                },
                5000,
            ),
            job(paused, "p", DurableState::Ready, 5000),
        ],
    );
    let lost = b.claim(&[(far, b.holder(1))]).expect("claim");
    assert!(lost.won.is_empty());
    assert_eq!(
        lost.lost,
        vec![(
            far,
            Lost::NotDue {
                until_ms: now + 3_600_000
            }
        )]
    );
    assert_eq!(b.tube_counts("d").expect("counts").delayed, 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let claimed = loop {
        let won = b.claim(&[(near, b.holder(1))]).expect("claim").won;
        if let Some(c) = won.first() {
            break *c;
        }
        assert!(
            Instant::now() < deadline,
            "the near job never became claimable"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        claimed.at_ms >= now + 300,
        "claimed at {} before its due time {}",
        claimed.at_ms,
        now + 300
    );
    assert!(a
        .claim(&[(near, a.holder(1))])
        .expect("claim")
        .won
        .is_empty());

    a.pause("p", 3_600_000).expect("pause");
    let lost = b.claim(&[(paused, b.holder(1))]).expect("claim");
    assert!(
        matches!(lost.lost[..], [(i, Lost::Paused { until_ms })] if i == paused && until_ms > now),
        "{lost:?}"
    );
    assert!(lost.won.is_empty(), "paused");
    let counts = b.tube_counts("p").expect("counts");
    assert!(
        counts.paused_until_ms > now && counts.ready == 1,
        "{counts:?}"
    );
    b.pause("p", 0).expect("unpause");
    assert_eq!(
        a.claim(&[(paused, a.holder(1))]).expect("claim").won.len(),
        1
    );
}

/// A node dies holding two jobs: by the database clock, once their leases lapse, one is
/// claimable again through another node (never before), and the other is returned to ready by
/// a live node's sweep, which announces it; the dead holder can no longer act on either.
#[test]
fn a_dead_nodes_reservations_return_at_their_lease_expiry() {
    let Some((cluster, options)) = setup() else {
        return;
    };
    let a = Node::join(&options).expect("join");
    let b = Node::join(&options).expect("join");
    let store = PgStore::open(&options).expect("open");
    let (claim_back, sweep_back) = (a.ids().start, a.ids().start + 1);
    put(
        &store,
        vec![
            job(claim_back, "ttr", DurableState::Ready, 1500),
            job(sweep_back, "ttr", DurableState::Ready, 1500),
        ],
    );
    let ha = a.holder(9);
    let leases: HashMap<u64, u64> = a
        .claim(&[(claim_back, ha), (sweep_back, ha)])
        .expect("claim")
        .won
        .into_iter()
        .map(|c| (c.id, c.lease_until_ms))
        .collect();
    assert_eq!(leases.len(), 2);
    drop(a); // the node dies: its connection closes, nothing else happens
    let mut listen = Client::connect(&cluster.url(), NoTls).expect("connect");
    listen
        .batch_execute("LISTEN tickwheel_ready")
        .expect("listen");

    let deadline = Instant::now() + Duration::from_secs(30);
    let hb = b.holder(1);
    let won = loop {
        if let Some(c) = b.claim(&[(claim_back, hb)]).expect("claim").won.first() {
            break *c;
        }
        assert!(Instant::now() < deadline, "the lease never lapsed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        won.at_ms >= leases[&claim_back],
        "claimed at {} under a lease until {}",
        won.at_ms,
        leases[&claim_back]
    );
    let swept = loop {
        let swept = b.expire(100).expect("expire");
        if !swept.is_empty() {
            break swept;
        }
        assert!(
            Instant::now() < deadline,
            "the sweep never returned the job"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        swept,
        vec![sweep_back],
        "only the lapsed lease, not b's fresh one"
    );
    assert!(b.db_now_ms().expect("now") >= leases[&sweep_back]);
    assert!(heard(&mut listen, sweep_back, Duration::from_secs(10)).contains(&sweep_back));
    assert!(b.expire(100).expect("expire").is_empty(), "swept once");
    let counts = b.tube_counts("ttr").expect("counts");
    assert_eq!((counts.ready, counts.reserved), (1, 1), "{counts:?}");

    // The dead holder holds nothing any more; b's holder does.
    assert!(!b.release(ha, claim_back, 1, 0).expect("release"));
    assert!(!b.bury(ha, sweep_back, 1).expect("bury"));
    assert!(!b.delete(ha, claim_back).expect("delete"), "b holds it");
    assert!(b.delete(hb, claim_back).expect("delete"));
    assert!(store.get(claim_back).expect("get").is_none());
}

/// A node whose clock is ten minutes behind the database's puts a job due in 2 s by its own
/// clock: in the database it is due 2 s after the commit by the database's clock, so no node
/// can hand it out early. And a stale engine's update or delete (a node that still thinks the
/// job is ready) cannot undo another node's claim.
#[test]
fn node_clock_skew_cannot_make_a_job_due_early_and_stale_writes_leave_claims_alone() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let a = Node::join(&options).expect("join");
    let b = Node::join(&options).expect("join");
    const BEHIND: u64 = 600_000;
    let clock = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as u64
            - BEHIND
    };
    let store = PgStore::open(&options)
        .expect("open")
        .shared()
        .with_node_clock(clock);
    let (delayed, ready) = (a.ids().start, a.ids().start + 1);
    let before = a.db_now_ms().expect("now");
    let node_now = clock();
    put(
        &store,
        vec![
            job(
                delayed,
                "skew",
                DurableState::Delayed {
                    until: node_now + 2000,
                },
                60_000,
            ),
            job(ready, "skew", DurableState::Ready, 60_000),
        ],
    );
    let after = a.db_now_ms().expect("now");
    // The row as the database holds it (a shared store reads due times back onto its node's
    // clock).
    let plain = PgStore::open(&options).expect("open");
    let Some(DurableState::Delayed { until }) = plain.get(delayed).expect("get").map(|r| r.state)
    else {
        panic!("still delayed");
    };
    assert!(
        until >= before + 2000 && until <= after + 2000,
        "due at {until}, database clock {before}..{after} at the commit"
    );
    let lost = b.claim(&[(delayed, b.holder(1))]).expect("claim");
    assert!(
        lost.won.is_empty(),
        "early by {} ms",
        until.saturating_sub(before)
    );

    // B holds `ready`; A's engine, stale, releases (delays) and deletes it through the commit.
    assert_eq!(
        b.claim(&[(ready, b.holder(1))]).expect("claim").won.len(),
        1
    );
    store
        .commit(&[Change::Update {
            id: ready,
            state: DurableState::Delayed { until: 1 },
            priority: 1,
            history: Default::default(),
        }])
        .expect("commit");
    store
        .commit(&[Change::Delete { id: ready }])
        .expect("commit");
    let counts = a.tube_counts("skew").expect("counts");
    assert_eq!((counts.reserved, counts.delayed), (1, 1), "{counts:?}");
    // Once B lets go, the same stale writes apply.
    assert!(b.release(b.holder(1), ready, 5, 0).expect("release"));
    store
        .commit(&[Change::Delete { id: ready }])
        .expect("commit");
    assert!(store.get(ready).expect("get").is_none());
}

/// `delete_many`: one round trip for many clients' deletes, each checked against its holder
/// as `delete` is: a held job only by its holder (also when another client asks for the same
/// job in the same batch), a free one by anyone, a missing one by no one.
#[test]
fn batched_deletes_check_each_holder() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let node = Node::join(&options).expect("join");
    let store = PgStore::open(&options).expect("open");
    let base = node.ids().start;
    put(
        &store,
        (base..base + 4)
            .map(|id| job(id, "del", DurableState::Ready, 60_000))
            .collect(),
    );
    let (a, b) = (node.holder(1), node.holder(2));
    let won = node
        .claim(&[(base, a), (base + 1, b)])
        .expect("claim")
        .won
        .len();
    assert_eq!(won, 2);
    let deleted = node
        .delete_many(&[
            (base, b),     // held by a: not b's
            (base, a),     // a's own: deleted
            (base + 1, a), // held by b: not a's
            (base + 2, a), // free: anyone
            (base + 2, b), // the same free job again: deleted for one of the two
            (base + 9, a), // no such job
        ])
        .expect("delete_many");
    assert_eq!(deleted[..3], [false, true, false]);
    assert!(
        deleted[3] ^ deleted[4],
        "one delete of job {}: {deleted:?}",
        base + 2
    );
    assert!(!deleted[5]);
    let left: Vec<u64> = store
        .existing(&(base..base + 4).collect::<Vec<_>>())
        .expect("existing");
    let mut left = left;
    left.sort_unstable();
    assert_eq!(left, vec![base + 1, base + 3]);
    assert_eq!(
        node.delete_many(&[(base + 1, b)]).expect("delete"),
        vec![true]
    );
}

/// A node that stops heartbeating is found by the others (`stale_nodes`, by the database
/// clock), and `free_ids_in` lists the jobs of its id block that no one holds under a live
/// lease: what the others adopt when a node was killed between a commit and its announcement.
#[test]
fn a_silent_nodes_free_jobs_are_found_by_its_id_block() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let a = Node::join(&options).expect("join a");
    let b = Node::join(&options).expect("join b");
    let store = PgStore::open(&options).expect("open").shared();
    let (x, y, z) = (a.ids().start, a.ids().start + 1, a.ids().start + 2);
    let mine = b.ids().start;
    put(
        &store,
        vec![
            job(x, "t", DurableState::Ready, 60_000),
            job(y, "t", DurableState::Ready, 60_000),
            job(z, "t", DurableState::Delayed { until: 1 }, 60_000),
            job(mine, "t", DurableState::Ready, 60_000),
        ],
    );
    // Fresh heartbeats: nobody is stale within a minute; everyone is with no allowance.
    assert!(b.stale_nodes(60_000).expect("stale").is_empty());
    let stale = b.stale_nodes(0).expect("stale");
    assert_eq!(stale, vec![(a.id(), a.ids())], "b does not list itself");
    // y is held under a live lease: not free. x and z (delayed) are; b's job is in b's block.
    let won = b.claim(&[(y, b.holder(1))]).expect("claim").won;
    assert_eq!(won.len(), 1);
    assert_eq!(store.free_ids_in(a.ids()).expect("free"), vec![x, z]);
    assert_eq!(store.free_ids_in(b.ids()).expect("free"), vec![mine]);
    // A heartbeat makes a node fresh again. a's last heartbeat (its join) is over a second
    // old after the sleep, so it is stale at a 900 ms allowance whatever the load; right after
    // a heartbeat it is not, unless the next query takes 900 ms (a 10 ms allowance here
    // failed once in CI on the loaded 2-core box).
    std::thread::sleep(Duration::from_millis(1_000));
    let is_stale = |allowance| {
        b.stale_nodes(allowance)
            .expect("stale")
            .iter()
            .any(|(id, _)| *id == a.id())
    };
    assert!(is_stale(900));
    a.heartbeat().expect("heartbeat");
    assert!(!is_stale(900));
}

/// After a shared commit the node knows where each delayed job's due time falls on its own
/// clock (`PgStore::take_retimed`), for a node whose clock is ten minutes behind or ahead of
/// the database's: from the moment the node's clock reads `to`, the database holds the job
/// due (a claim then cannot lose as "not due yet"), and `to` is no earlier than the engine's
/// own due time `from`. The offset bound learnt from the commit's round trip is below the
/// true offset (± 1 ms of rounding: the two clocks are one machine's here).
#[test]
fn a_shared_commit_tells_the_node_when_the_database_holds_its_delayed_jobs_due() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let node = Node::join(&options).expect("join");
    for (i, shift) in [-600_000i64, 600_000].into_iter().enumerate() {
        let clock = move || {
            let sys = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_millis() as i64;
            (sys + shift) as u64
        };
        let store = PgStore::open(&options)
            .expect("open")
            .shared()
            .with_node_clock(clock);
        assert_eq!(store.clock_offset().lower_bound(), None);
        let ids: Vec<u64> = (0..3)
            .map(|k| node.ids().start + 10 * i as u64 + k)
            .collect();
        let until = clock() + 300;
        put(
            &store,
            ids.iter()
                .map(|id| job(*id, "retime", DurableState::Delayed { until }, 60_000))
                .collect(),
        );
        let bound = store
            .clock_offset()
            .lower_bound()
            .expect("learnt at the commit");
        assert!(
            bound <= -shift + 1,
            "bound {bound} above the offset {}",
            -shift
        );
        let retimed = store.take_retimed();
        assert!(store.take_retimed().is_empty(), "taken once");
        let mut db = Client::connect(&options.url, NoTls).expect("connect");
        for id in &ids {
            let r = retimed.iter().find(|r| r.id == *id);
            let Some(r) = r else {
                // Not moved: the database holds it due from `until` on the node's clock
                // already (commit within the same millisecond).
                continue;
            };
            assert_eq!(r.from, until);
            assert!(r.to > r.from);
            while clock() < r.to {
                std::thread::sleep(Duration::from_millis(1));
            }
            let due: bool = db
                .query_one(
                    "SELECT until_ms <= tickwheel.now_ms() FROM tickwheel.jobs WHERE id = $1",
                    &[&(*id as i64)],
                )
                .expect("read")
                .get(0);
            assert!(
                due,
                "job {id}: the node's clock reads {} but the database does not hold it due",
                r.to
            );
        }
    }
}

/// A shared commit announces a delayed put with its due time on the database clock (what the
/// row holds), so the other nodes need not read the row only to learn it; a ready put comes
/// without one. An old node's parser (every token an id, the rest skipped) still sees both ids.
#[test]
fn a_delayed_put_is_announced_with_its_due_time_on_the_database_clock() {
    let Some((cluster, options)) = setup() else {
        return;
    };
    let node = Node::join(&options).expect("join");
    // The node's clock 10 min behind the database's: the announced due time is the database's.
    let clock = || {
        let sys = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as u64;
        sys - 600_000
    };
    let store = PgStore::open(&options)
        .expect("open")
        .shared()
        .with_node_clock(clock);
    let mut listener = Client::connect(&cluster.url(), NoTls).expect("connect");
    listener
        .batch_execute("LISTEN tickwheel_ready")
        .expect("listen");
    let (delayed, ready) = (node.ids().start, node.ids().start + 1);
    let until = clock() + 30_000;
    put(
        &store,
        vec![
            job(delayed, "t", DurableState::Delayed { until }, 60_000),
            job(ready, "t", DurableState::Ready, 60_000),
        ],
    );
    let mut announced = Vec::new();
    let mut payloads = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut notes = listener.notifications();
    while announced.len() < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match notes.timeout_iter(left).next() {
            Ok(Some(note)) => {
                payloads.push(note.payload().to_owned());
                announced.extend(tickwheel_pg::parse_ready(note.payload()));
            }
            Ok(None) => break,
            Err(e) => panic!("listener: {e}"),
        }
    }
    drop(notes);
    let mut db = Client::connect(&options.url, NoTls).expect("connect");
    let row_until: i64 = db
        .query_one(
            "SELECT until_ms FROM tickwheel.jobs WHERE id = $1",
            &[&(delayed as i64)],
        )
        .expect("read")
        .get(0);
    assert!(row_until as u64 >= until + 590_000, "on the database clock");
    assert_eq!(
        announced,
        vec![(delayed, Some(row_until as u64)), (ready, None)],
        "{payloads:?}"
    );
    let old: Vec<u64> = payloads
        .iter()
        .flat_map(|p| p.split(',').filter_map(|t| t.parse::<u64>().ok()))
        .collect();
    assert_eq!(
        old,
        vec![delayed, ready],
        "an old node's parse: {payloads:?}"
    );
}

/// Every node connection runs its statements on generic plans, the one `Node::join` opened
/// (and migrated the schema on) too: without the settings a connection plans each claim
/// again on every call (ADR 0008, session 14: one connection per node did so, ~1 in 8
/// claims at 5 000 due/s).
#[test]
fn every_node_connection_plans_its_statements_once() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let store = PgStore::open(&options).expect("open").shared();
    let node = Node::join(&options).expect("join");
    put(
        &store,
        (1..=40)
            .map(|id| job(id, "t", DurableState::Ready, 60_000))
            .collect(),
    );
    // Claims from several threads at once, so more connections than the first one open.
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let node = &node;
            s.spawn(move || {
                for id in (1..=40).filter(|id| id % 4 == t) {
                    node.claim(&[(id, node.holder(t))]).expect("claim");
                }
            });
        }
    });
    let modes = node.settings("plan_cache_mode").expect("modes");
    assert!(!modes.is_empty());
    assert!(
        modes.iter().all(|m| m == "force_generic_plan"),
        "plan_cache_mode of the node's connections: {modes:?}"
    );
}

/// Nodes sharing a schema count each job's history in the database, whichever node acted: a
/// claim adds a reserve (and a timeout when it takes over a lapsed lease), the sweep a
/// timeout, release, bury and kick their own counter, and a release records its delay.
/// A node's group commit never writes a stale history back.
#[test]
fn every_node_counts_a_jobs_history_in_the_database() {
    let Some((_cluster, options)) = setup() else {
        return;
    };
    let a = Node::join(&options).expect("join a");
    let b = Node::join(&options).expect("join b");
    let store = PgStore::open(&options).expect("open").shared();
    let id = a.ids().start;
    put(&store, vec![job(id, "t", DurableState::Ready, 1_000)]);
    let history = |store: &PgStore| store.get(id).expect("get").expect("the job").history;
    let claim = |node: &Node, holder: i64| {
        let won = node.claim(&[(id, holder)]).expect("claim").won;
        assert_eq!(won.len(), 1, "claimed by {holder}");
    };

    claim(&a, a.holder(1));
    assert!(a.release(a.holder(1), id, 5, 0).expect("release"));
    claim(&b, b.holder(1));
    assert!(b.bury(b.holder(1), id, 5).expect("bury"));
    assert_eq!(a.kick("t", 10).expect("kick"), vec![id]);
    claim(&b, b.holder(2));
    assert!(b.release(b.holder(2), id, 5, 0).expect("release"));
    // A lease that lapses: swept back (a timeout), then claimed again and left to lapse, then
    // claimed over the lapsed lease before any sweep (another timeout).
    claim(&a, a.holder(3));
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(b.expire(10).expect("expire"), vec![id]);
    claim(&a, a.holder(4));
    std::thread::sleep(Duration::from_millis(1_100));
    claim(&b, b.holder(5));
    assert!(b.release(b.holder(5), id, 5, 30_000).expect("release"));
    let h = history(&store);
    assert_eq!(
        (h.reserves, h.timeouts, h.releases, h.buries, h.kicks, h.delay),
        (6, 2, 3, 1, 1, 30_000),
        "{h:?}"
    );

    // A node's commit of its engine's view leaves the counts to the database: kick-job of the
    // delayed job by a node that read the row (kicks 1) and counted its kick (2) ...
    let commit = |kicks: u32| {
        store
            .commit(&[Change::Update {
                id,
                state: DurableState::Ready,
                priority: 5,
                history: tickwheel_queue::JobHistory {
                    kicks,
                    ..Default::default()
                },
            }])
            .expect("commit");
    };
    commit(2);
    let h = history(&store);
    assert_eq!(
        (h.reserves, h.timeouts, h.releases, h.buries, h.kicks, h.delay),
        (6, 2, 3, 1, 2, 30_000),
        "{h:?}"
    );
    // ... and a stale view (a node that read the row before both kicks, or a reserve-job that
    // is no kick) changes nothing.
    commit(0);
    commit(1);
    assert_eq!(history(&store).kicks, 2);
}

/// The WAL flushes (`pg_stat_wal.wal_sync`) counted for the client backends that have
/// exited, once none but this connection's is left (a backend's counts reach the shared
/// statistics when it exits).
fn wal_syncs_once_alone(admin: &mut Client) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let others: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .expect("activity")
            .get(0);
        if others == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{others} backends did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    admin
        .query_one("SELECT wal_sync FROM pg_stat_wal", &[])
        .expect("pg_stat_wal")
        .get(0)
}

/// `async_claims`: a claim commits without a WAL flush of its own, and the setting ends with
/// the claim's transaction (the node's connections keep `synchronous_commit = on`, so a
/// delete, an acknowledged write, still waits for its flush); default claims flush. Counted
/// in `pg_stat_wal.wal_sync` with the WAL writer slowed to one flush per 10 s, so the async
/// claims' WAL reaches the disk only with a later flush.
#[test]
fn async_claims_skip_their_wal_flush_and_deletes_keep_theirs() {
    let Some((cluster, options)) = setup() else {
        return;
    };
    let mut admin = Client::connect(&cluster.url(), NoTls).expect("connect");
    for sql in [
        "ALTER SYSTEM SET wal_writer_delay = '10s'",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).expect("slow WAL writer");
    }
    const N: u64 = 100;
    let mut async_options = options.clone();
    async_options.async_claims = true;
    // Ids from the first node's block: N claimed by sync claims, N by async ones, N deleted.
    let base = Node::join(&options).expect("join").ids().start;
    {
        let store = PgStore::open(&options).expect("open").shared();
        put(
            &store,
            (base..base + 3 * N)
                .map(|id| job(id, "t", DurableState::Ready, 60_000))
                .collect(),
        );
    }
    // The flushes of one node's life: join, `act` on each of its N ids, leave.
    let mut syncs = wal_syncs_once_alone(&mut admin);
    let mut life = |options: &PgOptions, act: &dyn Fn(&Node, u64)| -> i64 {
        let node = Node::join(options).expect("join");
        for id in 0..N {
            act(&node, id);
        }
        drop(node);
        let now = wal_syncs_once_alone(&mut admin);
        now - std::mem::replace(&mut syncs, now)
    };
    let joined = life(&options, &|_, _| {});
    let claim = |first: u64| {
        move |node: &Node, i: u64| {
            let id = first + i;
            let claims = node.claim(&[(id, node.holder(1))]).expect("claim");
            assert_eq!(claims.won.len(), 1, "job {id} claimed");
        }
    };
    let sync_claims = life(&options, &claim(base)) - joined;
    let check = claim(base + N);
    let async_claims = life(&async_options, &|node, i| {
        check(node, i);
        let values = node.settings("synchronous_commit").expect("settings");
        assert!(values.iter().all(|v| v == "on"), "{values:?} after a claim");
    }) - joined;
    let deletes = life(&async_options, &|node, i| {
        assert!(node
            .delete(node.holder(1), base + 2 * N + i)
            .expect("delete"));
    }) - joined;
    let n = i64::try_from(N).expect("small");
    assert!(
        sync_claims >= n / 2,
        "{sync_claims} WAL flushes for {N} synchronous claims"
    );
    assert!(
        async_claims <= n / 10,
        "{async_claims} WAL flushes for {N} async claims"
    );
    assert!(
        deletes >= n / 2,
        "{deletes} WAL flushes for {N} deletes beside async claims"
    );
}
