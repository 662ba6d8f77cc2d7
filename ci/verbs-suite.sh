#!/usr/bin/env bash
# The verbs provider's tests on soft-RoCE: builds the suites with `--features verbs` on the host,
# then runs them inside the rxe VM (ci/rxe-vm.sh): all on one device (rxe0 over lo), and those
# about a peer's death or connection across two rxe "hosts" joined by a veth pair, one per
# simulated node, with the pidfd shortcut off so dead peers are found by RC retry exhaustion as
# between real hosts (all of them with REVERB_CI_FULL=1). Event-driven completions:
# two busy-polling ranks starve each other on the VM's 2 emulated CPUs.
# Suites: the provider's own tests (transport/tests/provider.rs; fan_in.rs: many senders into
# one receiver through a small shared receive queue, and a sender dying in it; connect.rs: on-demand
# connections: QPs only for peers with traffic, simultaneous first sends, a first put/get, a peer
# dead before it connected; verbs-unit: the provider's own unit tests, e.g. registering memory
# another provider allocated, ranks reached another way staying Dead), the launcher's node respawn
# (reverb/tests/respawn.rs), the logger's multi-process tests (remote log ring, LoggedEndpoint
# protocols with kills and replay, causal bounds; not the team layouts' message counts, which
# no provider changes) and the checkpoint suite (8 ranks / 4 nodes,
# SIGKILLs, buddy and Reed-Solomon restore, corruption) and `reverb demo` (reverb/tests/demo.rs:
# the stencil with a node SIGKILLed, identical checksums), logger cores (reverb/tests/logger_core.rs:
# the protocols through the loggers; the placements (CPU pinning, no provider's part), the
# `reverb bench --log` smoke run, whose numbers come from scripts/reverb-scripts compare
# logging-verbs, and the CLI checks stay on shm) and their respawn (reverb/tests/logger_respawn.rs:
# a logger killed alone, with and without --respawn, and the stencil with a node killed with its
# logger; the master-worker cases are left out: the 8-rank causal master-worker did not finish
# in 300 s under TCG even failure-free; so are the loggers killed inside init's slot and
# start-up exchanges (collectives the bootstrap carries; a respawned logger's ring and a
# restarted rank's slots on the provider are the node-killed case's too), which took 90 s of
# the suite's 217 under TCG and run on shm with the workspace's tests). A suite is
# `name:binary[:test filters]` (libtest's: names to run, `--skip NAME`).
# The logger's detqueue_procs is not here:
# the determinant queue is node-local shared memory by design (no provider), so it stays shm.
# Every suite of one run shares one VM boot (~15 s under TCG); per-suite wall times are printed.
set -euo pipefail
cd "$(dirname "$0")/.."

# The test executables of CI's one build (`cargo ci-test`, .cargo/config.toml: the `ci` profile,
# optimized with the dev profile's assertions, verbs compiled in; an unoptimized build ran the
# suites three to four times slower under TCG), listed once as "KIND NAME PATH" lines.
executables=$(cargo ci-test --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["kind"][0], m["target"]["name"], m["executable"])
')
# test_bin KIND NAME: the test executable of target NAME (an integration test, or a crate's lib).
test_bin() {
    local bin
    bin=$(awk -v k="$1" -v n="$2" '$1 == k && $2 == n { print $3 }' <<<"$executables" | tail -n 1)
    [[ -x "$bin" ]] || { echo "ci/verbs-suite.sh: test binary of $1 '$2' not found" >&2; exit 1; }
    echo "$bin"
}
suites=(
    "provider:$(test_bin test provider)"
    "fan-in:$(test_bin test fan_in)"
    "connect:$(test_bin test connect)"
    "verbs-unit:$(test_bin lib reverb_transport):verbs::tests"
    "respawn:$(test_bin test respawn)"
    "logring:$(test_bin test logring_shm)"
    "causal:$(test_bin test causal_procs)"
    "protocol:$(test_bin test protocol_procs):--skip team_layouts_log_only_inter_team_messages"
    "checkpoint:$(test_bin test checkpoint_procs)"
    "demo:$(test_bin test demo)"
    "logger-core:$(test_bin test logger_core):protocols_log_through"
    "logger-respawn:$(test_bin test logger_respawn):a_logger_killed_alone a_logger_killed_without node_killed_with_its_logger_keeps_the_stencil"
)
# The auto provider with verbs between hosts: ranks placed on two host names (shm inside one).
# Of the provider's suite, what the mux adds to verbs: every size of message and RMA through
# it, lent and advertised buffers (memory one provider allocated, the other registered), any-
# source order and completions merged from two providers, its event wait, a peer's death.
auto_provider_tests="tagged_every_size_verified rma_every_size_verified lent_sends_arrive \
advertised_receives_get_the_bytes claims_land_in_lent_memory any_source_keeps_per_sender_order \
completions_go_to_their_owners_queue_only event_wait_sleeps_and_wakes sigkilled_peer respawned_node_reconnects"
auto_suites=(
    "auto:$(test_bin test auto)"
    "auto-provider:$(test_bin test provider):$auto_provider_tests"
    "auto-fan-in:$(test_bin test fan_in)"
)

# TCG runs everything several times slower: the tests scale their time bounds by this (6: at 3,
# protocol_procs' 80 MiB stream without logging passed its 90 s receive bound on 2026-11-28), a
# bootstrap collective may wait 5 minutes (the default 60 s is less than a slow TCG takes to post
# protocol_procs' 80 MiB stream: on 2026-11-28 its receiver left the barrier first), and a log
# write 1 minute to become durable (logger_core's determinant gather timed out at the default
# 10 s the same day), and a dead logger core 3 minutes to come back (a respawned one took over the
# default 30 s to start under TCG with the host loaded).
# The build's binaries stay cached in the guest (ci/rxe-vm.sh --ro).
export RXE_VM_RO=${CARGO_TARGET_DIR:-$PWD/target}/ci
export REVERB_PROVIDER=verbs REVERB_WAIT_MODE=event REVERB_TEST_TIME_SCALE=6 REVERB_BOOT_TIMEOUT_S=300 \
    REVERB_LOG_DURABLE_TIMEOUT_MS=60000 REVERB_LOGGER_REJOIN_TIMEOUT_S=180
# Runs inside the guest: each suite one after the other, its wall time, all failures at the end.
guest_runner='
failed=()
for suite in "$@"; do
    name=${suite%%:*} rest=${suite#*:}
    bin=${rest%%:*} filters=()
    [ "$rest" = "$bin" ] || read -ra filters <<< "${rest#*:}"
    echo "== [$REVERB_VERBS_DEVICE] $name" >&2
    start=$(date +%s.%N)
    rc=0
    # The loopback_* twins in the provider suite run in-process on the loopback provider,
    # never on verbs: the workspace tests run them on the host.
    "$bin" "${filters[@]}" --skip loopback_ --test-threads=1 --show-output --color never || rc=$?
    secs=$(echo "$(date +%s.%N) $start" | awk "{printf \"%.1f\", \$1 - \$2}")
    echo "== [$REVERB_VERBS_DEVICE] $name: exit $rc in ${secs}s" >&2
    timings+=("$name ${secs}s rc=$rc")
    [ "$rc" = 0 ] || failed+=("$name")
done
echo "== [$REVERB_VERBS_DEVICE] timings: ${timings[*]}" >&2
[ ${#failed[@]} = 0 ] || { echo "== [$REVERB_VERBS_DEVICE] FAILED: ${failed[*]}" >&2; exit 1; }
'

# Across two hosts, the suites whose subject is a peer's death or its connection (found by RC
# retry exhaustion there): of the provider's suite those tests and one of every size, fan-in,
# connect, the node respawn and the demo. The logger's and checkpoint suites add an hour under
# a slow TCG (protocol alone took 5-7 min) and run across two hosts, with the whole provider
# suite, with REVERB_CI_FULL=1 (docs/ci.md).
two_host_provider_tests="sigkilled_peer respawned_node_reconnects node_failing_twice reconnect_drops \
messages_sent_before_a_clean_exit a_posted_receive_gets_the_last_message verbs_remote_access_error \
tagged_every_size_verified rma_every_size_verified"
two_host_suites=()
for suite in "${suites[@]}"; do
    case ${suite%%:*} in
    provider)
        if [[ ${REVERB_CI_FULL:-0} == 1 ]]; then two_host_suites+=("$suite"); else
            two_host_suites+=("$suite:$two_host_provider_tests")
        fi ;;
    fan-in | connect | respawn | demo) two_host_suites+=("$suite") ;;
    *) [[ ${REVERB_CI_FULL:-0} == 1 ]] && two_host_suites+=("$suite") ;;
    esac
done

echo "== verbs suites, one host (rxe0 over lo)" >&2
REVERB_VERBS_DEVICE=rxe0 bash ci/rxe-vm.sh --timeout 2400 -- bash -c "$guest_runner" runner "${suites[@]}"

echo "== verbs suites, two hosts (rxe_h0 <-veth-> rxe_h1): ${two_host_suites[*]%%:*}" >&2
REVERB_VERBS_DEVICE=rxe_h0,rxe_h1 REVERB_VERBS_PID_WATCH=0 \
    bash ci/rxe-vm.sh --netns --timeout 1800 -- bash -c "$guest_runner" runner "${two_host_suites[@]}"

echo "== auto: shm inside a host name, verbs between two (rxe0)" >&2
REVERB_PROVIDER=auto REVERB_AUTO_NET=verbs REVERB_TEST_HOST_NAMES=sa,sb REVERB_VERBS_DEVICE=rxe0 \
    bash ci/rxe-vm.sh --timeout 900 -- bash -c "$guest_runner" runner "${auto_suites[@]}"
