#!/usr/bin/env bash
# Two builds of reverb's MPI library side by side: benches/mpi/mpi_bench.c (built once by
# mpicc.mpich) run as `reverb run --mpi -n 2` from an OLD and a NEW build directory (each holding
# `reverb` and `libmpich.so`), alternating, ROUNDS rounds; prints each build's best and the
# ratio NEW/OLD (below 1 is faster). How the 8 B steps in docs/mpi.md ("Speed") were measured.
#
#   git worktree add /tmp/old HEAD~3 && (cd /tmp/old && cargo build --release -p reverb -p reverb-mpi)
#   scripts/compare-mpi-builds.sh /tmp/old/target/release target/release [rounds] [bytes] [iters]
set -euo pipefail
old=${1:?usage: compare-mpi-builds.sh OLD_DIR NEW_DIR [rounds] [bytes] [iters]}
new=${2:?usage: compare-mpi-builds.sh OLD_DIR NEW_DIR [rounds] [bytes] [iters]}
rounds=${3:-8} bytes=${4:-8} iters=${5:-30000}
for dir in "$old" "$new"; do
    [[ -x $dir/reverb && -e $dir/libmpich.so ]] || { echo "compare-mpi-builds.sh: no reverb and libmpich.so in $dir" >&2; exit 1; }
done
bench=$(mktemp -d)/mpi_bench
trap 'rm -rf "$(dirname "$bench")"' EXIT
mpicc.mpich -O2 "$(dirname "$0")/../benches/mpi/mpi_bench.c" -o "$bench"
best_old='' best_new=''
lower() { # OLD_BEST VALUE -> the lower (VALUE when there is no best yet)
    if [[ -z $1 ]]; then echo "$2"; else echo "$1 $2" | awk '{ print ($2 < $1) ? $2 : $1 }'; fi
}
for _ in $(seq "$rounds"); do
    for side in old new; do
        dir=$old
        if [[ $side == new ]]; then dir=$new; fi
        v=$("$dir/reverb" run --mpi --no-prefix -n 2 -- "$bench" lat "$bytes" "$iters" | awk 'NF == 3 { print $3 }')
        if [[ $side == old ]]; then best_old=$(lower "$best_old" "$v"); else best_new=$(lower "$best_new" "$v"); fi
    done
done
echo "lat $bytes B (us, best of $rounds): old $best_old  new $best_new  new/old $(echo "$best_new $best_old" | awk '{ printf "%.2f", $1 / $2 }')"
