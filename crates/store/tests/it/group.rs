//! GroupCommit: every commit is applied (and durable) when it returns; concurrent batches merge.

use std::sync::{Arc, Condvar, Mutex};

use tickwheel_store::{
    Change, DiskOptions, DiskStore, GroupCommit, JobId, JobRecord, MemStore, Recovered, Store,
    StoreError,
};

use crate::util::ready;

#[test]
fn many_threads_every_acknowledged_put_is_durable() {
    const THREADS: u64 = 16;
    const PER_THREAD: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let acked = {
        let store = Arc::new(GroupCommit::new(
            DiskStore::open(dir.path(), DiskOptions::default()).unwrap(),
        ));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0..PER_THREAD {
                        let id = t * 1000 + i;
                        store.commit(&[Change::Put(ready(id, "t"))]).unwrap();
                        // Visible as soon as the commit returned.
                        assert_eq!(store.get(id).unwrap(), Some(ready(id, "t")));
                        acked.push(id);
                    }
                    acked
                })
            })
            .collect();
        let acked: Vec<JobId> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let stats = store.stats();
        assert_eq!(stats.caller_commits, THREADS * PER_THREAD);
        assert_eq!(stats.mutations, THREADS * PER_THREAD);
        assert!(stats.store_commits <= stats.caller_commits);
        acked
    };
    let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
    for id in &acked {
        assert_eq!(
            store.get(*id).unwrap(),
            Some(ready(*id, "t")),
            "acknowledged job {id} lost"
        );
    }
    assert_eq!(store.recover(0).unwrap().resident.len(), acked.len());
}

/// A store whose first commit blocks until the test opens the gate, so that the other callers
/// pile up behind it deterministically.
#[derive(Default)]
struct Gated {
    inner: MemStore,
    open: Mutex<bool>,
    cv: Condvar,
    commits: Mutex<Vec<usize>>,
}

impl Store for Gated {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
        self.commits.lock().unwrap().push(batch.len());
        self.inner.commit(batch)
    }
    fn recover(&self, w: u64) -> Result<Recovered, StoreError> {
        self.inner.recover(w)
    }
    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.inner.get(id)
    }
    fn delayed_between(&self, f: u64, t: u64, l: usize) -> Result<Vec<JobRecord>, StoreError> {
        self.inner.delayed_between(f, t, l)
    }
}

#[test]
fn waiting_batches_merge_into_one_store_commit() {
    const CALLERS: u64 = 12;
    let store = Arc::new(GroupCommit::new(Gated::default()));
    let first = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.commit(&[Change::Put(ready(0, "t"))]))
    };
    // Wait until the committer holds the first batch (it is no longer pending).
    while store.stats().caller_commits < 1 {
        std::thread::yield_now();
    }
    let rest: Vec<_> = (1..CALLERS)
        .map(|id| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                store.commit(&[Change::Put(ready(id, "t")), Change::Delete { id: 10_000 }])
            })
        })
        .collect();
    while store.stats().caller_commits < CALLERS {
        std::thread::yield_now();
    }
    *store.inner().open.lock().unwrap() = true;
    store.inner().cv.notify_all();
    first.join().unwrap().unwrap();
    for h in rest {
        h.join().unwrap().unwrap();
    }
    let commits = store.inner().commits.lock().unwrap().clone();
    // The first batch alone, or (if the committer had not yet taken it) everything in one.
    assert!(commits.len() <= 2, "store commits: {commits:?}");
    assert_eq!(commits.iter().sum::<usize>() as u64, 1 + 2 * (CALLERS - 1));
    assert!(store.stats().store_commits < store.stats().caller_commits);
    for id in 0..CALLERS {
        assert!(store.get(id).unwrap().is_some(), "job {id}");
    }
}

#[test]
fn invalid_batch_is_refused_alone() {
    let store = GroupCommit::new(MemStore::new());
    let mut bad = ready(1, "t");
    bad.body = bytes::Bytes::from(vec![0u8; tickwheel_store::MAX_BODY_LEN + 1]);
    assert!(matches!(
        store.commit(&[Change::Put(bad)]),
        Err(StoreError::TooLarge { .. })
    ));
    store.commit(&[Change::Put(ready(2, "t"))]).unwrap();
    assert!(store.get(2).unwrap().is_some());
    assert_eq!(store.stats().caller_commits, 1);
}

#[test]
fn dropping_the_group_commits_what_nobody_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = GroupCommit::new(DiskStore::open(dir.path(), DiskOptions::default()).unwrap());
        let ticket = store.submit(vec![Change::Put(ready(1, "t"))]).unwrap();
        drop(ticket);
        assert_eq!(
            store.stats().store_commits,
            0,
            "nobody waited: nothing committed yet"
        );
    }
    let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
    assert_eq!(store.get(1).unwrap(), Some(ready(1, "t")));
}

#[test]
fn a_later_ticket_covers_every_earlier_batch() {
    let store = GroupCommit::new(Gated::default());
    *store.inner().open.lock().unwrap() = true;
    let first = store.submit(vec![Change::Put(ready(1, "t"))]).unwrap();
    let second = store
        .submit(vec![
            Change::ReserveIds { end: 100 },
            Change::Put(ready(2, "t")),
        ])
        .unwrap();
    second.wait().unwrap();
    // One store commit for both batches, in order; the first ticket is settled too.
    assert_eq!(*store.inner().commits.lock().unwrap(), vec![3]);
    first.wait().unwrap();
    assert_eq!(store.stats().store_commits, 1);
    assert_eq!(store.recover(0).unwrap().next_id, 100);
}

#[test]
fn with_a_committer_thread_every_acknowledged_put_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Arc::new(
            GroupCommit::with_thread(DiskStore::open(dir.path(), DiskOptions::default()).unwrap())
                .unwrap(),
        );
        let handles: Vec<_> = (0..8u64)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..20 {
                        store
                            .commit(&[Change::Put(ready(t * 100 + i, "t"))])
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // Submitted and never waited for: the thread commits it anyway before it stops.
        drop(store.submit(vec![Change::Put(ready(999, "t"))]).unwrap());
    }
    let store = DiskStore::open(dir.path(), DiskOptions::default()).unwrap();
    assert_eq!(store.recover(0).unwrap().resident.len(), 8 * 20 + 1);
}

/// The ticket's future, polled by hand: pending while the (gated) committer thread commits,
/// ready once it is done, and woken by it.
#[test]
fn a_ticket_future_is_woken_by_the_committer() {
    use std::future::Future as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let woken = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&woken));
    let mut cx = Context::from_waker(&waker);

    let store = GroupCommit::with_thread(Gated::default()).unwrap();
    let ticket = store.submit(vec![Change::Put(ready(1, "t"))]).unwrap();
    let mut fut = std::pin::pin!(ticket.durable());
    // The thread is blocked in the gated commit (or about to be): never ready before the gate.
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    *store.inner().open.lock().unwrap() = true;
    store.inner().cv.notify_all();
    while woken.0.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
    assert!(store.get(1).unwrap().is_some());
}

/// The committer thread spins after each commit and then parks: a submit that lands while
/// it spins, just after it gave up spinning, or while it parks must each be committed (a lost
/// wake-up would leave `wait` blocked forever and the test would never finish). One client at
/// a time, with pauses scattered over the spin's whole range (50 µs, or after a one-batch
/// group up to 1 ms learnt from the last gap, ADR 0044), walks those windows: a pause longer
/// than twice the one before lands after the spin, a shorter one inside it. Every
/// acknowledged batch is then checked in the store.
#[test]
fn a_submit_around_the_committer_parking_is_never_lost() {
    let store = GroupCommit::with_thread(MemStore::new()).unwrap();
    // xorshift64: 0 to 1.3 ms, each pause unrelated to the one before (about half land
    // after the spin the previous gap set, half inside it).
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for id in 0..2_000u64 {
        store.commit(&[Change::Put(ready(id, "t"))]).unwrap();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::thread::sleep(std::time::Duration::from_nanos(x % 1_300_000));
    }
    for id in 0..2_000u64 {
        assert!(
            store.get(id).unwrap().is_some(),
            "job {id} acknowledged but missing"
        );
    }
    let stats = store.stats();
    assert_eq!(stats.caller_commits, 2_000);
    assert_eq!(
        stats.store_commits, 2_000,
        "one client at a time: one commit per batch"
    );
}

/// `GroupCommit::inline`: each submit has committed its batch when it returns — visible in the
/// store, its future ready at the first poll — from many threads at once, in one order.
#[test]
fn an_inline_group_commits_each_batch_before_submit_returns() {
    use std::future::Future as _;
    use std::task::{Context, Poll, Waker};

    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 50;
    let store = Arc::new(GroupCommit::inline(MemStore::new()));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let id = t * 1000 + i;
                    let ticket = store.submit(vec![Change::Put(ready(id, "t"))]).unwrap();
                    // In the inner store before anybody waits.
                    assert_eq!(store.inner().get(id).unwrap(), Some(ready(id, "t")));
                    let mut durable = std::pin::pin!(ticket.durable());
                    let mut cx = Context::from_waker(Waker::noop());
                    assert!(matches!(
                        durable.as_mut().poll(&mut cx),
                        Poll::Ready(Ok(()))
                    ));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = store.stats();
    assert_eq!(stats.caller_commits, THREADS * PER_THREAD);
    assert_eq!(stats.mutations, THREADS * PER_THREAD);
    // Concurrent submits may share a commit, never skip one.
    assert!(stats.store_commits >= 1 && stats.store_commits <= stats.caller_commits);
    assert_eq!(store.inner().len() as u64, THREADS * PER_THREAD);
}

/// A failing commit in an inline group: the submit that made it gets the store's error through
/// its ticket, every later one the poison; the batches before stay committed.
#[test]
fn an_inline_group_reports_a_failed_commit_through_the_ticket() {
    use tickwheel_store::{Fault, FaultyStore};

    let store = GroupCommit::inline(FaultyStore::new(MemStore::new(), Fault::Write, 1));
    store
        .submit(vec![Change::Put(ready(1, "t"))])
        .unwrap()
        .wait()
        .unwrap();
    let failed = store.submit(vec![Change::Put(ready(2, "t"))]).unwrap();
    // Failed by the submit itself, before anybody waits (a leader-mode group would not have
    // tried the commit yet).
    assert!(store.poisoned().is_some());
    assert!(
        matches!(failed.wait(), Err(StoreError::Io { .. })),
        "{:?}",
        failed.wait()
    );
    let later = store.submit(vec![Change::Put(ready(3, "t"))]).unwrap();
    assert!(matches!(later.wait(), Err(StoreError::Poisoned { .. })));
    assert!(store.get(1).unwrap().is_some());
    assert!(store.get(2).unwrap().is_none());
    assert_eq!(store.stats().store_commits, 1);
}
