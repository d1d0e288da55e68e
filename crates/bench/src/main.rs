//! `tickwheel-bench`: runs the same seeded timer workloads against tickwheel and its peers
//! (tokio-util's `DelayQueue`, a lazy-cancel `BinaryHeap`, a `BTreeMap`, `nexus-timer`) and
//! prints one table per workload. `--help` lists the flags; see `RESULTS.txt` for a full run.

mod harness;
mod misses;
mod peers;
mod report;
mod rng;
mod runner;
mod workloads;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use peers::{dispatch, Peer};
use runner::{Config, Workload};
use workloads::churn::ChurnParams;

/// Side-by-side timer benchmark: tickwheel vs DelayQueue, BinaryHeap, BTreeMap, nexus-timer
/// and a single hashed wheel.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// Which workload to run.
    #[arg(long, value_enum, default_value = "all")]
    workload: Workload,
    /// Fast smoke run: small N, 1 run, short simulations.
    #[arg(long)]
    quick: bool,
    /// Sizes to run (comma-separated), replacing each workload's default sizes.
    #[arg(long, value_delimiter = ',')]
    n: Vec<usize>,
    /// Skip any size above this.
    #[arg(long, default_value_t = 10_000_000)]
    max_n: usize,
    /// Repetitions per measurement (the median is reported). Default 5, 1 with --quick.
    #[arg(long)]
    runs: Option<usize>,
    /// Repetitions at N >= 1e7 (capped by --runs).
    #[arg(long, default_value_t = 1)]
    big_n_runs: usize,
    /// Implementations to run (comma-separated). Default: all.
    #[arg(long, value_enum, value_delimiter = ',')]
    peers: Vec<Peer>,
    /// Timed ops per churn run. Default 2,000,000 (200,000 with --quick).
    #[arg(long)]
    churn_ops: Option<u64>,
    /// Simulated seconds of the far-future mix with cancels. Default 120 (5 with --quick).
    #[arg(long)]
    far_secs: Option<u64>,
    /// Simulated seconds of the far-future mix without cancels. Default 120 (5 with --quick).
    #[arg(long)]
    mix_secs: Option<u64>,
    /// Count cache misses per op (cachegrind) for churn, fire-all jumping and the far-future
    /// mix tables up to this N; 0 turns it off. Needs valgrind; slow (50x per run).
    #[arg(long, default_value_t = 0)]
    misses_max_n: usize,
    /// Churn ops per cachegrind run (runs of K and 2K ops; the difference is reported).
    #[arg(long, default_value_t = 200_000)]
    misses_ops: u64,
    /// Skip an implementation whose estimated time for one run exceeds this many seconds.
    #[arg(long, default_value_t = 120.0)]
    budget_secs: f64,
    /// PRNG seed; every implementation sees the same sequence.
    #[arg(long, default_value_t = 0x7157_11EE)]
    seed: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Internal: measure one implementation's memory in this fresh process.
    #[command(hide = true)]
    MemoryChild {
        #[arg(long, value_enum)]
        peer: Peer,
        #[arg(long)]
        n: usize,
        #[arg(long)]
        ops: u64,
        #[arg(long)]
        seed: u64,
    },
}

impl Cli {
    fn config(&self) -> Config {
        let sizes = |full: &[usize], quick: &[usize]| -> Vec<usize> {
            if !self.n.is_empty() {
                self.n.clone()
            } else if self.quick {
                quick.to_vec()
            } else {
                full.to_vec()
            }
        };
        Config {
            workload: self.workload,
            peers: if self.peers.is_empty() {
                Peer::ALL.to_vec()
            } else {
                self.peers.clone()
            },
            churn_ns: sizes(&[1_000, 100_000, 1_000_000, 10_000_000], &[1_000, 100_000]),
            fire_ns: sizes(&[1_000, 100_000, 1_000_000], &[1_000, 100_000]),
            far_ns: sizes(&[1_000_000], &[100_000]),
            mix_ns: sizes(&[1_000_000], &[100_000]),
            mix_secs: self.mix_secs.unwrap_or(if self.quick { 5 } else { 120 }),
            misses_max_n: self.misses_max_n,
            misses_ops: self.misses_ops,
            mem_ns: sizes(&[1_000_000], &[100_000]),
            max_n: self.max_n,
            runs: self.runs.unwrap_or(if self.quick { 1 } else { 5 }),
            big_n_runs: self.big_n_runs,
            churn_ops: self
                .churn_ops
                .unwrap_or(if self.quick { 200_000 } else { 2_000_000 }),
            far_secs: self.far_secs.unwrap_or(if self.quick { 5 } else { 120 }),
            budget_secs: self.budget_secs,
            seed: self.seed,
        }
    }
}

fn memory_child<I: peers::TimerImpl>(p: &ChurnParams) -> harness::Checked<()> {
    let bytes = workloads::memory::child::<I>(p)?;
    println!("bytes_per_timer={bytes}");
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::MemoryChild { peer, n, ops, seed }) => {
            let p = ChurnParams {
                n,
                ops,
                seed,
                far_future: false,
            };
            dispatch!(peer, memory_child(&p))
        }
        None => runner::run(&cli.config()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickwheel-bench: VERIFICATION FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
