//! The harness shared by every workload: a table of live timers (one per slot) that checks
//! every fire and every cancel against what it inserted.
//!
//! A timer's id is `gen << 32 | slot`. When an id fires, its slot must hold a pending timer
//! of that generation (else it fired twice, or after being cancelled), and its deadline must
//! be at or before the clock (else it fired early). A cancel must hand back the id inserted.
//! Any failed check aborts the run with a message naming the implementation.

use std::fmt;
use std::mem;

use crate::peers::TimerImpl;

/// A failed correctness check.
#[derive(Debug)]
pub(crate) struct CheckError(pub(crate) String);

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) type Checked<T> = Result<T, CheckError>;

macro_rules! check_failed {
    ($($arg:tt)*) => {
        return Err($crate::harness::CheckError(format!($($arg)*)))
    };
}
pub(crate) use check_failed;

struct Slot<H> {
    handle: Option<H>,
    deadline: u64,
    gen: u32,
}

/// What to do with a slot whose timer fired.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnFire {
    /// Leave it empty (fire-all).
    Leave,
    /// Remember it for refilling (churn keeps N live timers).
    Refill,
}

pub(crate) struct Harness<I: TimerImpl> {
    pub(crate) imp: I,
    slots: Vec<Slot<I::Handle>>,
    buf: Vec<u64>,
    /// Slots whose timers fired since the last refill, in fire order.
    pub(crate) fired_slots: Vec<u32>,
    pub(crate) inserted: u64,
    pub(crate) cancelled: u64,
    pub(crate) fired: u64,
    /// Largest `clock - deadline` seen at a fire (0 = every timer fired on its tick).
    pub(crate) max_late: u64,
    /// Polls (clock moves) that fired nothing.
    pub(crate) empty_polls: u64,
    pub(crate) polls: u64,
}

impl<I: TimerImpl> Harness<I> {
    /// The slot table is allocated and touched here, before the structure is created, so a
    /// memory measurement taken after `new` does not count it.
    pub(crate) fn new(n: usize) -> Self {
        match Self::new_measured(n, || Ok(0)) {
            Ok((h, _)) => h,
            Err(e) => unreachable!("no measurement to fail: {e}"),
        }
    }

    /// Like [`Harness::new`], calling `measure` after the harness's own buffers exist and
    /// before the structure is created (the memory workload's baseline).
    pub(crate) fn new_measured(
        n: usize,
        measure: impl FnOnce() -> Checked<u64>,
    ) -> Checked<(Self, u64)> {
        let mut slots = Vec::with_capacity(n);
        slots.resize_with(n, || Slot {
            handle: None,
            deadline: 0,
            gen: 0,
        });
        let buf = Vec::with_capacity(4096);
        let fired_slots = Vec::with_capacity(4096);
        let baseline = measure()?;
        let h = Harness {
            imp: I::create(n),
            slots,
            buf,
            fired_slots,
            inserted: 0,
            cancelled: 0,
            fired: 0,
            max_late: 0,
            empty_polls: 0,
            polls: 0,
        };
        Ok((h, baseline))
    }

    /// Inserts a timer into the empty `slot`.
    ///
    /// Always inlined, as `cancel` and every adapter's `insert`/`cancel` are: with two call
    /// sites LLVM kept this out of line, and the call it put around every peer's insert cost
    /// the lazy-cancel heap ~15 % at churn N = 1e6 and the wheel ~3 % (ADR 0040).
    #[inline(always)]
    pub(crate) fn insert(&mut self, slot: u32, deadline: u64) {
        let s = &mut self.slots[slot as usize];
        debug_assert!(s.handle.is_none());
        let id = (u64::from(s.gen) << 32) | u64::from(slot);
        s.deadline = deadline;
        s.handle = Some(self.imp.insert(deadline, id));
        self.inserted += 1;
    }

    /// Cancels the timer in `slot` (which must hold one) and checks the id handed back.
    #[inline(always)]
    pub(crate) fn cancel(&mut self, slot: u32) -> Checked<()> {
        let s = &mut self.slots[slot as usize];
        let Some(handle) = s.handle.take() else {
            check_failed!("{}: harness bug: cancel of empty slot {slot}", I::NAME);
        };
        let expected = (u64::from(s.gen) << 32) | u64::from(slot);
        s.gen = s.gen.wrapping_add(1);
        match self.imp.cancel(handle) {
            Some(id) if id == expected => {
                self.cancelled += 1;
                Ok(())
            }
            got => check_failed!(
                "{}: cancel of pending timer {expected:#x} (deadline {}) returned {got:?}",
                I::NAME,
                s.deadline
            ),
        }
    }

    /// Polls the structure at `now` and checks every timer it hands out.
    #[inline]
    pub(crate) fn poll(&mut self, now: u64, on_fire: OnFire) -> Checked<()> {
        let mut buf = mem::take(&mut self.buf);
        self.imp.poll_until(now, &mut buf);
        let result = self.check_fired(now, &buf, on_fire);
        buf.clear();
        self.buf = buf;
        result
    }

    /// One jump (see [`TimerImpl::jump`]); `false` when the structure is empty.
    pub(crate) fn jump(&mut self) -> Checked<bool> {
        let mut buf = mem::take(&mut self.buf);
        let now = self.imp.jump(&mut buf);
        let result = match now {
            Some(now) => self.check_fired(now, &buf, OnFire::Leave).map(|()| true),
            None => Ok(false),
        };
        buf.clear();
        self.buf = buf;
        result
    }

    #[inline]
    fn check_fired(&mut self, now: u64, ids: &[u64], on_fire: OnFire) -> Checked<()> {
        self.polls += 1;
        if ids.is_empty() {
            self.empty_polls += 1;
        }
        for &id in ids {
            let slot = id as u32;
            let gen = (id >> 32) as u32;
            let Some(s) = self.slots.get_mut(slot as usize) else {
                check_failed!("{}: fired unknown id {id:#x}", I::NAME);
            };
            if s.gen != gen || s.handle.is_none() {
                check_failed!(
                    "{}: id {id:#x} fired at {now} but is not pending (fired twice, or after cancel)",
                    I::NAME
                );
            }
            if s.deadline > now {
                check_failed!(
                    "{}: id {id:#x} fired EARLY: deadline {} > clock {now}",
                    I::NAME,
                    s.deadline
                );
            }
            self.max_late = self.max_late.max(now - s.deadline);
            s.gen = s.gen.wrapping_add(1);
            let handle = s.handle.take().expect("checked pending above");
            self.imp.release_fired(handle);
            self.fired += 1;
            if on_fire == OnFire::Refill {
                self.fired_slots.push(slot);
            }
        }
        Ok(())
    }

    /// Takes the slots that fired since the last call, sorted, so that refilling them consumes
    /// the PRNG in the same order for every implementation (fire order within a tick differs).
    pub(crate) fn take_fired_sorted(&mut self, into: &mut Vec<u32>) {
        into.clear();
        into.append(&mut self.fired_slots);
        into.sort_unstable();
    }

    /// End-of-run bookkeeping: counts must add up and the structure must agree on its size.
    pub(crate) fn verify_totals(&self) -> Checked<()> {
        let pending = self.slots.iter().filter(|s| s.handle.is_some()).count() as u64;
        if self.inserted != self.cancelled + self.fired + pending {
            check_failed!(
                "{}: inserted {} != cancelled {} + fired {} + pending {}",
                I::NAME,
                self.inserted,
                self.cancelled,
                self.fired,
                pending
            );
        }
        if self.imp.len() as u64 != pending {
            check_failed!(
                "{}: structure reports {} pending, harness expects {pending}",
                I::NAME,
                self.imp.len()
            );
        }
        Ok(())
    }

    /// Cancels everything still pending (nexus-timer handles must be given back).
    pub(crate) fn cancel_all(&mut self) -> Checked<()> {
        for slot in 0..self.slots.len() {
            if self.slots[slot].handle.is_some() {
                self.cancel(slot as u32)?;
            }
        }
        Ok(())
    }
}
