//! A deterministic hierarchical timing wheel.
//!
//! [`Wheel<T>`] holds timers, each a deadline and a value of type `T`. It has no clock, no
//! threads and no I/O: time is a `u64` [`Tick`] that you pass in, and you decide what a tick
//! means (1 ms, 100 µs, 1 ns). That makes the wheel the same on every platform, trivially
//! testable, and usable from an event loop, a thread, an async runtime or a simulation.
//!
//! ```
//! use tickwheel_core::Wheel;
//!
//! let mut wheel = Wheel::new(); // clock at tick 0; here a tick is 1 ms
//! let session = wheel.insert(30 * 60_000, "expire session 17");
//! wheel.insert(2_000, "send chat message 4");
//! wheel.insert(86_400_000 * 7, "auto-complete contract 9");
//! wheel.remove(session); // the user logged out: most timers are cancelled, in O(1)
//!
//! assert_eq!(wheel.next_deadline(), Some(2_000));
//! assert_eq!(wheel.poll(2_000).map(|(_, v)| v), Some("send chat message 4"));
//! assert_eq!(wheel.poll(2_000), None);
//! ```
//!
//! # An event loop
//!
//! A loop sleeps until [`Wheel::next_deadline`] (or until new work arrives), then fires what
//! is due. `next_deadline` is exact, so the loop never wakes early for nothing, and
//! [`Wheel::poll`] costs nothing for the ticks it skips.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tickwheel_core::Wheel;
//!
//! let start = Instant::now();
//! let now = || start.elapsed().as_millis() as u64; // 1 tick = 1 ms
//!
//! let mut wheel = Wheel::new();
//! wheel.insert(now() + 3, "first");
//! wheel.insert(now() + 1, "second, sooner");
//!
//! let mut fired = Vec::new();
//! while let Some(deadline) = wheel.next_deadline() {
//!     // A real loop would pass the timeout to epoll_wait / a condvar and handle I/O here.
//!     let wait = deadline.saturating_sub(now());
//!     std::thread::sleep(Duration::from_millis(wait));
//!     while let Some((_key, what)) = wheel.poll(now()) {
//!         fired.push(what);
//!     }
//! }
//! assert_eq!(fired, ["second, sooner", "first"]);
//! ```
//!
//! # Bounded work per call
//!
//! When the clock reaches a slot above level 0, [`Wheel::poll`] moves all of that slot's timers
//! down a level before it hands out the first one: with 1 ms ticks a slot spans 256 ms, so a
//! million timers due within one second means a few calls each moving a quarter of a million.
//! [`Wheel::poll_budgeted`] does the same work in steps of at most about `budget` timers,
//! returning [`Step::Paused`] in between, so a caller that holds a lock can release it and an
//! event loop can serve I/O. Nothing else changes: the guarantees below hold for every mix of
//! `poll`, `poll_budgeted` and the other methods, and `next_deadline` stays exact while paused.
//!
//! Bounding each call does not make the window's *first* timer earlier: an unsorted slot's
//! earliest timer is known only once every timer of the slot has been read. So
//! [`Wheel::prepare`] moves the next rotation's window (the 256 ticks after the current
//! level-0 rotation) ahead of time, in steps of `budget` timers, into a staging table that
//! becomes level 0 when the clock gets there; call it whenever `poll_budgeted` has nothing
//! due. With a million timers due within one second and the clock
//! stepped 1 ms, the longest CPU time a tick's first timer waits inside the wheel drops from
//! ~9 ms to under 0.2 ms (`examples/burst_poll.rs`, ADR 0011).
//!
//! ```
//! use tickwheel_core::{Step, Wheel};
//!
//! let mut wheel = Wheel::new();
//! wheel.extend((0..10_000u64).map(|i| (300 + i % 100, i)));
//! let mut fired = 0;
//! loop {
//!     match wheel.poll_budgeted(1_000, 256) {
//!         Step::Fired(_key, _value) => fired += 1,
//!         Step::Paused => { /* release the lock, serve I/O, then call again */ }
//!         Step::Idle => break, // nothing due until wheel.next_deadline()
//!     }
//! }
//! assert_eq!(fired, 10_000);
//! ```
//!
//! # Guarantees
//!
//! 1. **Never early**: `poll(now)` hands out only timers whose deadline is `<= now`.
//! 2. **Never lost, never twice**: every timer inserted and not removed is handed out exactly
//!    once, by the round of polls at the first `now >= deadline`.
//! 3. **Order**: timers come out in non-decreasing order of *effective deadline*
//!    (`max(deadline, now() at insert or reset)`); equal deadlines come out in insertion order
//!    (a reset counts as an insertion).
//! 4. **Exact next deadline**: [`Wheel::next_deadline`] is always the minimum pending
//!    effective deadline ([`Wheel::next_deadline_mut`] too). The one opt-out:
//!    after [`Wheel::remove_lazy`] removed the earliest timer, `next_deadline` is a lower
//!    bound (never later than the minimum) until `next_deadline_mut` recomputes it.
//! 5. **Stale keys are inert**: a [`TimerKey`] whose timer fired or was removed names nothing,
//!    even after its slab entry is reused; a key from another wheel never panics.
//! 6. **No range limit**: any `u64` is a valid deadline (a deadline 500 years out in
//!    milliseconds, or `u64::MAX`), and it is never fired early to make it fit.
//!
//! A property test checks all of this against a `BTreeMap` model on random operation
//! sequences (deadlines near `u64::MAX`, in the past, equal, huge clock jumps), and a fuzz
//! target runs the same model.
//!
//! # The model
//!
//! Varghese and Lauck's hierarchical timing wheel
//! (<http://www.cs.columbia.edu/~nahum/w6998/papers/sosp87-timing-wheels.pdf>), with 256 slots
//! per level where Linux and tokio use 64:
//!
//! | level | slots | one slot spans | the level spans (1 tick = 1 ms) |
//! |------:|------:|---------------:|--------------------------------:|
//! | 0     | 256   | 1 tick         | 256 ms                          |
//! | 1     | 256   | 256 ticks      | 65.5 s                          |
//! | 2     | 256   | 256² ticks     | 4.7 h                           |
//! | 3     | 256   | 256³ ticks     | 49.7 days                       |
//! | 4–7   | 256   | 256⁴…256⁷ ticks | 34.9 years … the rest of `u64`  |
//!
//! - **Placement.** A timer is filed at the level of the highest 8-bit digit in which its
//!   deadline differs from the clock, in the slot given by that digit of the deadline. Eight
//!   levels cover all of `u64`, so nothing is out of range and nothing needs an overflow list.
//!   A timer's place is a function of its deadline and the clock, so it is not stored.
//! - **Bitmaps.** Each level keeps one bit per occupied slot, and the wheel one bit per
//!   occupied level: the earliest timers are in the first occupied slot of the lowest occupied
//!   level, found with a few `trailing_zeros`, never by walking empty slots.
//! - **Cascading.** When the clock reaches the start of a slot above level 0, its timers move
//!   down to the level their remaining time belongs to, in order. Each timer moves at most
//!   once per level; with 1 ms ticks a timer due within 65 s moves once before it fires.
//! - **Exact next deadline.** The wheel keeps the earliest pending deadline itself, lowered
//!   by every insert. Only removing (or firing, or resetting) a timer with exactly that
//!   deadline makes it look again: at the earliest slot, dropping garbage on the way (a
//!   level-0 slot is a single tick; a higher slot records a lower bound of its deadlines,
//!   exact while nothing was cancelled since it was last checked, else made exact by a
//!   scan or, a second time, a sort). See `level.rs` and ADR 0013.
//!
//! # Memory layout: what one operation touches
//!
//! A timer is a 24-byte slab entry (`Wheel<u64>`: deadline, value, generation, position) plus
//! a 4-byte *item* (its slab index) in its slot. A slot's items live in a chain of 64-byte
//! chunks (one link and 15 items per cache line), all chunks of all slots in one pool with a
//! free list. The entry records where its item is, and an item is live only while its entry
//! points back at it: that makes cancelling lazy.
//!
//! - **Insert**: the most recently freed slab entry (usually the one a cancel just touched,
//!   still in cache), and one `u32` appended to the wheel's *inbox*, a 512-item array that
//!   stays in L1; the entry's position names its inbox item. The inbox is filed into the
//!   slots in one pass when it is full, and before anything reads a slot (`poll`,
//!   `poll_budgeted`, `prepare`, the next deadline's lookup, a full compaction); a `poll`
//!   leaves it queued while none of its timers is due and it holds fewer than 64 (ADR 0043:
//!   filing later is inserting later, and a wheel polled every tick then files 64 at a time
//!   instead of one). The pass
//!   reads 16 entries before it files any, so their misses overlap, and drops the items
//!   whose timer was cancelled meanwhile without filing them. Filing one item is one `u32`
//!   appended to its slot's tail chunk (hot: recently filed), plus the slot's chain fields,
//!   minimum and last deadline (one line shared by several slots each); a slot's first timer
//!   and a new tail chunk (1 filing in 15) take a cold path (ADR 0015). `next` is lowered at
//!   the insert itself, so the next deadline stays exact, and ties keep their order (every
//!   inbox item is newer than every filed one). Why the filing left the insert: ADR 0042.
//!   An insert that grows the slab (no vacant entry: a wheel being filled) files its timer
//!   at once instead, after whatever is queued, since the entry a pass would re-read is the
//!   one it has just written (ADR 0043).
//! - **Cancel**: the timer's own entry, nothing else: not its slot, not even its slot's
//!   counters (the wheel counts garbage as a whole), in two stores (the vacant entry's
//!   generation and free-list link are one `u64`) and one counter (the number of timers and
//!   the garbage are derived from the counts of inserts and cancels, ADR 0039). The item
//!   left in the slot is garbage, dropped when the slot is reached; while the wheel's
//!   garbage exceeds 1.5 × its live timers (+64 items, or +4 per timer reserved with
//!   [`Wheel::with_capacity`] or [`Wheel::reserve`], at most +4096), each inbox pass
//!   compacts up to 16 slots and every reset one, round-robin (reads
//!   each item's entry, keeps the live ones in order, frees spare chunks). So garbage costs about 10.7 bytes per
//!   live timer and ~1.35 entry reads per cancel (the garbage item's, and 0.35 live ones
//!   re-read: churn at N = 1e6, ADR 0024), paid in a sequential pass whose reads do not
//!   depend on each other: a line's liveness tests are a mask computed without a branch
//!   (live or not is a coin toss there), and the next line's entries are read before this
//!   line's live items move (ADR 0027). Cancelling the earliest timer is the exception: it
//!   looks for the next one (see *Exact next deadline* above).
//! - **Cascade**: the slot's chunks front to back (15 items per line, each line freed at once
//!   and refilled by the levels below while hot); the 15 entries of a line are read before any
//!   item is moved, so their cache misses overlap instead of queueing (garbage is dropped here
//!   for free); then one append per live timer.
//! - **Fire**: the head item of the level-0 slot and its entry.
//! - **Pre-cascade** ([`Wheel::prepare`]): as a cascade, into the staging table; entering the
//!   window swaps the staging table with level 0's (two 11 KiB tables, once per 256 ticks).
//!
//! Where a churn op's time went at N = 1e6 before the inbox (cachegrind, per cancel + insert,
//! the bench's harness included): 2.51 misses of the 1 MiB L2, of which 1.1 are the harness's own table,
//! 0.98 the cancelled timer's entry and 0.24 the second line of an entry that straddles two
//! (24-byte entries: 2 of every 8 do); 0.56 L1-only write misses on slots' tail chunks; ~86
//! of ~211 instructions are the wheel's (the cancel 24: key check, vacant write, three
//! counters, the `next` compare; the insert's inline path ~56: placement, slot bookkeeping,
//! chunk append, entry write; a slot's new tail chunk, 1 filing in 15, ~5.5 per op; ADRs 0015
//! and 0023; since ADR 0039 the cancel updates one counter instead of three and an op makes
//! 39 data writes instead of 43, with as many instructions). Both random reads are paid by the bench's `floor` peer too (a slot table and
//! nothing else), yet it runs an op in ~0.6 × the wheel's time: with less work between
//! them, more ops' misses overlap. Probes that took parts out (ADR 0039; `floor` 110 ns,
//! the `BinaryHeap` ~200) put the cost in the filing's chain and chunk work (the wheel with
//! no filing at all ~125 ns, with its placement and slot minimum only ~128, whole ~180);
//! queueing inserts and filing them in batches of 512 was not faster, in two forms.
//! Once the bench's harness stopped putting a call of its own around every peer's insert
//! (ADR 0040), a lazy-cancel `BinaryHeap` ran churn at N = 1e6 level with the wheel (the call
//! had cost the heap ~15 % and the wheel ~3 %): in both, ~90 % of the op's samples wait on
//! the same two dependent reads, the harness's handle and then that timer's record.
//! Whether one op's reads overlap the next op's depends on the op's size, and the change is a
//! step, not a slope (ADR 0041). With work added to every peer's op, the `floor` peer went
//! from 111 ns to 118 ns with 24 register `add`s, and to 163 ns with 32. The wheel is already
//! past that step: 48 added `add`s cost it 5–7 %. Reaching 0.8 × the heap would take a
//! cancel + insert of ~47 instructions in all, about half of what they were.
//! The inbox does that (ADR 0042). The op's loop fell from ~184 instructions to ~148, under the
//! step, and the filing moved into a pass with no misses between its own reads. With the
//! same harness the wheel then ran churn at N = 1e6 in 0.77–0.78 × the heap's time. The
//! inbox had been measured and rejected in ADR 0039, when the harness still added its own
//! call to every insert and kept the op over the step either way.
//!
//! The first design threaded doubly linked lists through the entries: a cancel touched three
//! random cache lines and a cascade chased one dependent pointer per timer. ADR 0004 records
//! the measurements behind the change.
//!
//! Memory: about 24 + 4 × (1 + garbage) × 16/15 bytes per timer, measured at 32.6 B after one
//! cancel per timer and 34.5 B in the steady state of heavy churn at N = 1e6; plus 11 KiB of
//! slot tables per level, 11 KiB for the staging table and 2 KiB for the inbox. Once the slab and pool have grown to the live count (or after
//! [`Wheel::with_capacity`]), inserting, cancelling and firing allocate nothing: entries and
//! chunks are reused, most recent first.
//!
//! # Cost
//!
//! | operation | cost |
//! |-----------|------|
//! | [`insert`](Wheel::insert), [`remove`](Wheel::remove), [`reset`](Wheel::reset) | O(1) amortised |
//! | [`remove_lazy`](Wheel::remove_lazy) | O(1) (the minimum's lookup deferred to `next_deadline_mut`) |
//! | [`get`](Wheel::get), [`deadline`](Wheel::deadline), [`contains`](Wheel::contains) | O(1) |
//! | [`next_deadline`](Wheel::next_deadline) | O(1) |
//! | [`next_deadline_mut`](Wheel::next_deadline_mut) | O(1), or `remove`'s lookup once after a `remove_lazy` |
//! | [`poll`](Wheel::poll) | O(1) per timer fired plus O(1) per timer cascaded (≤ 7 per timer) |
//! | [`poll_budgeted`](Wheel::poll_budgeted) | as `poll`, at most `budget` + 15 timers cascaded per call |
//! | [`prepare`](Wheel::prepare) | at most `budget` + 15 timers moved per call |
//! | [`clear`](Wheel::clear), [`drain`](Wheel::drain), [`shrink_to_fit`](Wheel::shrink_to_fit) | O(capacity) |
//!
//! "Amortised" because an insert that fills the inbox files the 512 timers queued there, and,
//! while garbage is over its bound, that pass compacts up to 16 slots (O(k) for a slot's k items,
//! paid for by the cancels that made the garbage). The other exception:
//! removing, resetting or firing the earliest pending timer looks for the next one: it drops
//! the garbage in front of it (each item once), and if that timer is in a slot above level 0
//! whose timers were inserted out of deadline order, and timers were cancelled since that
//! slot was last checked, scans that slot, and a second time sorts it (O(k) for a level-1
//! slot, whose 256 ticks a counting sort orders; O(k log k) above); the slot then stays
//! sorted until a timer is filed out of order.
//!
//! # `no_std`
//!
//! The crate is `no_std` and needs only `alloc`. It has no `unsafe` code.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

extern crate alloc;
#[cfg(test)]
extern crate std;

mod entry;
mod level;
mod pool;
mod tick;
mod wheel;

use core::fmt;

pub use entry::TimerKey;
pub use tick::Tick;
pub use wheel::{Drain, Iter, IterMut, Step, Wheel};

/// A wheel refused a timer because it already holds 2³⁰ (about a billion) timers. Holds the
/// value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct InsertError<T>(pub T);

impl<T> InsertError<T> {
    /// The value that was not inserted.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for InsertError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InsertError(..)")
    }
}

impl<T> fmt::Display for InsertError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the timing wheel is full: it holds at most {} timers",
            crate::wheel::MAX_TIMERS
        )
    }
}

impl<T> core::error::Error for InsertError<T> {}
