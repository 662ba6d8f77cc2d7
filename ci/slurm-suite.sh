#!/usr/bin/env bash
# Real Slurm on simulated hosts (ci/slurm.sh): slurmctld in host sctl, a slurmd in each of sa and
# sb, srun from sctl.
#   1. placement: `srun -N 2 --ntasks-per-node=2 hostname` runs twice on each host;
#   2. Slurm's environment (SLURM_PROCID, _NTASKS, _NODELIST, _NODEID, _LOCALID), and each task
#      inside its host (its own /dev/shm);
#   3. a reverb job under srun: 4 ranks, 2 per host, rank 0 hosting the rendezvous at
#      REVERB_ROOT=sa:PORT; the auto provider benches a pair across the hosts (tcp);
#   4. the stencil under srun (causal logs, buddy checkpoints across the hosts), with the
#      checksum of a one-host run;
#   5. a task SIGKILLed from outside: srun --kill-on-bad-exit ends non-zero within 15 s;
#   6. host sb lost (ci/hosts.sh kill): srun reports the node failure and ends within 40 s,
#      and sinfo shows sb down;
#   7. sb comes back (ci/slurm.sh restart) and runs tasks again;
#   8. `reverb run --hosts` with srun as its remote shell on four hosts and a spare: host sc
#      lost mid-run, its ranks restart on the spare, the checksum is the failure-free run's;
#   9. the same as one srun step of agents (`salloc -N 5 -c 2 --no-kill reverb run --slurm --spares 1`,
#      which runs `srun -N 5 --ntasks-per-node=1 --no-kill reverb agent --spares 1 ...`), and an
#      srun step of agents by hand, failure-free;
#  10. partial redundancy under srun's agents (`reverb run -n 4 --redundancy 1.5 --slurm` on 3
#      nodes): a copy killed, masked by the controller, no respawn, the 4-rank answer.
# Needs root (namespaces). Its hosts (REVERB_HOSTS_DIR=/run/reverb-hosts-slurm, 10.78.0.x) and
# cluster are its own, apart from ci/hosts-suite.sh's; it removes them on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== slurm-suite [${SECONDS}s]: $*" >&2; }
fail() {
    say "FAILED: $*"
    bash ci/slurm.sh logs || true
    exit 1
}
[ "$(id -u)" = 0 ] ||
    fail "needs root to make namespaces and run Slurm's daemons (run the test command as root)"

export REVERB_HOSTS_DIR=/run/reverb-hosts-slurm REVERB_HOSTS_NET=10.78.0
export REVERB_SLURM_DIR=/run/reverb-slurm-suite REVERB_SLURM_CTL=sctl
target=${CARGO_TARGET_DIR:-$PWD/target}
bin=$target/ci/reverb
out=$target/slurm-suite
cargo ci-build  # .cargo/config.toml: the build every suite shares
rm -rf "$out"
mkdir -p "$out"

start=$SECONDS
bash ci/slurm.sh down
bash ci/hosts.sh down
trap 'bash ci/slurm.sh down; bash ci/hosts.sh down' EXIT
bash ci/slurm.sh up sa sb
slurm() { timeout "$1" bash ci/slurm.sh run sctl -- "${@:2}"; }

say "placement: srun -N 2 --ntasks-per-node=2 hostname"
placed=$(slurm 30 srun -N 2 --ntasks-per-node=2 hostname | sort | tr '\n' ' ')
[ "$placed" = "sa sa sb sb " ] || fail "tasks ran on: $placed"

say "Slurm's environment, and each task inside its host"
slurm 30 srun -N 2 --ntasks-per-node=2 \
    bash -c 'env | grep ^SLURM_ | sort >"$0/env-$SLURM_PROCID"' "$out"
for rank in 0 1 2 3; do
    want="SLURM_LOCALID=$((rank % 2)) SLURM_NODEID=$((rank / 2)) SLURM_NODELIST=sa,sb"
    want+=" SLURM_NTASKS=4 SLURM_PROCID=$rank"
    got=$(grep -E '^SLURM_(LOCALID|NODEID|NODELIST|NTASKS|PROCID)=' "$out/env-$rank" | tr '\n' ' ')
    [ "$got" = "$want " ] || fail "task $rank's environment: $got (wanted $want)"
done
shm=$(slurm 30 srun -N 2 --ntasks-per-node=1 bash -c \
    'touch /dev/shm/slurm-suite-$SLURM_PROCID; ls /dev/shm | grep -c slurm-suite-; rm /dev/shm/slurm-suite-*')
[ "$shm" = "$(printf '1\n1')" ] || fail "tasks on two hosts share /dev/shm (each saw $shm file(s))"

say "reverb under srun: 4 ranks on 2 hosts, the rendezvous at sa (rank 0), auto: a pair across the hosts"
REVERB_ROOT=sa:7411 REVERB_JOB_TOKEN=slurm-suite REVERB_PROVIDER=auto REVERB_BOOT_TIMEOUT_S=30 \
    slurm 120 srun -N 2 --ntasks-per-node=2 \
    "$bin" bench lat --op send --sizes 8,65536 --iters 500 --pair 0,2 --verbose \
    >"$out/bench.txt" 2>"$out/bench.err" ||
    { tail -n 20 "$out/bench.err" >&2; fail "reverb bench under srun"; }
cat "$out/bench.txt"
grep -q "provider: auto (tcp)   ranks: 0 <-> 2" "$out/bench.txt" ||
    fail "auto did not pick tcp between sa and sb"
grep -q "rank 0 on host sa, rank 2 on host sb (2 hosts); provider tcp" "$out/bench.err" ||
    fail "bench --verbose: $(grep 'reverb bench:' "$out/bench.err")"

say "the stencil under srun (auto, causal logs, buddy checkpoints across the hosts) against one host"
stencil() { # NAME LAUNCH...: the stencil's checksum, launched by LAUNCH
    local name=$1
    shift
    mkdir -p "$out/$name"
    env REVERB_PROVIDER=auto REVERB_RUNTIME_REPORT="$out/$name" REVERB_LOG=causal \
        REVERB_LOG_UNIT=node REVERB_CKPT=buddy REVERB_BOOT_TIMEOUT_S=30 "$@" \
        "$bin" app stencil --iters 400 --size 64 --ckpt-every 100 >"$out/$name.log" 2>&1 ||
        { tail -n 20 "$out/$name.log" >&2; fail "stencil $name"; }
    cat "$out/$name/checksum"
}
one=$(stencil one-host "$bin" run -n 4 --ranks-per-node 2 --timeout 120 --)
two=$(REVERB_ROOT=sa:7412 REVERB_JOB_TOKEN=slurm-suite-stencil stencil srun \
    timeout 120 bash ci/slurm.sh run sctl -- srun -N 2 --ntasks-per-node=2)
say "checksums: one host $one, under srun on two hosts $two"
[ "$one" = "$two" ] || fail "checksums differ"

# srun in the background ($srun_pid), its tasks sleeping once they have written their pids to
# $out/task-RANK; returns when all have.
sleepers() { # TASKS ERR-FILE SRUN-OPTION...
    local tasks=$1 err=$2 rank
    shift 2
    rm -f "$out"/task-*
    slurm 90 srun "$@" bash -c 'echo $$ >"$0/task-$SLURM_PROCID.tmp"
        mv "$0/task-$SLURM_PROCID.tmp" "$0/task-$SLURM_PROCID"; exec sleep 120' "$out" 2>"$err" &
    srun_pid=$!
    for rank in $(seq 0 $((tasks - 1))); do
        for _ in $(seq 100); do [ -s "$out/task-$rank" ] && break; sleep 0.1; done
        [ -s "$out/task-$rank" ] || fail "task $rank did not start within 10 s"
    done
}

# srun ends non-zero (not by the suite's timeout) within LIMIT seconds; sets $took.
srun_ends() { # WHAT LIMIT ERR-FILE
    local at=$SECONDS rc=0
    wait "$srun_pid" || rc=$?
    took=$((SECONDS - at))
    cat "$3" >&2
    if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then fail "srun exited $rc after $1"; fi
    ((took <= $2)) || fail "srun took ${took}s to end after $1"
}

say "a task SIGKILLed: srun --kill-on-bad-exit ends non-zero"
sleepers 2 "$out/killed.err" -N 2 --ntasks-per-node=1 --kill-on-bad-exit=1
kill -KILL "$(cat "$out/task-1")"
srun_ends "task 1 was SIGKILLed" 15 "$out/killed.err"
grep -q "sb: task 1: Killed" "$out/killed.err" || fail "srun did not report task 1 killed on sb"

# Both tasks run before the host goes: a host lost while srun launches fails the launch instead.
say "host sb lost under a running srun"
sleepers 2 "$out/lost.err" -N 2 --ntasks-per-node=1
bash ci/hosts.sh kill sb
srun_ends "host sb was lost" 40 "$out/lost.err"
grep -q "Node failure on sb" "$out/lost.err" || fail "srun did not report sb's failure"
states=$(slurm 10 sinfo -h -N -o '%N %t')
grep -q '^sb down' <<<"$states" || fail "sinfo after sb was lost: $states"
say "srun ended ${took}s after sb was lost"

say "sb comes back (same address, a fresh slurmd) and takes tasks again"
bash ci/slurm.sh restart sb
say "sb is idle again"
placed=$(slurm 30 srun -N 2 --ntasks-per-node=1 hostname | sort | tr '\n' ' ')
[ "$placed" = "sa sb " ] || fail "tasks ran on: $placed after sb came back"

say "down"
bash ci/slurm.sh down

# reverb run --hosts with srun as its remote shell: each host's agent is a Slurm job step on
# its node, run from the Slurm controller's host. Host sc is lost mid-run: the job's controller
# (sa's agent) sees sc's agent gone and restarts its ranks on the spare se's agent. srun exits
# 0 on a node failure, so the front goes by sa's agent's last line ("job ended"), not srun's
# exit status, to tell the job's end from sa's loss.
say "a host lost under Slurm: 8 ranks on sa..sd (srun per host), spare se; sc taken down mid-run"
bash ci/slurm.sh up sa sb sc sd se
spare_stencil() { # NAME [--spares HOST]
    local dir=$out/$1
    mkdir -p "$dir"
    timeout 240 bash ci/slurm.sh run sctl -- env REVERB_RSH="srun -N1 -n1 -w" REVERB_PROVIDER=auto \
        REVERB_RUNTIME_REPORT="$dir" REVERB_LOG=causal REVERB_LOG_UNIT=node REVERB_CKPT=buddy \
        "$bin" run -n 8 --ranks-per-node 2 --respawn 1 --timeout 200 --hosts sa:2,sb:2,sc:2,sd:2 \
        "${@:2}" -- "$bin" app stencil --iters 12000 --size 64 --ckpt-every 500 >"$dir/job.log" 2>&1 ||
        { tail -n 30 "$dir/job.log" >&2; fail "stencil $1 under srun"; }
    cat "$dir/checksum"
}
free=$(spare_stencil spare-free)
( sleep 5; bash ci/hosts.sh kill sc ) &
killer=$!
lost=$(spare_stencil spare-lost --spares se)
wait "$killer"
grep -q "host sc lost" "$out/spare-lost/job.log" ||
    fail "the job ended before sc was taken down, or the loss went unseen (raise --iters?)"
grep -q "start again on spare se" "$out/spare-lost/job.log" || fail "sc's ranks did not move to se"
say "checksums: failure-free $free, sc lost and its ranks on se $lost"
[ "$free" = "$lost" ] || fail "checksums differ"

# The same job as one Slurm step of agents, one per node: `reverb run --slurm --spares 1` inside
# an allocation (salloc -N 5 -c 2 --no-kill) runs `srun -N 5 --ntasks-per-node=1 --no-kill reverb agent
# --ranks-per-host 2 --spares 1`: 2 ranks per node, the last node a spare, the controller on sa. sc is taken down
# mid-run: the controller sees its agent gone and hands its ranks to the agent on se.
say "a host lost under one srun step of agents (salloc -N 5 -c 2 --no-kill reverb run --slurm --spares 1); sc taken down"
bash ci/slurm.sh restart sc
dir=$out/agents-lost
mkdir -p "$dir"
( sleep 5; bash ci/hosts.sh kill sc ) &
killer=$!
code=0
timeout 240 bash ci/slurm.sh run sctl -- env REVERB_PROVIDER=auto REVERB_RUNTIME_REPORT="$dir" \
    REVERB_LOG=causal REVERB_LOG_UNIT=node REVERB_CKPT=buddy salloc -N 5 -c 2 --no-kill \
    "$bin" run -n 8 --slurm --spares 1 --ranks-per-node 2 --respawn 1 --timeout 200 -- \
    "$bin" app stencil --iters 12000 --size 64 --ckpt-every 500 >"$dir/job.log" 2>&1 || code=$?
wait "$killer"
grep -q "host sc lost" "$dir/job.log" || { tail -n 30 "$dir/job.log" >&2; fail "sc's loss went unseen"; }
grep -q "ranks 4-5 start again on spare se" "$dir/job.log" || fail "sc's ranks did not move to se"
[ "$code" = 0 ] || { tail -n 30 "$dir/job.log" >&2; fail "reverb run --slurm exited $code"; }
agents=$(cat "$dir/checksum")
say "checksums: failure-free $free, sc lost under srun's agents $agents"
[ "$free" = "$agents" ] || fail "checksums differ"

# The agents' step as the issue writes it, srun run by hand: failure-free, same answer.
say "srun -N 4 --ntasks-per-node=1 -c 2 reverb agent -- the stencil, failure-free"
bash ci/slurm.sh restart sc
dir=$out/agents-srun
mkdir -p "$dir"
timeout 240 bash ci/slurm.sh run sctl -- env REVERB_PROVIDER=auto REVERB_RUNTIME_REPORT="$dir" \
    REVERB_LOG=causal REVERB_LOG_UNIT=node REVERB_CKPT=buddy REVERB_JOB_TOKEN=slurm-suite-agents \
    srun -N 4 --ntasks-per-node=1 -c 2 --no-kill \
    "$bin" agent --ranks-per-node 2 --respawn 1 --timeout 200 -- \
    "$bin" app stencil --iters 12000 --size 64 --ckpt-every 500 >"$dir/job.log" 2>&1 ||
    { tail -n 30 "$dir/job.log" >&2; fail "srun reverb agent"; }
grep -q "job ended (code 0)" "$dir/job.log" || fail "the agents' job did not end well"
[ "$free" = "$(cat "$dir/checksum")" ] || fail "checksums differ: $(cat "$dir/checksum")"

# Partial redundancy under one srun step of agents: 4 virtual ranks at 1.5x are 6 processes,
# 2 per node on 3 nodes, the third holding the copies of ranks 0 and 2 (physical 4 and 5).
# Physical rank 4 dies: the controller masks it (a live mate, rank 0, on another node), no
# respawn, and the answer is the 4-rank stencil's.
say "partial redundancy under srun's agents (salloc -N 3 ... reverb run -n 4 --redundancy 1.5 --slurm): a copy killed, masked"
dir=$out/redundant
mkdir -p "$dir/reference"
REVERB_PROVIDER=shm REVERB_LOG=causal REVERB_CKPT=buddy REVERB_RUNTIME_REPORT="$dir/reference" \
    "$bin" run -n 4 --ranks-per-node 2 --timeout 200 -- "$bin" app stencil --iters 3000 --size 64 \
    --ckpt-every 500 >"$dir/reference.log" 2>&1 || fail "the 4-rank stencil: $(tail -n 20 "$dir/reference.log")"
timeout 240 bash ci/slurm.sh run sctl -- env REVERB_PROVIDER=auto REVERB_RUNTIME_REPORT="$dir" \
    REVERB_LOG=causal REVERB_LOG_UNIT=node REVERB_CKPT=buddy REVERB_FAULT=4:2000 salloc -N 3 -c 2 --no-kill \
    "$bin" run -n 4 --redundancy 1.5 --slurm --ranks-per-node 2 --respawn 1 --timeout 200 -- \
    "$bin" app stencil --iters 3000 --size 64 --ckpt-every 500 >"$dir/job.log" 2>&1 ||
    { tail -n 30 "$dir/job.log" >&2; fail "reverb run --redundancy 1.5 --slurm"; }
grep -q "a copy of virtual rank 0: masked" "$dir/job.log" || { tail -n 30 "$dir/job.log" >&2; fail "the copy's death was not masked"; }
! grep -q "respawning" "$dir/job.log" || fail "a masked copy's death restarted something"
[ "$(cat "$dir/reference/checksum")" = "$(cat "$dir/checksum")" ] ||
    fail "checksums differ: $(cat "$dir/checksum"), the 4-rank stencil $(cat "$dir/reference/checksum")"
bash ci/slurm.sh down
say "ok in $((SECONDS - start))s (after the build)"
