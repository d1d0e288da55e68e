//! The item pool: every slot's timers, as chains of 64-byte chunks of slab indices.
//!
//! # Layout
//!
//! A slot does not link its timers through their slab entries (the first design did, and a
//! cancel then touched three random cache lines, a cascade chased one pointer per timer).
//! Instead a slot owns a *chain* of [`Chunk`]s: one cache line each, word 0 the index of the
//! next chunk, words 1..=15 slab indices of timers ("items"), in filing order. All chunks of
//! all slots live in one `Vec<Chunk>` with a free list, so:
//!
//! - filing a timer writes one `u32` into its slot's tail chunk (hot: the slot was filed into
//!   recently) and, one time in fifteen, takes a chunk from the free list (the most recently
//!   freed one, usually still in cache);
//! - a cascade reads its slot's chunks front to back (15 items per line) and frees each one
//!   as soon as it has been read, so the slots below are filled from the same hot lines;
//! - a whole chain is freed in O(1) by splicing it onto the free list.
//!
//! An item's *address* is `chunk * 16 + word`, unique across the pool and never 0 (word 0
//! is the link). A timer's slab entry records the address of its one live item
//! (`Timer::pos`), and an item is live exactly when its entry is occupied and points back at
//! it. That is what makes cancelling lazy: removing a timer only vacates its entry; the item
//! left behind in the chain is garbage, recognised as such by whoever reads it next (a
//! cascade, a firing, a compaction), and dropped then.

use alloc::vec::Vec;
use core::num::NonZeroU32;

use crate::entry::NIL;

/// Words per chunk: one link and [`ITEMS`] items, 64 bytes.
pub(crate) const WORDS: u32 = 16;

/// Items per chunk.
pub(crate) const ITEMS: u32 = WORDS - 1;

/// Chunks the pool may hold: item addresses `chunk * 16 + word` must fit a `u32` below the
/// wheel's inbox addresses (its top 512; room for 2³⁰ live timers after `compact_all`
/// either way: they need at most 2³⁰ / 15 chunks).
pub(crate) const MAX_CHUNKS: usize = (1 << 28) - 32;

/// One cache line: a link to the next chunk of the chain and 15 slab indices.
#[derive(Clone, Copy)]
#[repr(align(64))]
pub(crate) struct Chunk(pub(crate) [u32; WORDS as usize]);

/// One slot's chain: where its items start and end, and how many there are.
///
/// Items before `(head, start)` were consumed (fired, or skipped as garbage); the `items`
/// from `(head, start)` to `(tail, end)` are pending, live or garbage: a cancel does not
/// touch its slot, so how many of them are live is known only when the slot is read (a
/// cascade, a firing, a compaction). An empty chain (no item) owns no chunk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chain {
    pub(crate) head: u32,
    pub(crate) tail: u32,
    /// Word of `head` holding the first pending item (1..=15).
    pub(crate) start: u32,
    /// Word of `tail` after the last item (2..=16).
    pub(crate) end: u32,
    pub(crate) items: u32,
}

impl Chain {
    pub(crate) const EMPTY: Chain = Chain {
        head: NIL,
        tail: NIL,
        start: 1,
        end: WORDS,
        items: 0,
    };
}

/// The address of word `word` of chunk `chunk`.
#[inline]
pub(crate) fn addr(chunk: u32, word: u32) -> u32 {
    chunk * WORDS + word
}

/// Every chunk of every slot, and the free list threaded through word 0 of free chunks.
#[derive(Clone)]
pub(crate) struct Pool {
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) free: u32,
}

impl Pool {
    pub(crate) const fn new() -> Self {
        Pool {
            chunks: Vec::new(),
            free: NIL,
        }
    }

    /// No chunk is free and the pool may not grow: the caller must compact first.
    #[inline]
    pub(crate) fn exhausted(&self) -> bool {
        self.free == NIL && self.chunks.len() >= MAX_CHUNKS
    }

    /// Room for `chunks` chunks in all without reallocating.
    pub(crate) fn reserve_total(&mut self, chunks: usize) {
        let chunks = chunks.min(MAX_CHUNKS);
        if chunks > self.chunks.len() {
            self.chunks.reserve(chunks - self.chunks.len());
        }
    }

    /// Forgets every chain (the chunks' memory is kept).
    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
        self.free = NIL;
    }

    /// A chunk for the caller's exclusive use: the most recently freed one, or a new one.
    ///
    /// # Panics
    ///
    /// If the pool is [`exhausted`](Self::exhausted) (callers check first).
    #[inline]
    fn alloc(&mut self) -> u32 {
        if self.free != NIL {
            let chunk = self.free;
            self.free = self.chunks[chunk as usize].0[0];
            return chunk;
        }
        assert!(
            self.chunks.len() < MAX_CHUNKS,
            "tickwheel: item pool exhausted ({} chunks)",
            self.chunks.len()
        );
        self.chunks.push(Chunk([NIL; WORDS as usize]));
        (self.chunks.len() - 1) as u32
    }

    /// Gives one chunk back.
    #[inline]
    pub(crate) fn free_one(&mut self, chunk: u32) {
        self.chunks[chunk as usize].0[0] = self.free;
        self.free = chunk;
    }

    /// Gives back the chunks from `first` to `last` (linked through word 0), in O(1).
    #[inline]
    pub(crate) fn free_run(&mut self, first: u32, last: u32) {
        self.chunks[last as usize].0[0] = self.free;
        self.free = first;
    }

    /// Gives back every chunk of `chain` and leaves it empty.
    #[inline]
    pub(crate) fn free_chain(&mut self, chain: &mut Chain) {
        if chain.head != NIL {
            self.free_run(chain.head, chain.tail);
        }
        *chain = Chain::EMPTY;
    }

    /// The chunk after `chunk` in its chain.
    #[inline]
    pub(crate) fn next(&self, chunk: u32) -> u32 {
        self.chunks[chunk as usize].0[0]
    }

    /// The item at `word` of `chunk`.
    #[inline]
    pub(crate) fn item(&self, chunk: u32, word: u32) -> u32 {
        debug_assert!(word < WORDS);
        self.chunks[chunk as usize].0[(word & (WORDS - 1)) as usize]
    }

    /// Overwrites the item at `word` of `chunk`.
    #[inline]
    pub(crate) fn set_item(&mut self, chunk: u32, word: u32, index: u32) {
        self.chunks[chunk as usize].0[word as usize] = index;
    }

    /// [`push`](Self::push) when the chain's tail chunk has room (`chain.end < WORDS`).
    #[inline]
    pub(crate) fn append(&mut self, chain: &mut Chain, index: u32) -> NonZeroU32 {
        debug_assert!(chain.head != NIL && chain.end < WORDS);
        let word = chain.end;
        // `& (WORDS - 1)`: the word is below WORDS here; the mask drops a bounds check.
        self.chunks[chain.tail as usize].0[(word & (WORDS - 1)) as usize] = index;
        chain.end = word + 1;
        match NonZeroU32::new(addr(chain.tail, word)) {
            Some(pos) => pos,
            None => unreachable!("word 0 holds the link, never an item"),
        }
    }

    /// Appends `index` to `chain` and returns the new item's address. Does not touch the
    /// chain's counters.
    ///
    /// # Panics
    ///
    /// If a new chunk is needed and the pool is [`exhausted`](Self::exhausted).
    #[inline]
    pub(crate) fn push(&mut self, chain: &mut Chain, index: u32) -> NonZeroU32 {
        if chain.end == WORDS {
            let chunk = self.alloc();
            if chain.head == NIL {
                chain.head = chunk;
                chain.start = 1;
            } else {
                self.chunks[chain.tail as usize].0[0] = chunk;
            }
            chain.tail = chunk;
            chain.end = 1;
        }
        let word = chain.end;
        // `& (WORDS - 1)`: the word is below WORDS here; the mask drops a bounds check.
        self.chunks[chain.tail as usize].0[(word & (WORDS - 1)) as usize] = index;
        chain.end += 1;
        match NonZeroU32::new(addr(chain.tail, word)) {
            Some(pos) => pos,
            None => unreachable!("word 0 holds the link, never an item"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_one_cache_line() {
        assert_eq!(core::mem::size_of::<Chunk>(), 64);
        assert_eq!(core::mem::align_of::<Chunk>(), 64);
    }

    #[test]
    fn addresses_fit_u32_below_the_inbox() {
        let last = (MAX_CHUNKS - 1) as u64 * u64::from(WORDS) + u64::from(ITEMS);
        assert!(last < u64::from(u32::MAX - 511));
    }

    #[test]
    fn push_and_free_reuse_chunks_lifo() {
        let mut pool = Pool::new();
        let mut chain = Chain::EMPTY;
        let mut addrs = alloc::vec::Vec::new();
        for i in 0..40 {
            addrs.push(pool.push(&mut chain, i).get());
        }
        assert_eq!(pool.chunks.len(), 3);
        assert_eq!(addrs[0], 1);
        assert_eq!(addrs[15], 17);
        assert_eq!(pool.item(chain.tail, chain.end - 1), 39);
        let tail = chain.tail;
        pool.free_chain(&mut chain);
        let mut other = Chain::EMPTY;
        pool.push(&mut other, 7);
        assert_eq!(other.head, 0, "the chain's head is the first chunk reused");
        pool.push(&mut other, 8);
        assert_ne!(other.head, tail);
        assert_eq!(pool.chunks.len(), 3, "no growth while chunks are free");
    }
}
