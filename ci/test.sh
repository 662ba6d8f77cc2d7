#!/usr/bin/env bash
# reverb's test command (the README's, and what .ci/run calls). Fails on the first error.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step line carries the time since the start and the CPU time its commands used so far
# (user + system, which load on the machine does not inflate), so a slow run shows where it went.
cpu_file=$(mktemp)
trap 'rm -f "$cpu_file"' EXIT
# `times` must run in this shell: inside $(...) or a pipe it would report a subshell's children
# (none). Its second line is the children's "XmY.YYYs XmY.YYYs".
cpu_seconds_of_times() {
    awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); s += p[1] * 60 + p[2] } printf "%d", s }' "$cpu_file"
}
step() {
    local cpu
    times >"$cpu_file"
    cpu=$(cpu_seconds_of_times)
    printf '\n== [%dm%02ds, cpu %dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) $((cpu / 60)) $((cpu % 60)) "$*" >&2
}

step "dependencies"
bash ci/deps.sh

step "format, lints and docs (warnings are errors)"
cargo fmt --all --check
# Linted as CI builds it (.cargo/config.toml's ci-build: the `ci` profile, the fault hooks and
# verbs), so the build step below finds the build scripts and proc-macros (the verbs
# bindings from ibverbs-sys among them) already compiled.
features=$(sed -n 's/^ci-build = .*"--features", "\([^"]*\)".*/\1/p' .cargo/config.toml)
[[ -n $features ]] || { echo "ci/test.sh: no --features in .cargo/config.toml's ci-build" >&2; exit 1; }
cargo clippy --workspace --all-targets --profile ci --features "$features" -- -D warnings
# Without verbs: its `cfg(not(feature = "verbs"))` paths are all in reverb-transport.
cargo clippy -p reverb-transport --all-targets --profile ci -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --profile ci --features "$features"
# docs/ says what is, not when: no commit hashes, clock times or issue numbers; no diaries.
bash ci/docs-lint.sh

# Every build below is `cargo ci-build` (.cargo/config.toml): the `ci` profile (Cargo.toml: the
# dev profile's assertions, optimized a little, so that the many-process suites run several times
# faster for a slower compile) with the fault hooks and the verbs provider, one feature set for
# every suite, so no suite compiles the tree again. The tests run with verbs compiled in and no
# RDMA device, as on most machines; the VM suites run the same binaries on soft-RoCE.
step "build (every target, the criterion benches too)"
# --all-targets builds the benches: a separate `cargo bench --no-run` recompiled every
# dependency at opt-level 3 for no check this one lacks.
cargo ci-build

step "a default build of the runtime library has no fault hooks"
bash ci/no-fault-hooks.sh

step "the MPI library's C boundary under Valgrind's memcheck (point-to-point, collectives, the CAML collectives program)"
bash ci/mpi-memcheck.sh

# From here three lanes share the two cores: the soft-RoCE VMs' suites in two lanes of their
# own (under TCG their guests wait on timers and on each other, leaving a core mostly idle
# alone; Slurm's suite follows the VMs in theirs) and the host's suites in the foreground. A lane's output is held until it ends; its
# step lines carry its own clock. The host sets are each suite's own (ha.., ca.., ma.., sa..; the
# VMs' addresses live inside the guests), nothing below builds (the VMs read the build live,
# cached: ci/rxe-vm.sh --ro).
step "the soft-RoCE VM's kernel and initramfs (once, before two lanes boot VMs)"
bash ci/rxe-vm.sh --build

declare -A lane_pid lane_log
lane() { # NAME FUNCTION: FUNCTION in the background, its output held
    lane_log[$1]=$(mktemp)
    (
        cpu_file=$(mktemp) # its own: step() writes it, and the foreground's steps run meanwhile
        trap 'rm -f "$cpu_file"' EXIT
        "$2"
    ) >"${lane_log[$1]}" 2>&1 &
    lane_pid[$1]=$!
}
await_lane() { # NAME: waits, shows its output, fails if it failed
    local rc=0
    wait "${lane_pid[$1]}" || rc=$?
    cat "${lane_log[$1]}" >&2
    rm -f "${lane_log[$1]}"
    unset "lane_pid[$1]"
    [[ $rc == 0 ]] || { echo "ci/test.sh: the $1 lane failed (exit $rc)" >&2; exit 1; }
}
kill_tree() { # PID: the process and everything under it
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
# If a suite fails: stop the lanes (their VMs among them), then remove every host set and the
# Slurm cluster (a killed bash does not run its own EXIT trap).
stop_lanes() {
    local pid
    for pid in "${lane_pid[@]}"; do kill_tree "$pid"; done
    REVERB_SLURM_DIR=/run/reverb-slurm-suite bash ci/slurm.sh down >/dev/null 2>&1 || true
    for set in /run/reverb-hosts:10.77.0 /run/reverb-hosts-chaos:10.79.0 /run/reverb-hosts-slurm:10.78.0 \
        /run/reverb-hosts-mpich:10.76.0; do
        REVERB_HOSTS_DIR=${set%:*} REVERB_HOSTS_NET=${set#*:} bash ci/hosts.sh down >/dev/null 2>&1 || true
    done
}
trap 'stop_lanes; rm -f "$cpu_file" "${lane_log[@]}"' EXIT

verbs_lane() {
    step "verbs provider on soft-RoCE (QEMU VM with rdma_rxe)"
    bash ci/verbs-suite.sh
    step "two soft-RoCE hosts (two QEMU VMs on one emulated wire): bench and a respawn across them"
    bash ci/two-vm-suite.sh
    # Slurm's hosts (sa..) are its own and its jobs mostly wait: here it overlaps the
    # foreground's suites instead of following them.
    step "real Slurm on simulated hosts: srun placement and environment, reverb under srun, a killed task, a lost host and its return, agents (reverb run --slurm)"
    bash ci/slurm-suite.sh
    step "verbs lane: ok"
}
mpi_verbs_lane() {
    step "MPI programs on verbs (soft-RoCE VM): the C Jacobi and master-worker surviving a killed node"
    bash ci/mpi-verbs.sh
    step "MPI on verbs lane: ok"
}
step "the verbs lane starts: the provider's, logger's and checkpoint suites in the VM, then two VMs, then Slurm"
lane verbs verbs_lane

step "tests"
cargo ci-test

step "the C ABI from C: libreverb installed with pkg-config, the C examples and error paths on shm and tcp, the C stencil surviving a killed node"
bash ci/capi.sh

step "MPI programs compiled by mpicc.mpich on reverb's libmpich.so.12: semantics, collectives, an unsupported call, Jacobi and master-worker surviving a killed node"
bash ci/mpi.sh

# Once ci/mpi.sh left its failure-free answers (ci/mpi-verbs.sh compares the VM's killed runs
# with them).
step "the MPI-on-verbs lane starts: MPI programs surviving a killed node in the VM"
lane mpi-verbs mpi_verbs_lane

step "MPICH's own tests that reverb passes, compiled by mpicc.mpich, on reverb's libmpich.so.12"
bash ci/mpich-suite.sh

step "libfabric's fabtests on the reverb provider (shm): three pairs and the quick set's listed tests"
bash ci/fabtests.sh

step "tcp provider: the conformance suite, fan-in, the demo and the checkpoint-boundary kills (REVERB_PROVIDER=tcp)"
REVERB_PROVIDER=tcp cargo ci-test --test provider --test fan_in --test demo --test ckpt_boundary

step "auto provider with ranks on two host names (shm inside a name, tcp between): conformance and fan-in"
REVERB_PROVIDER=auto REVERB_TEST_HOST_NAMES=sa,sb cargo ci-test --test provider --test fan_in

step "jobs across simulated hosts (namespaces): placement, bench over tcp and auto, a respawn, logger cores, a host lost (agents, spare)"
bash ci/hosts-suite.sh
step "a short fault campaign across simulated hosts: a host lost, its wire cut, its agent killed, a host lost during a recovery"
bash ci/chaos-hosts.sh
step "a fault campaign on one host drawing every message size class (eager to fragmented) and kill phase (init to recovery)"
bash ci/chaos-phases.sh
step "the conformance suite with ranks on two simulated hosts, on tcp and on auto"
PROVIDER=tcp bash ci/hosts-conformance.sh
PROVIDER=auto bash ci/hosts-conformance.sh
step "MPICH's one-sided tests with their ranks on two simulated hosts (tcp between, shm inside)"
bash ci/mpich-hosts.sh
step "a passive target computing on another simulated host while its origin puts, gets and flushes"
bash ci/rma-hosts.sh
step "the VM lanes' end (their output follows)"
await_lane verbs
await_lane mpi-verbs

step "ok"
