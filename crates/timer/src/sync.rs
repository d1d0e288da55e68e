//! One place that chooses between `std` and `loom` synchronisation (STYLE.md §8).
//!
//! Crate code imports atomics, mutexes and condition variables from here, never from `std`,
//! so `RUSTFLAGS="--cfg loom"` swaps every primitive whose interleavings matter for loom's
//! model-checked ones. `Arc` stays `std`'s in both builds: reference counting is not one of
//! the races we model, and loom's `Arc` cannot hold a `dyn` job.

pub(crate) use std::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

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

    /// The lock if it is free now.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.inner.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A condition variable for [`Mutex`], ignoring poisoning like it.
#[derive(Debug)]
pub(crate) struct Condvar {
    #[cfg(not(loom))]
    inner: std::sync::Condvar,
    #[cfg(loom)]
    inner: loom::sync::Condvar,
}

impl Condvar {
    pub(crate) fn new() -> Self {
        Condvar {
            #[cfg(not(loom))]
            inner: std::sync::Condvar::new(),
            #[cfg(loom)]
            inner: loom::sync::Condvar::new(),
        }
    }

    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.inner
            .wait(guard)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn notify_all(&self) {
        self.inner.notify_all();
    }
}
