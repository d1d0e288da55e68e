//! Runs the selected workloads over the selected implementations and prints the tables.

use std::collections::HashMap;
use std::io::Write;

use crate::harness::Checked;
use crate::misses::{self, Per};
use crate::peers::{advance_cost_ns, dispatch, Peer};
use crate::report::{fmt_n, median, print_table, Row};
use crate::workloads::churn::{self, ChurnParams};
use crate::workloads::far_mix::{self, FarMixParams};
use crate::workloads::fire_all::{self, FireAllParams, Mode};
use crate::workloads::{memory, RunResult};

/// Which workload(s) to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    Churn,
    FireAll,
    /// Only the jumping half of fire-all.
    FireAllJumping,
    FarFuture,
    FarMix,
    Memory,
    All,
}

/// Everything a run needs, resolved from the command line.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) workload: Workload,
    pub(crate) peers: Vec<Peer>,
    pub(crate) churn_ns: Vec<usize>,
    pub(crate) fire_ns: Vec<usize>,
    pub(crate) far_ns: Vec<usize>,
    pub(crate) mix_ns: Vec<usize>,
    pub(crate) mix_secs: u64,
    /// Count cache misses per op with cachegrind for tables up to this N (0: never).
    pub(crate) misses_max_n: usize,
    /// Churn ops per cachegrind run (the difference of K and 2K ops is reported).
    pub(crate) misses_ops: u64,
    pub(crate) mem_ns: Vec<usize>,
    pub(crate) max_n: usize,
    pub(crate) runs: usize,
    pub(crate) big_n_runs: usize,
    pub(crate) churn_ops: u64,
    pub(crate) far_secs: u64,
    pub(crate) budget_secs: f64,
    pub(crate) seed: u64,
}

impl Config {
    fn runs_for(&self, n: usize) -> usize {
        if n >= 10_000_000 {
            self.big_n_runs.min(self.runs).max(1)
        } else {
            self.runs.max(1)
        }
    }

    fn wants(&self, w: Workload) -> bool {
        self.workload == Workload::All
            || self.workload == w
            || (w == Workload::FireAll && self.workload == Workload::FireAllJumping)
    }
}

/// Medians for the target summary: (workload label, n) -> peer -> median.
type Medians = HashMap<(&'static str, usize), Vec<(Peer, f64)>>;

/// Runs one implementation `runs` times; `None` if skipped.
fn measure(
    peer: Peer,
    runs: usize,
    mut once: impl FnMut(Peer) -> Checked<RunResult>,
) -> Checked<(Vec<f64>, RunResult)> {
    let mut values = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let r = once(peer)?;
        values.push(r.value);
        last = Some(r);
    }
    let last = last.expect("at least one run");
    Ok((values, last))
}

/// How to guess the time of one run before making it, to skip peers over budget.
enum Estimate {
    /// This many seconds.
    Secs(f64),
    /// The last measured size's wall time, scaled linearly with N.
    ScaleWithN,
    /// Fixed op count: untimed setup scales with N, the timed part is taken as twice the
    /// last size's (per-op cost grows with N through cache misses).
    FixedOps,
    /// Do not guess (always run).
    Never,
}

struct Section<'a> {
    cfg: &'a Config,
    medians: &'a mut Medians,
    /// Per peer: (n, wall seconds, timed seconds) of one run at the last measured size, for
    /// skip estimates.
    last_wall: HashMap<Peer, (usize, f64, f64)>,
}

/// What a table passes to cachegrind: the command-line arguments that select its workload
/// and size, and whether it is churn (counted as a difference of two op counts).
struct MissArgs {
    args: Vec<String>,
    churn: bool,
}

impl MissArgs {
    fn new(workload: &str, n: usize, extra: &[String], churn: bool) -> Option<Self> {
        let mut args = vec![format!("--workload={workload}"), format!("--n={n}")];
        args.extend_from_slice(extra);
        Some(MissArgs { args, churn })
    }
}

impl Section<'_> {
    /// Runs every peer at size `n` and prints the table, then (with `--misses-max-n`) the
    /// cache misses per op of each peer measured.
    #[allow(clippy::too_many_arguments)]
    fn table(
        &mut self,
        label: &'static str,
        title: String,
        unit: &str,
        n: usize,
        mut estimate: impl FnMut(Peer) -> Estimate,
        mut once: impl FnMut(Peer) -> Checked<RunResult>,
        miss_args: Option<MissArgs>,
    ) -> Checked<()> {
        let runs = self.cfg.runs_for(n);
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        let mut op_counts = Vec::new();
        for &peer in &self.cfg.peers {
            if peer == Peer::Floor && label != "churn" {
                // It fires nothing: only churn (a) checks nothing but what fires.
                rows.push((peer, Row::Skipped("not a timer: churn (a) only".into())));
                continue;
            }
            let est = match estimate(peer) {
                Estimate::Secs(secs) => Some(secs),
                Estimate::Never => None,
                Estimate::ScaleWithN => self
                    .last_wall
                    .get(&peer)
                    .map(|&(m, secs, _)| secs * n as f64 / m as f64 * 1.25),
                Estimate::FixedOps => self.last_wall.get(&peer).map(|&(m, secs, timed)| {
                    (secs - timed) * n as f64 / m as f64 * 1.25 + timed * 2.0
                }),
            };
            if let Some(est) = est {
                if est > self.cfg.budget_secs {
                    rows.push((
                        peer,
                        Row::Skipped(format!(
                            "estimated {est:.0} s per run > --budget-secs {}",
                            self.cfg.budget_secs
                        )),
                    ));
                    continue;
                }
            }
            let (values, last) = measure(peer, runs, &mut once)?;
            let med = median(&values);
            let wall = last.wall_secs;
            self.last_wall.insert(peer, (n, wall, last.timed_secs));
            self.medians
                .entry((label, n))
                .or_default()
                .push((peer, med));
            op_counts.push((peer, last.ops));
            if !last.note.is_empty() {
                notes.push(last.note);
            }
            rows.push((
                peer,
                Row::Measured {
                    median: med,
                    runs: values,
                },
            ));
        }
        let title = format!(
            "{title}, median of {runs} run{}",
            if runs == 1 { "" } else { "s" }
        );
        print_table(&title, unit, &rows);
        for note in notes {
            println!("    note: {note}");
        }
        if let Some(m) = miss_args.filter(|_| n <= self.cfg.misses_max_n) {
            println!(
                "  cachegrind, per op{}: instructions, L1d misses, L2 misses (data; harness included)",
                if m.churn {
                    format!(" (runs of {} and {} ops, difference)", self.cfg.misses_ops, 2 * self.cfg.misses_ops)
                } else {
                    String::new()
                }
            );
            for (peer, ops) in op_counts {
                let per = if m.churn {
                    Per::ChurnDiff {
                        ops: self.cfg.misses_ops,
                    }
                } else {
                    Per::Total { ops: ops as f64 }
                };
                let c = misses::per_op(peer, &m.args, &per)?;
                println!(
                    "    {:<12} {:>7.0} instr  {:>6.2} L1d  {:>6.2} L2",
                    peer.name(),
                    c.instructions,
                    c.d1,
                    c.lld
                );
                let _ = std::io::stdout().flush();
            }
        }
        println!();
        let _ = std::io::stdout().flush();
        Ok(())
    }
}

pub(crate) fn run(cfg: &Config) -> Checked<()> {
    println!("tickwheel-bench: side-by-side timer benchmark (1 tick = 1 ms, logical clocks)");
    println!(
        "seed {:#x}; peers: {}",
        cfg.seed,
        cfg.peers
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "every run is verified: each timer fires exactly once, never before its deadline, \
         cancels return the inserted id, totals add up."
    );
    if cfg.peers.contains(&Peer::DelayQueue)
        && (cfg.wants(Workload::Churn) || cfg.wants(Workload::FireAll))
    {
        println!(
            "DelayQueue is driven by tokio's paused clock (current-thread runtime, start_paused); \
             one block_on(advance(1 ms)) costs {:.0} ns here and is included in its stepping numbers.",
            advance_cost_ns(200_000)
        );
    }
    println!();
    let mut medians = Medians::new();

    if cfg.wants(Workload::Churn) {
        let mut s = Section {
            cfg,
            medians: &mut medians,
            last_wall: HashMap::new(),
        };
        for &n in &cfg.churn_ns {
            if n > cfg.max_n {
                println!(
                    "(a) churn N={}: skipped (--max-n {})\n",
                    fmt_n(n),
                    cfg.max_n
                );
                continue;
            }
            let p = ChurnParams {
                n,
                ops: cfg.churn_ops,
                seed: cfg.seed,
                far_future: false,
            };
            s.table(
                "churn",
                format!(
                    "(a) churn, N={} live, {} ops, clock +1 ms every {} ops: ns per op (cancel + insert)",
                    fmt_n(n),
                    p.ops,
                    p.ops_per_ms()
                ),
                "ns",
                n,
                |_| Estimate::FixedOps,
                |peer| dispatch!(peer, run_churn(&p)),
                MissArgs::new("churn", n, &[], true),
            )?;
        }
    }

    if cfg.wants(Workload::FireAll) {
        for mode in [Mode::Jumping, Mode::Stepping] {
            if mode == Mode::Stepping && cfg.workload == Workload::FireAllJumping {
                continue;
            }
            let label = match mode {
                Mode::Jumping => "fire-all jumping",
                Mode::Stepping => "fire-all stepping",
            };
            let mut s = Section {
                cfg,
                medians: &mut medians,
                last_wall: HashMap::new(),
            };
            for &n in &cfg.fire_ns {
                if n > cfg.max_n {
                    continue;
                }
                let p = FireAllParams {
                    n,
                    seed: cfg.seed,
                    mode,
                };
                s.table(
                    label,
                    format!(
                        "(b) {label}, N={} timers 1 ms-1 h out: ns per timer (insert + fire)",
                        fmt_n(n)
                    ),
                    "ns",
                    n,
                    // Stepping walks 3.6 M ms whatever N is: its time does not scale with N.
                    |_| match mode {
                        Mode::Jumping => Estimate::ScaleWithN,
                        Mode::Stepping => Estimate::Never,
                    },
                    |peer| dispatch!(peer, run_fire_all(&p)),
                    match mode {
                        Mode::Jumping => MissArgs::new("fire-all-jumping", n, &[], false),
                        Mode::Stepping => None,
                    },
                )?;
            }
            if mode == Mode::Jumping {
                println!("    how each implementation finds the next deadline:");
                for &peer in &cfg.peers {
                    println!("      {:<12} {}", peer.name(), peer.peek());
                }
                println!();
            }
        }
    }

    if cfg.wants(Workload::FarFuture) {
        let churn_medians = medians.clone();
        let mut s = Section {
            cfg,
            medians: &mut medians,
            last_wall: HashMap::new(),
        };
        for &n in &cfg.far_ns {
            if n > cfg.max_n {
                continue;
            }
            let ops = cfg.far_secs * 1_000 * (n as u64 / 1000).max(1);
            let p = ChurnParams {
                n,
                ops,
                seed: cfg.seed,
                far_future: true,
            };
            // Estimate from the churn table at the same N, if it ran.
            let estimate = |peer: Peer| {
                let secs = churn_medians.get(&("churn", n)).and_then(|rows| {
                    rows.iter()
                        .find(|(q, _)| *q == peer)
                        .map(|(_, ns)| ns * ops as f64 / 1e9)
                });
                secs.map_or(Estimate::Never, Estimate::Secs)
            };
            s.table(
                "far-future",
                format!(
                    "(c) far-future mix, N={} live (90% 1-60 s, 10% 1-30 days), {} s simulated, \
                     {} ops: ns per op (cancel + insert)",
                    fmt_n(n),
                    cfg.far_secs,
                    ops
                ),
                "ns",
                n,
                estimate,
                |peer| dispatch!(peer, run_churn(&p)),
                None,
            )?;
        }
    }

    if cfg.wants(Workload::FarMix) {
        let mut s = Section {
            cfg,
            medians: &mut medians,
            last_wall: HashMap::new(),
        };
        for &n in &cfg.mix_ns {
            if n > cfg.max_n {
                continue;
            }
            let p = FarMixParams {
                n,
                secs: cfg.mix_secs,
                seed: cfg.seed,
            };
            s.table(
                "far-mix",
                format!(
                    "(e) far-future mix without cancels, N={} inserted (90% 1-60 s, 10% 1-30 days), \
                     clock stepped 1 ms for {} s: ns per op (insert or fire)",
                    fmt_n(n),
                    cfg.mix_secs
                ),
                "ns",
                n,
                |_| Estimate::Never,
                |peer| dispatch!(peer, run_far_mix(&p)),
                MissArgs::new("far-mix", n, &[format!("--mix-secs={}", cfg.mix_secs)], false),
            )?;
        }
    }

    if cfg.wants(Workload::Memory) {
        let mut s = Section {
            cfg,
            medians: &mut medians,
            last_wall: HashMap::new(),
        };
        for &n in &cfg.mem_ns {
            if n > cfg.max_n {
                continue;
            }
            let p = ChurnParams {
                n,
                ops: n as u64,
                seed: cfg.seed,
                far_future: false,
            };
            s.table(
                "memory",
                format!(
                    "(d) memory, N={} live u64 timers after {} churn ops: resident-set growth \
                     per live timer (fresh child process each)",
                    fmt_n(n),
                    p.ops
                ),
                "B",
                n,
                |_| Estimate::Never,
                |peer| memory::run_in_child(peer, &p),
                None,
            )?;
        }
    }

    print_targets(&medians);
    Ok(())
}

fn run_churn<I: crate::peers::TimerImpl>(p: &ChurnParams) -> Checked<RunResult> {
    churn::run::<I>(p)
}

fn run_fire_all<I: crate::peers::TimerImpl>(p: &FireAllParams) -> Checked<RunResult> {
    fire_all::run::<I>(p)
}

fn run_far_mix<I: crate::peers::TimerImpl>(p: &FarMixParams) -> Checked<RunResult> {
    far_mix::run::<I>(p)
}

fn print_targets(medians: &Medians) {
    println!("Targets for tickwheel (issue 9), from the medians above:");
    let get = |label: &'static str, n: usize, peer: Peer| {
        medians
            .get(&(label, n))
            .and_then(|rows| rows.iter().find(|(p, _)| *p == peer).map(|(_, v)| *v))
    };
    let verdict = |ok: bool| if ok { "MET" } else { "MISSED" };
    // `ours <= factor * theirs`, printed as a ratio.
    let ratio = |what: &str, label: &'static str, n: usize, peer: Peer, limit: f64| match (
        get(label, n, Peer::Tickwheel),
        get(label, n, peer),
    ) {
        (Some(ours), Some(theirs)) => println!(
            "  {what}: tickwheel {ours:.1} / {} {theirs:.1} = {:.2}x (target <= {limit}x) -> {}",
            peer.name(),
            ours / theirs,
            verdict(ours <= limit * theirs)
        ),
        _ => println!("  {what}: not measured in this run"),
    };
    ratio(
        "churn N=1e6 vs BinaryHeap",
        "churn",
        1_000_000,
        Peer::Heap,
        0.8,
    );
    ratio(
        "churn N=1e6 vs DelayQueue (>= 3x faster)",
        "churn",
        1_000_000,
        Peer::DelayQueue,
        1.0 / 3.0,
    );
    ratio(
        "fire-all jumping N=1e6 vs BTreeMap",
        "fire-all jumping",
        1_000_000,
        Peer::Btree,
        0.5,
    );
    ratio(
        "far-future mix (no cancels) N=1e6 vs hashed wheel (faster)",
        "far-mix",
        1_000_000,
        Peer::Hashed,
        1.0,
    );
    match get("memory", 1_000_000, Peer::Tickwheel) {
        Some(v) => println!(
            "  memory N=1e6: {v:.1} B/timer (target <= 36) -> {}",
            verdict(v <= 36.0)
        ),
        None => println!("  memory N=1e6: not measured in this run"),
    }
    let mut keys: Vec<_> = medians
        .keys()
        .filter(|(l, _)| *l == "churn")
        .copied()
        .collect();
    keys.sort();
    for key in keys {
        let rows = &medians[&key];
        let Some(ours) = rows
            .iter()
            .find(|(p, _)| *p == Peer::Tickwheel)
            .map(|(_, v)| *v)
        else {
            continue;
        };
        let beaten: Vec<String> = rows
            .iter()
            .filter(|(p, v)| *p != Peer::Tickwheel && *p != Peer::Floor && *v <= ours)
            .map(|(p, v)| format!("{} {v:.0} ns", p.name()))
            .collect();
        if let Some(floor) = rows
            .iter()
            .find(|(p, _)| *p == Peer::Floor)
            .map(|(_, v)| *v)
        {
            // The least any structure pays per op in this harness: how far below it a target lies.
            let heap = rows.iter().find(|(p, _)| *p == Peer::Heap).map(|(_, v)| *v);
            println!(
                "  churn N={}: floor (slot table only) {floor:.1} ns = {:.2}x tickwheel{}",
                fmt_n(key.1),
                floor / ours,
                heap.map_or(String::new(), |h| format!(", {:.2}x BinaryHeap", floor / h))
            );
        }
        if beaten.is_empty() {
            println!(
                "  churn N={}: faster than every measured peer -> MET",
                fmt_n(key.1)
            );
        } else {
            println!(
                "  churn N={}: tickwheel {ours:.0} ns, not faster than {} -> MISSED",
                fmt_n(key.1),
                beaten.join(", ")
            );
        }
    }
}
