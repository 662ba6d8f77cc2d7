# help: auto against shm on one host, interleaved (ratios near 1: auto costs nothing)
# The auto provider against shm on one host, side by side: the same benchmarks forced onto
# shm (REVERB_PROVIDER=shm) and through auto (which opens only shm when every rank shares the
# host, and forwards to it), interleaved over N rounds by `compare builds`. In its
# table OLD is shm and NEW is auto: ratios near 1 mean auto costs nothing there.
#
#   scripts/reverb-scripts compare auto [rounds]       (default 7; builds the release binary first)
#   REVERB_BIN=path/to/reverb scripts/reverb-scripts compare auto    (a binary built already)
ROUNDS=${1:-7}
rs_build
bin=$reverb
wrap=$(mktemp -d)
trap 'rm -rf "$wrap"' EXIT
for provider in shm auto; do
    printf '#!/bin/sh\nexec env REVERB_PROVIDER=%s %q "$@"\n' "$provider" "$bin" >"$wrap/$provider"
    chmod +x "$wrap/$provider"
done
export COMPARE_CASES=${COMPARE_CASES:-"put-lat-8|lat --op put --sizes 8
send-lat-8|lat --op send --sizes 8
send-lat-64K|lat --op send --sizes 64K
put-bw-1M|bw --op put --sizes 1M
send-bw-1M|bw --op send --sizes 1M"}
echo "OLD = shm, NEW = auto (one host)" >&2
rs_sub compare builds "$wrap/shm" "$wrap/auto" "$ROUNDS"
