#!/bin/bash
# Built-in check for `ci/rxe-vm.sh [--netns] --smoke`: runs in the guest (chrooted
# into the host root). Lists the devices, then runs perftest ib_write_lat pairs:
# over rxe0 (lo), over rxe1 with rdma_cm (-R), and with --netns rxe_h0 -> rxe_h1 across the veth (verbs and rdma_cm).
set -u
fail=0
N=${SMOKE_ITERS:-100}

# pair NAME PORT SERVER_ADDR "SERVER_ARGS" "CLIENT_ARGS"   (ARGS are split on spaces)
pair() {
    local name=$1 port=$2 addr=$3 sargs=($4) cargs=($5)
    echo "=== $name: ib_write_lat -n $N ${cargs[*]} $addr"
    timeout 120 ib_write_lat -p "$port" -n "$N" "${sargs[@]}" >/tmp/srv.$port.log 2>&1 &
    local spid=$!
    # No readiness probe (rdma_cm servers have no TCP port; every fork+exec costs ~0.25 s
    # under TCG): give the server a head start, and retry the client on connect failures.
    sleep 2
    local try ok=0
    # perftest clients do not retry a connection made before the server listens.
    for try in 1 2 3 4 5; do
        if timeout 120 ib_write_lat -p "$port" -n "$N" "${cargs[@]}" "$addr" >/tmp/cli.$port.log 2>&1; then
            ok=1; break
        fi
        grep -qiE "couldn.t connect|unable to init the socket|rdma_client" /tmp/cli.$port.log || break
        sleep 1
    done
    if [ "$ok" = 1 ] && wait $spid; then
        grep -E '^ *#bytes|^ *[0-9]+ +[0-9]+ ' /tmp/cli.$port.log
        echo "PASS $name"
    else
        echo "FAIL $name"; echo "--- client:"; cat /tmp/cli.$port.log; echo "--- server:"; cat /tmp/srv.$port.log
        kill $spid 2>/dev/null; fail=1
    fi
}

echo "=== ibv_devices"; ibv_devices || fail=1
echo "=== ibv_devinfo -d rxe0"; ibv_devinfo -d rxe0 || fail=1
echo "=== rdma link"; rdma link
echo "=== GIDs (index: gid type)"
for d in /sys/class/infiniband/*; do
    for g in "$d"/ports/1/gids/*; do
        # `read`, not $(cat): 1024 GID slots per port, and a fork costs ~0.25 s under TCG.
        i=${g##*/}; read -r v <"$g" 2>/dev/null || continue
        [ "$v" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
        read -r t <"$d/ports/1/gid_attrs/types/$i" 2>/dev/null
        echo "  ${d##*/} $i: $v $t"
    done
done

pair "rxe0 over lo" 18515 127.0.0.1 "-d rxe0 -x $RXE_LO_GID" "-d rxe0 -x $RXE_LO_GID"
pair "rxe1 over dummy0, rdma_cm" 18516 10.77.0.1 "-d rxe1 -R" "-d rxe1 -R"
if [ "${RXE_NETNS:-0}" = 1 ]; then
    pair "rxe_h0 -> rxe_h1 over veth" 18517 10.78.0.2 \
        "-d rxe_h1 -x $RXE_H1_GID" "-d rxe_h0 -x $RXE_H0_GID"
    pair "rxe_h0 -> rxe_h1 over veth, rdma_cm" 18518 10.78.0.2 "-d rxe_h1 -R" "-d rxe_h0 -R"
    echo "=== veth_h0 counters (the pairs above crossed the wire)"
    ip -s link show veth_h0 | grep -A1 -E 'RX|TX' 
fi
[ "$fail" = 0 ] && echo "SMOKE PASS" || echo "SMOKE FAIL"
exit $fail
