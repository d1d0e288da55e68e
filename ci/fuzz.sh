#!/usr/bin/env bash
# Builds every fuzz target and runs each for a bounded time (FUZZ_SECONDS, default 60).
# Seeds come from fuzz/seeds/<target>/; new findings stay in fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${FUZZ_SECONDS:-60}
printf '\n==> fuzz (%ss per target)\n' "$seconds"
cargo fuzz build --sanitizer=none
for target in $(cargo fuzz list); do
  mkdir -p "corpus/$target"
  cargo fuzz run --sanitizer=none "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1
done
