//! Workload (d) memory: bytes per live timer after churn, as resident-set growth.
//!
//! Each implementation runs in a fresh child process (`tickwheel-bench memory-child`), so
//! allocator state from one does not pollute another. The child allocates and touches the
//! harness's slot table first, reads `/proc/self/statm`, creates the structure, inserts N
//! timers, churns N ops (as workload (a)), reads `statm` again and prints the growth / N.

use std::process::Command;

use super::churn::{self, ChurnParams};
use super::RunResult;
use crate::harness::{check_failed, Checked, Harness};
use crate::peers::{Peer, TimerImpl};

/// x86-64 / aarch64 Linux base page size (statm counts pages).
const PAGE: u64 = 4096;

/// Resident set size in bytes, from `/proc/self/statm`.
fn rss_bytes() -> Checked<u64> {
    let statm = match std::fs::read_to_string("/proc/self/statm") {
        Ok(s) => s,
        Err(e) => check_failed!("memory: cannot read /proc/self/statm: {e}"),
    };
    match statm.split_whitespace().nth(1).map(str::parse::<u64>) {
        Some(Ok(pages)) => Ok(pages * PAGE),
        _ => check_failed!("memory: unexpected /proc/self/statm: {statm:?}"),
    }
}

/// The child's side: measure one implementation, return bytes per live timer.
pub(crate) fn child<I: TimerImpl>(p: &ChurnParams) -> Checked<f64> {
    let (mut h, before) = Harness::<I>::new_measured(p.n, rss_bytes)?;
    let mut rng = churn::setup(p, &mut h);
    churn::churn_ops(p, &mut h, &mut rng, p.ops)?;
    let after = rss_bytes()?;
    h.verify_totals()?;
    if h.imp.len() != p.n {
        check_failed!(
            "{}: {} live timers after churn, expected {}",
            I::NAME,
            h.imp.len(),
            p.n
        );
    }
    let per_timer = after.saturating_sub(before) as f64 / p.n as f64;
    h.cancel_all()?;
    Ok(per_timer)
}

/// The parent's side: re-exec this binary for one implementation and parse its answer.
pub(crate) fn run_in_child(peer: Peer, p: &ChurnParams) -> Checked<RunResult> {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => check_failed!("memory: cannot find own executable: {e}"),
    };
    let start = std::time::Instant::now();
    let output = Command::new(exe)
        .arg("memory-child")
        .arg(format!("--peer={}", peer.cli_name()))
        .arg(format!("--n={}", p.n))
        .arg(format!("--ops={}", p.ops))
        .arg(format!("--seed={}", p.seed))
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => check_failed!("memory: cannot run child: {e}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        check_failed!(
            "memory child for {} failed ({}): {}{}",
            peer.name(),
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("bytes_per_timer="))
        .and_then(|v| v.trim().parse::<f64>().ok());
    match value {
        Some(value) => Ok(RunResult {
            value,
            wall_secs: start.elapsed().as_secs_f64(),
            timed_secs: 0.0,
            ops: 0,
            note: String::new(),
        }),
        None => check_failed!("memory child for {}: no result in {stdout:?}", peer.name()),
    }
}
