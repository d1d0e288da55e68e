//! Workers: `reserve` (and `reserve-job`), `delete`, `release`, `bury`, `touch`, `kick`.

use super::*;

impl Engine {
    /// `reserve` / `reserve-with-timeout`: the most urgent ready job of the watched tubes
    /// (lowest priority, then lowest id; paused tubes skipped). `timeout` `None` waits
    /// forever, `Some(0)` answers at once.
    pub fn reserve(&mut self, now: Millis, client: ClientId, timeout: Option<Millis>) -> Reserve {
        self.advance(now);
        self.cmd.reserve += 1;
        let Some(c) = self.clients.get_mut(&client) else {
            return Reserve::TimedOut;
        };
        c.worker = true;
        if let Some(id) = self.best_ready(client) {
            // beanstalkd queues the client as a waiter and takes it straight back from the
            // job's tube, where it is the only waiter: that tube's cursor moves on to 1.
            let tube = self.jobs[&id].tube;
            self.tube_mut(tube).take_at = 1;
            return Reserve::Job(self.reserve_for(client, id));
        }
        if self.deadline_soon(client) {
            return Reserve::DeadlineSoon;
        }
        if timeout == Some(0) {
            return Reserve::TimedOut;
        }
        self.seq += 1;
        let seq = self.seq;
        let timer = timeout.map(|t| {
            self.wheel
                .insert(self.now().saturating_add(t), Timer::Wait(client, seq))
        });
        let watched = match self.clients.get_mut(&client) {
            Some(c) => {
                c.waiting = Some(Wait { seq, timer });
                c.watched.clone()
            }
            None => Vec::new(),
        };
        for tube in watched {
            self.tube_mut(tube).add_waiter(client);
        }
        Reserve::Waiting
    }

    /// `reserve-job <id>`: reserves a job that is ready, delayed or buried.
    ///
    /// Like any reserve it records no [`Change`](crate::Change), as beanstalkd writes nothing:
    /// the store keeps a delayed or buried job as it was, and a restart brings it back so. With
    /// [`Config::write_reserve_job`](crate::Config::write_reserve_job) a delayed or buried job
    /// is first recorded as ready.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job or it is reserved; [`Error::NeedsLoad`] if
    /// it may be on disk only.
    pub fn reserve_job(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
    ) -> Result<JobView, Error> {
        self.advance(now);
        self.require_job(id)?;
        self.cmd.reserve_job += 1;
        let job = self.jobs.get(&id).ok_or(Error::NotFound)?;
        if job.state == JobState::Reserved {
            return Err(Error::NotFound);
        }
        // Only a reserve-job that reserves makes the client a worker, as in beanstalkd.
        match self.clients.get_mut(&client) {
            Some(c) => c.worker = true,
            None => return Err(Error::NotFound),
        }
        let job = &self.jobs[&id];
        if job.state != JobState::Ready && self.config.write_reserve_job {
            // Stored ready for the claim (see `Config::write_reserve_job`); otherwise nothing is
            // written, as for any reserve, and the store keeps the job delayed or buried.
            self.changes.push(Change::Update {
                id,
                state: DurableState::Ready,
                priority: job.priority,
                history: job.history,
            });
        }
        self.leave_state(id);
        Ok(self.reserve_for(client, id))
    }

    /// `delete <id>`: a job reserved by this client, or ready, delayed or buried.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job or another client holds it;
    /// [`Error::NeedsLoad`] if it may be on disk only.
    pub fn delete(&mut self, now: Millis, client: ClientId, id: JobId) -> Result<(), Error> {
        self.advance(now);
        self.require_job(id)?;
        self.cmd.delete += 1;
        let job = self.jobs.get(&id).ok_or(Error::NotFound)?;
        if job.state == JobState::Reserved && job.owner != Some(client) {
            return Err(Error::NotFound);
        }
        let tube = job.tube;
        self.leave_state(id);
        if let Some(job) = self.jobs.remove(&id) {
            if let Some(key) = job.key {
                self.keys.remove(&(self.tube(tube).name.clone(), key));
            }
        }
        self.tube_mut(tube).cmd_delete += 1;
        self.changes.push(Change::Delete { id });
        self.drop_if_unused(tube);
        Ok(())
    }

    /// [`delete`](Self::delete) of a job its store has deleted already: the engine follows
    /// (the client's reservation, the job, the tube's `cmd-delete`) and records no
    /// [`Change`] for the store. For a node sharing a PostgreSQL schema with others, which
    /// deletes in the database first, checked against the holder: writing the delete again
    /// would cost the database a statement that finds nothing.
    ///
    /// # Errors
    ///
    /// As [`delete`](Self::delete).
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tickwheel_queue::{ClientId, Config, Engine};
    ///
    /// let mut engine = Engine::new(Config::default(), 0);
    /// let id = engine.put(0, ClientId(1), 1, 0, 60_000, Bytes::new()).unwrap();
    /// engine.take_changes();
    /// engine.delete_stored(0, ClientId(1), id).unwrap();
    /// assert!(engine.take_changes().is_empty());
    /// assert!(engine.job_state(id).is_none());
    /// ```
    pub fn delete_stored(&mut self, now: Millis, client: ClientId, id: JobId) -> Result<(), Error> {
        self.delete(now, client, id)?;
        self.unrecord(id);
        Ok(())
    }

    /// [`release`](Self::release) of a job its store has released already: the engine
    /// follows (the job's state, priority, counters, a waiting client served) and records no
    /// [`Change`]. For a node sharing a PostgreSQL schema with others, which releases in the
    /// database first, checked against the holder: writing the release again through the
    /// group commit would cost a statement, and, landing after another node had taken the
    /// job and released it with a delay or buried it, would make it ready again.
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release).
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tickwheel_queue::{ClientId, Config, Engine, JobState, Reserve};
    ///
    /// let mut engine = Engine::new(Config::default(), 0);
    /// engine.connect(ClientId(1));
    /// let id = engine.put(0, ClientId(1), 1, 0, 60_000, Bytes::new()).unwrap();
    /// assert!(matches!(engine.reserve(0, ClientId(1), Some(0)), Reserve::Job(_)));
    /// engine.take_changes();
    /// engine.release_stored(0, ClientId(1), id, 7, 0).unwrap();
    /// assert!(engine.take_changes().is_empty());
    /// assert_eq!(engine.job_state(id), Some(JobState::Ready));
    /// ```
    pub fn release_stored(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
        priority: u32,
        delay: Millis,
    ) -> Result<(), Error> {
        self.release(now, client, id, priority, delay)?;
        self.unrecord(id);
        Ok(())
    }

    /// [`bury`](Self::bury) of a job its store has buried already, recording no [`Change`]
    /// (see [`release_stored`](Self::release_stored)).
    ///
    /// # Errors
    ///
    /// As [`bury`](Self::bury).
    pub fn bury_stored(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
        priority: u32,
    ) -> Result<(), Error> {
        self.bury(now, client, id, priority)?;
        self.unrecord(id);
        Ok(())
    }

    /// Takes back the change the command just run recorded for `id`: its last one (the
    /// clock's advance records before the command does, and nothing after it touches `id`).
    fn unrecord(&mut self, id: JobId) {
        let own = |c: &Change| match c {
            Change::Update { id: x, .. } | Change::Delete { id: x } => *x == id,
            _ => false,
        };
        let at = self.changes.iter().rposition(own);
        debug_assert!(at.is_some(), "the command recorded no change of job {id}");
        if let Some(at) = at {
            self.changes.remove(at);
        }
    }

    /// `release <id> <pri> <delay>`: a job reserved by this client goes back to ready (or
    /// delayed) with a new priority.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] unless this client holds the job.
    pub fn release(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
        priority: u32,
        delay: Millis,
    ) -> Result<(), Error> {
        self.advance(now);
        self.cmd.release += 1;
        self.check_owner(client, id)?;
        self.leave_state(id);
        let until = self.now().saturating_add(delay);
        let job = self.job_mut(id);
        job.priority = priority;
        job.history.releases += 1;
        job.history.delay = delay;
        let history = job.history;
        if delay == 0 {
            self.changes.push(Change::Update {
                id,
                state: DurableState::Ready,
                priority,
                history,
            });
            self.enter_ready(id);
        } else {
            self.changes.push(Change::Update {
                id,
                state: DurableState::Delayed { until },
                priority,
                history,
            });
            if until >= self.window_end {
                // Released far into the future: it leaves memory (its counters are in the
                // store's record, read back with it).
                let tube = self.job_mut(id).tube;
                self.jobs.remove(&id);
                self.add_far(tube, until);
            } else {
                self.enter_delayed(id, until);
            }
        }
        self.serve_deferred();
        Ok(())
    }

    /// `bury <id> <pri>`: a job reserved by this client is buried with a new priority.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] unless this client holds the job.
    pub fn bury(
        &mut self,
        now: Millis,
        client: ClientId,
        id: JobId,
        priority: u32,
    ) -> Result<(), Error> {
        self.advance(now);
        self.cmd.bury += 1;
        self.check_owner(client, id)?;
        self.leave_state(id);
        let job = self.job_mut(id);
        job.priority = priority;
        job.history.buries += 1;
        let history = job.history;
        self.changes.push(Change::Update {
            id,
            state: DurableState::Buried,
            priority,
            history,
        });
        self.enter_buried(id);
        Ok(())
    }

    /// An operator's bury (the HTTP API): a ready or delayed job is buried, keeping its
    /// priority. beanstalkd buries only a job the client holds; a reserved job stays with its
    /// worker here too (its lease is the worker's), and burying a buried job is refused.
    /// Counts in `cmd-bury`.
    ///
    /// # Errors
    ///
    /// [`Error::Reserved`] if a worker holds it; [`Error::NotFound`] if there is no such job or
    /// it is buried already; [`Error::NeedsLoad`] if it may be on disk only.
    pub fn bury_job(&mut self, now: Millis, id: JobId) -> Result<(), Error> {
        self.advance(now);
        self.require_job(id)?;
        self.cmd.bury += 1;
        let job = self.jobs.get(&id).ok_or(Error::NotFound)?;
        match job.state {
            JobState::Reserved => return Err(Error::Reserved),
            JobState::Buried => return Err(Error::NotFound),
            JobState::Ready | JobState::Delayed => {}
        }
        let priority = job.priority;
        self.leave_state(id);
        let job = self.job_mut(id);
        job.history.buries += 1;
        let history = job.history;
        self.changes.push(Change::Update {
            id,
            state: DurableState::Buried,
            priority,
            history,
        });
        self.enter_buried(id);
        Ok(())
    }

    /// `touch <id>`: the reservation of a job this client holds restarts its TTR.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] unless this client holds the job.
    pub fn touch(&mut self, now: Millis, client: ClientId, id: JobId) -> Result<(), Error> {
        self.advance(now);
        self.cmd.touch += 1;
        self.check_owner(client, id)?;
        self.arm_reservation(id);
        Ok(())
    }

    /// `kick <bound>` on the client's used tube: up to `bound` buried jobs become ready, or,
    /// if none is buried, up to `bound` delayed jobs (earliest first). Returns how many.
    ///
    /// # Errors
    ///
    /// [`Error::NeedsLoad`] if the tube's earliest delayed jobs may be on disk only.
    pub fn kick(&mut self, now: Millis, client: ClientId, bound: u64) -> Result<u64, Error> {
        self.advance(now);
        self.require_front(client, bound, true)?;
        self.cmd.kick += 1;
        let Some(tube) = self.clients.get(&client).map(|c| c.used) else {
            return Ok(0);
        };
        let mut kicked = 0;
        let from_buried = !self.tube(tube).buried.is_empty();
        while kicked < bound {
            let t = self.tube(tube);
            let next = if from_buried {
                t.buried.values().next().copied()
            } else {
                t.delayed.iter().next().map(|&(_, id)| id)
            };
            let Some(id) = next else { break };
            self.kick_one(id);
            kicked += 1;
            // As beanstalkd: each kicked job goes to a waiting client (if one watches the
            // tube) before the next is kicked, so waiters get jobs in kick order.
            self.serve_deferred();
        }
        Ok(kicked)
    }

    /// [`kick`](Self::kick) carried out by the store first (a node sharing a PostgreSQL
    /// schema kicks in the database, cluster-wide): counts in `cmd-kick`, and those of the
    /// kicked `ids` this engine holds buried or delayed become ready (waiting clients served,
    /// in order), recording no [`Change`]. The others are not in memory here, or are here in
    /// a state the database has moved on from: their announcement brings them. Returns how
    /// many it followed.
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tickwheel_queue::{ClientId, Config, Engine, JobState};
    ///
    /// let mut engine = Engine::new(Config::default(), 0);
    /// engine.connect(ClientId(1));
    /// let id = engine.put(0, ClientId(1), 1, 60_000, 60_000, Bytes::new()).unwrap();
    /// engine.take_changes();
    /// assert_eq!(engine.kick_stored(0, &[id, 999]), 1);
    /// assert!(engine.take_changes().is_empty());
    /// assert_eq!(engine.job_state(id), Some(JobState::Ready));
    /// assert_eq!(engine.stats().cmd.kick, 1);
    /// ```
    pub fn kick_stored(&mut self, now: Millis, ids: &[JobId]) -> usize {
        self.advance(now);
        self.cmd.kick += 1;
        self.follow_kicks(ids)
    }

    /// [`kick_job`](Self::kick_job) carried out by the store first (see
    /// [`kick_stored`](Self::kick_stored)): whether the engine held the job buried or
    /// delayed and followed.
    pub fn kick_job_stored(&mut self, now: Millis, id: JobId) -> bool {
        self.advance(now);
        self.follow_kicks(&[id]) == 1
    }

    fn follow_kicks(&mut self, ids: &[JobId]) -> usize {
        let mut followed = 0;
        for &id in ids {
            if matches!(
                self.jobs.get(&id).map(|j| j.state),
                Some(JobState::Buried | JobState::Delayed)
            ) {
                self.kick_one(id);
                self.unrecord(id);
                followed += 1;
                self.serve_deferred();
            }
        }
        followed
    }

    /// `kick-job <id>`: a buried or delayed job becomes ready.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job or it is ready or reserved;
    /// [`Error::NeedsLoad`] if it may be on disk only.
    pub fn kick_job(&mut self, now: Millis, id: JobId) -> Result<(), Error> {
        self.advance(now); // beanstalkd counts kick-job in no `cmd-*` counter
        self.require_job(id)?;
        match self.jobs.get(&id).map(|j| j.state) {
            Some(JobState::Buried | JobState::Delayed) => {
                self.kick_one(id);
                self.serve_deferred();
                Ok(())
            }
            _ => Err(Error::NotFound),
        }
    }
}
