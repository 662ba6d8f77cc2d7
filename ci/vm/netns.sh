# Sourced by guest.sh for --netns: two "hosts" joined by a veth wire.
#
# Why not real network namespaces: in this 6.1 kernel rdma_rxe only works on netdevs of
# the initial netns (its UDP/4791 socket and its route lookups are bound to init_net).
# An rxe on a veth moved into a namespace connects (QP to RTR) but every packet is lost
# (measured: "Completion with error", status 2). `rdma dev set <dev> netns` is refused
# too (rxe has no disassociate_ucontext), so "netns exclusive" mode cannot help.
# Debian's 6.12 (6.12.117+deb12, `--kernel 6.12`) is no different: rdma_rxe still opens
# one UDP socket in init_net, an rxe made inside a namespace connects and then its first
# RDMA write completes in error (perftest server: "Failed status 5"), and in exclusive mode
# `rdma link add` from a namespace leaves the device in init_net while
# `rdma dev set rxe_X netns NS` fails with "Operation not supported".
#
# So both ends stay in init_net, and policy routing makes traffic between them really
# cross the wire: a packet sent from 10.78.0.1 goes out veth_h0 and comes in on veth_h1
# (skb->dev = veth_h1, so rxe_h1 receives it), instead of being short-cut through lo.
#   rxe_h0 on veth_h0 10.78.0.1/24   rxe_h1 on veth_h1 10.78.0.2/24
# tc/netem on veth_h0/veth_h1 can inject loss/delay on that wire.
run ip link add veth_h0 type veth peer name veth_h1
run ip addr add 10.78.0.1/24 dev veth_h0
run ip addr add 10.78.0.2/24 dev veth_h1
run ip link set veth_h0 up
run ip link set veth_h1 up
# Local-source packets from the other end must be accepted, not dropped as martians.
for c in all veth_h0 veth_h1; do
    echo 1 >/proc/sys/net/ipv4/conf/$c/accept_local
    echo 0 >/proc/sys/net/ipv4/conf/$c/rp_filter
done
# Locally generated traffic (iif lo) *to* one end is sent from the other end over the
# veth (so an unbound socket or rdma_cm id "is" the other host); the "local" table is
# moved after these rules. Traffic from an end to itself stays local.
run ip route add 10.78.0.2 dev veth_h0 src 10.78.0.1 table 100
run ip route add 10.78.0.1 dev veth_h1 src 10.78.0.2 table 101
run ip rule add pref 5 from 10.78.0.1 to 10.78.0.1 lookup local
run ip rule add pref 6 from 10.78.0.2 to 10.78.0.2 lookup local
run ip rule add pref 10 to 10.78.0.2 iif lo lookup 100
run ip rule add pref 11 to 10.78.0.1 iif lo lookup 101
run ip rule add pref 100 lookup local
run ip rule del pref 0 lookup local
# Static neighbours: no ARP for addresses the kernel also considers local.
run ip neigh replace 10.78.0.2 lladdr "$(cat /sys/class/net/veth_h1/address)" dev veth_h0 nud permanent
run ip neigh replace 10.78.0.1 lladdr "$(cat /sys/class/net/veth_h0/address)" dev veth_h1 nud permanent
run rdma link add rxe_h0 type rxe netdev veth_h0
run rdma link add rxe_h1 type rxe netdev veth_h1
export RXE_NETNS=1 RXE_H0_DEV=rxe_h0 RXE_H0_ADDR=10.78.0.1 RXE_H1_DEV=rxe_h1 RXE_H1_ADDR=10.78.0.2
