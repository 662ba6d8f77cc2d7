# help: receive memory (RSS, PSS, shm) against job size; table and SVG plot
# Receive memory against job size (issue 14): `reverb bench mem` launches one job per size
# (all ranks on one node), each rank sends one eager message to every other rank per size of
# SIZES and reports RSS, PSS, page tables and the shm segments it maps; the table goes to
# stdout and $RESULTS/mem-table.txt, the plot to docs/img/receive-memory.svg. For the numbers
# in KiB, run `reverb bench mem ... --csv` or `--json` (same options).
#
# A job size whose memory, projected from the smaller ones, exceeds 80 % of MemAvailable is
# skipped and says so (NO_GUARD=1 runs it anyway). Every wait inside is bounded; a job is
# killed after JOB_TIMEOUT_S.
#
# Knobs (environment): RANKS=17,65,257,513,1025 SIZES=8,8k PROVIDER=shm JOB_TIMEOUT_S=900
# RESULTS=target/mem-table PLOT=docs/img/receive-memory.svg NO_GUARD=
# REVERB_BIN=path skips the build and uses that binary.
ranks=${RANKS:-17,65,257,513,1025}
sizes=${SIZES:-8,8k}
provider=${PROVIDER:-shm}
results=${RESULTS:-target/mem-table}
plot=${PLOT:-docs/img/receive-memory.svg}
job_timeout=${JOB_TIMEOUT_S:-900}
guard=()
[[ -n ${NO_GUARD:-} ]] && guard=(--no-guard)

rs_build
mkdir -p "$results" "$(dirname "$plot")"

"$reverb" bench mem --ranks "$ranks" --sizes "$sizes" --provider "$provider" \
    --job-timeout-s "$job_timeout" "${guard[@]}" --plot "$plot" | tee "$results/mem-table.txt"
