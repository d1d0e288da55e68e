//! What a wheel entry holds for one timer: a one-shot callback stored inline, or the index
//! of a side-slab slot (repeating tasks and async timers, see `shard.rs`).
//!
//! # Ground rules
//!
//! - A [`Payload`] is 24 bytes (a unit test pins it): a [`stack_dst`] value of
//!   `dyn Call` in three words, the closure's data in the first two, its vtable in the
//!   last. So a wheel entry is 40 bytes.
//! - A one-shot callback is stored **inline** when `Option<F>` fits 16 bytes with at most
//!   pointer alignment: a closure capturing nothing, one `u64`, an `Arc`, an `Arc` and a
//!   `u64`, a channel `Sender`… No allocation for those. A larger closure is boxed and
//!   the box (`Option<Box<F>>`, one word) stored inline instead. The line is a compile-time constant per
//!   closure type ([`fits_inline`]); `tests/allocations.rs` pins both sides.
//! - `Option`, because a callback is `FnOnce` and is called through `&mut dyn Call`: the
//!   call takes the closure out first. That flag is why 16 bytes of captures need 24 of
//!   payload; moving a closure out of inline storage by value would need `unsafe` here.
//! - A slot index is a `dyn Call` too ([`SlotIndex`]): the entry is one type without an
//!   enum tag (a `stack_dst` value has no niche to hide one in, so an enum would cost 8
//!   bytes more per timer). [`Payload::slot`] tells them apart with one virtual call.
//! - No `unsafe` here: `stack_dst`'s `new_stable` takes a coercion closure as the witness
//!   that the value is a `dyn Call`; the crate does the unsafe layout work (and checks
//!   the size and the alignment) itself.

use std::mem::{align_of, size_of};

use stack_dst::ValueA;

/// A callback or slot index behind a `dyn` pointer stored inline.
pub(crate) trait Call: Send {
    /// Runs the callback; a second call does nothing. A slot index does nothing.
    fn call(&mut self);

    /// The side-slab slot this payload names, or `None` for a callback.
    fn slot(&self) -> Option<u32> {
        None
    }
}

impl<F: FnOnce() + Send> Call for Option<F> {
    #[inline]
    fn call(&mut self) {
        if let Some(f) = self.take() {
            f();
        }
    }
}

/// A side-slab slot's index, as a payload.
struct SlotIndex(u32);

impl Call for SlotIndex {
    fn call(&mut self) {}

    fn slot(&self) -> Option<u32> {
        Some(self.0)
    }
}

/// Three words: two of data, one of vtable.
type Inline = ValueA<dyn Call, [usize; 3]>;

/// Whether a one-shot closure of type `F` is stored inline (else boxed).
pub(crate) const fn fits_inline<F>() -> bool {
    size_of::<Option<F>>() <= 2 * size_of::<usize>() && align_of::<F>() <= align_of::<usize>()
}

/// A one-shot callback (inline or boxed) or a side-slab slot index. 24 bytes.
pub(crate) struct Payload(Inline);

impl Payload {
    /// A side-slab slot.
    pub(crate) fn slot_index(index: u32) -> Payload {
        match Inline::new_stable(SlotIndex(index), |p| p as _) {
            Ok(v) => Payload(v),
            // Not reached: 4 bytes of data fit.
            Err(_) => Payload::boxed(Box::new(|| ())),
        }
    }

    /// A boxed callback (16 bytes of data: always fits).
    fn boxed(f: Box<dyn FnOnce() + Send>) -> Payload {
        match Inline::new_stable(Some(f), |p| p as _) {
            Ok(v) => Payload(v),
            // Not reached: a `Box<dyn _>` is two words, pointer-aligned.
            Err(_) => Payload::slot_index(u32::MAX),
        }
    }

    /// The side-slab slot this payload names, or `None` for a callback.
    #[inline]
    pub(crate) fn slot(&self) -> Option<u32> {
        self.0.slot()
    }

    /// Runs the callback (nothing for a slot index).
    #[inline]
    pub(crate) fn run(mut self) {
        self.0.call();
    }
}

/// A one-shot callback on its way into a shard: inline-sized closures as they are, larger
/// ones already boxed (outside the shard lock). A refused schedule gets `F` back from it.
pub(crate) enum Prepared<F> {
    Inline(F),
    Boxed(Box<F>),
}

impl<F: FnOnce() + Send + 'static> Prepared<F> {
    #[inline(always)]
    pub(crate) fn new(f: F) -> Self {
        if fits_inline::<F>() {
            Prepared::Inline(f)
        } else {
            Prepared::Boxed(Box::new(f))
        }
    }

    pub(crate) fn into_inner(self) -> F {
        match self {
            Prepared::Inline(f) => f,
            Prepared::Boxed(b) => *b,
        }
    }

    #[inline(always)]
    pub(crate) fn into_payload(self) -> Payload {
        match self {
            Prepared::Inline(f) => match Inline::new_stable(Some(f), |p| p as _) {
                Ok(v) => Payload(v),
                // Not reached (`fits_inline`), but never lose a callback: box it.
                Err(f) => Payload::boxed(Box::new(move || {
                    if let Some(f) = f {
                        f();
                    }
                })),
            },
            // `Option<Box<F>>`: one word, and the call goes straight to `F` (one virtual
            // call, not two as through a `Box<dyn FnOnce>`).
            Prepared::Boxed(b) => match Inline::new_stable(Some(b), |p| p as _) {
                Ok(v) => Payload(v),
                Err(b) => Payload::boxed(Box::new(move || {
                    if let Some(b) = b {
                        b();
                    }
                })),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_payload_is_24_bytes() {
        assert_eq!(size_of::<Payload>(), 24);
    }

    #[test]
    fn the_inline_line() {
        let x = 7u64;
        let a = Arc::new(AtomicUsize::new(0));
        assert!(fits_inline::<fn()>());
        let nothing = || ();
        assert!(fits_inline_of(&nothing));
        let one_u64 = move || {
            std::hint::black_box(x);
        };
        assert!(fits_inline_of(&one_u64));
        let a2 = Arc::clone(&a);
        let arc_and_u64 = move || {
            a2.fetch_add(x as usize, Ordering::Relaxed);
        };
        assert!(fits_inline_of(&arc_and_u64), "Arc's niche holds the flag");
        let y = x + 1;
        let two_u64 = move || {
            std::hint::black_box((x, y));
        };
        assert!(!fits_inline_of(&two_u64), "16 B without a niche: boxed");
        let wide = 1u128;
        let aligned = move || {
            std::hint::black_box(wide);
        };
        assert!(!fits_inline_of(&aligned), "16-byte alignment: boxed");
    }

    fn fits_inline_of<F>(_: &F) -> bool {
        fits_inline::<F>()
    }

    /// Every kind runs exactly once, or is dropped exactly once unrun.
    #[test]
    fn inline_and_boxed_callbacks_run_or_drop_once() {
        let runs = Arc::new(AtomicUsize::new(0));
        let token = Arc::new(());
        let small = {
            let (runs, token) = (Arc::clone(&runs), Arc::clone(&token));
            move || {
                runs.fetch_add(1, Ordering::Relaxed);
                drop(token);
            }
        };
        let big = {
            let (runs, token) = (Arc::clone(&runs), Arc::clone(&token));
            let pad = [1u64; 8];
            move || {
                runs.fetch_add(pad.len() - 7, Ordering::Relaxed);
                drop(token);
            }
        };
        assert!(matches!(Prepared::new(small.clone()), Prepared::Inline(_)));
        assert!(matches!(Prepared::new(big.clone()), Prepared::Boxed(_)));
        let p = Prepared::new(small).into_payload();
        assert_eq!(p.slot(), None);
        p.run();
        Prepared::new(big).into_payload().run();
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        // Dropped unrun: the captures are dropped, nothing runs.
        let unrun = {
            let (runs, token) = (Arc::clone(&runs), Arc::clone(&token));
            move || {
                runs.fetch_add(100, Ordering::Relaxed);
                drop(token);
            }
        };
        drop(Prepared::new(unrun).into_payload());
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        assert_eq!(Arc::strong_count(&token), 1, "every capture dropped");
        assert_eq!(Payload::slot_index(9).slot(), Some(9));
        Payload::slot_index(9).run();
    }
}
