//! A `BinaryHeap` timer with lazy cancellation, the classic baseline.
//!
//! The heap holds 16-byte `(deadline, slot, gen)` entries (equal deadlines fire in slot
//! order); a slot table holds each timer's id and a generation. Cancelling bumps the slot's generation and frees it, leaving a tombstone in
//! the heap that is skipped when it reaches the top. When tombstones outnumber live timers
//! (plus slack) the heap is rebuilt without them, so memory stays O(live).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::slots::SlotTable;
use super::TimerImpl;

/// Handle: slot index and generation.
#[derive(Clone, Copy)]
pub(crate) struct HeapHandle {
    slot: u32,
    gen: u32,
}

pub(crate) struct HeapTimer {
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    slots: SlotTable,
}

impl HeapTimer {
    fn maybe_compact(&mut self) {
        if self.heap.len() > 2 * self.slots.len() + 1024 {
            let slots = &self.slots;
            self.heap
                .retain(|Reverse((_, slot, gen))| slots.is_live(*slot, *gen));
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
            slots: SlotTable::with_capacity(capacity),
        }
    }

    #[inline(always)]
    fn insert(&mut self, deadline: u64, id: u64) -> HeapHandle {
        let (slot, gen) = self.slots.alloc(id);
        self.heap.push(Reverse((deadline, slot, gen)));
        HeapHandle { slot, gen }
    }

    #[inline(always)]
    fn cancel(&mut self, handle: HeapHandle) -> Option<u64> {
        if !self.slots.is_live(handle.slot, handle.gen) {
            return None;
        }
        let id = self.slots.free(handle.slot);
        self.maybe_compact();
        Some(id)
    }

    #[inline]
    fn poll_until(&mut self, now: u64, out: &mut Vec<u64>) {
        while let Some(&Reverse((deadline, slot, gen))) = self.heap.peek() {
            if !self.slots.is_live(slot, gen) {
                self.heap.pop();
                continue;
            }
            if deadline > now {
                break;
            }
            self.heap.pop();
            out.push(self.slots.free(slot));
        }
    }

    fn next_deadline(&mut self) -> Option<u64> {
        while let Some(&Reverse((deadline, slot, gen))) = self.heap.peek() {
            if self.slots.is_live(slot, gen) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    fn len(&self) -> usize {
        self.slots.len()
    }
}
