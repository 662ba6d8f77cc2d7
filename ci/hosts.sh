#!/usr/bin/env bash
# Simulated hosts on this machine, for jobs that span hosts without RDMA: each host is a
# network + mount + UTS namespace with its own hostname, its own /dev/shm (a private tmpfs),
# one address on a bridge that joins the hosts, and an /etc/hosts that names every simulated
# host (so `reverb run --hosts ha:2,hb:2` with REVERB_RSH="bash ci/hosts.sh exec" resolves
# them). Nothing leaves the machine: the bridge lives in its own namespace and has no uplink.
#
#   ci/hosts.sh up NAME...          make the hosts (10.77.0.10, .11, ... in the order named; a
#                                   host killed and made again gets its address back)
#   ci/hosts.sh exec NAME -- CMD... run CMD inside host NAME (its net, mount and UTS namespaces)
#   ci/hosts.sh addr NAME           print NAME's address
#   ci/hosts.sh kill NAME           take host NAME down: SIGKILL everything in it, drop its wire
#   ci/hosts.sh cut NAME            cut host NAME's wire (its link on the bridge down); its
#                                   processes keep running, unreachable
#   ci/hosts.sh uncut NAME          join host NAME's wire again
#   ci/hosts.sh down                remove every host and the bridge (idempotent)
#
# Needs root (namespaces, veth). State lives in $REVERB_HOSTS_DIR (default /run/reverb-hosts):
# one directory per host with the pid of the process holding its namespaces open, so `exec`
# enters the same /dev/shm every time (a fresh `unshare` per command would not).
#
# Several sets of hosts can live side by side (a suite and ci/slurm.sh, say): give each its own
# REVERB_HOSTS_DIR. The bridge namespace is named after that directory (rvb-switch for the
# default one), so one set's `down` leaves the others' wires alone. Host names are machine-wide
# (netns rvb-NAME, veth v-NAME): sets must use different names. REVERB_HOSTS_NET picks the
# first three octets of the addresses (default 10.77.0).
set -euo pipefail

DIR=${REVERB_HOSTS_DIR:-/run/reverb-hosts}
if [[ $DIR == /run/reverb-hosts ]]; then
    SWITCH=rvb-switch
else
    SWITCH=rvb-sw-$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)
fi
SUBNET=${REVERB_HOSTS_NET:-10.77.0}
FIRST_HOST=10

die() { echo "ci/hosts.sh: $*" >&2; exit 1; }
netns_of() { echo "rvb-$1"; }
holder_of() { cat "$DIR/$1/holder" 2>/dev/null || die "no host '$1' (ci/hosts.sh up $1)"; }

check_name() {
    [[ $1 =~ ^[a-z][a-z0-9-]{0,10}$ ]] || die "host name '$1': 1-11 of [a-z0-9-], starting with a letter"
}

switch_up() {
    ip netns list | grep -qx "$SWITCH\( .*\)\?" && return
    ip netns add "$SWITCH"
    ip -n "$SWITCH" link add br0 type bridge
    ip -n "$SWITCH" link set br0 up
}

# The host's namespaces stay open as long as this holder lives: a shell with the host's
# hostname and a private tmpfs on /dev/shm, sleeping.
start_holder() {
    local name=$1 ns
    ns=$(netns_of "$name")
    ip netns exec "$ns" unshare --mount --uts --propagation private -- bash -c '
        hostname "$1"
        mount -t tmpfs -o mode=1777,size=2g tmpfs /dev/shm
        mount --bind "$2/../etc-hosts" /etc/hosts
        echo $$ > "$2/holder.tmp" && mv "$2/holder.tmp" "$2/holder"
        exec sleep infinity' holder "$name" "$DIR/$name" </dev/null >/dev/null 2>&1 &
    for _ in $(seq 100); do
        [[ -s $DIR/$name/holder ]] && return
        sleep 0.05
    done
    die "host $name: namespace holder did not start"
}

# The address NAME had before in this set (a host killed and brought up again keeps it), else
# the lowest one no host of the set ever had.
addr_for() {
    local name=$1 addr i
    addr=$(awk -v n="$name" '$2 == n { print $1; exit }' "$DIR/etc-hosts")
    if [[ -n $addr ]]; then
        echo "$addr"
        return
    fi
    for ((i = FIRST_HOST; i < 255; i++)); do
        grep -q "^$SUBNET\.$i " "$DIR/etc-hosts" || { echo "$SUBNET.$i"; return; }
    done
    die "host $name: no address left in $SUBNET.0/24"
}

host_up() {
    local name=$1 ns addr
    check_name "$name"
    ns=$(netns_of "$name")
    [[ -d $DIR/$name ]] && die "host $name exists (ci/hosts.sh down first)"
    ip netns list | grep -qx "$ns\( .*\)\?" &&
        die "host $name: netns $ns exists (another set of hosts uses the name; pick another)"
    addr=$(addr_for "$name")
    mkdir -p "$DIR/$name"
    echo "$addr" >"$DIR/$name/addr"
    # Appended in place: every host's bind mount of the file sees the new line. A killed host's
    # line stays, so its name still resolves to the address it gets back.
    grep -q "^$addr $name\$" "$DIR/etc-hosts" || echo "$addr $name" >>"$DIR/etc-hosts"
    ip netns add "$ns"
    # The MAC follows from the address: a host brought up again keeps its NIC's address, as a
    # rebooted machine does. A fresh MAC would leave the other hosts' ARP entries (reachable
    # for up to ~45 s) pointing at the dead NIC: connections to it unanswered.
    local mac
    mac=$(echo "$addr" | awk -F. '{ printf "02:72:76:%02x:%02x:%02x", $2, $3, $4 }')
    ip link add "v-$name" address "$mac" type veth peer name "s-$name"
    ip link set "v-$name" netns "$ns"
    ip link set "s-$name" netns "$SWITCH"
    ip -n "$SWITCH" link set "s-$name" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "v-$name" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    start_holder "$name"
}

cmd_up() {
    (($# > 0)) || die "up: name at least one host"
    mkdir -p "$DIR"
    [[ -f $DIR/etc-hosts ]] || printf '127.0.0.1 localhost\n::1 localhost\n' >"$DIR/etc-hosts"
    switch_up
    for name in "$@"; do
        host_up "$name"
    done
}

cmd_exec() {
    local name=$1
    shift
    [[ ${1:-} == -- ]] && shift
    (($# > 0)) || die "exec: no command"
    local holder
    holder=$(holder_of "$name") || exit 1
    exec nsenter -t "$holder" -n -m -u -- "$@"
}

cmd_kill() {
    local name=$1 ns
    ns=$(netns_of "$name")
    # Every process in the host's network namespace, the holder last: a host lost at once.
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
    ip -n "$SWITCH" link del "s-$name" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "${DIR:?}/$name"
}

# The bridge's end of the host's veth: down, the host sees no carrier and nothing gets through
# either way; the host itself cannot undo it.
cmd_cut() {
    local name=$1
    holder_of "$name" >/dev/null || exit 1
    ip -n "$SWITCH" link set "s-$name" "$2"
}

cmd_down() {
    if [[ -d $DIR ]]; then
        for d in "$DIR"/*/; do
            [[ -d $d ]] && cmd_kill "$(basename "$d")"
        done
    fi
    ip netns del "$SWITCH" 2>/dev/null || true
    rm -rf "$DIR"
}

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    exec) shift; cmd_exec "$@" ;;
    addr) cat "$DIR/${2:?addr NAME}/addr" 2>/dev/null || die "no host '${2}'" ;;
    kill) cmd_kill "${2:?kill NAME}" ;;
    cut) cmd_cut "${2:?cut NAME}" down ;;
    uncut) cmd_cut "${2:?uncut NAME}" up ;;
    down) cmd_down ;;
    *) sed -n '2,26p' "$0" >&2; exit 2 ;;
esac
