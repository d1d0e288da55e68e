//! The engine's durable changes in the store's words, and back.
//!
//! Commits themselves are the store's [`GroupCommit`](tickwheel_store::GroupCommit): the server
//! submits each operation's changes under the engine lock (see [`crate::shared`]) and every
//! reply waits for its [`Ticket`](tickwheel_store::Ticket).

use tickwheel_queue::{Change, DurableState, JobId, JobRecord};
use tickwheel_store::{JobRecord as StoredJob, Mutation, StoredState};

/// The store mutations of `changes`, and the largest id reservation among them.
pub(crate) fn to_mutations(changes: Vec<Change>) -> (Vec<Mutation>, Option<JobId>) {
    let mut mutations = Vec::with_capacity(changes.len());
    let mut ids_end: Option<JobId> = None;
    for change in changes {
        match change {
            Change::Put(job) => mutations.push(Mutation::Put(to_stored(job))),
            Change::Update {
                id,
                state,
                priority,
            } => mutations.push(Mutation::Update {
                id,
                state: to_stored_state(state),
                priority,
            }),
            Change::Delete { id } => mutations.push(Mutation::Delete { id }),
            Change::ReserveIds { end } => ids_end = Some(ids_end.unwrap_or(0).max(end)),
        }
    }
    (mutations, ids_end)
}

fn to_stored(job: JobRecord) -> StoredJob {
    StoredJob {
        id: job.id,
        tube: job.tube,
        priority: job.priority,
        ttr_ms: job.ttr,
        state: to_stored_state(job.state),
        created_ms: job.created,
        body: job.body,
    }
}

fn to_stored_state(state: DurableState) -> StoredState {
    match state {
        DurableState::Ready => StoredState::Ready,
        DurableState::Delayed { until } => StoredState::Delayed { until_ms: until },
        DurableState::Buried => StoredState::Buried,
    }
}

pub(crate) fn from_stored(job: StoredJob) -> JobRecord {
    JobRecord {
        id: job.id,
        tube: job.tube,
        priority: job.priority,
        ttr: job.ttr_ms,
        state: match job.state {
            StoredState::Ready => DurableState::Ready,
            StoredState::Delayed { until_ms } => DurableState::Delayed { until: until_ms },
            StoredState::Buried => DurableState::Buried,
        },
        created: job.created_ms,
        body: job.body,
    }
}
