# help: memory per rank on verbs against job size, on-demand or all connections (VM)
# Memory per rank on verbs against job size, connecting on demand or all peers at open
# (issue 14): in the rxe VM, `reverb run -n N reverb app APP --ckpt-every 0` (ring: 8-byte
# blocks; stencil: a 64x64 grid) for each APP, N and REVERB_VERBS_CONNECT mode, with each rank's /proc/PID/smaps_rollup sampled every
# 0.2 s while the job runs. Prints one line per run: the median over ranks of each rank's peak
# RSS and PSS, in MiB. Registered memory is pinned, so RSS counts all of it.
#
# `ring` sends to every other rank each iteration (every pair connects either way); `stencil`
# exchanges halos with the ranks above and below only (rows split over the ranks), where
# on-demand connections make a QP only per neighbour (and, on rank 0, which gathers the
# checksums, per rank).
#
# Knobs (environment): RANKS="8 16 32 64" APPS="ring stencil" MODES="all ondemand" ITERS=3
# VM_MEM=6144 REVERB_BIN=path (default: a release build with --features verbs).
if [[ ${1:-} != --guest ]]; then
    rs_build --features verbs
    export REVERB_BIN=$reverb
    exec bash ci/rxe-vm.sh --mem "${VM_MEM:-6144}" --timeout 3000 -- bash scripts/reverb-scripts verbs-rss --guest
fi

export REVERB_PROVIDER=verbs REVERB_VERBS_DEVICE=${REVERB_VERBS_DEVICE:-rxe0} REVERB_WAIT_MODE=event
reverb=$REVERB_BIN
median() { sort -n | awk '{v[NR] = $1} END {if (NR) printf "%.1f", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 / 1024}'; }

printf '%-8s %-9s %6s %10s %10s %8s\n' app mode ranks "RSS MiB" "PSS MiB" seconds
for app in ${APPS:-ring stencil}; do
    for mode in ${MODES:-all ondemand}; do
        for n in ${RANKS:-8 16 32 64}; do
            declare -A rss=() pss=()
            size=8
            [[ $app == stencil ]] && size=64
            start=$(date +%s.%N)
            REVERB_VERBS_CONNECT=$mode "$reverb" run -n "$n" "$reverb" app "$app" \
                --iters "${ITERS:-3}" --size "$size" --ckpt-every 0 >/dev/null 2>&1 &
            launcher=$!
            while kill -0 "$launcher" 2>/dev/null; do
                for pid in $(pgrep -P "$launcher" || true); do
                    # (No process substitution: the guest has no /dev/fd.)
                    kib=$(awk '/^Rss:/ {r = $2} /^Pss:/ {p = $2} END {print r + 0, p + 0}' \
                        "/proc/$pid/smaps_rollup" 2>/dev/null || echo "0 0")
                    r=${kib% *} p=${kib#* }
                    ((r > ${rss[$pid]:-0})) && rss[$pid]=$r
                    ((p > ${pss[$pid]:-0})) && pss[$pid]=$p
                done
                sleep 0.2
            done
            rc=0
            wait "$launcher" || rc=$?
            secs=$(echo "$(date +%s.%N) $start" | awk '{printf "%.0f", $1 - $2}')
            line=$(printf '%-8s %-9s %6s %10s %10s %8s' "$app" "$mode" "$n" \
                "$(printf '%s\n' "${rss[@]}" | median)" "$(printf '%s\n' "${pss[@]}" | median)" "$secs")
            [[ $rc == 0 ]] || line+="  (exit $rc)"
            echo "$line"
            unset rss pss
        done
    done
done
