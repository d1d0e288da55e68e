//! Real crashes: a child process (this test binary, re-executed into `crash_child`) commits
//! batches through `GroupCommit<DiskStore>` and prints every acknowledged put and delete; the
//! parent SIGKILLs it at a random moment, reopens the store and checks that every acknowledged
//! put is present unless its delete was attempted, that acknowledged deletes stay deleted,
//! and that `next_id` is past every acknowledged id. Rounds reuse the directory, so later rounds
//! also recover stores that were themselves recovered. Rounds cycle through the three
//! `Durability` modes: even `None` (no fsync) must survive a process crash, as the bytes are in
//! the OS page cache when the commit returns.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use tickwheel_store::{Change, DiskOptions, DiskStore, Durability, GroupCommit, Store};

use crate::util::{delayed, Rng};

const CHILD_ENV: &str = "TICKWHEEL_STORE_CRASH_CHILD_DIR";
const DURABILITY_ENV: &str = "TICKWHEEL_STORE_CRASH_DURABILITY";

/// Rounds cycle through the modes: all of them promise to survive a process crash.
fn durability(round: usize) -> (&'static str, Durability) {
    match round % 3 {
        0 => ("sync", Durability::Sync),
        1 => ("periodic", Durability::Periodic { interval_ms: 20 }),
        _ => ("none", Durability::None),
    }
}
const ROUNDS: usize = 9;

/// The child's body; a no-op (passing) test unless run by `acknowledged_writes_survive_sigkill`.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mode = std::env::var(DURABILITY_ENV).unwrap();
    let (_, d) = (0..3)
        .map(durability)
        .find(|(name, _)| *name == mode)
        .unwrap();
    let store = DiskStore::open(&dir, DiskOptions::with_durability(d)).unwrap();
    let start = store.recover(0).unwrap().next_id;
    let store = Arc::new(GroupCommit::new(store));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(start));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::clone(&store);
            let next = Arc::clone(&next);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                // Bounded: the parent kills us long before this ends.
                for i in 0..20_000u64 {
                    let ids: Vec<u64> = (0..3)
                        .map(|_| next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                        .collect();
                    let mut batch: Vec<_> = ids
                        .iter()
                        .map(|&id| Change::Put(delayed(id, "crash", id % 50_000)))
                        .collect();
                    let del =
                        (i % 4 == 3).then(|| mine.swap_remove((i as usize * 7 + t) % mine.len()));
                    if let Some(id) = del {
                        // Announced first: if we die between commit and ack, the parent knows
                        // this job may be gone although its delete was never acknowledged.
                        println!("try-del {id}");
                        batch.push(Change::Delete { id });
                    }
                    store.commit(&batch).unwrap();
                    for id in &ids {
                        println!("put {id}");
                    }
                    if let Some(id) = del {
                        println!("del {id}");
                    }
                    mine.extend(ids);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng::from_time();
    eprintln!("crash test seed {}", rng.0);
    let mut live = BTreeSet::new();
    let mut deleted = BTreeSet::new();
    let mut maybe_deleted = BTreeSet::new();
    for round in 0..ROUNDS {
        let kill_after = 10 + rng.below(3000);
        let mut child = Command::new(&exe)
            .args([
                "crash::crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env(DURABILITY_ENV, durability(round).0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut acks = 0u64;
        let mut killed = false;
        for line in out.lines() {
            let line = line.unwrap();
            if let Some(id) = line.strip_prefix("put ") {
                live.insert(id.parse::<u64>().unwrap());
                acks += 1;
            } else if let Some(id) = line.strip_prefix("try-del ") {
                let id = id.parse::<u64>().unwrap();
                assert!(live.remove(&id), "child deletes {id}, which it had not put");
                maybe_deleted.insert(id);
            } else if let Some(id) = line.strip_prefix("del ") {
                let id = id.parse::<u64>().unwrap();
                assert!(
                    maybe_deleted.remove(&id),
                    "child acknowledged deleting {id} without announcing it"
                );
                deleted.insert(id);
            }
            if acks >= kill_after && !killed {
                child.kill().unwrap(); // SIGKILL
                killed = true;
            }
        }
        let status = child.wait().unwrap();
        assert!(
            killed,
            "round {round}: child exited by itself ({status}) after {acks} acks"
        );

        let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
        let rec = store.recover(u64::MAX).unwrap();
        let present: BTreeSet<u64> = rec.resident.iter().map(|r| r.id).collect();
        for id in &live {
            let r = store.get(*id).unwrap();
            assert_eq!(
                r,
                Some(delayed(*id, "crash", id % 50_000)),
                "round {round}: acknowledged put {id} lost"
            );
            assert!(
                present.contains(id),
                "round {round}: {id} missing from recover()"
            );
        }
        for id in &maybe_deleted {
            // Delete committed or not: either way the job is whole or gone.
            let r = store.get(*id).unwrap();
            assert!(
                r.is_none() || r == Some(delayed(*id, "crash", id % 50_000)),
                "round {round}: job {id} damaged"
            );
        }
        for id in &deleted {
            assert_eq!(
                store.get(*id).unwrap(),
                None,
                "round {round}: acknowledged delete {id} came back"
            );
        }
        let max_acked = live
            .iter()
            .chain(&deleted)
            .chain(&maybe_deleted)
            .max()
            .copied()
            .unwrap_or(0);
        assert!(
            rec.next_id > max_acked,
            "round {round}: next_id {} <= acknowledged id {max_acked}",
            rec.next_id
        );
        eprintln!(
            "round {round} ({}): killed after {acks} acks; {} live, {} deleted, {} stored",
            durability(round).0,
            live.len(),
            deleted.len(),
            present.len()
        );
    }
}
