#!/usr/bin/env bash
# The project's test command (README "Run the tests"). Every check CI runs, in order:
# formatting, lints, unit/integration/property tests, doctests, docs, loom (bounded),
# benchmark and fuzz-target compilation, and a short fuzz smoke run.
# Installs the cargo tools it needs when they are missing, so a fresh machine works.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "tools"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
command -v cargo-nextest >/dev/null || cargo install cargo-nextest --locked
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

step "fmt"
cargo fmt --all --check

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests (nextest)"
cargo nextest run --workspace --locked --profile ci

step "doctests"
cargo test --workspace --doc --locked

step "docs"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --locked

step "benches compile"
cargo bench --workspace --no-run --locked

bash ci/loom.sh
bash ci/fuzz.sh
