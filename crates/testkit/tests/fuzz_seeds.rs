//! Replays the checked-in fuzz seeds (`fuzz/seeds/<target>/`) through the same functions the
//! fuzz targets call, so every seed (and every crash once fixed and added as a seed) is a
//! regression test on stable Rust, without cargo-fuzz.

use std::fs;
use std::path::PathBuf;

use tickwheel_testkit::{
    check_decoder, decode_queue_ops, decode_wheel_ops, queue_config_for_input,
    run_queue_ops_config, run_wheel_ops,
};

fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let bytes = fs::read(&path).expect("seed file");
            (path, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn fuzz_seeds_wheel_ops() {
    let seeds = seeds("wheel_ops");
    assert!(
        seeds.len() >= 10,
        "expected the checked-in seeds, found {}",
        seeds.len()
    );
    for (path, bytes) in seeds {
        let (start, ops) = decode_wheel_ops(&bytes);
        if let Err(report) = run_wheel_ops(start, &ops) {
            panic!("seed {} fails:\n{report}", path.display());
        }
    }
}

#[test]
fn fuzz_seeds_queue_ops() {
    let seeds = seeds("queue_ops");
    assert!(
        seeds.len() >= 10,
        "expected the checked-in seeds, found {}",
        seeds.len()
    );
    for (path, bytes) in seeds {
        let config = queue_config_for_input(&bytes);
        if let Err(report) = run_queue_ops_config(&decode_queue_ops(&bytes), config) {
            panic!("seed {} fails:\n{report}", path.display());
        }
    }
}

#[test]
fn fuzz_seeds_proto_decode() {
    let seeds = seeds("proto_decode");
    assert!(
        seeds.len() >= 10,
        "expected the checked-in seeds, found {}",
        seeds.len()
    );
    for (path, bytes) in seeds {
        if let Err(report) = check_decoder(&bytes) {
            panic!("seed {} fails:\n{report}", path.display());
        }
    }
}
