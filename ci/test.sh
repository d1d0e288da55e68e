#!/usr/bin/env bash
# The project's test command (README "Run the tests"). Every check CI runs, in order:
# formatting, lints, unit/integration/property tests, doctests, docs, benchmark compilation,
# packaging (ci/package.sh), loom (bounded), fuzz targets (build + a short run each), and the end-to-end suites against
# the real beanstalkd and real Python clients (ci/e2e.sh).
# Installs what it needs when missing (cargo-nextest, cargo-fuzz, beanstalkd, postgresql, a Python
# virtualenv), so a fresh machine works.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "tools"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
command -v cargo-nextest >/dev/null || cargo install cargo-nextest --locked
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
# A real PostgreSQL for tickwheel-pg's tests (they start throw-away clusters with its binaries
# and fail under CI=true without them).
bash ci/postgres.sh

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

bash ci/package.sh
bash ci/loom.sh
bash ci/fuzz.sh
bash ci/e2e.sh
# The greenstalk/pystalk suite once more, against a node on PostgreSQL (--postgres).
TICKWHEEL_E2E_BACKEND=postgres bash ci/e2e.sh -k test_clients
