//! A slot table with generations and a LIFO free list: where the heap peer keeps each timer's
//! id, and all the floor peer is. A handle is `(slot, generation)`; freeing a slot bumps its
//! generation, so a stale handle is inert, and the next insert reuses the slot freed last.

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    id: u64,
    gen: u32,
    /// Next free slot while vacant.
    next_free: u32,
}

pub(crate) struct SlotTable {
    slots: Vec<Slot>,
    free: u32,
    live: usize,
}

impl SlotTable {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        SlotTable {
            slots: Vec::with_capacity(capacity),
            free: NONE,
            live: 0,
        }
    }

    /// Stores `id` in a free slot (the one freed last) and returns `(slot, generation)`.
    #[inline]
    pub(crate) fn alloc(&mut self, id: u64) -> (u32, u32) {
        let slot = if self.free != NONE {
            let slot = self.free;
            let s = &mut self.slots[slot as usize];
            self.free = s.next_free;
            s.id = id;
            slot
        } else {
            let slot = u32::try_from(self.slots.len()).expect("fewer than 2^32 slots");
            self.slots.push(Slot {
                id,
                gen: 0,
                next_free: NONE,
            });
            slot
        };
        self.live += 1;
        (slot, self.slots[slot as usize].gen)
    }

    /// Whether `slot` still holds the timer of generation `gen`.
    #[inline]
    pub(crate) fn is_live(&self, slot: u32, gen: u32) -> bool {
        self.slots[slot as usize].gen == gen
    }

    /// Frees `slot` (which must be live) and returns its id.
    #[inline]
    pub(crate) fn free(&mut self, slot: u32) -> u64 {
        let s = &mut self.slots[slot as usize];
        s.gen = s.gen.wrapping_add(1);
        s.next_free = self.free;
        self.free = slot;
        self.live -= 1;
        s.id
    }

    /// Live slots.
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}
