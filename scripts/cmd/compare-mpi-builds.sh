# help: two builds of reverb's MPI library: 8 B latency, alternating
# Two builds of reverb's MPI library side by side: benches/mpi/mpi_bench.c (built once by
# mpicc.mpich) run as `reverb run --mpi -n 2` from an OLD and a NEW build directory (each holding
# `reverb` and `libmpich.so`), alternating, ROUNDS rounds; prints each build's best and the
# ratio NEW/OLD (below 1 is faster). How the 8 B steps in docs/mpi.md ("Speed") were measured.
#
#   git worktree add /tmp/old HEAD~3, a release build of reverb and reverb-mpi there, then
#   scripts/reverb-scripts compare mpi-builds /tmp/old/target/release target/release [rounds] [bytes] [iters]
old=${1:?usage: compare mpi-builds OLD_DIR NEW_DIR [rounds] [bytes] [iters]}
new=${2:?usage: compare mpi-builds OLD_DIR NEW_DIR [rounds] [bytes] [iters]}
rounds=${3:-8} bytes=${4:-8} iters=${5:-30000}
for dir in "$old" "$new"; do
    [[ -x $dir/reverb && -e $dir/libmpich.so ]] || { echo "compare mpi-builds: no reverb and libmpich.so in $dir" >&2; exit 1; }
done
bench=$(mktemp -d)/mpi_bench
trap 'rm -rf "$(dirname "$bench")"' EXIT
mpicc.mpich -O2 benches/mpi/mpi_bench.c -o "$bench"
best_old='' best_new=''
one_round() { # round: both builds, which one first alternating
    local side dir v
    for side in $(rs_order "$1" old new); do
        dir=$old
        if [[ $side == new ]]; then dir=$new; fi
        v=$("$dir/reverb" run --mpi --no-prefix -n 2 -- "$bench" lat "$bytes" "$iters" | awk 'NF == 3 { print $3 }')
        if [[ $side == old ]]; then best_old=$(rs_better low "$best_old" "$v"); else best_new=$(rs_better low "$best_new" "$v"); fi
    done
}
rs_rounds "$rounds" one_round
echo "lat $bytes B (us, best of $rounds): old $best_old  new $best_new  new/old $(rs_ratio "$best_new" "$best_old")"
