//! The memory window: delayed jobs due far in the future live only in the store.
//!
//! With [`Config::window`](super::Config) set to `W`, a delayed job whose time is at or after
//! `window_end` (about `now + W`) is "far": the engine records its durable [`Change`] and a
//! count per tube, and forgets the rest. Memory therefore follows the jobs due soon, not the
//! jobs due next month.
//!
//! The engine does no I/O, so the caller moves the window:
//!
//! 1. [`Engine::window_load`] (when [`Engine::next_deadline`] says so) hands out a range
//!    `[from, to)` and moves `window_end` to `to` at once, so jobs put from now on with a time
//!    below `to` stay in memory;
//! 2. the caller waits until every change taken so far is durable, reads the store's delayed
//!    jobs in that range, and passes them to [`Engine::load_window`].
//!
//! Jobs reached by id in between (a `delete` of a far job, say) come in through
//! [`Engine::load_job`] first ([`Engine::needs_load`] tells when); the load then skips them,
//! so a job deleted meanwhile never comes back. `peek-delayed` and `kick` need the earliest
//! far jobs of a tube: [`Engine::needs_far_for_tube`] tells the caller to widen the window
//! with [`Engine::widen_window`] first.
//!
//! [`Change`]: crate::Change

use rustc_hash::FxHashSet;

use super::{Engine, Job};
use crate::tube::TubeId;
use crate::types::{ClientId, DurableState, Error, JobId, JobRecord, Load, Millis, TubeName};

/// A window load in progress.
pub(super) struct Loading {
    from: Millis,
    to: Millis,
    /// Far jobs of `[from, to)` already loaded by id (and maybe deleted since): skipped.
    touched: FxHashSet<JobId>,
}

impl Engine {
    /// The range of far jobs to load now, if the window must move: `Some((from, to))` once the
    /// clock is within half a window of `window_end` and far jobs exist. The caller must then
    /// read the store's delayed jobs with `from <= until < to` (after every change taken so far
    /// is durable) and pass them to [`load_window`](Self::load_window).
    pub fn window_load(&mut self, now: Millis) -> Option<(Millis, Millis)> {
        let window = self.config.window?;
        if self.far == 0 || self.loading.is_some() {
            return None;
        }
        if now.saturating_add(window / 2) < self.window_end {
            return None;
        }
        let from = self.window_end;
        let to = now.saturating_add(window).max(from.saturating_add(1));
        Some(self.start_loading(from, to))
    }

    /// Forces the window wider (doubling its reach), for commands that need far jobs now
    /// (`peek-delayed`, `kick`). `None` if there is nothing far or a load is in progress.
    pub fn widen_window(&mut self) -> Option<(Millis, Millis)> {
        self.config.window?;
        if self.far == 0 || self.loading.is_some() {
            return None;
        }
        let from = self.window_end;
        let reach = from
            .saturating_sub(self.now())
            .max(self.config.window.unwrap_or(1))
            .max(1);
        Some(self.start_loading(from, from.saturating_add(reach)))
    }

    fn start_loading(&mut self, from: Millis, to: Millis) -> (Millis, Millis) {
        self.window_end = to;
        self.loading = Some(Loading {
            from,
            to,
            touched: FxHashSet::default(),
        });
        (from, to)
    }

    /// Completes the load handed out by [`window_load`](Self::window_load) or
    /// [`widen_window`](Self::widen_window) with the store's delayed jobs of its range.
    pub fn load_window(&mut self, records: Vec<JobRecord>) {
        let Some(loading) = self.loading.take() else {
            return;
        };
        for record in records {
            let DurableState::Delayed { until } = record.state else {
                continue;
            };
            if until < loading.from || until >= loading.to {
                continue;
            }
            if loading.touched.contains(&record.id) || self.jobs.contains_key(&record.id) {
                continue;
            }
            self.make_resident(record, until);
        }
        self.serve_deferred();
    }

    /// `true` if `id` is not in memory but may be a far job: an operation on it answers
    /// [`Error::NeedsLoad`] until the caller has looked it up in the store (after every change
    /// taken so far is durable) and passed the answer to [`load_job`](Self::load_job).
    #[must_use]
    pub fn needs_load(&self, id: JobId) -> bool {
        (self.far > 0 || self.loading.is_some())
            && (id < self.next_id || id >= super::FOREIGN_ID_BASE)
            && !self.jobs.contains_key(&id)
    }

    /// Completes a [`Load::Job`]: `record` is what the store holds under `id` (`None`: no
    /// such job). Brings a far job into memory; does nothing more if it is in memory already
    /// or is not a far delayed job. The next operation on `id` then runs on what is in memory.
    pub fn load_job(&mut self, id: JobId, record: Option<JobRecord>) {
        self.loaded = Some(Load::Job(id));
        let Some(record) = record.filter(|r| r.id == id) else {
            return;
        };
        let DurableState::Delayed { until } = record.state else {
            return;
        };
        if self.jobs.contains_key(&record.id) {
            return;
        }
        let pending = self
            .loading
            .as_ref()
            .is_some_and(|l| until >= l.from && until < l.to);
        if until < self.window_end && !pending {
            return; // not far: a stale store read of a job that is gone
        }
        if let Some(loading) = self.loading.as_mut() {
            loading.touched.insert(record.id);
        }
        self.make_resident(record, until);
        self.serve_deferred();
    }

    /// `true` if `peek-delayed` (`kick == false`, `wanted == 1`) or `kick wanted` on the
    /// client's used tube could need far jobs: the tube has far jobs and fewer than `wanted`
    /// delayed jobs in memory (and, for a kick, no buried job, which a kick would take first).
    #[must_use]
    pub fn needs_far_for_tube(&self, client: ClientId, wanted: u64, kick: bool) -> bool {
        let Some(c) = self.clients.get(&client) else {
            return false;
        };
        let t = self.tube(c.used);
        if t.far_delayed == 0 || (kick && !t.buried.is_empty()) {
            return false;
        }
        // Only delayed jobs below the window end are known to come before every far job (a
        // far job loaded by id sits in memory beyond it).
        let below = t
            .delayed
            .range(..(self.window_end, 0))
            .take(wanted as usize)
            .count();
        (below as u64) < wanted
    }

    /// Lets the next operation that would answer [`Error::NeedsLoad`]`(load)` run on what is in
    /// memory (for a caller that cannot make progress on the load).
    pub fn skip_load(&mut self, load: Load) {
        self.loaded = Some(load);
    }

    /// [`Error::NeedsLoad`] if job `id` may be on disk only and was not just loaded.
    pub(super) fn require_job(&mut self, id: JobId) -> Result<(), Error> {
        if self.loaded.take() == Some(Load::Job(id)) || !self.needs_load(id) {
            return Ok(());
        }
        Err(Error::NeedsLoad(Load::Job(id)))
    }

    /// [`Error::NeedsLoad`] if `peek-delayed` / `kick wanted` on the client's used tube may
    /// need far jobs (see [`needs_far_for_tube`](Self::needs_far_for_tube)).
    pub(super) fn require_front(
        &mut self,
        client: ClientId,
        wanted: u64,
        kick: bool,
    ) -> Result<(), Error> {
        if self.loaded.take() == Some(Load::Widen) || !self.needs_far_for_tube(client, wanted, kick)
        {
            return Ok(());
        }
        Err(Error::NeedsLoad(Load::Widen))
    }

    /// Registers the idempotency keys of far jobs (those not handed to
    /// [`recover_windowed`](Self::recover_windowed)), after a restart: the server reads them
    /// from the store's far delayed jobs. Without this, a put could not see that a job due
    /// next month already has its key.
    pub fn add_far_keys(&mut self, keys: impl IntoIterator<Item = (TubeName, String, JobId)>) {
        for (tube, key, id) in keys {
            self.keys.insert((tube, key), id);
        }
    }

    /// The time at or after which delayed jobs are not in memory.
    #[must_use]
    pub fn window_end(&self) -> Millis {
        self.window_end
    }

    /// One more far job, due at `until` (counted in the tube's timeline too).
    pub(super) fn add_far(&mut self, tube: TubeId, until: Millis) {
        self.add_far_many(tube, 1);
        self.tube_mut(tube).due.add(until);
    }

    pub(super) fn add_far_many(&mut self, tube: TubeId, count: u64) {
        self.tube_mut(tube).far_delayed += count;
        self.far += count;
    }

    /// When the window must next move, if far jobs exist.
    pub(super) fn window_refresh_at(&self) -> Option<Millis> {
        let window = self.config.window?;
        (self.far > 0 && self.loading.is_none()).then(|| self.window_end.saturating_sub(window / 2))
    }

    /// With no far job, the window follows the clock without any load.
    pub(super) fn slide_window(&mut self, now: Millis) {
        if let Some(window) = self.config.window {
            if self.far == 0 && self.loading.is_none() {
                self.window_end = self.window_end.max(now.saturating_add(window));
            }
        }
    }

    fn make_resident(&mut self, record: JobRecord, until: Millis) {
        let tube = self.tube_ref(&record.tube);
        let t = self.tube_mut(tube);
        t.far_delayed = t.far_delayed.saturating_sub(1);
        t.due.remove(until); // counted again by `enter_delayed` if it stays delayed
        self.far = self.far.saturating_sub(1);
        let now = self.now();
        let mut job = Job::restored(tube, &record, now);
        if let Some(key) = record.idempotency_key {
            // Far keyed jobs are in `keys` already (put, or `add_far_keys` at recovery).
            self.keys
                .insert((record.tube.clone(), key.clone()), record.id);
            job.key = Some(key);
        }
        self.jobs.insert(record.id, job);
        if until <= now {
            self.enter_ready(record.id);
        } else {
            self.enter_delayed(record.id, until);
        }
    }
}
