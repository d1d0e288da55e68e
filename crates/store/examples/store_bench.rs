//! Store benchmarks (release mode; not a test). Reports medians; see docs/decisions/0002.
//!
//! ```text
//! cargo run --release -p tickwheel-store --example store_bench -- puts [threads] [puts_per_thread] [rounds]
//! cargo run --release -p tickwheel-store --example store_bench -- populate DIR [jobs]
//! cargo run --release -p tickwheel-store --example store_bench -- recover DIR
//! ```
//!
//! `puts`: durable puts/s — `threads` producers, each committing one 100-byte-body delayed put
//! (due in 1–30 days) at a time through `GroupCommit<DiskStore>` with `Durability::Sync`
//! (acknowledged after fsync), rounds alternating between the two committers: the first
//! waiter commits (`GroupCommit::new`) and a committer thread (`GroupCommit::with_thread`). `populate`: writes `jobs` delayed jobs due in 1–30 days, in
//! batches of 1000. `recover`: run in a fresh process, so RSS is recovery's alone: opens the
//! store, recovers with a 1-hour window (nothing resident) and a 2-day window, commits one put
//! (the store accepts writes), and prints times, RSS and disk use.
#![expect(clippy::unwrap_used, reason = "a benchmark binary, not library code")]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tickwheel_store::{
    Change, DiskOptions, DiskStore, DurableState, GroupCommit, JobRecord, Store, TubeName,
};

const DAY_MS: u64 = 86_400_000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// A job due in 1–30 days. Bodies are pseudo-random bytes, so the engine's block compression
/// does not flatter the disk numbers.
fn job(id: u64, rng: &mut Rng, _body: &Bytes) -> JobRecord {
    let body: Vec<u8> = (0..100 / 8 + 1)
        .flat_map(|_| rng.next().to_le_bytes())
        .take(100)
        .collect();
    let state = DurableState::Delayed {
        until: DAY_MS + rng.next() % (29 * DAY_MS),
    };
    JobRecord {
        id,
        tube: TubeName::new(&format!("tube-{}", id % 8)).expect("valid tube name"),
        priority: 1024,
        ttr: 60_000,
        state,
        created: 0,
        body: Bytes::from(body),
        idempotency_key: None,
        // As put: stored in layout 1, as most jobs are.
        history: tickwheel_store::implied_history(state, 0),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn dir_size(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let m = e.metadata().unwrap();
                    if m.is_dir() {
                        dir_size(&e.path())
                    } else {
                        m.len()
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Allocated (not apparent) size, as `du` reports: the journal is preallocated sparse or not.
fn du(p: &Path) -> String {
    std::process::Command::new("du")
        .args(["-sb", "--apparent-size"])
        .arg(p)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
        + " apparent / "
        + &std::process::Command::new("du")
            .args(["-sk"])
            .arg(p)
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| {
                s.split_whitespace()
                    .next()
                    .map(|k| format!("{} KiB allocated", k))
            })
            .unwrap_or_default()
}

fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn puts(threads: u64, per_thread: u64, rounds: usize) {
    let body = Bytes::from(vec![b'x'; 100]);
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..rounds * 2 {
        let mode = round % 2;
        let dir = tempfile::tempdir_in(".").unwrap();
        let disk = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
        let store = Arc::new(if mode == 0 {
            GroupCommit::new(disk)
        } else {
            GroupCommit::with_thread(disk).unwrap()
        });
        // Ids come from one counter, as the engine hands them out.
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let store = Arc::clone(&store);
                let body = body.clone();
                let next = Arc::clone(&next);
                std::thread::spawn(move || {
                    let mut rng = Rng(t * 7919 + 1);
                    for _ in 0..per_thread {
                        let id = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        store
                            .commit(&[Change::Put(job(id, &mut rng, &body))])
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        let stats = store.stats();
        let rate = (threads * per_thread) as f64 / secs;
        println!(
            "round {round} ({}): {} durable puts in {secs:.2} s = {rate:.0} puts/s; {} store commits (fsyncs), {:.1} puts per fsync",
            MODES[mode],
            threads * per_thread,
            stats.store_commits,
            stats.caller_commits as f64 / stats.store_commits as f64
        );
        rates[mode].push(rate);
    }
    for (mode, rates) in rates.iter_mut().enumerate() {
        println!(
            "median ({}): {:.0} durable puts/s ({threads} threads, 100-byte bodies)",
            MODES[mode],
            median(rates)
        );
    }
}

const MODES: [&str; 2] = ["first waiter commits", "committer thread"];

fn populate(dir: &Path, jobs: u64) {
    let body = Bytes::from(vec![b'x'; 100]);
    let store = DiskStore::open(dir, DiskOptions::default()).unwrap();
    let mut rng = Rng(12345);
    let start = Instant::now();
    let mut live_bytes = 0u64;
    let mut id = 0;
    while id < jobs {
        let batch: Vec<_> = (id..jobs.min(id + 1000))
            .map(|i| {
                let j = job(i, &mut rng, &body);
                // Locator in `jobs` (8 + 9), record under its `due` key (16 + 31 + tube + body).
                live_bytes += 8 + 9 + 16 + 31 + j.tube.as_str().len() as u64 + 100;
                Change::Put(j)
            })
            .collect();
        id += batch.len() as u64;
        store.commit(&batch).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    store.reserve_ids(jobs).unwrap();
    println!(
        "populated {jobs} delayed jobs in {secs:.1} s ({:.0} jobs/s, batches of 1000)",
        jobs as f64 / secs
    );
    drop(store);
    println!(
        "live data {live_bytes} bytes; store dir {} ({} by file lengths)",
        du(dir),
        dir_size(dir)
    );
}

fn recover(dir: &Path) {
    let t0 = Instant::now();
    let store = DiskStore::open(dir, DiskOptions::default()).unwrap();
    let t_open = t0.elapsed();
    let r = store.recover(3_600_000).unwrap();
    let t_recover = t0.elapsed();
    let body = Bytes::from(vec![b'x'; 100]);
    store
        .commit(&[Change::Put(job(r.next_id, &mut Rng(1), &body))])
        .unwrap();
    let t_write = t0.elapsed();
    let far: u64 = r.far_delayed.iter().map(|(_, n)| n).sum();
    println!(
        "open {:.1} ms; recover(1 h window) done at {:.1} ms: {} resident, {far} far delayed in {} tubes; first durable commit at {:.1} ms",
        t_open.as_secs_f64() * 1e3,
        t_recover.as_secs_f64() * 1e3,
        r.resident.len(),
        r.far_delayed.len(),
        t_write.as_secs_f64() * 1e3
    );
    println!(
        "RSS after recover: VmRSS {} / VmHWM {}",
        status("VmRSS:"),
        status("VmHWM:")
    );
    let t1 = Instant::now();
    let r2 = store.recover(2 * DAY_MS).unwrap();
    println!(
        "recover(2-day window): {} resident in {:.1} ms; VmRSS {} / VmHWM {}",
        r2.resident.len(),
        t1.elapsed().as_secs_f64() * 1e3,
        status("VmRSS:"),
        status("VmHWM:")
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).map(|a| a.parse().unwrap()).unwrap_or(d);
    match args.first().map(String::as_str) {
        Some("puts") => puts(num(1, 64), num(2, 3000), num(3, 3) as usize),
        Some("populate") => populate(Path::new(&args[1]), num(2, 1_000_000)),
        Some("recover") => recover(Path::new(&args[1])),
        _ => eprintln!("usage: store_bench puts [threads] [per_thread] [rounds] | populate DIR [jobs] | recover DIR"),
    }
}
