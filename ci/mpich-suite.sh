#!/usr/bin/env bash
# MPICH's own tests (../shared/external/mpich-tests beside the clone, or REVERB_MPICH_TESTS=DIR:
# MPICH's test suite and its run.sh) on reverb's MPI library: the tests listed in
# mpi/tests/mpich-passing.txt must pass, compiled by mpicc.mpich and run by `reverb run --mpi`,
# and MPICH's Fortran attribute and generalized-request tests that run.sh cannot build (a
# header MPICH's configure writes). Skipped, saying so, when neither directory is there.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== mpich-suite: [$((SECONDS / 60))m$((SECONDS % 60))s] $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
command -v mpicc.mpich >/dev/null || fail "needs mpicc.mpich (apt-get install mpich libmpich-dev gfortran)"

cargo ci-build  # .cargo/config.toml: the build every suite shares
target=${CARGO_TARGET_DIR:-$PWD/target}
reverb=$target/ci/reverb
work=$target/mpich-suite
rm -rf "$work"
mkdir -p "$work"
run() { # LOG ARGS... : reverb run --mpi, output kept; fails the script if the job fails
    local log=$work/$1
    shift
    "$reverb" run --mpi --timeout 120 "$@" >"$log" 2>&1 || fail "reverb run --mpi $*: $(tail -n 30 "$log")"
}
expect() { # LOG TEXT
    grep -q -- "$2" "$work/$1" || fail "$1 lacks '$2': $(tail -n 30 "$work/$1")"
}

# MPICH's tests that reverb passes, in REVERB_MPICH_SHARDS (default 2) lists run at once: each
# test is compiled by mpicc, then run, and either leaves a core idle much of the time. Tests
# that MPICH marks as needing gigabytes (`mem=`), a minute or more (`timeLimit=`) or many
# processes (`lock=manyproc`: darray_pack's 72 ranks) run alone afterwards.
mpich_tests_sharded() {
    local shards=${REVERB_MPICH_SHARDS:-2} k pids=() failed=0 passed=0 skipped=0
    [[ $shards =~ ^[1-9][0-9]?$ ]] || fail "REVERB_MPICH_SHARDS=$shards: 1 to 99"
    local big=' mem=| timeLimit=([6-9][0-9]|[0-9]{3,})| lock=manyproc'
    grep -E "$big" mpi/tests/mpich-passing.txt >"$work/mpich-list-big.txt" || true
    for ((k = 0; k < shards; k++)); do
        grep -Ev "$big" mpi/tests/mpich-passing.txt |
            awk -v k="$k" -v n="$shards" 'NR % n == k' >"$work/mpich-list-$k.txt"
    done
    for k in $(seq 0 $((shards - 1))) big; do mpich_c_tests_prebuilt "$k"; done
    for ((k = 0; k < shards; k++)); do
        mpich_tests_run "$k" &
        pids+=($!)
    done
    for ((k = 0; k < shards; k++)); do wait "${pids[k]}" || failed=1; done
    mpich_tests_run big || failed=1
    for k in $(seq 0 $((shards - 1))) big; do
        [[ $(tail -n 1 "$work/mpich-tests-$k.log") =~ ^([0-9]+)\ passed,\ [0-9]+\ failed,\ ([0-9]+)\ skipped ]] ||
            failed=1
        passed=$((passed + ${BASH_REMATCH[1]:-0})) skipped=$((skipped + ${BASH_REMATCH[2]:-0}))
    done
    ((failed == 0)) || fail "MPICH's tests: $(cat "$work"/mpich-tests-*.log | grep -v '^pass' | tail -n 20)"
    say "MPICH's own tests that reverb passes: $passed passed, 0 failed, $skipped skipped ($shards lists at once)"
}

# Builds list $1's C tests where run.sh looks for them first ($work/mpich-tests-$1/bin), two at a
# time, each linked to MPICH's test helpers compiled once: run.sh compiles the three helpers again
# with every test (four times the compiling). A test that fails to build here is left to run.sh.
mpich_c_tests_prebuilt() {
    local bin=$work/mpich-tests-$1/bin lib=$work/mpich-mtest/libmtest.a suite=$REVERB_MPICH_TESTS
    mkdir -p "$bin"
    if [[ ! -f $lib ]]; then
        mkdir -p "$(dirname "$lib")"
        (cd "$(dirname "$lib")" && mpicc.mpich -w -O1 -I"$suite/include" -I"$suite/util" -c \
            "$suite/util/mtest.c" "$suite/util/mtest_common.c" "$suite/util/mtest_thread.c" &&
            ar rcs "$lib" mtest.o mtest_common.o mtest_thread.o) || fail "MPICH's test helpers do not build"
    fi
    awk '{print $1}' "$work/mpich-list-$1.txt" | sort -u | while read -r test; do
        [[ -f $suite/$test.c ]] && echo "$test"
    done | xargs -r -P 2 -I{} sh -c 'mpicc.mpich -w -O1 -I"$1/include" -I"$1/util" "$1/$2.c" "$3" \
        -o "$4/$(echo "$2" | tr / -)" -lpthread -lm >/dev/null 2>&1 || true' sh "$suite" {} "$lib" "$bin"
}

# Runs MPICH's tests of list $1 ($work/mpich-list-$1.txt) with their log in mpich-tests-$1.log:
# 60 s each, the big ones 300 (a 6.5 GB message in a debug build, MPICH's own limits to 500).
mpich_tests_run() {
    local limit=60
    [ "$1" = big ] && limit=300
    PATH=$target/ci:$PATH bash "$REVERB_MPICH_TESTS/run.sh" --launcher "reverb run --mpi --timeout $limit -n" \
        --list "$work/mpich-list-$1.txt" --out "$work/mpich-tests-$1" --timeout $((limit + 5)) \
        >"$work/mpich-tests-$1.log" 2>&1
}

# CI keeps the external suites beside the clone; REVERB_MPICH_TESTS names another copy.
beside=$PWD/../shared/external/mpich-tests
if [ -z "${REVERB_MPICH_TESTS:-}" ] && [ -x "$beside/run.sh" ]; then REVERB_MPICH_TESTS=$beside; fi
if [ -n "${REVERB_MPICH_TESTS:-}" ]; then
    mpich_tests_sharded
    # MPICH's Fortran tests of attributes (set, copied, deleted from Fortran, read across the
    # languages) and of generalized requests include a header MPICH's configure writes (the
    # ADDRESS_KIND variables), which run.sh skips them for: written and built here.
    headers=$work/mpich-f77-headers
    mkdir -p "$headers"
    for h in attraints attr1aints; do echo '       integer*8 extrastate, valin, valout, val' >"$headers/$h.h"; done
    for t in attr/commattrf attr/commattr2f attr/commattr3f attr/commattr4f pt2pt/greqf; do
        dir=$REVERB_MPICH_TESTS/f77/$(dirname "$t") name=$(basename "$t")
        extra=() # the helpers run.sh links too
        [ -f "$dir/utilsf.f" ] && extra+=("$dir/utilsf.f")
        [ "$name" = greqf ] && extra+=("$dir/dummyf.f")
        mpif77.mpich -w -O1 -fallow-argument-mismatch -I"$dir" -I"$headers" "$dir/$name.f" "${extra[@]}" \
            "$REVERB_MPICH_TESTS/util/mtest_f77.f" -o "$work/mpich-$name"
        run "mpich-$name.log" -n 1 -- "$work/mpich-$name"
        expect "mpich-$name.log" "No Errors"
    done
    say "MPICH's Fortran attribute and generalized-request tests (headers written here): ok"
else
    say "MPICH's own test suite skipped: no ../shared/external/mpich-tests beside the clone and REVERB_MPICH_TESTS is not set (docs/mpi.md says how to run it)"
fi
say "ok"
