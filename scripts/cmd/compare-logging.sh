# help: message-logging overhead against none on shm, every protocol and logger placement
# Message-logging overhead vs `none`: `reverb bench lat|bw --op send --log P` for every protocol
# at 8 B and 1 MiB (or SIZES), interleaved (every configuration once per round, N rounds) and
# best-of-N (lowest latency, highest bandwidth), then the logger-core placements for
# pessimistic-rb and causal. Prints one table with the overhead in % against `none`, and the
# raw provider (no LoggedEndpoint) as the last row.
#
#   scripts/reverb-scripts compare logging [rounds]        (default 5; env: REVERB_BIN=path/to/reverb,
#                                               SIZES=8,64k,1M (default 8,1M),
#                                               RECV=named|any, LAT_ITERS, BW_ITERS,
#                                               REVERB_HEARTBEAT_MS, default 5000,
#                                               CONFIGS="causal:off causal:dedicated" to
#                                               run only those, none:off always included)
ROUNDS=${1:-5}
RECV=${RECV:-named}
LAT_ITERS=${LAT_ITERS:-}
# Logger cores share cpus with busy-polling ranks here: a slow heartbeat is not a death.
export REVERB_HEARTBEAT_MS=${REVERB_HEARTBEAT_MS:-5000}
BW_ITERS=${BW_ITERS:-}
SIZES=${SIZES:-8,1M}
rs_build
REVERB=$reverb
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
    local logged=(--log "$mode" --logger "$placement" --recv "$RECV")
    [[ $mode == raw ]] && logged=()
    if ! "$REVERB" bench "$test" --op send "${logged[@]}" \
        --sizes "$SIZES" --json "${iters[@]}" >>"$OUT/$test-$mode-$placement" 2>"$OUT/err"; then
        echo "failed: bench $test ${logged[*]}" >&2
        cat "$OUT/err" >&2
    fi
}

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round/$ROUNDS" >&2
    for config in "${CONFIGS[@]}" raw:provider; do
        run lat "$config"
        run bw "$config"
    done
done

python3 - "$OUT" "$RECV" "$ROUNDS" "$SIZES" "${CONFIGS[@]}" raw:provider <<'PY'
import json, os, re, sys
out, recv, rounds, sizes, configs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
UNITS = {"": 1, "k": 1 << 10, "K": 1 << 10, "m": 1 << 20, "M": 1 << 20}
def parse(s):
    m = re.fullmatch(r"(\d+)([kKmM]?)", s.strip())
    if not m:
        sys.exit(f"SIZES: {s!r} is not a size like 8, 64k or 1M")
    return int(m.group(1)) * UNITS[m.group(2)], s.strip()
sizes = [parse(s) for s in sizes.split(",")]
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
head = [f"{'lat ' + name + ' us':>12} {'ovh':>7}" for _, name in sizes]
head += [f"{'bw ' + name + ' MiB/s':>14} {'ovh':>7}" for _, name in sizes]
print(f"{'protocol':<16} {'logger':<16} " + " ".join(head))
def pct(v, b, higher_better):
    if v is None or not b:
        return "n/a"
    o = (b - v) / b * 100 if higher_better else (v - b) / b * 100
    return f"{o:+.1f}%"
for config in configs:
    mode, placement = config.split(":")
    lat, bw = best("lat", config), best("bw", config)
    cells = []
    for d, base, hb, width in ((lat, base_lat, False, 12), (bw, base_bw, True, 14)):
        for size, _ in sizes:
            v = d.get(size)
            cells.append(f"{v:>{width}.2f}" if v is not None else f"{'fail':>{width}}")
            cells.append(f"{pct(v, base.get(size), hb):>7}")
    print(f"{mode:<16} {placement:<16} " + " ".join(cells))
print("overhead: latency (logged - none) / none; bandwidth (none - logged) / none")
PY
