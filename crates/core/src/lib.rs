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
//! # Guarantees
//!
//! 1. **Never early**: `poll(now)` hands out only timers whose deadline is `<= now`.
//! 2. **Never lost, never twice**: every timer inserted and not removed is handed out exactly
//!    once, by the round of polls at the first `now >= deadline`.
//! 3. **Order**: timers come out in non-decreasing order of *effective deadline*
//!    (`max(deadline, now() at insert or reset)`); equal deadlines come out in insertion order
//!    (a reset counts as an insertion).
//! 4. **Exact next deadline**: [`Wheel::next_deadline`] is always the minimum pending
//!    effective deadline.
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
//! (<http://www.cs.columbia.edu/~nahum/w6998/papers/sosp87-timing-wheels.pdf>), in the
//! shape of the Linux and tokio wheels:
//!
//! | level | slots | one slot spans | the level spans (1 tick = 1 ms) |
//! |------:|------:|---------------:|--------------------------------:|
//! | 0     | 64    | 1 tick         | 64 ms                           |
//! | 1     | 64    | 64 ticks       | 4.1 s                           |
//! | 2     | 64    | 64² ticks      | 4.4 min                         |
//! | 3     | 64    | 64³ ticks      | 4.7 h                           |
//! | 4     | 64    | 64⁴ ticks      | 12.4 days                       |
//! | 5–9   | 64    | 64⁵…64⁹ ticks  | 2.2 years … 2 million years     |
//! | 10    | 16    | 2⁶⁰ ticks      | the rest of `u64`               |
//!
//! - **Placement.** A timer is filed at the level of the highest 6-bit digit in which its
//!   deadline differs from the clock, in the slot given by that digit of the deadline. Eleven
//!   levels cover all of `u64`, so nothing is out of range and nothing needs an overflow list.
//!   A timer's place is a function of its deadline and the clock, so it is not stored.
//! - **Slots** are doubly linked lists threaded through a slab (`Vec`) by `u32` index, with
//!   a head and a tail per slot: insert appends (O(1)), remove unlinks (O(1)).
//! - **Bitmaps.** Each level keeps a `u64` with one bit per occupied slot, and the wheel one
//!   bit per occupied level. The earliest timers are in the first occupied slot of the lowest
//!   occupied level: two `trailing_zeros`, never a walk over empty slots.
//! - **Cascading.** When the clock reaches the start of a slot above level 0, its timers move
//!   down to the level their remaining time belongs to, in order. Each timer moves at most
//!   once per level, so firing is amortised O(1).
//! - **Exact next deadline.** A level-0 slot is a single tick. A higher slot records its
//!   earliest deadline, kept exact on insert and on most removals; when the minimum of an
//!   out-of-order slot is removed the slot is marked stale, and it is sorted once (stable)
//!   if and when it becomes the earliest slot. See `level.rs` for the details.
//!
//! # Cost
//!
//! | operation | cost |
//! |-----------|------|
//! | [`insert`](Wheel::insert), [`remove`](Wheel::remove), [`reset`](Wheel::reset) | O(1) |
//! | [`get`](Wheel::get), [`deadline`](Wheel::deadline), [`contains`](Wheel::contains) | O(1) |
//! | [`next_deadline`](Wheel::next_deadline) | O(1) |
//! | [`poll`](Wheel::poll) | O(1) per timer fired plus O(1) per timer cascaded (≤ 10 per timer) |
//! | [`clear`](Wheel::clear), [`drain`](Wheel::drain), [`shrink_to_fit`](Wheel::shrink_to_fit) | O(capacity) |
//!
//! The one exception to O(1): removing or resetting the earliest timer of a slot above
//! level 0 whose timers were inserted out of deadline order, while that slot is the earliest
//! one, sorts that slot (O(k log k) for its k timers) so that `next_deadline` stays exact;
//! the slot then stays sorted until a timer is appended out of order.
//!
//! # Memory layout
//!
//! A timer is one slab entry: for `Wheel<u64>` 32 bytes (generation, deadline, value, two
//! `u32` links), two per cache line. Cancelling touches the timer's own entry and its two
//! list neighbours; inserting touches the new entry (the most recently freed one, still in
//! cache) and the slot's tail. The slot tables are 1 KiB per level, 11 KiB in all. Once the
//! slab has grown to the number of live timers, inserts do not allocate: freed entries are
//! reused, most recent first.
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
pub use wheel::{Drain, Iter, IterMut, Wheel};

/// A wheel refused a timer because it already holds `u32::MAX` timers. Holds the value.
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
            u32::MAX
        )
    }
}

impl<T> core::error::Error for InsertError<T> {}
