//! The YAML of `stats`, `stats-tube` and `stats-job`, with beanstalkd 1.12's keys in its order.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tickwheel_proto::{yaml_map, Value};
use tickwheel_queue::{JobState, JobStats, Stats, TubeStats};

use crate::shared::Shared;

/// Whole seconds, as beanstalkd prints durations.
fn secs(ms: u64) -> Value {
    Value::Int(ms / 1000)
}

/// How the deadline behind a remaining time was rounded to the engine's milliseconds.
#[derive(Clone, Copy, Debug)]
enum Deadline {
    /// Clock reading (rounded down) plus whole seconds: a TTR lease (`reserve`, `touch`).
    RoundedDown,
    /// Rounded up to the next millisecond when the clock was past one, so that nothing is due
    /// early: a delay (`put`, `release`) or a tube pause.
    RoundedUp,
}

/// A remaining time in whole seconds, as beanstalkd computes it: the exact time left,
/// truncated (`(deadline_ns - now_ns) / 1e9`). So right after `reserve` with TTR 10 it says 9,
/// not 10: some time has passed.
///
/// We know the time left only to the millisecond. `ms` is the deadline minus the engine's
/// clock, the current millisecond rounded down; so the exact time left lies in `(ms - 1,
/// ms + 1)` for a deadline rounded down, in `(ms - 2, ms]` for one rounded up. We truncate the
/// bottom of that range. Right after a state change the exact time is a whole number of
/// seconds minus a little, so is its bottom: both truncate to beanstalkd's figure. Mid-second
/// every value in the range truncates the same. Only when the exact time is within two
/// milliseconds above a whole second can we say one less than beanstalkd.
fn secs_left(ms: u64, deadline: Deadline) -> Value {
    let below = match deadline {
        Deadline::RoundedDown => 1,
        Deadline::RoundedUp => 2,
    };
    Value::Int(ms.saturating_sub(below) / 1000)
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
        ("time-left", job_time_left(s)),
        ("file", Value::Int(0)),
        ("reserves", Value::Int(s.reserves.into())),
        ("timeouts", Value::Int(s.timeouts.into())),
        ("releases", Value::Int(s.releases.into())),
        ("buries", Value::Int(s.buries.into())),
        ("kicks", Value::Int(s.kicks.into())),
    ])
}

fn job_time_left(s: &JobStats) -> Value {
    match s.state {
        JobState::Reserved => secs_left(s.time_left, Deadline::RoundedDown),
        JobState::Delayed => secs_left(s.time_left, Deadline::RoundedUp),
        JobState::Ready | JobState::Buried => Value::Int(0),
    }
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
        (
            "pause-time-left",
            secs_left(s.pause_time_left, Deadline::RoundedUp),
        ),
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
        ("uptime", Value::Int(shared.uptime())),
        ("binlog-oldest-index", Value::Int(0)),
        ("binlog-current-index", Value::Int(0)),
        ("binlog-records-migrated", Value::Int(0)),
        (
            "binlog-records-written",
            Value::Int(shared.binlog_records_written()),
        ),
        // beanstalkd prints it as a C `int`: -s -1 shows -1, a size over 2 GiB wraps.
        #[allow(clippy::cast_possible_truncation)]
        (
            "binlog-max-size",
            Value::Word((shared.binlog_max_size as i32).to_string()),
        ),
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
pub(crate) fn cpu_times() -> (f64, f64) {
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

pub(crate) fn read_trimmed(path: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let word: String = text.trim().chars().filter(|c| !c.is_control()).collect();
    if word.is_empty() {
        "unknown".into()
    } else {
        word
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: Value) -> u64 {
        match v {
            Value::Int(n) => n,
            other => panic!("not an integer: {other:?}"),
        }
    }

    #[test]
    fn a_lease_just_started_has_one_second_less_than_its_ttr() {
        // reserve with TTR 10, stats-job in the same millisecond or a few ms later.
        assert_eq!(int(secs_left(10_000, Deadline::RoundedDown)), 9);
        assert_eq!(int(secs_left(9_997, Deadline::RoundedDown)), 9);
        // Mid-second and near the end.
        assert_eq!(int(secs_left(9_500, Deadline::RoundedDown)), 9);
        assert_eq!(int(secs_left(8_999, Deadline::RoundedDown)), 8);
        assert_eq!(int(secs_left(1, Deadline::RoundedDown)), 0);
        assert_eq!(int(secs_left(0, Deadline::RoundedDown)), 0);
    }

    #[test]
    fn a_delay_just_started_has_one_second_less_than_the_delay() {
        // put with delay 10 at a clock past its millisecond: the deadline is 10_001 ms away.
        assert_eq!(int(secs_left(10_001, Deadline::RoundedUp)), 9);
        assert_eq!(int(secs_left(10_000, Deadline::RoundedUp)), 9);
        assert_eq!(int(secs_left(9_500, Deadline::RoundedUp)), 9);
        assert_eq!(int(secs_left(2, Deadline::RoundedUp)), 0);
        assert_eq!(int(secs_left(0, Deadline::RoundedUp)), 0);
    }
}
