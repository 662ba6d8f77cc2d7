#!/usr/bin/env bash
# A short fault campaign on one host that covers every message size class and every kill
# phase: `reverb chaos` with a fixed seed whose first 36 trials draw each class (eager,
# at-threshold, rendezvous, fragmented: the apps' main messages sized against
# REVERB_RNDV_THRESH and REVERB_LOG_MAX_MESSAGE) and each phase (none, init, early, before a
# checkpoint, each checkpoint stage, the log GC, after a commit, mid-interval, a recovery);
# the unit test `the_ci_slice_covers_every_class_and_phase` (reverb/src/chaos/plan.rs) pins
# that. Fails on any wrong answer, hang or other failure; a failed trial's re-run commands
# (the campaign's and its `reverb run` job's) are in the log.
#
# Settings: REVERB_CHAOS_TRIALS (default 36), REVERB_CHAOS_SEED (default 2: the pinned one),
# REVERB_CHAOS_JOBS (trials at once, default 2), REVERB_CHAOS_TIMEOUT (per trial, default 90 s).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== chaos-phases: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
source ci/chaos-verdict.sh

cargo ci-build  # .cargo/config.toml: the build every suite shares
target=${CARGO_TARGET_DIR:-$PWD/target}
bin=$target/ci/reverb
out=$target/chaos-phases
rm -rf "$out"
mkdir -p "$out"

trials=${REVERB_CHAOS_TRIALS:-36}
seed=${REVERB_CHAOS_SEED:-2}
jobs=${REVERB_CHAOS_JOBS:-2}
timeout=${REVERB_CHAOS_TIMEOUT:-90}
say "$trials trials, seed $seed, $jobs at a time"
start=$SECONDS
code=0
"$bin" chaos --trials "$trials" --seed "$seed" --jobs "$jobs" --timeout "$timeout" --json \
    >"$out/report.json" 2>"$out/campaign.log" || code=$?
grep -E '^(reverb chaos|    (re-run|job):)' "$out/campaign.log" >&2 || true
say "campaign: exit $code after $((SECONDS - start)) s"
chaos_verdict "$out" "$code"
say "ok"
