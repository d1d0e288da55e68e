//! Memory per pending timer: resident-set growth (`/proc/self/statm`) while 1M timers
//! are pending, divided by 1M. Handles are dropped (a handle is the caller's choice to
//! keep); a second line keeps them. The closure captures nothing (`tickwheel`) or a `u64`
//! (`tickwheel-capture`): both are stored inline in the wheel entry, so both figures are the
//! timer's own cost. A closure whose captures exceed 16 bytes is boxed and adds its heap
//! chunk (32 B for up to 24 B of captures with glibc).
//!
//! Run: `cargo run --release -p tickwheel --example memory [tickwheel|tickwheel-capture|tickwheel-handles|timer-crate]`

use std::time::Duration;

const N: usize = 1_000_000;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("statm");
    pages * 4096
}

fn per_timer(label: &str, before: usize) {
    let after = rss_bytes();
    println!(
        "{label}: {:.1} bytes per pending timer ({} MiB for {N})",
        after.saturating_sub(before) as f64 / N as f64,
        after.saturating_sub(before) >> 20
    );
}

fn delay(i: usize) -> Duration {
    Duration::from_secs(1800) + Duration::from_micros((i as u64 * 1_800_000_000) / N as u64)
}

fn main() {
    let which = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tickwheel".into());
    match which.as_str() {
        "tickwheel" => {
            let timer = tickwheel::Timer::new();
            std::thread::sleep(Duration::from_millis(100));
            let before = rss_bytes();
            for i in 0..N {
                let _handle = timer.schedule(delay(i), || ()).expect("schedule");
            }
            std::thread::sleep(Duration::from_millis(200));
            per_timer("tickwheel, handles dropped", before);
            drop(timer.stop());
        }
        "tickwheel-capture" => {
            // A small closure: captures one u64, stored inline (no allocation).
            let timer = tickwheel::Timer::new();
            std::thread::sleep(Duration::from_millis(100));
            let before = rss_bytes();
            for i in 0..N {
                let x = i as u64;
                let _handle = timer
                    .schedule(delay(i), move || {
                        std::hint::black_box(x);
                    })
                    .expect("schedule");
            }
            std::thread::sleep(Duration::from_millis(200));
            per_timer(
                "tickwheel, closure capturing a u64, handles dropped",
                before,
            );
            drop(timer.stop());
        }
        "tickwheel-handles" => {
            let timer = tickwheel::Timer::new();
            std::thread::sleep(Duration::from_millis(100));
            let before = rss_bytes();
            let handles: Vec<_> = (0..N)
                .map(|i| timer.schedule(delay(i), || ()).expect("schedule"))
                .collect();
            std::thread::sleep(Duration::from_millis(200));
            per_timer(
                &format!(
                    "tickwheel, handles kept ({} B each in a Vec)",
                    std::mem::size_of::<tickwheel::TimerHandle>()
                ),
                before,
            );
            drop(handles);
            drop(timer.stop());
        }
        "timer-crate" => {
            let timer = timer::Timer::new();
            let before = rss_bytes();
            let guards: Vec<_> = (0..N)
                .map(|i| {
                    timer.schedule_with_delay(
                        chrono::Duration::from_std(delay(i)).expect("delay"),
                        || (),
                    )
                })
                .collect();
            std::thread::sleep(Duration::from_millis(200));
            per_timer(
                "timer crate 0.2 (guards kept: dropping one cancels)",
                before,
            );
            drop(guards);
        }
        other => panic!("unknown implementation {other}"),
    }
}
