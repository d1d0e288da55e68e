//! Model-checked (`RUSTFLAGS="--cfg loom" cargo test --release -p tickwheel-store --test
//! loom_apply`, run by `ci/loom.sh`); without `--cfg loom` the same bodies run once as plain
//! tests.
//!
//! The applier hand-off (`tickwheel_store::wal::apply`, ADR 0018): the commit path settles a
//! commit once its log record is synced and queues its fjall batch for the applier thread
//! (a bounded queue: one job); the applier writes the batches in order and forwards the
//! persist requests queued with them to the persist thread (`wal::recycle`); a reader waits
//! for the applier up to what was settled; the next commit's plan reads a job through the
//! overlay or, once applied, from fjall. The properties, in every interleaving:
//! - a segment of the log is never overwritten while it holds a record fjall has not made
//!   durable (the recycling rule, now with fjall behind the log);
//! - a reader that waited sees every commit settled before it started;
//! - a plan's read of a settled commit's job finds it (overlay or fjall);
//! - after the applier fails, nobody waits for it forever and nothing more is applied;
//! - with quiet pushes (ADR 0022: the applier is woken after the acknowledgement, not by the
//!   push), no wait depends on that late wake-up: the model where it never comes still
//!   finishes, every waiter waking the applier itself.

use std::sync::Arc;

#[cfg(loom)]
use loom::{
    sync::{
        atomic::{AtomicBool, AtomicU64},
        Mutex,
    },
    thread,
};
use std::sync::atomic::Ordering::SeqCst;
#[cfg(not(loom))]
use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64},
        Mutex,
    },
    thread,
};

use tickwheel_store::wal::apply::{Handoff, Job, Stopped};
use tickwheel_store::wal::recycle::{channel, persist_loop, Covered};

mod loom_common;
use loom_common::model;

/// fjall as the store sees it: the sequence numbers written (in order), and how many of them a
/// sync made durable, under one lock.
#[derive(Default)]
struct Fjall {
    state: Mutex<(Vec<u64>, usize)>,
}

impl Fjall {
    fn write(&self, seq: u64) {
        let mut st = self.state.lock().expect("lock");
        assert_eq!(
            st.0.last().copied().unwrap_or(0) + 1,
            seq,
            "applied out of order"
        );
        st.0.push(seq);
    }

    fn persist(&self) -> Result<(), ()> {
        let mut st = self.state.lock().expect("lock");
        st.1 = st.0.len();
        Ok(())
    }

    fn durable(&self) -> u64 {
        let st = self.state.lock().expect("lock");
        st.1 as u64
    }

    fn holds(&self, seq: u64) -> bool {
        self.state.lock().expect("lock").0.contains(&seq)
    }
}

/// One job a commit; the job's key and value are its sequence number.
fn job(seq: u64, switched: bool) -> Job<u64> {
    Job {
        seq,
        batch: seq,
        keys: vec![seq],
        then_persist: switched.then(|| seq - 1),
        cost: 1,
    }
}

/// How the commit path hands a job to the applier.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Push {
    /// `push`: queue and wake the applier.
    Waking,
    /// `push_quiet`, and no `wake` ever after (the server's `after_commit` wakes it; here it
    /// never comes, so every wait must wake the applier itself).
    Quiet,
}

/// `records` commits into two one-record segments, with the applier, the persist thread and
/// a reader beside the commit path.
fn settle_then_apply(records: u64, push: Push) {
    let fjall = Arc::new(Fjall::default());
    let covered = Arc::new(Covered::new(0));
    let handoff = Arc::new(Handoff::<u64, u64>::new(1, 0));
    let settled = Arc::new(AtomicU64::new(0));
    let (tx, rx) = channel::<u64>();
    let stop = Arc::new(AtomicBool::new(false));
    let persister = {
        let (fjall, covered, stop) = (fjall.clone(), covered.clone(), stop.clone());
        thread::spawn(move || {
            persist_loop(&rx, &covered, || stop.load(SeqCst), || fjall.persist());
        })
    };
    let applier = {
        let (fjall, handoff) = (fjall.clone(), handoff.clone());
        thread::spawn(move || {
            while let Some(job) = handoff.next() {
                fjall.write(job.batch);
                handoff.applied(job.seq, &job.keys);
                if let Some(upto) = job.then_persist {
                    tx.send(upto)
                        .expect("the persist thread waits for requests");
                }
            }
            tx
        })
    };
    let reader = {
        let (fjall, handoff, settled) = (fjall.clone(), handoff.clone(), settled.clone());
        thread::spawn(move || {
            let seen = settled.load(SeqCst);
            // A plan's read: the overlay, else fjall.
            if seen > 0 {
                assert!(
                    handoff.lookup(seen) == Some(seen) || fjall.holds(seen),
                    "settled commit {seen} is neither in the overlay nor in fjall"
                );
            }
            // A read of the tables (`get`): wait for the applier first.
            handoff.drain().expect("the applier does not fail here");
            assert!(
                seen == 0 || fjall.holds(seen),
                "a reader that waited misses settled commit {seen}"
            );
        })
    };
    let mut last = [0u64; 2];
    for seq in 1..=records {
        let segment = ((seq - 1) % 2) as usize;
        if !covered.may_overwrite(last[segment]) {
            // As `DiskStore::apply`: wait for the applier to have written the segment's
            // records, then sync fjall on the commit path, covering what was applied.
            handoff
                .wait_applied(last[segment])
                .expect("the applier does not fail here");
            let applied = handoff.applied_seq();
            fjall.persist().expect("model sync");
            covered.cover(applied);
        }
        assert!(
            fjall.durable() >= last[segment],
            "record {seq} overwrites record {} of segment {segment}, which fjall does not \
             hold durably (durable up to {})",
            last[segment],
            fjall.durable()
        );
        last[segment] = seq;
        // The record is synced in the log: settle, and queue its fjall batch.
        match push {
            Push::Waking => handoff.push(job(seq, seq > 1), [seq]),
            Push::Quiet => handoff.push_quiet(job(seq, seq > 1), [seq]),
        }
        .expect("the applier does not fail here");
        settled.store(seq, SeqCst);
    }
    reader.join().expect("reader");
    handoff.close();
    let tx = applier.join().expect("applier");
    assert!(fjall.holds(records), "close drains the queue");
    stop.store(true, SeqCst);
    tx.send(0).expect("the persist thread waits for requests");
    persister.join().expect("persist thread");
    assert!(
        covered.get() <= fjall.durable(),
        "covered past fjall's sync"
    );
}

#[test]
fn settled_commits_are_seen_and_segments_recycled_only_once_fjall_holds_them() {
    model(|| settle_then_apply(3, Push::Waking));
}

#[test]
fn quiet_pushes_leave_no_waiter_waiting_for_a_late_wake_up() {
    model(|| settle_then_apply(3, Push::Quiet));
}

/// The applier fails on its first job: the commit path's next push and a reader's wait return
/// `Stopped` instead of waiting forever, and nothing after the failure is applied.
#[test]
fn a_failed_applier_stops_every_waiter() {
    model(|| {
        let handoff = Arc::new(Handoff::<u64, u64>::new(1, 0));
        let applier = {
            let handoff = handoff.clone();
            thread::spawn(move || {
                if let Some(job) = handoff.next() {
                    assert_eq!(job.seq, 1);
                    handoff.fail();
                }
                assert!(handoff.next().is_none(), "work after a failure");
            })
        };
        let reader = {
            let handoff = handoff.clone();
            thread::spawn(move || {
                let r = handoff.wait_applied(1);
                assert_eq!(r, Err(Stopped), "job 1 was never applied");
            })
        };
        handoff.push(job(1, false), [1]).expect("first push");
        // The second push may be queued (before the failure) or refused (after it); the third
        // waits for room behind the second unless the failure came first; neither hangs.
        let _ = handoff.push(job(2, false), [2]);
        let _ = handoff.push(job(3, false), [3]);
        assert_eq!(handoff.drain(), Err(Stopped));
        reader.join().expect("reader");
        applier.join().expect("applier");
        assert_eq!(handoff.applied_seq(), 0);
    });
}
