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
        let id = self.next_id;
        if id == JobId::MAX {
            return Err(Error::IdsExhausted);
        }
        if id >= self.ids_end {
            self.ids_end = id.saturating_add(ID_BLOCK);
            self.changes.push(Change::ReserveIds { end: self.ids_end });
        }
        self.next_id += 1;
        let now = self.now();
        let until = now.saturating_add(delay);
        let ttr = ttr.max(1000);
        let state = if delay == 0 {
            DurableState::Ready
        } else {
            DurableState::Delayed { until }
        };
        self.changes.push(Change::Put(JobRecord {
            id,
            tube: self.tube(tube).name.clone(),
            priority,
            ttr,
            state,
            created: now,
            body: body.clone(),
        }));
        if delay > 0 && until >= self.window_end {
            // Far in the future: durable in the store only, loaded when its time nears.
            self.tube_mut(tube).total_jobs += 1;
            self.total_jobs += 1;
            self.add_far(tube, until);
            return Ok(id);
        }
        self.add_job(id, Job::new(tube, priority, ttr, delay, now, body));
        if delay == 0 {
            self.enter_ready(id);
        } else {
            self.enter_delayed(id, until);
        }
        self.serve_deferred();
        Ok(id)
    }

    /// A `put` that failed before reaching the engine (its body was not followed by CRLF)
    /// still counts, as in beanstalkd: `cmd-put`, and the client as a producer.
    pub fn count_failed_put(&mut self, client: ClientId) {
        self.cmd.put += 1;
        if let Some(c) = self.clients.get_mut(&client) {
            c.producer = true;
        }
    }
}
