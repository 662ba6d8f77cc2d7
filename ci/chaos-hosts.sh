#!/usr/bin/env bash
# A short fault campaign across simulated hosts (ci/hosts.sh): `reverb chaos --hosts` with 8
# ranks on four hosts ca..cd (a node of 2 ranks each) and the spares ce, cf; each trial is a
# `reverb run --hosts ... --spares ...` job of stencil, master-worker or ring under causal,
# pessimistic-sb or pessimistic-rb logging (node unit, buddy checkpoints, provider auto) with
# one host fault, the kinds in turn:
#   host              a whole host lost mid-run (`ci/hosts.sh kill`): its ranks restart on a
#                     spare and the job must end with the failure-free checksum;
#   net-cut           a host's wire cut mid-run (`ci/hosts.sh cut`), its processes left running:
#                     the agents' heartbeats must see it lost, then as `host`;
#   agent             a host's agent killed alone (REVERB_FAULT_AGENT): its ranks stay, the job
#                     must end with the failure-free checksum;
#   host-in-recovery  a host lost, then another while the first's ranks restart on a spare: a
#                     second failure during a recovery, which must end in a clear
#                     unrecoverable report (or survive).
# Fails on any wrong answer, hang or other failure. Its own host set (REVERB_HOSTS_DIR
# /run/reverb-hosts-chaos, addresses 10.79.0.x), removed on exit; needs root (namespaces).
#
# Settings: REVERB_CHAOS_TRIALS (default 4: each kind once), REVERB_CHAOS_SEED (default random, printed),
# REVERB_CHAOS_KINDS (default all four, e.g. host,host-in-recovery). The long campaign of
# docs/chaos.md is this script with REVERB_CHAOS_TRIALS=500.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== chaos-hosts: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
source ci/chaos-verdict.sh
[ "$(id -u)" = 0 ] || fail "needs root to make network, mount and UTS namespaces (run it as root)"

cargo ci-build  # .cargo/config.toml: the build every suite shares
target=${CARGO_TARGET_DIR:-$PWD/target}
bin=$target/ci/reverb
out=$target/chaos-hosts
rm -rf "$out"
mkdir -p "$out"

# Names and addresses of its own: ci/hosts-suite.sh uses ha..hf, the Slurm suite sa..se.
export REVERB_HOSTS_DIR=/run/reverb-hosts-chaos REVERB_HOSTS_NET=10.79.0
hosts=ca:2,cb:2,cc:2,cd:2
spares=ce,cf
bash ci/hosts.sh down
trap 'bash ci/hosts.sh down' EXIT
bash ci/hosts.sh up ca cb cc cd ce cf
export REVERB_RSH="bash $PWD/ci/hosts.sh exec"

trials=${REVERB_CHAOS_TRIALS:-4}
seed=${REVERB_CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
kinds=${REVERB_CHAOS_KINDS:-host,net-cut,agent,host-in-recovery}
say "$trials trials, seed $seed, kinds $kinds, 8 ranks on $hosts, spares $spares"
start=$SECONDS
code=0
"$bin" chaos --hosts "$hosts" --spares "$spares" --kinds "$kinds" --trials "$trials" --seed "$seed" \
    --host-kill-cmd "bash $PWD/ci/hosts.sh kill" --host-up-cmd "bash $PWD/ci/hosts.sh up" \
    --net-cut-cmd "bash $PWD/ci/hosts.sh cut" --json >"$out/report.json" 2>"$out/campaign.log" || code=$?
grep '^reverb chaos' "$out/campaign.log" >&2 || true
say "campaign: exit $code after $((SECONDS - start)) s"
chaos_verdict "$out" "$code"
say "ok"
