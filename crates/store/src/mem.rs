//! [`MemStore`]: the [`Store`] semantics without a disk, for `--in-memory` and tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use crate::plan::{plan, Prior};
use tickwheel_queue::{Change, DurableState, JobId, JobRecord, TubeName};

use crate::record::{until, validate};
use crate::{Recovered, Store, StoreError};

/// An in-memory [`Store`]: nothing survives the process, commits never fail for I/O.
///
/// Recovering from a `MemStore` (e.g. after the engine is rebuilt in a test) follows the same
/// rules as [`DiskStore`](crate::DiskStore).
///
/// # Examples
///
/// ```
/// use tickwheel_store::{MemStore, Store};
///
/// let store = MemStore::new();
/// store.reserve_ids(64).expect("in-memory reserve cannot fail");
/// assert_eq!(store.recover(0).expect("in-memory recover cannot fail").next_id, 64);
/// ```
#[derive(Debug, Default)]
pub struct MemStore {
    state: Mutex<MemState>,
}

#[derive(Debug, Default)]
struct MemState {
    jobs: BTreeMap<JobId, JobRecord>,
    due: BTreeSet<(u64, JobId)>,
    next_id: JobId,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// Number of stored jobs.
    pub fn len(&self) -> usize {
        self.lock().jobs.len()
    }

    /// True if no job is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, MemState> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than the panic itself; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store for MemStore {
    fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
        validate(batch)?;
        let mut s = self.lock();
        let p = plan(
            batch,
            |id| Ok(s.jobs.get(&id).cloned()),
            |id| Ok(s.jobs.get(&id).map(Prior::of)),
        )?;
        for (id, c) in p.changes {
            if let Some(u) = c.old.as_ref().and_then(Prior::until) {
                s.due.remove(&(u, id));
            }
            match c.new {
                Some(r) => {
                    if let Some(u) = until(&r) {
                        s.due.insert((u, id));
                    }
                    s.jobs.insert(id, r);
                }
                None => {
                    s.jobs.remove(&id);
                }
            }
        }
        if let Some(end) = p.id_end {
            s.next_id = s.next_id.max(end);
        }
        Ok(())
    }

    fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
        let s = self.lock();
        let resident = s
            .jobs
            .values()
            .filter(
                |r| !matches!(r.state, DurableState::Delayed { until } if until >= window_end_ms),
            )
            .cloned()
            .collect();
        let mut far: BTreeMap<TubeName, u64> = BTreeMap::new();
        for (_, id) in s.due.range((window_end_ms, 0)..) {
            let tube = &s.jobs.get(id).expect("due index entries have a job").tube;
            *far.entry(tube.clone()).or_default() += 1;
        }
        Ok(Recovered {
            next_id: s.next_id,
            resident,
            far_delayed: far.into_iter().collect(),
        })
    }

    fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        Ok(self.lock().jobs.get(&id).cloned())
    }

    fn delayed_between(
        &self,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        if from_ms >= to_ms {
            return Ok(Vec::new());
        }
        let s = self.lock();
        Ok(s.due
            .range((from_ms, 0)..(to_ms, 0))
            .take(limit)
            .map(|(_, id)| {
                s.jobs
                    .get(id)
                    .expect("due index entries have a job")
                    .clone()
            })
            .collect())
    }
}
