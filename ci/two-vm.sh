#!/usr/bin/env bash
# Two soft-RoCE hosts: two QEMU (TCG) VMs, each with its own kernel and an rxe device (rxe_nic)
# on a virtio NIC, the two NICs joined by a QEMU socket netdev over the host's loopback. RDMA
# between them crosses a real (emulated) wire between two kernels, as between two machines.
#
#   ci/two-vm.sh [--timeout SECS] [--smp N] [--mem MB] -- CMD ARGS...
#
# CMD runs in both VMs at once (same directory and environment as the caller, see
# ci/rxe-vm.sh), with TWO_VM_INDEX (0 or 1), TWO_VM_SELF and TWO_VM_PEER (the two NIC
# addresses), TWO_VM_HOSTS ("vm0 vm1") and RXE_NIC_DEV/RXE_NIC_GID exported; the VMs' host
# names are vm0 and vm1. Each VM's output is prefixed with [vm0] / [vm1]. Exit status: the
# first non-zero status of the two (124: timeout), 0 when both succeed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

TIMEOUT=900 SMP=2 MEM=1536
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) TIMEOUT=$2; shift ;;
        --smp) SMP=$2; shift ;;
        --mem) MEM=$2; shift ;;
        --) shift; break ;;
        *) sed -n '2,13p' "$0" >&2; exit 2 ;;
    esac
    shift
done
[ $# -gt 0 ] || { echo "two-vm: no command" >&2; exit 2; }

ADDR0=10.79.0.1 ADDR1=10.79.0.2
# A free port on the host's loopback for the wire (the kernel picks, the socket closes).
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# Both images must exist before two VMs race to build them.
bash "$HERE/rxe-vm.sh" --build >&2

vm() { # index mode
    local i=$1 mode=$2 self peer
    shift 2
    self=$([ "$i" = 0 ] && echo $ADDR0 || echo $ADDR1)
    peer=$([ "$i" = 0 ] && echo $ADDR1 || echo $ADDR0)
    TWO_VM_INDEX=$i TWO_VM_SELF=$self TWO_VM_PEER=$peer TWO_VM_HOSTS="vm0 vm1" RXE_VM_QUIET=1 \
        bash "$HERE/rxe-vm.sh" --timeout "$TIMEOUT" --smp "$SMP" --mem "$MEM" \
        --nic "$mode:$PORT" --addr "$self/24" --hostname "vm$i" -- "$@" 2>&1 | sed -u "s/^/[vm$i] /"
    return "${PIPESTATUS[0]}"
}

# The listener first: QEMU's connect side fails if nobody listens yet.
vm 0 listen "$@" &
pid0=$!
sleep 1
rc1=0
vm 1 connect "$@" || rc1=$?
rc0=0
wait "$pid0" || rc0=$?
echo "two-vm: vm0 exited $rc0, vm1 exited $rc1" >&2
[ "$rc0" != 0 ] && exit "$rc0"
exit "$rc1"
