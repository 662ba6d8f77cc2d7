#!/usr/bin/env bash
# Unmodified Open MPI over the libfabric provider reverb (ofi/, libreverb-fi.so), on loopback:
# MPICH's pt2pt and coll C tests (MPICH_TESTS, default ../shared/external/mpich-tests beside the
# clone), built with Open MPI's wrapper, run by mpirun.openmpi with `--mca pml cm --mca mtl ofi`,
# FI_PROVIDER=reverb and the provider's endpoints carried by reverb's tcp provider
# (REVERB_OFI_PROVIDER=tcp: Open MPI's mtl asks for FI_REMOTE_COMM). The tests listed in
# OFI_OPENMPI_LIST (default ofi/openmpi-passing.txt) run, and each must pass; OFI_OPENMPI_ALL=1
# runs every test of the directories and prints each result (to find new passes).
# The suite's run.sh compiles with `mpicc.mpich`: a `mpicc.mpich` that is Open MPI's wrapper
# goes first on its PATH. Then, where IMB's source is (IMB_SRC, default ../shared/external/imb),
# IMB-MPI1 built by Open MPI's wrappers runs PingPong (0 B to 64 KiB) and must exit 0.
# Skips (exit 0, with the reason) where Open MPI or the suite is absent.
# Usage: bash ci/ofi-openmpi.sh [run.sh test directories, default: pt2pt coll]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
suite=${MPICH_TESTS:-$root/../shared/external/mpich-tests}
imb=${IMB_SRC:-$root/../shared/external/imb}
target=${CARGO_TARGET_DIR:-$root/target}
say() { echo "ofi-openmpi: $*" >&2; }

for tool in mpirun.openmpi mpicc.openmpi fi_info; do
    command -v "$tool" >/dev/null || { say "skipped: no $tool (apt-get install openmpi-bin libopenmpi-dev libfabric-bin)"; exit 0; }
done
[[ -x $suite/run.sh ]] || { say "skipped: no MPICH test suite at $suite (set MPICH_TESTS)"; exit 0; }
(($#)) || set -- pt2pt coll

cargo build --release -p reverb-ofi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/prov" "$work/shim"
ln -s "$target/release/libreverb_fi.so" "$work/prov/libreverb-fi.so"
printf '#!/bin/sh\nexec mpicc.openmpi "$@"\n' >"$work/shim/mpicc.mpich"
chmod +x "$work/shim/mpicc.mpich"
export REVERB_OFI_PROVIDER=tcp
FI_PROVIDER_PATH=$work/prov fi_info -p reverb >/dev/null || { say "fi_info does not list the reverb provider"; exit 1; }

as_root=()
(($(id -u) == 0)) && as_root=(--allow-run-as-root)
launcher="mpirun.openmpi ${as_root[*]} --oversubscribe --mca pml cm --mca mtl ofi --mca btl self
    -x FI_PROVIDER=reverb -x FI_PROVIDER_PATH=$work/prov -x REVERB_OFI_PROVIDER -np"
start=$SECONDS
list=${OFI_OPENMPI_LIST:-$root/ofi/openmpi-passing.txt}
only=(--list "$list")
[[ ${OFI_OPENMPI_ALL:-0} == 1 ]] && only=()
PATH=$work/shim:$PATH bash "$suite/run.sh" --launcher "$launcher" --out "$work/out" --timeout 60 \
    "${only[@]}" "$@" >"$work/results" 2>&1 || true
say "ran in $((SECONDS - start)) s: $(tail -n 1 "$work/results")"
grep -E '^(pass|FAIL|SKIP)' "$work/results" >&2 || true
status=0
while IFS= read -r name; do
    [[ -z $name || $name == \#* ]] && continue
    if ! grep -qxF -- "pass $name" "$work/results"; then
        say "expected to pass, did not: $name"
        status=1
    fi
done <"$list"
((status == 0)) && say "every listed test passes"

if [[ -f $imb/src_cpp/Makefile ]]; then
    cp -r "$imb/src_c" "$imb/src_cpp" "$imb/Makefile" "$work/"
    make -s -C "$work/src_cpp" -f Makefile TARGET=MPI1 CC=mpicc.openmpi CXX=mpicxx.openmpi \
        CPPFLAGS=-DOMPI_SKIP_MPICXX -j"$(nproc)" >"$work/imb-build.log" 2>&1 \
        || { say "IMB-MPI1 does not build"; tail -n 5 "$work/imb-build.log" >&2; exit 1; }
    # shellcheck disable=SC2086
    if timeout 300 $launcher 2 "$work/src_cpp/IMB-MPI1" PingPong -msglog 0:16 -iter 200 -time 2 \
        </dev/null >"$work/imb.log" 2>&1; then
        say "IMB-MPI1 PingPong: pass"
        grep -E '^ +[0-9]+ +[0-9]+ ' "$work/imb.log" >&2 || true
    else
        say "IMB-MPI1 PingPong failed"
        tail -n 20 "$work/imb.log" >&2
        status=1
    fi
else
    say "IMB-MPI1 skipped: no IMB source at $imb (set IMB_SRC)"
fi
exit "$status"
