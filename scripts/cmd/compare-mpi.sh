# help: reverb's MPI library against MPICH and Open MPI (latency, bandwidth, allreduce, Jacobi)
# reverb's MPI library side by side with Debian's MPICH and Open MPI, in one invocation on one
# machine: benches/mpi/mpi_bench.c built once by mpicc.mpich (that same binary runs on MPICH
# and, with `reverb run --mpi`, on reverb) and once by Open MPI's mpicc; latency 8 B / 4 KiB /
# 64 KiB, bandwidth 1 MiB, an 8-byte allreduce on 8 ranks, and the Jacobi example's time.
# The three run interleaved, REPEAT rounds, each keeping its best (lowest time, highest
# bandwidth), so interference picks no winner. Prints the table and ratios (reverb / other:
# below 1 is faster for latency and time, above 1 for bandwidth); raw outputs in $RESULTS.
#
# Knobs (environment): REPEAT=3 LAT_ITERS=20000 BW_ITERS=200 AR_ITERS=2000 RESULTS=...
# QUICK=1: only the 8 B and 64 KiB latencies, one round (REPEAT=1), LAT_ITERS=5000 (what
# `headline` runs). RATE=1: instead, the message rate of small nonblocking sends, osu_bw-like
# (windows of 64 MPI_Isend against 64 pre-posted MPI_Irecv, a 1-byte ack per window), at
# 1 B, 8 B, 64 B, 1 KiB, 8 KiB and 64 KiB; RATE_ITERS=2000 windows per size (fewer above
# 8 KiB). RMA=1: instead, one-sided MPI as osu_put_latency / osu_put_bw run it (rank 0 puts or
# gets into rank 1's MPI_Win_allocate window under a shared lock, MPI_Win_flush after each op,
# or after windows of 64 for bandwidth) at 8 B and 64 KiB (latency) and 64 KiB, 1 MiB and 4 MiB
# (bandwidth); RMA_ITERS=20000 latency ops. DEPS=0 skips ci/deps.sh; then a side whose MPI is not installed (mpiexec.mpich,
# mpirun.openmpi) shows "-". REVERB_BIN=path uses that reverb and the libmpich.so beside it;
# OLD_BUILD=dir adds a side "old" run from another build's reverb and libmpich.so in dir
# (before/after in one interleaved run).
quick=${QUICK:-}
repeat=${REPEAT:-${quick:+1}}
repeat=${repeat:-3}
lat_iters=${LAT_ITERS:-${quick:+5000}}
lat_iters=${lat_iters:-20000}
bw_iters=${BW_ITERS:-200}
ar_iters=${AR_ITERS:-2000}
results=${RESULTS:-target/compare-mpi}
[[ ${DEPS:-1} == 0 ]] || bash ci/deps.sh --compare
rs_build --mpi
mkdir -p "$results"
sides=(reverb)
old_dir=${OLD_BUILD:-}
if [[ -n $old_dir ]]; then
    [[ -x $old_dir/reverb && -e $old_dir/libmpich.so ]] || rs_die "OLD_BUILD=$old_dir has no reverb and libmpich.so"
    sides=(old reverb)
fi
command -v mpiexec.mpich >/dev/null && sides+=(mpich)
command -v mpirun.openmpi >/dev/null && command -v mpicc.openmpi >/dev/null && sides+=(ompi)
mpicc.mpich -O2 benches/mpi/mpi_bench.c -o "$results/bench-mpich"
mpicc.mpich -O2 -Impi/include examples/mpi/jacobi_ft.c -o "$results/jacobi-mpich"
if [[ " ${sides[*]} " == *" ompi "* ]]; then
    mpicc.openmpi -O2 benches/mpi/mpi_bench.c -o "$results/bench-ompi"
    mpicc.openmpi -O2 -Impi/include examples/mpi/jacobi_ft.c -o "$results/jacobi-ompi"
fi

# One measurement: SIDE NRANKS ARGS... → its value (the bench's last field, or seconds).
measure() {
    local side=$1 n=$2
    shift 2
    case $side in
        reverb) "$reverb" run --mpi --no-prefix -n "$n" -- "$results/bench-mpich" "$@" ;;
        old) "$old_dir/reverb" run --mpi --no-prefix -n "$n" -- "$results/bench-mpich" "$@" ;;
        mpich) mpiexec.mpich -n "$n" "$results/bench-mpich" "$@" ;;
        ompi) mpirun.openmpi --allow-run-as-root --oversubscribe -n "$n" "$results/bench-ompi" "$@" ;;
    esac 2>>"$results/stderr.log" | awk 'NF == 3 { v = $3 } END { print v }'
}
jacobi() {
    local side=$1 start end
    start=$(date +%s.%N)
    case $side in
        reverb) "$reverb" run --mpi --no-prefix -n 4 -- "$results/jacobi-mpich" 2000 0 ;;
        mpich) mpiexec.mpich -n 4 "$results/jacobi-mpich" 2000 0 ;;
        ompi) mpirun.openmpi --allow-run-as-root --oversubscribe -n 4 "$results/jacobi-ompi" 2000 0 ;;
    esac >>"$results/jacobi.log" 2>>"$results/stderr.log"
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

tests=("lat 8 $lat_iters" "lat 4096 $lat_iters" "lat 65536 $((lat_iters / 10))" "bw 1048576 $bw_iters" "allreduce $ar_iters" "jacobi")
[[ -n $quick ]] && tests=("lat 8 $lat_iters" "lat 65536 $((lat_iters / 10))")
if [[ -n ${RATE:-} ]]; then
    rate_iters=${RATE_ITERS:-2000}
    tests=()
    for b in 1 8 64 1024 8192 65536; do
        tests+=("bw $b $((b > 8192 ? rate_iters / 8 : rate_iters))")
    done
fi
if [[ -n ${RMA:-} ]]; then
    rma_iters=${RMA_ITERS:-20000}
    tests=()
    for op in put get; do
        tests+=("${op}_lat 8 $rma_iters" "${op}_lat 65536 $((rma_iters / 10))")
        tests+=("${op}_bw 65536 $((rma_iters / 100))" "${op}_bw 1048576 $((rma_iters / 1000))")
        tests+=("${op}_bw 4194304 $((rma_iters / 4000))")
    done
fi
declare -A best
one_round() { # round: every test on every side, the sides' order rotating
    local t side kind v
    for t in "${tests[@]}"; do
        for side in $(rs_order "$1" "${sides[@]}"); do
            kind=${t%% *}
            case $kind in
                jacobi) v=$(jacobi "$side") ;;
                allreduce) v=$(measure "$side" 8 $t) ;;
                *) v=$(measure "$side" 2 $t) ;;
            esac
            best["$t|$side"]=$(rs_better "$([[ $kind == *bw ]] && echo high || echo low)" "${best["$t|$side"]:-}" "$v")
        done
    done
}
rs_rounds "$repeat" one_round
{
    printf '%-24s ' test
    [[ -n $old_dir ]] && printf '%12s ' "reverb old"
    printf '%12s %12s %12s %14s %14s\n' reverb MPICH "Open MPI" "reverb/MPICH" "reverb/OpenMPI"
    for t in "${tests[@]}"; do
        r=${best["$t|reverb"]} m=${best["$t|mpich"]:-} o=${best["$t|ompi"]:-}
        printf '%-24s ' "$t"
        [[ -n $old_dir ]] && printf '%12s ' "${best["$t|old"]}"
        printf '%12s %12s %12s %14s %14s\n' "$r" "${m:--}" "${o:--}" "$(rs_ratio "$r" "$m")" "$(rs_ratio "$r" "$o")"
    done
} | tee "$results/table.txt"
