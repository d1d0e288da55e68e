//! Model-checked (`RUSTFLAGS="--cfg loom" cargo test --release -p tickwheel-store --test
//! loom_recycle`, run by `ci/loom.sh`); without `--cfg loom` the same bodies run once as plain
//! tests.
//!
//! The write-ahead log's segment recycling (`tickwheel_store::wal::recycle`, ADR 0014): the
//! commit path writes records into two segments in turn, asks the persist thread to sync
//! "fjall" whenever it leaves a segment, and before overwriting a segment syncs fjall itself
//! unless the persist thread has covered that segment's last record. The property, in every
//! interleaving: a segment is never overwritten while it holds a record that fjall has not
//! made durable (a crash then would lose an acknowledged commit).

use std::sync::Arc;

#[cfg(loom)]
use loom::{
    sync::{atomic::AtomicBool, Mutex},
    thread,
};
use std::sync::atomic::Ordering::SeqCst;
#[cfg(not(loom))]
use std::{
    sync::{atomic::AtomicBool, Mutex},
    thread,
};

use tickwheel_store::wal::recycle::{channel, persist_loop, Covered};

mod loom_common;
use loom_common::model;

/// fjall as the log sees it: what was written (the last commit's sequence number) and what a
/// sync made durable, under one lock (fjall's journal lock orders a sync after the writes
/// before it).
#[derive(Default)]
struct Fjall {
    /// (written, durable)
    state: Mutex<(u64, u64)>,
}

impl Fjall {
    fn write(&self, seq: u64) {
        self.state.lock().expect("lock").0 = seq;
    }

    fn persist(&self) -> Result<(), ()> {
        let mut st = self.state.lock().expect("lock");
        st.1 = st.0;
        Ok(())
    }

    fn durable(&self) -> u64 {
        self.state.lock().expect("lock").1
    }
}

/// The commit path of `records` commits into two one-record segments, beside the persist
/// thread.
fn recycle(records: u64) {
    let fjall = Arc::new(Fjall::default());
    let covered = Arc::new(Covered::new(0));
    let (tx, rx) = channel::<u64>();
    // The store stops the thread by dropping the sender; loom's channel does not model a
    // disconnect, so the model stops it with the loop's `stopped` check and one more request.
    let stop = Arc::new(AtomicBool::new(false));
    let persister = {
        let fjall = Arc::clone(&fjall);
        let covered = Arc::clone(&covered);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            persist_loop(&rx, &covered, || stop.load(SeqCst), || fjall.persist());
        })
    };
    // The last record of each segment (0: none yet).
    let mut last = [0u64; 2];
    for seq in 1..=records {
        let segment = ((seq - 1) % 2) as usize;
        if !covered.may_overwrite(last[segment]) {
            // As `DiskStore::apply`: sync fjall on the commit path, which covers every commit
            // written so far.
            fjall.persist().expect("model sync");
            covered.cover(seq - 1);
        }
        assert!(
            fjall.durable() >= last[segment],
            "record {seq} overwrites record {} of segment {segment}, which fjall holds only \
             in memory (durable up to {})",
            last[segment],
            fjall.durable()
        );
        last[segment] = seq;
        fjall.write(seq);
        if seq > 1 {
            // The log moved to another segment with this record: ask for the one it left.
            tx.send(seq - 1)
                .expect("the persist thread runs until the sender is dropped");
        }
    }
    stop.store(true, SeqCst);
    tx.send(0).expect("the persist thread waits for requests");
    persister.join().expect("persist thread");
    assert!(
        covered.get() <= fjall.durable(),
        "covered past fjall's sync"
    );
}

#[test]
fn a_segment_is_overwritten_only_once_fjall_holds_its_records() {
    model(|| recycle(4));
}
