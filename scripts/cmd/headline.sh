# help: the headline numbers, measured once (quick): demo overhead, shm and MPI vs anchors
# The README's headline numbers, measured rather than merged by hand: one build (reverb with
# fault-injection, and reverb-mpi), then once each, quick:
#   demo  `reverb demo --repeat 3` (DEMO_ARGS replaces --repeat 3): its failure-free overhead
#         (wall and CPU time, causal + checkpoints against logging off) and recovery time;
#   shm   `compare shm` with QUICK=1 (one round): put and tagged latency 8 B / 64 KiB and
#         bandwidth 1 MiB against UCX shared memory when ucx_perftest is installed, against
#         memcpy on one core (the physical reference) always;
#   mpi   `compare mpi` with QUICK=1 (one round): latency 8 B and 64 KiB of reverb's MPI
#         library against MPICH and Open MPI, those installed.
# Nothing is installed (DEPS=0): an anchor that is missing shows "-". Writes a markdown table
# with the date, the machine (cores, CPU model, kernel) and the load to OUT (the commit to
# RESULTS/commit.txt) and
# prints it; --update-readme also replaces README.md's block between `<!-- headline:begin -->`
# and `<!-- headline:end -->` with it. Raw outputs in RESULTS. About 3-5 minutes on a quiet
# 2-core machine.
#
#   scripts/reverb-scripts headline [--update-readme] [--only demo,shm,mpi]
# Knobs (environment): OUT=docs/headline.md RESULTS=target/headline DEMO_ARGS="--repeat 3"
# REVERB_BIN=path (a build with fault-injection, libmpich.so beside it) skips the build.
update_readme='' only=demo,shm,mpi
while (($#)); do
    case $1 in
        --update-readme) update_readme=1; shift ;;
        --only) only=$2; shift 2 ;;
        *) rs_die "unknown argument $1 (help headline)" ;;
    esac
done
out=${OUT:-docs/headline.md}
results=${RESULTS:-target/headline}
rm -rf "$results"
mkdir -p "$results"
# reverb demo needs the fault hooks; without the demo part the build is a plain one.
if [[ ,$only, == *,demo,* ]]; then rs_build --mpi --features fault-injection; else rs_build --mpi; fi
stamp_date=$(rs_date) stamp_load=$(rs_load)

# Each part writes its text report to $results/PART.txt; a failed part is reported, not fatal.
part() { # PART COMMAND...
    local name=$1 start=$SECONDS
    shift
    [[ ,$only, == *",$name,"* ]] || return 0
    rs_log "$name ..."
    # In the background: errexit holds inside it (an `if` condition would switch it off).
    "$@" >"$results/$name.txt" 2>"$results/$name.err" &
    if wait $!; then
        rs_log "$name: $((SECONDS - start)) s"
    else
        rs_log "$name failed ($((SECONDS - start)) s; $results/$name.err):"
        tail -n 5 "$results/$name.err" >&2
        echo "FAILED" >>"$results/$name.txt"
    fi
}
# The comparisons run as subcommands of this invocation: they reuse its build.
quick_compare() { QUICK=1 DEPS=0 RESULTS="$results/$1" rs_sub compare "$1"; }
# shellcheck disable=SC2086
part demo timeout 1800 "$reverb" demo ${DEMO_ARGS:---repeat 3}
part shm quick_compare shm
part mpi quick_compare mpi

python3 scripts/lib/headline.py "$results" "$stamp_date" "$(rs_machine)" "$(rs_commit)" \
    "$stamp_load" "$(rs_load)" "$only" >"$results/headline.md"
{
    echo "# Headline numbers"
    echo
    echo "Written by \`scripts/reverb-scripts headline\` (do not edit by hand; run it again)."
    echo
    # Links from docs/ itself, not from the repository root.
    sed 's#](docs/#](#g' "$results/headline.md"
} >"$out"
cat "$results/headline.md"
if [[ -n $update_readme ]]; then
    python3 - README.md "$results/headline.md" <<'PY'
import sys
readme, table = sys.argv[1], open(sys.argv[2]).read()
text = open(readme).read()
begin, end = "<!-- headline:begin -->", "<!-- headline:end -->"
if begin not in text or end not in text:
    sys.exit(f"{readme}: no {begin} ... {end} block")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(readme, "w").write(f"{head}{begin}\n{table.strip()}\n{end}{tail}")
PY
    rs_log "README.md: headline block replaced"
fi
rs_log "wrote $out"
