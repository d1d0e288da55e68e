//! Cache misses per op, counted by cachegrind (this machine has no hardware counters for
//! `perf stat`). For one table and one implementation, the benchmark re-runs itself under
//! `valgrind --tool=cachegrind --cache-sim=yes` with `--runs 1` and reads the totals:
//! instructions (`I refs`), first-level data misses (`D1 misses`) and last-level data misses
//! (`LLd misses`), with the last level set to one core's 1 MiB L2 (the L3 is shared by the
//! whole machine, so a line that leaves L2 is as good as gone under load). Counts are
//! deterministic, unlike the nanoseconds.
//!
//! Churn runs twice, with K and 2K ops, and reports the difference divided by K: the
//! untimed setup cancels out. The other workloads time everything they do, so their totals
//! are divided by the op count. Either way the harness's own accesses are included (its
//! table of live timers costs about one miss per op at N = 1e6), the same for every peer.

use std::process::Command;

use crate::harness::{check_failed, Checked};
use crate::peers::Peer;

/// Set in the environment of a counted churn run: leak the structure instead of tearing it
/// down (see `workloads::churn::run`).
pub(crate) const SKIP_TEARDOWN: &str = "TICKWHEEL_BENCH_SKIP_TEARDOWN";

/// Totals read from one cachegrind run.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub(crate) instructions: f64,
    pub(crate) d1: f64,
    pub(crate) lld: f64,
}

impl Counts {
    fn minus(self, other: Counts) -> Counts {
        Counts {
            instructions: self.instructions - other.instructions,
            d1: self.d1 - other.d1,
            lld: self.lld - other.lld,
        }
    }

    fn per(self, ops: f64) -> Counts {
        Counts {
            instructions: self.instructions / ops,
            d1: self.d1 / ops,
            lld: self.lld / ops,
        }
    }
}

/// How one table's counts become per-op numbers.
pub(crate) enum Per {
    /// Run with `--churn-ops ops` and `2 * ops`; divide the difference by `ops`.
    ChurnDiff { ops: u64 },
    /// One run; divide the totals by `ops`.
    Total { ops: f64 },
}

/// Counts misses per op for `peer`, running this binary with `args` (workload and size).
pub(crate) fn per_op(peer: Peer, args: &[String], per: &Per) -> Checked<Counts> {
    match *per {
        Per::ChurnDiff { ops } => {
            let one = run(peer, args, Some(ops))?;
            let two = run(peer, args, Some(2 * ops))?;
            Ok(two.minus(one).per(ops as f64))
        }
        Per::Total { ops } => Ok(run(peer, args, None)?.per(ops)),
    }
}

fn run(peer: Peer, args: &[String], churn_ops: Option<u64>) -> Checked<Counts> {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => check_failed!("misses: cannot find own executable: {e}"),
    };
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--tool=cachegrind",
        "--cache-sim=yes",
        "--cachegrind-out-file=/dev/null",
        // This machine per core: 32 KiB L1d, 1 MiB L2. The 32 MiB L3 is shared with every
        // other process here, so the simulated last level is the core's own L2: an "LL"
        // miss is one that costs a trip to L3 or DRAM.
        "--D1=32768,8,64",
        "--LL=1048576,16,64",
    ])
    .arg(exe)
    .args(args)
    .arg(format!("--peers={}", peer.cli_name()))
    .args(["--runs=1", "--budget-secs=1e9"]);
    if let Some(ops) = churn_ops {
        cmd.arg(format!("--churn-ops={ops}"));
        // The runs of K and 2K ops must differ only by the K ops: the teardown (cancel every
        // timer left) costs more after more churn for peers with garbage, which is not churn.
        cmd.env(SKIP_TEARDOWN, "1");
    }
    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) => check_failed!("misses: cannot run valgrind: {e}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        check_failed!(
            "misses: cachegrind run of {} failed ({}): {stderr}",
            peer.name(),
            output.status
        );
    }
    let field = |name: &str| -> Option<f64> {
        stderr.lines().find_map(|line| {
            let rest = line.split_once(name)?.1;
            let number: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .filter(|c| *c != ',')
                .collect();
            number.parse().ok()
        })
    };
    match (
        field("I   refs:"),
        field("D1  misses:"),
        field("LLd misses:"),
    ) {
        (Some(instructions), Some(d1), Some(lld)) => Ok(Counts {
            instructions,
            d1,
            lld,
        }),
        _ => check_failed!("misses: no totals in cachegrind's output: {stderr}"),
    }
}
