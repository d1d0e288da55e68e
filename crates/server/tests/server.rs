//! End-to-end tests of the server library over TCP: each test starts [`Server::run`] on
//! `127.0.0.1:0` with a fresh data directory and talks raw beanstalkd protocol bytes
//! (the mini-redis `tests/server.rs` pattern). Timing assertions are lower bounds only.

#![allow(clippy::unwrap_used)]

mod util;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tickwheel_server::{Config, Listener, Server};
use tickwheel_store::Durability;
use tokio_util::sync::CancellationToken;
use util::{Client, Running};

/// Maximum job size used by these tests.
const MAX_JOB: usize = 1024;

/// Starts a server the way these tests want it.
async fn start_server(dir: &Path) -> Running {
    let config = Config {
        data_dir: Some(dir.to_path_buf()),
        durability: Durability::Sync,
        max_job_size: MAX_JOB,
        ..Config::default()
    };
    Running::open(&config).await
}

fn temp_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_reserve_delete_round_trip() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let id = c.put(10, 0, 60, "hello").await;
    assert_eq!(c.job_cmd(&format!("peek {id}")).await.1.unwrap(), b"hello");
    let (got, body) = c.reserve(0).await;
    assert_eq!((got, body.as_str()), (id, "hello"));
    assert_eq!(c.job_field(id, "state").await, "reserved");
    assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED");
    assert_eq!(c.cmd(&format!("delete {id}")).await, "NOT_FOUND");
    assert_eq!(c.cmd(&format!("peek {id}")).await, "NOT_FOUND");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    // An empty body is a job too.
    let empty = c.put(0, 0, 1, "").await;
    assert!(empty > id);
    assert_eq!(c.reserve(0).await, (empty, String::new()));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_job_is_not_reservable_before_its_delay() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let before_put = Instant::now();
    let id = c.put(0, 1, 60, "later").await;
    assert_eq!(c.job_field(id, "state").await, "delayed");
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    assert_eq!(c.job_cmd("peek-delayed").await.1.unwrap(), b"later");
    assert_eq!(c.cmd("peek-ready").await, "NOT_FOUND");
    let (got, _) = c.reserve(5).await;
    assert_eq!(got, id);
    // Never early. The server keeps milliseconds, so allow less than one of truncation.
    let waited = before_put.elapsed();
    assert!(
        waited >= Duration::from_millis(999),
        "reserved after {waited:?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_reserve_is_answered_by_a_put_from_another_connection() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut worker = server.client().await;
    let mut producer = server.client().await;
    worker.send(b"reserve\r\n").await;
    // Let the reserve register as waiting before the put arrives.
    for _ in 0..100 {
        let stats = producer.yaml("stats-tube default").await;
        if stats
            .iter()
            .any(|(k, v)| k == "current-waiting" && v == "1")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let id = producer.put(0, 0, 60, "work").await;
    let line = worker.line().await;
    assert_eq!(line, format!("RESERVED {id} 4"));
    assert_eq!(worker.body(4).await, b"work");
    // And a waiting reserve on a watched tube other than `default`.
    assert_eq!(worker.cmd("watch jobs").await, "WATCHING 2");
    worker.send(b"reserve-with-timeout 10\r\n").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(producer.cmd("use jobs").await, "USING jobs");
    let id2 = producer.put(0, 0, 60, "more").await;
    assert_eq!(worker.line().await, format!("RESERVED {id2} 4"));
    assert_eq!(worker.body(4).await, b"more");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttr_expiry_returns_the_job_to_ready() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut first = server.client().await;
    let mut second = server.client().await;
    let id = first.put(0, 0, 1, "slow").await;
    let reserved_at = Instant::now();
    assert_eq!(first.reserve(0).await.0, id);
    // Within its last second of TTR, a further reserve by the same worker says so.
    assert_eq!(first.cmd("reserve-with-timeout 0").await, "DEADLINE_SOON");
    // Another worker gets it once the TTR has run out.
    assert_eq!(second.reserve(5).await.0, id);
    assert!(reserved_at.elapsed() >= Duration::from_millis(999));
    assert_eq!(second.job_field(id, "timeouts").await, "1");
    assert_eq!(second.job_field(id, "reserves").await, "2");
    // The first worker no longer holds it.
    assert_eq!(first.cmd(&format!("touch {id}")).await, "NOT_FOUND");
    assert_eq!(first.cmd(&format!("delete {id}")).await, "NOT_FOUND");
    assert_eq!(second.cmd(&format!("touch {id}")).await, "TOUCHED");
    assert_eq!(second.cmd(&format!("delete {id}")).await, "DELETED");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bury_and_kick() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let a = c.put(5, 0, 60, "a").await;
    let b = c.put(5, 0, 60, "b").await;
    assert_eq!(c.reserve(0).await.0, a);
    assert_eq!(c.cmd(&format!("bury {a} 7")).await, "BURIED");
    assert_eq!(c.reserve(0).await.0, b);
    assert_eq!(c.cmd(&format!("bury {b} 8")).await, "BURIED");
    assert_eq!(c.cmd(&format!("bury {b} 8")).await, "NOT_FOUND");
    assert_eq!(c.job_field(a, "state").await, "buried");
    assert_eq!(c.job_field(a, "pri").await, "7");
    assert_eq!(c.job_cmd("peek-buried").await.0, format!("FOUND {a} 1"));
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    assert_eq!(c.cmd("kick 1").await, "KICKED 1");
    assert_eq!(c.job_field(a, "state").await, "ready");
    assert_eq!(c.job_field(a, "kicks").await, "1");
    assert_eq!(c.cmd(&format!("kick-job {b}")).await, "KICKED");
    assert_eq!(c.cmd(&format!("kick-job {b}")).await, "NOT_FOUND");
    assert_eq!(c.cmd("kick 10").await, "KICKED 0");
    assert_eq!(c.reserve(0).await.0, a);
    assert_eq!(c.reserve(0).await.0, b);
    // Kick moves delayed jobs when nothing is buried.
    let d = c.put(0, 100, 60, "d").await;
    assert_eq!(c.cmd("kick 5").await, "KICKED 1");
    assert_eq!(c.job_field(d, "state").await, "ready");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_tube_holds_ready_jobs() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    assert_eq!(c.cmd("pause-tube nosuchtube 1").await, "NOT_FOUND");
    let id = c.put(0, 0, 60, "held").await;
    let paused_at = Instant::now();
    assert_eq!(c.cmd("pause-tube default 1").await, "PAUSED");
    let stats = c.yaml("stats-tube default").await;
    assert!(stats.contains(&("pause".into(), "1".into())), "{stats:?}");
    assert!(stats.contains(&("cmd-pause-tube".into(), "1".into())));
    assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
    assert_eq!(c.reserve(5).await.0, id);
    assert!(paused_at.elapsed() >= Duration::from_millis(999));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_keys_are_present() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let id = c.put(3, 0, 60, "x").await;
    let keys = |s: Vec<(String, String)>| s.into_iter().map(|(k, _)| k).collect::<Vec<_>>();

    let stats = keys(c.yaml("stats").await);
    for key in [
        "current-jobs-urgent",
        "current-jobs-ready",
        "cmd-put",
        "cmd-reserve-with-timeout",
        "cmd-pause-tube",
        "job-timeouts",
        "total-jobs",
        "max-job-size",
        "current-tubes",
        "current-connections",
        "current-producers",
        "current-workers",
        "current-waiting",
        "total-connections",
        "pid",
        "version",
        "rusage-utime",
        "rusage-stime",
        "uptime",
        "binlog-oldest-index",
        "binlog-current-index",
        "binlog-records-migrated",
        "binlog-records-written",
        "binlog-max-size",
        "draining",
        "id",
        "hostname",
        "os",
        "platform",
    ] {
        assert!(stats.iter().any(|k| k == key), "stats has no {key}");
    }
    let s = c.yaml("stats").await;
    assert!(s.contains(&("max-job-size".into(), MAX_JOB.to_string())));
    assert!(s.contains(&("current-jobs-urgent".into(), "1".into())));

    let job = keys(c.yaml(&format!("stats-job {id}")).await);
    assert_eq!(
        job,
        [
            "id",
            "tube",
            "state",
            "pri",
            "age",
            "delay",
            "ttr",
            "time-left",
            "file",
            "reserves",
            "timeouts",
            "releases",
            "buries",
            "kicks"
        ]
    );
    let tube = keys(c.yaml("stats-tube default").await);
    assert_eq!(
        tube,
        [
            "name",
            "current-jobs-urgent",
            "current-jobs-ready",
            "current-jobs-reserved",
            "current-jobs-delayed",
            "current-jobs-buried",
            "total-jobs",
            "current-using",
            "current-watching",
            "current-waiting",
            "cmd-delete",
            "cmd-pause-tube",
            "pause",
            "pause-time-left"
        ]
    );
    assert_eq!(c.cmd("stats-tube nosuchtube").await, "NOT_FOUND");
    assert_eq!(c.cmd("stats-job 999999").await, "NOT_FOUND");
    assert_eq!(c.cmd("list-tubes").await, "OK 14");
    assert_eq!(c.body(14).await, b"---\n- default\n");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_too_big_leaves_the_connection_usable() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let max = "m".repeat(MAX_JOB);
    let id = c.put(0, 0, 60, &max).await;
    let too_big = "b".repeat(MAX_JOB + 1);
    c.send(format!("put 0 0 60 {}\r\n{too_big}\r\n", too_big.len()).as_bytes())
        .await;
    assert_eq!(c.line().await, "JOB_TOO_BIG");
    // The body was skipped, not read as commands.
    assert_eq!(c.cmd("list-tube-used").await, "USING default");
    let (line, body) = c.job_cmd(&format!("peek {id}")).await;
    assert_eq!(line, format!("FOUND {id} {MAX_JOB}"));
    assert_eq!(body.unwrap(), max.as_bytes());
    let next = c.put(0, 0, 60, "small").await;
    assert!(next > id);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_survive_a_restart_in_their_states() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let ready = c.put(4, 0, 60, "ready").await;
    assert_eq!(c.cmd("use other").await, "USING other");
    let delayed = c.put(5, 100, 30, "delayed").await;
    let buried = c.put(6, 0, 60, "buried").await;
    let deleted = c.put(7, 0, 60, "deleted").await;
    assert_eq!(c.cmd("watch other").await, "WATCHING 2");
    assert_eq!(c.cmd("ignore default").await, "WATCHING 1");
    assert_eq!(c.reserve(0).await.0, buried);
    assert_eq!(c.cmd(&format!("bury {buried} 9")).await, "BURIED");
    assert_eq!(c.cmd(&format!("delete {deleted}")).await, "DELETED");
    // Reserved when the server stops: ready again after the restart.
    let reserved = c.put(8, 0, 60, "reserved").await;
    assert_eq!(c.reserve(0).await.0, reserved);
    server.shutdown().await;
    drop(c);

    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let expect = [
        (ready, "default", "ready", "4", "ready"),
        (delayed, "other", "delayed", "5", "delayed"),
        (buried, "other", "buried", "9", "buried"),
        (reserved, "other", "ready", "8", "reserved"),
    ];
    for (id, tube, state, pri, body) in expect {
        assert_eq!(c.job_field(id, "tube").await, tube, "job {id}");
        assert_eq!(c.job_field(id, "state").await, state, "job {id}");
        assert_eq!(c.job_field(id, "pri").await, pri, "job {id}");
        let (_, got) = c.job_cmd(&format!("peek {id}")).await;
        assert_eq!(got.unwrap(), body.as_bytes(), "job {id}");
    }
    assert_eq!(c.job_field(delayed, "ttr").await, "30");
    // The store keeps the deadline, not the delay given to `put`: after a restart `delay`
    // is what was left of it (reported to the owner; listed in docs/protocol.md).
    let delay: u32 = c.job_field(delayed, "delay").await.parse().unwrap();
    assert!((98..=100).contains(&delay), "delay {delay}");
    let left: u32 = c.job_field(delayed, "time-left").await.parse().unwrap();
    assert!(left <= 100, "time-left {left}");
    assert_eq!(c.cmd(&format!("peek {deleted}")).await, "NOT_FOUND");
    // Ids continue above the old ones, even above a deleted last one.
    let fresh = c.put(0, 0, 60, "fresh").await;
    assert!(fresh > reserved, "{fresh} after {reserved}");
    let stats = c.yaml("stats-tube other").await;
    for (key, value) in [
        ("current-jobs-ready", "1"),
        ("current-jobs-delayed", "1"),
        ("current-jobs-buried", "1"),
        ("current-jobs-reserved", "0"),
    ] {
        assert!(
            stats.contains(&(key.into(), value.into())),
            "{key} != {value}: {stats:?}"
        );
    }
    server.shutdown().await;

    // And a second restart (recovering what the first recovery wrote) keeps them too.
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    assert_eq!(c.job_field(buried, "state").await, "buried");
    assert_eq!(c.job_field(fresh, "state").await, "ready");
    let after = c.put(0, 0, 60, "after").await;
    assert!(after > fresh);
    server.shutdown().await;
}

/// One server per data directory: a second one is refused at once, naming the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_directory_is_refused() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let config = Config {
        data_dir: Some(dir.clone()),
        ..Config::default()
    };
    let err = match Server::open(&config) {
        Ok(_) => panic!("a second server opened {}", dir.display()),
        Err(err) => format!("{err:#}"),
    };
    let expect = format!("{} is in use by pid {}", dir.display(), std::process::id());
    assert!(err.contains(&expect), "{err}");
    // The first one is unaffected, and once it stops the directory is free again.
    let mut c = server.client().await;
    let id = c.put(0, 0, 60, "still here").await;
    server.shutdown().await;
    drop(c);
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    assert_eq!(c.job_field(id, "state").await, "ready");
    server.shutdown().await;
}

/// Without a data directory nothing is kept: beanstalkd without `-b`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_config_keeps_jobs_in_memory_only() {
    assert!(Config::default().data_dir.is_none());
    for _ in 0..2 {
        let server = Server::open(&Config::default()).unwrap();
        let listener = Listener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.run(listener, stop.clone()));
        let mut c = Client::connect(addr).await;
        // Fresh every time: the first id is 1 and nothing is ready.
        assert_eq!(c.cmd("reserve-with-timeout 0").await, "TIMED_OUT");
        assert_eq!(c.put(0, 0, 60, "lost on restart").await, 1);
        stop.cancel();
        task.await.unwrap();
    }
}

/// Stopping the server ends every connection: one waiting for its next command, one blocked
/// in `reserve` (answered `TIMED_OUT` first) and one blocked in `reserve` that has pipelined
/// a command behind it (answered before the close). Each connection waits on its own child
/// of the server's token (not observable here): this checks that stopping still reaches
/// every kind of wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_ends_idle_and_reserving_connections() {
    let server = Running::open(&Config::default()).await;
    let mut idle = server.client().await;
    assert_eq!(idle.cmd("use t").await, "USING t");
    let mut reserving = server.client().await;
    reserving.send_line("reserve").await;
    let mut pipelined = server.client().await;
    pipelined.send_line("reserve-with-timeout 100").await;
    pipelined.send_line("stats-tube default").await;
    // Both reserves are waiting once the server counts them.
    let mut probe = server.client().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = probe.yaml("stats").await;
        if stats.contains(&("current-waiting".to_string(), "2".to_string())) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reserves never waited: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::timeout(Duration::from_secs(60), async {
        server.shutdown().await;
        assert_eq!(reserving.line().await, "TIMED_OUT");
        reserving.closed().await;
        assert_eq!(pipelined.line().await, "TIMED_OUT");
        // What the client sent before the stop is still answered.
        let tube = pipelined.yaml_reply("stats-tube default").await;
        assert_eq!(tube[0], ("name".to_string(), "default".to_string()));
        pipelined.closed().await;
        idle.closed().await;
        probe.closed().await;
    })
    .await
    .expect("the server did not stop");
}

/// beanstalkd truncates the exact time left: right after `reserve` with TTR 10 (or a `put`
/// with delay 10, or `pause-tube` for 10 s) it says 9, since some time has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_left_right_after_a_state_change_is_truncated_like_beanstalkd() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let started = Instant::now();
    let reserved = c.put(0, 0, 10, "lease").await;
    assert_eq!(c.reserve(0).await.0, reserved);
    let lease: u64 = c.job_field(reserved, "time-left").await.parse().unwrap();
    let delayed = c.put(0, 10, 60, "delayed").await;
    let delay: u64 = c.job_field(delayed, "time-left").await.parse().unwrap();
    assert_eq!(c.cmd("pause-tube default 10").await, "PAUSED");
    let pause = c
        .yaml("stats-tube default")
        .await
        .into_iter()
        .find(|(k, _)| k == "pause-time-left")
        .unwrap()
        .1;
    let pause: u64 = pause.parse().unwrap();
    // Each was read less than a second after its start (unless this machine stalled for one:
    // then one less is right too).
    let slack = started.elapsed().as_secs();
    for (what, left) in [("lease", lease), ("delay", delay), ("pause", pause)] {
        assert!(
            left <= 9 && left + slack >= 9,
            "{what}: time-left {left} after {slack} s"
        );
    }
    server.shutdown().await;
}

/// Jobs due beyond the memory window (default 10 min) live in the store only; every command
/// that names one, or looks at a tube's earliest delayed job, must find it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_jobs_are_found_by_id_by_peek_delayed_and_by_kick() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut c = server.client().await;
    let later = c.put(1, 7200, 60, "in two hours").await;
    let sooner = c.put(2, 3600, 60, "in an hour").await;
    let stats = c.yaml("stats-tube default").await;
    assert!(
        stats.contains(&("current-jobs-delayed".into(), "2".into())),
        "{stats:?}"
    );
    // By id: peek and stats-job read it from the store.
    let (line, body) = c.job_cmd(&format!("peek {later}")).await;
    assert_eq!(line, format!("FOUND {later} 12"));
    assert_eq!(body.unwrap(), b"in two hours");
    assert_eq!(c.job_field(later, "state").await, "delayed");
    // The tube's earliest delayed job, although `later` is the one in memory now.
    let (line, _) = c.job_cmd("peek-delayed").await;
    assert_eq!(line, format!("FOUND {sooner} 10"));
    // A kick takes the earliest delayed job: `sooner`, then `later`.
    assert_eq!(c.cmd("kick 1").await, "KICKED 1");
    assert_eq!(c.reserve(0).await, (sooner, "in an hour".to_string()));
    assert_eq!(c.cmd(&format!("delete {sooner}")).await, "DELETED");
    assert_eq!(c.cmd(&format!("delete {later}")).await, "DELETED");
    assert_eq!(c.cmd(&format!("peek {later}")).await, "NOT_FOUND");
    // A far job deleted by id without being looked at first, and one kept across a restart.
    let gone = c.put(0, 5000, 60, "gone").await;
    let kept = c.put(0, 5000, 60, "kept").await;
    assert_eq!(c.cmd(&format!("delete {gone}")).await, "DELETED");
    assert_eq!(c.cmd(&format!("kick-job {gone}")).await, "NOT_FOUND");
    server.shutdown().await;
    drop(c);

    let server = start_server(&dir).await;
    let mut c = server.client().await;
    assert_eq!(c.cmd(&format!("peek {gone}")).await, "NOT_FOUND");
    assert_eq!(c.job_field(kept, "state").await, "delayed");
    assert_eq!(c.cmd(&format!("kick-job {kept}")).await, "KICKED");
    assert_eq!(c.reserve(0).await, (kept, "kept".to_string()));
    server.shutdown().await;
}

/// Connections are counted in accept order, as beanstalkd counts them: a connection accepted
/// earlier (even one that never sends a byte, or has already closed, like a readiness probe)
/// is in `total-connections` and `current-connections` before a later one's first command is
/// answered. Counting used to happen in each connection's task, so two connections waiting
/// in the backlog raced for it (a differential test against beanstalkd caught the
/// difference).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_connections_are_counted_before_a_later_ones_first_reply() {
    let (_tmp, dir) = temp_dir();
    let server = start_server(&dir).await;
    let mut total = 0;
    for round in 0..20 {
        let mut silent = Vec::new();
        for _ in 0..16 {
            silent.push(tokio::net::TcpStream::connect(server.addr).await.unwrap());
        }
        // A probe that connects and closes at once.
        drop(tokio::net::TcpStream::connect(server.addr).await.unwrap());
        let mut c = server.client().await;
        total += silent.len() + 2;
        let stats = c.yaml("stats").await;
        let field = |key: &str| stats.iter().find(|(k, _)| k == key).unwrap().1.clone();
        assert_eq!(
            field("total-connections"),
            total.to_string(),
            "round {round}"
        );
        // The silent ones and this client are open (closed ones of earlier rounds and the
        // probe may not have been seen to close yet).
        let current: usize = field("current-connections").parse().unwrap();
        assert!(
            current > silent.len(),
            "round {round}: {current} current connections"
        );
    }
    server.shutdown().await;
}
