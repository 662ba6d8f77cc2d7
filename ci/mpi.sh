#!/usr/bin/env bash
# The MPI library (reverb-mpi: libmpich.so.12, MPICH 4.0's ABI) under programs compiled and
# linked by Debian's mpicc.mpich, run unchanged by `reverb run --mpi`:
#   - point-to-point semantics (order under wildcards, probe, synchronous sends, nonblocking
#     completion, MPI_PROC_NULL, errors returned: truncation, bad rank, bad tag) on 2 and 4
#     ranks, on shm and tcp;
#   - collectives against computed values on MPI_COMM_WORLD, a split and a dup (3 and 4 ranks),
#     a user operation on a strided type, persistent collectives, MPI_Comm_split_type;
#   - datatypes (contents of every constructor, subarray/darray layouts as MPICH's, external32,
#     type attributes) and graph topologies, error handlers, error classes, info and memory
#     calls (mpi/tests/c/datatypes.c, topo_errh.c);
#   - a call outside the subset stops the job naming it;
#   - the profiling interface: every MPI_X is an alias of PMPI_X (nm), and a profiling library
#     preloaded before reverb's (mpi/tests/c/pmpi_counter.c) counts exactly the program's calls;
#   - (ci/mpi-ft.sh, which ci/mpi-verbs.sh runs on verbs too) a Jacobi solver gives the
#     checksum Debian's MPICH gives for the same binary, and with a node SIGKILLed and
#     respawned (REVERB_FAULT) the same again; a master-worker program (MPI_ANY_SOURCE)
#     survives its worker node's and its master node's loss, bit-identical;
#   - with REVERB_MPICH_TESTS=DIR (MPICH's own test suite and its run.sh), the tests listed in
#     mpi/tests/mpich-passing.txt must pass (skipped without it, saying so).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== mpi: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
command -v mpicc.mpich >/dev/null || fail "needs mpicc.mpich (apt-get install mpich libmpich-dev)"

cargo build -p reverb -p reverb-mpi --features reverb-mpi/fault-injection
target=${CARGO_TARGET_DIR:-$PWD/target}
reverb=$target/debug/reverb
work=$target/mpi-ci
rm -rf "$work"
mkdir -p "$work"
cc() { mpicc.mpich -std=c11 -Wall -Werror -O1 -Impi/include "$@"; }
cc mpi/tests/c/p2p.c -o "$work/p2p"
cc mpi/tests/c/coll.c -o "$work/coll"
cc mpi/tests/c/unsupported.c -o "$work/unsupported"
cc mpi/tests/c/datatypes.c -o "$work/datatypes"
cc mpi/tests/c/topo_errh.c -o "$work/topo_errh"
cc mpi/tests/c/pmpi.c -o "$work/pmpi"
# The profiling library links to no MPI library: its PMPI_* bind to whichever one the ranks load.
cc -fPIC -c mpi/tests/c/pmpi_counter.c -o "$work/pmpi_counter.o"
gcc -shared "$work/pmpi_counter.o" -o "$work/libpmpi_counter.so"
cc examples/mpi/jacobi_ft.c -o "$work/jacobi_ft"
cc examples/mpi/master_worker_ft.c -o "$work/master_worker_ft"
cc examples/mpi/collectives_ft.c -o "$work/collectives_ft"

run() { # LOG ARGS... : reverb run --mpi, output kept; fails the script if the job fails
    local log=$work/$1
    shift
    "$reverb" run --mpi --timeout 120 "$@" >"$log" 2>&1 || fail "reverb run --mpi $*: $(tail -n 30 "$log")"
}
expect() { # LOG TEXT
    grep -q -- "$2" "$work/$1" || fail "$1 lacks '$2': $(tail -n 30 "$work/$1")"
}

for n in 2 4; do
    run "p2p-$n.log" -n "$n" -- "$work/p2p"
    expect "p2p-$n.log" "p2p: ok"
done
REVERB_PROVIDER=tcp run p2p-tcp.log -n 4 -- "$work/p2p"
expect p2p-tcp.log "p2p: ok"
say "point-to-point semantics on 2 and 4 ranks, shm and tcp: ok"
# With both cores busy, tcp's progress thread delivers while a progress pass matches posted
# receives in order: a later receive took a message an earlier one was owed in a third to a
# half of these runs before the matching checked for it.
for round in 1 2 3; do
    timeout 60 sh -c 'while :; do :; done' &
    spin1=$!
    timeout 60 sh -c 'while :; do :; done' &
    spin2=$!
    REVERB_PROVIDER=tcp run "p2p-tcp-busy-$round.log" -n 4 -- "$work/p2p"
    kill "$spin1" "$spin2" 2>/dev/null || true
    expect "p2p-tcp-busy-$round.log" "p2p: ok"
done
say "point-to-point order on tcp with the cores busy: ok"
# Linked against reverb's library directly: plain `reverb run`, no --mpi.
bash scripts/reverb-mpicc -std=c11 -Wall -Werror mpi/tests/c/p2p.c -o "$work/p2p-direct"
"$reverb" run --timeout 120 -n 2 -- "$work/p2p-direct" >"$work/p2p-direct.log" 2>&1 ||
    fail "p2p built by reverb-mpicc: $(tail -n 20 "$work/p2p-direct.log")"
expect p2p-direct.log "p2p: ok"
say "a program built by scripts/reverb-mpicc runs under plain reverb run: ok"
for n in 3 4; do
    run "coll-$n.log" -n "$n" -- "$work/coll"
    expect "coll-$n.log" "coll: ok"
done
say "collectives on world, a split and a dup: ok"
run datatypes.log -n 1 -- "$work/datatypes"
expect datatypes.log "datatypes: ok"
for n in 3 4; do
    run "topo_errh-$n.log" -n "$n" -- "$work/topo_errh"
    expect "topo_errh-$n.log" "topo_errh: ok"
done
say "datatype contents and layouts, graph topologies, error handlers, info: ok"

if "$reverb" run --mpi --timeout 60 -n 2 -- "$work/unsupported" >"$work/unsupported.log" 2>&1; then
    fail "a job calling MPI_Win_create succeeded: $(cat "$work/unsupported.log")"
fi
expect unsupported.log "MPI_Win_create is not supported by reverb"
if grep -q "returned" "$work/unsupported.log"; then fail "MPI_Win_create returned"; fi
say "an unsupported call stops the job naming it: ok"

# MPICH's profiling interface: each MPI_X (implemented or stub) at its PMPI_X's address.
# Functions only (T): mpi.h's data objects (MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY) have no PMPI_.
nm -D --defined-only "$target/debug/libmpich.so" | awk '
    $2 == "T" { at[$3] = $1 }
    END {
        for (s in at) if (s ~ /^MPIX?_/) { n++; if (at["P" s] == "" || at["P" s] != at[s]) { print "not an alias of P" s ": " s; bad++ } }
        if (n < 400 || bad) { print n " MPI_ names, " bad " without their PMPI_"; exit 1 }
    }' >"$work/pmpi-nm.log" || fail "libmpich.so's MPI_ names: $(head -n 20 "$work/pmpi-nm.log")"
LD_PRELOAD=$work/libpmpi_counter.so run pmpi.log -n 2 -- "$work/pmpi"
expect pmpi.log "pmpi: ok"
for rank in 0 1; do # ROUNDS=5 in pmpi.c; its MPI_Iallreduce and MPI_Sendrecv are not counted
    expect pmpi.log "rank $rank: MPI_Init 1 MPI_Send 5 MPI_Recv 5 MPI_Allreduce 2 MPI_Finalize 1"
done
say "the profiling interface: MPI_X aliases PMPI_X, a preloaded profiler counts the calls: ok"

timeout 120 mpiexec.mpich -n 4 "$work/jacobi_ft" 200 20 >"$work/jacobi-mpich.log" 2>&1 ||
    fail "jacobi_ft on MPICH: $(tail -n 20 "$work/jacobi-mpich.log")"
mpich=$(sed -n 's/.*checksum \([0-9a-f]*\).*/\1/p' "$work/jacobi-mpich.log" | head -n 1)
[ -n "$mpich" ] || fail "jacobi_ft on MPICH printed no checksum: $(tail -n 20 "$work/jacobi-mpich.log")"
bash ci/mpi-ft.sh "$reverb" "$work" "$mpich"

if [ -n "${REVERB_MPICH_TESTS:-}" ]; then
    PATH=$target/debug:$PATH bash "$REVERB_MPICH_TESTS/run.sh" --launcher "reverb run --mpi --timeout 60 -n" \
        --list mpi/tests/mpich-passing.txt --out "$work/mpich-tests" --timeout 65 >"$work/mpich-tests.log" 2>&1 ||
        fail "MPICH's tests: $(grep -v '^pass' "$work/mpich-tests.log" | tail -n 20)"
    say "MPICH's own tests that reverb passes: $(tail -n 1 "$work/mpich-tests.log")"
else
    say "MPICH's own test suite skipped: REVERB_MPICH_TESTS is not set (docs/mpi.md says how to run it)"
fi
say "ok"
