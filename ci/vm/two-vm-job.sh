#!/usr/bin/env bash
# Runs in both VMs of ci/two-vm.sh at once (TWO_VM_INDEX 0 or 1): reverb across two soft-RoCE
# hosts, on the default provider, auto, which must pick verbs between the VMs and shm inside one.
# 1. `reverb bench lat --op put` and `--op send`, rank 0 on vm0 and rank 1 on vm1: auto (verbs);
# eager and rendezvous sizes, 40 iterations each (a check that it runs and verifies the data:
# under TCG beside CI's other suites a round trip takes 50-200 ms, so no number here means much).
# 2. The stencil, 4 ranks as 2 nodes (one per VM), each VM's node under its own `reverb run
# --local-ranks` (vm0's hosts the rendezvous), failure-free: shm between the two ranks of a VM,
# verbs between the VMs. 3. The same with rank 3 (on vm1) SIGKILLed mid-run: vm1's launcher
# respawns its node, which restores from the buddy checkpoint on vm0 and replays; vm0 checks
# the checksum equals step 2's.
# Needs REVERB_BIN (a reverb built with verbs and fault-injection) and TWO_VM_OUT (a directory
# both VMs can write, under the repo's target/).
set -euo pipefail
: "${REVERB_BIN:?}" "${TWO_VM_OUT:?}" "${TWO_VM_INDEX:?}"
me=$TWO_VM_INDEX
root_host=10.79.0.1
export REVERB_PROVIDER=auto REVERB_AUTO_NET=verbs REVERB_VERBS_DEVICE=${RXE_NIC_DEV:-rxe_nic} REVERB_WAIT_MODE=event
export REVERB_VERBS_PID_WATCH=0 REVERB_JOB_TOKEN=two-vm-token REVERB_BOOT_TIMEOUT_S=120
# The emulated wire between two TCG guests on a 2-core host has round trips of 25 ms and
# stalls of half a second (host scheduling): the default bounds (500 ms, RC ACK timeout
# 2^14 x 4 us) would call a slow peer dead. Bounds of seconds, as on a congested fabric.
export REVERB_PEER_TIMEOUT_MS=5000 REVERB_VERBS_TIMEOUT=18 REVERB_DETECT_GRACE_MS=10000
say() { echo "== two-vm [vm$me] $*" >&2; }

bench() { # op port
    say "bench lat --op $1 (rank $me of 2)"
    REVERB_RANK=$me REVERB_SIZE=2 REVERB_NODE=$me REVERB_LOCAL_RANK=0 REVERB_RANKS_PER_NODE=1 \
        REVERB_ROOT=$root_host:$2 REVERB_JOB_ID=two-vm-bench-$1 \
        "$REVERB_BIN" bench lat --op "$1" --sizes 8,4096,65536 --iters 40 --warmup 5 --wait-mode event \
        | tee "$TWO_VM_OUT/bench-$1-vm$me.txt"
    if [ "$me" = 0 ]; then
        grep -q "provider: auto (verbs)" "$TWO_VM_OUT/bench-$1-vm$me.txt" ||
            { say "FAILED: auto did not pick verbs between the VMs"; exit 1; }
    fi
}

stencil() { # name port [extra env...]
    local name=$1 port=$2 out=$TWO_VM_OUT/$1-vm$me
    shift 2
    mkdir -p "$out"
    local part=(--local-ranks 0-1 --serve-root)
    [ "$me" = 1 ] && part=(--local-ranks 2-3)
    say "stencil $name: ranks ${part[1]} under this VM's launcher"
    env REVERB_ROOT=$root_host:$port REVERB_JOB_ID=two-vm-$name REVERB_RUNTIME_REPORT="$out" \
        REVERB_LOG=causal REVERB_LOG_UNIT=node REVERB_CKPT=buddy "$@" \
        "$REVERB_BIN" run -n 4 --ranks-per-node 2 "${part[@]}" --respawn 1 --timeout 400 -- \
        "$REVERB_BIN" app stencil --iters 400 --size 64 --ckpt-every 100 2>&1 | tee "$out/launcher.log"
    return "${PIPESTATUS[0]}"
}

bench put 7401
bench send 7402
stencil free 7403
# The stencil sends two halos per iteration: rank 3 dies about half-way.
stencil killed 7404 REVERB_FAULT=3:401

if [ "$me" = 1 ]; then
    grep -q "node 1 respawned" "$TWO_VM_OUT/killed-vm1/launcher.log" ||
        { say "FAILED: vm1's launcher did not respawn node 1"; exit 1; }
    say "node 1 was respawned on vm1"
else
    free=$(cat "$TWO_VM_OUT/free-vm0/checksum") killed=$(cat "$TWO_VM_OUT/killed-vm0/checksum")
    say "checksums: failure-free $free, rank 3 killed on vm1 and respawned $killed"
    [ -n "$free" ] && [ "$free" = "$killed" ] || { say "FAILED: checksums differ"; exit 1; }
fi
