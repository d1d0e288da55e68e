//! Shared helpers: job builders, a tiny deterministic RNG, directory copies.

use std::path::Path;

use bytes::Bytes;
use tickwheel_store::{DurableState, JobId, JobRecord, TubeName};

pub fn job(id: JobId, tube: &str, state: DurableState) -> JobRecord {
    JobRecord {
        id,
        tube: TubeName::new(tube).expect("valid tube name"),
        priority: (id % 7) as u32,
        ttr: 1000 + id,
        state,
        created: id * 3,
        body: Bytes::from(format!("body of job {id}").into_bytes()),
        idempotency_key: None,
        history: Default::default(),
    }
}

pub fn tube(name: &str) -> TubeName {
    TubeName::new(name).expect("valid tube name")
}

/// The due time of a delayed record.
pub fn due(r: &JobRecord) -> Option<u64> {
    match r.state {
        DurableState::Delayed { until } => Some(until),
        _ => None,
    }
}

pub fn delayed(id: JobId, tube: &str, until_ms: u64) -> JobRecord {
    job(id, tube, DurableState::Delayed { until: until_ms })
}

pub fn ready(id: JobId, tube: &str) -> JobRecord {
    job(id, tube, DurableState::Ready)
}

/// xorshift64*, so tests need no RNG dependency and replay from a printed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn from_time() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Rng(t | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Copies a directory tree (the store is closed, or we copy what a crash would leave).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Every regular file under `dir`, sorted.
pub fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(files(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}
