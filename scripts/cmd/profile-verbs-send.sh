# help: user-space instructions per 8 B round trip on rxe, reverb against perftest (VM)
# User-space instructions per 8 B send/receive round trip on rxe, reverb against perftest: both
# ping-pongs run in the soft-RoCE VM in event mode (blocking waits, so no spin is counted), the
# initiating side under callgrind at two iteration counts; the difference over the difference in
# iterations is the work per round trip (one send and one receive), the start-up cancelling out.
# Prints the two counts and reverb's inclusive split (send path, completion polling, matching).
#
#   scripts/reverb-scripts profile-verbs-send [N1 N2]     (default 500 2500; builds reverb --features verbs)
N1=${1:-500} N2=${2:-2500}
rs_build --features verbs
out=target/profile-verbs-send
rm -rf "$out"
mkdir -p "$out"
cat >"$out/guest.sh" <<GUEST
set -euo pipefail
export REVERB_PROVIDER=verbs REVERB_VERBS_DEVICE=rxe0 REVERB_WAIT_MODE=event REVERB_JOB_TOKEN=profile
export REVERB_SIZE=2 REVERB_RANKS_PER_NODE=1 REVERB_LOCAL_RANK=0
bench=($reverb bench lat --op send --sizes 8 --warmup 0 --wait-mode event)
for n in $N1 $N2; do
    port=\$((7600 + n % 1000))
    REVERB_RANK=1 REVERB_NODE=1 REVERB_ROOT=127.0.0.1:\$port REVERB_JOB_ID=p\$n "\${bench[@]}" --iters \$n >/dev/null 2>&1 &
    REVERB_RANK=0 REVERB_NODE=0 REVERB_ROOT=127.0.0.1:\$port REVERB_JOB_ID=p\$n \
        valgrind --tool=callgrind --callgrind-out-file=$out/reverb-\$n.out "\${bench[@]}" --iters \$n >/dev/null 2>&1
    wait
    ib_send_lat -d rxe0 -x "\$RXE_LO_GID" -e -n \$n -s 8 -p \$((18000 + n % 1000)) >/dev/null 2>&1 &
    sleep 1
    valgrind --tool=callgrind --callgrind-out-file=$out/perftest-\$n.out \
        ib_send_lat -d rxe0 -x "\$RXE_LO_GID" -e -n \$n -s 8 -p \$((18000 + n % 1000)) 127.0.0.1 >/dev/null 2>&1
    wait
done
GUEST
RXE_VM_QUIET=1 bash ci/rxe-vm.sh --timeout 900 -- bash "$out/guest.sh" >&2
python3 - "$out" "$N1" "$N2" <<'PY'
import collections, re, subprocess, sys
out, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(path):
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(?!=>)(.*)$", line)
        if m:
            counts[re.sub(r" \[.*$", "", m.group(2))] += int(m.group(1).replace(",", ""))
    return counts
def per_trip(tool):
    a, b = load(f"{out}/{tool}-{n1}.out"), load(f"{out}/{tool}-{n2}.out")
    return {k: (b[k] - a.get(k, 0)) / (n2 - n1) for k in b}
def find(table, needle):
    return max((v for k, v in table.items() if k.endswith(needle)), default=0.0)
r, p = per_trip("reverb"), per_trip("perftest")
# Both sort their latency samples at the end (n log n): not per-message work.
sort_r = find(r, "quicksort::quicksort'2")
sort_p = find(p, "qsort")
total_r = find(r, "PROGRAM TOTALS") - sort_r
total_p = find(p, "PROGRAM TOTALS") - sort_p
print(f"user-space instructions per 8 B round trip (send + receive), event mode:")
print(f"  perftest ib_send_lat -e   {total_p:7.0f}")
print(f"  reverb bench lat --op send {total_r:7.0f}   ({total_r / total_p:.2f}x)")
for label, needle in [("start_send (encode, TX slot, post)", "VerbsProvider>::start_send"),
                      ("  of which post_list (ibv_post_send, rxe's provider)", "VerbsProvider>::post_list"),
                      ("poll_cq (all calls)", "VerbsProvider>::poll_cq"),
                      ("TaggedState::on_eager (match, copy, completion)", "TaggedState::on_eager"),
                      ("SRQ repost", "SharedReceiveQueue::post"),
                      ("block (arm CQ, wait for the event)", "VerbsProvider as reverb_transport::api::Provider>::block")]:
    print(f"    {label:55s} {find(r, needle):7.0f}")
PY
