//! sleep / timeout / interval / DelayQueue on tokio, futures::executor and async-executor.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tickwheel::{Clock, DelayQueue, ManualClock, MissedTickBehavior, Timer};

const WAIT: Duration = Duration::from_secs(10);

/// Runs `fut` on the futures executor, failing (not hanging) after `WAIT`.
fn bounded<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(futures::executor::block_on(fut));
    });
    rx.recv_timeout(WAIT)
        .expect("future did not complete in time")
}

struct CountingWaker(std::sync::atomic::AtomicUsize);
impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let w = Arc::new(CountingWaker(0.into()));
    (Arc::clone(&w), Waker::from(w))
}
fn wakes(w: &CountingWaker) -> usize {
    w.0.load(std::sync::atomic::Ordering::SeqCst)
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn sleep_is_never_early_on_futures_executor() {
    bounded(async {
        for us in [0u64, 50, 300, 1_000, 2_500] {
            let start = Instant::now();
            tickwheel::sleep(Duration::from_micros(us)).await;
            assert!(
                start.elapsed() >= Duration::from_micros(us),
                "woke early for {us} µs"
            );
        }
    });
}

#[test]
fn sleep_and_timeout_on_tokio() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let timer = Timer::new();
    let t = timer.clone();
    let result = rt.block_on(async move {
        tokio::time::timeout(WAIT, async move {
            let deadline = Instant::now() + Duration::from_millis(3);
            t.sleep_until(deadline).await;
            assert!(Instant::now() >= deadline);
            let slow = t.sleep(Duration::from_secs(3600));
            let r = t.timeout(Duration::from_millis(2), slow).await;
            assert!(r.is_err(), "timeout fires first");
            t.timeout(Duration::from_secs(3600), async { 7 }).await
        })
        .await
    });
    assert_eq!(result.expect("bounded"), Ok(7));
}

#[test]
fn sleep_on_async_executor() {
    let ex = async_executor::Executor::new();
    let timer = Timer::new();
    let task = ex.spawn({
        let timer = timer.clone();
        async move {
            let start = Instant::now();
            futures::future::join_all(
                (1..=20u64).map(|i| timer.sleep(Duration::from_micros(i * 100))),
            )
            .await;
            start.elapsed()
        }
    });
    let elapsed = futures_lite::future::block_on(ex.run(futures_lite::future::or(task, async {
        async_io_sleep(WAIT).await;
        panic!("async-executor run did not finish in time")
    })));
    assert!(elapsed >= Duration::from_millis(2));
}

async fn async_io_sleep(d: Duration) {
    async_io::Timer::after(d).await;
}

#[test]
fn dropping_a_sleep_cancels_its_timer() {
    let timer = Timer::new();
    let (_w, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut s = timer.sleep(Duration::from_secs(3600));
    assert!(Pin::new(&mut s).poll(&mut cx).is_pending());
    drop(s);
    let m = timer.metrics();
    assert_eq!(m.scheduled, 1);
    assert_eq!(m.cancelled, 1);
    let never_polled = timer.sleep(Duration::from_secs(1));
    drop(never_polled);
    assert_eq!(
        timer.metrics().scheduled,
        1,
        "an unpolled Sleep never registers"
    );
}

#[test]
fn sleep_wakes_the_latest_waker_on_a_manual_clock() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .build()
        .expect("build");
    let (w1, waker1) = counting_waker();
    let (w2, waker2) = counting_waker();
    let mut s = timer.sleep(Duration::from_millis(10));
    assert!(Pin::new(&mut s)
        .poll(&mut Context::from_waker(&waker1))
        .is_pending());
    assert!(Pin::new(&mut s)
        .poll(&mut Context::from_waker(&waker2))
        .is_pending());
    clock.advance(Duration::from_millis(9));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(wakes(&w2), 0, "not due yet");
    clock.advance(Duration::from_millis(1));
    eventually("second waker woken", || wakes(&w2) == 1);
    assert_eq!(wakes(&w1), 0, "the replaced waker is not woken");
    assert!(Pin::new(&mut s)
        .poll(&mut Context::from_waker(&waker2))
        .is_ready());
    assert!(s.is_elapsed());
}

#[test]
fn a_completed_sleep_can_be_reset_and_reused() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .build()
        .expect("build");
    let (w, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let mut s = timer.sleep(Duration::from_millis(1));
    assert!(Pin::new(&mut s).poll(&mut cx).is_pending());
    clock.advance(Duration::from_millis(1));
    eventually("fired", || wakes(&w) == 1);
    assert!(Pin::new(&mut s).poll(&mut cx).is_ready());
    s.reset(clock.now() + Duration::from_millis(5));
    assert!(Pin::new(&mut s).poll(&mut cx).is_pending(), "re-armed");
    clock.advance(Duration::from_millis(4));
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        Pin::new(&mut s).poll(&mut cx).is_pending(),
        "not early after reset"
    );
    clock.advance(Duration::from_millis(1));
    eventually("fired again", || wakes(&w) >= 2);
    assert!(Pin::new(&mut s).poll(&mut cx).is_ready());
}

#[test]
fn interval_skips_missed_ticks_by_default_and_bursts_on_request() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .build()
        .expect("build");
    let (_w, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    for (behavior, expect) in [
        // The late tick (due at 10) comes once, then the policy decides.
        (MissedTickBehavior::Skip, vec![0u64, 10, 40]),
        (MissedTickBehavior::Delay, vec![0, 10, 45]),
        (MissedTickBehavior::Burst, vec![0, 10, 20, 30, 40]),
    ] {
        let origin = clock.now();
        let mut iv = timer.interval_at(origin, Duration::from_millis(10));
        iv.set_missed_tick_behavior(behavior);
        let mut seen = Vec::new();
        let mut rounds = 0;
        // First tick at once, then a 35 ms stall.
        if let Poll::Ready(t) = iv.poll_tick(&mut cx) {
            seen.push(t);
        }
        clock.advance(Duration::from_millis(35));
        while seen.len() < expect.len() {
            match iv.poll_tick(&mut cx) {
                Poll::Ready(t) => seen.push(t),
                Poll::Pending => {
                    clock.advance(Duration::from_millis(1));
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            rounds += 1;
            assert!(rounds < 5_000, "{behavior:?}: ticks never came: {seen:?}");
        }
        let got: Vec<u64> = seen
            .iter()
            .map(|t| u64::try_from((*t - origin).as_millis()).expect("ms"))
            .collect();
        assert_eq!(got, expect, "{behavior:?}");
    }
}

#[test]
fn delay_queue_releases_in_order_and_ends_when_empty() {
    let timer = Timer::new();
    let mut q = DelayQueue::with_timer(&timer);
    let out = bounded(async move {
        for (v, ms) in [(3, 6u64), (1, 2), (2, 4)] {
            q.insert(v, Duration::from_millis(ms));
        }
        let far = q.insert(99, Duration::MAX);
        assert_eq!(q.remove(far), Some(99));
        assert_eq!(q.remove(far), None);
        let mut out = Vec::new();
        while let Some(e) = q.next().await {
            assert!(Instant::now() >= e.deadline(), "released early");
            out.push(e.into_inner());
        }
        out
    });
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn delay_queue_wakes_its_task_after_insert_remove_and_clear() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .build()
        .expect("build");
    let mut q = DelayQueue::with_timer(&timer);
    let (w, waker) = counting_waker();
    let mut cx = Context::from_waker(&waker);
    let late = q.insert("late", Duration::from_secs(60));
    assert!(q.poll_expired(&mut cx).is_pending());
    q.insert("early", Duration::from_millis(1));
    assert_eq!(wakes(&w), 1, "an earlier insert wakes the poller to re-arm");
    assert!(q.poll_expired(&mut cx).is_pending());
    clock.advance(Duration::from_millis(1));
    eventually("woken by the timer", || wakes(&w) >= 2);
    match q.poll_expired(&mut cx) {
        Poll::Ready(Some(e)) => assert_eq!(*e.get_ref(), "early"),
        other => panic!(
            "expected the early value, got {:?}",
            other.map(|o| o.map(|e| e.into_inner()))
        ),
    }
    assert!(q.poll_expired(&mut cx).is_pending());
    let before = wakes(&w);
    assert_eq!(q.remove(late), Some("late"));
    assert!(
        wakes(&w) > before,
        "removing the last value wakes the poller"
    );
    assert!(matches!(q.poll_expired(&mut cx), Poll::Ready(None)));
    q.insert("x", Duration::from_secs(1));
    assert!(q.poll_expired(&mut cx).is_pending());
    let before = wakes(&w);
    q.clear();
    assert!(wakes(&w) > before, "clear wakes the poller");
    assert!(matches!(q.poll_expired(&mut cx), Poll::Ready(None)));
    assert_eq!(q.len(), 0);
}

#[test]
fn delay_queue_reset_moves_deadlines_and_keys_are_generational() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .build()
        .expect("build");
    let mut q = DelayQueue::with_capacity_on(&timer, 16);
    assert!(q.capacity() >= 16);
    let a = q.insert('a', Duration::from_millis(10));
    let b = q.insert('b', Duration::from_millis(20));
    assert!(q.reset(a, Duration::from_millis(30)));
    assert_eq!(q.peek(), Some(b));
    assert_eq!(q.remove(b), Some('b'));
    let c = q.insert('c', Duration::from_millis(5));
    assert_ne!(b, c);
    assert_eq!(q.get(b), None, "a stale key never names the reused slot");
    assert!(!q.reset(b, Duration::ZERO));
    q.shrink_to_fit();
    assert_eq!(q.get(c), Some(&'c'));
    assert_eq!(q.len(), 2);
}

/// `peek` (an index, no scan) against a model: after every insert / remove / reset /
/// expiry, the peeked key is live and has the earliest deadline.
#[test]
fn delay_queue_peek_matches_a_model() {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .worker_threads(0)
        .build()
        .expect("build");
    let mut queue = DelayQueue::with_timer(&timer);
    let mut live: Vec<tickwheel::Key> = Vec::new();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |n: u64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % n
    };
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    for step in 0..3_000 {
        match next(10) {
            0..=3 => live.push(queue.insert(step, Duration::from_millis(next(500)))),
            4 | 5 if !live.is_empty() => {
                let k = live.swap_remove(next(live.len() as u64) as usize);
                assert!(queue.remove(k).is_some(), "a live key removes its value");
            }
            6 | 7 if !live.is_empty() => {
                let k = live[next(live.len() as u64) as usize];
                assert!(queue.reset(k, Duration::from_millis(next(500))));
            }
            _ => {
                clock.advance(Duration::from_millis(next(40)));
                while let Poll::Ready(Some(e)) = queue.poll_expired(&mut cx) {
                    live.retain(|k| *k != e.key());
                }
            }
        }
        let earliest = live.iter().filter_map(|k| queue.deadline(*k)).min();
        let peeked = queue
            .peek()
            .map(|k| queue.deadline(k).expect("peek returns a live key"));
        assert_eq!(peeked, earliest, "step {step}");
    }
}
