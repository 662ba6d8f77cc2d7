#!/usr/bin/env bash
# Guest half of `scripts/reverb-scripts compare verbs`: runs inside the rxe VM (ci/rxe-vm.sh), chrooted into
# the host's root, cwd = repo. For every pair and size, perftest (server + client on $RXE_LO_DEV,
# RoCE v2 GID $RXE_LO_GID) then `reverb bench` over the verbs provider on the same device, same
# size, same iteration count and the same completion mode (busy polling: perftest's default;
# reverb --wait-mode poll). Then one ucx_perftest try over rc_verbs. Prints the ratio table.
#
# Every fork+exec costs ~0.25 s under TCG, so waits and parsing use bash builtins only (one awk
# for the table). Every process runs under `timeout`.
#
# Environment (set by `compare verbs`): REVERB_BIN, RESULTS (a writable dir, under target/),
# LAT_ITERS, BW_ITERS_64K, BW_ITERS_1M, REPEAT, STEP_TIMEOUT.
set -euo pipefail

reverb=${REVERB_BIN:?REVERB_BIN is not set}
out=${RESULTS:?RESULTS is not set}
dev=${RXE_LO_DEV:-rxe0}
gid=${RXE_LO_GID:-1}
lat_iters=${LAT_ITERS:-1000}
bw_iters_64k=${BW_ITERS_64K:-2000}
bw_iters_1m=${BW_ITERS_1M:-200}
tmo=${STEP_TIMEOUT:-120}
repeat=${REPEAT:-3}
lat_sizes=(8 4096 65536)
bw_sizes=(65536 1048576)
port=$((18600 + RANDOM % 1000))
export REVERB_VERBS_DEVICE=$dev REVERB_VERBS_GID_INDEX=$gid REVERB_VERBS_PORT=1
mkdir -p "$out"
results=$out/results.tsv
: >"$results"

# A sleep without a fork: read with a timeout from a FIFO nobody writes.
fifo=/tmp/compare-verbs.fifo
rm -f "$fifo"
mkfifo "$fifo"
exec 9<>"$fifo"
nap() { read -r -t "$1" -u 9 _ || true; }
log() { printf '[compare-verbs guest] %s\n' "$*" >&2; }

# listening PORT: is a TCP socket listening on PORT (builtins over /proc/net/tcp{,6})?
listening() {
    local hex local_addr st f
    printf -v hex ':%04X' "$1"
    for f in /proc/net/tcp /proc/net/tcp6; do
        while read -r _ local_addr _ st _; do
            [[ $local_addr == *"$hex" && $st == 0A ]] && return 0
        done <"$f"
    done
    return 1
}

# server_then_client NAME SERVER_CMD... -- CLIENT_CMD...: starts the server, waits (bounded)
# until it listens on $port, runs the client; both bounded by `timeout`. Logs to $out/NAME.*.
server_then_client() {
    local name=$1 srv=() cli=() i spid
    shift
    while [[ $1 != -- ]]; do srv+=("$1"); shift; done
    shift
    cli=("$@")
    timeout "$tmo" "${srv[@]}" >"$out/$name.srv" 2>&1 &
    spid=$!
    # Connecting before the server listens fails at once: perftest does not retry.
    for ((i = 0; i < 200; i++)); do
        listening "$port" && break
        nap 0.05
    done
    if ! timeout "$tmo" "${cli[@]}" >"$out/$name.log" 2>&1; then
        log "$name: client failed; client log:"
        cat "$out/$name.log" >&2
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        log "$name: server log:"
        cat "$out/$name.srv" >&2
        return 1
    fi
    wait "$spid" || log "$name: server exited $?"
}

# perftest BIN SIZE ITERS COLUMN: one server/client pair; records field COLUMN (0-based) of the
# client's result row (lat: 4 = t_typical, the median; bw: 3 = BW average, MiB/s).
perftest() {
    local bin=$1 size=$2 iters=$3 col=$4 line f
    port=$((port + 1))
    local args=("$bin" -d "$dev" -i 1 -x "$gid" -F -p "$port" -s "$size" -n "$iters")
    local name=pt-$bin-$size-r$round
    server_then_client "$name" "${args[@]}" -- "${args[@]}" 127.0.0.1 || return 1
    while read -r line; do
        read -r -a f <<<"$line"
        if [[ ${f[0]:-} == "$size" && ${f[1]:-} =~ ^[0-9]+$ && ${#f[@]} -gt $col ]]; then
            printf '%s\t%s\t%s\t%s\n' "$bin" "$size" perftest "${f[$col]}" >>"$results"
            return 0
        fi
    done <"$out/$name.log"
    log "no result row in $out/$name.log"
    return 1
}

# reverb KEY FIELD TEST OP SIZES ITERS ARGS...: one self-launched 2-rank job over verbs, JSON
# lines; records FIELD per size under KEY (the perftest binary it is compared with).
reverb() {
    local key=$1 field=$2 test=$3 op=$4 sizes=$5 iters=$6 line bytes
    shift 6
    local json=$out/reverb-$test-$op-${sizes//,/_}-r$round.json
    if ! timeout "$tmo" "$reverb" bench "$test" --provider verbs --op "$op" --sizes "$sizes" \
        --iters "$iters" --wait-mode poll --json --job-timeout-s "$tmo" "$@" >"$json" 2>"$json.err"; then
        log "reverb bench $test --op $op failed:"
        cat "$json.err" >&2
        return 1
    fi
    while read -r line; do
        [[ $line =~ \"bytes\":([0-9]+) ]] || continue
        bytes=${BASH_REMATCH[1]}
        [[ $line =~ \"$field\":([-0-9.eE+]+) ]] || continue
        printf '%s\t%s\t%s\t%s\n' "$key" "$bytes" reverb "${BASH_REMATCH[1]}" >>"$results"
    done <"$json"
}

{
    read -r cs </sys/devices/system/clocksource/clocksource0/current_clocksource || cs=?
    mhz=?
    while read -r line; do [[ $line == "cpu MHz"* ]] && { mhz=${line##*: }; break; }; done </proc/cpuinfo
    printf 'env\tdevice %s gid %s, clocksource %s, cpu MHz %s, vCPUs %s\n' "$dev" "$gid" "$cs" "$mhz" \
        "$(nproc)" >>"$results"
}

status=0
join() { local IFS=,; echo "$*"; }
# The whole set runs $repeat times, perftest and reverb interleaved; the table keeps each side's
# best round (lowest median latency, highest bandwidth): one rule for both, so a noisy moment in
# the VM (2 vCPUs shared by two busy-polling processes and rxe's softirqs) picks no winner.
for ((round = 1; round <= repeat; round++)); do
    # Latency, busy polling on both sides. perftest: median of -n iterations; reverb: median of
    # --iters measured iterations (after its default untimed warm-up of a tenth).
    for s in "${lat_sizes[@]}"; do
        log "[$round/$repeat] ib_write_lat / ib_send_lat / ib_read_lat $s B"
        perftest ib_write_lat "$s" "$lat_iters" 4 || status=1
        perftest ib_send_lat "$s" "$lat_iters" 4 || status=1
        perftest ib_read_lat "$s" "$lat_iters" 4 || status=1
    done
    log "[$round/$repeat] reverb bench lat --op put / send / get"
    reverb ib_write_lat t_typical_us lat put "$(join "${lat_sizes[@]}")" "$lat_iters" || status=1
    reverb ib_send_lat t_typical_us lat send "$(join "${lat_sizes[@]}")" "$lat_iters" || status=1
    reverb ib_read_lat t_typical_us lat get "$(join "${lat_sizes[@]}")" "$lat_iters" || status=1

    # Bandwidth: perftest's defaults (tx depth 128, a completion every 100 writes), so reverb
    # runs with --window 128 --cq-mod 100. Fewer iterations at 1 MiB to bound the time.
    log "[$round/$repeat] ib_write_bw 64 KiB, 1 MiB; reverb bench bw --op put"
    perftest ib_write_bw 65536 "$bw_iters_64k" 3 || status=1
    perftest ib_write_bw 1048576 "$bw_iters_1m" 3 || status=1
    reverb ib_write_bw bw_avg_mib_s bw put 65536 "$bw_iters_64k" --window 128 --cq-mod 100 || status=1
    reverb ib_write_bw bw_avg_mib_s bw put 1048576 "$bw_iters_1m" --window 128 --cq-mod 100 || status=1
done

# ucx_perftest over rc_verbs (UCT level: no UD wire-up transport needed), put latency 8 B.
log "ucx_perftest -x rc_verbs -t put_lat 8 B"
port=$((port + 1))
ucx=(ucx_perftest -d "$dev:1" -x rc_verbs -t put_lat -s 8 -n "$lat_iters" -p "$port")
if UCX_IB_GID_INDEX=$gid server_then_client ucx-rc_verbs-put_lat "${ucx[@]}" -- "${ucx[@]}" 127.0.0.1; then
    f=()
    while read -r -a l; do [[ ${l[0]:-} == Final: ]] && f=("${l[@]}"); done <"$out/ucx-rc_verbs-put_lat.log"
    # "Final:" iterations, 50.0%ile, average, overall latency (us, one way), bandwidth, rate.
    printf 'ucx\t%s\n' "${f[2]:-?}" >>"$results"
else
    printf 'ucx\tFAILED\n' >>"$results"
fi

# ---- table -----------------------------------------------------------------------------
awk -F'\t' -v rounds="$repeat" -v li="$lat_iters" -v b64="$bw_iters_64k" -v b1m="$bw_iters_1m" '
    $1 == "env" { env = $2; next }
    $1 == "ucx" { ucx = $2; next }
    {   # best round per key: lowest and highest value
        k = $1 FS $2 FS $3
        if (!(k in lo) || $4 + 0 < lo[k]) lo[k] = $4 + 0
        if (!(k in hi) || $4 + 0 > hi[k]) hi[k] = $4 + 0
    }
    function human(b) { return b >= 1048576 ? b / 1048576 " MiB" : b >= 1024 ? b / 1024 " KiB" : b " B" }
    function row(pt, label, size, unit, better,    r, p, ratio, ok) {
        if (better == "low") { r = lo[pt FS size FS "reverb"]; p = lo[pt FS size FS "perftest"] }
        else { r = hi[pt FS size FS "reverb"]; p = hi[pt FS size FS "perftest"] }
        ratio = (r != "" && p > 0) ? r / p : 0
        if (better == "low") ok = (ratio > 0 && ratio <= 1.02) ? "yes" : "no"
        else ok = (ratio >= 0.98) ? "yes" : "no"
        printf "%-46s %10s %10s %8.3fx  %s (%s)\n", label " " human(size) " [" unit "]", \
            r == "" ? "-" : sprintf("%.2f", r), p == "" ? "-" : sprintf("%.2f", p), ratio, ok, \
            better == "low" ? "target <= 1.02x" : "target >= 0.98x"
    }
    END {
        print ""
        print "reverb verbs vs perftest on soft-RoCE: " env
        printf "best of %d rounds; latency: %d iterations, busy poll both sides (reverb --wait-mode poll); bw: %d (64 KiB) / %d (1 MiB) writes, window 128, cq-mod 100\n", rounds, li, b64, b1m
        printf "%-46s %10s %10s %9s\n", "metric", "reverb", "perftest", "reverb/pt"
        split("8 4096 65536", ls, " ")
        for (i = 1; i <= 3; i++) row("ib_write_lat", "put lat vs ib_write_lat", ls[i], "us, median", "low")
        for (i = 1; i <= 3; i++) row("ib_send_lat", "send lat vs ib_send_lat", ls[i], "us, median", "low")
        for (i = 1; i <= 3; i++) row("ib_read_lat", "get lat vs ib_read_lat", ls[i], "us, median", "low")
        row("ib_write_bw", "put bw vs ib_write_bw", 65536, "MiB/s", "high")
        row("ib_write_bw", "put bw vs ib_write_bw", 1048576, "MiB/s", "high")
        if (ucx == "FAILED") print "ucx_perftest -x rc_verbs -t put_lat 8 B: FAILED (logs: ucx-rc_verbs-put_lat.*)"
        else printf "ucx_perftest -x rc_verbs -t put_lat 8 B: ran, median %s us (ib_write_lat 8 B: %.2f us)\n", ucx, lo["ib_write_lat" FS 8 FS "perftest"]
    }' "$results" | tee "$out/table.txt"
exit "$status"
