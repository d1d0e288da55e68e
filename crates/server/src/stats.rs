//! The YAML of `stats`, `stats-tube` and `stats-job`, with beanstalkd 1.12's keys in its order.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tickwheel_proto::{yaml_map, Value};
use tickwheel_queue::{JobStats, Stats, TubeStats};

use crate::shared::Shared;

/// Whole seconds, as beanstalkd prints durations.
fn secs(ms: u64) -> Value {
    Value::Int(ms / 1000)
}

pub(crate) fn job(s: &JobStats) -> Bytes {
    yaml_map(&[
        ("id", Value::Int(s.id)),
        ("tube", Value::Word(s.tube.to_string())),
        ("state", Value::Word(s.state.as_str().into())),
        ("pri", Value::Int(s.priority.into())),
        ("age", secs(s.age)),
        ("delay", secs(s.delay)),
        ("ttr", secs(s.ttr)),
        ("time-left", secs(s.time_left)),
        ("file", Value::Int(0)),
        ("reserves", Value::Int(s.reserves.into())),
        ("timeouts", Value::Int(s.timeouts.into())),
        ("releases", Value::Int(s.releases.into())),
        ("buries", Value::Int(s.buries.into())),
        ("kicks", Value::Int(s.kicks.into())),
    ])
}

pub(crate) fn tube(s: &TubeStats) -> Bytes {
    yaml_map(&[
        ("name", Value::Word(s.name.to_string())),
        ("current-jobs-urgent", Value::Int(s.urgent)),
        ("current-jobs-ready", Value::Int(s.ready)),
        ("current-jobs-reserved", Value::Int(s.reserved)),
        ("current-jobs-delayed", Value::Int(s.delayed)),
        ("current-jobs-buried", Value::Int(s.buried)),
        ("total-jobs", Value::Int(s.total_jobs)),
        ("current-using", Value::Int(s.using)),
        ("current-watching", Value::Int(s.watching)),
        ("current-waiting", Value::Int(s.waiting)),
        ("cmd-delete", Value::Int(s.cmd_delete)),
        ("cmd-pause-tube", Value::Int(s.cmd_pause_tube)),
        ("pause", secs(s.pause)),
        ("pause-time-left", secs(s.pause_time_left)),
    ])
}

pub(crate) fn server(shared: &Shared, s: &Stats) -> Bytes {
    let c = &shared.counters;
    let get = |a: &std::sync::atomic::AtomicU64| Value::Int(a.load(Ordering::Relaxed));
    let with_timeout = c.reserve_with_timeout.load(Ordering::Relaxed);
    let (utime, stime) = cpu_times();
    yaml_map(&[
        ("current-jobs-urgent", Value::Int(s.urgent)),
        ("current-jobs-ready", Value::Int(s.ready)),
        ("current-jobs-reserved", Value::Int(s.reserved)),
        ("current-jobs-delayed", Value::Int(s.delayed)),
        ("current-jobs-buried", Value::Int(s.buried)),
        ("cmd-put", Value::Int(s.cmd.put)),
        ("cmd-peek", Value::Int(s.cmd.peek)),
        ("cmd-peek-ready", Value::Int(s.cmd.peek_ready)),
        ("cmd-peek-delayed", Value::Int(s.cmd.peek_delayed)),
        ("cmd-peek-buried", Value::Int(s.cmd.peek_buried)),
        (
            "cmd-reserve",
            Value::Int(s.cmd.reserve.saturating_sub(with_timeout)),
        ),
        ("cmd-reserve-with-timeout", Value::Int(with_timeout)),
        ("cmd-delete", Value::Int(s.cmd.delete)),
        ("cmd-release", Value::Int(s.cmd.release)),
        ("cmd-use", Value::Int(s.cmd.use_)),
        ("cmd-watch", Value::Int(s.cmd.watch)),
        ("cmd-ignore", Value::Int(s.cmd.ignore)),
        ("cmd-bury", Value::Int(s.cmd.bury)),
        ("cmd-kick", Value::Int(s.cmd.kick)),
        ("cmd-touch", Value::Int(s.cmd.touch)),
        ("cmd-stats", get(&c.stats)),
        ("cmd-stats-job", get(&c.stats_job)),
        ("cmd-stats-tube", get(&c.stats_tube)),
        ("cmd-list-tubes", get(&c.list_tubes)),
        ("cmd-list-tube-used", get(&c.list_tube_used)),
        ("cmd-list-tubes-watched", get(&c.list_tubes_watched)),
        ("cmd-pause-tube", Value::Int(s.cmd.pause_tube)),
        ("job-timeouts", Value::Int(s.job_timeouts)),
        ("total-jobs", Value::Int(s.total_jobs)),
        ("max-job-size", Value::Int(s.max_job_size)),
        ("current-tubes", Value::Int(s.current_tubes)),
        ("current-connections", Value::Int(s.current_connections)),
        ("current-producers", Value::Int(s.producers)),
        ("current-workers", Value::Int(s.workers)),
        ("current-waiting", Value::Int(s.waiting)),
        ("total-connections", Value::Int(s.total_connections)),
        ("pid", Value::Int(std::process::id().into())),
        ("version", Value::Quoted(env!("CARGO_PKG_VERSION").into())),
        ("rusage-utime", Value::Seconds(utime)),
        ("rusage-stime", Value::Seconds(stime)),
        ("uptime", Value::Int(shared.started.elapsed().as_secs())),
        ("binlog-oldest-index", Value::Int(0)),
        ("binlog-current-index", Value::Int(0)),
        ("binlog-records-migrated", Value::Int(0)),
        ("binlog-records-written", Value::Int(0)),
        ("binlog-max-size", Value::Int(0)),
        ("draining", Value::Word(s.draining.to_string())),
        ("id", Value::Word(shared.instance_id.clone())),
        (
            "hostname",
            Value::Word(read_trimmed("/proc/sys/kernel/hostname")),
        ),
        ("os", Value::Word(read_trimmed("/proc/sys/kernel/version"))),
        ("platform", Value::Word(std::env::consts::ARCH.into())),
    ])
}

/// User and system CPU seconds of this process, from `/proc/self/stat` (Linux; clock ticks
/// of 1/100 s, the kernel's `USER_HZ`). Zero where that file does not exist.
fn cpu_times() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 100.0
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11), ticks(12))
}

fn read_trimmed(path: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let word: String = text.trim().chars().filter(|c| !c.is_control()).collect();
    if word.is_empty() {
        "unknown".into()
    } else {
        word
    }
}
