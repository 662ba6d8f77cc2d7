# help: bootstrap time and launcher memory against job size (one host, simulated hosts)
# Bootstrap at scale (issue 16): `reverb bench boot` launches one job per size; each rank stamps
# when it started, connected to the rendezvous, had its provider open and passed the first
# barrier; the launcher (the controller, hosting the rendezvous server) reports its peak RSS
# and what the server wrote. Two tables: all ranks on one host (auto = shm), and HOSTS
# simulated hosts by host name (auto = shm inside a host, tcp between hosts: every cross-host
# pair is connected at open). Output on stdout and in $RESULTS/boot-table.txt.
#
# A job whose memory (ranks' PSS projected from the smaller jobs, plus the kernel's tcp
# sockets) exceeds 80 % of MemAvailable is skipped and says so (NO_GUARD=1 runs it anyway).
# Every wait inside is bounded; a job is killed after JOB_TIMEOUT_S.
#
# Knobs (environment): RANKS=8,64,256,1024 HOST_RANKS=8,64,256,512 HOSTS=4 JOB_TIMEOUT_S=600
# RESULTS=target/boot-table NO_GUARD= REVERB_BIN=path (skips the build and uses that binary;
# to compare two builds, run the script once with each).
ranks=${RANKS:-8,64,256,1024}
host_ranks=${HOST_RANKS:-8,64,256,512}
hosts=${HOSTS:-4}
results=${RESULTS:-target/boot-table}
job_timeout=${JOB_TIMEOUT_S:-600}
guard=()
[[ -n ${NO_GUARD:-} ]] && guard=(--no-guard)

rs_build
mkdir -p "$results"
{
    echo "# $(rs_date) $(uname -r) $(nproc) cores; $("$reverb" --version 2>/dev/null || echo reverb)"
    "$reverb" bench boot --ranks "$ranks" --job-timeout-s "$job_timeout" "${guard[@]}"
    echo
    "$reverb" bench boot --ranks "$host_ranks" --hosts "$hosts" --job-timeout-s "$job_timeout" "${guard[@]}"
} 2>&1 | tee "$results/boot-table.txt"
