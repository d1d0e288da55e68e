#!/usr/bin/env bash
# Model-checks the concurrent code with loom, bounded as tokio does it.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ls crates/*/tests/loom*.rs >/dev/null 2>&1; then
  echo "no loom tests yet"
  exit 0
fi
printf '\n==> loom (LOOM_MAX_PREEMPTIONS=2)\n'
for test_file in crates/*/tests/loom*.rs; do
  crate_dir=$(dirname "$(dirname "$test_file")")
  package=$(sed -n 's/^name = "\(.*\)"/\1/p' "$crate_dir/Cargo.toml" | head -n1)
  test_name=$(basename "$test_file" .rs)
  LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom -C debug-assertions" \
    CARGO_TARGET_DIR=target/loom \
    cargo test --release --locked -p "$package" --test "$test_name"
done
