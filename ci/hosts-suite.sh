#!/usr/bin/env bash
# Jobs across simulated hosts without RDMA (ci/hosts.sh: network + mount + UTS namespaces with
# their own hostnames and /dev/shm), launched by `reverb run --hosts` through
# REVERB_RSH="bash ci/hosts.sh exec":
#   1. placement: 4 ranks as ha:2,hb:2 run where they were put, and as a host file says;
#   2. `reverb bench lat|bw` between the two hosts over TCP;
#   3. the auto provider (the default) in a 4-rank job, 2 ranks per host: bench latency of a pair
#      on one host (shm) and of a pair across the hosts (tcp);
#   4. the stencil, 4 ranks (a node per host), auto (shm inside a host, TCP between the hosts):
#      failure-free, and with rank 3 SIGKILLed on hb and respawned there, both with the checksum
#      of a one-host shm run;
#      the same with logger cores (`--logger shared-unpinned`, each host's agent starting its own
#      nodes' loggers): a one-host run's checksum, also with rank 3 and node 1's logger respawned
#      on hb;
#      the C Jacobi (built by mpicc.mpich) under `reverb run --mpi --hosts`: Debian MPICH's
#      checksum, failure-free and with rank 3 SIGKILLed on hb;
#   5. `reverb demo --hosts` on four hosts (auto);
#   6. a whole host lost (`ci/hosts.sh kill`) under `reverb run --hosts ... --spares`: its
#      ranks restart on the spare host and the job ends with the failure-free checksum;
#   7. a host's wire cut (`ci/hosts.sh cut`) while the other ranks wait in finalize for one of
#      its ranks (REVERB_FAULT_FINALIZE): its ranks restart on the spare, the same checksum;
#   8. two hosts lost together, each holding the other's message logs: the job stops with an
#      unrecoverable-failure report within its bound and prints no answer.
# Needs root (namespaces). Removes its hosts on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== hosts-suite: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root to make network, mount and UTS namespaces (run the test command as root)"

cargo ci-build  # .cargo/config.toml: the build every suite shares
target=${CARGO_TARGET_DIR:-$PWD/target}
bin=$target/ci/reverb
out=$target/hosts-suite
rm -rf "$out"
mkdir -p "$out"
bash ci/hosts.sh down
trap 'bash ci/hosts.sh down' EXIT
bash ci/hosts.sh up ha hb
export REVERB_RSH="bash $PWD/ci/hosts.sh exec"

say "placement"
placed=$("$bin" run -n 4 --hosts ha:2,hb:2 --timeout 60 -- /bin/hostname | sort | tr '\n' ' ')
[ "$placed" = "[0] ha [1] ha [2] hb [3] hb " ] || fail "ranks ran on: $placed"
printf '# Open MPI style\nhb slots=1\nha:3\n' >"$out/hostfile"
placed=$("$bin" run -n 4 --hostfile "$out/hostfile" --ranks-per-node 1 --timeout 60 -- /bin/hostname | sort | tr '\n' ' ')
[ "$placed" = "[0] hb [1] ha [2] ha [3] ha " ] || fail "ranks of the host file ran on: $placed"

say "bench between the hosts (tcp)"
for op in send put; do
    REVERB_PROVIDER=tcp "$bin" run -n 2 --hosts ha:1,hb:1 --timeout 120 --no-prefix -- \
        "$bin" bench lat --op $op --sizes 8,65536 --iters 500 --verbose 2>"$out/lat-$op.err" |
        tee "$out/lat-$op.txt"
    grep -q "provider: tcp" "$out/lat-$op.txt" || fail "bench lat --op $op did not run on tcp"
    # The host identity tells the namespaces apart (own hostname and /dev/shm).
    grep -q "rank 0 on host ha, rank 1 on host hb (2 hosts); provider tcp" "$out/lat-$op.err" ||
        fail "bench --verbose did not see two hosts: $(grep 'reverb bench:' "$out/lat-$op.err")"
done
REVERB_PROVIDER=tcp "$bin" run -n 2 --hosts ha:1,hb:1 --timeout 120 --no-prefix -- \
    "$bin" bench bw --op put --sizes 1M --iters 200 | tee "$out/bw-put.txt"

say "auto, 4 ranks on two hosts: a pair inside a host (shm) and a pair across (tcp)"
for pair in 0,1 0,2; do
    REVERB_PROVIDER=auto "$bin" run -n 4 --hosts ha:2,hb:2 --timeout 120 --no-prefix -- \
        "$bin" bench lat --op send --sizes 8,65536 --iters 500 --pair $pair --verbose \
        2>"$out/auto-$pair.err" | tee "$out/auto-$pair.txt"
done
grep -q "provider: auto (shm)   ranks: 0 <-> 1" "$out/auto-0,1.txt" || fail "auto did not pick shm inside host ha"
grep -q "provider: auto (tcp)   ranks: 0 <-> 2" "$out/auto-0,2.txt" || fail "auto did not pick tcp between ha and hb"
grep -q "rank 0 on host ha, rank 2 on host hb (2 hosts); provider tcp" "$out/auto-0,2.err" ||
    fail "bench --verbose: $(grep 'reverb bench:' "$out/auto-0,2.err")"

stencil() { # name provider [hosts] [fault]
    local dir=$out/$1
    mkdir -p "$dir"
    local where=(--ranks-per-node 2)
    [ -n "${3:-}" ] && where+=(--hosts "$3")
    [ -n "${LOGGER:-}" ] && where+=(--logger "$LOGGER")
    env REVERB_PROVIDER="$2" REVERB_RUNTIME_REPORT="$dir" REVERB_LOG=causal REVERB_LOG_UNIT=node \
        REVERB_CKPT=buddy ${4:+REVERB_FAULT=$4} \
        "$bin" run -n 4 "${where[@]}" --respawn 1 --timeout 300 -- \
        "$bin" app stencil --iters 400 --size 64 --ckpt-every 100 >"$dir/job.log" 2>&1 ||
        { tail -n 30 "$dir/job.log" >&2; fail "stencil $1"; }
    cat "$dir/checksum"
}
say "stencil: one host (shm), two hosts (auto: shm inside, tcp between), the same with rank 3 killed on hb"
one=$(stencil one-host shm)
two=$(stencil two-hosts auto ha:2,hb:2)
killed=$(stencil killed auto ha:2,hb:2 3:401)
grep -q "node 1 respawned" "$out/killed/job.log" || fail "hb's launcher did not respawn node 1"
say "checksums: one host $one, two hosts $two, two hosts with a kill $killed"
[ "$one" = "$two" ] && [ "$one" = "$killed" ] || fail "checksums differ"

say "MPI across hosts: the C Jacobi (mpicc.mpich) under reverb run --mpi --hosts, failure-free and with rank 3 killed on hb"
mpicc.mpich -std=c11 -O1 -Impi/include examples/mpi/jacobi_ft.c -o "$out/jacobi_ft"
timeout 120 mpiexec.mpich -n 4 "$out/jacobi_ft" 200 20 >"$out/jacobi-mpich.log" 2>&1 ||
    fail "jacobi_ft on MPICH: $(tail -n 20 "$out/jacobi-mpich.log")"
mpi_sum() { sed -n 's/.*checksum \([0-9a-f]*\).*/\1/p' "$1" | head -n 1; }
for fault in "" 3:150; do
    log=$out/jacobi-hosts${fault:+-killed}.log
    env REVERB_LOG=causal REVERB_LOG_UNIT=node REVERB_CKPT=buddy ${fault:+REVERB_FAULT=$fault} \
        "$bin" run --mpi -n 4 --hosts ha:2,hb:2 --respawn 1 --timeout 300 -- "$out/jacobi_ft" 200 20 \
        >"$log" 2>&1 || { tail -n 30 "$log" >&2; fail "jacobi_ft across hosts ${fault:+(rank $fault killed)}"; }
    [ "$(mpi_sum "$log")" = "$(mpi_sum "$out/jacobi-mpich.log")" ] ||
        fail "jacobi_ft across hosts: $(mpi_sum "$log"), MPICH $(mpi_sum "$out/jacobi-mpich.log")"
done
grep -q "restored at iteration" "$out/jacobi-hosts-killed.log" || fail "jacobi_ft across hosts: no rank restored"
say "MPI across hosts: MPICH's checksum $(mpi_sum "$out/jacobi-mpich.log"), failure-free and with a kill"

say "stencil with logger cores: one host, two hosts (each agent its nodes' loggers), rank 3 killed on hb"
logged_one=$(LOGGER=shared-unpinned stencil logged-one-host shm)
logged_two=$(LOGGER=shared-unpinned stencil logged-two-hosts auto ha:2,hb:2)
logged_killed=$(LOGGER=shared-unpinned stencil logged-killed auto ha:2,hb:2 3:401)
grep -q "node 1: logger core started again at incarnation 1" "$out/logged-killed/job.log" ||
    fail "hb's agent did not restart node 1's logger core"
say "checksums with logger cores: one host $logged_one, two hosts $logged_two, with a kill $logged_killed"
[ "$logged_one" = "$logged_two" ] && [ "$logged_one" = "$logged_killed" ] || fail "checksums with logger cores differ"

# A whole host lost: 8 ranks on four hosts (a node of 2 each), a fifth idle as a spare. hc is
# taken down mid-run (everything in it SIGKILLed, its wire removed); its ranks start again on
# the spare, restore from buddy copies on the other hosts and replay.
long_stencil() { # name [run options...]
    local dir=$out/$1
    shift
    mkdir -p "$dir"
    env REVERB_PROVIDER=auto REVERB_RUNTIME_REPORT="$dir" REVERB_LOG=causal REVERB_LOG_UNIT=node \
        REVERB_CKPT=buddy "$bin" run -n 8 --ranks-per-node 2 --respawn 1 --timeout 300 "$@" -- \
        "$bin" app stencil --iters 12000 --size 64 --ckpt-every 500 >"$dir/job.log" 2>&1 ||
        { tail -n 30 "$dir/job.log" >&2; fail "stencil $(basename "$dir")"; }
    cat "$dir/checksum"
}
bash ci/hosts.sh up hc hd he
say "reverb demo across four hosts (auto): failure-free, causal + checkpoints, node 1 killed on hb"
"$bin" demo --provider auto --hosts ha:2,hb:2,hc:2,hd:2 --iters 300 --size 128 --repeat 1 \
    >"$out/demo.txt" 2>"$out/demo.err" || { tail -n 20 "$out/demo.err" >&2; fail "demo across hosts"; }
grep -q "checksums identical:  *yes" "$out/demo.txt" || fail "demo across hosts: checksums differ"

say "a host lost: 8 ranks on ha..hd, spare he; hc taken down mid-run"
reference=$(long_stencil eight-one-host)
( sleep 4; bash ci/hosts.sh kill hc ) &
killer=$!
lost=$(long_stencil host-lost --hosts ha:2,hb:2,hc:2,hd:2 --spares he)
wait "$killer"
grep -q "host hc lost" "$out/host-lost/job.log" ||
    fail "the job ended before hc was taken down, or the loss went unseen (raise --iters?)"
grep -q "start again on spare he" "$out/host-lost/job.log" || fail "hc's ranks did not move to the spare"
say "checksums: one host $reference, hc lost and its ranks on the spare $lost"
[ "$reference" = "$lost" ] || fail "checksums differ"

# hd's wire cut while every other rank waits for rank 6 in finalize's final barrier
# (REVERB_FAULT_FINALIZE holds rank 6 there): no socket closes, so the survivors see rank 6
# unreachable and must wait until the agents declare hd lost (REVERB_DETECT_GRACE_MS, which
# the agents set to twice their timeout), then serve hd's ranks restarted on the spare.
say "hd's wire cut while the others wait in finalize: its ranks restart on the spare"
bash ci/hosts.sh down
bash ci/hosts.sh up ha hb hc hd he
dir=$out/cut-in-finalize
mkdir -p "$dir"
( for _ in $(seq 1 1200); do
      grep -q "rank 6: holding finalize" "$dir/job.log" 2>/dev/null && break
      sleep 0.1
  done
  sleep 1
  bash ci/hosts.sh cut hd ) &
cutter=$!
cut=$(REVERB_FAULT_FINALIZE=6:30000 long_stencil cut-in-finalize --hosts ha:2,hb:2,hc:2,hd:2 --spares he)
wait "$cutter"
grep -q "host hd lost" "$dir/job.log" || fail "hd's loss went unseen: $(tail -n 20 "$dir/job.log")"
grep -q "start again on spare he" "$dir/job.log" || fail "hd's ranks did not move to the spare"
say "checksums: one host $reference, hd cut in finalize and its ranks on the spare $cut"
[ "$reference" = "$cut" ] || fail "checksums differ"

# hc and hd lost together: each holds the other's message logs, so the job cannot be
# recovered; it must stop saying so, within its bound, and print no answer.
say "two hosts lost together (each the other's log buddy): unrecoverable, reported"
bash ci/hosts.sh down
bash ci/hosts.sh up ha hb hc hd he hf
dir=$out/buddies-lost
mkdir -p "$dir"
( sleep 4; bash ci/hosts.sh kill hc & bash ci/hosts.sh kill hd; wait ) &
killer=$!
start=$SECONDS
if env REVERB_PROVIDER=auto REVERB_RUNTIME_REPORT="$dir" REVERB_LOG=causal REVERB_LOG_UNIT=node \
    REVERB_CKPT=buddy "$bin" run -n 8 --ranks-per-node 2 --respawn 1 --timeout 120 \
    --hosts ha:2,hb:2,hc:2,hd:2 --spares he,hf -- \
    "$bin" app stencil --iters 12000 --size 64 --ckpt-every 500 >"$dir/job.log" 2>&1; then
    fail "the job finished though two hosts holding each other's logs were lost"
fi
wait "$killer"
# Which report depends on how close the two losses land: both in one recovery ("message logs
# lost with their buddies"), or the second during the first's recovery ("a second failure").
grep -q "unrecoverable failure: " "$dir/job.log" ||
    { tail -n 20 "$dir/job.log" >&2; fail "no unrecoverable-failure report"; }
[ ! -s "$dir/checksum" ] || fail "an answer was written: $(cat "$dir/checksum")"
say "unrecoverable, reported after $((SECONDS - start)) s"
say "ok"
