#!/usr/bin/env bash
# reverb across two soft-RoCE hosts (ci/two-vm.sh: two QEMU VMs, an rxe device each on a
# virtio NIC, one emulated wire between them): perftest-style latency over rxe between the
# VMs, and a job split over the two VMs' launchers that survives a rank SIGKILLed on one of
# them (ci/vm/two-vm-job.sh says what runs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo ci-build  # .cargo/config.toml: the build every suite shares (verbs included)
target=${CARGO_TARGET_DIR:-$PWD/target}
out=target/two-vm/run-$$
rm -rf target/two-vm
mkdir -p "$out"
REVERB_BIN=$target/ci/reverb TWO_VM_OUT=$PWD/$out RXE_VM_RO=$target/ci \
    bash ci/two-vm.sh --timeout 900 -- bash ci/vm/two-vm-job.sh
