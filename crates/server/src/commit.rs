//! Group commit: the engine's durable changes go to the store in engine order, many
//! connections' changes share one store commit (one fsync), and every reply waits for the
//! commit that covers what it reports.
//!
//! # Ground rules
//!
//! - Batches are submitted while the engine lock is held, so the committer sees them in the
//!   order the engine made them; it never reorders.
//! - A [`Ticket`] resolves once its batch (and every earlier one) is durable, or with the
//!   error that stopped it. After a store error every later batch fails too (the store is
//!   poisoned): nothing is acknowledged that is not durable.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use tickwheel_queue::{Change, DurableState, JobRecord};
use tickwheel_store::{JobRecord as StoredJob, Mutation, Store, StoredState};
use tokio::sync::watch;

/// The outcome of a commit: `Ok`, or the store's error as text (shared by many replies).
pub(crate) type Outcome = Result<(), Arc<str>>;

/// Resolves when a batch is durable.
#[derive(Clone)]
pub(crate) struct Ticket(watch::Receiver<Option<Outcome>>);

impl Ticket {
    /// A ticket for nothing to commit.
    pub(crate) fn done() -> Ticket {
        let (_, rx) = watch::channel(Some(Ok(())));
        Ticket(rx)
    }

    /// Waits for the batch.
    pub(crate) async fn wait(mut self) -> Outcome {
        match self.0.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone().unwrap_or(Ok(())),
            Err(_) => Err(Arc::from("the committer stopped")),
        }
    }
}

struct Batch {
    changes: Vec<Change>,
    done: watch::Sender<Option<Outcome>>,
}

/// The handle to the committer thread. The thread ends once this handle is dropped and the
/// queue is empty; shutdown waits for the last ticket, and dropping the handle joins the
/// thread, so the store (and its data directory's lock) is released when the server is.
pub(crate) struct Committer {
    tx: mpsc::Sender<Batch>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for Committer {
    fn drop(&mut self) {
        // Close the queue, so that the thread ends once it has committed what is queued.
        drop(std::mem::replace(&mut self.tx, mpsc::channel().0));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Committer {
    /// Starts the committer thread over `store`.
    pub(crate) fn start(store: Arc<dyn Store>) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<Batch>();
        let thread = thread::Builder::new()
            .name("tickwheel-commit".into())
            .spawn(move || run(&*store, &rx))?;
        Ok(Committer {
            tx,
            thread: Some(thread),
        })
    }

    /// Queues `changes` (call with the engine lock held) and returns its ticket.
    pub(crate) fn submit(&self, changes: Vec<Change>) -> Ticket {
        let (done, rx) = watch::channel(None);
        let ticket = Ticket(rx);
        if let Err(mpsc::SendError(batch)) = self.tx.send(Batch { changes, done }) {
            let _ = batch
                .done
                .send(Some(Err(Arc::from("the committer stopped"))));
        }
        ticket
    }
}

fn run(store: &dyn Store, rx: &mpsc::Receiver<Batch>) {
    let mut failed: Option<Arc<str>> = None;
    while let Ok(first) = rx.recv() {
        // Everything already queued joins this commit.
        let mut batches = vec![first];
        batches.extend(rx.try_iter());
        let outcome = match &failed {
            Some(error) => Err(error.clone()),
            None => commit(store, &batches),
        };
        if let Err(error) = &outcome {
            if failed.is_none() {
                tracing::error!(
                    %error,
                    "store commit failed: from now on every command answers INTERNAL_ERROR \
                     (the store refuses further writes); restart the server to recover"
                );
            }
            failed = Some(error.clone());
        }
        for batch in batches {
            let _ = batch.done.send(Some(outcome.clone()));
        }
    }
}

fn commit(store: &dyn Store, batches: &[Batch]) -> Outcome {
    let mut mutations = Vec::new();
    let mut ids_end = None;
    for change in batches.iter().flat_map(|b| &b.changes) {
        match change {
            Change::Put(job) => mutations.push(Mutation::Put(to_stored(job))),
            Change::Update {
                id,
                state,
                priority,
            } => mutations.push(Mutation::Update {
                id: *id,
                state: to_stored_state(*state),
                priority: *priority,
            }),
            Change::Delete { id } => mutations.push(Mutation::Delete { id: *id }),
            Change::ReserveIds { end } => ids_end = Some(ids_end.unwrap_or(0).max(*end)),
        }
    }
    let error = |e: tickwheel_store::StoreError| Arc::<str>::from(e.to_string());
    if let Some(end) = ids_end {
        store.reserve_ids(end).map_err(error)?;
    }
    if !mutations.is_empty() {
        store.commit(&mutations).map_err(error)?;
    }
    Ok(())
}

pub(crate) fn to_stored(job: &JobRecord) -> StoredJob {
    StoredJob {
        id: job.id,
        tube: job.tube.clone(),
        priority: job.priority,
        ttr_ms: job.ttr,
        state: to_stored_state(job.state),
        created_ms: job.created,
        body: job.body.clone(),
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
