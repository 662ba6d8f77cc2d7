#!/usr/bin/env bash
# One-sided MPI across two simulated hosts (ci/hosts.sh: network, mount and UTS namespaces), so
# the origin cannot map the target's window and the provider's one-sided path (tcp here) carries
# puts and gets: mpi/tests/c/rma_passive.c (a target computing without MPI while its origin
# puts, gets and flushes; each flush must return long before the target is back), one rank on
# each host. ci/mpich-hosts.sh runs MPICH's rma tests over the same split. Reuses ci-build's
# reverb. Needs root (namespaces). Its own hosts (ra, rb: REVERB_HOSTS_DIR=/run/reverb-hosts-rma,
# 10.75.0.x), removed on exit. About 15 s.
#   bash ci/rma-hosts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== rma-hosts: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root to make network, mount and UTS namespaces"
command -v mpicc.mpich >/dev/null || fail "needs mpicc.mpich (apt-get install mpich libmpich-dev)"
export REVERB_HOSTS_DIR=/run/reverb-hosts-rma REVERB_HOSTS_NET=10.75.0

cargo ci-build # .cargo/config.toml: the build every suite shares
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/rma-hosts
rm -rf "$work"
mkdir -p "$work"
mpicc.mpich -std=c11 -Wall -Werror -O1 -Impi/include mpi/tests/c/rma_passive.c -o "$work/rma_passive"

bash ci/hosts.sh down
trap 'bash ci/hosts.sh down' EXIT
bash ci/hosts.sh up ra rb
export REVERB_RSH="bash $PWD/ci/hosts.sh exec"
run() { # LOG HOSTS N PROGRAM: a job of N ranks over HOSTS, its output in $work/LOG
    local log=$1 hosts=$2 n=$3 prog=$4
    timeout 120 "$target/ci/reverb" run --mpi --timeout 100 -n "$n" --ranks-per-node 1 --hosts "$hosts" \
        -- "$work/$prog" >"$work/$log" 2>&1 || fail "$prog on $hosts: $(tail -n 20 "$work/$log")"
}
run passive.log ra:1,rb:1 2 rma_passive
grep -q "rma_passive: ok" "$work/passive.log" || fail "rma_passive: $(tail -n 20 "$work/passive.log")"
say "passive target across hosts: ok ($(sed -n 's/.*rma_passive: \(put.*\)/\1/p' "$work/passive.log" | head -n 1))"
