# help: reverb's MPI collectives against MPICH and Open MPI (allreduce, bcast, alltoall, barrier)
# benches/mpi/coll_bench.c built once by mpicc.mpich (run on MPICH and, with `reverb run --mpi`,
# on reverb) and once by Open MPI's mpicc: allreduce, bcast and alltoall at 8 B, 4 KiB, 64 KiB
# and 1 MiB and a barrier, on 2 and 4 ranks, µs per call (the slowest rank's). The three run
# interleaved, REPEAT rounds, each keeping its best. Prints a markdown table and the ratios
# (reverb / other: below 1 is faster); raw outputs in $RESULTS.
#
# Knobs (environment): REPEAT=2 RANKS="2 4" RESULTS=target/compare-mpi-coll. DEPS=0 skips
# ci/deps.sh. REVERB_BIN=path uses that reverb and the libmpich.so beside it.
repeat=${REPEAT:-2}
results=${RESULTS:-target/compare-mpi-coll}
[[ ${DEPS:-1} == 0 ]] || bash ci/deps.sh --compare
rs_build --mpi
mkdir -p "$results"
sides=(reverb)
command -v mpiexec.mpich >/dev/null && sides+=(mpich)
command -v mpirun.openmpi >/dev/null && command -v mpicc.openmpi >/dev/null && sides+=(ompi)
mpicc.mpich -O2 -Impi/include benches/mpi/coll_bench.c -o "$results/bench-mpich"
[[ " ${sides[*]} " == *" ompi "* ]] && mpicc.openmpi -O2 benches/mpi/coll_bench.c -o "$results/bench-ompi"

iters_for() { case $1 in 8 | 0) echo 5000 ;; 4096) echo 2000 ;; 65536) echo 500 ;; *) echo 100 ;; esac; }
# One measurement: SIDE NRANKS OP BYTES → µs per call.
measure() {
    local side=$1 n=$2 op=$3 bytes=$4 it
    it=$(iters_for "$bytes")
    case $side in
        reverb) timeout 120 "$reverb" run --mpi --no-prefix -n "$n" -- "$results/bench-mpich" "$op" "$bytes" "$it" ;;
        mpich) timeout 120 mpiexec.mpich -n "$n" "$results/bench-mpich" "$op" "$bytes" "$it" ;;
        ompi) timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -n "$n" "$results/bench-ompi" "$op" "$bytes" "$it" ;;
    esac 2>>"$results/stderr.log" | awk 'NF == 4 { v = $3 } END { print v }'
}
cases=()
for n in ${RANKS:-2 4}; do
    for op in allreduce bcast alltoall; do
        for b in 8 4096 65536 1048576; do cases+=("$n $op $b"); done
    done
    cases+=("$n barrier 0")
done
declare -A best
one_round() {
    local c side
    for c in "${cases[@]}"; do
        for side in $(rs_order "$1" "${sides[@]}"); do
            # shellcheck disable=SC2086 # the case's words are measure's arguments
            best["$c|$side"]=$(rs_better low "${best["$c|$side"]:-}" "$(measure "$side" $c)")
        done
    done
}
rs_rounds "$repeat" one_round
{
    echo "| ranks | op | bytes | reverb (µs) | MPICH (µs) | Open MPI (µs) | reverb / MPICH | reverb / Open MPI |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
    for c in "${cases[@]}"; do
        read -r n op b <<<"$c"
        r=${best["$c|reverb"]:-} m=${best["$c|mpich"]:-} o=${best["$c|ompi"]:-}
        echo "| $n | $op | $b | ${r:--} | ${m:--} | ${o:--} | $(rs_ratio "$r" "$m") | $(rs_ratio "$r" "$o") |"
    done
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$results/table.txt"
