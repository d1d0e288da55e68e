//! Producers: `put` (id blocks; far-future jobs go to the store only), and the count of a
//! `put` that failed before reaching the engine.

use super::*;

impl Engine {
    /// `put`: a new job in the client's used tube, ready or delayed by `delay` ms.
    /// `ttr` below one second is raised to one second.
    ///
    /// # Errors
    ///
    /// [`Error::Draining`] in drain mode, [`Error::JobTooBig`] over the size limit.
    pub fn put(
        &mut self,
        now: Millis,
        client: ClientId,
        priority: u32,
        delay: Millis,
        ttr: Millis,
        body: Bytes,
    ) -> Result<JobId, Error> {
        self.advance(now);
        self.cmd.put += 1;
        if self.draining {
            return Err(Error::Draining);
        }
        if body.len() > self.config.max_job_size {
            return Err(Error::JobTooBig);
        }
        let tube = match self.clients.get_mut(&client) {
            Some(c) => {
                c.producer = true;
                c.used
            }
            None => self.tube_ref(&TubeName::default_tube()),
        };
        self.insert_job(tube, priority, delay, ttr, body, None)
    }

    /// `put` with the tube named rather than taken from a client, and an optional idempotency
    /// key (the HTTP API): returns the job's id and whether it was created. If a live job of
    /// that tube (ready, delayed, reserved or buried, in memory or far) already has the key,
    /// nothing changes and its id is returned with `false`. Counts in `cmd-put`.
    ///
    /// # Errors
    ///
    /// [`Error::Draining`] in drain mode, [`Error::JobTooBig`] over the size limit (checked
    /// before the key, so the answer does not depend on what exists).
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use tickwheel_queue::{Config, Engine, NewJob, TubeName};
    ///
    /// let mut engine = Engine::new(Config::default(), 0);
    /// let job = NewJob {
    ///     tube: TubeName::new("emails").unwrap(),
    ///     priority: 10,
    ///     delay: 1_500,
    ///     ttr: 60_000,
    ///     body: Bytes::from("welcome mail for user 7"),
    ///     idempotency_key: Some("welcome-7".into()),
    /// };
    /// let (id, created) = engine.put_job(0, job.clone()).unwrap();
    /// assert!(created);
    /// assert_eq!(engine.put_job(10, job).unwrap(), (id, false)); // the same job, unchanged
    /// ```
    pub fn put_job(&mut self, now: Millis, job: NewJob) -> Result<(JobId, bool), Error> {
        self.advance(now);
        self.cmd.put += 1;
        if self.draining {
            return Err(Error::Draining);
        }
        if job.body.len() > self.config.max_job_size {
            return Err(Error::JobTooBig);
        }
        if let Some(key) = &job.idempotency_key {
            // A clone of the pair only to look it up: keys are short and puts with keys rare
            // next to the protocol's.
            if let Some(&id) = self.keys.get(&(job.tube.clone(), key.clone())) {
                return Ok((id, false));
            }
        }
        let tube = self.tube_ref(&job.tube);
        let id = self.insert_job(
            tube,
            job.priority,
            job.delay,
            job.ttr,
            job.body,
            job.idempotency_key,
        );
        if id.is_err() {
            self.drop_if_unused(tube);
        }
        id.map(|id| (id, true))
    }

    fn insert_job(
        &mut self,
        tube: TubeId,
        priority: u32,
        delay: Millis,
        ttr: Millis,
        body: Bytes,
        key: Option<String>,
    ) -> Result<JobId, Error> {
        let id = self.allocate_id()?;
        let now = self.now();
        let until = now.saturating_add(delay);
        let ttr = ttr.max(1000);
        let state = if delay == 0 {
            DurableState::Ready
        } else {
            DurableState::Delayed { until }
        };
        let name = self.tube(tube).name.clone();
        if let Some(key) = &key {
            self.keys.insert((name.clone(), key.clone()), id);
        }
        let history = JobHistory {
            delay,
            ..JobHistory::default()
        };
        self.changes.push(Change::Put(JobRecord {
            id,
            tube: name,
            priority,
            ttr,
            state,
            created: now,
            body: body.clone(),
            idempotency_key: key.clone(),
            history,
        }));
        if delay > 0 && until >= self.window_end {
            // Far in the future: durable in the store only, loaded when its time nears.
            self.tube_mut(tube).total_jobs += 1;
            self.total_jobs += 1;
            self.add_far(tube, until);
            return Ok(id);
        }
        let mut job = Job::new(tube, priority, ttr, history, now, body);
        job.key = key;
        self.add_job(id, job);
        if delay == 0 {
            self.enter_ready(id);
        } else {
            self.enter_delayed(id, until);
        }
        self.serve_deferred();
        Ok(id)
    }

    /// A `put` that failed before reaching the engine (too big, garbage after its length, or
    /// a body not followed by CRLF) still counts in `cmd-put`, as in beanstalkd. With
    /// `body_came` (the body came, and was not followed by CRLF) the client is a producer too,
    /// and the put uses up a job id, as beanstalkd made the job before it read the body (may
    /// record a [`Change::ReserveIds`]).
    pub fn count_failed_put(&mut self, client: ClientId, body_came: bool) {
        self.cmd.put += 1;
        if body_came {
            if let Some(c) = self.clients.get_mut(&client) {
                c.producer = true;
            }
            // With every id used up, there is none to waste either.
            let _ = self.allocate_id();
        }
    }

    /// A `pause-tube` refused for its tube name after beanstalkd would have counted it (a name
    /// too long or starting with `-`): counts in `cmd-pause-tube`.
    pub fn count_failed_pause_tube(&mut self) {
        self.cmd.pause_tube += 1;
    }

    /// The next job id, persisting a new block of ids when the last one is used up.
    fn allocate_id(&mut self) -> Result<JobId, Error> {
        let id = self.next_id;
        if id == JobId::MAX {
            return Err(Error::IdsExhausted);
        }
        if id >= self.ids_end {
            self.ids_end = id.saturating_add(ID_BLOCK);
            self.changes.push(Change::ReserveIds { end: self.ids_end });
        }
        self.next_id += 1;
        Ok(id)
    }
}
