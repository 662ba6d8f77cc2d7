# help: auto against plain shm/tcp across two namespace hosts (root)
# auto in a job across two simulated hosts (ci/hosts.sh namespaces, 2 ranks per host) against
# the provider it picked, run alone on the same placement, interleaved by
# `compare builds` (OLD = the plain provider, NEW = auto):
#   1. a pair on one host: auto's shm (beside tcp to the other host) against plain shm;
#   2. a pair across the hosts: auto's tcp (beside shm to the host-mate) against plain tcp.
#
#   sudo scripts/reverb-scripts compare auto-hosts [rounds]      (default 7; needs root: namespaces)
#   REVERB_BIN=path/to/reverb ...                           (a release binary built already)
ROUNDS=${1:-7}
[ "$(id -u)" = 0 ] || { echo "compare auto-hosts: needs root (namespace hosts)" >&2; exit 1; }
rs_build
bin=$reverb
wrap=$(mktemp -d)
bash ci/hosts.sh down
trap 'bash ci/hosts.sh down; rm -rf "$wrap"' EXIT
bash ci/hosts.sh up ha hb
export REVERB_RSH="bash $PWD/ci/hosts.sh exec"
# wrapper NAME PROVIDER HOSTS RANKS [PAIR]: runs `reverb bench ...` as a job on those hosts.
wrapper() {
    local pair=${5:+ --pair $5}
    printf '#!/bin/sh\nexec %q run -n %s --hosts %s --timeout 300 --no-prefix -- env REVERB_PROVIDER=%s %q "$@"%s\n' \
        "$bin" "$4" "$3" "$2" "$bin" "$pair" >"$wrap/$1"
    chmod +x "$wrap/$1"
}
wrapper shm shm ha:2 2
wrapper auto-shm auto ha:2,hb:2 4 0,1
wrapper tcp tcp ha:1,hb:1 2
wrapper auto-tcp auto ha:2,hb:2 4 0,2
cases="lat-8|lat --op send --sizes 8
lat-64K|lat --op send --sizes 64K
bw-1M|bw --op send --sizes 1M"
echo "== a pair on one host: OLD = plain shm, NEW = auto (shm, tcp to the other host)" >&2
COMPARE_CASES=$cases rs_sub compare builds "$wrap/shm" "$wrap/auto-shm" "$ROUNDS"
echo "== a pair across the hosts: OLD = plain tcp, NEW = auto (tcp, shm to the host-mate)" >&2
COMPARE_CASES=$cases rs_sub compare builds "$wrap/tcp" "$wrap/auto-tcp" "$ROUNDS"
