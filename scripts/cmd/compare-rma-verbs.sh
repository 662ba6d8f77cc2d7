# help: MPI_Put/MPI_Get over verbs against ib_write_lat/ib_read_lat on soft-RoCE, in one VM boot
# reverb's MPI one-sided latency on the verbs provider side by side with perftest, in ONE boot
# of the TCG rxe VM (ci/rxe-vm.sh; the host kernel has no RDMA): MPI_Put and MPI_Get of 8 B
# with MPI_Win_flush after each (benches/mpi/mpi_bench.c put_lat / get_lat, osu_put_latency's
# passive-target shape) on 2 ranks, against ib_write_lat / ib_read_lat 8 B on the same device,
# interleaved, busy polling on both sides. The window is kept private (REVERB_MPI_WIN_SHM=0):
# the two ranks share the VM, and this way the origin reaches the target's window as it
# reaches one on another host, with the provider's RDMA WRITE and READ. The guest half is
# scripts/guest/rma-verbs.sh; raw outputs and the table stay in $RESULTS.
#
# Mind what each side times: perftest's *_lat print half a ping-pong (a write seen by the
# peer's poll, then one back); MPI_Put + MPI_Win_flush is one write and its acknowledgement,
# MPI_Get + flush one read. Knobs (environment): REPEAT=3 ITERS=2000 STEP_TIMEOUT=120
# VM_TIMEOUT=600 RESULTS=target/compare-rma-verbs; REVERB_BIN=path (a build with verbs and the
# MPI library beside it, e.g. $CARGO_TARGET_DIR/ci/reverb) skips the build.

bash ci/deps.sh --compare
if ! dpkg-query -W -f='${Status}' perftest 2>/dev/null | grep -q 'install ok installed'; then
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends perftest
fi
rs_build --mpi --features verbs

results=$(realpath -m "${RESULTS:-target/compare-rma-verbs}")
mkdir -p "$results"
rm -f "$results"/*
case "$results" in
    "$PWD"/target/*) rw=() ;;
    *) rw=(--rw "$results") ;;
esac
mpicc.mpich -O2 benches/mpi/mpi_bench.c -o "$results/bench-mpich"

export REVERB_BIN=$reverb BENCH=$results/bench-mpich RESULTS=$results
export ITERS=${ITERS:-2000} STEP_TIMEOUT=${STEP_TIMEOUT:-120} REPEAT=${REPEAT:-3}
RXE_VM_QUIET=1 bash ci/rxe-vm.sh --timeout "${VM_TIMEOUT:-600}" "${rw[@]}" -- bash scripts/guest/rma-verbs.sh
