//! A `BinaryHeap` timer with lazy cancellation, the classic baseline.
//!
//! The heap holds 16-byte `(deadline, slot, gen)` entries (equal deadlines fire in slot
//! order); a slot table holds each timer's id and a generation. Cancelling bumps the slot's generation and frees it, leaving a tombstone in
//! the heap that is skipped when it reaches the top. When tombstones outnumber live timers
//! (plus slack) the heap is rebuilt without them, so memory stays O(live).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::TimerImpl;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    id: u64,
    gen: u32,
    /// Next free slot while vacant.
    next_free: u32,
}

/// Handle: slot index and generation.
#[derive(Clone, Copy)]
pub(crate) struct HeapHandle {
    slot: u32,
    gen: u32,
}

pub(crate) struct HeapTimer {
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    slots: Vec<Slot>,
    free: u32,
    live: usize,
}

impl HeapTimer {
    fn is_live(&self, slot: u32, gen: u32) -> bool {
        self.slots[slot as usize].gen == gen
    }

    fn free_slot(&mut self, slot: u32) -> u64 {
        let s = &mut self.slots[slot as usize];
        s.gen = s.gen.wrapping_add(1);
        s.next_free = self.free;
        self.free = slot;
        self.live -= 1;
        s.id
    }

    fn maybe_compact(&mut self) {
        if self.heap.len() > 2 * self.live + 1024 {
            let slots = &self.slots;
            self.heap
                .retain(|Reverse((_, slot, gen))| slots[*slot as usize].gen == *gen);
        }
    }
}

impl TimerImpl for HeapTimer {
    type Handle = HeapHandle;
    const NAME: &'static str = "BinaryHeap";
    const PEEK: &'static str = "peek(): exact after skipping tombstones";

    fn create(capacity: usize) -> Self {
        HeapTimer {
            heap: BinaryHeap::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            free: NONE,
            live: 0,
        }
    }

    #[inline]
    fn insert(&mut self, deadline: u64, id: u64) -> HeapHandle {
        let slot = if self.free != NONE {
            let slot = self.free;
            let s = &mut self.slots[slot as usize];
            self.free = s.next_free;
            s.id = id;
            slot
        } else {
            let slot = u32::try_from(self.slots.len()).expect("fewer than 2^32 heap slots");
            self.slots.push(Slot {
                id,
                gen: 0,
                next_free: NONE,
            });
            slot
        };
        let gen = self.slots[slot as usize].gen;
        self.heap.push(Reverse((deadline, slot, gen)));
        self.live += 1;
        HeapHandle { slot, gen }
    }

    #[inline]
    fn cancel(&mut self, handle: HeapHandle) -> Option<u64> {
        if !self.is_live(handle.slot, handle.gen) {
            return None;
        }
        let id = self.free_slot(handle.slot);
        self.maybe_compact();
        Some(id)
    }

    #[inline]
    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>) {
        while let Some(&Reverse((deadline, slot, gen))) = self.heap.peek() {
            if !self.is_live(slot, gen) {
                self.heap.pop();
                continue;
            }
            if deadline > now {
                break;
            }
            self.heap.pop();
            out.push(self.free_slot(slot));
        }
    }

    fn next_deadline(&mut self) -> Option<u64> {
        while let Some(&Reverse((deadline, slot, gen))) = self.heap.peek() {
            if self.is_live(slot, gen) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    fn len(&self) -> usize {
        self.live
    }
}
