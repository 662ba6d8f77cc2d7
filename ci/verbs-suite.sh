#!/usr/bin/env bash
# The verbs provider's tests on soft-RoCE: builds the suite with `--features verbs` on the host,
# then runs it inside the rxe VM (ci/rxe-vm.sh) twice: on one device (rxe0 over lo), and across
# two rxe "hosts" joined by a veth pair, one per simulated node, with the pidfd shortcut off so
# dead peers are found by RC retry exhaustion as between real hosts. Event-driven completions:
# two busy-polling ranks starve each other on the VM's 2 emulated CPUs.
# Then the launcher's node respawn test (reverb/tests/respawn.rs) the same two ways.
set -euo pipefail
cd "$(dirname "$0")/.."

# The last test executable cargo builds for `cargo test $@ --no-run`.
test_bin() {
    local bin
    bin=$(cargo test "$@" --no-run --message-format=json \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
    [[ -x "$bin" ]] || { echo "ci/verbs-suite.sh: test binary of '$*' not found" >&2; exit 1; }
    echo "$bin"
}
bin=$(test_bin -p reverb-transport --features verbs --test provider)
respawn=$(test_bin -p reverb --features verbs --test respawn)

export REVERB_PROVIDER=verbs REVERB_WAIT_MODE=event
two_hosts=(env REVERB_VERBS_DEVICE=rxe_h0,rxe_h1 REVERB_VERBS_PID_WATCH=0 bash ci/rxe-vm.sh --netns --timeout 900 --)

echo "== verbs suite, one host (rxe0 over lo)" >&2
REVERB_VERBS_DEVICE=rxe0 bash ci/rxe-vm.sh --timeout 900 -- "$bin" --test-threads=1 --show-output --color never

echo "== verbs suite, two hosts (rxe_h0 <-veth-> rxe_h1)" >&2
"${two_hosts[@]}" "$bin" --test-threads=1 --show-output --color never

echo "== node respawn through the launcher, one host" >&2
REVERB_VERBS_DEVICE=rxe0 bash ci/rxe-vm.sh --timeout 900 -- "$respawn" --test-threads=1 --show-output --color never

echo "== node respawn through the launcher, two hosts" >&2
"${two_hosts[@]}" "$respawn" --test-threads=1 --show-output --color never
