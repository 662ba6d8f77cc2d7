#!/usr/bin/env bash
# The provider conformance suite (reverb-transport's `provider` and `fan_in` tests) across
# simulated hosts (ci/hosts.sh: network + mount + UTS namespaces, each with its own hostname,
# /dev/shm and address): the tests run inside host ha with REVERB_TEST_HOSTS=ha,hb, so the
# testkit puts each job's ranks on ha and hb in blocks (3 ranks: ha, ha, hb), some pairs on one
# host and some across. The provider and the hosts are parameters:
#
#   PROVIDER=auto bash ci/hosts-conformance.sh     (the defaults: PROVIDER=auto, HOSTS="ha hb")
#   PROVIDER=tcp HOSTS="ha hb hc" bash ci/hosts-conformance.sh
#
# A test that cannot mean anything on the provider or across hosts passes saying why it was
# skipped; the summary lists those. The in-process loopback_* cases are left out (no hosts).
# Needs root (namespaces). Removes its hosts on exit. Logs: target/hosts-conformance/.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== hosts-conformance: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root to make network, mount and UTS namespaces (run it as root)"
provider=${PROVIDER:-auto}
read -r -a hosts <<<"${HOSTS:-ha hb}"
[ ${#hosts[@]} -gt 0 ] || fail "HOSTS names no host"
list=$(IFS=,; echo "${hosts[*]}")
case $provider in
    shm | loopback) fail "PROVIDER=$provider cannot connect ranks on different hosts (use tcp or auto)" ;;
esac

say "building the provider and fan_in tests"
bins=$(cargo ci-test --test provider --test fan_in --no-run --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("provider", "fan_in"):
        print(m["target"]["name"], m["executable"])')
[ "$(echo "$bins" | wc -l)" = 2 ] || fail "expected the provider and fan_in test binaries, got: $bins"

out=$PWD/target/hosts-conformance
rm -rf "$out"
mkdir -p "$out"
bash ci/hosts.sh down
trap 'bash ci/hosts.sh down' EXIT
bash ci/hosts.sh up "${hosts[@]}"

failed=()
summary=()
while read -r name bin; do
    say "$name on $provider, ranks on hosts $list"
    log=$out/$name.log
    # From the crate's directory, as cargo runs tests; one test at a time, so each skip line
    # follows its test's name. Each job is bounded by the testkit; the whole run by timeout.
    rc=0
    (cd transport && REVERB_TEST_HOSTS=$list REVERB_PROVIDER=$provider timeout --signal=KILL 900 \
        bash ../ci/hosts.sh exec "${hosts[0]}" -- "$bin" --test-threads=1 --nocapture --skip loopback_) >"$log" 2>&1 || rc=$?
    result=$(grep '^test result:' "$log" | tail -n 1)
    skips=$(grep -E '^test [a-z0-9_]+ \.\.\. skipped' "$log" | sed -E 's/^test ([a-z0-9_]+) \.\.\. /  \1: /' || true)
    summary+=("$name: ${result:-no result (exit $rc)}" "${skips:-  (nothing skipped)}")
    if [ "$rc" != 0 ]; then
        failed+=("$name")
        # What each failed test printed: its panic goes to stderr, unbuffered, so it lands
        # before the (line-buffered) "test NAME ... FAILED"; the 150 lines up to each.
        awk '{ buf[NR % 150] = $0 } / FAILED$/ { for (i = NR - 149; i <= NR; i++) if (i > 0) print buf[i % 150] }' \
            "$log" >&2
        grep -q ' FAILED$' "$log" || tail -n 40 "$log" >&2
    fi
done <<<"$bins"

say "summary (provider $provider, hosts $list; logs in $out)"
printf '%s\n' "${summary[@]}" >&2
[ ${#failed[@]} = 0 ] || fail "${failed[*]} (see $out)"
say "ok"
