#!/usr/bin/env bash
# A default build of the runtime library (what applications link) has no fault hooks: none of
# the markers below is in the rlibs of reverb-runtime and the crates under it. The hooks are
# behind a cargo feature, which no profile changes. The rlibs are the `ci` profile's; the same
# markers must all be found in CI's build (`cargo ci-build`, which has the hooks), so the check
# cannot pass because a marker went stale or was optimized away.
set -euo pipefail
cd "$(dirname "$0")/.."

# crate|kind|pattern. kind: str (bytes in the rlib), sym (a defined symbol, demangled),
# undef (an undefined symbol: a libc call).
markers=(
    "reverb_runtime|str|fault injection: "    # the runtime's hooks' log lines (runtime/src/fault.rs)
    "reverb_runtime|undef|kill"               # kill(2): its only caller is runtime/src/sigkill.rs
    "reverb_logger|str|fault injection: "     # the logger core's start-up self-kill
    "reverb_ckpt|sym|damage_hosted_copy"      # the checkpointer's damage calls (the stage hook inlines)
    "reverb_transport|sym|::testkit::"        # the multi-process test kit
)

# The rlibs `cargo ARGS` produced, one per line.
rlibs() {
    cargo "$@" --message-format=json |
        grep -oE '"[^"]*/libreverb_[a-z]+(-[0-9a-f]+)?\.rlib"' | tr -d '"' | sort -u
}

# Whether the rlib of crate $2 among the paths in $1 holds marker kind $3, pattern $4.
has() {
    local rlib
    rlib=$(grep -E "/lib$2(-[0-9a-f]+)?\.rlib$" <<<"$1") || { echo "no $2 rlib built" >&2; exit 1; }
    # nm's output is taken whole first: `nm | grep -q` can fail by SIGPIPE under pipefail.
    case $3 in
        str) grep -qaF -- "$4" "$rlib" ;;
        sym) grep -qF -- "$4" <<<"$(nm -C --defined-only "$rlib" 2>/dev/null)" ;;
        undef) grep -qw -- "$4" <<<"$(nm -u "$rlib" 2>/dev/null)" ;;
    esac
}

check() {   # $1: the rlib list, $2: "absent" or "present"
    local bad=0 m crate kind pattern found
    for m in "${markers[@]}"; do
        IFS='|' read -r crate kind pattern <<<"$m"
        if has "$1" "$crate" "$kind" "$pattern"; then found=present; else found=absent; fi
        if [[ $found != "$2" ]]; then
            echo "no-fault-hooks: $crate: $kind '$pattern' is $found, expected $2" >&2
            bad=1
        fi
    done
    return $bad
}

check "$(rlibs build --profile ci -p reverb-runtime)" absent
# The build every suite shares (.cargo/config.toml), which has the hooks.
check "$(rlibs ci-build)" present
echo "no-fault-hooks: a default build of reverb-runtime has none of ${#markers[@]} hook markers"
