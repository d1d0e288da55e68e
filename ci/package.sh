#!/usr/bin/env bash
# Packaging as crates.io would see it: every published crate packages and builds from its
# .crate alone (cargo package verifies by building the unpacked package; our crates that
# depend on each other resolve through cargo's temporary local registry, not crates.io),
# and each .crate carries the licence files its manifest declares (MIT OR Apache-2.0).
# Needs no network once the dependencies are in cargo's cache (`cargo fetch` fills it).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# Not published: publish = false in their manifests.
EXCLUDE=(--exclude tickwheel-bench --exclude tickwheel-testkit)

step "fetch dependencies"
cargo fetch --locked

step "licence files in every package"
for crate in $(cargo metadata --no-deps --format-version 1 --offline |
        python3 -c 'import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p.get("publish") != []:
        print(p["name"])'); do
    files=$(cargo package -p "$crate" --list --offline --allow-dirty)
    for licence in LICENSE-MIT LICENSE-APACHE; do
        if ! grep -qx "$licence" <<<"$files"; then
            echo "$crate: $licence is not in the package" >&2
            exit 1
        fi
    done
    echo "$crate: LICENSE-MIT LICENSE-APACHE"
done

step "cargo package (build each .crate on its own)"
# cargo verifies each .crate against the others through a temporary local registry and treats
# registry crates as immutable: in a target directory that verified an earlier checkout, it
# reuses the old build of our own crates (same name, same 0.1.0). Verify in a target directory
# of its own, emptied first (it costs one more build of the dependencies, ~3 min here).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/package-verify"
rm -rf "$CARGO_TARGET_DIR"
# It also unpacks the temporary registry's crates under $CARGO_HOME/registry/src/-<hash>/ (the
# hash is of the registry's path, so the same for every run from one checkout directory) and
# never re-extracts the same name and version: a second run would compile the first run's
# sources of our crates. Drop those extracts too (a fresh machine has none).
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/tickwheel-*
# --allow-dirty: this checks that the crates package, whatever the state of the work tree.
cargo package --workspace "${EXCLUDE[@]}" --locked --offline --allow-dirty
