//! The tickwheel job engine: beanstalkd's job model (tubes, priorities, delays, TTR leases,
//! bury and kick) as a deterministic state machine.
//!
//! [`Engine`] does no I/O and reads no clock: every operation takes the current time in
//! milliseconds, and everything timed (delays, TTR leases and their `DEADLINE_SOON` warning,
//! reserve timeouts, tube pauses) lives in one [`tickwheel_core::Wheel`]. A server drives it:
//!
//! 1. call the operation for a client's command, with the clock's `now`;
//! 2. persist [`Engine::take_changes`] (a group commit) before replying: a reply promises
//!    durability;
//! 3. send the replies owed to *other* clients, [`Engine::take_events`] (a waiting
//!    `reserve` that got a job, timed out, or hit `DEADLINE_SOON`);
//! 4. sleep until [`Engine::next_deadline`] or the next command, then [`Engine::advance`];
//! 5. with a memory window ([`Config::window`]), an operation that needs jobs kept on disk
//!    only answers [`Error::NeedsLoad`] and does nothing: read what its [`Load`] names from the
//!    store, hand it over ([`Engine::load_job`], [`Engine::load_window`]) and run the operation
//!    again. The engine never does I/O; the server never needs to know about the window.
//!
//! ```
//! use bytes::Bytes;
//! use tickwheel_queue::{ClientId, Config, Engine, Event, Reserve};
//!
//! let mut engine = Engine::new(Config::default(), 0);
//! let (producer, worker) = (ClientId(1), ClientId(2));
//! engine.connect(producer);
//! engine.connect(worker);
//!
//! // A worker waits; a job put with a 2 s delay reaches it when the delay is over.
//! assert_eq!(engine.reserve(0, worker, None), Reserve::Waiting);
//! let id = engine.put(0, producer, 10, 2_000, 60_000, Bytes::from("cancel order 42")).unwrap();
//! assert_eq!(engine.take_changes().len(), 2); // the id block and the job: persist, then reply
//! engine.advance(1_999);
//! assert!(engine.take_events().is_empty()); // never early
//! engine.advance(2_000);
//! match &engine.take_events()[..] {
//!     [Event::Reserved { client, job }] => assert_eq!((*client, job.id), (worker, id)),
//!     other => panic!("{other:?}"),
//! }
//! engine.delete(2_500, worker, id).unwrap();
//! ```
//!
//! # Semantics
//!
//! Those of beanstalkd 1.12's `doc/protocol.txt`, in milliseconds: ready jobs are reserved
//! lowest priority first, then lowest id; TTR is at least one second and its last second is
//! the safety margin (`DEADLINE_SOON`); a reservation that runs out returns the job to ready
//! (at-least-once delivery); a job that becomes ready goes to a client waiting on its tube,
//! the one beanstalkd would pick (its waiters are taken round an array, not first come first
//! served); tubes are created on use and removed when empty and unreferenced (except `default`).
//!
//! # Durability
//!
//! Every operation that changes what a restart must restore records a [`Change`]. Reserved
//! jobs are stored as ready: after a crash they come back ready. Delays are stored as their
//! absolute end, so a job whose time passed while the server was down is ready at once in
//! [`Engine::recover`]. Ids are persisted in blocks ([`Change::ReserveIds`]) and never reused.

//! # Module map
//!
//! | file | what it holds |
//! |------|---------------|
//! | `types.rs` | the vocabulary: ids, [`JobState`], [`Event`], [`Reserve`], [`Change`], [`JobRecord`], [`TubeName`] |
//! | `engine/mod.rs` | [`Engine`] and [`Config`]: construction, recovery, the clock ([`Engine::advance`], [`Engine::next_deadline`]), changes and events |
//! | `engine/clients.rs` | connections and their tubes: `connect`, `disconnect`, `use`, `watch`, `ignore` |
//! | `engine/producer.rs` | `put` (id blocks, far-future jobs straight to the store) |
//! | `engine/worker.rs` | `reserve`, `reserve-job`, `delete`, `release`, `bury`, `touch`, `kick` |
//! | `engine/inspect.rs` | `peek*`, `stats*`, `list-tubes*`, `pause-tube`, read-only queries |
//! | `engine/state.rs` | timers firing, entering and leaving job states, serving waiting clients |
//! | `engine/tubes.rs` | tube creation and removal, the job table |
//! | `engine/timeline.rs` | the due timeline: delayed jobs counted by due time ([`Engine::timeline`]) |
//! | `engine/window.rs` | the memory window: which delayed jobs stay in the store, and loading them |
//! | `due.rs` | counts of delayed jobs per due bucket (second, minute, hour), kept per tube |
//! | `tube.rs` | one tube: its ready, delayed and buried queues, waiters, pause |
//! | `stats.rs` | the counters behind `stats`, `stats-tube`, `stats-job` |

#![forbid(unsafe_code)]

mod due;
mod engine;
mod stats;
mod tube;
mod types;

pub use due::{Resolution, Series, Timeline};
pub use engine::{Config, Engine, FOREIGN_ID_BASE, MAX_TIMELINE_HOURS, TIMELINE_FINE_BUCKETS};
pub use stats::{CmdCounters, JobStats, Stats, TubeStats};
pub use types::{
    BadTubeName, Change, ClientId, DurableState, Error, Event, JobDetail, JobHistory, JobId,
    JobRecord, JobState, JobView, Load, Millis, NewJob, Reserve, TubeName, MAX_IDEMPOTENCY_KEY,
    MAX_TUBE_NAME, SAFETY_MARGIN_MS, URGENT_PRIORITY,
};
