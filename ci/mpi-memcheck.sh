#!/usr/bin/env bash
# The MPI library's C boundary under Valgrind's memcheck: MPI C programs (compiled by Debian's
# mpicc.mpich, run on reverb's libmpich.so.12 by `reverb run --mpi -n 2`) with every rank under
# `valgrind --error-exitcode=1 --leak-check=no`. Any invalid read or write, use of
# uninitialised memory in a branch, or bad free, in the library or the program, fails the run.
# Suppressions: mpi/tests/valgrind.supp (each one says why it is a false positive).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== mpi-memcheck: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
command -v mpicc.mpich >/dev/null || fail "needs mpicc.mpich (bash ci/deps.sh)"
if ! command -v valgrind >/dev/null; then
    say "installing valgrind"
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends valgrind
fi

# CI's build of the library, as every MPI suite loads it (the `reverb` launcher does not run
# under Valgrind). REVERB_SHM_CMA_WRITE=0: a sender then never writes a large send's chunks
# into its receiver with process_vm_writev, which the receiver's memcheck cannot see (it would
# call the received bytes uninitialised); the receiver reads them all.
cargo ci-build
target=${CARGO_TARGET_DIR:-$PWD/target}
reverb=$target/ci/reverb
work=$target/mpi-memcheck
rm -rf "$work"
mkdir -p "$work"
export REVERB_SHM_CMA_WRITE=0
cc() { mpicc.mpich -std=c11 -Wall -Werror -O1 -g -Impi/include "$@"; }
cc mpi/tests/c/p2p.c -o "$work/p2p"
cc mpi/tests/c/coll.c -o "$work/coll"
cc examples/mpi/collectives_ft.c -o "$work/collectives_ft"

# Every rank's report in its own file (%p: its pid), so a failure can show which one.
vg=(valgrind --error-exitcode=1 --leak-check=no --track-origins=no --num-callers=30
    --suppressions=mpi/tests/valgrind.supp --log-file="$work/vg-%p.log")
check() { # NAME ARGS... : runs program NAME under memcheck on 2 ranks, expects "NAME: ok"
    local name=$1
    shift
    local log=$work/$name.log
    rm -f "$work"/vg-*.log
    # Valgrind slows a rank twenty- to fifty-fold: the receive bound grows to match.
    REVERB_RECV_TIMEOUT_MS=600000 "$reverb" run --mpi --timeout 900 -n 2 -- \
        "${vg[@]}" "$work/$name" "$@" >"$log" 2>&1 || {
        cat "$work"/vg-*.log >&2 || true
        fail "$name under memcheck: $(tail -n 30 "$log")"
    }
    if grep -l "Invalid \(read\|write\)\|uninitialised\|Invalid free" "$work"/vg-*.log >/dev/null 2>&1; then
        cat "$work"/vg-*.log >&2
        fail "$name: memcheck reported errors"
    fi
    local reports=("$work"/vg-*.log)
    ((${#reports[@]} >= 2)) || fail "$name: ${#reports[@]} memcheck report(s) for 2 ranks"
    for report in "${reports[@]}"; do
        grep -q "ERROR SUMMARY: 0 errors" "$report" || fail "$name: no clean summary in $report"
    done
    mkdir -p "$work/$name-vg"
    mv "$work"/vg-*.log "$work/$name-vg/"
    say "$name on 2 ranks: no invalid access"
}
check p2p
grep -q "p2p: ok" "$work/p2p.log" || fail "p2p: $(tail -n 20 "$work/p2p.log")"
check coll
grep -q "coll: ok" "$work/coll.log" || fail "coll: $(tail -n 20 "$work/coll.log")"
check collectives_ft multicast 20 10
say "ok"
