#!/usr/bin/env bash
# reverb's test command (the README's, and what .ci/run calls). Fails on the first error.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*" >&2; }

step "dependencies"
bash ci/deps.sh

step "format, lints and docs (warnings are errors)"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --features reverb/verbs -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

step "build (every target)"
cargo build --workspace --all-targets

step "tests"
cargo test --workspace

step "criterion benches build"
cargo bench -p reverb-benches --no-run

step "verbs provider on soft-RoCE (QEMU VM with rdma_rxe)"
bash ci/verbs-suite.sh

step "ok"
