//! Named scenarios of beanstalkd semantics, beside the randomised rule checker in
//! `tickwheel-testkit` (`run_queue_ops`).

use bytes::Bytes;
use tickwheel_queue::{
    Change, ClientId, Config, DurableState, Engine, Error, Event, JobState, Load, Reserve, TubeName,
};

const A: ClientId = ClientId(1);
const B: ClientId = ClientId(2);

fn engine() -> Engine {
    let mut e = Engine::new(Config::default(), 0);
    e.connect(A);
    e.connect(B);
    e
}

fn body(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn tube(name: &str) -> TubeName {
    TubeName::new(name).expect("valid name")
}

fn put(e: &mut Engine, now: u64, pri: u32, delay: u64, ttr: u64, text: &str) -> u64 {
    e.put(now, A, pri, delay, ttr, body(text))
        .expect("put accepted")
}

#[test]
fn priority_then_id_order() {
    let mut e = engine();
    let low = put(&mut e, 0, 100, 0, 10_000, "low");
    let urgent1 = put(&mut e, 0, 1, 0, 10_000, "u1");
    let urgent2 = put(&mut e, 0, 1, 0, 10_000, "u2");
    let order: Vec<_> = (0..3)
        .map(|_| match e.reserve(0, B, Some(0)) {
            Reserve::Job(job) => job.id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(order, [urgent1, urgent2, low]);
    assert_eq!(e.reserve(0, B, Some(0)), Reserve::TimedOut);
    // Holding a job in its last second, the worker is told so instead.
    e.advance(9_000);
    assert_eq!(e.reserve(9_000, B, Some(0)), Reserve::DeadlineSoon);
}

#[test]
fn ttr_expiry_returns_the_job_and_counts_a_timeout() {
    let mut e = engine();
    let id = put(&mut e, 0, 0, 0, 2_000, "x");
    assert!(matches!(e.reserve(0, B, None), Reserve::Job(_)));
    e.advance(2_000);
    assert_eq!(e.job_state(id), Some(JobState::Reserved));
    e.advance(2_001); // strictly after the deadline
    assert_eq!(e.job_state(id), Some(JobState::Ready));
    let stats = e.job_stats(id).expect("job exists");
    assert_eq!((stats.reserves, stats.timeouts), (1, 1));
    assert_eq!(e.stats().job_timeouts, 1);
    // The former holder cannot release it any more, but anyone may delete a ready job.
    assert_eq!(e.release(2_001, B, id, 0, 0), Err(Error::NotFound));
    assert_eq!(e.delete(2_001, B, id), Ok(()));
}

#[test]
fn deadline_soon_reaches_a_waiting_worker() {
    let mut e = engine();
    put(&mut e, 0, 0, 0, 5_000, "x");
    assert!(matches!(e.reserve(0, B, None), Reserve::Job(_)));
    assert_eq!(e.reserve(100, B, None), Reserve::Waiting);
    e.advance(3_999);
    assert!(e.take_events().is_empty());
    e.advance(4_000); // TTR 5 s: the last second starts at 4 s
    assert_eq!(e.take_events(), [Event::DeadlineSoon { client: B }]);
    // Asking again inside the margin answers at once.
    assert_eq!(e.reserve(4_500, B, None), Reserve::DeadlineSoon);
}

#[test]
fn deadline_soon_lasts_while_a_held_job_is_in_its_margin() {
    let mut e = engine();
    let x = put(&mut e, 0, 0, 0, 2_000, "x");
    let y = put(&mut e, 0, 0, 0, 10_000, "y");
    for _ in 0..2 {
        assert!(matches!(e.reserve(0, B, Some(0)), Reserve::Job(_)));
    }
    assert_eq!(e.reserve(999, B, Some(0)), Reserve::TimedOut);
    // x's last second.
    assert_eq!(e.reserve(1_000, B, Some(0)), Reserve::DeadlineSoon);
    // A touch starts x's TTR again: out of the margin until 2.5 s.
    assert_eq!(e.touch(1_500, B, x), Ok(()));
    assert_eq!(e.reserve(1_500, B, Some(0)), Reserve::TimedOut);
    assert_eq!(e.reserve(2_500, B, Some(0)), Reserve::DeadlineSoon);
    // A job leaving the client in its margin takes the warning with it.
    assert_eq!(e.bury(2_600, B, x, 0), Ok(()));
    assert_eq!(e.reserve(2_600, B, Some(0)), Reserve::TimedOut);
    // y's last second.
    assert_eq!(e.reserve(9_000, B, Some(0)), Reserve::DeadlineSoon);
    assert_eq!(e.delete(9_100, B, y), Ok(()));
    assert_eq!(e.reserve(9_100, B, Some(0)), Reserve::TimedOut);
    // Reserved again (kicked), x is not in a margin until its new TTR's last second.
    assert_eq!(e.kick(9_200, B, 1), Ok(1));
    assert!(matches!(e.reserve(9_200, B, Some(0)), Reserve::Job(j) if j.id == x));
    assert_eq!(e.reserve(10_199, B, Some(0)), Reserve::TimedOut);
    assert_eq!(e.reserve(10_200, B, Some(0)), Reserve::DeadlineSoon);
}

#[test]
fn reserve_with_timeout_times_out_exactly() {
    let mut e = engine();
    assert_eq!(e.reserve(0, B, Some(1_500)), Reserve::Waiting);
    e.advance(1_499);
    assert!(e.take_events().is_empty());
    e.advance(1_500);
    assert_eq!(e.take_events(), [Event::TimedOut { client: B }]);
}

#[test]
fn waiters_are_served_first_come_first_served() {
    let mut e = engine();
    let c = ClientId(3);
    e.connect(c);
    assert_eq!(e.reserve(0, B, None), Reserve::Waiting);
    assert_eq!(e.reserve(0, c, None), Reserve::Waiting);
    let first = put(&mut e, 1, 0, 0, 1000, "1");
    let second = put(&mut e, 2, 0, 0, 1000, "2");
    let got: Vec<_> = e
        .take_events()
        .into_iter()
        .map(|ev| match ev {
            Event::Reserved { client, job } => (client, job.id),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, [(B, first), (c, second)]);
}

#[test]
fn paused_tube_holds_its_jobs_until_the_pause_ends() {
    let mut e = engine();
    let id = put(&mut e, 0, 0, 0, 1000, "x");
    e.pause_tube(0, &tube("default"), 10_000)
        .expect("tube exists");
    assert_eq!(e.reserve(0, B, None), Reserve::Waiting);
    e.advance(9_999);
    assert!(e.take_events().is_empty());
    let stats = e.tube_stats(&tube("default")).expect("tube exists");
    assert_eq!((stats.pause, stats.pause_time_left), (10_000, 1));
    e.advance(10_000);
    assert!(matches!(&e.take_events()[..], [Event::Reserved { job, .. }] if job.id == id));
    assert_eq!(e.pause_tube(0, &tube("nosuch"), 1), Err(Error::NotFound));
}

#[test]
fn bury_and_kick_in_bury_order_then_delayed() {
    let mut e = engine();
    let ids: Vec<_> = (0..3).map(|i| put(&mut e, 0, i, 0, 1000, "x")).collect();
    let delayed = put(&mut e, 0, 0, 60_000, 1000, "later");
    for &id in ids.iter().rev() {
        assert_eq!(e.reserve_job(0, B, id).map(|j| j.id), Ok(id));
        e.bury(0, B, id, 7).expect("held by B");
    }
    assert_eq!(
        e.peek_state(0, A, JobState::Buried).map(|j| j.id),
        Ok(ids[2])
    );
    assert_eq!(e.kick(0, A, 2), Ok(2)); // buried first, oldest burial first
    assert_eq!(e.job_state(ids[2]), Some(JobState::Ready));
    assert_eq!(e.job_state(ids[1]), Some(JobState::Ready));
    assert_eq!(e.job_state(ids[0]), Some(JobState::Buried));
    assert_eq!(e.kick(0, A, 5), Ok(1));
    assert_eq!(e.kick(0, A, 5), Ok(1)); // nothing buried: the delayed job
    assert_eq!(e.job_state(delayed), Some(JobState::Ready));
    assert_eq!(
        e.job_stats(ids[0]).map(|s| (s.kicks, s.buries)),
        Some((1, 1))
    );
    assert_eq!(e.kick_job(0, ids[0]), Err(Error::NotFound)); // ready: not kickable
}

#[test]
fn tubes_come_and_go_with_their_users() {
    let mut e = engine();
    assert_eq!(e.watch(0, B, &tube("mail")), 2);
    e.use_tube(0, A, &tube("mail"));
    assert_eq!(e.tube_names(), [tube("default"), tube("mail")]);
    let id = put(&mut e, 0, 0, 0, 1000, "x");
    e.use_tube(0, A, &tube("default"));
    assert_eq!(e.ignore(0, B, &tube("mail")), Ok(1));
    assert_eq!(e.ignore(0, B, &tube("default")), Err(Error::NotIgnored));
    assert!(
        e.tube_stats(&tube("mail")).is_some(),
        "a tube with a job stays"
    );
    e.delete(0, A, id).expect("ready job");
    assert!(
        e.tube_stats(&tube("mail")).is_none(),
        "an empty, unreferenced tube goes"
    );
    assert_eq!(e.watched_tubes(B), [tube("default")]);
}

#[test]
fn reserved_jobs_of_a_closed_connection_become_ready() {
    let mut e = engine();
    let id = put(&mut e, 0, 0, 0, 60_000, "x");
    assert!(matches!(e.reserve(0, B, None), Reserve::Job(_)));
    e.disconnect(10, B);
    assert_eq!(e.job_state(id), Some(JobState::Ready));
    assert_eq!(e.stats().current_connections, 1);
}

#[test]
fn drain_mode_and_size_limit_refuse_puts() {
    let mut e = Engine::new(
        Config {
            max_job_size: 4,
            ..Config::default()
        },
        0,
    );
    e.connect(A);
    assert_eq!(
        e.put(0, A, 0, 0, 1000, body("12345")),
        Err(Error::JobTooBig)
    );
    assert!(e.put(0, A, 0, 0, 1000, body("1234")).is_ok());
    e.set_draining(true);
    assert_eq!(e.put(0, A, 0, 0, 1000, body("1")), Err(Error::Draining));
    assert!(e.stats().draining);
}

#[test]
fn restart_restores_durable_states_and_never_reuses_ids() {
    let mut e = engine();
    let ready = put(&mut e, 0, 5, 0, 1000, "ready");
    let delayed = put(&mut e, 0, 0, 10_000, 1000, "delayed");
    let overdue = put(&mut e, 0, 0, 1_000, 1000, "overdue");
    let buried = put(&mut e, 0, 0, 0, 1000, "buried");
    e.reserve_job(0, B, buried).expect("ready job");
    e.bury(0, B, buried, 9).expect("held by B");
    let reserved = put(&mut e, 0, 0, 0, 1000, "reserved");
    e.reserve_job(0, B, reserved).expect("ready job");
    let gone = put(&mut e, 0, 0, 0, 1000, "gone");
    e.delete(0, A, gone).expect("ready job");

    // Replay the durable changes into a map, as a store would.
    let mut records = std::collections::BTreeMap::new();
    let mut ids_end = 0;
    for change in e.take_changes() {
        match change {
            Change::Put(r) => {
                records.insert(r.id, r);
            }
            Change::Update {
                id,
                state,
                priority,
                history,
            } => {
                let r = records.get_mut(&id).expect("update after put");
                r.state = state;
                r.priority = priority;
                r.history = history;
            }
            Change::Delete { id } => {
                records.remove(&id);
            }
            Change::ReserveIds { end } => ids_end = end,
        }
    }
    assert_eq!(records[&buried].state, DurableState::Buried);

    // Down for 5 s: the 1 s delay passed, the 10 s one did not.
    let mut e = Engine::recover(Config::default(), 5_000, ids_end, records.into_values());
    assert_eq!(e.job_state(ready), Some(JobState::Ready));
    assert_eq!(e.job_state(delayed), Some(JobState::Delayed));
    assert_eq!(e.job_state(overdue), Some(JobState::Ready));
    assert_eq!(e.job_state(buried), Some(JobState::Buried));
    assert_eq!(e.job_state(reserved), Some(JobState::Ready));
    assert_eq!(e.job_state(gone), None);
    assert_eq!(e.job_stats(buried).map(|s| s.priority), Some(9));
    // The delay given and the counters as of each job's last durable change, as beanstalkd's
    // binlog keeps them: the bury recorded the reserve before it. A buried job counts one
    // more bury at each start, as beanstalkd's replay buries it again.
    let counters = |e: &Engine, id| {
        e.job_stats(id)
            .map(|s| (s.delay, s.reserves, s.releases, s.buries, s.kicks))
    };
    assert_eq!(counters(&e, buried), Some((0, 1, 0, 2, 0)));
    assert_eq!(counters(&e, delayed), Some((10_000, 0, 0, 0, 0)));
    // A reserve alone changes nothing durable: forgotten, as in beanstalkd.
    assert_eq!(counters(&e, reserved), Some((0, 0, 0, 0, 0)));
    e.connect(A);
    let fresh = put(&mut e, 5_000, 0, 0, 1000, "new");
    assert!(fresh > gone, "id {fresh} reused (last was {gone})");
    e.advance(10_000);
    assert_eq!(e.job_state(delayed), Some(JobState::Ready));
}

fn windowed(window: u64) -> Engine {
    let mut e = Engine::new(
        Config {
            window: Some(window),
            ..Config::default()
        },
        0,
    );
    e.connect(A);
    e.connect(B);
    e
}

/// The durable record of every job put so far, as a store would hold it.
fn records(changes: &[Change]) -> std::collections::BTreeMap<u64, tickwheel_queue::JobRecord> {
    let mut map = std::collections::BTreeMap::new();
    for change in changes {
        match change {
            Change::Put(r) => {
                map.insert(r.id, r.clone());
            }
            Change::Update {
                id,
                state,
                priority,
                history,
            } => {
                if let Some(r) = map.get_mut(id) {
                    r.state = *state;
                    r.priority = *priority;
                    r.history = *history;
                }
            }
            Change::Delete { id } => {
                map.remove(id);
            }
            Change::ReserveIds { .. } => {}
        }
    }
    map
}

#[test]
fn far_jobs_stay_out_of_memory_until_their_window() {
    let mut e = windowed(10_000);
    let near = put(&mut e, 0, 0, 5_000, 1000, "near");
    let far = put(&mut e, 0, 0, 60_000, 1000, "far");
    let changes = e.take_changes();
    assert!(
        e.needs_load(far),
        "a job due beyond the window is not in memory"
    );
    assert!(!e.needs_load(near));
    assert_eq!(e.job_count(), 2);
    assert_eq!(e.stats().delayed, 2, "far jobs still count as delayed");
    // The engine asks to move the window once half of it has passed.
    assert_eq!(e.next_deadline(), Some(5_000));
    e.advance(5_000);
    assert_eq!(e.window_load(5_000), Some((10_000, 15_000)));
    e.load_window(Vec::new());
    // Further on, the far job's range is loaded from the store and it fires on time.
    let store = records(&changes);
    let mut now = 5_000;
    while e.needs_load(far) {
        now = e.next_deadline().expect("a window move is due");
        e.advance(now);
        if let Some((from, to)) = e.window_load(now) {
            let due: Vec<_> = store
                .values()
                .filter(|r| matches!(r.state, DurableState::Delayed { until } if until >= from && until < to))
                .cloned()
                .collect();
            e.load_window(due);
        }
    }
    assert!(now < 60_000, "loaded before it is due (at {now})");
    e.advance(59_999);
    assert_eq!(e.job_state(far), Some(JobState::Delayed));
    e.advance(60_000);
    assert_eq!(e.job_state(far), Some(JobState::Ready));
}

/// A job released beyond the memory window leaves memory; its delay and counters come back
/// with its record.
#[test]
fn a_job_released_far_keeps_its_delay_and_counters() {
    let mut e = windowed(10_000);
    let id = put(&mut e, 0, 0, 0, 1000, "x");
    e.reserve_job(0, B, id).expect("ready");
    e.release(0, B, id, 1, 0).expect("held");
    e.reserve_job(0, B, id).expect("ready");
    e.bury(0, B, id, 1).expect("held");
    assert_eq!(e.kick_job(0, id), Ok(()));
    e.reserve_job(0, B, id).expect("ready");
    e.release(0, B, id, 1, 60_000).expect("held");
    let store = records(&e.take_changes());
    assert!(e.needs_load(id), "released beyond the window");
    e.load_job(id, Some(store[&id].clone()));
    let s = e.job_stats(id).expect("loaded");
    assert_eq!(
        (s.delay, s.reserves, s.releases, s.buries, s.kicks),
        (60_000, 3, 2, 1, 1)
    );
}

#[test]
fn a_window_load_racing_a_delete_does_not_resurrect_the_job() {
    let mut e = windowed(10_000);
    let far = put(&mut e, 0, 0, 12_000, 1000, "far");
    let store = records(&e.take_changes());
    e.advance(5_000);
    let (from, to) = e.window_load(5_000).expect("window move due");
    assert!((from..to).contains(&12_000));
    // The store is read for the load; meanwhile a client deletes the job by id.
    let stale_read: Vec<_> = store.values().cloned().collect();
    assert_eq!(
        e.delete(5_000, A, far),
        Err(Error::NeedsLoad(Load::Job(far)))
    );
    e.load_job(far, Some(store[&far].clone()));
    e.delete(5_000, A, far).expect("loaded job can be deleted");
    e.load_window(stale_read);
    assert_eq!(e.job_state(far), None, "the deleted job came back");
    assert_eq!(e.job_count(), 0);
}

/// Sans-I/O loads: an operation that needs a far job says so, does nothing (no counter moves),
/// and runs once the caller has handed over what the store holds, found or not.
#[test]
fn operations_on_far_jobs_ask_for_a_load_and_then_run() {
    let mut e = windowed(10_000);
    let far = put(&mut e, 0, 0, 60_000, 1000, "far");
    let store = records(&e.take_changes());
    let asks = Err(Error::NeedsLoad(Load::Job(far)));
    assert_eq!(e.peek(0, far).map(|j| j.id), asks);
    assert_eq!(e.stats_job(0, far).map(|s| s.id), asks);
    assert_eq!(e.kick_job(0, far), Err(Error::NeedsLoad(Load::Job(far))));
    assert_eq!(
        e.stats().cmd.peek,
        0,
        "a command that asked for a load is not counted"
    );
    // The job is in the store: loaded, then found.
    e.load_job(far, Some(store[&far].clone()));
    assert_eq!(e.peek(0, far).map(|j| j.id), Ok(far));
    // The store says it holds nothing under an id: not found.
    let other = put(&mut e, 0, 0, 60_000, 1000, "another far job");
    let _ = e.take_changes();
    assert_eq!(
        e.delete(0, A, other),
        Err(Error::NeedsLoad(Load::Job(other)))
    );
    e.load_job(other, None);
    assert_eq!(e.delete(0, A, other), Err(Error::NotFound));
    // peek-delayed and kick ask for the tube's earliest far jobs.
    let mut e = windowed(10_000);
    let _ = put(&mut e, 0, 0, 60_000, 1000, "far");
    assert_eq!(
        e.peek_state(0, A, JobState::Delayed).map(|j| j.id),
        Err(Error::NeedsLoad(Load::Widen))
    );
    assert_eq!(e.kick(0, A, 1), Err(Error::NeedsLoad(Load::Widen)));
    e.skip_load(Load::Widen);
    assert_eq!(e.kick(0, A, 1), Ok(0), "skipped: runs on what is in memory");
}

/// `delete_stored` (a node whose database deleted the job first) is `delete` without the
/// store's change: the same answers, states and counters.
#[test]
fn delete_stored_is_delete_without_its_change() {
    let mut plain = engine();
    let mut stored = engine();
    for e in [&mut plain, &mut stored] {
        put(e, 0, 1, 0, 10_000, "held by B");
        put(e, 0, 2, 0, 10_000, "ready");
        put(e, 0, 1, 5_000, 10_000, "delayed");
        assert!(matches!(e.reserve(0, B, Some(0)), Reserve::Job(job) if job.id == 1));
        e.take_changes();
    }
    // Not the holder, and no such job: refused by both, nothing recorded.
    for (client, id) in [(A, 1), (B, 99)] {
        assert_eq!(plain.delete(10, client, id), Err(Error::NotFound));
        assert_eq!(stored.delete_stored(10, client, id), Err(Error::NotFound));
    }
    for (now, client, id) in [(20, B, 1), (30, A, 2), (40, A, 3)] {
        assert_eq!(plain.delete(now, client, id), Ok(()));
        assert_eq!(stored.delete_stored(now, client, id), Ok(()));
        assert_eq!(plain.take_changes(), [Change::Delete { id }]);
        assert_eq!(stored.take_changes(), []);
        assert_eq!(stored.job_state(id), None);
        assert_eq!(plain.stats(), stored.stats());
        assert_eq!(
            plain.stats_tube(now, &tube("default")),
            stored.stats_tube(now, &tube("default"))
        );
    }
    assert_eq!(stored.stats().cmd.delete, 5);
}

/// `release_stored` and `bury_stored` (a node whose database released or buried the job
/// first) are `release` and `bury` without the store's change: the same answers, states,
/// counters and waiting clients served.
#[test]
fn release_and_bury_stored_are_release_and_bury_without_their_change() {
    let mut plain = engine();
    let mut stored = engine();
    for e in [&mut plain, &mut stored] {
        for name in ["one", "two", "three", "four"] {
            put(e, 0, 1, 0, 10_000, name);
        }
        for _ in 0..4 {
            assert!(matches!(e.reserve(0, B, Some(0)), Reserve::Job(_)));
        }
        e.take_changes();
    }
    // Not the holder, and no such job: refused by both, nothing recorded.
    for (client, id) in [(A, 1), (B, 99)] {
        assert_eq!(plain.release(10, client, id, 5, 0), Err(Error::NotFound));
        assert_eq!(
            stored.release_stored(10, client, id, 5, 0),
            Err(Error::NotFound)
        );
        assert_eq!(plain.bury(10, client, id, 5), Err(Error::NotFound));
        assert_eq!(stored.bury_stored(10, client, id, 5), Err(Error::NotFound));
        assert_eq!(plain.take_changes(), []);
        assert_eq!(stored.take_changes(), []);
    }
    let check = |plain: &mut Engine, stored: &mut Engine, now: u64, id: u64, state: JobState| {
        assert_eq!(
            plain.take_changes().len(),
            1,
            "job {id}: release or bury records one"
        );
        assert_eq!(stored.take_changes(), [], "job {id}");
        assert_eq!(plain.job_state(id), Some(state), "job {id}");
        assert_eq!(stored.job_state(id), Some(state), "job {id}");
        assert_eq!(plain.stats(), stored.stats(), "job {id}");
        assert_eq!(
            plain.stats_tube(now, &tube("default")),
            stored.stats_tube(now, &tube("default")),
            "job {id}"
        );
        assert_eq!(
            plain.stats_job(now, id),
            stored.stats_job(now, id),
            "job {id}"
        );
    };
    // Released ready, released with a delay, buried.
    assert_eq!(plain.release(20, B, 1, 7, 0), Ok(()));
    assert_eq!(stored.release_stored(20, B, 1, 7, 0), Ok(()));
    check(&mut plain, &mut stored, 20, 1, JobState::Ready);
    assert_eq!(plain.release(30, B, 2, 7, 5_000), Ok(()));
    assert_eq!(stored.release_stored(30, B, 2, 7, 5_000), Ok(()));
    check(&mut plain, &mut stored, 30, 2, JobState::Delayed);
    assert_eq!(plain.bury(40, B, 3, 9), Ok(()));
    assert_eq!(stored.bury_stored(40, B, 3, 9), Ok(()));
    check(&mut plain, &mut stored, 40, 3, JobState::Buried);
    // A client waiting when the job comes back gets it, on both.
    for e in [&mut plain, &mut stored] {
        assert!(matches!(e.reserve(50, A, None), Reserve::Job(job) if job.id == 1));
        assert!(matches!(e.reserve(50, A, None), Reserve::Waiting));
    }
    assert_eq!(plain.release(60, B, 4, 1, 0), Ok(()));
    assert_eq!(stored.release_stored(60, B, 4, 1, 0), Ok(()));
    check(&mut plain, &mut stored, 60, 4, JobState::Reserved);
    let events = plain.take_events();
    assert_eq!(events.len(), 1, "the waiting client is served: {events:?}");
    assert_eq!(events, stored.take_events());
    assert_eq!(stored.stats().cmd.release, 5);
    assert_eq!(stored.stats().cmd.bury, 3);
}

/// `kick_stored` and `kick_job_stored` (a node whose database kicked the jobs first) follow
/// `kick` and `kick-job` for the jobs the engine holds buried or delayed, without the store's
/// change: the same states, counters and waiting clients served; ids it does not hold, or
/// holds in another state, are left alone.
#[test]
fn kick_stored_follows_kicks_without_their_change() {
    let mut plain = engine();
    let mut stored = engine();
    for e in [&mut plain, &mut stored] {
        put(e, 0, 1, 0, 10_000, "buried");
        put(e, 0, 1, 5_000, 10_000, "delayed");
        put(e, 0, 1, 0, 10_000, "ready");
        assert!(matches!(e.reserve(0, B, Some(0)), Reserve::Job(job) if job.id == 1));
        assert_eq!(e.bury(0, B, 1, 1), Ok(()));
        assert!(matches!(e.reserve(0, B, Some(0)), Reserve::Job(job) if job.id == 3));
        assert!(matches!(e.reserve(0, A, None), Reserve::Waiting));
        e.take_changes();
    }
    assert_eq!(plain.kick(10, A, 5), Ok(1));
    // Job 3 is reserved here, 99 unknown: left alone.
    assert_eq!(stored.kick_stored(10, &[1, 3, 99]), 1);
    assert_eq!(plain.take_changes().len(), 1);
    assert_eq!(stored.take_changes(), []);
    let events = plain.take_events();
    assert_eq!(
        events.len(),
        1,
        "the waiting client gets the kicked job: {events:?}"
    );
    assert_eq!(events, stored.take_events());
    assert_eq!(plain.kick_job(20, 2), Ok(()));
    assert!(stored.kick_job_stored(20, 2));
    assert!(!stored.kick_job_stored(20, 2), "ready now");
    assert_eq!(plain.take_changes().len(), 1);
    assert_eq!(stored.take_changes(), []);
    for id in 1..=3 {
        assert_eq!(plain.job_state(id), stored.job_state(id), "job {id}");
        assert_eq!(
            plain.stats_job(20, id),
            stored.stats_job(20, id),
            "job {id}"
        );
    }
    assert_eq!(stored.job_state(2), Some(JobState::Ready));
    assert_eq!(plain.stats(), stored.stats());
    assert_eq!(stored.stats().cmd.kick, 1);
}
