//! The whole server on one [`ManualClock`]: delays, TTR leases, `DEADLINE_SOON`, tube pauses,
//! reserve timeouts and the `stats` time fields, checked at chosen instants, to the
//! millisecond, with no real waiting.
//!
//! Each test starts [`Server::run`] on `127.0.0.1:0` with a manual clock whose time of day
//! starts on a whole second, and talks raw beanstalkd protocol bytes. Time moves only when a
//! test calls [`Time::at`]. Two kinds of check:
//!
//! - *Nothing yet*: a command from another connection at the instant (`stats-job`, `stats`,
//!   `reserve-with-timeout 0`). Every engine operation first carries out everything due at
//!   the server's clock reading, so its answer is the state at that instant.
//! - *Now*: a client blocked in `reserve` (or `reserve-with-timeout`) receives its reply with
//!   no command from anyone after the clock moved: only the server's timer driver, sleeping
//!   on the same clock, can have woken it. A driver that slept past the instant would hang
//!   the test (nextest's slow-timeout ends it) rather than pass.

#![allow(clippy::unwrap_used)]

mod util;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tickwheel_server::{Clock, Config, ManualClock};
use tickwheel_store::Durability;
use util::Running;

/// Where the tests' time of day starts: 2023-11-14 22:13:20 UTC, a whole second.
const START: Duration = Duration::from_secs(1_700_000_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A manual clock and the instant the test counts from.
struct Time {
    clock: ManualClock,
    origin: Instant,
}

impl Time {
    /// A clock reading `START + offset` as its time of day.
    fn starting_at(offset: Duration) -> Time {
        let clock = ManualClock::starting_at(UNIX_EPOCH + START + offset);
        let origin = clock.now();
        Time { clock, origin }
    }

    /// Moves the clock forward to `since` after its start.
    fn at(&self, since: Duration) {
        let elapsed = self.clock.now() - self.origin;
        assert!(
            since >= elapsed,
            "time runs forward: {since:?} < {elapsed:?}"
        );
        self.clock.advance(since - elapsed);
    }
}

/// Starts a server the way these tests want it.
async fn start_server(time: &Time, data_dir: Option<&Path>) -> Running {
    let config = Config {
        data_dir: data_dir.map(Path::to_path_buf),
        durability: Durability::Sync,
        clock: Arc::new(time.clock.clone()),
        ..Config::default()
    };
    Running::open(&config).await
}

/// A job put with a 10 s delay on a whole millisecond is due at exactly +10 s: not at
/// +9.999 s, and at +10 s the timer driver hands it to the client waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_ends_exactly_on_time() {
    let time = Time::starting_at(Duration::ZERO);
    let server = start_server(&time, None).await;
    let mut producer = server.client().await;
    let mut worker = server.client().await;
    worker.send_line("reserve").await;
    producer.until_waiting(1).await;
    let id = producer.put(0, 10, 60, "later").await;

    time.at(ms(9_999));
    let stats_job = format!("stats-job {id}");
    assert_eq!(producer.field(&stats_job, "state").await, "delayed");
    assert_eq!(producer.cmd("reserve-with-timeout 0").await, "TIMED_OUT");

    time.at(ms(10_000));
    assert_eq!(worker.reserved().await, id);
    assert_eq!(producer.field(&stats_job, "state").await, "reserved");
    server.shutdown().await;
}

/// A deadline earlier than the one the timer driver sleeps towards wakes it: with a job due
/// at +100 s pending, one put later with a 10 s delay reaches the waiting worker at +10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_deadline_wakes_the_sleeping_driver() {
    let time = Time::starting_at(Duration::ZERO);
    let server = start_server(&time, None).await;
    let mut c = server.client().await;
    let mut worker = server.client().await;
    worker.send_line("reserve").await;
    c.until_waiting(1).await;
    let late = c.put(0, 100, 60, "late").await;
    time.at(ms(1_000));
    let soon = c.put(0, 10, 60, "soon").await;

    time.at(ms(10_999));
    assert_eq!(
        c.field(&format!("stats-job {soon}"), "state").await,
        "delayed"
    );

    time.at(ms(11_000));
    assert_eq!(worker.reserved().await, soon);
    assert_eq!(
        c.field(&format!("stats-job {late}"), "state").await,
        "delayed"
    );
    server.shutdown().await;
}

/// A delay that starts mid-millisecond is rounded up, never down: with the clock 0.4 ms
/// past a millisecond, a 10 s delay is not over 10 s minus 0.1 ms later, and is over at most
/// one millisecond after its true end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_from_mid_millisecond_is_never_early() {
    let time = Time::starting_at(Duration::from_micros(400));
    let server = start_server(&time, None).await;
    let mut c = server.client().await;
    let id = c.put(0, 10, 60, "later").await;

    time.at(Duration::from_micros(9_999_900));
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");

    // The true end is at +10 s; the first whole millisecond at or after it is START + 10.001 s.
    time.at(Duration::from_micros(10_000_600));
    assert_eq!(
        c.cmd("reserve-with-timeout 0").await,
        format!("RESERVED {id} 5")
    );
    server.shutdown().await;
}

/// A reservation with TTR 10 taken at a whole millisecond: its owner, blocked in `reserve`,
/// gets `DEADLINE_SOON` at exactly +9 s (the 1 s safety margin), not at +8.999 s; the lease
/// is still held at +10 s and the job is back in ready for the next worker at +10.001 s
/// (the engine ends a lease strictly after its millisecond deadline, because a lease taken
/// mid-millisecond has a deadline rounded down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_warns_and_ends_on_time() {
    let time = Time::starting_at(Duration::ZERO);
    let server = start_server(&time, None).await;
    let mut c = server.client().await;
    let mut owner = server.client().await;
    let mut next = server.client().await;
    let id = c.put(0, 0, 10, "job").await;
    assert_eq!(
        owner.cmd("reserve-with-timeout 0").await,
        format!("RESERVED {id} 3")
    );
    owner.body(3).await;
    owner.send_line("reserve").await;
    next.send_line("reserve").await;
    c.until_waiting(2).await;

    time.at(ms(8_999));
    let stats_job = format!("stats-job {id}");
    assert_eq!(c.field("stats", "current-waiting").await, "2");

    time.at(ms(9_000));
    assert_eq!(owner.line().await, "DEADLINE_SOON");

    time.at(ms(10_000));
    assert_eq!(c.field(&stats_job, "state").await, "reserved");
    assert_eq!(c.field(&stats_job, "timeouts").await, "0");

    time.at(ms(10_001));
    assert_eq!(next.reserved().await, id);
    let stats = c.yaml(&stats_job).await;
    for (key, value) in [("timeouts", "1"), ("reserves", "2"), ("state", "reserved")] {
        assert!(
            stats.contains(&(key.into(), value.into())),
            "{key}: {stats:?}"
        );
    }
    server.shutdown().await;
}

/// `pause-tube default 5` at a whole millisecond: a ready job in the tube is not handed to
/// the waiting worker at +4.999 s, and is at +5 s, by the timer driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tube_pause_ends_on_time() {
    let time = Time::starting_at(Duration::ZERO);
    let server = start_server(&time, None).await;
    let mut c = server.client().await;
    let mut worker = server.client().await;
    assert_eq!(c.cmd("pause-tube default 5").await, "PAUSED");
    let id = c.put(0, 0, 60, "job").await;
    worker.send_line("reserve").await;
    c.until_waiting(1).await;

    time.at(ms(2_500));
    assert_eq!(c.field("stats-tube default", "pause").await, "5");
    assert_eq!(c.field("stats-tube default", "pause-time-left").await, "2");

    time.at(ms(4_999));
    assert_eq!(c.field(&format!("stats-job {id}"), "state").await, "ready");
    assert_eq!(c.field("stats-tube default", "pause-time-left").await, "0");

    time.at(ms(5_000));
    assert_eq!(worker.reserved().await, id);
    assert_eq!(c.field("stats-tube default", "pause").await, "0");
    server.shutdown().await;
}

/// `reserve-with-timeout 5` answers `TIMED_OUT` at exactly +5 s, from the timer driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserve_timeout_ends_on_time() {
    let time = Time::starting_at(Duration::ZERO);
    let server = start_server(&time, None).await;
    let mut c = server.client().await;
    let mut worker = server.client().await;
    worker.send_line("reserve-with-timeout 5").await;
    c.until_waiting(1).await;

    time.at(ms(4_999));
    assert_eq!(c.field("stats", "current-waiting").await, "1");

    time.at(ms(5_000));
    assert_eq!(worker.line().await, "TIMED_OUT");
    assert_eq!(c.field("stats", "current-waiting").await, "0");
    server.shutdown().await;
}

/// `stats-job` and `stats` time fields at chosen instants. Mid-second, the server's
/// whole seconds are beanstalkd's: the exact time left, truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_time_fields_at_chosen_instants() {
    let time = Time::starting_at(Duration::ZERO);
    let server = start_server(&time, None).await;
    let mut c = server.client().await;
    let delayed = c.put(0, 10, 60, "delayed").await;
    let leased = c.put(0, 0, 20, "leased").await;
    assert_eq!(
        c.cmd("reserve-with-timeout 0").await,
        format!("RESERVED {leased} 6")
    );
    c.body(6).await;

    // (instant in ms, delayed job's time-left, leased job's time-left, age, uptime)
    for (at, delay_left, lease_left, age) in [
        (500, "9", "19", "0"),
        (4_250, "5", "15", "4"),
        (9_999, "0", "10", "9"),
        (12_750, "0", "7", "12"),
    ] {
        time.at(ms(at));
        let delayed_stats = c.yaml(&format!("stats-job {delayed}")).await;
        let leased_stats = c.yaml(&format!("stats-job {leased}")).await;
        let get = |stats: &[(String, String)], key: &str| {
            stats.iter().find(|(k, _)| k == key).unwrap().1.clone()
        };
        if at < 10_000 {
            assert_eq!(
                get(&delayed_stats, "time-left"),
                delay_left,
                "delay at {at} ms"
            );
            assert_eq!(get(&delayed_stats, "state"), "delayed");
        } else {
            assert_eq!(get(&delayed_stats, "state"), "ready", "at {at} ms");
            assert_eq!(get(&delayed_stats, "time-left"), "0");
        }
        assert_eq!(
            get(&leased_stats, "time-left"),
            lease_left,
            "lease at {at} ms"
        );
        assert_eq!(get(&delayed_stats, "age"), age, "age at {at} ms");
        assert_eq!(c.field("stats", "uptime").await, age, "uptime at {at} ms");
    }
    server.shutdown().await;
}

/// The time of day stepping back (an NTP step) does not move the server's clock back: a
/// job's `age` and `time-left` do not jump, a delay given after the step is not cut short,
/// and a delayed job is still due at its wall-clock deadline, not earlier. (Two layers keep
/// this: the server hands the engine the largest reading it has seen, and the engine's own
/// clock never runs backwards; each alone passes this test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_of_day_step_back_moves_nothing_back() {
    let time = Time::starting_at(Duration::ZERO);
    let server = start_server(&time, None).await;
    let mut c = server.client().await;
    let id = c.put(0, 10, 60, "job").await;
    let stats_job = format!("stats-job {id}");

    time.at(ms(1_500));
    assert_eq!(c.field(&stats_job, "time-left").await, "8");
    time.clock
        .set_system_time(UNIX_EPOCH + START - Duration::from_secs(60));
    // The server keeps its latest reading (+1.5 s), not 61.5 s earlier.
    assert_eq!(c.field(&stats_job, "time-left").await, "8");
    assert_eq!(c.field(&stats_job, "age").await, "1");
    // A delay given now counts from that reading too: a deadline from the stepped-back time
    // of day would be in the engine's past, and the job ready at once.
    let second = c.put(0, 10, 60, "second").await;
    assert_eq!(
        c.field(&format!("stats-job {second}"), "state").await,
        "delayed"
    );
    assert_eq!(
        c.field(&format!("stats-job {second}"), "time-left").await,
        "9"
    );

    // 10 s later by the monotonic clock, the time of day is still 50.5 s before the deadline.
    time.at(ms(11_500));
    assert_eq!(c.field(&stats_job, "state").await, "delayed");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");

    time.clock
        .set_system_time(UNIX_EPOCH + START + Duration::from_millis(9_999));
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    time.clock
        .set_system_time(UNIX_EPOCH + START + Duration::from_millis(10_000));
    assert_eq!(
        c.cmd("reserve-with-timeout 0").await,
        format!("RESERVED {id} 3")
    );
    server.shutdown().await;
}

/// Deadlines are wall-clock times on disk: a job put with a 60 s delay, then the server
/// stopped and restarted 30.5 s later, has 29 s left and is due at exactly +60 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_survives_a_restart_by_the_time_of_day() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let before = Time::starting_at(Duration::ZERO);
    let server = start_server(&before, Some(&dir)).await;
    let id = server.client().await.put(0, 60, 60, "job").await;
    server.shutdown().await;

    let time = Time::starting_at(ms(30_500));
    let server = start_server(&time, Some(&dir)).await;
    let mut c = server.client().await;
    let mut worker = server.client().await;
    assert_eq!(c.field(&format!("stats-job {id}"), "time-left").await, "29");
    worker.send_line("reserve").await;
    c.until_waiting(1).await;

    time.at(ms(29_499));
    assert_eq!(
        c.field(&format!("stats-job {id}"), "state").await,
        "delayed"
    );

    time.at(ms(29_500));
    assert_eq!(worker.reserved().await, id);
    server.shutdown().await;
}
