#!/usr/bin/env bash
# Guest half of `scripts/reverb-scripts compare logging-verbs`: runs inside the rxe VM (ci/rxe-vm.sh), cwd =
# repo. `reverb bench lat|bw --op send --log P` over the verbs provider for P in none, causal,
# pessimistic-sb, pessimistic-rb, interleaved (every protocol once per round), $REPEAT rounds.
# Raw JSON lines go to $RESULTS/P-TEST-RECV-rN.json; the host half makes the table.
#
# Environment (set by `compare logging-verbs`): REVERB_BIN, RESULTS, LAT_ITERS, BW_ITERS,
# REPEAT, STEP_TIMEOUT, WAIT_MODE.
set -uo pipefail
reverb=${REVERB_BIN:?REVERB_BIN is not set}
out=${RESULTS:?RESULTS is not set}
dev=${RXE_LO_DEV:-rxe0}
export REVERB_VERBS_DEVICE=$dev REVERB_VERBS_GID_INDEX=${RXE_LO_GID:-1} REVERB_VERBS_PORT=1
# Logger threads share 2 vCPUs with busy-polling ranks and rxe softirqs: slow is not dead.
export REVERB_HEARTBEAT_MS=${REVERB_HEARTBEAT_MS:-10000}
tmo=${STEP_TIMEOUT:-180}
mkdir -p "$out"
log() { printf '[compare-logging-verbs guest] %s\n' "$*" >&2; }

one() { # name test recv args...
    local name=$1 test=$2 recv=$3
    shift 3
    if ! timeout "$tmo" "$reverb" bench "$test" --provider verbs --op send --recv "$recv" \
        --wait-mode "${WAIT_MODE:-poll}" --json --job-timeout-s "$tmo" "$@" \
        >"$out/$name.json" 2>"$out/$name.err"; then
        log "failed: $name"; tail -5 "$out/$name.err" >&2
    fi
}

for ((round = 1; round <= ${REPEAT:-3}; round++)); do
    for p in none causal pessimistic-sb pessimistic-rb; do
        log "[$round] lat $p named"
        one "$p-lat-named-r$round" lat named --log "$p" --sizes 8,64k,1M --iters "${LAT_ITERS:-300}"
        if [[ $p == causal || $p == none ]]; then
            log "[$round] lat $p any"
            one "$p-lat-any-r$round" lat any --log "$p" --sizes 8,64k,1M --iters "${LAT_ITERS:-300}"
        fi
        log "[$round] bw $p"
        one "$p-bw-named-r$round" bw named --log "$p" --sizes 1M --iters "${BW_ITERS:-50}"
    done
done
