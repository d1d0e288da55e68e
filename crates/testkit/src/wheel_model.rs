//! A reference model of [`tickwheel_core::Wheel`] and a runner that checks the wheel against
//! it step by step.
//!
//! The model is the obvious, slow implementation: a `BTreeMap` ordered by
//! `(effective deadline, insertion sequence)`. After every operation the runner compares
//! everything observable: what `poll` hands out (key and value), `now`, `len`,
//! `next_deadline`, `deadline`/`get`/`contains` of the keys involved, and, on
//! [`WheelOp::Check`], the whole set of pending timers. Any difference is returned as an
//! `Err` describing the step, so a proptest can shrink it and a fuzzer can report it.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use tickwheel_core::{Step, TimerKey, Wheel};

/// One step of a test run. Keys are named by `pick`, an index (modulo the number issued) into
/// the list of every key issued so far, fired and removed ones included, so stale keys are
/// exercised as much as live ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WheelOp {
    /// Insert a timer at an absolute deadline (may be in the past, or near `u64::MAX`).
    InsertAt(u64),
    /// Insert a timer `delta` ticks after the clock (saturating).
    InsertIn(u64),
    /// Remove the timer of a picked key.
    Remove(usize),
    /// Remove the timer of a picked key with `remove_lazy`: from then on `next_deadline` is
    /// checked as a lower bound, `next_deadline_mut` (on `NextExact` and `Check`) exactly.
    RemoveLazy(usize),
    /// Compare `next_deadline_mut` with the model.
    NextExact,
    /// Reset the timer of a picked key to `now() + delta` (saturating).
    Reset(usize, u64),
    /// Reset the timer of a picked key to an absolute deadline.
    ResetAt(usize, u64),
    /// Poll until `None` with `now() + delta` (saturating).
    Advance(u64),
    /// Poll until `None` at an absolute time (earlier than the clock is allowed).
    AdvanceTo(u64),
    /// One single `poll(now() + delta)` call, leaving the round unfinished, so inserts and
    /// removals land between two polls of one round.
    PollOnce(u64),
    /// One single `poll_budgeted(now() + delta, budget)` call: with a small budget a cascade
    /// pauses, and the operations after it land while it is paused.
    PollBudgeted(u64, usize),
    /// One `prepare(budget)` call: pre-cascades (part of) the next rotation's window, so the
    /// operations after it land while the window is moving or staged.
    Prepare(usize),
    /// A key the wheel never issued (a forged or foreign key) must be inert.
    Forged(u64),
    /// Compare the whole pending set through `iter()`.
    Check,
    /// `shrink_to_fit`, which must keep every key valid.
    Shrink,
    /// `clear`, after which every issued key is dead.
    Clear,
}

#[derive(Default)]
struct Model {
    now: u64,
    seq: u64,
    /// `(effective deadline, seq)` → value.
    queue: BTreeMap<(u64, u64), u64>,
    /// value → `(effective deadline, seq)` for live timers.
    live: HashMap<u64, (u64, u64)>,
}

impl Model {
    fn insert(&mut self, deadline: u64, value: u64) {
        let slot = (deadline.max(self.now), self.seq);
        self.seq += 1;
        self.queue.insert(slot, value);
        self.live.insert(value, slot);
    }

    fn remove(&mut self, value: u64) -> bool {
        match self.live.remove(&value) {
            Some(slot) => {
                self.queue.remove(&slot);
                true
            }
            None => false,
        }
    }

    fn poll(&mut self, now: u64) -> Option<u64> {
        let now = now.max(self.now);
        match self.queue.first_key_value() {
            Some((&(deadline, seq), &value)) if deadline <= now => {
                self.now = deadline;
                self.queue.remove(&(deadline, seq));
                self.live.remove(&value);
                Some(value)
            }
            _ => {
                self.now = now;
                None
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        self.queue
            .first_key_value()
            .map(|(&(deadline, _), _)| deadline)
    }
}

/// Runs `ops` against a fresh wheel (clock at `start`) and the model.
///
/// # Errors
///
/// A description of the first step at which the wheel and the model disagree.
pub fn run_wheel_ops(start: u64, ops: &[WheelOp]) -> Result<(), String> {
    let mut wheel: Wheel<u64> = Wheel::starting_at(start);
    let mut model = Model {
        now: start,
        ..Model::default()
    };
    // Every key issued, indexed by the value its timer carries.
    let mut keys: Vec<TimerKey> = Vec::new();
    // A `remove_lazy` happened: `next_deadline` may be a lower bound from then on.
    let mut lazy = false;
    for (step, op) in ops.iter().enumerate() {
        let fail = |what: String| format!("step {step} ({op:?}): {what}\n{}", recent(ops, step));
        let pick = |i: usize| (!keys.is_empty()).then(|| i % keys.len());
        match *op {
            WheelOp::InsertAt(_) | WheelOp::InsertIn(_) => {
                let deadline = match *op {
                    WheelOp::InsertAt(d) => d,
                    WheelOp::InsertIn(delta) => model.now.saturating_add(delta),
                    _ => unreachable!(),
                };
                let value = keys.len() as u64;
                let key = wheel.insert(deadline, value);
                model.insert(deadline, value);
                if keys.contains(&key) {
                    return Err(fail(format!("key {key:?} issued twice")));
                }
                keys.push(key);
                check_key(&wheel, &model, key, value).map_err(fail)?;
            }
            WheelOp::Remove(i) | WheelOp::RemoveLazy(i) => {
                let Some(value) = pick(i) else { continue };
                let got = if matches!(op, WheelOp::RemoveLazy(_)) {
                    lazy = true;
                    wheel.remove_lazy(keys[value])
                } else {
                    wheel.remove(keys[value])
                };
                let want = model.remove(value as u64).then_some(value as u64);
                if got != want {
                    return Err(fail(format!("remove gave {got:?}, model {want:?}")));
                }
                check_key(&wheel, &model, keys[value], value as u64).map_err(fail)?;
            }
            WheelOp::Reset(i, _) | WheelOp::ResetAt(i, _) => {
                let Some(value) = pick(i) else { continue };
                let deadline = match *op {
                    WheelOp::Reset(_, delta) => model.now.saturating_add(delta),
                    WheelOp::ResetAt(_, d) => d,
                    _ => unreachable!(),
                };
                let got = wheel.reset(keys[value], deadline);
                let want = model.remove(value as u64);
                if want {
                    model.insert(deadline, value as u64);
                }
                if got != want {
                    return Err(fail(format!("reset gave {got}, model {want}")));
                }
                check_key(&wheel, &model, keys[value], value as u64).map_err(fail)?;
            }
            WheelOp::Advance(_) | WheelOp::AdvanceTo(_) => {
                let now = match *op {
                    WheelOp::Advance(delta) => model.now.saturating_add(delta),
                    WheelOp::AdvanceTo(t) => t,
                    _ => unreachable!(),
                };
                loop {
                    let got = wheel.poll(now);
                    let want = model.poll(now);
                    compare_poll(got, want, &keys, now).map_err(fail)?;
                    if wheel.now() != model.now {
                        return Err(fail(format!("now {} vs model {}", wheel.now(), model.now)));
                    }
                    if want.is_none() {
                        break;
                    }
                }
            }
            WheelOp::PollOnce(delta) => {
                let now = model.now.saturating_add(delta);
                let got = wheel.poll(now);
                let want = model.poll(now);
                compare_poll(got, want, &keys, now).map_err(fail)?;
            }
            WheelOp::PollBudgeted(delta, budget) => {
                let now = model.now.saturating_add(delta);
                match wheel.poll_budgeted(now, budget) {
                    Step::Fired(key, value) => {
                        compare_poll(Some((key, value)), model.poll(now), &keys, now)
                            .map_err(fail)?;
                    }
                    Step::Idle => compare_poll(None, model.poll(now), &keys, now).map_err(fail)?,
                    Step::Paused => {
                        // The clock may move up to the start of the window being cascaded,
                        // never past `now`, and never past a pending deadline.
                        let clock = wheel.now();
                        if clock < model.now || clock > now {
                            return Err(fail(format!(
                                "paused with clock {clock}, model {}, now {now}",
                                model.now
                            )));
                        }
                        if let Some(due) = model.next_deadline().filter(|&d| d < clock) {
                            return Err(fail(format!(
                                "paused with clock {clock} past a timer due at {due}"
                            )));
                        }
                        model.now = clock;
                    }
                }
            }
            WheelOp::Prepare(budget) => {
                // Moves timers between tables only: nothing fires, the clock stays.
                let before = wheel.now();
                wheel.prepare(budget);
                if wheel.now() != before {
                    return Err(fail(format!(
                        "prepare moved the clock {before} -> {}",
                        wheel.now()
                    )));
                }
            }
            WheelOp::Forged(raw) => {
                let key = TimerKey::from_u64(raw);
                if keys.contains(&key) {
                    continue; // a real key after all: nothing to check
                }
                if wheel.contains(key) || wheel.get(key).is_some() || wheel.deadline(key).is_some()
                {
                    return Err(fail(format!("forged key {key:?} recognised")));
                }
                if wheel.remove(key).is_some() || wheel.reset(key, 0) {
                    return Err(fail(format!("forged key {key:?} acted on a timer")));
                }
            }
            WheelOp::NextExact | WheelOp::Check => {
                let next = wheel.next_deadline_mut();
                if next != model.next_deadline() {
                    return Err(fail(format!(
                        "next_deadline_mut {next:?} vs model {:?}",
                        model.next_deadline()
                    )));
                }
                if *op == WheelOp::NextExact {
                    continue;
                }
                let mut got: Vec<(u64, u64)> = Vec::new();
                for (key, deadline, &value) in wheel.iter() {
                    if keys.get(value as usize) != Some(&key) {
                        return Err(fail(format!("iter gave key {key:?} for value {value}")));
                    }
                    got.push((value, deadline));
                }
                got.sort_unstable();
                let mut want: Vec<(u64, u64)> =
                    model.live.iter().map(|(&v, &(d, _))| (v, d)).collect();
                want.sort_unstable();
                if got != want {
                    return Err(fail(format!("pending set {got:?} vs model {want:?}")));
                }
            }
            WheelOp::Shrink => wheel.shrink_to_fit(),
            WheelOp::Clear => {
                wheel.clear();
                model.queue.clear();
                model.live.clear();
                for (value, &key) in keys.iter().enumerate() {
                    check_key(&wheel, &model, key, value as u64).map_err(fail)?;
                }
            }
        }
        if wheel.len() != model.live.len() {
            return Err(fail(format!(
                "len {} vs model {}",
                wheel.len(),
                model.live.len()
            )));
        }
        // Exact; after a `remove_lazy` possibly a lower bound (never later, never `None`
        // while a timer is pending).
        let (got, want) = (wheel.next_deadline(), model.next_deadline());
        let lower_bound = lazy && matches!((got, want), (Some(g), Some(w)) if g <= w);
        if got != want && !lower_bound {
            return Err(fail(format!(
                "next_deadline {:?} vs model {:?}",
                wheel.next_deadline(),
                model.next_deadline()
            )));
        }
        if wheel.now() != model.now {
            return Err(fail(format!("now {} vs model {}", wheel.now(), model.now)));
        }
    }
    // Finally everything left must fire, in order, and nothing after that.
    loop {
        let got = wheel.poll(u64::MAX);
        let want = model.poll(u64::MAX);
        compare_poll(got, want, &keys, u64::MAX)
            .map_err(|e| format!("final drain: {e}\n{}", recent(ops, ops.len())))?;
        if want.is_none() {
            break;
        }
    }
    if !wheel.is_empty() {
        return Err("wheel not empty after the final drain".to_string());
    }
    Ok(())
}

/// The last operations up to `step`, one per line, for a failure message.
fn recent(ops: &[WheelOp], step: usize) -> String {
    let from = step.saturating_sub(60);
    let mut text = String::from("-- operations before the failure --\n");
    for (i, op) in ops.iter().enumerate().take(step + 1).skip(from) {
        let _ = writeln!(text, "{i}: {op:?}");
    }
    text
}

fn compare_poll(
    got: Option<(TimerKey, u64)>,
    want: Option<u64>,
    keys: &[TimerKey],
    now: u64,
) -> Result<(), String> {
    match (got, want) {
        (None, None) => Ok(()),
        (Some((key, value)), Some(w)) if value == w && keys.get(w as usize) == Some(&key) => Ok(()),
        _ => Err(format!("poll({now}) gave {got:?}, model {want:?}")),
    }
}

fn check_key(wheel: &Wheel<u64>, model: &Model, key: TimerKey, value: u64) -> Result<(), String> {
    let want = model.live.get(&value).map(|&(deadline, _)| deadline);
    let got = wheel.deadline(key);
    if got != want {
        return Err(format!("deadline({key:?}) {got:?} vs model {want:?}"));
    }
    let got_value = wheel.get(key).copied();
    if got_value != want.map(|_| value) || wheel.contains(key) != want.is_some() {
        return Err(format!(
            "get/contains({key:?}) gave {got_value:?}, model live={want:?}"
        ));
    }
    Ok(())
}

/// Decodes arbitrary bytes into a start tick and operations, for fuzzing: every input is
/// valid. Deadlines are drawn from a few regimes (near the clock, far, near `u64::MAX`) so
/// that short fuzz runs reach every level.
#[must_use]
pub fn decode_wheel_ops(bytes: &[u8]) -> (u64, Vec<WheelOp>) {
    let mut input = Bytes(bytes);
    let start = match input.byte() {
        0..=127 => 0,
        128..=191 => input.u64() >> 8,
        _ => input.u64(),
    };
    let mut ops = Vec::new();
    while !input.0.is_empty() && ops.len() < 4096 {
        let tag = input.byte();
        let pick = input.byte() as usize;
        let op = match tag % 16 {
            0..=3 => WheelOp::InsertIn(input.delta()),
            4 => WheelOp::InsertAt(input.absolute()),
            6 if pick.is_multiple_of(2) => WheelOp::RemoveLazy(pick),
            5 | 6 => WheelOp::Remove(pick),
            7 => WheelOp::Reset(pick, input.delta()),
            8 => WheelOp::ResetAt(pick, input.absolute()),
            9 | 10 => WheelOp::Advance(input.delta()),
            11 => WheelOp::AdvanceTo(input.absolute()),
            12 if pick.is_multiple_of(2) => WheelOp::PollOnce(input.delta()),
            12 => WheelOp::PollBudgeted(input.delta(), usize::from(input.byte() % 48)),
            13 => WheelOp::Forged(input.u64()),
            14 => WheelOp::Check,
            _ => match pick % 8 {
                0 => WheelOp::Clear,
                1 | 2 => WheelOp::Shrink,
                6 => WheelOp::NextExact,
                7 => WheelOp::Prepare(pick / 8 % 48),
                _ => WheelOp::Check,
            },
        };
        ops.push(op);
    }
    (start, ops)
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| (acc << 8) | u64::from(self.byte()))
    }

    /// A distance from the clock: mostly small, sometimes one level wide, sometimes huge.
    fn delta(&mut self) -> u64 {
        let kind = self.byte();
        let raw = u64::from(self.byte()) | (u64::from(self.byte()) << 8);
        match kind % 8 {
            0..=2 => raw % 70,
            3 | 4 => raw,
            5 => raw << (kind / 8 % 58),
            6 => u64::MAX - raw,
            _ => 0,
        }
    }

    /// An absolute tick: small, arbitrary, or near `u64::MAX`.
    fn absolute(&mut self) -> u64 {
        let kind = self.byte();
        match kind % 4 {
            0 => u64::from(self.byte()),
            1 => u64::MAX - u64::from(self.byte()),
            _ => self.u64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoder_accepts_anything() {
        for bytes in [
            &[][..],
            &[255; 3],
            &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13],
        ] {
            let (start, ops) = decode_wheel_ops(bytes);
            run_wheel_ops(start, &ops).expect("model agrees");
        }
    }

    #[test]
    fn runner_catches_a_wrong_model() {
        // Sanity check of the checker itself: a model that disagrees must be reported.
        let mut model = Model::default();
        model.insert(5, 0);
        let mut wheel: Wheel<u64> = Wheel::new();
        let key = wheel.insert(6, 0);
        assert!(check_key(&wheel, &model, key, 0).is_err());
    }
}
