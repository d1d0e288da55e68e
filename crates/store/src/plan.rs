//! Turning a batch of [`Mutation`]s into per-job before/after pairs, shared by the stores.
//!
//! A batch may touch one job several times (put, then update, then delete); what is written is
//! the job's final state, and the indexes change by the difference between its state before
//! the batch and after it.

use std::collections::BTreeMap;

use crate::{JobId, JobRecord, Mutation, StoreError};

/// A job's state before and after a batch (`None`: absent).
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) old: Option<JobRecord>,
    pub(crate) new: Option<JobRecord>,
}

/// The effect of one batch.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Per job touched, in id order.
    pub(crate) changes: BTreeMap<JobId, Change>,
    /// One past the largest id put in the batch.
    pub(crate) id_end: Option<JobId>,
}

/// Plans `batch`, reading each job's state before the batch with `lookup` (once per job).
///
/// # Errors
///
/// Whatever `lookup` returns.
pub(crate) fn plan(
    batch: &[Mutation],
    mut lookup: impl FnMut(JobId) -> Result<Option<JobRecord>, StoreError>,
) -> Result<Plan, StoreError> {
    let mut p = Plan::default();
    for m in batch {
        let id = m.id();
        let change = match p.changes.entry(id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let old = lookup(id)?;
                e.insert(Change {
                    new: old.clone(),
                    old,
                })
            }
        };
        match m {
            Mutation::Put(r) => {
                change.new = Some(r.clone());
                p.id_end = Some(p.id_end.unwrap_or(0).max(r.id.saturating_add(1)));
            }
            Mutation::Update {
                state, priority, ..
            } => {
                if let Some(r) = change.new.as_mut() {
                    r.state = state.clone();
                    r.priority = *priority;
                }
            }
            Mutation::Delete { .. } => change.new = None,
        }
    }
    Ok(p)
}
