# help: message-logging overhead on verbs in the soft-RoCE VM
# Message-logging overhead on verbs: scripts/guest/logging-verbs.sh in ONE boot of the
# soft-RoCE VM (ci/rxe-vm.sh, rxe0 over lo): `reverb bench lat --op send --sizes 8,64k,1M --log P`
# (--recv named; plus --recv any for none and causal) and `reverb bench bw --op send --sizes 1M
# --log P` for P in none causal pessimistic-sb pessimistic-rb, interleaved, best of $REPEAT
# (lowest median latency, highest average bandwidth). Prints the table with overhead vs none.
#
# Knobs (environment): REPEAT=3 LAT_ITERS=300 BW_ITERS=50 STEP_TIMEOUT=180 VM_TIMEOUT=900
# WAIT_MODE=poll RESULTS=target/compare-logging-verbs; REVERB_BIN=path skips the build.
rs_build --features verbs
results=$(realpath -m "${RESULTS:-target/compare-logging-verbs}")
mkdir -p "$results"
rm -f "$results"/*
case "$results" in
    "$PWD"/target/*) rw=() ;;
    *) rw=(--rw "$results") ;;
esac
export REVERB_BIN=$reverb RESULTS=$results REPEAT=${REPEAT:-3} LAT_ITERS=${LAT_ITERS:-300}
export BW_ITERS=${BW_ITERS:-50} STEP_TIMEOUT=${STEP_TIMEOUT:-180} WAIT_MODE=${WAIT_MODE:-poll}
RXE_VM_QUIET=1 bash ci/rxe-vm.sh --timeout "${VM_TIMEOUT:-900}" "${rw[@]}" -- \
    bash scripts/guest/logging-verbs.sh || echo "VM exited $?" >&2

python3 - "$results" <<'PY'
import json, glob, os, re, sys
out = sys.argv[1]
best = {}  # (proto, test, recv, size) -> value
for path in glob.glob(os.path.join(out, "*.json")):
    m = re.match(r"(.+)-(lat|bw)-(named|any)-r\d+\.json$", os.path.basename(path))
    if not m:
        continue
    proto, test, recv = m.groups()
    for line in open(path):
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        k = (proto, test, recv, row["bytes"])
        if test == "lat":
            v = row["t_typical_us"]; best[k] = min(best.get(k, v), v)
        else:
            v = row["bw_avg_mib_s"]; best[k] = max(best.get(k, v), v)
def cell(k, hb):
    v = best.get(k)
    b = best.get(("none",) + k[1:])
    if v is None:
        return f"{'fail':>9} {'':>7}"
    o = "n/a" if not b else f"{((b - v) if hb else (v - b)) / b * 100:+.1f}%"
    return f"{v:>9.2f} {o:>7}"
print("verbs (rxe0, soft-RoCE in the TCG VM): logging overhead vs none, best of rounds, interleaved")
print(f"{'protocol':<15} {'recv':<6} {'lat 8B us':>9} {'ovh':>7} {'lat 64K':>9} {'ovh':>7} {'lat 1M':>9} {'ovh':>7} {'bw 1M MiB/s':>11} {'ovh':>7}")
for proto in ("none", "causal", "pessimistic-sb", "pessimistic-rb"):
    for recv in ("named", "any"):
        if not any(k[0] == proto and k[2] == recv for k in best):
            continue
        cells = [cell((proto, "lat", recv, s), False) for s in (8, 65536, 1 << 20)]
        bw = cell((proto, "bw", recv, 1 << 20), True) if recv == "named" else f"{'':>9} {'':>7}"
        print(f"{proto:<15} {recv:<6} " + " ".join(cells) + "   " + bw)
print("lat: median half round trip (t_typical); overhead: (logged - none)/none, bw: (none - logged)/none")
PY
