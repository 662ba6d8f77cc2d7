# help: two reverb binaries side by side on the same benchmarks, interleaved
# Two builds of reverb side by side: the same benchmarks from an OLD and a NEW `reverb` binary,
# interleaved (every case from both binaries once per round, the order of the two alternating
# between rounds), N rounds. Prints per case the median of the rounds for each build and the
# ratio NEW/OLD (latency: below 1 is faster; bandwidth: above 1 is faster), then the best round
# of each build and their ratio.
# Used to show that a refactor costs nothing: shm put and tagged latency (8 B) and bandwidth
# (1 MiB), and the message-logging layer at 8 B (none, causal with named and any-source receives).
#
#   scripts/reverb-scripts compare builds OLD_REVERB NEW_REVERB [rounds]     (default 7 rounds)
#   COMPARE_CASES='send-lat-16K|lat --op send --sizes 16K' scripts/reverb-scripts compare builds ...
#     runs other cases instead (one `label|bench arguments` per line)
#   e.g. git worktree add /tmp/old HEAD~5, a release build of reverb there, then
#        scripts/reverb-scripts compare builds /tmp/old/target/release/reverb target/release/reverb 9
OLD=${1:?usage: compare builds OLD_REVERB NEW_REVERB [rounds]}
NEW=${2:?usage: compare builds OLD_REVERB NEW_REVERB [rounds]}
ROUNDS=${3:-7}
for bin in "$OLD" "$NEW"; do [[ -x $bin ]] || { echo "compare builds: $bin is not executable" >&2; exit 1; }; done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# Logged runs share both cores with busy-polling ranks: a slow heartbeat is not a death.
export REVERB_HEARTBEAT_MS=${REVERB_HEARTBEAT_MS:-5000}

CASES=(
    "put-lat-8|lat --op put --sizes 8"
    "send-lat-8|lat --op send --sizes 8"
    "put-bw-1M|bw --op put --sizes 1M"
    "send-bw-1M|bw --op send --sizes 1M"
    "log-none-lat-8|lat --op send --sizes 8 --log none"
    "log-causal-lat-8|lat --op send --sizes 8 --log causal"
    "log-causal-any-lat-8|lat --op send --sizes 8 --log causal --recv any"
)

if [[ -n ${COMPARE_CASES:-} ]]; then
    mapfile -t CASES <<<"$COMPARE_CASES"
fi

run_case() { # label binary-name args...
    local label=$1 name=$2 bin=$OLD
    [[ $name == new ]] && bin=$NEW
    shift 2
    # shellcheck disable=SC2068
    "$bin" bench $@ --cores 0,1 --json >>"$OUT/$label.$name.json"
}

one_round() { # round: every case from both binaries, which one first alternating
    local case label args side
    for case in "${CASES[@]}"; do
        label=${case%%|*} args=${case#*|}
        for side in $(rs_order "$1" old new); do run_case "$label" "$side" "$args"; done
    done
}
rs_rounds "$ROUNDS" one_round

python3 - "$OUT" "${CASES[@]}" <<'EOF'
import json, statistics, sys
out, cases = sys.argv[1], [c.split("|")[0] for c in sys.argv[2:]]
def metric(label, name):
    rows = [json.loads(l) for l in open(f"{out}/{label}.{name}.json") if l.strip()]
    lat = rows[0]["test"] == "lat"
    key = "t_typical_us" if lat else "bw_avg_mib_s"
    values = [r[key] for r in rows]
    best = min(values) if lat else max(values)
    return key, statistics.median(values), best, len(rows)
print(f"{'case':<22} {'metric':<14} {'old':>12} {'new':>12} {'new/old':>8}  rounds"
      f"  {'best old':>12} {'best new':>12} {'new/old':>8}")
for label in cases:
    key, old, old_best, n = metric(label, "old")
    _, new, new_best, _ = metric(label, "new")
    print(f"{label:<22} {key:<14} {old:>12.3f} {new:>12.3f} {new / old:>8.3f}  {n:>6}"
          f"  {old_best:>12.3f} {new_best:>12.3f} {new_best / old_best:>8.3f}")
EOF
