#!/usr/bin/env bash
# reverb's test command (the README's, and what .ci/run calls). Fails on the first error.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*" >&2; }

step "dependencies"
bash ci/deps.sh

step "build (every target)"
cargo build --workspace --all-targets

step "tests"
cargo test --workspace

step "criterion benches build"
cargo bench -p reverb-benches --no-run

# ---------------------------------------------------------------------------------------------
# VERBS / SOFT-ROCE VM SUITE: to be added here (later issue). It boots the rxe VM
# (DESIGN.md §4) and runs the verbs provider's tests inside it; keep it behind this marker.
# ---------------------------------------------------------------------------------------------

step "ok"
