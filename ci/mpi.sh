#!/usr/bin/env bash
# The MPI library (reverb-mpi: libmpich.so.12, MPICH 4.0's ABI) under programs compiled and
# linked by Debian's mpicc.mpich, run unchanged by `reverb run --mpi`:
#   - point-to-point semantics (order under wildcards, probe, synchronous sends, nonblocking
#     completion, MPI_PROC_NULL, errors returned: truncation, bad rank, bad tag) on 2 and 4
#     ranks, on shm and tcp;
#   - collectives against computed values on MPI_COMM_WORLD, a split and a dup (3 and 4 ranks),
#     a user operation on a strided type, persistent collectives, MPI_Comm_split_type; each
#     collective algorithm on both sides of its size threshold on 2, 3, 4, 5 and 8 ranks;
#   - the large-count persistent collectives and MPI_Op_create_c (mpi/tests/c/pcoll_c.c), the
#     neighbourhood collectives' _c, nonblocking _c and persistent forms (neighbor.c);
#   - nonblocking collectives (mpi/tests/c/icoll.c) started in opposite orders on two
#     communicators, overlapped with the point-to-point traffic they depend on, many
#     outstanding at once, MPI_Comm_idup, persistent ones beside point-to-point (shm, tcp);
#   - datatypes (contents of every constructor, subarray/darray layouts as MPICH's, external32,
#     type attributes) and graph topologies, error handlers, error classes, info and memory
#     calls (mpi/tests/c/datatypes.c, topo_errh.c);
#   - one-sided windows (mpi/tests/c/rma.c) on 2, 3 and 4 ranks (shm) and 3 (tcp);
#   - a call outside the subset stops the job naming it;
#   - the profiling interface: every MPI_X is an alias of PMPI_X (nm), and a profiling library
#     preloaded before reverb's (mpi/tests/c/pmpi_counter.c) counts exactly the program's calls;
#   - Fortran (mpif90.mpich, MPICH's libmpichfort over reverb's library): everything
#     libmpichfort links resolves (ldd -r); attributes and keyval callbacks in Fortran, statuses
#     and MPI_STATUS(ES)_IGNORE, C reading Fortran's objects, a generalized request
#     (mpi/tests/fortran/fortran.f90 with interop.c); profiling libraries in C and in Fortran
#     both count a Fortran program's calls (libmpichfort's wrappers call MPI_X, not PMPI_X);
#     the Fortran Jacobi (examples/mpi/jacobi_ft.f90) gives the C one's checksum on MPICH;
#   - (ci/mpi-ft.sh, which ci/mpi-verbs.sh runs on verbs too) a Jacobi solver gives the
#     checksum Debian's MPICH gives for the same binary, and with a node SIGKILLed and
#     respawned (REVERB_FAULT) the same again; a master-worker program (MPI_ANY_SOURCE)
#     survives its worker node's and its master node's loss, bit-identical.
# MPICH's own tests are ci/mpich-suite.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== mpi: [$((SECONDS / 60))m$((SECONDS % 60))s] $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
command -v mpicc.mpich >/dev/null || fail "needs mpicc.mpich (apt-get install mpich libmpich-dev)"

cargo ci-build  # .cargo/config.toml: the build every suite shares
target=${CARGO_TARGET_DIR:-$PWD/target}
reverb=$target/ci/reverb
work=$target/mpi-ci
rm -rf "$work"
mkdir -p "$work"
cc() { mpicc.mpich -std=c11 -Wall -Werror -O1 -Impi/include "$@"; }
cc mpi/tests/c/p2p.c -o "$work/p2p"
cc mpi/tests/c/coll.c -o "$work/coll"
cc mpi/tests/c/coll_sizes.c -o "$work/coll_sizes"
cc mpi/tests/c/allreduce_bits.c -o "$work/allreduce_bits"
cc mpi/tests/c/icoll.c -o "$work/icoll"
cc mpi/tests/c/pcoll_c.c -o "$work/pcoll_c"
cc mpi/tests/c/neighbor.c -o "$work/neighbor"
cc mpi/tests/c/unsupported.c -o "$work/unsupported"
cc mpi/tests/c/datatypes.c -o "$work/datatypes"
cc mpi/tests/c/topo_errh.c -o "$work/topo_errh"
cc mpi/tests/c/rma.c -o "$work/rma"
cc mpi/tests/c/rma_ft.c -o "$work/rma_ft"
cc mpi/tests/c/pmpi.c -o "$work/pmpi"
# The profiling library links to no MPI library: its PMPI_* bind to whichever one the ranks load.
cc -fPIC -c mpi/tests/c/pmpi_counter.c -o "$work/pmpi_counter.o"
gcc -shared "$work/pmpi_counter.o" -o "$work/libpmpi_counter.so"
cc examples/mpi/jacobi_ft.c -o "$work/jacobi_ft"
cc examples/mpi/master_worker_ft.c -o "$work/master_worker_ft"
cc examples/mpi/dynamic_ft.c -o "$work/dynamic_ft"
cc examples/mpi/iprobe_ft.c -o "$work/iprobe_ft"
cc examples/mpi/collectives_ft.c -o "$work/collectives_ft"
# Fortran: MPICH's `use mpi` declares no choice-buffer interfaces, so gfortran sees argument
# mismatches between calls and needs -fallow-argument-mismatch; -w keeps its warnings out.
fc() { mpif90.mpich -fallow-argument-mismatch -w -O1 -J "$work" "$@"; }
cc -c mpi/tests/fortran/interop.c -o "$work/interop.o"
fc mpi/tests/fortran/fortran.f90 "$work/interop.o" -o "$work/fortran"
fc mpi/tests/fortran/pmpi.f90 -o "$work/pmpi_f"
gfortran -shared -fPIC -Wall -Werror -J "$work" mpi/tests/fortran/pmpi_counter.f90 -o "$work/libpmpi_counter_f.so"
fc mpi/include/mpix_reverb.f90 examples/mpi/jacobi_ft.f90 -o "$work/jacobi_ft_f"

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
bash scripts/reverb-mpicc --profile ci -std=c11 -Wall -Werror mpi/tests/c/p2p.c -o "$work/p2p-direct"
"$reverb" run --timeout 120 -n 2 -- "$work/p2p-direct" >"$work/p2p-direct.log" 2>&1 ||
    fail "p2p built by reverb-mpicc: $(tail -n 20 "$work/p2p-direct.log")"
expect p2p-direct.log "p2p: ok"
say "a program built by scripts/reverb-mpicc runs under plain reverb run: ok"
for n in 3 4; do
    run "coll-$n.log" -n "$n" -- "$work/coll"
    expect "coll-$n.log" "coll: ok"
done
say "collectives on world, a split and a dup: ok"
run coll-sizes.log -n 8 -- "$work/coll_sizes"
expect coll-sizes.log "coll_sizes: ok"
# Logged, each collective message over 64 KiB in pieces: the in-place paths' receives of pieces.
REVERB_LOG=causal REVERB_LOG_MAX_MESSAGE=65536 run coll-sizes-logged.log -n 8 --ranks-per-node 2 -- "$work/coll_sizes"
expect coll-sizes-logged.log "coll_sizes: ok"
say "each collective algorithm on both sides of its threshold, on 2, 3, 4, 5 and 8 ranks: ok"
for n in 2 4 8; do
    run "allreduce-bits-$n.log" -n "$n" -- "$work/allreduce_bits"
    timeout 120 mpiexec.mpich -n "$n" "$work/allreduce_bits" >"$work/allreduce-bits-mpich-$n.log" 2>&1 ||
        fail "allreduce_bits on MPICH: $(tail -n 20 "$work/allreduce-bits-mpich-$n.log")"
    diff <(grep '^allreduce_bits:' "$work/allreduce-bits-mpich-$n.log") \
        <(grep -o 'allreduce_bits:.*' "$work/allreduce-bits-$n.log") >"$work/allreduce-bits-$n.diff" ||
        fail "MPI_Allreduce of doubles on $n ranks: other bits than MPICH's: $(cat "$work/allreduce-bits-$n.diff")"
done
REVERB_LOG=causal REVERB_LOG_MAX_MESSAGE=65536 run allreduce-bits-logged.log -n 4 --ranks-per-node 1 -- "$work/allreduce_bits"
diff <(grep '^allreduce_bits:' "$work/allreduce-bits-mpich-4.log") \
    <(grep -o 'allreduce_bits:.*' "$work/allreduce-bits-logged.log") >"$work/allreduce-bits-logged.diff" ||
    fail "MPI_Allreduce of doubles, logged, in pieces: other bits than MPICH's: $(cat "$work/allreduce-bits-logged.diff")"
say "MPI_Allreduce of doubles gives MPICH's bits on 2, 4 and 8 ranks, in place and logged too: ok"
for n in 2 5; do
    run "icoll-$n.log" -n "$n" -- "$work/icoll"
    expect "icoll-$n.log" "icoll: ok"
done
REVERB_PROVIDER=tcp run icoll-tcp.log -n 4 -- "$work/icoll"
expect icoll-tcp.log "icoll: ok"
say "nonblocking collectives in different orders, beside the point-to-point they depend on, many at once: ok"
for t in pcoll_c neighbor; do
    for n in 3 4; do
        run "$t-$n.log" -n "$n" -- "$work/$t"
        expect "$t-$n.log" "$t: ok"
    done
done
say "large-count persistent collectives, MPI_Op_create_c, neighbourhood _c and persistent forms: ok"
run datatypes.log -n 1 -- "$work/datatypes"
expect datatypes.log "datatypes: ok"
for n in 3 4; do
    run "topo_errh-$n.log" -n "$n" -- "$work/topo_errh"
    expect "topo_errh-$n.log" "topo_errh: ok"
done
say "datatype contents and layouts, graph topologies, error handlers, info: ok"
for n in 2 3 4; do
    run "rma-$n.log" -n "$n" -- "$work/rma"
    expect "rma-$n.log" "rma: ok"
done
REVERB_PROVIDER=tcp run rma-tcp.log -n 3 -- "$work/rma"
expect rma-tcp.log "rma: ok"
say "one-sided windows (fence, locks, fetch-and-op, compare-and-swap, post-start-complete-wait): ok"

if "$reverb" run --mpi --timeout 60 -n 2 -- "$work/unsupported" >"$work/unsupported.log" 2>&1; then
    fail "a job calling MPI_Open_port succeeded: $(cat "$work/unsupported.log")"
fi
expect unsupported.log "MPI_Open_port is not supported by reverb"
if grep -q "returned" "$work/unsupported.log"; then fail "MPI_Open_port returned"; fi
say "an unsupported call stops the job naming it: ok"

# MPICH's profiling interface: each MPI_X (implemented or stub) at its PMPI_X's address.
# Functions only (T): mpi.h's data objects (MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY) have no PMPI_.
nm -D --defined-only "$target/ci/libmpich.so" | awk '
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

# Fortran. What libmpichfort and the program link, against reverb's library under its soname.
mkdir -p "$work/lib"
ln -sf "$target/ci/libmpich.so" "$work/lib/libmpich.so.12"
LD_LIBRARY_PATH=$work/lib ldd -r "$work/fortran" >"$work/fortran-ldd.log" 2>&1 ||
    fail "ldd -r fortran: $(tail -n 20 "$work/fortran-ldd.log")"
grep -q "libmpich.so.12 => $work/lib/" "$work/fortran-ldd.log" || fail "ldd -r did not load reverb's library"
if grep -q "undefined symbol" "$work/fortran-ldd.log"; then
    fail "libmpichfort on reverb's library: $(grep "undefined symbol" "$work/fortran-ldd.log" | head -n 20)"
fi
for n in 1 3; do
    run "fortran-$n.log" -n "$n" -- "$work/fortran"
    expect "fortran-$n.log" "fortran: ok"
done
say "Fortran through MPICH's libmpichfort (attributes, callbacks, statuses, C interop): ok"
# libmpichfort's mpi_send_ and pmpi_send_ both call MPI_Send: a Fortran profiler (mpi_send_
# over pmpi_send_) and a C one (MPI_Send over PMPI_Send) both count the program's calls.
LD_PRELOAD="$work/libpmpi_counter_f.so $work/libpmpi_counter.so" run pmpi-f.log -n 2 -- "$work/pmpi_f"
expect pmpi-f.log "pmpi.f90: ok"
for rank in 0 1; do
    expect pmpi-f.log "pmpi_counter.f90: rank $rank: MPI_SEND 5 MPI_RECV 5"
    expect pmpi-f.log "pmpi_counter: rank $rank: MPI_Init 1 MPI_Send 5 MPI_Recv 5 MPI_Allreduce 2 MPI_Finalize 1"
done
say "profiling a Fortran program, in Fortran and in C: ok"

timeout 120 mpiexec.mpich -n 4 "$work/jacobi_ft" 200 20 >"$work/jacobi-mpich.log" 2>&1 ||
    fail "jacobi_ft on MPICH: $(tail -n 20 "$work/jacobi-mpich.log")"
mpich=$(sed -n 's/.*checksum \([0-9a-f]*\).*/\1/p' "$work/jacobi-mpich.log" | head -n 1)
[ -n "$mpich" ] || fail "jacobi_ft on MPICH printed no checksum: $(tail -n 20 "$work/jacobi-mpich.log")"
# The Fortran Jacobi does the C one's arithmetic on the same bytes: the same checksum.
timeout 120 mpiexec.mpich -n 4 "$work/jacobi_ft_f" 200 20 >"$work/jacobi-f-mpich.log" 2>&1 ||
    fail "jacobi_ft.f90 on MPICH: $(tail -n 20 "$work/jacobi-f-mpich.log")"
fortran=$(sed -n 's/.*checksum \([0-9a-f]*\).*/\1/p' "$work/jacobi-f-mpich.log" | head -n 1)
[ "$fortran" = "$mpich" ] || fail "jacobi_ft.f90 on MPICH: checksum '$fortran', jacobi_ft.c $mpich"
bash ci/mpi-ft.sh "$reverb" "$work" "$mpich"

say "ok"
