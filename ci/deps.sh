#!/usr/bin/env bash
# Installs what reverb's build and tests need, idempotently: apt runs only when a package is
# missing. `--compare` adds what the side-by-side scripts need (ucx_perftest, jq; Open MPI's
# headers for scripts/reverb-scripts compare mpi).
# The verbs feature's bindings come from ibverbs-sys's bindgen (clang; cmake answers its version
# query, scripts/lib/cmake-headers-only.sh) on Debian's libibverbs-dev headers, and link Debian's
# libibverbs; the rxe userspace provider comes with ibverbs-providers. libisal-dev gives
# the Reed-Solomon bench its ISA-L column (the build skips it when absent). slurmctld, slurmd,
# slurm-client and munge are Debian's Slurm, which ci/slurm.sh runs on simulated hosts with its
# own throwaway config (no service of theirs needs to run). openmpi-bin's mpirun is tested as a
# plain launcher (reverb/tests/mpirun.rs). gcc compiles the C ABI's examples and tests
# (ci/capi.sh). mpich and libmpich-dev give reverb-mpi MPICH's ABI (mpi.h) and ci/mpi.sh its
# mpicc.mpich and mpiexec.mpich (and mpif90.mpich, with gfortran, for the Fortran binding's
# tests); valgrind runs MPI C programs under memcheck (ci/mpi-memcheck.sh). libfabric-dev gives
# the libfabric provider (ofi/) its headers and libfabric to link; libfabric-bin its fi_info;
# autoconf, automake, libtool and make build libfabric's fabtests (ci/fabtests.sh).
set -euo pipefail

packages=(pkg-config libhwloc-dev cmake libclang-dev libibverbs-dev
    rdma-core ibverbs-providers ibverbs-utils libisal-dev binutils gcc
    iproute2 python3 slurmctld slurmd slurm-client munge openmpi-bin mpich libmpich-dev gfortran valgrind
    libfabric-dev libfabric-bin autoconf automake libtool make)
for arg in "$@"; do
    case "$arg" in
        --compare) packages+=(ucx-utils jq libopenmpi-dev) ;;
        *) echo "ci/deps.sh: unknown option $arg (known: --compare)" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if ((${#missing[@]})); then
    echo "ci/deps.sh: installing ${missing[*]}" >&2
    sudo=()
    if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null; then
    echo "ci/deps.sh: cargo not found; install a Rust toolchain (https://rustup.rs)" >&2
    exit 1
fi

# The lint gates of ci/test.sh need rustfmt and clippy.
for tool in rustfmt clippy; do
    if ! cargo "${tool/rustfmt/fmt}" --version >/dev/null 2>&1; then
        if command -v rustup >/dev/null; then
            rustup component add "$tool"
        else
            echo "ci/deps.sh: cargo $tool is missing and rustup is not here to add it" >&2
            exit 1
        fi
    fi
done
