//! Not a timer: the least any structure must do per churn op, as a yardstick.
//!
//! A churn op cancels a timer by its handle and inserts a new one. Any structure that hands
//! back a cancelled timer's id, and ignores a stale handle, must reach a per-timer record
//! from the handle (to check it is still pending, and to read the id), and must store the new
//! timer's id somewhere. This "structure" does exactly that and nothing else: a slot table
//! with generations and a LIFO free list (the heap peer's, [`SlotTable`]), and no ordering by deadline at
//! all — `poll_until` fires nothing. In churn (a) the harness only checks what fires, so it
//! runs there unchanged; the runner does not run it in any other workload. Its time per op is
//! a floor for every peer in the same harness: the harness's own work (its slot table, the
//! PRNG) plus one random per-timer record.

use super::slots::SlotTable;
use super::TimerImpl;

/// Handle: slot index and generation.
#[derive(Clone, Copy)]
pub(crate) struct FloorHandle {
    slot: u32,
    gen: u32,
}

pub(crate) struct SlabFloor {
    slots: SlotTable,
}

impl TimerImpl for SlabFloor {
    type Handle = FloorHandle;
    const NAME: &'static str = "floor (slot table only, not a timer)";
    const PEEK: &'static str = "none: fires nothing";

    fn create(capacity: usize) -> Self {
        SlabFloor {
            slots: SlotTable::with_capacity(capacity),
        }
    }

    #[inline(always)]
    fn insert(&mut self, _deadline: u64, id: u64) -> FloorHandle {
        let (slot, gen) = self.slots.alloc(id);
        FloorHandle { slot, gen }
    }

    #[inline(always)]
    fn cancel(&mut self, handle: FloorHandle) -> Option<u64> {
        if !self.slots.is_live(handle.slot, handle.gen) {
            return None;
        }
        Some(self.slots.free(handle.slot))
    }

    fn poll_until(&mut self, _now: u64, _out: &mut Vec<u64>) {}

    fn next_deadline(&mut self) -> Option<u64> {
        None
    }

    fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::churn::{run, ChurnParams};

    #[test]
    fn a_cancel_hands_back_the_id_once_and_a_stale_handle_is_inert() {
        let mut f = SlabFloor::create(4);
        let a = f.insert(10, 7);
        let b = f.insert(20, 8);
        assert_eq!(f.len(), 2);
        assert_eq!(f.cancel(a), Some(7));
        assert_eq!(f.cancel(a), None, "stale handle");
        // LIFO reuse of the freed slot, under a new generation.
        let c = f.insert(30, 9);
        assert_eq!(c.slot, a.slot);
        assert_eq!(f.cancel(a), None, "stale handle of a reused slot");
        assert_eq!(f.cancel(c), Some(9));
        assert_eq!(f.cancel(b), Some(8));
        assert_eq!(f.len(), 0);
    }

    /// The churn harness runs it unchanged: every cancel checked, totals adding up, nothing
    /// fired (it is not a timer).
    #[test]
    fn churn_runs_on_the_floor_and_fires_nothing() {
        let p = ChurnParams {
            n: 1_000,
            ops: 20_000,
            seed: 1,
            far_future: false,
        };
        let r = run::<SlabFloor>(&p).expect("churn on the floor");
        assert_eq!(r.ops, 20_000);
        assert!(r.note.contains(" 0 fired"), "{}", r.note);
    }
}
