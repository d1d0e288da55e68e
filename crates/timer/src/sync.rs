//! One place that chooses between `std` and `loom` synchronisation (STYLE.md §8).
//!
//! Crate code imports atomics, mutexes and the command queue from here, never from `std`,
//! so `RUSTFLAGS="--cfg loom"` swaps every primitive whose interleavings matter for loom's
//! model-checked ones. `Arc` stays `std`'s in both builds: reference counting is not one of
//! the races we model, and loom's `Arc` cannot hold a `dyn` job.

pub(crate) use std::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// A mutex whose `lock` ignores poisoning: every critical section in this crate leaves its
/// data consistent before it can panic (callbacks never run under a lock).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: std::sync::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: std::sync::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The multi-producer queue of commands to the driver: lock-free (`crossbeam`'s `SegQueue`)
/// normally, a loom mutex around a `VecDeque` under loom so the model sees every hand-over.
#[derive(Debug)]
pub(crate) struct Queue<T> {
    #[cfg(not(loom))]
    inner: crossbeam_queue::SegQueue<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<std::collections::VecDeque<T>>,
}

impl<T> Queue<T> {
    pub(crate) fn new() -> Self {
        Queue {
            #[cfg(not(loom))]
            inner: crossbeam_queue::SegQueue::new(),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    #[cfg(not(loom))]
    pub(crate) fn push(&self, value: T) {
        self.inner.push(value);
    }

    #[cfg(loom)]
    pub(crate) fn push(&self, value: T) {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(value);
    }

    #[cfg(not(loom))]
    pub(crate) fn pop(&self) -> Option<T> {
        self.inner.pop()
    }

    #[cfg(loom)]
    pub(crate) fn pop(&self) -> Option<T> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
    }

    #[cfg(not(loom))]
    pub(crate) fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    #[cfg(loom)]
    pub(crate) fn is_empty(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }
}
