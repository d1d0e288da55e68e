//! Turning a batch of [`Change`]s into per-job before/after pairs, shared by the stores.
//!
//! A batch may touch one job several times (put, then update, then delete); what is written is
//! the job's final state, and the indexes change by the difference between its state before
//! the batch and after it.
//!
//! Of the state before, the indexes need only where the job was ([`Prior`]): a job the batch
//! first touches with a delete is located ([`plan`]'s `locate`), not read back, since nothing
//! of its record is written again; a job first touched by an update is read whole (the update
//! rewrites its record).

use std::collections::BTreeMap;

use tickwheel_queue::{Change, JobId, JobRecord, TubeName};

use crate::record::{ids_reserved, until};
use crate::StoreError;

/// Where a job was before a batch: what the indexes need to drop it or move it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Prior {
    /// Ready or buried: in the resident table.
    Resident,
    /// Delayed until `until` (ms): in the due table, counted in its tube's delayed count.
    Due {
        /// When it becomes ready.
        until: u64,
        /// Its tube (for the delayed count).
        tube: TubeName,
    },
}

impl Prior {
    /// Where `r` is stored.
    pub(crate) fn of(r: &JobRecord) -> Prior {
        match until(r) {
            None => Prior::Resident,
            Some(until) => Prior::Due {
                until,
                tube: r.tube.clone(),
            },
        }
    }

    /// The job's due time, if delayed.
    pub(crate) fn until(&self) -> Option<u64> {
        match self {
            Prior::Resident => None,
            Prior::Due { until, .. } => Some(*until),
        }
    }
}

/// Where the jobs of the latest commits are ([`Prior`], or `None`: gone), so that a delete
/// soon after a job's put or last change is planned without a read of the tables (ADR 0032).
/// Two generations of at most [`Recent::GENERATION`] jobs each: when the young one fills, it
/// becomes the old one and the old one is dropped, so memory stays bounded and a job not
/// touched for a while is located in the tables again.
///
/// The caller records a batch's outcome only once the batch is written (a refused batch
/// changes nothing), and every write of the tables goes through it: an entry is then the job's
/// place in the tables, or in the applier's queue on its way there.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    young: rustc_hash::FxHashMap<JobId, Option<Prior>>,
    old: rustc_hash::FxHashMap<JobId, Option<Prior>>,
}

impl Recent {
    /// Jobs per generation.
    pub(crate) const GENERATION: usize = 1 << 14;

    /// Where job `id` is, if one of the recorded batches touched it: `Some(None)` if it is
    /// gone; `None` if not known here.
    pub(crate) fn get(&self, id: JobId) -> Option<Option<Prior>> {
        self.young.get(&id).or_else(|| self.old.get(&id)).cloned()
    }

    /// Records where the jobs of a written batch are now.
    pub(crate) fn record(&mut self, plan: &Plan) {
        for (&id, c) in &plan.changes {
            if self.young.len() >= Self::GENERATION {
                // The old generation's table is kept and cleared for the young one: no table
                // is grown (rehashed, its pages faulted in) again.
                std::mem::swap(&mut self.young, &mut self.old);
                self.young.clear();
            }
            self.young.insert(id, c.new.as_ref().map(Prior::of));
        }
    }
}

/// A job's state before and after a batch (`None`: absent).
#[derive(Debug)]
pub(crate) struct JobDiff {
    pub(crate) old: Option<Prior>,
    pub(crate) new: Option<JobRecord>,
    /// The index in the batch of the put that `new` is, unchanged: the job's last change in
    /// the batch was that put (so its encoded record is the one the log record holds).
    pub(crate) put_at: Option<usize>,
}

/// The effect of one batch.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Per job touched, in id order.
    pub(crate) changes: BTreeMap<JobId, JobDiff>,
    /// One past the largest id put or reserved in the batch (the new id high-water mark).
    pub(crate) id_end: Option<JobId>,
    /// One past the largest id put in the batch.
    pub(crate) put_end: Option<JobId>,
}

/// Plans `batch`. Each job's state before the batch is asked for once: with `locate` (where
/// it is, if it exists) when the batch first deletes it, else with `lookup` (its record, if it
/// exists).
///
/// # Errors
///
/// Whatever `lookup` or `locate` returns.
pub(crate) fn plan(
    batch: &[Change],
    mut lookup: impl FnMut(JobId) -> Result<Option<JobRecord>, StoreError>,
    mut locate: impl FnMut(JobId) -> Result<Option<Prior>, StoreError>,
) -> Result<Plan, StoreError> {
    let mut p = Plan {
        id_end: ids_reserved(batch),
        ..Plan::default()
    };
    for (i, m) in batch.iter().enumerate() {
        let Some(id) = crate::record::change_id(m) else {
            continue; // an id reservation: only `id_end`
        };
        let change = match p.changes.entry(id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let diff = if let Change::Delete { .. } = m {
                    // Deleted first: its record is not needed, only where it was.
                    JobDiff {
                        old: locate(id)?,
                        new: None,
                        put_at: None,
                    }
                } else {
                    let new = lookup(id)?;
                    JobDiff {
                        old: new.as_ref().map(Prior::of),
                        new,
                        put_at: None,
                    }
                };
                e.insert(diff)
            }
        };
        match m {
            Change::Put(r) => {
                change.new = Some(r.clone());
                change.put_at = Some(i);
                let end = r.id.saturating_add(1);
                p.id_end = Some(p.id_end.unwrap_or(0).max(end));
                p.put_end = Some(p.put_end.unwrap_or(0).max(end));
            }
            Change::Update {
                state,
                priority,
                history,
                ..
            } => {
                if let Some(r) = change.new.as_mut() {
                    r.update(*state, *priority, *history);
                }
                change.put_at = None;
            }
            Change::Delete { .. } => {
                change.new = None;
                change.put_at = None;
            }
            Change::ReserveIds { .. } => {}
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tickwheel_queue::{DurableState, JobHistory};

    use super::*;

    fn record(id: JobId, state: DurableState) -> JobRecord {
        JobRecord {
            id,
            tube: TubeName::new("t").expect("a valid name"),
            priority: 1,
            ttr: 1_000,
            state,
            created: 0,
            body: Bytes::from_static(b"body"),
            idempotency_key: None,
            history: JobHistory::default(),
        }
    }

    #[test]
    fn a_job_deleted_first_is_located_and_one_updated_first_is_read() {
        let delayed = DurableState::Delayed { until: 50 };
        let batch = [
            Change::Delete { id: 1 },
            Change::Delete { id: 2 },
            Change::Update {
                id: 3,
                state: DurableState::Buried,
                priority: 7,
                history: JobHistory::default(),
            },
            Change::Delete { id: 4 },
        ];
        let mut looked_up = Vec::new();
        let mut located = Vec::new();
        let p = plan(
            &batch,
            |id| {
                looked_up.push(id);
                Ok(Some(record(id, delayed)))
            },
            |id| {
                located.push(id);
                Ok(match id {
                    1 => Some(Prior::Resident),
                    2 => Some(Prior::of(&record(2, delayed))),
                    _ => None,
                })
            },
        )
        .expect("the closures do not fail");
        assert_eq!(looked_up, vec![3], "only the updated job's record is read");
        assert_eq!(located, vec![1, 2, 4]);
        let diff = |id| p.changes.get(&id).expect("every job is planned");
        assert_eq!(diff(1).old, Some(Prior::Resident));
        assert_eq!(diff(1).new, None);
        assert_eq!(diff(2).old.as_ref().and_then(Prior::until), Some(50));
        assert_eq!(diff(4).old, None);
        assert_eq!(diff(3).old.as_ref().and_then(Prior::until), Some(50));
        let three = diff(3).new.as_ref().expect("updated, not deleted");
        assert_eq!((three.state, three.priority), (DurableState::Buried, 7));
        assert_eq!(three.body, Bytes::from_static(b"body"));
    }
    #[test]
    fn recent_answers_the_latest_place_until_two_generations_pass() {
        let delayed = DurableState::Delayed { until: 9 };
        let planned = |batch: &[Change]| {
            plan(batch, |_| Ok(None), |_| Ok(None)).expect("the closures do not fail")
        };
        let mut recent = Recent::default();
        recent.record(&planned(&[
            Change::Put(record(1, DurableState::Ready)),
            Change::Put(record(2, delayed)),
        ]));
        assert_eq!(recent.get(1), Some(Some(Prior::Resident)));
        assert_eq!(recent.get(2), Some(Some(Prior::of(&record(2, delayed)))));
        assert_eq!(recent.get(3), None, "never seen: not known here");
        // The job moved: the newer place shadows the older, in the next generation too.
        recent.record(
            &plan(
                &[Change::Delete { id: 2 }],
                |_| Ok(None),
                |_| Ok(Some(Prior::of(&record(2, delayed)))),
            )
            .expect("plans"),
        );
        assert_eq!(recent.get(2), Some(None), "deleted: known gone");
        let filler = |from: JobId| -> Vec<Change> {
            (from..from + Recent::GENERATION as JobId)
                .map(|id| Change::Put(record(id, DurableState::Ready)))
                .collect()
        };
        recent.record(&planned(&filler(100)));
        assert_eq!(recent.get(2), Some(None), "one generation on: still known");
        assert_eq!(recent.get(1), Some(Some(Prior::Resident)));
        recent.record(&planned(&filler(100 + Recent::GENERATION as JobId)));
        assert_eq!(
            recent.get(1),
            None,
            "two generations on: forgotten, located in the tables"
        );
        assert!(recent.young.len() + recent.old.len() <= 2 * Recent::GENERATION);
    }
}
