//! [`FaultyStore`]: fault injection at the [`Store`] level.
//!
//! fjall has no pluggable I/O layer, so faults are injected around the store: a countdown of
//! commits, then a failure of the chosen kind. It models what the real store does on a failed
//! write or fsync (return the cause, then refuse every later write as poisoned), so tests of
//! the layers above ([`GroupCommit`](crate::GroupCommit), the server) can check that no caller
//! is acknowledged for a failed commit and that failures reach every waiting caller. The real
//! store's own poisoning and full-disk handling are tested on a real (tmpfs) full disk.

use std::path::PathBuf;
use std::sync::Mutex;

use tickwheel_queue::{Change, JobId, JobRecord};

use crate::{Recovered, Store, StoreError};

/// The kind of failure a [`FaultyStore`] injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The journal write fails (EIO): nothing of the batch is applied.
    Write,
    /// The write succeeds but the fsync fails (EIO): the batch is applied to the inner store
    /// (it is in the page cache and may or may not survive), and the caller gets an error.
    Fsync,
    /// The write fails for lack of space (ENOSPC): nothing is applied.
    DiskFull,
}

/// Wraps a store and fails the commit after `after` successful ones.
///
/// # Examples
///
/// ```
/// use tickwheel_store::{Change, Fault, FaultyStore, MemStore, Store, StoreError};
///
/// let store = FaultyStore::new(MemStore::new(), Fault::Fsync, 1);
/// let del = [Change::Delete { id: 1 }];
/// assert!(store.commit(&del).is_ok());
/// assert!(matches!(store.commit(&del), Err(StoreError::Io { .. })));
/// assert!(matches!(store.commit(&del), Err(StoreError::Poisoned { .. })));
/// ```
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    fault: Fault,
    state: Mutex<FaultState>,
}

#[derive(Debug)]
struct FaultState {
    remaining: u64,
    poison: Option<StoreError>,
    injected: u64,
}

impl<S: Store> FaultyStore<S> {
    /// Wraps `inner`: `after` commits (or id reservations) succeed, the next one fails with
    /// `fault`, and the store is poisoned from then on.
    pub fn new(inner: S, fault: Fault, after: u64) -> FaultyStore<S> {
        FaultyStore {
            inner,
            fault,
            state: Mutex::new(FaultState {
                remaining: after,
                poison: None,
                injected: 0,
            }),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// How many faults were injected (0 or 1).
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `write` unless poisoned or the countdown is over.
    fn gate(&self, write: impl FnOnce() -> Result<(), StoreError>) -> Result<(), StoreError> {
        let mut st = self.lock();
        if let Some(p) = &st.poison {
            return Err(p.clone());
        }
        if st.remaining > 0 {
            st.remaining -= 1;
            return write();
        }
        let path = PathBuf::from("<injected fault>");
        let err = match self.fault {
            Fault::Write => StoreError::io(path, std::io::Error::from_raw_os_error(5)),
            Fault::Fsync => {
                // The bytes reached the inner store before the fsync failed.
                let _ = write();
                StoreError::io(path, std::io::Error::from_raw_os_error(5))
            }
            Fault::DiskFull => StoreError::io(path, std::io::Error::from_raw_os_error(28)),
        };
        st.injected += 1;
        st.poison = Some(err.clone().into_poisoned());
        Err(err)
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        crate::validate(batch)?;
        self.gate(|| self.inner.commit(batch))
    }

    fn writable(&self, bytes: u64) -> Result<(), StoreError> {
        if let Some(p) = &self.lock().poison {
            return Err(p.clone());
        }
        self.inner.writable(bytes)
    }

    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        self.inner.recover(window_end_ms)
    }

    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.inner.get(id)
    }

    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.inner.delayed_between(from_ms, to_ms, limit)
    }
}
