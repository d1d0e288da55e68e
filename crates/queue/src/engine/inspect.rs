//! Inspection: `peek*`, `stats*`, `list-tubes*`, `pause-tube` and the read-only queries.

use super::*;

impl Engine {
    /// `peek <id>`: any job, in any state.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job; [`Error::NeedsLoad`] if it may be on disk
    /// only.
    pub fn peek(&mut self, now: Millis, id: JobId) -> Result<JobView, Error> {
        self.advance(now);
        self.require_job(id)?;
        self.cmd.peek += 1;
        self.view(id).ok_or(Error::NotFound)
    }

    /// `peek-ready`, `peek-delayed` or `peek-buried` on the client's used tube: the job a
    /// reserve, the clock or a kick would take next.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is none; [`Error::NeedsLoad`] for `peek-delayed` if the
    /// tube's earliest delayed job may be on disk only.
    pub fn peek_state(
        &mut self,
        now: Millis,
        client: ClientId,
        state: JobState,
    ) -> Result<JobView, Error> {
        self.advance(now);
        if state == JobState::Delayed {
            self.require_front(client, 1, false)?;
        }
        match state {
            JobState::Ready => self.cmd.peek_ready += 1,
            JobState::Delayed => self.cmd.peek_delayed += 1,
            JobState::Buried => self.cmd.peek_buried += 1,
            JobState::Reserved => {}
        }
        let tube = self.clients.get(&client).ok_or(Error::NotFound)?.used;
        let t = self.tube(tube);
        let id = match state {
            JobState::Ready => t.ready.iter().next().map(|&(_, id)| id),
            JobState::Delayed => t.delayed.iter().next().map(|&(_, id)| id),
            JobState::Buried => t.buried.values().next().copied(),
            JobState::Reserved => None,
        }
        .ok_or(Error::NotFound)?;
        self.view(id).ok_or(Error::NotFound)
    }

    /// `stats-job <id>` at `now`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job; [`Error::NeedsLoad`] if it may be on disk
    /// only.
    pub fn stats_job(&mut self, now: Millis, id: JobId) -> Result<JobStats, Error> {
        self.advance(now);
        self.require_job(id)?;
        self.job_stats(id).ok_or(Error::NotFound)
    }

    /// Everything about job `id` at `now` (the HTTP API's job view): its statistics, due time,
    /// body and idempotency key. Counts in no `cmd-*` counter.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such job; [`Error::NeedsLoad`] if it may be on disk
    /// only.
    pub fn job_detail(&mut self, now: Millis, id: JobId) -> Result<JobDetail, Error> {
        self.advance(now);
        self.require_job(id)?;
        let stats = self.job_stats(id).ok_or(Error::NotFound)?;
        let job = self.jobs.get(&id).ok_or(Error::NotFound)?;
        Ok(JobDetail {
            stats,
            due_at: (job.state == JobState::Delayed).then_some(job.deadline),
            body: job.body.clone(),
            idempotency_key: job.key.clone(),
        })
    }

    /// The live job of `tube` put with idempotency key `key`, in memory or far.
    #[must_use]
    pub fn job_by_key(&self, tube: &TubeName, key: &str) -> Option<JobId> {
        self.keys.get(&(tube.clone(), key.to_owned())).copied()
    }

    /// `stats-tube <tube>` at `now`.
    pub fn stats_tube(&mut self, now: Millis, name: &TubeName) -> Option<TubeStats> {
        self.advance(now);
        self.tube_stats(name)
    }

    /// `stats` at `now`: the engine's part of the server statistics.
    pub fn stats_at(&mut self, now: Millis) -> Stats {
        self.advance(now);
        self.stats()
    }

    /// `pause-tube <tube> <delay>`: no job is reserved from the tube for `delay` ms.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if the tube does not exist.
    pub fn pause_tube(&mut self, now: Millis, name: &TubeName, delay: Millis) -> Result<(), Error> {
        self.advance(now);
        self.cmd.pause_tube += 1;
        let tube = *self.tube_ids.get(name).ok_or(Error::NotFound)?;
        let until = self.now().saturating_add(delay);
        if let Some(old) = self.tube_mut(tube).paused.take() {
            self.wheel.remove(old.timer);
        }
        let t = self.tube_mut(tube);
        t.cmd_pause_tube += 1;
        t.pause = delay;
        if delay == 0 {
            // A zero pause lifts any pause now.
            self.to_serve.push(tube);
            self.serve_deferred();
            self.drop_if_unused(tube);
            return Ok(());
        }
        let timer = self.wheel.insert(until, Timer::Unpause(tube));
        self.tube_mut(tube).paused = Some(Pause { until, timer });
        Ok(())
    }

    /// `list-tube-used`.
    #[must_use]
    pub fn used_tube(&self, client: ClientId) -> Option<&TubeName> {
        let c = self.clients.get(&client)?;
        Some(&self.tube(c.used).name)
    }

    /// `list-tubes-watched`, in the order they were watched.
    #[must_use]
    pub fn watched_tubes(&self, client: ClientId) -> Vec<TubeName> {
        self.clients.get(&client).map_or_else(Vec::new, |c| {
            c.watched
                .iter()
                .map(|&t| self.tube(t).name.clone())
                .collect()
        })
    }

    /// `list-tubes`: every existing tube, in beanstalkd's order (creation order, except that
    /// a dropped tube's place goes to the tube then last).
    #[must_use]
    pub fn tube_names(&self) -> Vec<TubeName> {
        self.tube_order
            .iter()
            .map(|&t| self.tube(t).name.clone())
            .collect()
    }

    /// The statistics of job `id` at the engine's clock, if it is in memory (see
    /// [`stats_job`](Self::stats_job) for the command).
    #[must_use]
    pub fn job_stats(&self, id: JobId) -> Option<JobStats> {
        let job = self.jobs.get(&id)?;
        let now = self.now();
        let time_left = match job.state {
            JobState::Delayed | JobState::Reserved => job.deadline.saturating_sub(now),
            JobState::Ready | JobState::Buried => 0,
        };
        Some(JobStats {
            id,
            tube: self.tube(job.tube).name.clone(),
            state: job.state,
            priority: job.priority,
            age: now.saturating_sub(job.created),
            delay: job.history.delay,
            ttr: job.ttr,
            time_left,
            reserves: job.history.reserves,
            timeouts: job.history.timeouts,
            releases: job.history.releases,
            buries: job.history.buries,
            kicks: job.history.kicks,
        })
    }

    /// `stats-tube <tube>`.
    #[must_use]
    pub fn tube_stats(&self, name: &TubeName) -> Option<TubeStats> {
        let t = self.tube(*self.tube_ids.get(name)?);
        Some(TubeStats {
            name: t.name.clone(),
            urgent: t.urgent,
            ready: t.ready.len() as u64,
            reserved: t.reserved,
            delayed: t.delayed.len() as u64 + t.far_delayed,
            buried: t.buried.len() as u64,
            total_jobs: t.total_jobs,
            using: t.using,
            waiting: t.waiters.len() as u64,
            watching: t.watching,
            pause: t.pause,
            cmd_delete: t.cmd_delete,
            cmd_pause_tube: t.cmd_pause_tube,
            pause_time_left: t.paused.map_or(0, |p| p.until.saturating_sub(self.now())),
            reserves: t.reserves,
            timeouts: t.timeouts,
        })
    }

    /// `stats`: the engine's part of the server statistics.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut stats = Stats {
            cmd: self.cmd,
            job_timeouts: self.job_timeouts,
            total_jobs: self.total_jobs,
            max_job_size: self.config.max_job_size as u64,
            current_tubes: self.tube_ids.len() as u64,
            current_connections: self.clients.len() as u64,
            total_connections: self.total_connections,
            draining: self.draining,
            ..Stats::default()
        };
        for t in self.tubes.iter().flatten() {
            stats.urgent += t.urgent;
            stats.ready += t.ready.len() as u64;
            stats.reserved += t.reserved;
            stats.delayed += t.delayed.len() as u64 + t.far_delayed;
            stats.buried += t.buried.len() as u64;
        }
        for c in self.clients.values() {
            stats.producers += u64::from(c.producer);
            stats.workers += u64::from(c.worker);
            stats.waiting += u64::from(c.waiting.is_some());
        }
        stats
    }

    /// Number of jobs, in memory or far.
    #[must_use]
    pub fn job_count(&self) -> usize {
        self.jobs.len() + self.far as usize
    }

    /// Counts a `peek-ready`, `peek-delayed` or `peek-buried` answered elsewhere (a node
    /// sharing a PostgreSQL schema asks the database, which sees every node's jobs).
    pub fn count_peek(&mut self, state: JobState) {
        match state {
            JobState::Ready => self.cmd.peek_ready += 1,
            JobState::Delayed => self.cmd.peek_delayed += 1,
            JobState::Buried => self.cmd.peek_buried += 1,
            JobState::Reserved => {}
        }
    }

    /// Up to `limit` ready jobs of the tube of job `id`, in the order reserves take them
    /// (most urgent first, then oldest): what a node sharing a PostgreSQL schema claims ahead
    /// for its reservers. Empty if there is no job `id`.
    #[must_use]
    pub fn ready_in_tube_of(&self, id: JobId, limit: usize) -> Vec<JobId> {
        let Some(job) = self.jobs.get(&id) else {
            return Vec::new();
        };
        let tube = self.tube(job.tube);
        tube.ready.iter().take(limit).map(|&(_, id)| id).collect()
    }

    /// Counts a `peek <id>` answered elsewhere (a node sharing a PostgreSQL schema reads a job
    /// another node's client holds from the database).
    pub fn count_peek_job(&mut self) {
        self.cmd.peek += 1;
    }

    /// The state of a job, if it exists.
    #[must_use]
    pub fn job_state(&self, id: JobId) -> Option<JobState> {
        self.jobs.get(&id).map(|j| j.state)
    }
}
