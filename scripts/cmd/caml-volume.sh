# help: collective-aware logging against plain sender logging: logged bytes, peaks, time
# Collective-aware logging (REVERB_LOG_CAML, seed 000 ch. 6) against plain sender logging, on
# three collective-heavy programs, interleaved (CAML off, on, off, on ... ROUNDS rounds):
#   app        `reverb app collectives` (every rank multicasts its cell to all, then an
#              all-reduce; the runtime's collectives), 8 ranks in 4 nodes of 2;
#   multicast  examples/mpi/collectives_ft.c (LeanMD-like: MPI_Bcast of each rank's cell over
#              its neighbourhood, then an MPI_Allreduce), 8 ranks, one per node;
#   solver     the same program's solver (an MPI_Allreduce of the vector per iteration).
# Per program and setting: the payload bytes the protocol logged (all ranks, from the runtime
# reports: identical every round), the stubs logged, the all-reduce contributions' bytes CAML
# dropped once summed, the sender logs' peaks (each rank's largest, sampled before each
# checkpoint's GC and at the end, summed over ranks) and the best wall time; then the
# reduction in logged bytes and the time ratio (CAML / plain). Checksums must agree.
#
#   scripts/reverb-scripts caml-volume [rounds]    (default 3; env: REVERB_LOG=causal, BYTES=4096,
#                                       ITERS=40, APP_ITERS=24;
#                                       REVERB_BIN=path skips the build)
ROUNDS=${1:-3}
MODE=${REVERB_LOG:-causal}
BYTES=${BYTES:-4096}
ITERS=${ITERS:-40}
APP_ITERS=${APP_ITERS:-24}
rs_build --mpi
REVERB=$reverb
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc.mpich -std=c11 -O2 -Impi/include examples/mpi/collectives_ft.c -o "$OUT/collectives_ft"

# One run: NAME CAML → "bytes stubs seconds checksum" on stdout.
run_one() {
    local name=$1 caml=$2 dir=$OUT/reports start end
    rm -rf "$dir" && mkdir -p "$dir"
    start=$(date +%s.%N)
    case $name in
        app) env REVERB_RUNTIME_REPORT="$dir" "$REVERB" run -n 8 --ranks-per-node 2 -- \
                "$REVERB" app collectives --iters "$APP_ITERS" --size "$BYTES" --ckpt-every 8 ;;
        multicast) env REVERB_RUNTIME_REPORT="$dir" "$REVERB" run --mpi -n 8 --ranks-per-node 1 -- \
                "$OUT/collectives_ft" multicast "$ITERS" 10 "$BYTES" 8 ;;
        solver) env REVERB_RUNTIME_REPORT="$dir" "$REVERB" run --mpi -n 8 --ranks-per-node 1 -- \
                "$OUT/collectives_ft" solver "$ITERS" 10 "$BYTES" 8 ;;
    esac >"$OUT/out.log" 2>&1 || { tail -n 20 "$OUT/out.log" >&2; exit 1; }
    end=$(date +%s.%N)
    local sum
    sum=$(sed -n 's/.*checksum:\{0,1\} \([0-9a-f]\{16\}\).*/\1/p' "$OUT/out.log" | head -n 1)
    python3 - "$dir" "$(echo "$end - $start" | bc)" "$sum" <<'EOF'
import glob, json, sys
dir, secs, checksum = sys.argv[1], sys.argv[2], sys.argv[3]
reports = [json.load(open(f)) for f in glob.glob(dir + "/rank-*.json")]
total = lambda field: sum(r[field] for r in reports)
print(total("payload_bytes_logged"), total("multicast_stubs_logged"), total("contribution_bytes_dropped"),
      total("send_log_peak_bytes"), secs, checksum)
EOF
}

export REVERB_LOG=$MODE REVERB_CKPT=buddy
declare -A bytes stubs dropped peak best sums
for round in $(seq "$ROUNDS"); do
    for name in app multicast solver; do
        for caml in 0 1; do
            read -r b s d p t c < <(REVERB_LOG_CAML=$caml run_one "$name" "$caml")
            key=$name-$caml
            bytes[$key]=$b stubs[$key]=$s dropped[$key]=$d peak[$key]=$p sums[$key]=$c
            if [[ -z ${best[$key]:-} ]] || (($(echo "$t < ${best[$key]}" | bc))); then best[$key]=$t; fi
        done
    done
    echo "round $round done" >&2
done
printf '%-10s %13s %13s %7s %7s %10s %11s %11s %8s %8s %6s\n' program "logged plain" "logged CAML" \
    stubs less dropped "peak plain" "peak CAML" "plain s" "CAML s" time
for name in app multicast solver; do
    [[ ${sums[$name-0]} == "${sums[$name-1]}" ]] ||
        { echo "$name: checksums differ (${sums[$name-0]} vs ${sums[$name-1]})" >&2; exit 1; }
    less=$(echo "scale=1; 100 * (${bytes[$name-0]} - ${bytes[$name-1]}) / ${bytes[$name-0]}" | bc)
    ratio=$(echo "scale=2; ${best[$name-1]} / ${best[$name-0]}" | bc)
    printf '%-10s %13s %13s %7s %6s%% %10s %11s %11s %8.2f %8.2f %6s\n' "$name" "${bytes[$name-0]}" \
        "${bytes[$name-1]}" "${stubs[$name-1]}" "$less" "${dropped[$name-1]}" "${peak[$name-0]}" \
        "${peak[$name-1]}" "${best[$name-0]}" "${best[$name-1]}" "$ratio"
done
echo "(REVERB_LOG=$MODE, $BYTES-byte cells, best of $ROUNDS rounds; checksums agree)"
