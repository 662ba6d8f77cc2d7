#!/bin/bash
# Runs inside the rxe test VM, chrooted into the host's root (see ci/vm/init).
# Sets up the network and Soft-RoCE devices with the host's own tools (ip, rdma),
# then runs the user's command ($RUNDIR/cmd.sh) and exits with its status.
#
# Devices (fixed names, so tests can hard-code them):
#   rxe0      on lo,      GID ::ffff:127.0.0.1 (RoCE v2). Verbs-only: rdma_cm
#             does not resolve over lo.
#   rxe1      on dummy0,  10.77.0.1/24. Use this one for rdma_cm (-R, rping, ...).
#   --netns:  two "hosts" joined by the veth pair veth_h0 <-> veth_h1 (see netns.sh for
#             why they stay in the initial netns): rxe_h0 on veth_h0 10.78.0.1/24,
#             rxe_h1 on veth_h1 10.78.0.2/24; traffic between them crosses the veth.
# Exported to the command: RXE_VM=1, RXE_LO_DEV/RXE_LO_GID, RXE_CM_DEV/RXE_CM_ADDR/
# RXE_CM_GID and with --netns RXE_NETNS=1, RXE_H{0,1}_DEV/_ADDR/_GID (GID = sgid index).
#   --nic:    rxe_nic on the virtio NIC (eth0) wired to another VM, with --addr; exported
#             as RXE_NIC_DEV/_ADDR/_GID.
RUNDIR=$1
NETNS=0 NIC_ADDR= VM_HOSTNAME=rxevm
. "$RUNDIR/opts"

setup_err=0
run() { "$@" || { echo "rxe-vm setup: failed: $*" >&2; setup_err=1; }; }

hostname "$VM_HOSTNAME" 2>/dev/null
run ip link set lo up
run rdma link add rxe0 type rxe netdev lo
ip link show dummy0 >/dev/null 2>&1 || run ip link add dummy0 type dummy  # dummy.ko makes dummy0 itself
run ip addr add 10.77.0.1/24 dev dummy0
run ip link set dummy0 up
run rdma link add rxe1 type rxe netdev dummy0

# Busy-polling programs on the 2 vCPUs starve ksoftirqd (plain SCHED_OTHER), and rxe's
# packets over a real netdev (veth) then wait for the next tick: ~4 ms per hop instead
# of ~50 us (measured with ib_write_lat across veth). Real-time ksoftirqd fixes it.
for c in /proc/[0-9]*/comm; do
    case "$(cat "$c" 2>/dev/null)" in
        ksoftirqd/*) p=${c#/proc/}; chrt -f -p 50 "${p%/comm}" 2>/dev/null ;;
    esac
done

if [ "$NETNS" = 1 ]; then
    . "$(dirname "$0")/netns.sh"
fi
if [ -n "$NIC_ADDR" ]; then
    run ip addr add "$NIC_ADDR" dev eth0
    run ip link set eth0 up
    run rdma link add rxe_nic type rxe netdev eth0
fi

# Index of the RoCE v2 GID that carries an IPv4 address (::ffff:a.b.c.d), for -x / sgid_index.
v2_ipv4_gid() {
    local d=/sys/class/infiniband/$1/ports/1 g i v t
    for g in "$d"/gids/*; do   # builtins only: forks are slow under TCG
        i=${g##*/}
        read -r v <"$g" 2>/dev/null || continue
        case "$v" in
            0000:0000:0000:0000:0000:ffff:*)
                read -r t <"$d/gid_attrs/types/$i" 2>/dev/null
                [ "$t" = "RoCE v2" ] && { echo "$i"; return; } ;;
        esac
    done
}
export RXE_VM=1 RXE_VM_RUN="$RUNDIR"
export RXE_LO_DEV=rxe0 RXE_LO_GID=$(v2_ipv4_gid rxe0)
export RXE_CM_DEV=rxe1 RXE_CM_ADDR=10.77.0.1 RXE_CM_GID=$(v2_ipv4_gid rxe1)
[ -n "$NIC_ADDR" ] && export RXE_NIC_DEV=rxe_nic RXE_NIC_ADDR=${NIC_ADDR%/*} RXE_NIC_GID=$(v2_ipv4_gid rxe_nic)
[ "$NETNS" = 1 ] && export RXE_H0_GID=$(v2_ipv4_gid rxe_h0) RXE_H1_GID=$(v2_ipv4_gid rxe_h1)
[ "$setup_err" = 0 ] || echo "rxe-vm setup: some steps failed, running the command anyway" >&2

bash "$RUNDIR/cmd.sh"
