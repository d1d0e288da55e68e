//! Jobs another producer put straight into the store: the PostgreSQL backend's
//! `tickwheel.put(...)` SQL function, called inside an application's own transaction.
//!
//! Such jobs take their ids from [`FOREIGN_ID_BASE`] up (the database hands them out), so they
//! never collide with the engine's own ids, which count up from 1 in reserved blocks. They never
//! move the engine's `next_id`. The server learns of them from the store (a notification after
//! the application's commit, or a restart) and hands them to [`Engine::adopt`].

use super::*;

/// The first id of jobs put by another producer than the engine (2^62). The engine's own ids
/// stay below it (it would take 2^62 puts to reach it).
pub const FOREIGN_ID_BASE: JobId = 1 << 62;

impl Engine {
    /// Takes in a job that is already durable in the store but not in memory (put by another
    /// producer; see the module docs). Nothing is recorded for the store. A job already in
    /// memory is left as it is; a delayed job due at or after the memory window's end is only
    /// counted (as a far job, loaded with the window). Waiting reservers are served.
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tickwheel_queue::{
    ///     Config, DurableState, Engine, JobHistory, JobRecord, JobState, TubeName, FOREIGN_ID_BASE,
    /// };
    ///
    /// let mut engine = Engine::new(Config::default(), 1_000);
    /// engine.adopt(JobRecord {
    ///     id: FOREIGN_ID_BASE,
    ///     tube: TubeName::new("orders")?,
    ///     priority: 1024,
    ///     ttr: 60_000,
    ///     state: DurableState::Delayed { until: 1_800_000 },
    ///     created: 1_000,
    ///     body: Bytes::from_static(b"cancel order 42 if unpaid"),
    ///     idempotency_key: None,
    ///     history: JobHistory { delay: 1_799_000, ..JobHistory::default() },
    /// });
    /// assert_eq!(engine.job_state(FOREIGN_ID_BASE), Some(JobState::Delayed));
    /// assert!(engine.take_changes().is_empty(), "already durable: nothing to store");
    /// # Ok::<(), tickwheel_queue::BadTubeName>(())
    /// ```
    pub fn adopt(&mut self, record: JobRecord) {
        if self.jobs.contains_key(&record.id) {
            return;
        }
        let tube = self.tube_ref(&record.tube);
        let now = self.now();
        if let DurableState::Delayed { until } = record.state {
            if until >= self.window_end {
                self.add_far(tube, until);
                return;
            }
        }
        self.add_job(record.id, Job::restored(tube, &record, now));
        match record.state {
            DurableState::Ready => self.enter_ready(record.id),
            DurableState::Buried => self.enter_buried(record.id),
            DurableState::Delayed { until } if until <= now => self.enter_ready(record.id),
            DurableState::Delayed { until } => self.enter_delayed(record.id, until),
        }
        self.serve_deferred();
    }

    /// Drops a job another producer already deleted from the store (the PostgreSQL
    /// `tickwheel.delete(id)` function), unless a client holds it: a reserved job stays with its
    /// holder, as beanstalkd's `delete` from another connection answers `NOT_FOUND`. Records
    /// nothing for the store and counts no command. Returns whether the job was dropped.
    pub fn forget(&mut self, id: JobId) -> bool {
        match self.jobs.get(&id) {
            Some(job) if job.state != JobState::Reserved => self.drop_cached(id),
            _ => false,
        }
    }
}

impl Engine {
    /// Drops a job from memory whatever its state, even one a client of this engine holds
    /// (that reservation ends without a reply; the client's later commands on it answer
    /// `NOT_FOUND`). Records nothing for the store and counts no command. For a node that
    /// shares its store with other nodes (PostgreSQL, several nodes serving at once): the
    /// database said the job is not this engine's to hand out (another node holds it, buried
    /// or deleted it). Returns whether the job was in memory.
    pub fn drop_cached(&mut self, id: JobId) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        let tube = job.tube;
        self.leave_state(id);
        self.jobs.remove(&id);
        self.drop_if_unused(tube);
        true
    }

    /// Moves a delayed job's wake-up from `from` to the later `to`, if the job is still delayed
    /// until `from` (a later change of it wins) and `to` is inside the memory window. Records
    /// nothing for the store: the store holds the job due at `to` already. For a node whose
    /// store moves due times onto another clock at commit (PostgreSQL, several nodes serving
    /// at once): the engine then wakes when the database holds the job due, not a round trip
    /// early. Returns whether the job moved.
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tickwheel_queue::{ClientId, Config, Engine, JobState};
    ///
    /// let mut engine = Engine::new(Config::default(), 1_000);
    /// let id = engine.put(1_000, ClientId(1), 1, 500, 60_000, Bytes::new()).unwrap();
    /// engine.take_changes();
    /// assert!(engine.retime_delayed(id, 1_500, 1_503));
    /// engine.advance(1_502);
    /// assert_eq!(engine.job_state(id), Some(JobState::Delayed));
    /// engine.advance(1_503);
    /// assert_eq!(engine.job_state(id), Some(JobState::Ready));
    /// assert!(engine.take_changes().is_empty(), "nothing for the store");
    /// ```
    pub fn retime_delayed(&mut self, id: JobId, from: Millis, to: Millis) -> bool {
        if to <= from || to >= self.window_end {
            return false;
        }
        match self.jobs.get(&id) {
            Some(job) if job.state == JobState::Delayed && job.deadline == from => {}
            _ => return false,
        }
        self.leave_state(id);
        self.enter_delayed(id, to);
        true
    }

    /// Gives out the engine's own ids from `next` on (its later id blocks follow on from
    /// there), whatever it recovered. For a node that took a block of ids of its own from a
    /// store shared with other nodes: their jobs' ids, above or below, must not move it.
    pub fn continue_ids_at(&mut self, next: JobId) {
        self.next_id = next.max(1);
        self.ids_end = self.next_id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: JobId, state: DurableState) -> JobRecord {
        JobRecord {
            id,
            tube: TubeName::new("t").expect("valid"),
            priority: 5,
            ttr: 1000,
            state,
            created: 0,
            body: Bytes::from_static(b"x"),
            idempotency_key: None,
            history: JobHistory::default(),
        }
    }

    #[test]
    fn adopted_jobs_are_served_and_do_not_move_the_id_counter() {
        let mut engine = Engine::new(Config::default(), 10);
        let client = ClientId(1);
        engine.connect(client);
        engine.watch(10, client, &TubeName::new("t").expect("valid"));
        assert!(matches!(engine.reserve(10, client, None), Reserve::Waiting));
        engine.adopt(record(FOREIGN_ID_BASE + 7, DurableState::Ready));
        let events = engine.take_events();
        assert!(
            matches!(&events[..], [Event::Reserved { client: c, job }] if *c == client && job.id == FOREIGN_ID_BASE + 7),
            "{events:?}"
        );
        assert!(engine.take_changes().is_empty());
        // Adopting twice changes nothing; the engine's own ids still start at 1.
        engine.adopt(record(FOREIGN_ID_BASE + 7, DurableState::Buried));
        assert_eq!(
            engine.job_state(FOREIGN_ID_BASE + 7),
            Some(JobState::Reserved)
        );
        let id = engine
            .put(10, ClientId(2), 1, 0, 1000, Bytes::new())
            .expect("put");
        assert_eq!(id, 1);
    }

    #[test]
    fn retime_moves_only_a_job_still_delayed_until_from() {
        let mut engine = Engine::new(Config::default(), 10);
        let client = ClientId(1);
        let a = engine
            .put(10, client, 1, 100, 1000, Bytes::new())
            .expect("put");
        let b = engine
            .put(10, client, 1, 100, 1000, Bytes::new())
            .expect("put");
        let c = engine
            .put(10, client, 1, 0, 1000, Bytes::new())
            .expect("put");
        engine.take_changes();
        assert!(!engine.retime_delayed(a, 111, 120), "not delayed until 111");
        assert!(!engine.retime_delayed(a, 110, 105), "never earlier");
        assert!(!engine.retime_delayed(c, 110, 120), "ready, not delayed");
        assert!(!engine.retime_delayed(99, 110, 120), "no such job");
        assert!(engine.retime_delayed(a, 110, 112));
        assert!(!engine.retime_delayed(a, 110, 113), "moved already");
        assert_eq!(engine.next_deadline(), Some(110));
        engine.advance(110);
        assert_eq!(engine.job_state(a), Some(JobState::Delayed));
        assert_eq!(engine.job_state(b), Some(JobState::Ready));
        assert_eq!(engine.stats().delayed, 1);
        engine.advance(111);
        assert_eq!(engine.job_state(a), Some(JobState::Delayed));
        engine.advance(112);
        assert_eq!(engine.job_state(a), Some(JobState::Ready));
        assert!(engine.take_changes().is_empty(), "nothing for the store");
    }

    #[test]
    fn forget_drops_unreserved_jobs_only() {
        let mut engine = Engine::new(Config::default(), 10);
        engine.adopt(record(FOREIGN_ID_BASE, DurableState::Ready));
        engine.adopt(record(FOREIGN_ID_BASE + 1, DurableState::Ready));
        let client = ClientId(1);
        engine.connect(client);
        engine.watch(10, client, &TubeName::new("t").expect("valid"));
        assert!(
            matches!(engine.reserve(10, client, None), Reserve::Job(j) if j.id == FOREIGN_ID_BASE)
        );
        assert!(
            !engine.forget(FOREIGN_ID_BASE),
            "reserved: stays with its holder"
        );
        assert!(engine.forget(FOREIGN_ID_BASE + 1));
        assert_eq!(engine.job_state(FOREIGN_ID_BASE + 1), None);
        assert!(!engine.forget(FOREIGN_ID_BASE + 1), "gone already");
        assert!(engine.take_changes().is_empty());
        assert_eq!(engine.stats().cmd.delete, 0, "not a client's command");
    }

    #[test]
    fn recovery_ignores_foreign_ids_for_the_id_counter() {
        let engine = Engine::recover(
            Config::default(),
            10,
            5,
            vec![record(FOREIGN_ID_BASE + 1, DurableState::Ready)],
        );
        assert_eq!(engine.job_state(FOREIGN_ID_BASE + 1), Some(JobState::Ready));
        let mut engine = engine;
        assert_eq!(engine.put(10, ClientId(1), 1, 0, 1000, Bytes::new()), Ok(5));
    }

    #[test]
    fn a_far_foreign_job_is_counted_and_loaded_with_the_window() {
        let mut engine = Engine::new(
            Config {
                window: Some(1000),
                ..Config::default()
            },
            0,
        );
        engine.adopt(record(
            FOREIGN_ID_BASE,
            DurableState::Delayed { until: 5000 },
        ));
        assert_eq!(
            engine.job_state(FOREIGN_ID_BASE),
            None,
            "far: not in memory"
        );
        assert!(
            engine.needs_load(FOREIGN_ID_BASE),
            "reachable by id through a load"
        );
        assert_eq!(engine.stats().delayed, 1);
    }

    #[test]
    fn drop_cached_drops_any_state_and_continue_ids_at_moves_the_ids() {
        let mut engine = Engine::recover(
            Config::default(),
            10,
            1,
            vec![
                record(900, DurableState::Ready),
                record(5, DurableState::Ready),
            ],
        );
        engine.continue_ids_at(100);
        let client = ClientId(1);
        engine.connect(client);
        engine.watch(10, client, &TubeName::new("t").expect("valid"));
        let Reserve::Job(job) = engine.reserve(10, client, Some(0)) else {
            panic!("a ready job");
        };
        assert_eq!(job.id, 5);
        assert!(engine.drop_cached(5), "reserved, dropped all the same");
        assert_eq!(engine.job_state(5), None);
        assert_eq!(engine.delete(10, client, 5), Err(Error::NotFound));
        assert!(!engine.drop_cached(5));
        assert!(engine.drop_cached(900));
        assert_eq!(engine.stats().ready, 0);
        assert_eq!(engine.stats().reserved, 0);
        assert!(engine.take_changes().is_empty(), "nothing for the store");
        let id = engine
            .put(10, ClientId(2), 1, 0, 1000, Bytes::new())
            .expect("put");
        assert_eq!(id, 100, "ids continue at 100, not after 900");
        assert!(
            matches!(engine.take_changes()[..], [Change::ReserveIds { end }, Change::Put(_)] if end > 100),
        );
    }
}
