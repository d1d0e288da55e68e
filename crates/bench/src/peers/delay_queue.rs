//! Adapter for `tokio_util::time::DelayQueue<u64>`, driven by tokio's paused clock.
//!
//! How it is driven with a logical clock:
//! - A current-thread runtime built with `enable_time()` and `start_paused(true)`: tokio's
//!   clock is frozen at an epoch and moves only when told to. The queue is created right
//!   after the runtime (inside its context), so its own start instant is that epoch and tick
//!   `t` is `epoch + t ms` exactly (DelayQueue has 1 ms resolution).
//! - Stepping (`poll_until`): `rt.block_on(tokio::time::advance(now - clock))` moves the
//!   paused clock; `advance` yields once, which lets the runtime run its time driver so the
//!   queue's internal `Sleep` sees the new time. Then `poll_expired` is called with a no-op
//!   waker `Context` until it returns `Pending` (or `Ready(None)`: empty). This `block_on`
//!   per clock advance is part of DelayQueue's measured cost; `--workload all` prints it.
//! - Jumping: DelayQueue's `peek()` returns the head of the next slot to expire, which is not
//!   always the earliest timer (a higher-level slot's list is unsorted), so jumping to
//!   `deadline(peek())` could fire timers late. Instead we use tokio's own mechanism:
//!   `rt.block_on(poll_fn(|cx| queue.poll_expired(cx)))` with the paused clock, which
//!   auto-advances the clock to the queue's next internal wake-up (exact to the slot); then
//!   the rest of what is due is drained with the no-op waker.

use std::future::poll_fn;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::time::Instant;
use tokio_util::time::delay_queue::{DelayQueue, Key};

use super::TimerImpl;

pub(crate) struct DelayQueueTimer {
    queue: DelayQueue<u64>,
    epoch: Instant,
    /// The paused clock, in ticks since `epoch`.
    now: u64,
    // Dropped last: the queue's timers belong to this runtime's driver.
    rt: Runtime,
}

impl DelayQueueTimer {
    /// Drains every expired item without blocking (no-op waker).
    fn drain_ready(&mut self, out: &mut Vec<u64>) {
        let _guard = self.rt.enter();
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(expired)) = self.queue.poll_expired(&mut cx) {
            out.push(expired.into_inner());
        }
    }

    fn clock_ticks(&self) -> u64 {
        let _guard = self.rt.enter();
        let elapsed = Instant::now().duration_since(self.epoch);
        u64::try_from(elapsed.as_millis()).expect("paused clock fits u64 ms")
    }
}

impl TimerImpl for DelayQueueTimer {
    type Handle = Key;
    const NAME: &'static str = "DelayQueue";
    const PEEK: &'static str =
        "no exact peek: jumps let tokio's paused clock auto-advance to the queue's next wake-up";

    fn create(capacity: usize) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("build a current-thread tokio runtime");
        let (queue, epoch) = {
            let _guard = rt.enter();
            (DelayQueue::with_capacity(capacity), Instant::now())
        };
        DelayQueueTimer {
            queue,
            epoch,
            now: 0,
            rt,
        }
    }

    #[inline(always)]
    fn insert(&mut self, deadline: u64, id: u64) -> Key {
        let _guard = self.rt.enter();
        self.queue
            .insert_at(id, self.epoch + Duration::from_millis(deadline))
    }

    #[inline(always)]
    fn cancel(&mut self, handle: Key) -> Option<u64> {
        self.queue.try_remove(&handle).map(|e| e.into_inner())
    }

    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>) {
        if now > self.now {
            let step = Duration::from_millis(now - self.now);
            self.rt.block_on(tokio::time::advance(step));
            self.now = now;
        }
        self.drain_ready(out);
    }

    fn next_deadline(&mut self) -> Option<u64> {
        let _guard = self.rt.enter();
        let key = self.queue.peek()?;
        let at = self.queue.deadline(&key).duration_since(self.epoch);
        Some(u64::try_from(at.as_millis()).expect("deadline fits u64 ms"))
    }

    fn jump(&mut self, out: &mut Vec<u64>) -> Option<u64> {
        if self.queue.is_empty() {
            return None;
        }
        let queue = &mut self.queue;
        let first = self.rt.block_on(poll_fn(|cx| queue.poll_expired(cx)));
        self.now = self.clock_ticks();
        if let Some(expired) = first {
            out.push(expired.into_inner());
        }
        self.drain_ready(out);
        Some(self.now)
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// Cost of one paused-clock advance (`block_on(advance(1 ms))`) on a runtime with one pending
/// timer, in ns: the fixed overhead DelayQueue pays per stepped millisecond here.
pub(crate) fn advance_cost_ns(steps: u64) -> f64 {
    let mut timer = DelayQueueTimer::create(16);
    let key = timer.insert(steps + 1_000, 0);
    let start = std::time::Instant::now();
    for now in 1..=steps {
        let step = Duration::from_millis(1);
        timer.rt.block_on(tokio::time::advance(step));
        timer.now = now;
    }
    let ns = start.elapsed().as_nanos() as f64 / steps as f64;
    timer.cancel(key);
    ns
}
