//! A single hashed timing wheel in the shape of Netty's `HashedWheelTimer` (written here):
//! 512 slots of one tick each; a timer goes to slot `deadline % 512` with a rounds counter
//! (how many more times the clock passes that slot before it is due). Every tick the clock's
//! slot is walked: timers with 0 rounds fire, the others lose a round.
//!
//! Netty threads each slot as a doubly linked list; here a slot is a `Vec` of
//! `(rounds, timer)` pairs, so the walk every tick is a sequential scan (the fastest form of
//! this design): the peer the far-future mix is measured against. A timer knows its position
//! in its slot, so cancel is a swap-remove (O(1)); fire order within a tick is therefore not
//! insertion order (Netty's is not either once cancels happen). There is no exact peek:
//! `next_deadline` is the next tick, so "jumping" steps tick by tick.

use super::TimerImpl;

const SLOTS: usize = 512;
const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Timer {
    id: u64,
    gen: u32,
    /// Position in its slot while pending; next free timer while vacant.
    pos: u32,
    slot: u16,
}

/// Handle: timer index and generation.
#[derive(Clone, Copy)]
pub(crate) struct HashedHandle {
    index: u32,
    gen: u32,
}

pub(crate) struct HashedWheelTimer {
    /// Per slot: `(rounds left, timer index)`.
    slots: Vec<Vec<(u32, u32)>>,
    timers: Vec<Timer>,
    free: u32,
    now: u64,
    live: usize,
}

impl HashedWheelTimer {
    fn free_timer(&mut self, index: u32) -> u64 {
        let t = &mut self.timers[index as usize];
        t.gen = t.gen.wrapping_add(1);
        t.pos = self.free;
        self.free = index;
        self.live -= 1;
        t.id
    }

    /// Removes the item at `pos` of `slot` and fixes the position of the item moved into it.
    fn swap_remove(&mut self, slot: usize, pos: usize) {
        let bucket = &mut self.slots[slot];
        bucket.swap_remove(pos);
        if let Some(&(_, moved)) = bucket.get(pos) {
            self.timers[moved as usize].pos = pos as u32;
        }
    }

    /// Walks the slot of tick `tick` (the clock has just reached it).
    fn tick(&mut self, tick: u64, out: &mut Vec<u64>) {
        let slot = (tick % SLOTS as u64) as usize;
        let mut i = 0;
        while i < self.slots[slot].len() {
            let (rounds, index) = self.slots[slot][i];
            if rounds == 0 {
                self.swap_remove(slot, i);
                out.push(self.free_timer(index));
            } else {
                self.slots[slot][i].0 = rounds - 1;
                i += 1;
            }
        }
    }
}

impl TimerImpl for HashedWheelTimer {
    type Handle = HashedHandle;
    const NAME: &'static str = "hashed-512";
    const PEEK: &'static str = "none: steps one tick at a time";

    fn create(capacity: usize) -> Self {
        HashedWheelTimer {
            slots: vec![Vec::new(); SLOTS],
            timers: Vec::with_capacity(capacity),
            free: NONE,
            now: 0,
            live: 0,
        }
    }

    #[inline(always)]
    fn insert(&mut self, deadline: u64, id: u64) -> HashedHandle {
        // Due no earlier than the next tick the clock will reach.
        let deadline = deadline.max(self.now + 1);
        let slot = (deadline % SLOTS as u64) as usize;
        let rounds = u32::try_from((deadline - self.now - 1) / SLOTS as u64)
            .expect("deadline within 2^32 rounds");
        let index = if self.free != NONE {
            let index = self.free;
            self.free = self.timers[index as usize].pos;
            index
        } else {
            let index = u32::try_from(self.timers.len()).expect("fewer than 2^32 timers");
            self.timers.push(Timer {
                id: 0,
                gen: 0,
                pos: 0,
                slot: 0,
            });
            index
        };
        let bucket = &mut self.slots[slot];
        let t = &mut self.timers[index as usize];
        t.id = id;
        t.pos = bucket.len() as u32;
        t.slot = slot as u16;
        bucket.push((rounds, index));
        self.live += 1;
        HashedHandle { index, gen: t.gen }
    }

    #[inline(always)]
    fn cancel(&mut self, handle: HashedHandle) -> Option<u64> {
        let t = self.timers.get(handle.index as usize)?;
        if t.gen != handle.gen {
            return None;
        }
        let (slot, pos) = (t.slot, t.pos);
        self.swap_remove(slot as usize, pos as usize);
        Some(self.free_timer(handle.index))
    }

    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>) {
        while self.now < now {
            self.now += 1;
            self.tick(self.now, out);
        }
    }

    fn next_deadline(&mut self) -> Option<u64> {
        (self.live > 0).then_some(self.now + 1)
    }

    fn len(&self) -> usize {
        self.live
    }
}
