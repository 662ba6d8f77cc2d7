#!/usr/bin/env bash
# Guest half of `scripts/reverb-scripts compare rma-verbs`: runs inside the rxe VM
# (ci/rxe-vm.sh), chrooted into the host's root, cwd = repo. Per round, interleaved: perftest's
# ib_write_lat and ib_read_lat at 8 B (server + client on $RXE_LO_DEV), then MPI_Put and MPI_Get
# 8 B latency (benches/mpi/mpi_bench.c put_lat / get_lat: passive target, MPI_Win_flush after
# each op, as osu_put_latency) on 2 ranks of `reverb run --mpi` over the verbs provider, the
# window kept private (REVERB_MPI_WIN_SHM=0) so the origin reaches it with RDMA WRITE and READ
# as it would a rank on another host. Both sides busy-poll. Prints the table with ratios.
#
# Environment (set by `compare rma-verbs`): REVERB_BIN, BENCH (mpi_bench built by mpicc.mpich),
# RESULTS (a writable dir), ITERS, REPEAT, STEP_TIMEOUT.
set -euo pipefail

reverb=${REVERB_BIN:?REVERB_BIN is not set}
bench=${BENCH:?BENCH is not set}
out=${RESULTS:?RESULTS is not set}
dev=${RXE_LO_DEV:-rxe0}
gid=${RXE_LO_GID:-1}
iters=${ITERS:-2000}
tmo=${STEP_TIMEOUT:-120}
repeat=${REPEAT:-3}
port=$((19600 + RANDOM % 1000))
export REVERB_VERBS_DEVICE=$dev REVERB_VERBS_GID_INDEX=$gid REVERB_VERBS_PORT=1
mkdir -p "$out"
results=$out/results.tsv
: >"$results"

fifo=/tmp/compare-rma-verbs.fifo
rm -f "$fifo"
mkfifo "$fifo"
exec 9<>"$fifo"
nap() { read -r -t "$1" -u 9 _ || true; }
log() { printf '[compare-rma-verbs guest] %s\n' "$*" >&2; }

listening() { # PORT: is a TCP socket listening on PORT (builtins over /proc/net/tcp{,6})?
    local hex local_addr st f
    printf -v hex ':%04X' "$1"
    for f in /proc/net/tcp /proc/net/tcp6; do
        while read -r _ local_addr _ st _; do
            [[ $local_addr == *"$hex" && $st == 0A ]] && return 0
        done <"$f"
    done
    return 1
}

# perftest BIN: one 8-byte server/client pair; records the client's t_avg (field 5, us).
perftest() {
    local bin=$1 name=pt-$1-r$round line f i spid
    port=$((port + 1))
    local args=("$bin" -d "$dev" -i 1 -x "$gid" -F -p "$port" -s 8 -n "$iters")
    timeout "$tmo" "${args[@]}" >"$out/$name.srv" 2>&1 &
    spid=$!
    for ((i = 0; i < 200; i++)); do
        listening "$port" && break
        nap 0.05
    done
    if ! timeout "$tmo" "${args[@]}" 127.0.0.1 >"$out/$name.log" 2>&1; then
        log "$name failed: $(tail -n 5 "$out/$name.log")"
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        return 1
    fi
    wait "$spid" || true
    while read -r line; do
        read -r -a f <<<"$line"
        if [[ ${f[0]:-} == 8 && ${f[1]:-} =~ ^[0-9]+$ && ${#f[@]} -gt 5 ]]; then
            printf '%s\tperftest\t%s\n' "$bin" "${f[5]}" >>"$results"
            return 0
        fi
    done <"$out/$name.log"
    log "no result row in $out/$name.log"
    return 1
}

# mpi KIND KEY: mpi_bench KIND 8 ITERS on 2 ranks over verbs; records its us per op under KEY.
# The origin (rank 0) busy-polls; the passive target (rank 1, in a barrier meanwhile) sleeps
# on the completion channel, as perftest's server does: a spinning process takes one of the
# two vCPUs from rxe, which does the target's part of the work.
mpi() {
    local kind=$1 key=$2 name=mpi-$1-r$round v=
    # shellcheck disable=SC2016 # expanded by the rank's shell
    local by_rank='[ "$REVERB_RANK" = 1 ] && export REVERB_WAIT_MODE=event; exec "$0" "$@"'
    if ! REVERB_PROVIDER=verbs REVERB_WAIT_MODE=poll REVERB_MPI_WIN_SHM=0 timeout "$tmo" \
        "$reverb" run --mpi --no-prefix -n 2 -- bash -c "$by_rank" "$bench" "$kind" 8 "$iters" \
        >"$out/$name.log" 2>&1; then
        log "$name failed: $(tail -n 5 "$out/$name.log")"
        return 1
    fi
    while read -r -a f; do [[ ${f[0]:-} == "$kind" && ${#f[@]} == 3 ]] && v=${f[2]}; done <"$out/$name.log"
    [[ -n $v ]] || { log "no result in $out/$name.log"; return 1; }
    printf '%s\treverb\t%s\n' "$key" "$v" >>"$results"
}

status=0
for ((round = 1; round <= repeat; round++)); do
    log "[$round/$repeat] ib_write_lat, MPI_Put, ib_read_lat, MPI_Get: 8 B, $iters iterations"
    perftest ib_write_lat || status=1
    mpi put_lat ib_write_lat || status=1
    perftest ib_read_lat || status=1
    mpi get_lat ib_read_lat || status=1
done

awk -F'\t' -v rounds="$repeat" -v iters="$iters" '
    { k = $1 FS $2; if (!(k in lo) || $3 + 0 < lo[k]) lo[k] = $3 + 0 }
    function row(pt, label,    r, p) {
        r = lo[pt FS "reverb"]; p = lo[pt FS "perftest"]
        printf "%-34s %10s %10s %9s\n", label, r == "" ? "-" : sprintf("%.2f", r), \
            p == "" ? "-" : sprintf("%.2f", p), (r != "" && p > 0) ? sprintf("%.3fx", r / p) : "-"
    }
    END {
        print ""
        printf "MPI one-sided over verbs vs perftest on soft-RoCE: 8 B, us per op (mean of %d), best of %d rounds\n", iters, rounds
        printf "%-34s %10s %10s %9s\n", "metric", "reverb", "perftest", "ratio"
        row("ib_write_lat", "MPI_Put+flush vs ib_write_lat")
        row("ib_read_lat", "MPI_Get+flush vs ib_read_lat")
    }' "$results" | tee "$out/table.txt"
exit $status
