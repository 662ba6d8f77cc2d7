# Shared by `compare shm` and `compare tcp` (scripts/cmd/, sourced after scripts/lib/common.sh):
# one ucx_perftest server/client pair per measurement, and the best-of-rounds table helpers.
# The caller sets core_a, core_b, results, compare_name, reverb, repeat, lat_sizes, bw_sizes,
# lat_iters, bw_iters, a `log` function and the UCX_* variables of its transport; it may define
# `round_extra` (run each round after reverb's). have_ucx is empty when ucx_perftest is not
# installed.

port=$((14000 + RANDOM % 20000))
have_ucx=$(command -v ucx_perftest || true)

# ucx TEST SIZE ITERS: one server + client pair; the client's CSV goes to
# $results/ucx-TEST-SIZE-ROUND.csv.
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
        echo "$compare_name: ucx_perftest -t $test -s $size failed:" >&2
        cat "$csv" >&2
        exit 1
    fi
    wait "$server" || true
}

join_sizes() { local IFS=,; echo "$*"; }

# Columns of ucx_perftest -v: iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,
# overall_bw,avg_mr,overall_mr (latency in us, one way; bandwidth in MB/s of 2^20 bytes).
# ucx_col TEST SIZE COLUMN low|high: the best over the rounds' final lines.
ucx_col() {
    [[ -n $have_ucx ]] || return 0
    # ucx_perftest right-aligns the iteration count: a short run's line starts with spaces.
    for f in "$results/ucx-$1-$2"-*.csv; do grep -E '^ *[0-9]+,' "$f" | tail -1 | tr -d ' ' | cut -d, -f"$3"; done |
        sort -g | { if [[ $4 == low ]]; then head -1; else tail -1; fi; }
}

# reverb_val FILE-PREFIX SIZE FIELD low|high: the best over the rounds.
reverb_val() {
    jq -r --argjson b "$2" "select(.bytes == \$b) | .$3" "$results/$1"-*.json |
        sort -g | { if [[ $4 == low ]]; then head -1; else tail -1; fi; }
}

human() {
    if (($1 >= 1048576)); then echo "$(($1 / 1048576)) MiB"
    elif (($1 >= 1024)); then echo "$(($1 / 1024)) KiB"
    else echo "$1 B"; fi
}

row() { # label reverb ucx better(low|high); UCX "-" when it did not run
    local better=lower
    [[ $4 == low ]] || better=higher
    if [[ -n $3 ]]; then
        local ratio
        ratio=$(rs_ratio "$2" "$3")
        printf '%-30s %12.3f %12.3f %9sx  (%s is better)\n' "$1" "$2" "$3" "${ratio:-0.00}" "$better"
    else
        printf '%-30s %12.3f %12s %10s  (%s is better)\n' "$1" "$2" - - "$better"
    fi
}

# The put/tag latency and bandwidth rows of both scripts' tables.
ratio_rows() {
    local s
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
}

# compare_rounds: $repeat rounds, each reverb's lat and bw (put, send), the caller's
# round_extra if any, then UCX's matching tests, interleaved so drift hits both sides alike.
compare_rounds() {
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
        if declare -F round_extra >/dev/null; then round_extra; fi
        [[ -n $have_ucx ]] || continue
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
}
