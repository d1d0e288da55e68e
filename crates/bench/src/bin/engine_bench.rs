//! `engine_bench`: the tickwheel-queue [`Engine`] in process, with a manual clock.
//!
//! - `burst`: N jobs (default 1 M) all due within the same second; the clock is advanced in
//!   1 ms steps through that second and each step's processing is timed (can the engine keep
//!   up with wall time?), then every ready job is handed to a reserve (and deleted);
//! - `precision`: a real-time loop (engine clock = wall clock in ms) putting 10 k jobs/s with
//!   1–3 s delays while a worker waits in `reserve`; asserts nothing is handed out before it is
//!   due and reports the engine-side lateness (event seen − due instant, wall time);
//! - `memory`: resident-set growth for N delayed jobs with 100 B bodies (run it in its own
//!   process, as the default `--part all` does by re-executing itself).
//!
//! See `crates/bench/SERVER_RESULTS.md`.

#[path = "../bench_stats.rs"]
mod bench_stats;
use bench_stats::{median, percentile};

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use clap::{Parser, ValueEnum};
use tickwheel_queue::{ClientId, Config, Engine, Event, Reserve};

/// In-process benchmarks of the tickwheel job engine.
#[derive(Parser, Debug)]
struct Cli {
    /// Which part.
    #[arg(long, value_enum, default_value = "all")]
    part: Part,
    /// Jobs for burst and memory.
    #[arg(long, default_value_t = 1_000_000)]
    n: usize,
    /// Repetitions of burst (medians reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Precision: jobs put per second.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Precision: seconds of putting.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Body size in bytes.
    #[arg(long, default_value_t = 100)]
    body: usize,
    /// Memory: the engine's memory window in seconds (0: every job resident). With a window,
    /// jobs due later live only in the store (not measured here; see the store's benchmark).
    #[arg(long, default_value_t = 0)]
    window_secs: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Part {
    All,
    Burst,
    Precision,
    Memory,
}

const PRODUCER: ClientId = ClientId(1);
const WORKER: ClientId = ClientId(2);

fn rss_bytes() -> anyhow::Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse()?;
            return Ok(kb * 1024);
        }
    }
    bail!("no VmRSS")
}

struct BurstResult {
    put_s: f64,
    ready_wall_ms: f64,
    worst_lag_ms: f64,
    worst_step_ms: f64,
    reserve_wall_ms: f64,
}

/// `n` jobs due in [due0, due0 + 1000) ms; advance 1 ms at a time through that second.
fn burst(n: usize, body_len: usize) -> anyhow::Result<BurstResult> {
    let due0: u64 = 60_000;
    let mut e = Engine::new(Config::default(), 0);
    e.connect(PRODUCER);
    e.connect(WORKER);
    let body = vec![b'x'; body_len];
    let t = Instant::now();
    for i in 0..n {
        let delay = due0 + (i as u64 * 1000 / n as u64);
        e.put(0, PRODUCER, 0, delay, 60_000, Bytes::copy_from_slice(&body))
            .map_err(|err| anyhow::anyhow!("put: {err:?}"))?;
        if i.is_multiple_of(4096) {
            drop(e.take_changes());
        }
    }
    drop(e.take_changes());
    let put_s = t.elapsed().as_secs_f64();
    e.advance(due0 - 1);
    if e.stats().ready != 0 {
        bail!("jobs ready before their due second");
    }
    // Step through the due second; cumulative processing time vs the simulated time.
    let mut cumulative = 0.0f64;
    let mut worst_lag = 0.0f64;
    let mut worst_step = 0.0f64;
    for step in 0..1000u64 {
        let now = due0 + step;
        let s = Instant::now();
        e.advance(now);
        let d = s.elapsed().as_secs_f64() * 1000.0;
        cumulative += d;
        worst_step = worst_step.max(d);
        // Driven by a real clock, the step for `now` starts no earlier than `step` ms into the
        // second and ends `cumulative` ms of work in: how far behind wall time it would be.
        worst_lag = worst_lag.max(cumulative - step as f64);
    }
    let ready = e.stats().ready;
    if ready != n as u64 {
        bail!("{ready} ready of {n} after the due second");
    }
    // Hand every ready job to a reserve, then delete it.
    let now = due0 + 1000;
    let s = Instant::now();
    let mut handed = 0usize;
    loop {
        match e.reserve(now, WORKER, Some(0)) {
            Reserve::Job(job) => {
                e.delete(now, WORKER, job.id)
                    .map_err(|err| anyhow::anyhow!("delete: {err:?}"))?;
                handed += 1;
                if handed.is_multiple_of(4096) {
                    drop(e.take_changes());
                }
            }
            Reserve::TimedOut => break,
            other => bail!("reserve: {other:?}"),
        }
    }
    let reserve_wall_ms = s.elapsed().as_secs_f64() * 1000.0;
    if handed != n {
        bail!("handed {handed} of {n}");
    }
    Ok(BurstResult {
        put_s,
        ready_wall_ms: cumulative,
        worst_lag_ms: worst_lag,
        worst_step_ms: worst_step,
        reserve_wall_ms,
    })
}

/// Real-time loop: engine time = wall ms since start.
fn precision(rate: u64, secs: u64, body_len: usize) -> anyhow::Result<()> {
    let mut e = Engine::new(Config::default(), 0);
    e.connect(PRODUCER);
    e.connect(WORKER);
    let body = Bytes::from(vec![b'x'; body_len]);
    let total = rate * secs;
    // due[id] in engine ms.
    let mut due: Vec<u64> = vec![0; total as usize + 2];
    let mut late: Vec<f64> = Vec::with_capacity(total as usize);
    let mut early_engine = 0u64;
    let mut early_wall = 0u64;
    let t0 = Instant::now();
    let wall_ms = |t0: Instant| t0.elapsed().as_secs_f64() * 1000.0;
    let mut put = 0u64;
    let deadline = Duration::from_secs(secs + 3 + 10);
    if e.reserve(0, WORKER, None) != Reserve::Waiting {
        bail!("worker did not wait");
    }
    let mut record = |due: &[u64], id: u64, now: u64, at: f64, late: &mut Vec<f64>| {
        let d = due[id as usize];
        if now < d {
            early_engine += 1;
        }
        if at < d as f64 {
            early_wall += 1;
        }
        late.push(at - d as f64);
    };
    let mut max_put_lag = 0.0f64;
    while (late.len() as u64) < total && t0.elapsed() < deadline {
        let w = wall_ms(t0);
        let now = w as u64;
        // Puts scheduled up to now (10 per ms at 10 k/s).
        while put < total && (put as f64) * 1000.0 / (rate as f64) <= w {
            max_put_lag = max_put_lag.max(w - (put as f64) * 1000.0 / rate as f64);
            let delay = 1000 + (put % 3) * 1000 + (put * 7919 % 1000);
            let id = e
                .put(now, PRODUCER, 0, delay, 600_000, body.clone())
                .map_err(|err| anyhow::anyhow!("put: {err:?}"))?;
            due[id as usize] = now + delay;
            put += 1;
        }
        drop(e.take_changes());
        e.advance(now);
        let events = e.take_events();
        let at = wall_ms(t0);
        for ev in events {
            match ev {
                Event::Reserved { job, .. } => {
                    record(&due, job.id, now, at, &mut late);
                    e.delete(now, WORKER, job.id)
                        .map_err(|err| anyhow::anyhow!("delete: {err:?}"))?;
                    // Take whatever else is ready now, then wait again.
                    loop {
                        match e.reserve(now, WORKER, None) {
                            Reserve::Job(j) => {
                                record(&due, j.id, now, wall_ms(t0), &mut late);
                                e.delete(now, WORKER, j.id)
                                    .map_err(|err| anyhow::anyhow!("delete: {err:?}"))?;
                            }
                            Reserve::Waiting => break,
                            other => bail!("reserve: {other:?}"),
                        }
                    }
                }
                other => bail!("event: {other:?}"),
            }
        }
        drop(e.take_changes());
        // Sleep to the next put or deadline, at most 1 ms.
        let next_put = (put as f64) * 1000.0 / rate as f64;
        let next = e
            .next_deadline()
            .map_or(f64::MAX, |d| d as f64)
            .min(if put < total { next_put } else { f64::MAX });
        let w = wall_ms(t0);
        if next > w {
            std::thread::sleep(Duration::from_secs_f64(((next - w).min(1.0)) / 1000.0));
        }
    }
    late.sort_by(f64::total_cmp);
    println!(
        "precision: {} jobs put at {rate}/s over {secs} s, delays 1–4 s; delivered {}",
        total,
        late.len()
    );
    println!(
        "engine-side lateness (wall instant the waiting reserve got the job − due instant): \
         p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms; early: {early_engine} by engine clock, \
         {early_wall} by wall clock; producer max lag {max_put_lag:.2} ms",
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        percentile(&late, 0.999),
        late.last().copied().unwrap_or(f64::NAN)
    );
    assert_eq!(early_engine, 0, "a job was handed out before it was due");
    assert_eq!(
        early_wall, 0,
        "a job was handed out before its due wall time"
    );
    if (late.len() as u64) < total {
        bail!("only {} of {total} delivered", late.len());
    }
    Ok(())
}

fn memory(n: usize, body_len: usize, window_secs: u64) -> anyhow::Result<()> {
    let body = vec![b'x'; body_len];
    let before = rss_bytes()?;
    let config = Config {
        window: (window_secs > 0).then_some(window_secs * 1000),
        ..Config::default()
    };
    let mut e = Engine::new(config, 0);
    e.connect(PRODUCER);
    for i in 0..n {
        // Far future, spread over a day: all delayed, all resident.
        let delay = 3_600_000 + (i as u64 * 7919) % 86_400_000;
        e.put(0, PRODUCER, 0, delay, 60_000, Bytes::copy_from_slice(&body))
            .map_err(|err| anyhow::anyhow!("put: {err:?}"))?;
        if i.is_multiple_of(4096) {
            drop(e.take_changes());
        }
    }
    drop(e.take_changes());
    let after = rss_bytes()?;
    let delayed = e.stats().delayed;
    if delayed != n as u64 {
        bail!("{delayed} delayed of {n}");
    }
    let per = (after - before) as f64 / n as f64;
    println!(
        "memory (window {window_secs} s): {n} delayed jobs with {body_len} B bodies: RSS {:.1} MB -> {:.1} MB, growth {:.1} MB = {per:.0} B/job; \
         10 M jobs at this rate ≈ {:.0} MB",
        before as f64 / 1e6,
        after as f64 / 1e6,
        (after - before) as f64 / 1e6,
        per * 10_000_000.0 / 1e6
    );
    drop(e);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if matches!(cli.part, Part::All | Part::Burst) {
        let mut rs = Vec::new();
        for run in 0..cli.runs {
            let r = burst(cli.n, cli.body)?;
            println!(
                "burst run {run}: {} jobs due in one second: put {:.2} s; advancing 1 ms steps \
                 through the second took {:.1} ms of processing (worst step {:.2} ms, worst lag \
                 behind wall time {:.1} ms); reserve+delete of all {:.1} ms ({:.0}/s)",
                cli.n,
                r.put_s,
                r.ready_wall_ms,
                r.worst_step_ms,
                r.worst_lag_ms,
                r.reserve_wall_ms,
                cli.n as f64 / (r.reserve_wall_ms / 1000.0)
            );
            rs.push(r);
        }
        let m = |f: &dyn Fn(&BurstResult) -> f64| median(&mut rs.iter().map(f).collect::<Vec<_>>());
        println!(
            "burst median of {}: ready processing {:.1} ms, worst step {:.2} ms, worst lag {:.1} ms, \
             reserve+delete all {:.1} ms; all ready by due second start + {:.0} ms, all handed out \
             (one worker, serial) by + {:.0} ms",
            cli.runs,
            m(&|r| r.ready_wall_ms),
            m(&|r| r.worst_step_ms),
            m(&|r| r.worst_lag_ms),
            m(&|r| r.reserve_wall_ms),
            m(&|r| 1000.0 + r.worst_lag_ms.max(0.0)),
            m(&|r| 1000.0 + r.worst_lag_ms.max(0.0) + r.reserve_wall_ms),
        );
    }
    if matches!(cli.part, Part::All | Part::Precision) {
        precision(cli.rate, cli.secs, cli.body)?;
    }
    match cli.part {
        Part::Memory => memory(cli.n, cli.body, cli.window_secs)?,
        Part::All => {
            // A fresh process, so the burst runs' freed memory does not hide the growth.
            let exe = std::env::current_exe()?;
            let status = Command::new(exe)
                .args(["--part", "memory", "--n", &cli.n.to_string()])
                .args(["--body", &cli.body.to_string()])
                .status()
                .context("memory child")?;
            if !status.success() {
                bail!("memory child: {status}");
            }
        }
        _ => {}
    }
    Ok(())
}
