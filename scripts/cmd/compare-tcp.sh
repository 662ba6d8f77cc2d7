# help: tcp provider against UCX over tcp on loopback, pinned, interleaved
# reverb's tcp provider side by side with UCX over TCP (ucx_perftest with UCX_TLS=tcp) on the
# loopback interface, in one invocation on one machine, both sides pinned the same way: rank 0
# / the UCX server on CORE_A, rank 1 / the UCX client on CORE_B. Both sides busy-poll. Both
# emulate one-sided operations with messages the target's progress serves (UCX's tcp
# transport has no RDMA either). Prints one ratio table; the raw outputs stay in $RESULTS
# (default target/compare-tcp).
#
# Shared machines are noisy, so the whole set runs REPEAT times, reverb and UCX interleaved,
# and each side keeps its best round (lowest median latency, highest bandwidth): the same rule
# for both, so interference does not pick a winner.
#
# Knobs (environment): CORE_A=0 CORE_B=1 LAT_ITERS=20000 BW_ITERS=2000 REPEAT=3 RESULTS=...
# REVERB_BIN=path skips the build and uses that binary. DEPS=0 skips ci/deps.sh; then,
# without ucx_perftest, the UCX column shows "-".
core_a=${CORE_A:-0}
core_b=${CORE_B:-1}
lat_iters=${LAT_ITERS:-20000}
bw_iters=${BW_ITERS:-2000}
repeat=${REPEAT:-3}
results=${RESULTS:-target/compare-tcp}
lat_sizes=(8 4096 65536)
bw_sizes=(65536 1048576)

[[ ${DEPS:-1} == 0 ]] || bash ci/deps.sh --compare
rs_build
mkdir -p "$results"
rm -f "$results"/*.json "$results"/*.csv "$results"/*.log
export REVERB_PROVIDER=tcp

log() { printf '[compare-tcp] %s\n' "$*" >&2; }

# ---- UCX ---------------------------------------------------------------------------------
export UCX_TLS=tcp
# UCX picks the interface itself; on loopback only lo exists for 127.0.0.1.
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
compare_name=compare-tcp
# shellcheck source=scripts/lib/ucx-compare.sh
. scripts/lib/ucx-compare.sh

# ---- rounds: reverb, then UCX --------------------------------------------------------------
compare_rounds

# ---- table -------------------------------------------------------------------------------
echo
echo "reverb tcp vs UCX tcp (loopback): $(nproc) cores, pinned $core_a/$core_b, best of $repeat rounds, load $(cut -d" " -f1-3 /proc/loadavg)"
printf '%-30s %12s %12s %10s\n' "metric" "reverb" "UCX" "reverb/UCX"
ratio_rows
echo "raw outputs: $results"
