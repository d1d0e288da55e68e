//! Micro-benchmarks of `tickwheel_core::Wheel<u64>`, with a `BinaryHeap` timer for scale.
//!
//! Named by operation and size: `wheel::insert/100000` inserts 100k timers into an empty
//! wheel; `insert_remove` inserts and cancels one timer in a wheel holding N; `poll_all`
//! fires N timers by jumping to each next deadline. Run with `cargo bench -p tickwheel-bench`
//! (CI only compiles them: `cargo bench --no-run`). The side-by-side comparison against the
//! other timer crates is the binary: `cargo run --release -p tickwheel-bench`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use divan::{black_box, Bencher};
use tickwheel_core::Wheel;

fn main() {
    divan::main();
}

const SIZES: [usize; 2] = [1_000, 100_000];

/// Deterministic deadlines 1 ms..1 h (splitmix64).
fn deadlines(n: usize) -> Vec<u64> {
    let mut state = 0x5EED_u64;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            1 + (z ^ (z >> 31)) % 3_600_000
        })
        .collect()
}

fn filled(n: usize) -> Wheel<u64> {
    let mut wheel = Wheel::with_capacity(n + 1);
    for (i, d) in deadlines(n).into_iter().enumerate() {
        wheel.insert(d, i as u64);
    }
    wheel
}

mod wheel {
    use super::*;

    #[divan::bench(args = SIZES)]
    fn insert(bencher: Bencher, n: usize) {
        let ds = deadlines(n);
        bencher
            .counter(divan::counter::ItemsCount::new(n))
            .with_inputs(|| Wheel::<u64>::with_capacity(n))
            .bench_local_values(|mut wheel| {
                for (i, &d) in ds.iter().enumerate() {
                    wheel.insert(d, i as u64);
                }
                wheel
            });
    }

    #[divan::bench(args = SIZES)]
    fn insert_remove(bencher: Bencher, n: usize) {
        let mut wheel = filled(n);
        let mut d = 1_800_000u64;
        bencher.bench_local(|| {
            d = d % 3_600_000 + 7_919;
            let key = wheel.insert(black_box(d), 0);
            wheel.remove(key)
        });
    }

    #[divan::bench(args = SIZES)]
    fn poll_all(bencher: Bencher, n: usize) {
        bencher
            .counter(divan::counter::ItemsCount::new(n))
            .with_inputs(|| filled(n))
            .bench_local_values(|mut wheel| {
                let mut fired = 0u64;
                while let Some(next) = wheel.next_deadline() {
                    while let Some((_, v)) = wheel.poll(next) {
                        fired = fired.wrapping_add(v);
                    }
                }
                fired
            });
    }
}

mod binary_heap {
    use super::*;

    #[divan::bench(args = SIZES)]
    fn insert(bencher: Bencher, n: usize) {
        let ds = deadlines(n);
        bencher
            .counter(divan::counter::ItemsCount::new(n))
            .with_inputs(|| BinaryHeap::<Reverse<(u64, u64)>>::with_capacity(n))
            .bench_local_values(|mut heap| {
                for (i, &d) in ds.iter().enumerate() {
                    heap.push(Reverse((d, i as u64)));
                }
                heap
            });
    }
}
