#!/usr/bin/env bash
# docs/ describes the current state; history goes to CHANGELOG.md at the repository root.
# Fails when a file under docs/ holds:
#   - a token of 7-40 hex digits that git resolves as a commit (git cat-file -e TOKEN^{commit});
#   - a clock time, HH:MM with HH 00-29, optionally followed by UTC;
#   - an "issue N" (or "stop N") reference;
# and when docs/benchmarks.md or docs/fault-tolerance.md has 600 lines or more.
# Usage: bash ci/docs-lint.sh   (from anywhere; reads the repository it lives in)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
max_lines=600
status=0

fail() {
    echo "docs-lint: $*" >&2
    status=1
}

# Text files under docs/ (the SVG plots included: they are text and hold no history).
mapfile -t files < <(find docs -type f \( -name '*.md' -o -name '*.svg' -o -name '*.txt' \) | sort)

# Commit hashes. A token of only decimal digits is a measured number, not a hash we wrote, so
# it is not asked about; 16-hex checksums and the like are asked and do not resolve.
for f in "${files[@]}"; do
    while IFS=: read -r line token; do
        [[ $token =~ ^[0-9]+$ ]] && continue
        if git cat-file -e "${token}^{commit}" 2>/dev/null; then
            fail "$f:$line: commit hash $token (history belongs in CHANGELOG.md)"
        fi
    done < <(grep -noE '\b[0-9a-f]{7,40}\b' "$f" | sort -u || true)
done

# Clock times. The pattern refuses what looks like part of something else, so these are not
# flagged: host:port and addresses (a dot, colon or word character before or after, as in
# 127.0.0.1:18515 or ha:2), ratios written with a colon inside longer runs (1:2:3), and
# ISO-8601 timestamps' seconds. Allowed exceptions, by exact text (none needed today; add a
# line here with a comment saying why when a doc must show a time-like string):
allowed_times=(
)
time_re='(?<![\w.:])[0-2][0-9]:[0-5][0-9](?![\w:])( ?UTC)?'
for f in "${files[@]}"; do
    while IFS= read -r hit; do
        text=${hit#*:}
        skip=''
        for a in "${allowed_times[@]}"; do
            [[ $text == *"$a"* ]] && skip=1
        done
        [[ -n $skip ]] || fail "$f:${hit%%:*}: clock time in: $text"
    done < <(grep -nP "$time_re" "$f" || true)
done

# Issue and stop numbers.
for f in "${files[@]}"; do
    while IFS= read -r hit; do
        fail "$f:${hit%%:*}: reference to an issue or stop number: ${hit#*:}"
    done < <(grep -niE '\b(issue|stop) [0-9]+\b' "$f" || true)
done

# Sizes.
for f in docs/benchmarks.md docs/fault-tolerance.md; do
    [[ -f $f ]] || continue
    n=$(wc -l <"$f")
    if ((n >= max_lines)); then
        fail "$f has $n lines (must stay under $max_lines: split it by subject)"
    fi
done

if ((status == 0)); then
    echo "docs-lint: docs/ passes (${#files[@]} files)"
fi
exit "$status"
