# help: fabtests' tagged ping-pong and bandwidth on the reverb libfabric provider vs libfabric's shm and tcp
# libfabric's own benchmarks (fabtests 1.17: fi_rdm_tagged_pingpong, fi_rdm_tagged_bw, and
# fi_rma_bw -o write/read) on one host, server and client, over the reverb provider (ofi/,
# libreverb-fi.so from FI_PROVIDER_PATH, its shm carrier unless REVERB_OFI_PROVIDER says tcp)
# and over Debian's libfabric providers `shm` and `tcp`, the sides interleaved (their order
# rotating by round), REPEAT rounds keeping each side's best. Both ends on 127.0.0.1, wired up
# as runfabtests.sh does (-s, the server's node). Prints one table: microseconds per
# transfer (ping-pong: half a round trip; lower is better) or MB/s (bandwidth; higher is
# better) per test and size, and the ratios reverb / shm and reverb / tcp (also as markdown,
# $RESULTS/table.md). Raw outputs in $RESULTS.
#
# Needs fabtests built: FABTESTS_PREFIX=DIR (what `bash ci/fabtests.sh` builds, by default
# $CARGO_TARGET_DIR/fabtests), else built here from FABTESTS_SRC (default
# ../shared/external/fabtests beside the repository).
# Knobs (environment): REPEAT=3 SIZES="8 64 1024 4096 65536 1048576" ITERS=10000 (fewer for
# large sizes) SIDES="reverb shm tcp" RESULTS=target/compare-ofi PORT (the servers' port, by
# default one of this run's own: a fabtests run beside it on the default port is not met).
# DEPS=0 skips ci/deps.sh.
repeat=${REPEAT:-3}
sizes=${SIZES:-8 64 1024 4096 65536 1048576}
iters=${ITERS:-10000}
read -r -a sides <<<"${SIDES:-reverb shm tcp}"
results=${RESULTS:-target/compare-ofi}
port=${PORT:-$((20000 + $$ % 20000))}
target=${CARGO_TARGET_DIR:-$RS_ROOT/target}
[[ $target == /* ]] || target=$RS_ROOT/$target
prefix=${FABTESTS_PREFIX:-$target/fabtests}
src=${FABTESTS_SRC:-$RS_ROOT/../shared/external/fabtests}
[[ ${DEPS:-1} == 0 ]] || bash ci/deps.sh --compare
rs_build --package reverb-ofi
mkdir -p "$results"
results=$(realpath "$results")
rm -f "$results"/run-*.log "$results"/values.txt
if [[ ! -x $prefix/bin/fi_rdm_tagged_pingpong ]]; then
    [[ -f $src/build.sh ]] || rs_die "no fabtests at $prefix/bin and no source at $src (FABTESTS_PREFIX / FABTESTS_SRC)"
    bash "$src/build.sh" "$prefix" >&2
fi
bin=$prefix/bin
provdir=$(mktemp -d)
trap 'rm -rf "$provdir"' EXIT
ln -s "$cargo_out/libreverb_fi.so" "$provdir/libreverb-fi.so"
export FI_PROVIDER_PATH=$provdir

# The tests: "name|binary and options|column|direction" (the column of fabtests' table).
tests=(
    "tagged_pingpong|fi_rdm_tagged_pingpong|usec|low"
    "tagged_bw|fi_rdm_tagged_bw|MBps|high"
    "rma_write_bw|fi_rma_bw -e rdm -o write|MBps|high"
    "rma_read_bw|fi_rma_bw -e rdm -o read|MBps|high"
)

# run_pair SIDE COMMAND SIZE LOG: server and client of COMMAND at SIZE over SIDE's provider,
# 60 s at most each; the client's output goes to LOG. Fails when either does.
run_pair() {
    local side=$1 size=$3 log=$4 n=$iters cmd
    read -r -a cmd <<<"$2"
    ((size >= 65536)) && n=$((iters / 10))
    ((size >= 1048576)) && n=$((iters / 100 > 10 ? iters / 100 : 10))
    local args=(-p "$side" -s 127.0.0.1 -S "$size" -I "$n")
    timeout 60 "$bin/${cmd[0]}" "${cmd[@]:1}" "${args[@]}" -B "$port" >"$log.server" 2>&1 &
    local server=$!
    # The server's endpoint up before the client looks for it (reverb's client waits for
    # its published address by itself; libfabric's shm and tcp need the server first).
    sleep 0.5
    local rc=0
    timeout 60 "$bin/${cmd[0]}" "${cmd[@]:1}" "${args[@]}" -P "$port" 127.0.0.1 >"$log" 2>&1 || rc=$?
    wait "$server" || rc=$?
    return "$rc"
}

# value LOG COLUMN: fabtests' figure in COLUMN (usec: usec/xfer; MBps: MB/sec) of its one row.
value() {
    awk -v want="$2" '
        $1 == "bytes" { for (i = 1; i <= NF; i++) { if ($i == "usec/xfer") u = i; if ($i == "MB/sec") m = i }; next }
        u && $1 ~ /^[0-9]/ { print (want == "usec" ? $u : $m); exit }
    ' "$1"
}

round() {
    local r=$1 t side size name cmd col dir log v
    for t in "${tests[@]}"; do
        IFS='|' read -r name cmd col dir <<<"$t"
        for size in $sizes; do
            for side in $(rs_order "$r" "${sides[@]}"); do
                log=$results/run-$name-$size-$side-$r.log
                if run_pair "$side" "$cmd" "$size" "$log"; then
                    v=$(value "$log" "$col")
                    [[ -n $v ]] && echo "$name $size $side $dir $v" >>"$results/values.txt"
                else
                    rs_log "$name $size on $side failed (see $log)"
                fi
            done
        done
    done
}
rs_rounds "$repeat" round

best() { # NAME SIZE SIDE: the side's best value
    awk -v n="$1" -v s="$2" -v p="$3" '
        $1 == n && $2 == s && $3 == p { v = $5; if (b == "" || ($4 == "low" ? v < b : v > b)) b = v }
        END { print b }
    ' "$results/values.txt"
}
{
    echo "Measured by \`compare ofi\` on $(date -u +%F): $(rs_machine); best of $repeat round(s)."
    echo
    echo "| test | bytes | reverb | shm | tcp | reverb / shm | reverb / tcp | unit |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
    for t in "${tests[@]}"; do
        IFS='|' read -r name _ col _ <<<"$t"
        unit=$([[ $col == usec ]] && echo "us" || echo "MB/s")
        for size in $sizes; do
            r=$(best "$name" "$size" reverb) s=$(best "$name" "$size" shm) c=$(best "$name" "$size" tcp)
            echo "| $name | $size | ${r:--} | ${s:--} | ${c:--} | $(rs_ratio "$r" "$s") | $(rs_ratio "$r" "$c") | $unit |"
        done
    done
} >"$results/table.md"
cat "$results/table.md"
