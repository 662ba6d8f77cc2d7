# help: verbs provider against perftest on soft-RoCE, in one VM boot
# reverb's verbs provider side by side with perftest on soft-RoCE (rxe0 over lo), in ONE boot of
# the TCG rxe VM (ci/rxe-vm.sh; the host kernel has no RDMA):
#   reverb bench lat --op put  vs ib_write_lat      reverb bench lat --op send vs ib_send_lat
#   reverb bench lat --op get  vs ib_read_lat       reverb bench bw  --op put  vs ib_write_bw
# plus one ucx_perftest try over rc_verbs. Same device and GID, same sizes, same iteration
# counts, same completion mode (busy polling). The guest half is scripts/guest/verbs.sh;
# the raw outputs and the table stay in $RESULTS (default target/compare-verbs).
#
# Knobs (environment): REPEAT=3 LAT_ITERS=2000 BW_ITERS_64K=2000 BW_ITERS_1M=200 STEP_TIMEOUT=120
# VM_TIMEOUT=600 RESULTS=target/compare-verbs; REVERB_BIN=path skips the build.

# Host tools: the build deps, perftest/ucx-utils/jq (run in the guest from the host's root).
bash ci/deps.sh --compare
missing=()
for p in perftest ucx-utils; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

rs_build --features verbs

# Results go under target/: the repo's target/ is writable inside the VM.
results=$(realpath -m "${RESULTS:-target/compare-verbs}")
mkdir -p "$results"
rm -f "$results"/*
case "$results" in
    "$PWD"/target/*) rw=() ;;
    *) rw=(--rw "$results") ;;
esac

export REVERB_BIN=$reverb RESULTS=$results
export LAT_ITERS=${LAT_ITERS:-2000} BW_ITERS_64K=${BW_ITERS_64K:-2000} BW_ITERS_1M=${BW_ITERS_1M:-200}
export STEP_TIMEOUT=${STEP_TIMEOUT:-120} REPEAT=${REPEAT:-3}
# One boot for everything: each boot costs tens of seconds under TCG.
RXE_VM_QUIET=1 bash ci/rxe-vm.sh --timeout "${VM_TIMEOUT:-600}" "${rw[@]}" -- \
    bash scripts/guest/verbs.sh
