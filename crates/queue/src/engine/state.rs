//! State transitions: timers firing, entering and leaving each job state, reservations,
//! and serving waiting clients.

use super::*;

impl Engine {
    pub(super) fn job_timer(&mut self, id: JobId) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.timer = None;
        match job.state {
            JobState::Delayed => {
                let (tube, until) = (job.tube, job.deadline);
                let t = self.tube_mut(tube);
                t.delayed.remove(&(until, id));
                t.due.remove(until);
                // How late the clock that advanced the engine came, past the due time.
                self.lateness.push(self.wheel.now().saturating_sub(until));
                self.enter_ready(id);
            }
            JobState::Reserved if !job.warned => {
                // The safety margin started: warn the owner if it waits, then wait for the end.
                job.warned = true;
                let (owner, deadline) = (job.owner, job.deadline);
                // The lease ends strictly after its deadline: with whole-millisecond clocks a
                // reservation taken at 10.9 ms with a 1 s TTR must not end at 1010 ms.
                job.timer = Some(
                    self.wheel
                        .insert(deadline.saturating_add(1), Timer::Job(id)),
                );
                if let Some(owner) = owner {
                    let Some(c) = self.clients.get_mut(&owner) else {
                        return;
                    };
                    c.warned += 1;
                    if c.waiting.is_some() {
                        self.end_wait(owner);
                        self.events.push(Event::DeadlineSoon { client: owner });
                    }
                }
            }
            JobState::Reserved => {
                job.history.timeouts += 1;
                let tube = job.tube;
                self.job_timeouts += 1;
                self.tube_mut(tube).timeouts += 1;
                self.leave_state(id);
                self.enter_ready(id);
            }
            JobState::Ready | JobState::Buried => {}
        }
    }

    /// Takes a job out of whatever its state keeps it in (queue, timer, owner).
    pub(super) fn leave_state(&mut self, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        if let Some(timer) = job.timer.take() {
            self.wheel.remove(timer);
        }
        let (tube, state, priority, deadline, state_seq) = (
            job.tube,
            job.state,
            job.priority,
            job.deadline,
            job.state_seq,
        );
        // Only a reserved job is ever warned (counted in its owner's `Client::warned`).
        let warned = mem::take(&mut job.warned);
        let owner = job.owner.take();
        let t = self.tubes[tube as usize]
            .as_mut()
            .expect("job's tube exists");
        match state {
            JobState::Ready => t.remove_ready(priority, id),
            JobState::Delayed => {
                t.delayed.remove(&(deadline, id));
                t.due.remove(deadline);
            }
            JobState::Buried => {
                t.buried.remove(&state_seq);
            }
            JobState::Reserved => {
                t.reserved -= 1;
                if let Some(c) = owner.and_then(|o| self.clients.get_mut(&o)) {
                    c.reserved.remove(&state_seq);
                    c.warned -= usize::from(warned);
                }
            }
        }
    }

    pub(super) fn enter_ready(&mut self, id: JobId) {
        let job = self.job_mut(id);
        job.state = JobState::Ready;
        let (tube, priority) = (job.tube, job.priority);
        self.tube_mut(tube).add_ready(priority, id);
        // Waiters are served when the operation (or the instant) is complete, so that they
        // get the most urgent of all the jobs it made ready.
        self.to_serve.push(tube);
    }

    pub(super) fn enter_delayed(&mut self, id: JobId, until: Millis) {
        let timer = self.wheel.insert(until, Timer::Job(id));
        let job = self.job_mut(id);
        job.state = JobState::Delayed;
        job.deadline = until;
        job.timer = Some(timer);
        let tube = job.tube;
        let t = self.tube_mut(tube);
        t.delayed.insert((until, id));
        t.due.add(until);
    }

    pub(super) fn enter_buried(&mut self, id: JobId) {
        self.seq += 1;
        let seq = self.seq;
        let job = self.job_mut(id);
        job.state = JobState::Buried;
        job.state_seq = seq;
        let tube = job.tube;
        self.tube_mut(tube).buried.insert(seq, id);
    }

    pub(super) fn kick_one(&mut self, id: JobId) {
        self.leave_state(id);
        let job = self.job_mut(id);
        job.history.kicks += 1;
        let (priority, history) = (job.priority, job.history);
        self.changes.push(Change::Update {
            id,
            state: DurableState::Ready,
            priority,
            history,
        });
        self.enter_ready(id);
    }

    /// Hands job `id` (already out of its previous state) to `client`.
    pub(super) fn reserve_for(&mut self, client: ClientId, id: JobId) -> JobView {
        let job = self.job_mut(id);
        let (tube, priority) = (job.tube, job.priority);
        if job.state == JobState::Ready {
            self.tube_mut(tube).remove_ready(priority, id);
        }
        self.seq += 1;
        let seq = self.seq;
        let job = self.job_mut(id);
        job.state = JobState::Reserved;
        job.state_seq = seq;
        job.owner = Some(client);
        job.history.reserves += 1;
        let view = JobView {
            id,
            body: job.body.clone(),
        };
        let t = self.tube_mut(tube);
        t.reserved += 1;
        t.reserves += 1;
        if let Some(c) = self.clients.get_mut(&client) {
            c.reserved.insert(seq, id);
        }
        self.arm_reservation(id);
        view
    }

    /// Starts (or restarts) a reservation's TTR: a timer at the safety margin, then at the end.
    pub(super) fn arm_reservation(&mut self, id: JobId) {
        let now = self.now();
        let job = self.jobs.get_mut(&id).expect("job exists");
        if let Some(timer) = job.timer.take() {
            self.wheel.remove(timer);
        }
        job.deadline = now.saturating_add(job.ttr);
        if mem::take(&mut job.warned) {
            // A touch in the safety margin: the owner holds one warned job fewer.
            if let Some(c) = job.owner.and_then(|o| self.clients.get_mut(&o)) {
                c.warned -= 1;
            }
        }
        let warn_at = job.deadline.saturating_sub(SAFETY_MARGIN_MS).max(now);
        job.timer = Some(self.wheel.insert(warn_at, Timer::Job(id)));
    }

    /// The most urgent ready job across the client's watched, unpaused tubes.
    pub(super) fn best_ready(&self, client: ClientId) -> Option<JobId> {
        let c = self.clients.get(&client)?;
        c.watched
            .iter()
            .map(|&t| self.tube(t))
            .filter(|t| t.paused.is_none())
            .filter_map(|t| t.ready.iter().next().copied())
            .min()
            .map(|(_, id)| id)
    }

    /// Does the client hold a job in its safety margin? O(1): once the engine has advanced to
    /// now, a held job's margin has started exactly when its warning timer has fired.
    pub(super) fn deadline_soon(&self, client: ClientId) -> bool {
        let Some(c) = self.clients.get(&client) else {
            return false;
        };
        #[cfg(debug_assertions)]
        {
            let now = self.now();
            let in_margin = c
                .reserved
                .values()
                .filter_map(|id| self.jobs.get(id))
                .filter(|j| j.deadline.saturating_sub(SAFETY_MARGIN_MS) <= now)
                .count();
            assert_eq!(c.warned, in_margin, "warned jobs counted against deadlines");
        }
        c.warned > 0
    }

    /// Gives ready jobs to waiting clients as beanstalkd's `process_queue` does: while one of
    /// the `candidates` (the tubes that got ready jobs, waiters or an unpause) has both, unpaused,
    /// the most urgent such job goes to the waiter its tube's cursor picks
    /// ([`Tube::take_waiter`](crate::tube::Tube::take_waiter)). A tube outside the candidates
    /// has no ready job and waiter at once: it would have been served when it got the second.
    pub(super) fn serve_waiters(&mut self, candidates: &[TubeId]) {
        loop {
            let best = candidates
                .iter()
                .filter_map(|&tube| {
                    let t = self.tubes[tube as usize].as_ref()?;
                    if t.paused.is_some() || t.waiters.is_empty() {
                        return None;
                    }
                    t.ready
                        .iter()
                        .next()
                        .map(|&(priority, id)| (priority, id, tube))
                })
                .min();
            let Some((_, id, tube)) = best else {
                return;
            };
            let Some(client) = self.tube_mut(tube).take_waiter() else {
                return;
            };
            self.end_wait(client);
            let job = self.reserve_for(client, id);
            self.events.push(Event::Reserved { client, job });
        }
    }

    pub(super) fn end_wait(&mut self, client: ClientId) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let Some(wait) = c.waiting.take() else {
            return;
        };
        if let Some(timer) = wait.timer {
            self.wheel.remove(timer);
        }
        let watched = c.watched.clone();
        for tube in watched {
            self.tube_mut(tube).remove_waiter(client);
        }
    }

    pub(super) fn check_owner(&self, client: ClientId, id: JobId) -> Result<(), Error> {
        match self.jobs.get(&id) {
            Some(job) if job.state == JobState::Reserved && job.owner == Some(client) => Ok(()),
            _ => Err(Error::NotFound),
        }
    }

    pub(super) fn view(&self, id: JobId) -> Option<JobView> {
        self.jobs.get(&id).map(|job| JobView {
            id,
            body: job.body.clone(),
        })
    }
}
