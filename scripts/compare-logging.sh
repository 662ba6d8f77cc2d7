#!/usr/bin/env bash
# Message-logging overhead vs `none`: `reverb bench lat|bw --op send --log P` for every protocol
# at 8 B and 1 MiB, interleaved (every configuration once per round, N rounds) and best-of-N
# (lowest latency, highest bandwidth), then the logger-core placements for pessimistic-rb and
# causal. Prints one table with the overhead in % against `none`.
#
#   scripts/compare-logging.sh [rounds]        (default 5; env: REVERB=path/to/reverb,
#                                               RECV=named|any, LAT_ITERS, BW_ITERS,
#                                               REVERB_HEARTBEAT_MS, default 5000,
#                                               CONFIGS="causal:off causal:dedicated" to
#                                               run only those, none:off always included)
set -euo pipefail
ROUNDS=${1:-5}
REVERB=${REVERB:-target/release/reverb}
RECV=${RECV:-named}
LAT_ITERS=${LAT_ITERS:-}
# Logger cores share cpus with busy-polling ranks here: a slow heartbeat is not a death.
export REVERB_HEARTBEAT_MS=${REVERB_HEARTBEAT_MS:-5000}
BW_ITERS=${BW_ITERS:-}
[[ -x $REVERB ]] || { echo "no $REVERB: cargo build --release -p reverb" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

if [[ -n ${CONFIGS:-} ]]; then
    read -r -a CONFIGS <<<"none:off $CONFIGS"
else
    CONFIGS=(none:off pessimistic-rb:off pessimistic-sb:off causal:off
             pessimistic-rb:dedicated pessimistic-rb:shared-pinned pessimistic-rb:shared-unpinned
             causal:dedicated causal:shared-pinned causal:shared-unpinned)
fi

run() { # test config round
    local test=$1 mode=${2%%:*} placement=${2##*:} iters=()
    [[ $test == lat && -n $LAT_ITERS ]] && iters=(--iters "$LAT_ITERS")
    [[ $test == bw && -n $BW_ITERS ]] && iters=(--iters "$BW_ITERS")
    if ! "$REVERB" bench "$test" --op send --log "$mode" --logger "$placement" --recv "$RECV" \
        --sizes 8,1M --json "${iters[@]}" >>"$OUT/$test-$mode-$placement" 2>"$OUT/err"; then
        echo "failed: bench $test --log $mode --logger $placement" >&2
        cat "$OUT/err" >&2
    fi
}

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    for config in "${CONFIGS[@]}"; do
        run lat "$config"
        run bw "$config"
    done
done

python3 - "$OUT" "$RECV" "$ROUNDS" "${CONFIGS[@]}" <<'PY'
import json, os, sys
out, recv, rounds, configs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def best(test, config):
    mode, placement = config.split(":")
    path = os.path.join(out, f"{test}-{mode}-{placement}")
    res = {}
    if not os.path.exists(path):
        return res
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        size = row["bytes"]
        if test == "lat":
            v = row["t_typical_us"]
            res[size] = min(res.get(size, v), v)
        else:
            v = row["bw_avg_mib_s"]
            res[size] = max(res.get(size, v), v)
    return res
base_lat, base_bw = best("lat", "none:off"), best("bw", "none:off")
print(f"logging overhead vs none (best of {rounds}, interleaved; receive: {recv}; lat = median half round trip)")
print(f"{'protocol':<16} {'logger':<16} {'lat 8B us':>10} {'ovh':>7} {'lat 1M us':>10} {'ovh':>7} {'bw 8B MiB/s':>12} {'ovh':>7} {'bw 1M MiB/s':>12} {'ovh':>7}")
def pct(v, b, higher_better):
    if v is None or not b:
        return "n/a"
    o = (b - v) / b * 100 if higher_better else (v - b) / b * 100
    return f"{o:+.1f}%"
for config in configs:
    mode, placement = config.split(":")
    lat, bw = best("lat", config), best("bw", config)
    cells = []
    for d, base, hb in ((lat, base_lat, False), (bw, base_bw, True)):
        for size in (8, 1 << 20):
            v = d.get(size)
            cells.append(f"{v:>10.2f}" if v is not None else f"{'fail':>10}")
            cells.append(f"{pct(v, base.get(size), hb):>7}")
    print(f"{mode:<16} {placement:<16} {cells[0]} {cells[1]} {cells[2]} {cells[3]}   {cells[4]} {cells[5]}   {cells[6]} {cells[7]}")
print("overhead: latency (logged - none) / none; bandwidth (none - logged) / none")
PY
