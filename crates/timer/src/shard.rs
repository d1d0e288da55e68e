//! A shard: one wheel, the slab of task slots it points into, and one short lock.
//!
//! # Ground rules
//!
//! - A **one-shot callback** lives in its wheel entry itself (a [`Payload`] of 24 bytes:
//!   the closure inline when it is small, else its box; the entry is 40); its handle is
//!   the wheel key. This is the
//!   common timer, and it costs one slab (the wheel's) instead of two: 8-byte
//!   fewer bookkeeping and one random cache line fewer per schedule, cancel and fire. When
//!   it fires or is cancelled, its outcome is written to `finished` (1 byte per wheel
//!   entry, indexed like the wheel's slab: `true` = cancelled) so that its handle still
//!   reports `Done` or `Cancelled` afterwards. Whose outcome it is comes from the wheel:
//!   [`Wheel::left_last`] says whether the entry's last timer to leave is still the
//!   handle's, so no generation is stored here. `finished` grows with the wheel when a callback is
//!   *scheduled* into an entry beyond it (amortised like the wheel's own slab), never
//!   when one fires: sizing it at the first firing wrote 4 MB under the shard lock at the
//!   start of a 1M-timer burst (2.8 ms during which nothing fired; `BENCHMARKS.md`).
//! - A **repeating task** or an **async timer** needs an identity that survives leaving
//!   and re-entering the wheel, so it lives in a [`Slot`] of the shard's side slab: state
//!   byte, kind, generation, wheel key and the task (a repeating task, or a `Sleep`'s
//!   waker); the wheel holds the slot index ([`Payload::slot_index`]).
//! - Nothing is reference counted and nothing is allocated per timer once the slabs and
//!   the wheel are warm (a one-shot closure whose captures fit 16 bytes is stored inline,
//!   see `payload.rs`; a larger one is boxed).
//! - **Everything about a slot is read and written under its shard's lock**: schedule,
//!   cancel, state, the driver taking due timers out (a one-shot callback's slot is freed
//!   right then, as fired: its task travels on without it), a worker ending a repeating
//!   run, `stop` draining. So there are no lock-free races to reason about per timer; the only
//!   question is which of two lock holders comes first, and each outcome is a valid
//!   history (loom checks them, `tests/loom.rs`). Callbacks, wakers and closure drops run
//!   outside the lock.
//! - **Handles are keys.** A [`TimerHandle`](crate::TimerHandle) is `(shard and kind,
//!   index, generation)`: a wheel key for a one-shot callback, a side-slab slot and its
//!   generation for a repeating task. Both generations change each time the entry is
//!   reused, so a handle never cancels or reports the newer timer in its entry. A freed
//!   side slot keeps its final state (done / cancelled) until reused; a one-shot
//!   callback's outcome stays in `finished` until the next timer in the same wheel entry
//!   finishes; after that the handle reports
//!   [`TaskState::Unknown`](crate::TaskState::Unknown). Generations start at a per-wheel
//!   and per-timer seed, so a handle of another `Timer` is rejected too (in all but freak
//!   cases, like wheel keys).
//! - **Waking the driver.** `sleep_until` is the tick the driver sleeps towards (`AWAKE`
//!   while it works). A producer that links an earlier tick lowers it under the lock and
//!   unparks the driver after unlocking. The driver sets it in every shard, under each
//!   shard's lock, after reading that shard's next deadline (see `Inner::turn`), so
//!   either the driver sees a new timer or its producer sees the target and wakes it.
//!   Cancels take timers out with [`Wheel::remove_lazy`] and leave `sleep_until` alone: the
//!   driver may wake early for a cancelled timer, never late; it reads each shard's next
//!   deadline with [`Wheel::next_deadline_mut`], exact.

use std::task::Waker;

use tickwheel_core::{Step, TimerKey, Wheel};

pub(crate) use crate::payload::Payload;
use crate::task::{PendingTask, Repeat};

/// `sleep_until` while the driver is awake: no producer needs to wake it.
pub(crate) const AWAKE: u64 = 0;

/// Linked in the wheel.
pub(crate) const WAITING: u8 = 0;
/// A repeating task taken off the wheel by the driver: queued for a worker, or running.
pub(crate) const RUNNING: u8 = 1;
/// A one-shot callback fired (was handed to a worker); a repeating task ended; an async
/// timer fired.
pub(crate) const DONE: u8 = 2;
/// Cancelled, or returned by `stop`, before it ran.
pub(crate) const CANCELLED: u8 = 3;
/// A repeating task cancelled while its run is in flight: no further run.
pub(crate) const CANCELLING: u8 = 4;
/// An async timer whose service stopped before it fired.
pub(crate) const SHUTDOWN: u8 = 5;
/// An async timer registered but not linked (its `Sleep` was reset).
pub(crate) const IDLE: u8 = 6;

pub(crate) const REPEAT: u8 = 1;
pub(crate) const SLEEP: u8 = 2;

/// Timers the wheel moves down a level per `poll_budgeted` call while the driver holds a
/// shard's lock (see [`Shard::take_due`]). A cascade moves a timer in tens of nanoseconds
/// (a cache miss at most), so this bounds the cascade work of one lock hold to tens of
/// microseconds, instead of a whole 256 ms slot's timers at once (a quarter of a million in
/// a burst of a million due within one second: milliseconds under the lock).
/// Under loom: one line (15 timers) per call, so a model with a few dozen timers pauses.
pub(crate) const CASCADE_BUDGET: usize = if cfg!(loom) { 1 } else { 1024 };

/// No slot: ends the free list.
const NIL: u32 = u32::MAX;

/// The slab index in a wheel key: the low 32 bits of [`TimerKey::to_u64`] (pinned by
/// `wheel_keys_split_into_index_and_generation`).
#[inline]
fn key_index(key: TimerKey) -> u32 {
    key.to_u64() as u32
}

/// The generation in a wheel key: the high 32 bits of [`TimerKey::to_u64`].
#[inline]
fn key_gen(key: TimerKey) -> u32 {
    (key.to_u64() >> 32) as u32
}

/// The wheel key with slab index `index` and generation `gen`.
#[inline]
fn make_key(index: u32, gen: u32) -> TimerKey {
    TimerKey::from_u64((u64::from(gen) << 32) | u64::from(index))
}

/// What a side-slab slot holds.
pub(crate) enum Task {
    /// Nothing (a vacant slot, or a task out with a worker).
    Empty,
    Repeat(Box<Repeat>),
    Sleep(Option<Waker>),
}

impl Task {
    fn take(&mut self) -> Task {
        std::mem::replace(self, Task::Empty)
    }
}

/// A repeating task or an async timer. 40 bytes (a unit test pins it), plus the wheel's
/// entry.
pub(crate) struct Slot {
    /// The wheel key while `WAITING`; the next free slot while vacant.
    key: u64,
    task: Task,
    gen: u32,
    state: u8,
    kind: u8,
    vacant: bool,
}

/// A timer taken off the wheel for a worker (or the inline driver) to run.
pub(crate) struct Fire {
    pub(crate) tick: u64,
    pub(crate) shard: u32,
    pub(crate) slot: u32,
    pub(crate) work: Work,
}

/// The part of a task a worker runs.
pub(crate) enum Work {
    Once(Payload),
    Repeat(Box<Repeat>),
}

impl Work {
    pub(crate) fn into_pending(self, deadline: std::time::Instant) -> PendingTask {
        match self {
            Work::Once(f) => PendingTask::once(deadline, f),
            Work::Repeat(r) => PendingTask::repeating(deadline, *r),
        }
    }
}

/// What arming an async timer did.
pub(crate) enum Arm {
    /// Linked in slot `.0`; `.1`: the driver must be woken.
    Linked(u32, bool),
    /// The deadline tick has passed by the wheel's clock (the driver's last reading of the
    /// timer's clock): the deadline has passed, nothing was linked.
    Elapsed,
    /// The shard is closed (the timer stopped).
    Closed,
}

/// What the driver took out of one shard in one turn.
#[derive(Default)]
pub(crate) struct Due {
    pub(crate) fires: Vec<Fire>,
    /// Async timers that fired, with their deadline tick, to wake outside the lock.
    pub(crate) wakers: Vec<(u64, Option<Waker>)>,
}

pub(crate) struct Shard {
    pub(crate) wheel: Wheel<Payload>,
    /// Outcome of the last one-shot callback that left each wheel entry (`true`: cancelled),
    /// by entry index (see the ground rules); grown to the wheel's capacity when a one-shot callback is
    /// scheduled beyond it.
    finished: Vec<bool>,
    slots: Vec<Slot>,
    free: u32,
    /// The generation a slot pushed onto the slab starts with (per-timer seed).
    fresh_gen: u32,
    /// The tick the driver sleeps towards; `AWAKE` while it works.
    pub(crate) sleep_until: u64,
    /// Set once `stop` has drained the shard: inserts are refused from then on.
    pub(crate) closed: bool,
    /// Callbacks scheduled here and not yet finished (`Timer::pending`, `max_pending`).
    pub(crate) pending: usize,
    /// `Metrics::scheduled` / `cancelled`, counted under the lock those operations take.
    pub(crate) scheduled: u64,
    pub(crate) cancelled: u64,
}

impl Shard {
    pub(crate) fn new(seed: u32) -> Self {
        Shard {
            wheel: Wheel::starting_at(0),
            finished: Vec::new(),
            slots: Vec::new(),
            free: NIL,
            fresh_gen: seed,
            sleep_until: AWAKE,
            closed: false,
            pending: 0,
            scheduled: 0,
            cancelled: 0,
        }
    }

    /// Takes a vacant slot (reusing the most recently freed one) for `task`; returns its
    /// index and generation.
    fn alloc(&mut self, kind: u8, state: u8, task: Task) -> (u32, u32) {
        if self.free != NIL {
            let index = self.free;
            let slot = &mut self.slots[index as usize];
            debug_assert!(slot.vacant, "free list points at a live slot {index}");
            self.free = slot.key as u32;
            slot.gen = slot.gen.wrapping_add(1);
            slot.state = state;
            slot.kind = kind;
            slot.vacant = false;
            // A vacant slot's task is `Empty` (`release` took it): nothing to drop, so
            // skip the drop glue (it was ~14 instructions per async `sleep`).
            let old = std::mem::replace(&mut slot.task, task);
            debug_assert!(
                matches!(old, Task::Empty),
                "vacant slot {index} holds a task"
            );
            std::mem::forget(old);
            slot.key = u64::MAX;
            return (index, slot.gen);
        }
        let index = u32::try_from(self.slots.len()).unwrap_or(NIL);
        assert!(
            index != NIL,
            "tickwheel: more than 2^32 - 1 timers in one shard"
        );
        self.slots.push(Slot {
            key: u64::MAX,
            task,
            gen: self.fresh_gen,
            state,
            kind,
            vacant: false,
        });
        (index, self.fresh_gen)
    }

    /// Frees a slot, leaving `final_state` for stale handles to read; returns its task so
    /// the caller drops it outside the lock.
    fn release(&mut self, index: u32, final_state: u8) -> Task {
        let slot = &mut self.slots[index as usize];
        debug_assert!(!slot.vacant, "double free of slot {index}");
        slot.vacant = true;
        slot.state = final_state;
        slot.key = u64::from(self.free);
        self.free = index;
        slot.task.take()
    }

    /// The live slot a handle names, if it still names one.
    fn live(&mut self, index: u32, gen: u32) -> Option<&mut Slot> {
        self.slots
            .get_mut(index as usize)
            .filter(|s| s.gen == gen && !s.vacant)
    }

    /// Links slot `index` at `tick`; returns `true` if the driver must be woken.
    fn link(&mut self, index: u32, tick: u64) -> bool {
        let key = self.wheel.insert(tick, Payload::slot_index(index));
        let slot = &mut self.slots[index as usize];
        slot.key = key.to_u64();
        slot.state = WAITING;
        self.lower_target(tick)
    }

    /// Lowers the driver's target to `tick` if earlier; `true` if the driver must be woken.
    #[inline]
    fn lower_target(&mut self, tick: u64) -> bool {
        if tick < self.sleep_until {
            self.sleep_until = tick;
            true
        } else {
            false
        }
    }

    /// Records how the one-shot callback of wheel key `key` ended, for its handle.
    #[inline]
    fn finish_once(&mut self, key: TimerKey, cancelled: bool) {
        let i = key_index(key) as usize;
        match self.finished.get_mut(i) {
            Some(slot) => *slot = cancelled,
            None => {
                self.grow_finished(i);
                self.finished[i] = cancelled;
            }
        }
    }

    /// Sizes `finished` to cover wheel entry `i` (to the wheel's capacity: grown as
    /// rarely as the wheel's slab).
    #[cold]
    #[inline(never)]
    fn grow_finished(&mut self, i: usize) {
        let len = self.wheel.capacity().max(i + 1);
        self.finished.resize(len, false);
    }

    /// Schedules a one-shot callback; returns `(wheel key index, generation, wake driver)`.
    #[inline(always)]
    pub(crate) fn schedule_once(&mut self, f: Payload, tick: u64) -> (u32, u32, bool) {
        let key = self.wheel.insert(tick, f);
        let index = key_index(key);
        if index as usize >= self.finished.len() {
            // Here, not when it fires: the driver must not stall on this in a burst.
            self.grow_finished(index as usize);
        }
        self.pending += 1;
        self.scheduled += 1;
        (index, key_gen(key), self.lower_target(tick))
    }

    /// Cancels a one-shot callback: `Some(closure to drop)` if this prevented its run.
    #[inline]
    pub(crate) fn cancel_once(&mut self, index: u32, gen: u32) -> Option<Payload> {
        let key = make_key(index, gen);
        // Lazy: when this was the earliest timer (a timeout cancelled before every other
        // one is due), the wheel looks up the next one when the driver asks for it, not on
        // every cancel (`BENCHMARKS.md`, "schedule + cancel: the earliest timer's cancel").
        let f = self.wheel.remove_lazy(key)?;
        match f.slot() {
            None => {
                self.pending -= 1;
                self.cancelled += 1;
                self.finish_once(key, true);
                Some(f)
            }
            Some(slot) => {
                // Cannot happen: a once handle's key names a callback. Put it back
                // rather than lose a timer (the key changes; the slot learns the new one).
                debug_assert!(false, "one-shot key {key:?} named slot {slot}");
                let tick = self.wheel.now();
                self.link(slot, tick);
                None
            }
        }
    }

    /// The state byte of the one-shot callback a handle names, or `None` if unknown.
    pub(crate) fn state_once(&self, index: u32, gen: u32) -> Option<u8> {
        let key = make_key(index, gen);
        if self.wheel.contains(key) {
            return Some(WAITING);
        }
        // The entry's generation is the leaving key's plus one until the next timer in it
        // leaves too: until then the outcome bit is this handle's.
        if !self.wheel.left_last(key) {
            return None;
        }
        Some(if *self.finished.get(index as usize)? {
            CANCELLED
        } else {
            DONE
        })
    }

    /// The deadline tick of a waiting one-shot callback.
    pub(crate) fn deadline_once(&self, index: u32, gen: u32) -> Option<u64> {
        self.wheel.deadline(make_key(index, gen))
    }

    /// Schedules a repeating task; returns `(slot, gen, wake driver)`.
    pub(crate) fn schedule_repeat(&mut self, task: Box<Repeat>, tick: u64) -> (u32, u32, bool) {
        let (index, gen) = self.alloc(REPEAT, WAITING, Task::Repeat(task));
        let wake = self.link(index, tick);
        self.pending += 1;
        self.scheduled += 1;
        (index, gen, wake)
    }

    /// Cancels a repeating task: `Some(task to drop)` if this prevented a run
    /// (`Task::Empty` for a task whose run is in flight: its worker drops it).
    pub(crate) fn cancel(&mut self, index: u32, gen: u32) -> Option<Task> {
        let slot = self.live(index, gen)?;
        if slot.kind == SLEEP {
            return None;
        }
        match slot.state {
            WAITING => {
                let key = TimerKey::from_u64(slot.key);
                self.wheel.remove_lazy(key);
                self.pending -= 1;
                self.cancelled += 1;
                Some(self.release(index, CANCELLED))
            }
            RUNNING if slot.kind == REPEAT => {
                slot.state = CANCELLING;
                self.cancelled += 1;
                Some(Task::Empty)
            }
            _ => None,
        }
    }

    /// The state byte of the repeating task a handle names, or `None` once its slot is
    /// reused.
    pub(crate) fn state(&self, index: u32, gen: u32) -> Option<u8> {
        self.slots
            .get(index as usize)
            .filter(|s| s.gen == gen && s.kind != SLEEP)
            .map(|s| s.state)
    }

    /// The deadline tick of a waiting repeating task.
    pub(crate) fn deadline(&mut self, index: u32, gen: u32) -> Option<u64> {
        let slot = self.live(index, gen)?;
        if slot.kind == SLEEP || slot.state != WAITING {
            return None;
        }
        let key = TimerKey::from_u64(slot.key);
        self.wheel.deadline(key)
    }

    /// Takes up to `limit` timers due at `now` out of the wheel into `due`. A one-shot
    /// callback's closure moves into `due.fires` and its outcome is recorded as `DONE`
    /// ("fired") right here, so a worker never touches the shard for it; a repeating task's slot
    /// stays, `RUNNING`, until its run ends; async timers become `DONE`. Returns whether
    /// it stopped early (at `limit`, or because the wheel paused a cascade: more may be due)
    /// and how many one-shot callbacks it took (no longer in `pending`: the caller counts
    /// them in flight).
    ///
    /// The wheel is polled with [`Wheel::poll_budgeted`]: when the earliest timers sit in a
    /// higher level's slot (with 1 ms ticks, everything due in the same 256 ms window), they
    /// are moved down at most [`CASCADE_BUDGET`] per call, and the first pause ends this call
    /// so that the caller releases the lock (producers and cancels get it in between). So one
    /// call does at most `limit` firings plus one budget of paused cascade work, plus any
    /// cascades small enough to finish within one poll, whose timers then fire here.
    pub(crate) fn take_due(
        &mut self,
        shard: u32,
        now: u64,
        due: &mut Due,
        limit: usize,
    ) -> (bool, usize) {
        let mut once = 0;
        for _ in 0..limit {
            let (key, payload) = match self.wheel.poll_budgeted(now, CASCADE_BUDGET) {
                Step::Fired(key, payload) => (key, payload),
                Step::Paused => return (true, once),
                Step::Idle => return (false, once),
            };
            let tick = self.wheel.now();
            let index = match payload.slot() {
                None => {
                    self.pending -= 1;
                    self.finish_once(key, false);
                    once += 1;
                    due.fires.push(Fire {
                        tick,
                        shard,
                        slot: key_index(key),
                        work: Work::Once(payload),
                    });
                    continue;
                }
                Some(index) => index,
            };
            let slot = &mut self.slots[index as usize];
            match slot.kind {
                SLEEP => {
                    slot.state = DONE;
                    if let Task::Sleep(waker) = slot.task.take() {
                        due.wakers.push((tick, waker));
                    }
                }
                _ => {
                    slot.state = RUNNING;
                    if let Task::Repeat(r) = slot.task.take() {
                        due.fires.push(Fire {
                            tick,
                            shard,
                            slot: index,
                            work: Work::Repeat(r),
                        });
                    }
                }
            }
        }
        (true, once)
    }

    /// A repeating task taken off the wheel will not run because the timer stopped.
    /// Returns `false` if it was cancelled meanwhile (then it is not handed to `stop`).
    pub(crate) fn give_back_repeat(&mut self, index: u32) -> bool {
        let wanted = self.slots[index as usize].state != CANCELLING;
        self.pending -= 1;
        if wanted {
            self.cancelled += 1;
        }
        let leftover = self.release(index, CANCELLED);
        debug_assert!(matches!(leftover, Task::Empty));
        wanted
    }

    /// A repeating run ended. `again`: link it at `next` (`Ok(wake driver)`); otherwise, or
    /// if it was cancelled meanwhile or the shard is closed, the slot is freed and the task
    /// handed back as `Err((task, returned_to_stop))`.
    pub(crate) fn finish_repeat(
        &mut self,
        index: u32,
        task: Box<Repeat>,
        next: u64,
        again: bool,
    ) -> Result<bool, (Box<Repeat>, bool)> {
        let state = self.slots[index as usize].state;
        if state == CANCELLING {
            self.pending -= 1;
            self.release(index, CANCELLED);
            return Err((task, false));
        }
        if !again {
            self.pending -= 1;
            self.release(index, DONE);
            return Err((task, false));
        }
        if self.closed {
            // `stop` drained this shard while the run was in flight: hand it back.
            self.pending -= 1;
            self.cancelled += 1;
            self.release(index, CANCELLED);
            return Err((task, true));
        }
        self.slots[index as usize].task = Task::Repeat(task);
        Ok(self.link(index, next))
    }

    /// Graceful shutdown: cancels every waiting repeating task; returns them for dropping.
    pub(crate) fn sweep_repeating(&mut self) -> Vec<Task> {
        let waiting: Vec<u32> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                !s.vacant && s.kind == REPEAT && s.state == WAITING
            })
            .map(|i| i as u32)
            .collect();
        waiting
            .into_iter()
            .map(|index| {
                let key = TimerKey::from_u64(self.slots[index as usize].key);
                self.wheel.remove(key);
                self.pending -= 1;
                self.cancelled += 1;
                self.release(index, CANCELLED)
            })
            .collect()
    }

    /// `stop`: closes the shard and empties the wheel. Callbacks come back as
    /// `(deadline tick, work)` and their slots are freed as cancelled; waiting async timers
    /// become `SHUTDOWN` and their wakers are returned to be woken.
    pub(crate) fn close(&mut self) -> (Vec<(u64, Work)>, Vec<Waker>) {
        self.closed = true;
        let drained: Vec<(TimerKey, u64, Payload)> = self.wheel.drain().collect();
        let mut work = Vec::new();
        let mut wakers = Vec::new();
        for (key, tick, payload) in drained {
            let index = match payload.slot() {
                None => {
                    self.pending -= 1;
                    self.cancelled += 1;
                    self.finish_once(key, true);
                    work.push((tick, Work::Once(payload)));
                    continue;
                }
                Some(index) => index,
            };
            let slot = &mut self.slots[index as usize];
            if slot.kind == SLEEP {
                slot.state = SHUTDOWN;
                if let Task::Sleep(Some(w)) = slot.task.take() {
                    wakers.push(w);
                }
                continue;
            }
            self.pending -= 1;
            self.cancelled += 1;
            if let Task::Repeat(r) = self.release(index, CANCELLED) {
                work.push((tick, Work::Repeat(r)));
            }
        }
        (work, wakers)
    }

    /// Slab and wheel capacities, to check that re-arming does not grow them.
    #[cfg(test)]
    pub(crate) fn capacities(&self) -> (usize, usize) {
        (self.slots.capacity(), self.wheel.capacity())
    }

    // ---- async timers (`Sleep`) ----

    /// Registers an async timer; its slot belongs to the `Sleep` until `sleep_drop`.
    pub(crate) fn sleep_register(&mut self, waker: Waker, tick: u64) -> Arm {
        if self.closed {
            return Arm::Closed;
        }
        if tick <= self.wheel.now() {
            return Arm::Elapsed;
        }
        let (index, _) = self.alloc(SLEEP, IDLE, Task::Sleep(Some(waker)));
        self.scheduled += 1;
        Arm::Linked(index, self.link(index, tick))
    }

    /// Re-links an `IDLE` or `DONE` async timer at `tick` with `waker` (the slot is left
    /// as it is if the tick has passed, and made `SHUTDOWN` if the shard is closed).
    pub(crate) fn sleep_rearm(&mut self, index: u32, waker: Waker, tick: u64) -> Arm {
        if self.closed {
            self.slots[index as usize].state = SHUTDOWN;
            return Arm::Closed;
        }
        if tick <= self.wheel.now() {
            return Arm::Elapsed;
        }
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.kind == SLEEP && slot.state != WAITING);
        slot.task = Task::Sleep(Some(waker));
        self.scheduled += 1;
        Arm::Linked(index, self.link(index, tick))
    }

    /// The state of an async timer's slot; stores `waker` if it is still waiting.
    pub(crate) fn sleep_poll(&mut self, index: u32, waker: &Waker) -> u8 {
        let slot = &mut self.slots[index as usize];
        if slot.state == WAITING {
            match &mut slot.task {
                Task::Sleep(Some(w)) if w.will_wake(waker) => {}
                task => *task = Task::Sleep(Some(waker.clone())),
            }
        }
        slot.state
    }

    pub(crate) fn sleep_state(&self, index: u32) -> u8 {
        self.slots[index as usize].state
    }

    /// Moves a waiting async timer to `tick` (`Some(wake driver)`), or unlinks a fired one
    /// so the next poll re-arms it (`None`).
    pub(crate) fn sleep_reset(&mut self, index: u32, tick: u64) -> Option<bool> {
        let slot = &mut self.slots[index as usize];
        match slot.state {
            WAITING => {
                let key = TimerKey::from_u64(slot.key);
                let moved = self.wheel.reset(key, tick);
                debug_assert!(moved, "waiting async timer {index} not in the wheel");
                if tick < self.sleep_until {
                    self.sleep_until = tick;
                    Some(true)
                } else {
                    Some(false)
                }
            }
            DONE => {
                slot.state = IDLE;
                None
            }
            _ => None,
        }
    }

    /// The `Sleep` is gone: unlink its timer if it still waits (counted as cancelled) and
    /// free the slot. Returns the waker to drop outside the lock.
    pub(crate) fn sleep_drop(&mut self, index: u32) -> Option<Waker> {
        let slot = &self.slots[index as usize];
        if slot.state == WAITING {
            let key = TimerKey::from_u64(slot.key);
            self.wheel.remove_lazy(key);
            self.cancelled += 1;
        }
        match self.release(index, DONE) {
            Task::Sleep(waker) => waker,
            task => {
                debug_assert!(matches!(task, Task::Empty), "a Sleep's slot held a task");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn once_payload(f: impl FnOnce() + Send + 'static) -> Payload {
        crate::payload::Prepared::new(f).into_payload()
    }

    #[test]
    fn a_slot_is_40_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 40);
    }

    #[test]
    fn wheel_keys_split_into_index_and_generation() {
        let mut wheel = Wheel::starting_at(0);
        let keys: Vec<TimerKey> = (0..3).map(|i| wheel.insert(10, i)).collect();
        for (i, &key) in keys.iter().enumerate() {
            assert_eq!(key_index(key) as usize, i, "slab index in the low bits");
            assert_eq!(make_key(key_index(key), key_gen(key)), key);
        }
        let stale = keys[1];
        assert_eq!(wheel.remove(stale), Some(1));
        let reused = wheel.insert(10, 9);
        assert_eq!(key_index(reused), key_index(stale), "LIFO reuse");
        assert_ne!(key_gen(reused), key_gen(stale));
    }

    fn repeat() -> Box<Repeat> {
        Box::new(Repeat {
            f: Box::new(|| ()),
            period: std::time::Duration::from_millis(1),
            period_ticks: 1,
            behavior: crate::MissedTickBehavior::Skip,
            due: 10,
        })
    }

    #[test]
    fn a_stale_once_handle_never_touches_the_newer_timer_in_its_entry() {
        let mut shard = Shard::new(7);
        let (a, gen_a, _) = shard.schedule_once(once_payload(|| ()), 10);
        assert_eq!(shard.state_once(a, gen_a), Some(WAITING));
        assert!(shard.cancel_once(a, gen_a).is_some());
        assert_eq!(shard.state_once(a, gen_a), Some(CANCELLED));
        let (b, gen_b, _) = shard.schedule_once(once_payload(|| ()), 10);
        assert_eq!(a, b, "LIFO reuse of the freed entry");
        assert_ne!(gen_a, gen_b);
        assert!(
            shard.cancel_once(a, gen_a).is_none(),
            "stale handle cancels nothing"
        );
        assert_eq!(
            shard.state_once(a, gen_a),
            Some(CANCELLED),
            "its own outcome"
        );
        assert_eq!(shard.state_once(b, gen_b), Some(WAITING));
        assert_eq!(shard.deadline_once(a, gen_a), None);
        assert_eq!(shard.deadline_once(b, gen_b), Some(10));
        // The newer timer fires: the entry's record is now its, the old handle unknown.
        let mut due = Due::default();
        assert_eq!(shard.take_due(0, 10, &mut due, 8), (false, 1));
        assert_eq!(due.fires.len(), 1);
        assert_eq!(shard.state_once(b, gen_b), Some(DONE));
        assert_eq!(shard.state_once(a, gen_a), None, "stale handle: unknown");
        assert!(
            shard.cancel_once(b, gen_b).is_none(),
            "fired: nothing to cancel"
        );
        assert_eq!(shard.pending, 0);
    }

    /// The outcome records are sized while scheduling, so the first firing of a burst does
    /// not stop to size them under the lock (it wrote 4 MB, 2.8 ms, for 1M timers).
    #[test]
    fn finished_records_are_sized_when_scheduling_not_when_firing() {
        let mut shard = Shard::new(7);
        let handles: Vec<(u32, u32, bool)> = (0..5_000u64)
            .map(|i| shard.schedule_once(once_payload(|| ()), 10 + i % 100))
            .collect();
        let sized = shard.finished.len();
        assert!(sized >= 5_000, "finished sized to {sized} while scheduling");
        let mut due = Due::default();
        while shard.take_due(0, 200, &mut due, 256).0 {}
        assert_eq!(due.fires.len(), 5_000);
        assert_eq!(shard.finished.len(), sized, "firing resized finished");
        for (i, gen, _) in handles {
            assert_eq!(shard.state_once(i, gen), Some(DONE));
        }
    }

    #[test]
    fn a_stale_repeat_handle_never_touches_the_newer_timer_in_its_slot() {
        let mut shard = Shard::new(7);
        let (a, gen_a, _) = shard.schedule_repeat(repeat(), 10);
        assert!(shard.cancel(a, gen_a).is_some());
        let (b, gen_b, _) = shard.schedule_repeat(repeat(), 10);
        assert_eq!(a, b, "LIFO reuse of the freed slot");
        assert_ne!(gen_a, gen_b);
        assert!(
            shard.cancel(a, gen_a).is_none(),
            "stale handle cancels nothing"
        );
        assert_eq!(shard.state(a, gen_a), None, "stale handle: unknown");
        assert_eq!(shard.state(b, gen_b), Some(WAITING));
        assert_eq!(shard.deadline(a, gen_a), None);
        assert!(shard.cancel(b, gen_b).is_some());
    }

    /// A burst: `N` one-shot callbacks due within one second (1 ms ticks) sit in four
    /// 256-tick slots of level 1 until their window starts. Taken out the way the driver
    /// does it (`take_due` with the driver's chunk, one lock hold per call), no call moves
    /// a whole slot: the cascades are split into holds of at most one budget, between which
    /// a producer schedules a timer (it fires in deadline order, once). Every timer fires
    /// exactly once, at its own tick, in deadline order. With `Wheel::poll` this test fails
    /// (no call would pause).
    #[test]
    fn a_burst_cascade_is_split_across_lock_holds() {
        const N: u64 = 100_000;
        const CHUNK: usize = 256;
        let mut shard = Shard::new(7);
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut want = vec![0u64; 2_000];
        for _ in 0..N {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let tick = 1_000 + x % 1_000;
            want[tick as usize] += 1;
            let fired = std::sync::Arc::clone(&fired);
            shard.schedule_once(
                once_payload(move || {
                    fired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }),
                tick,
            );
        }
        let (mut paused_holds, mut holds, mut last_tick) = (0u64, 0u64, 0u64);
        let mut got = vec![0u64; 2_000];
        let mut extra = None;
        for now in 0..2_000u64 {
            loop {
                let mut due = Due::default();
                let (more, once) = shard.take_due(0, now, &mut due, CHUNK);
                holds += 1;
                assert!(once <= CHUNK);
                assert_eq!(once, due.fires.len());
                for fire in due.fires.drain(..) {
                    assert!(fire.tick <= now, "early: tick {} at {now}", fire.tick);
                    assert!(fire.tick >= last_tick, "out of deadline order");
                    last_tick = fire.tick;
                    got[fire.tick as usize] += 1;
                    if let Work::Once(f) = fire.work {
                        f.run();
                    }
                }
                if !more {
                    break;
                }
                if once < CHUNK {
                    // Stopped early with room left: the wheel paused a cascade. The lock
                    // is released here; a producer schedules into the paused window.
                    paused_holds += 1;
                    if extra.is_none() {
                        let fired = std::sync::Arc::clone(&fired);
                        let tick = shard.wheel.now().max(now) + 1;
                        let f = once_payload(move || {
                            fired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        });
                        let (i, gen, _) = shard.schedule_once(f, tick);
                        want[tick as usize] += 1;
                        extra = Some((i, gen));
                    }
                }
            }
        }
        assert_eq!(got, want, "every timer once, at its tick");
        assert_eq!(fired.load(std::sync::atomic::Ordering::Relaxed), N + 1);
        assert_eq!(shard.pending, 0);
        let (i, gen) = extra.expect("a cascade paused");
        assert_eq!(shard.state_once(i, gen), Some(DONE));
        // Each of the ~N / 4 timers of a level-1 slot is moved by a hold of at most one
        // budget (rounded up to whole lines of 15): at least N / (budget + 15) - 4 of the
        // holds ended in a pause; with `Wheel::poll` none would.
        let min_paused = (N / (CASCADE_BUDGET as u64 + 15)).saturating_sub(4);
        eprintln!(
            "{N} timers: {holds} lock holds, {paused_holds} paused mid-cascade \
             (>= {min_paused} required; ~{} timers moved per paused hold)",
            N / paused_holds.max(1)
        );
        assert!(
            paused_holds >= min_paused,
            "{paused_holds} paused holds, want >= {min_paused}"
        );
    }
}
