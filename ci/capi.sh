#!/usr/bin/env bash
# The C ABI from C: installs libreverb (scripts/reverb-scripts install-capi, a build of the
# `ci` profile with the fault hooks) into a scratch prefix, compiles the C examples and the
# error test with pkg-config (shared and static), and runs them under `reverb run`: the ring
# (regions, put with immediate, tagged messages) on shm and tcp, the error paths, and the
# fault-tolerant stencil with a node killed (REVERB_FAULT) and respawned, which must print the
# failure-free checksum.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "== capi: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
command -v cc >/dev/null || fail "needs a C compiler (apt-get install gcc)"
command -v pkg-config >/dev/null || fail "needs pkg-config (apt-get install pkg-config)"

target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/capi-ci
rm -rf "$work"
mkdir -p "$work/bin"
cargo ci-build  # .cargo/config.toml: the build every suite shares
reverb=$target/ci/reverb
bash scripts/reverb-scripts install-capi --prefix "$work/prefix" --profile ci -- --features fault-injection
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig

build() { # NAME SOURCE PKG
    cc -std=c11 -Wall -Wextra -Werror -O1 "$2" $(pkg-config --cflags --libs "$3") -o "$work/bin/$1" ||
        fail "compiling $2 against $3"
}
build ring examples/c/ring.c reverb
build ring-static examples/c/ring.c reverb-static
build stencil_ft examples/c/stencil_ft.c reverb
build errors capi/tests/c/errors.c reverb
ldd "$work/bin/ring-static" | grep -q libreverb && fail "ring-static links libreverb.so"

run() { # LOG ARGS... : reverb run, output kept
    local log=$work/$1
    shift
    "$reverb" run --timeout 120 "$@" >"$log" 2>&1 || fail "reverb run $*: $(tail -n 20 "$log")"
}
for provider in shm tcp; do
    REVERB_PROVIDER=$provider run ring-$provider.log -n 4 -- "$work/bin/ring"
    grep -q "ring: 4 ranks on $provider, puts checked, token 10" "$work/ring-$provider.log" ||
        fail "ring on $provider: $(cat "$work/ring-$provider.log")"
    REVERB_PROVIDER=$provider run errors-$provider.log -n 2 -- "$work/bin/errors"
    grep -q "errors: ok" "$work/errors-$provider.log" || fail "errors on $provider: $(cat "$work/errors-$provider.log")"
    say "ring and error paths on $provider: ok"
done
run ring-static.log -n 2 -- "$work/bin/ring-static"
grep -q "token 3" "$work/ring-static.log" || fail "static ring: $(cat "$work/ring-static.log")"
say "ring linked statically: ok"

export REVERB_LOG=causal REVERB_CKPT=buddy
run stencil-clean.log -n 4 --ranks-per-node 2 -- "$work/bin/stencil_ft" 100 10
clean=$(sed -n 's/^\[0\] checksum: //p' "$work/stencil-clean.log")
[ -n "$clean" ] || fail "no checksum: $(cat "$work/stencil-clean.log")"
# Rank 3 (node 1) dies at its 45th send (iteration 45, after the checkpoint of iteration 40).
REVERB_FAULT=3:45 run stencil-faulty.log -n 4 --ranks-per-node 2 --respawn 1 -- "$work/bin/stencil_ft" 100 10
grep -q "restarted at iteration 40" "$work/stencil-faulty.log" || fail "no restart: $(cat "$work/stencil-faulty.log")"
faulty=$(sed -n 's/^\[0\] checksum: //p' "$work/stencil-faulty.log")
[ "$faulty" = "$clean" ] || fail "checksum $faulty after the failure, $clean without: $(cat "$work/stencil-faulty.log")"
say "C stencil_ft: node killed and respawned, checksum $faulty as failure-free: ok"
say "ok"
