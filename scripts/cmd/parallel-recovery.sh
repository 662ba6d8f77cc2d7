# help: replay time of a killed process's objects against the helpers restoring them
# Parallel recovery on over-decomposed ranks (seed 000 §2.5): the stencil on N processes of V
# objects each (`reverb run --objects V`), one process SIGKILLed in the middle of a checkpoint
# interval (its first object kills itself after KILL_AT sends), its V objects restarted in P
# processes (`--parallel-recovery P`: its own core and P - 1 helpers' cores), interleaved
# (P = 1, 2, 4, 8, then again, ROUNDS rounds). Per V and P, the median over rounds of:
#   replay  the replay's duration: the largest `replay_ms` of the restarted objects (until the
#           last of them caught up with what the survivors saw);
#   recover SIGKILL to the end of that replay (restart, restore, replay).
# Then the speedup against P = 1 and the model's T_P in hours (`reverb model perf`, 64K sockets,
# its PR row) with sigma = that measured speedup and P helpers.
# Every run's checksum must equal the failure-free run's.
#
#   scripts/reverb-scripts parallel-recovery [rounds]   (default 3; env: PROCS=8, OBJECTS="2 4 8",
#                                            HELPERS="1 2 4 8", SIZE=2048, ITERS=200,
#                                            CKPT_EVERY=50, KILL_AT=190, REVERB_LOG=causal)
ROUNDS=${1:-3}
PROCS=${PROCS:-8}
OBJECTS=${OBJECTS:-"2 4 8"}
HELPERS=${HELPERS:-"1 2 4 8"}
SIZE=${SIZE:-2048}
ITERS=${ITERS:-200}
CKPT_EVERY=${CKPT_EVERY:-50}
KILL_AT=${KILL_AT:-190}
export REVERB_LOG=${REVERB_LOG:-causal} REVERB_CKPT=${REVERB_CKPT:-buddy} REVERB_CKPT_SLOT_BYTES=16M
rs_build --features fault-injection
REVERB=$reverb
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "cores: $(nproc); processes: $PROCS; stencil ${SIZE}x${SIZE}, $ITERS iterations, checkpoint every $CKPT_EVERY"

# One run: V P [fault] → "replay_ms recover_ms checksum" on stdout.
run_one() {
    local v=$1 p=$2 fault=${3:-} dir=$OUT/reports
    rm -rf "$dir" && mkdir -p "$dir"
    env REVERB_RUNTIME_REPORT="$dir" ${fault:+REVERB_FAULT=$fault} "$REVERB" run -n $((PROCS * v)) \
        --objects "$v" --parallel-recovery "$p" --respawn 1 --timeout 300 -- \
        "$REVERB" app stencil --iters "$ITERS" --size "$SIZE" --ckpt-every "$CKPT_EVERY" \
        >"$OUT/out.log" 2>&1 || { tail -n 20 "$OUT/out.log" >&2; exit 1; }
    local sum
    sum=$(sed -n 's/.*checksum: \([0-9a-f]\{16\}\).*/\1/p' "$OUT/out.log" | head -n 1)
    python3 - "$dir" "$sum" <<'PY'
import glob, json, os, sys
dir, checksum = sys.argv[1], sys.argv[2]
restarted = [json.load(open(f)) for f in glob.glob(dir + "/rank-*-inc-1.json")]
if not restarted:
    print(0, 0, checksum); sys.exit()
kill = int(open(os.path.join(dir, "kill.ns")).read())
replay = max(r["replay_ms"] for r in restarted)
recover = (max(r["replay_end_ns"] for r in restarted) - kill) / 1e6
print(f"{replay:.1f} {recover:.1f} {checksum}")
PY
}

declare -A replay recover
for v in $OBJECTS; do
    read -r _ _ want < <(run_one "$v" 1)
    for round in $(seq "$ROUNDS"); do
        for p in $HELPERS; do
            [ "$p" -le "$PROCS" ] || continue
            read -r r t sum < <(run_one "$v" "$p" "$v:$KILL_AT")
            [ "$sum" = "$want" ] || { echo "V=$v P=$p: checksum $sum, failure-free $want" >&2; exit 1; }
            replay[$v-$p]="${replay[$v-$p]:-} $r" recover[$v-$p]="${recover[$v-$p]:-} $t"
        done
    done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '%-4s %-4s %12s %12s %9s %14s\n' V P replay_ms recover_ms speedup model_T_P_h
for v in $OBJECTS; do
    base=$(echo "${replay[$v-1]}" | median)
    for p in $HELPERS; do
        [ -n "${replay[$v-$p]:-}" ] || continue
        r=$(echo "${replay[$v-$p]}" | median)
        t=$(echo "${recover[$v-$p]}" | median)
        s=$(echo "scale=2; $base / $r" | bc)
        tp=$("$REVERB" model perf --sockets 64K --sigma "$s" --parallelism "$p" --json | python3 -c '
import json, sys
row = json.load(sys.stdin)["rows"][0]
pr = next(x for x in row["protocols"] if x["protocol"] == "PR")
print(round(pr["time_s"] / 3600, 2))')
        printf '%-4s %-4s %12s %12s %9s %14s\n' "$v" "$p" "$r" "$t" "$s" "$tp"
    done
done
