#!/usr/bin/env bash
# MPICH's one-sided tests (the rma/ part of mpi/tests/mpich-passing.txt) across two simulated
# hosts (ci/hosts.sh: network, mount and UTS namespaces): each test's ranks split over hosts ma
# and mb in rank order, so windows are served over tcp between the hosts and shm inside one.
# Takes the tests from ../shared/external/mpich-tests beside the clone or REVERB_MPICH_TESTS
# (skipped, saying so, with neither); reuses the binaries ci/mpi.sh built, else run.sh builds
# them. Needs root (namespaces). Its own host set, removed on exit. A test may take 180 s.
# One test stays on one host (ci/mpich-suite.sh runs it there), unless MPICH_HOSTS_ALL=1:
# atomic_rmw_gacc on 3 ranks is 1.2 million MPI_Get_accumulate + MPI_Win_flush round trips from
# rank 0 to rank 2, which this split puts on different hosts: 62 s over tcp on a quiet 2-core
# machine (about 50 us a round trip), past 180 s beside CI's VMs. MPI_Get_accumulate across the
# hosts stays covered by win_dynamic_rma_flush_get -op=gacc (2 ranks: one on each host).
#   bash ci/mpich-hosts.sh
#   bash ci/mpich-hosts.sh --launch N PROGRAM ARGS...   (run.sh's launcher: N ranks over ma, mb)
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
export REVERB_HOSTS_DIR=/run/reverb-hosts-mpich REVERB_HOSTS_NET=10.76.0

if [[ ${1:-} == --launch ]]; then
    n=$2
    shift 2
    # Ranks 0..a-1 on ma, the rest on mb; nodes as large as both hosts' shares allow.
    a=$(((n + 1) / 2)) b=$((n / 2))
    hosts="ma:$a"
    ((b > 0)) && hosts+=",mb:$b"
    g=$a r=$b
    while ((r > 0)); do t=$((g % r)) g=$r r=$t; done
    exec "$target/ci/reverb" run --mpi --timeout 180 -n "$n" --ranks-per-node "$g" --hosts "$hosts" -- "$@"
fi

say() { echo "== mpich-hosts: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
beside=$PWD/../shared/external/mpich-tests
if [ -z "${REVERB_MPICH_TESTS:-}" ] && [ -x "$beside/run.sh" ]; then REVERB_MPICH_TESTS=$beside; fi
if [ -z "${REVERB_MPICH_TESTS:-}" ]; then
    say "skipped: no ../shared/external/mpich-tests beside the clone and REVERB_MPICH_TESTS is not set"
    exit 0
fi
[ "$(id -u)" = 0 ] || fail "needs root to make network, mount and UTS namespaces"

cargo ci-build # .cargo/config.toml: the build every suite shares
work=$target/mpich-hosts
rm -rf "$work"
mkdir -p "$work/out/bin"
grep '^rma/' mpi/tests/mpich-passing.txt >"$work/list.txt"
if [[ ${MPICH_HOSTS_ALL:-0} != 1 ]]; then
    say "left on one host (ci/mpich-suite.sh runs it; MPICH_HOSTS_ALL=1 adds it): rma/atomic_rmw_gacc 3," \
        "1.2 million Get_accumulate round trips across tcp (about a minute quiet, minutes under load)"
    grep -vx 'rma/atomic_rmw_gacc 3' "$work/list.txt" >"$work/list.tmp"
    mv "$work/list.tmp" "$work/list.txt"
fi
# run.sh runs out/bin/DIR-NAME where it exists: ci/mpich-suite.sh's builds of the same sources.
for bin in "$target"/mpich-suite/mpich-tests-*/bin/rma-*; do
    [ -x "$bin" ] && ln -sf "$bin" "$work/out/bin/"
done

bash ci/hosts.sh down
trap 'bash ci/hosts.sh down' EXIT
bash ci/hosts.sh up ma mb
export REVERB_RSH="bash $PWD/ci/hosts.sh exec"
start=$SECONDS
bash "$REVERB_MPICH_TESTS/run.sh" --launcher "bash $PWD/ci/mpich-hosts.sh --launch" --list "$work/list.txt" \
    --out "$work/out" --timeout 185 >"$work/run.log" 2>&1 || true
summary=$(tail -n 1 "$work/run.log")
[[ $summary =~ ^([0-9]+)\ passed,\ 0\ failed ]] ||
    fail "MPICH's rma tests across hosts: $(grep -v '^pass' "$work/run.log" | tail -n 20)"
say "MPICH's rma tests across two hosts (tcp between, shm inside): $summary ($((SECONDS - start)) s)"
