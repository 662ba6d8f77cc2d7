#!/usr/bin/env bash
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
# REVERB_BIN=path skips the build and uses that binary.
set -euo pipefail
cd "$(dirname "$0")/.."

core_a=${CORE_A:-0}
core_b=${CORE_B:-1}
lat_iters=${LAT_ITERS:-20000}
bw_iters=${BW_ITERS:-2000}
repeat=${REPEAT:-3}
results=${RESULTS:-target/compare-tcp}
lat_sizes=(8 4096 65536)
bw_sizes=(65536 1048576)

bash ci/deps.sh --compare
if [[ -n ${REVERB_BIN:-} ]]; then
    reverb=$REVERB_BIN
else
    cargo build --release -p reverb
    reverb=${CARGO_TARGET_DIR:-target}/release/reverb
fi
mkdir -p "$results"
rm -f "$results"/*.json "$results"/*.csv "$results"/*.log
export REVERB_PROVIDER=tcp

log() { printf '[compare-tcp] %s\n' "$*" >&2; }

# ---- UCX ---------------------------------------------------------------------------------
export UCX_TLS=tcp
# UCX picks the interface itself; on loopback only lo exists for 127.0.0.1.
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
port=$((14000 + RANDOM % 20000))

# ucx_perftest TEST SIZE ITERS: one server + client pair; prints the client's final CSV line.
ucx() {
    local test=$1 size=$2 iters=$3 warmup=$(($3 / 10)) server csv
    port=$((port + 1))
    taskset -c "$core_a" ucx_perftest -p "$port" >"$results/ucx-server-$test-$size-$round.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do
        ss -ltn "sport = :$port" | grep -q LISTEN && break
        sleep 0.05
    done
    csv="$results/ucx-$test-$size-$round.csv"
    if ! taskset -c "$core_b" timeout 300 ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
        -s "$size" -n "$iters" -w "$warmup" -f -v >"$csv" 2>&1; then
        kill "$server" 2>/dev/null || true
        echo "compare-tcp: ucx_perftest -t $test -s $size failed:" >&2
        cat "$csv" >&2
        exit 1
    fi
    wait "$server" || true
}

# ---- rounds: reverb, then UCX ------------------------------------------------------
join_sizes() { local IFS=,; echo "$*"; }
for round in $(seq "$repeat"); do
    for op in put send; do
        log "[$round/$repeat] reverb lat $op"
        "$reverb" bench lat --op "$op" --sizes "$(join_sizes "${lat_sizes[@]}")" \
            --iters "$lat_iters" --cores "$core_a,$core_b" --json \
            >"$results/reverb-lat-$op-$round.json"
        log "[$round/$repeat] reverb bw $op"
        "$reverb" bench bw --op "$op" --sizes "$(join_sizes "${bw_sizes[@]}")" \
            --iters "$bw_iters" --cores "$core_a,$core_b" --json \
            >"$results/reverb-bw-$op-$round.json"
    done
    for s in "${lat_sizes[@]}"; do
        log "[$round/$repeat] ucx ucp_put_lat / tag_lat $s"
        ucx ucp_put_lat "$s" "$lat_iters"
        ucx tag_lat "$s" "$lat_iters"
    done
    for s in "${bw_sizes[@]}"; do
        log "[$round/$repeat] ucx ucp_put_bw / tag_bw $s"
        ucx ucp_put_bw "$s" "$bw_iters"
        ucx tag_bw "$s" "$bw_iters"
    done
done

# ---- table -------------------------------------------------------------------------------
# Columns of ucx_perftest -v: iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,
# overall_bw,avg_mr,overall_mr (latency in us, one way; bandwidth in MB/s of 2^20 bytes).
# best TEST SIZE COLUMN low|high over the rounds' final lines.
ucx_col() {
    for f in "$results/ucx-$1-$2"-*.csv; do grep -E '^[0-9]+,' "$f" | tail -1 | cut -d, -f"$3"; done |
        sort -g | { if [[ $4 == low ]]; then head -1; else tail -1; fi; }
}
# best FILE-PREFIX SIZE FIELD low|high over the rounds.
reverb_val() {
    jq -r --argjson b "$2" "select(.bytes == \$b) | .$3" "$results/$1"-*.json |
        sort -g | { if [[ $4 == low ]]; then head -1; else tail -1; fi; }
}
human() {
    if (($1 >= 1048576)); then echo "$(($1 / 1048576)) MiB"
    elif (($1 >= 1024)); then echo "$(($1 / 1024)) KiB"
    else echo "$1 B"; fi
}

row() { # label reverb ucx better(low|high)
    awk -v l="$1" -v r="$2" -v u="$3" -v b="$4" 'BEGIN {
        ratio = (u > 0) ? r / u : 0
        printf "%-30s %12.3f %12.3f %9.2fx  (%s is better)\n", l, r, u, ratio, (b == "low" ? "lower" : "higher")
    }'
}

echo
echo "reverb tcp vs UCX tcp (loopback): $(nproc) cores, pinned $core_a/$core_b, best of $repeat rounds, load $(cut -d" " -f1-3 /proc/loadavg)"
printf '%-30s %12s %12s %10s\n' "metric" "reverb" "UCX" "reverb/UCX"
for s in "${lat_sizes[@]}"; do
    row "put lat $(human "$s") [us, median]" "$(reverb_val reverb-lat-put "$s" t_typical_us low)" \
        "$(ucx_col ucp_put_lat "$s" 2 low)" low
done
for s in "${lat_sizes[@]}"; do
    row "tag lat $(human "$s") [us, median]" "$(reverb_val reverb-lat-send "$s" t_typical_us low)" \
        "$(ucx_col tag_lat "$s" 2 low)" low
done
for s in "${bw_sizes[@]}"; do
    row "put bw $(human "$s") [MiB/s]" "$(reverb_val reverb-bw-put "$s" bw_avg_mib_s high)" \
        "$(ucx_col ucp_put_bw "$s" 6 high)" high
done
for s in "${bw_sizes[@]}"; do
    row "tag bw $(human "$s") [MiB/s]" "$(reverb_val reverb-bw-send "$s" bw_avg_mib_s high)" \
        "$(ucx_col tag_bw "$s" 6 high)" high
done
echo "raw outputs: $results"
