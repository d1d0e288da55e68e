//! [`DelayQueue`]: values that come out once their deadline has passed, as a `Stream`.
//!
//! A private [`Wheel`] holds the values; one [`Sleep`] on the timer is armed at the
//! earliest deadline and re-armed (reusing its registration once it has fired) as that
//! deadline changes. A min-heap of `(deadline, key)` with lazy deletion answers `peek`
//! without scanning: every change that can make its top stale pops stale entries off the
//! top (each entry is pushed and popped once: amortised O(log n)), and it is rebuilt when
//! stale entries outnumber live ones.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tickwheel_core::{TimerKey, Wheel};

use crate::driver::Inner;
use crate::sleep::Sleep;
use crate::sync::Arc;
use crate::timer::Timer;

/// Names a value in a [`DelayQueue`]. Keys carry a generation: a key whose value was
/// removed or expired names nothing, even after its slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(TimerKey);

/// A value that came out of a [`DelayQueue`].
#[derive(Debug)]
pub struct Expired<T> {
    value: T,
    deadline: Instant,
    key: Key,
}

impl<T> Expired<T> {
    /// The value.
    pub fn get_ref(&self) -> &T {
        &self.value
    }

    /// The value, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// Takes the value.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// Its deadline (rounded up to the timer's tick).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key it had (no longer valid).
    pub fn key(&self) -> Key {
        self.key
    }
}

/// A queue of values, each released once its deadline has passed.
///
/// Single owner (`&mut self`), like a `Vec`; wrap it in a mutex to share it. Any deadline
/// is accepted (`Duration::MAX` included). `poll_expired` returns `Ready(None)` when the
/// queue is empty, and the polling task is woken when an insert, remove, reset or clear
/// changes what it waits for.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use tickwheel::DelayQueue;
///
/// futures::executor::block_on(async {
///     let mut queue = DelayQueue::new();
///     queue.insert("later", Duration::from_millis(3));
///     let gone = queue.insert("cancelled", Duration::from_millis(1));
///     queue.insert("sooner", Duration::from_millis(2));
///     assert_eq!(queue.remove(gone), Some("cancelled"));
///     assert_eq!(queue.remove(gone), None, "keys are generational");
///
///     let mut out = Vec::new();
///     while let Some(expired) = queue.next().await {
///         out.push(expired.into_inner());
///     }
///     assert_eq!(out, ["sooner", "later"]);
/// });
/// ```
pub struct DelayQueue<T> {
    inner: Arc<Inner>,
    wheel: Wheel<T>,
    /// `(deadline, key)` of every queued value, plus stale entries below a live top.
    index: BinaryHeap<Reverse<(u64, u64)>>,
    sleep: Sleep,
    waker: Option<Waker>,
}

impl<T> DelayQueue<T> {
    /// An empty queue on the [`default_timer`](crate::default_timer).
    #[must_use]
    pub fn new() -> Self {
        DelayQueue::with_timer(crate::default_timer())
    }

    /// An empty queue on `timer`.
    #[must_use]
    pub fn with_timer(timer: &Timer) -> Self {
        DelayQueue::with_capacity_on(timer, 0)
    }

    /// An empty queue with room for `capacity` values, on `timer`.
    #[must_use]
    pub fn with_capacity_on(timer: &Timer, capacity: usize) -> Self {
        let inner = Arc::clone(timer.inner());
        let now = inner.now_tick();
        let mut wheel = Wheel::starting_at(now);
        wheel.reserve(capacity);
        let sleep = timer.sleep_until(inner.far_future());
        DelayQueue {
            inner,
            wheel,
            index: BinaryHeap::new(),
            sleep,
            waker: None,
        }
    }

    /// Inserts `value`, released `delay` from now. O(1).
    pub fn insert(&mut self, value: T, delay: Duration) -> Key {
        let at = self
            .inner
            .now()
            .checked_add(delay)
            .map_or(u64::MAX, |at| self.inner.ticks.tick_ceil(at));
        self.insert_tick(value, at)
    }

    /// Inserts `value`, released at `deadline`. O(1).
    pub fn insert_at(&mut self, value: T, deadline: Instant) -> Key {
        let tick = self.inner.ticks.tick_ceil(deadline);
        self.insert_tick(value, tick)
    }

    fn insert_tick(&mut self, value: T, tick: u64) -> Key {
        let before = self.wheel.next_deadline();
        let key = self.wheel.insert(tick, value);
        self.index_push(key);
        self.wake_if_changed(before);
        Key(key)
    }

    /// Removes a value; `None` if the key is stale (removed, expired, or from another
    /// queue). O(1).
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let before = self.wheel.next_deadline();
        let value = self.wheel.remove(key.0);
        self.tidy();
        self.wake_if_changed(before);
        value
    }

    /// Moves a value's deadline to `delay` from now; `false` for a stale key. O(1).
    pub fn reset(&mut self, key: Key, delay: Duration) -> bool {
        let at = self
            .inner
            .now()
            .checked_add(delay)
            .unwrap_or_else(|| self.inner.far_future());
        self.reset_at(key, at)
    }

    /// Moves a value's deadline to `deadline`; `false` for a stale key. O(1).
    pub fn reset_at(&mut self, key: Key, deadline: Instant) -> bool {
        let before = self.wheel.next_deadline();
        let found = self
            .wheel
            .reset(key.0, self.inner.ticks.tick_ceil(deadline));
        if found {
            self.index_push(key.0);
            self.tidy();
        }
        self.wake_if_changed(before);
        found
    }

    /// The value of a key, if it is still queued.
    pub fn get(&self, key: Key) -> Option<&T> {
        self.wheel.get(key.0)
    }

    /// The deadline of a key, if it is still queued (rounded up to the timer's tick).
    pub fn deadline(&self, key: Key) -> Option<Instant> {
        self.wheel.deadline(key.0).map(|t| self.inner.instant_of(t))
    }

    /// A key with the earliest deadline, without waiting (among values with equal
    /// deadlines, not necessarily the one that comes out first). O(1).
    pub fn peek(&self) -> Option<Key> {
        self.index
            .peek()
            .map(|Reverse((_, key))| Key(TimerKey::from_u64(*key)))
    }

    fn index_push(&mut self, key: TimerKey) {
        if let Some(deadline) = self.wheel.deadline(key) {
            self.index.push(Reverse((deadline, key.to_u64())));
        }
    }

    /// Pops stale entries off the index's top; rebuilds it when mostly stale.
    fn tidy(&mut self) {
        while let Some(Reverse((deadline, key))) = self.index.peek() {
            if self.wheel.deadline(TimerKey::from_u64(*key)) == Some(*deadline) {
                break;
            }
            self.index.pop();
        }
        if self.index.len() > 2 * self.wheel.len() + 32 {
            self.index = self
                .wheel
                .iter()
                .map(|(key, deadline, _)| Reverse((deadline, key.to_u64())))
                .collect();
        }
    }

    /// Number of queued values.
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// `true` if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Values the queue can hold without allocating.
    pub fn capacity(&self) -> usize {
        self.wheel.capacity()
    }

    /// Frees unused capacity; keys stay valid.
    pub fn shrink_to_fit(&mut self) {
        self.wheel.shrink_to_fit();
        self.index = self
            .wheel
            .iter()
            .map(|(key, deadline, _)| Reverse((deadline, key.to_u64())))
            .collect();
    }

    /// Removes every value (and wakes the polling task, which then sees `Ready(None)`).
    pub fn clear(&mut self) {
        self.wheel.clear();
        self.index.clear();
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    fn wake_if_changed(&mut self, before: Option<u64>) {
        if self.wheel.next_deadline() != before {
            if let Some(w) = self.waker.take() {
                w.wake();
            }
        }
    }

    /// The next expired value: `Ready(Some(_))` once one is due, `Pending` while values wait,
    /// `Ready(None)` when the queue is empty.
    ///
    /// # Cancellation safety
    ///
    /// No value is lost by not polling, or by dropping a `next()` future: values stay
    /// queued until returned.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        loop {
            let now = self.inner.now_tick();
            if let Some(next) = self.wheel.next_deadline().filter(|&d| d <= now) {
                if let Some((key, value)) = self.wheel.poll(now) {
                    self.tidy();
                    return Poll::Ready(Some(Expired {
                        value,
                        deadline: self.inner.instant_of(next),
                        key: Key(key),
                    }));
                }
            }
            let Some(next) = self.wheel.next_deadline() else {
                self.waker = Some(cx.waker().clone());
                return Poll::Ready(None);
            };
            if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                self.waker = Some(cx.waker().clone());
            }
            self.sleep.reset(self.inner.instant_of(next));
            if Pin::new(&mut self.sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        DelayQueue::new()
    }
}

impl<T> Unpin for DelayQueue<T> {}

impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.get_mut().poll_expired(cx)
    }
}

impl<T: fmt::Debug> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}
