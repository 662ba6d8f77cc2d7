# help: shm provider against UCX shared memory and memcpy, pinned, interleaved
# reverb's shm provider side by side with UCX shared memory (ucx_perftest over
# UCX_TLS=posix,sysv,cma,self), in one invocation on one machine, both sides pinned the same
# way: rank 0 / the UCX server on CORE_A, rank 1 / the UCX client on CORE_B. Both sides
# busy-poll. memcpy on one core is the physical reference. Prints one ratio table; the raw
# outputs stay in $RESULTS (default target/compare-shm).
#
# Shared machines are noisy, so the whole set runs REPEAT times, reverb and UCX interleaved,
# and each side keeps its best round (lowest median latency, highest bandwidth): the same rule
# for both, so interference does not pick a winner.
#
# Knobs (environment): CORE_A=0 CORE_B=1 LAT_ITERS=100000 BW_ITERS=20000 REPEAT=3 RESULTS=...
# REVERB_BIN=path skips the build and uses that binary. QUICK=1: REPEAT=1 LAT_ITERS=20000
# BW_ITERS=2000 (what `headline` runs). DEPS=0 skips ci/deps.sh; then, without ucx_perftest,
# the UCX column shows "-".
core_a=${CORE_A:-0}
core_b=${CORE_B:-1}
quick=${QUICK:-}
lat_iters=${LAT_ITERS:-${quick:+20000}}
lat_iters=${lat_iters:-100000}
bw_iters=${BW_ITERS:-${quick:+2000}}
bw_iters=${bw_iters:-20000}
repeat=${REPEAT:-${quick:+1}}
repeat=${repeat:-3}
results=${RESULTS:-target/compare-shm}
lat_sizes=(8 4096 65536)
bw_sizes=(65536 1048576)

[[ ${DEPS:-1} == 0 ]] || bash ci/deps.sh --compare
rs_build
mkdir -p "$results"
rm -f "$results"/*.json "$results"/*.csv "$results"/*.log

log() { printf '[compare-shm] %s\n' "$*" >&2; }

# ---- UCX ---------------------------------------------------------------------------------
export UCX_TLS=posix,sysv,cma,self
compare_name=compare-shm
# shellcheck source=scripts/lib/ucx-compare.sh
. scripts/lib/ucx-compare.sh

# ---- rounds: reverb, memcpy, then UCX ------------------------------------------------------
round_extra() {
    log "[$round/$repeat] memcpy"
    taskset -c "$core_a" "$reverb" bench memcpy --sizes "$(join_sizes "${bw_sizes[@]}")" \
        --json >"$results/memcpy-$round.json"
}
compare_rounds

# ---- table -------------------------------------------------------------------------------
echo
echo "reverb shm vs UCX shm: $(nproc) cores, pinned $core_a/$core_b, best of $repeat rounds, load $(cut -d" " -f1-3 /proc/loadavg)"
printf '%-30s %12s %12s %10s\n' "metric" "reverb" "UCX" "reverb/UCX"
ratio_rows
for s in "${bw_sizes[@]}"; do
    printf '%-30s %12.1f %12s   (hot: same buffers; cold: %s)\n' \
        "memcpy $(human "$s") [MiB/s]" "$(reverb_val memcpy "$s" hot_mib_s high)" "-" \
        "$(printf '%.1f' "$(reverb_val memcpy "$s" cold_mib_s high)")"
done
echo "raw outputs: $results"
