//! One place that chooses between the real and the `loom` synchronisation (STYLE.md §8).
//!
//! Crate code imports atomics, mutexes and condition variables from here, never from `std`,
//! so `RUSTFLAGS="--cfg loom"` swaps every primitive whose interleavings matter for loom's
//! model-checked ones. `Arc` stays `std`'s in both builds: reference counting is not one of
//! the races we model, and loom's `Arc` cannot hold a `dyn` job.
//!
//! Outside loom, mutexes are `parking_lot`'s: no poisoning to check on every lock and
//! unlock (two of them per schedule + cancel pair and per `Sleep`), and every critical
//! section in this crate leaves its data consistent before it could panic anyway
//! (callbacks, wakers and closure drops never run under a lock).

pub(crate) use std::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// A mutex without poisoning.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        return self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }

    /// The lock if it is free now, else `None` (never waits).
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        #[cfg(not(loom))]
        return self.inner.try_lock();
        #[cfg(loom)]
        return match self.inner.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
    }
}

/// A condition variable for [`Mutex`].
#[derive(Debug)]
pub(crate) struct Condvar {
    #[cfg(not(loom))]
    inner: parking_lot::Condvar,
    #[cfg(loom)]
    inner: loom::sync::Condvar,
}

impl Condvar {
    pub(crate) fn new() -> Self {
        Condvar {
            #[cfg(not(loom))]
            inner: parking_lot::Condvar::new(),
            #[cfg(loom)]
            inner: loom::sync::Condvar::new(),
        }
    }

    /// Waits for a notification or until `timeout` has passed (loom: a notification).
    #[cfg(not(loom))]
    pub(crate) fn wait_for<'a, T>(
        &self,
        mut guard: MutexGuard<'a, T>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, T> {
        let _ = self.inner.wait_for(&mut guard, timeout);
        guard
    }

    #[cfg(loom)]
    pub(crate) fn wait_for<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        _timeout: std::time::Duration,
    ) -> MutexGuard<'a, T> {
        self.inner
            .wait(guard)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn notify_all(&self) {
        self.inner.notify_all();
    }
}
