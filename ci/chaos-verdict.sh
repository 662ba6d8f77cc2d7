# Sourced by the campaign scripts (ci/chaos-hosts.sh, ci/chaos-phases.sh), which define `say`
# and `fail`: `chaos_verdict OUT CODE` reads the campaign's OUT/report.json (and
# OUT/campaign.log) and fails on no report, a wrong answer, a hang, any other failure, or a
# non-zero exit CODE of `reverb chaos`.
chaos_verdict() {
    local out=$1 code=$2
    [ -s "$out/report.json" ] || fail "no report (exit $code): $(tail -n 5 "$out/campaign.log")"
    # A top-level count of the report (serde_json's pretty print: two spaces, one key a line).
    count() { sed -n "s/^  \"$1\": \([0-9]*\),\{0,1\}\$/\1/p" "$out/report.json"; }
    local wrong hangs other
    wrong=$(count wrong_answers)
    hangs=$(count hangs)
    other=$(count other_failures)
    say "survived $(count survived), reported unrecoverable $(count reported_unrecoverable), wrong $wrong, hangs $hangs, other failures $other"
    if [ "$wrong" != 0 ] || [ "$hangs" != 0 ] || [ "$other" != 0 ]; then
        fail "$(grep -E '^reverb chaos: trial .* -> (WRONG-ANSWER|HANG|OTHER-FAILURE)' "$out/campaign.log" || true)"
    fi
    [ "$code" = 0 ] || fail "reverb chaos exited $code"
}
