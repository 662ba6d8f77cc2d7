# help: Intel MPI Benchmarks (IMB-MPI1, or IMB-RMA) on reverb, MPICH and Open MPI, interleaved, with ratios
# The Intel MPI Benchmarks' IMB-MPI1 side by side on reverb's MPI library, Debian's MPICH and
# Open MPI, in one invocation on one machine: IMB built once by mpicc.mpich (that binary runs
# on MPICH and, under `reverb run --mpi`, on reverb) and once by Open MPI's wrappers; each
# benchmark at each rank count, the three sides interleaved (their order rotating by round),
# REPEAT rounds keeping each side's best. Prints one table: time in us (t_avg, or PingPong's
# t; lower is better) or MB/s (Uniband, Biband; higher is better) per benchmark, ranks and
# size, and the ratios reverb / MPICH and reverb / Open MPI (also as markdown, $RESULTS/table.md,
# which docs/benchmarks-imb.md shows). Raw outputs in $RESULTS.
#
# Needs IMB's sources: IMB_SRC=DIR, a directory with IMB's build.sh (`build.sh mpich|openmpi
# OUT`), e.g. the external suite beside the repository in CI. Built once into $RESULTS.
# Knobs (environment): NPS="2 4 8" REPEAT=1 TIME=0.5 (IMB's -time: seconds per size at most)
# BENCHES="PingPong Uniband Biband Sendrecv Exchange Allreduce Reduce Bcast Allgather Alltoall
# Barrier" LENGTHS="1 8 64 1024 4096 8192 65536 1048576" RESULTS=target/compare-imb
# QUICK=1: NPS=2, TIME=0.2. SUITE=RMA: IMB-RMA instead (its non-aggregate mode: each
# operation completed by a flush before the next, as osu_put_latency), NPS=2, LENGTHS="8 65536
# 1048576 4194304", BENCHES every IMB-RMA benchmark (Truly_passive_put prints no column the
# table takes: it only has to complete). DEPS=0 skips ci/deps.sh; a side whose MPI is not installed, or that
# fails a benchmark, shows "-" (its log is in $RESULTS). REVERB_BIN=path uses that reverb and
# the libmpich.so beside it.
quick=${QUICK:-}
imb_src=${IMB_SRC:?IMB_SRC=DIR: the directory of the build.sh of the Intel MPI Benchmarks}
suite=${SUITE:-MPI1}
[[ $suite == MPI1 || $suite == RMA ]] || rs_die "SUITE=$suite: MPI1 or RMA"
rma=$([[ $suite == RMA ]] && echo 1 || true)
nps=${NPS:-${quick:+2}}
nps=${nps:-${rma:+2}}
nps=${nps:-2 4 8}
repeat=${REPEAT:-1}
imb_time=${TIME:-${quick:+0.2}}
imb_time=${imb_time:-0.5}
if [[ -n $rma ]]; then
    benches=${BENCHES:-Unidir_put Unidir_get Bidir_put Bidir_get One_put_all One_get_all All_put_all All_get_all \
        Put_local Put_all_local Exchange_put Exchange_get Accumulate Get_accumulate Fetch_and_op Compare_and_swap \
        Get_local Get_all_local Truly_passive_put}
    lengths=${LENGTHS:-8 65536 1048576 4194304}
    extra=(-aggregate_mode non_aggregate)
else
    benches=${BENCHES:-PingPong Uniband Biband Sendrecv Exchange Allreduce Reduce Bcast Allgather Alltoall Barrier}
    lengths=${LENGTHS:-1 8 64 1024 4096 8192 65536 1048576}
    extra=()
fi
results=${RESULTS:-target/compare-imb}
[[ ${DEPS:-1} == 0 ]] || bash ci/deps.sh --compare
rs_build --mpi
mkdir -p "$results"
results=$(realpath "$results")
rm -f "$results"/run-*.log "$results"/values-*.txt

sides=(reverb)
command -v mpiexec.mpich >/dev/null && sides+=(mpich)
command -v mpirun.openmpi >/dev/null && command -v mpicc.openmpi >/dev/null && sides+=(ompi)
[[ -x $results/imb-mpich/IMB-$suite ]] || bash "$imb_src/build.sh" mpich "$results/imb-mpich" >&2
if [[ " ${sides[*]} " == *" ompi "* && ! -x $results/imb-openmpi/IMB-$suite ]]; then
    bash "$imb_src/build.sh" openmpi "$results/imb-openmpi" >&2
fi
tr ' ' '\n' <<<"$lengths" >"$results/lengths.txt"

# imb_values: IMB's output → "benchmark ranks bytes value" lines, the value the column that
# ranks the benchmark (t_avg[usec], else t[usec], else Mbytes/sec).
imb_values() {
    awk '
        /^# Benchmarking / { bench = $3 }
        /^# #processes = / { np = $4 }
        $1 ~ /^#(bytes|repetitions)$/ {
            col = 0; bytes_col = ($1 == "#bytes")
            for (i = 1; i <= NF; i++) if ($i == "t_avg[usec]") col = i
            if (!col) for (i = 1; i <= NF; i++) if ($i == "t[usec]") col = i
            if (!col) for (i = 1; i <= NF; i++) if ($i == "Mbytes/sec") col = i
            next
        }
        col && $1 ~ /^[0-9]+$/ && $col ~ /^[0-9.]+$/ { print bench, np, (bytes_col ? $1 : 0), $col }
        /^$/ { col = 0 }
    '
}

# One run: SIDE NRANKS BENCH → its value lines appended to values-SIDE.txt.
run_imb() {
    local side=$1 n=$2 bench=$3 log=$results/run-$1-$2-$3.log
    local args=("$bench" -npmin "$n" -msglen "$results/lengths.txt" -time "$imb_time" "${extra[@]}")
    local rc=0
    case $side in
        reverb) timeout 600 "$reverb" run --mpi --no-prefix -n "$n" -- "$results/imb-mpich/IMB-$suite" "${args[@]}" ;;
        mpich) timeout 600 mpiexec.mpich -n "$n" "$results/imb-mpich/IMB-$suite" "${args[@]}" ;;
        ompi) timeout 600 mpirun.openmpi --allow-run-as-root --oversubscribe -n "$n" \
            "$results/imb-openmpi/IMB-$suite" "${args[@]}" ;;
    esac >>"$log" 2>&1 || rc=$?
    if ((rc != 0)); then
        rs_log "$side: IMB-$suite $bench on $n ranks failed (exit $rc): $log"
        return
    fi
    imb_values <"$log" >>"$results/values-$side.txt"
}

one_round() {
    local n bench side
    for n in $nps; do
        for bench in $benches; do
            for side in $(rs_order "$1" "${sides[@]}"); do
                rs_log "[$1/$repeat] $side: $bench on $n ranks"
                run_imb "$side" "$n" "$bench"
            done
        done
    done
}
rs_rounds "$repeat" one_round

# Each side's best per (benchmark, ranks, bytes): highest MB/s for Uniband/Biband, else lowest
# time; then one row per key of any side, with the ratios.
higher='Uniband Biband'
best() {
    awk -v higher="$higher" '
        BEGIN { n = split(higher, h, " "); for (i = 1; i <= n; i++) hi[h[i]] = 1 }
        { k = $1 " " $2 " " $3
          if (!(k in v) || (hi[$1] ? $4 > v[k] : $4 < v[k])) v[k] = $4 }
        END { for (k in v) print k, v[k] }
    ' "$results/values-$1.txt" 2>/dev/null
}
declare -A val
keys=()
for side in "${sides[@]}"; do
    while read -r b n s v; do
        [[ -n ${val["$b $n $s|reverb"]+x}${val["$b $n $s|mpich"]+x}${val["$b $n $s|ompi"]+x} ]] || keys+=("$b $n $s")
        val["$b $n $s|$side"]=$v
    done < <(best "$side")
done
echo
title="IMB-$suite: reverb vs MPICH vs Open MPI; $(rs_stamp); best of $repeat round(s), -time $imb_time"
echo "$title"
# The same rows in markdown, for docs/benchmarks-imb.md (the day and the machine: the docs
# name no commit or clock time).
printf 'Measured by `compare imb` on %s: %s; best of %s round(s), -time %s.\n\n| benchmark | ranks | bytes | reverb | MPICH | Open MPI | reverb / MPICH | reverb / Open MPI | unit |\n' \
    "$(date -u +%F)" "$(rs_machine)" "$repeat" "$imb_time" >"$results/table.md"
echo '|---|---:|---:|---:|---:|---:|---:|---:|---|' >>"$results/table.md"
printf '%-10s %5s %9s %12s %12s %12s %13s %14s\n' benchmark ranks bytes reverb MPICH "Open MPI" reverb/MPICH reverb/OpenMPI
for bench in $benches; do
    for k in "${keys[@]}"; do
        [[ $k == "$bench "* ]] || continue
        echo "$k"
    done | sort -k2,2n -k3,3n | while read -r b n s; do
        r=${val["$b $n $s|reverb"]:-} m=${val["$b $n $s|mpich"]:-} o=${val["$b $n $s|ompi"]:-}
        unit=us
        [[ " $higher " == *" $b "* ]] && unit=MB/s
        row=("$b" "$n" "$s" "${r:--}" "${m:--}" "${o:--}" "$(rs_ratio "${r:-}" "${m:-}")" \
            "$(rs_ratio "${r:-}" "${o:-}")" "$unit")
        printf '%-10s %5s %9s %12s %12s %12s %13s %14s  %s\n' "${row[@]}"
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "${row[@]}" >>"$results/table.md"
    done
done | tee "$results/table.txt"
echo "raw outputs: $results"
