#!/usr/bin/env bash
# MPI programs on verbs: the C Jacobi and master-worker built by Debian's mpicc.mpich, run by
# `reverb run --mpi` inside the soft-RoCE VM (ci/rxe-vm.sh, rdma_rxe on rxe0) with every rank
# pair on the verbs provider, surviving a node's SIGKILL with the failure-free answer
# (ci/mpi-ft.sh says what runs, thinned: MPI_FT_THIN=1 there). The reference checksum is
# Debian's MPICH's, taken on the host; the failure-free runs are ci/mpi.sh's on the host where
# it left them ($target/mpi-ci, as in ci/test.sh), else they run in the VM too.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== mpi-verbs: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
command -v mpicc.mpich >/dev/null || fail "needs mpicc.mpich (apt-get install mpich libmpich-dev)"

cargo ci-build  # .cargo/config.toml: the build every suite shares (verbs included)
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/mpi-verbs
rm -rf "$work"
mkdir -p "$work"
for prog in examples/mpi/jacobi_ft.c examples/mpi/master_worker_ft.c examples/mpi/dynamic_ft.c examples/mpi/iprobe_ft.c \
    examples/mpi/collectives_ft.c mpi/tests/c/rma_ft.c; do
    mpicc.mpich -std=c11 -Wall -Werror -O1 -Impi/include "$prog" -o "$work/$(basename "$prog" .c)"
done
timeout 120 mpiexec.mpich -n 4 "$work/jacobi_ft" 200 20 >"$work/jacobi-mpich.log" 2>&1 ||
    fail "jacobi_ft on MPICH: $(tail -n 20 "$work/jacobi-mpich.log")"
mpich=$(sed -n 's/.*checksum \([0-9a-f]*\).*/\1/p' "$work/jacobi-mpich.log" | head -n 1)
[ -n "$mpich" ] || fail "jacobi_ft on MPICH printed no checksum"

# Event-driven completions: busy-polling ranks starve each other on the VM's 2 emulated CPUs.
# The verbs provider's debug lines name each RC connection: the proof the jobs ran on verbs.
export REVERB_PROVIDER=verbs REVERB_WAIT_MODE=event REVERB_VERBS_DEVICE=rxe0
export REVERB_LOG_LEVEL=info,reverb_transport::verbs=debug
# Under TCG each run costs many seconds: kills differing only in protocol or phase run on the host.
export MPI_FT_THIN=1
if compgen -G "$target/mpi-ci/*-clean.log" >/dev/null; then
    mkdir -p "$work/reference"
    cp "$target"/mpi-ci/*-clean.log "$work/reference/"
    export MPI_FT_REFERENCE=$work/reference
    say "failure-free answers from ci/mpi.sh's runs on the host ($target/mpi-ci)"
else
    say "no failure-free logs of ci/mpi.sh in $target/mpi-ci: the VM runs those jobs too"
fi
start=$SECONDS
# The guest writes the repo's target/; a CARGO_TARGET_DIR elsewhere is made writable too.
rw=()
[[ $work == "$PWD"/target/* ]] || rw=(--rw "$work")
bash ci/rxe-vm.sh --timeout 1200 "${rw[@]}" --ro "$target/ci" -- bash ci/mpi-ft.sh "$target/ci/reverb" "$work" "$mpich" 300 ||
    fail "inside the VM (logs in $work)"
grep -q "verbs rank .*connected to rank" "$work/jacobi-faulty.log" ||
    fail "no verbs connection in the Jacobi job's log: $(tail -n 20 "$work/jacobi-faulty.log")"
say "Jacobi and master-worker on verbs (soft-RoCE), a node killed each time: ok ($((SECONDS - start)) s)"
