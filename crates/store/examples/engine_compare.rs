//! Engine comparison harness behind docs/decisions/0002-storage-engine.md.
//!
//! Writes `batches` batches of `batch` jobs (100-byte bodies) into fjall and redb, each batch one
//! atomic commit with one fsync: a `jobs` row (id BE -> record) plus a `due` index row
//! (until_ms BE ++ id BE -> ()) with a random due time 1-30 days out, as the store does.
//!
//! ```text
//! cargo run --release -p tickwheel-store --example engine_compare -- [batch] [batches]
//! ```
#![expect(
    clippy::unwrap_used,
    reason = "a measurement harness, not library code"
)]

use std::time::Instant;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, no dependency.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn due_key(until: u64, id: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&until.to_be_bytes());
    k[8..].copy_from_slice(&id.to_be_bytes());
    k
}

fn record(id: u64) -> Vec<u8> {
    let mut v = vec![7u8; 140];
    v[..8].copy_from_slice(&id.to_le_bytes());
    v
}

fn fjall_run(dir: &std::path::Path, batch: usize, batches: usize) -> f64 {
    use fjall::{Database, KeyspaceCreateOptions, PersistMode};
    let ks = Database::builder(dir)
        .manual_journal_persist(true)
        .open()
        .unwrap();
    let jobs = ks.keyspace("jobs", KeyspaceCreateOptions::default).unwrap();
    let due = ks.keyspace("due", KeyspaceCreateOptions::default).unwrap();
    let mut rng = Rng(42);
    let start = Instant::now();
    let mut id = 0u64;
    for _ in 0..batches {
        let mut b = ks.batch().durability(Some(PersistMode::SyncData));
        for _ in 0..batch {
            id += 1;
            let until = 86_400_000 + rng.next() % (29 * 86_400_000);
            b.insert(&jobs, id.to_be_bytes(), record(id));
            b.insert(&due, due_key(until, id), []);
        }
        b.commit().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("fjall disk space: {} bytes", ks.disk_space().unwrap());
    (batch * batches) as f64 / secs
}

fn redb_run(dir: &std::path::Path, batch: usize, batches: usize) -> f64 {
    use redb::{Database, Durability, TableDefinition};
    const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");
    const DUE: TableDefinition<(u64, u64), ()> = TableDefinition::new("due");
    let db = Database::create(dir.join("db.redb")).unwrap();
    let mut rng = Rng(42);
    let start = Instant::now();
    let mut id = 0u64;
    for _ in 0..batches {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Immediate);
        {
            let mut jobs = tx.open_table(JOBS).unwrap();
            let mut due = tx.open_table(DUE).unwrap();
            for _ in 0..batch {
                id += 1;
                let until = 86_400_000 + rng.next() % (29 * 86_400_000);
                jobs.insert(id, record(id).as_slice()).unwrap();
                due.insert((until, id), ()).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let size = std::fs::metadata(dir.join("db.redb")).unwrap().len();
    eprintln!("redb file size: {size} bytes");
    (batch * batches) as f64 / secs
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let batch = args.first().copied().unwrap_or(256);
    let batches = args.get(1).copied().unwrap_or(400);
    for round in 0..3 {
        let d = tempfile::tempdir_in(std::env::current_dir().unwrap()).unwrap();
        let f = fjall_run(d.path(), batch, batches);
        let d = tempfile::tempdir_in(std::env::current_dir().unwrap()).unwrap();
        let r = redb_run(d.path(), batch, batches);
        println!("round {round}: batch={batch} batches={batches} fjall {f:.0} puts/s, redb {r:.0} puts/s");
    }
}
