# What every subcommand of scripts/reverb-scripts shares (sourced, not run): the one build
# step, the machine/date stamp, the interleaving helpers and the ratio printing.
# Sourcing it moves to the repository root.

RS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$RS_ROOT"
RS_NAME=${RS_NAME:-reverb-scripts}
RS_BUILT=''            # "profile|packages|features" of this invocation's build, once done
RS_BUILT_FEATURES=''   # comma list, for the check that a later need is covered
RS_BUILT_PACKAGES=''

rs_log() { printf '[%s] %s\n' "$RS_NAME" "$*" >&2; }
rs_die() { printf '%s: %s\n' "$RS_NAME" "$*" >&2; exit 1; }

# rs_build [--mpi | --package P...] [--features F,...] [--debug | --profile P] [-- CARGO-ARGS...]
# The single build step: `cargo build --release -p reverb [-p reverb-mpi] [--features ...]`
# (--mpi adds reverb-mpi; --package P builds P instead of reverb), once per invocation: a later
# call whose packages and features the first one covered only sets the variables again. With
# REVERB_BIN (or the older REVERB) set and only reverb (and reverb-mpi) asked for, nothing is
# built and that binary (and the libmpich.so beside it) is used. Sets `reverb` (the binary),
# `reverb_dir` (its directory), `cargo_out` (the profile's target directory) and
# `rs_cargo_profile` (cargo's flags for the profile). Cargo's output goes to stderr.
rs_build() {
    local packages=() features=() profile=release extra=() f
    while (($#)); do
        case $1 in
            --package) packages+=("$2"); shift 2 ;;
            --mpi) packages+=(reverb reverb-mpi); shift ;;
            --features) IFS=, read -r -a f <<<"$2"; features+=("${f[@]}"); shift 2 ;;
            --debug) profile=debug; shift ;;
            --profile) profile=$2; shift 2 ;;
            --) shift; extra=("$@"); break ;;
            *) rs_die "rs_build: unknown argument $1" ;;
        esac
    done
    ((${#packages[@]})) || packages=(reverb)
    # The profile's directory under target/ and cargo's flag for it (dev's directory is debug).
    case $profile in
        release) rs_cargo_profile=(--release) ;;
        debug | dev) profile=debug rs_cargo_profile=() ;;
        *) rs_cargo_profile=(--profile "$profile") ;;
    esac
    local bin=${REVERB_BIN:-${REVERB:-}} others=" ${packages[*]} "
    others=${others// reverb / } others=${others// reverb-mpi / }
    if [[ -n $bin && ${#extra[@]} -eq 0 && -z ${others// /} ]]; then
        [[ -x $bin ]] || rs_die "REVERB_BIN=$bin is not executable"
        reverb=$(realpath "$bin")
        reverb_dir=$(dirname "$reverb")
        cargo_out=$reverb_dir
        return
    fi
    cargo_out=${CARGO_TARGET_DIR:-$RS_ROOT/target}/$profile
    [[ $cargo_out == /* ]] || cargo_out=$RS_ROOT/$cargo_out
    reverb=$cargo_out/reverb
    reverb_dir=$cargo_out
    if [[ -n $RS_BUILT ]]; then
        rs_covered "$profile" "${packages[*]}" "${features[*]}" ||
            rs_die "a second build in one invocation ($profile: ${packages[*]} ${features[*]}; built: $RS_BUILT)"
        return
    fi
    local args=(build "${rs_cargo_profile[@]}") p
    for p in "${packages[@]}"; do args+=(-p "$p"); done
    # Unqualified: every selected package that has the feature gets it (reverb-mpi's
    # fault-injection and verbs only forward to reverb-runtime's, which the one build shares
    # anyway). `reverb/F` would leave the selected reverb package without it.
    ((${#features[@]} == 0)) || args+=(--features "$(IFS=,; echo "${features[*]}")")
    rs_log "cargo ${args[*]} ${extra[*]}"
    cargo "${args[@]}" "${extra[@]}" >&2
    RS_BUILT="$profile|${packages[*]}|${features[*]}"
    RS_BUILT_PACKAGES=" ${packages[*]} " RS_BUILT_FEATURES=" ${features[*]} "
}

# rs_covered PROFILE PACKAGES FEATURES: did this invocation's build include all of them?
rs_covered() {
    local x
    [[ $RS_BUILT == "$1|"* ]] || return 1
    for x in $2; do [[ $RS_BUILT_PACKAGES == *" $x "* ]] || return 1; done
    for x in $3; do [[ $RS_BUILT_FEATURES == *" $x "* ]] || return 1; done
}

# ---- stamp --------------------------------------------------------------------------------
rs_date() { date -u +%FT%TZ; }
rs_cpu_model() { sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1; }
rs_machine() { echo "$(nproc) cores, $(rs_cpu_model), Linux $(uname -r)"; }
rs_commit() {
    local c
    c=$(git -C "$RS_ROOT" rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
    git -C "$RS_ROOT" diff --quiet HEAD 2>/dev/null || c+=" (with uncommitted changes)"
    echo "$c"
}
rs_load() { cut -d' ' -f1-3 /proc/loadavg; }
# One line: when, where, what was measured.
rs_stamp() { echo "$(rs_date); $(rs_machine); commit $(rs_commit); load $(rs_load)"; }

# ---- interleaving -------------------------------------------------------------------------
# rs_rounds N FN ARGS...: FN ROUND ARGS... for ROUND in 1..N, saying which round on stderr.
rs_rounds() {
    local n=$1 fn=$2 round
    shift 2
    for ((round = 1; round <= n; round++)); do
        rs_log "round $round/$n"
        "$fn" "$round" "$@"
    done
}

# rs_order ROUND SIDE...: the sides rotated by ROUND - 1, one a line, so that no side always
# runs first (with two sides: alternating between rounds).
rs_order() {
    local round=$1 i
    shift
    for ((i = 0; i < $#; i++)); do
        local k=$(((round - 1 + i) % $# + 1))
        echo "${!k}"
    done
}

# rs_better low|high OLD NEW: the better of two values (NEW when there is no OLD yet).
rs_better() {
    if [[ -z $2 ]]; then echo "$3"; return; fi
    if [[ -z $3 ]]; then echo "$2"; return; fi
    awk -v d="$1" -v a="$2" -v b="$3" 'BEGIN { if (d == "high") print (b > a) ? b : a; else print (b < a) ? b : a }'
}

# ---- ratios -------------------------------------------------------------------------------
# rs_ratio A B [DIGITS]: A / B with DIGITS decimals (default 2); empty when B is 0 or missing.
rs_ratio() {
    awk -v a="${1:-}" -v b="${2:-}" -v d="${3:-2}" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.*f", d, a / b }'
}

# rs_pct A BASE: the change of A against BASE in percent, signed, one decimal ("+1.4%").
rs_pct() {
    awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a != "" && b + 0 > 0) printf "%+.1f%%", (a - b) / b * 100 }'
}

# ---- subcommands --------------------------------------------------------------------------
# rs_cmd_file ARGS...: RS_FILE = the file of the subcommand ARGS start with (`compare X` is
# scripts/cmd/compare-X.sh), RS_SHIFT = the words it took.
rs_cmd_file() {
    case ${1:-help} in
        compare) RS_SHIFT=2 RS_FILE=$RS_ROOT/scripts/cmd/compare-${2:-}.sh ;;
        *) RS_SHIFT=1 RS_FILE=$RS_ROOT/scripts/cmd/$1.sh ;;
    esac
}

# rs_sub SUBCOMMAND... ARGS: runs another subcommand in a subshell of this invocation (so it
# reuses this invocation's build).
rs_sub() {
    (
        rs_cmd_file "$@"
        [[ -f $RS_FILE ]] || rs_die "unknown subcommand '$*'"
        shift "$RS_SHIFT"
        RS_NAME=$(basename "$RS_FILE" .sh)
        # shellcheck source=/dev/null
        . "$RS_FILE"
    )
}
