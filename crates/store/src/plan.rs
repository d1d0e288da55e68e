//! Turning a batch of [`Change`]s into per-job before/after pairs, shared by the stores.
//!
//! A batch may touch one job several times (put, then update, then delete); what is written is
//! the job's final state, and the indexes change by the difference between its state before
//! the batch and after it.

use std::collections::BTreeMap;

use tickwheel_queue::{Change, JobId, JobRecord};

use crate::record::ids_reserved;
use crate::StoreError;

/// A job's state before and after a batch (`None`: absent).
#[derive(Debug)]
pub(crate) struct JobDiff {
    pub(crate) old: Option<JobRecord>,
    pub(crate) new: Option<JobRecord>,
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

/// Plans `batch`, reading each job's state before the batch with `lookup` (once per job).
///
/// # Errors
///
/// Whatever `lookup` returns.
pub(crate) fn plan(
    batch: &[Change],
    mut lookup: impl FnMut(JobId) -> Result<Option<JobRecord>, StoreError>,
) -> Result<Plan, StoreError> {
    let mut p = Plan {
        id_end: ids_reserved(batch),
        ..Plan::default()
    };
    for m in batch {
        let Some(id) = crate::record::change_id(m) else {
            continue; // an id reservation: only `id_end`
        };
        let change = match p.changes.entry(id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let old = lookup(id)?;
                e.insert(JobDiff {
                    new: old.clone(),
                    old,
                })
            }
        };
        match m {
            Change::Put(r) => {
                change.new = Some(r.clone());
                let end = r.id.saturating_add(1);
                p.id_end = Some(p.id_end.unwrap_or(0).max(end));
                p.put_end = Some(p.put_end.unwrap_or(0).max(end));
            }
            Change::Update {
                state, priority, ..
            } => {
                if let Some(r) = change.new.as_mut() {
                    r.state = *state;
                    r.priority = *priority;
                }
            }
            Change::Delete { .. } => change.new = None,
            Change::ReserveIds { .. } => {}
        }
    }
    Ok(p)
}
