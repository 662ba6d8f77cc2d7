#!/usr/bin/env bash
# Real Slurm (Debian's slurm-wlm: slurmctld, slurmd, munge) on the simulated hosts of
# ci/hosts.sh, with a throwaway config: one slurmd per host (inside the host's namespaces, its
# own hostname and address), slurmctld in a controller host of its own, munged outside the hosts.
#
#   ci/slurm.sh up HOST...          bring up the hosts (or use those already up) and the daemons;
#                                   returns once sinfo shows every HOST idle
#   ci/slurm.sh run HOST -- CMD...  run a client command (srun, sbatch, sinfo...) inside HOST
#   ci/slurm.sh restart HOST        a host lost (ci/hosts.sh kill HOST) or a slurmd stopped comes
#                                   back: the host (same address) and its slurmd, until idle
#   ci/slurm.sh logs                print the tail of every daemon's log
#   ci/slurm.sh down                stop every daemon `up` started and remove its files;
#                                   removes the hosts `up` brought up, no others (idempotent)
#
# Needs root and the packages of ci/deps.sh. Environment:
#   REVERB_HOSTS_DIR, REVERB_HOSTS_NET  the set of hosts (see ci/hosts.sh); `up` records them
#                         and the controller, so later commands need only REVERB_SLURM_DIR
#   REVERB_SLURM_DIR      config, state, logs and pids (default /run/reverb-slurm)
#   REVERB_SLURM_CTL      the controller host (default sctl; may be one of the HOSTs)
#   REVERB_SLURM_CPUS     CPUs each node offers (default 4, whatever the machine has)
#   REVERB_SLURM_TIMEOUT  seconds `up` and `restart` wait for the nodes (default 30)
# A failed `up` prints the daemons' logs and removes what it started.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SDIR=${REVERB_SLURM_DIR:-/run/reverb-slurm}
CTL=${REVERB_SLURM_CTL:-sctl}
CPUS=${REVERB_SLURM_CPUS:-4}
TIMEOUT=${REVERB_SLURM_TIMEOUT:-30}
CONF=$SDIR/etc/slurm.conf
# A cluster that is up remembers its hosts and controller: later commands need only its dir.
if [[ -f $SDIR/where ]]; then
    read -r REVERB_HOSTS_DIR REVERB_HOSTS_NET CTL <"$SDIR/where"
    export REVERB_HOSTS_DIR REVERB_HOSTS_NET
fi
HOSTS_DIR=${REVERB_HOSTS_DIR:-/run/reverb-hosts}
CLEAN_ON_FAIL=0 # `up` removes what it started when it fails

say() { echo "ci/slurm.sh: $*" >&2; }
die() { say "$*"; exit 1; }
hosts() { bash "$HERE/hosts.sh" "$@"; }
host_is_up() { hosts addr "$1" >/dev/null 2>&1; }
in_host() { # HOST CMD...: CMD inside HOST, with this cluster's config
    local host=$1
    shift
    hosts exec "$host" -- env SLURM_CONF="$CONF" "$@"
}

wait_for() { # SECONDS WHAT CMD...: poll CMD every 0.2 s until it succeeds
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for $what"
        sleep 0.2
    done
}

print_logs() {
    local f
    for f in "$SDIR"/log/*; do
        [[ -s $f ]] || continue
        echo "---- ${f#"$SDIR"/} (last 25 lines)" >&2
        tail -n 25 "$f" >&2
    done
}

fail() {
    say "FAILED: $*"
    print_logs
    [[ $CLEAN_ON_FAIL == 1 ]] && cmd_down
    exit 1
}

# Hosts that are not up yet are brought up, and recorded so that `down` removes them alone.
bring_hosts_up() { # HOST...
    local new=() host
    for host in "$@"; do
        host_is_up "$host" || [[ " ${new[*]} " == *" $host "* ]] || new+=("$host")
    done
    ((${#new[@]})) || return 0
    printf '%s\n' "${new[@]}" >>"$SDIR/our-hosts"
    hosts up "${new[@]}" || fail "ci/hosts.sh up ${new[*]} failed"
}

# One munged for every host, outside them. Its socket is a path, and the hosts' mount
# namespaces see the same /run, so every host's daemons and clients reach it.
munge_up() {
    local d=$SDIR/munge
    mkdir -p "$d"
    chmod 755 "$d" # munged: the socket's directory must be searchable by all
    head -c 1024 /dev/urandom >"$d/munge.key"
    chmod 400 "$d/munge.key"
    munged --key-file="$d/munge.key" --socket="$d/socket" --pid-file="$d/munged.pid" \
        --log-file="$SDIR/log/munged.log" --seed-file="$d/seed" </dev/null \
        >>"$SDIR/log/munged.out" 2>&1 || fail "munged did not start"
    wait_for 10 "munged's pid file" test -s "$d/munged.pid"
    cp "$d/munged.pid" "$SDIR/pids/munged"
    wait_for 10 "munged's socket" test -S "$d/socket"
}

# Nothing in this config needs cgroups or systemd: processes are tracked through /proc
# (proctrack/linuxproc), tasks are not bound (task/none), nothing is accounted.
write_conf() { # HOST...
    local node
    mkdir -p "$SDIR/etc" "$SDIR/state" "$SDIR/spool"
    cat >"$CONF" <<EOF
# Throwaway config written by ci/slurm.sh; removed by ci/slurm.sh down.
ClusterName=reverb
SlurmctldHost=$CTL($(hosts addr "$CTL"))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SDIR/munge/socket
StateSaveLocation=$SDIR/state
SlurmdSpoolDir=$SDIR/spool/%n
SlurmctldPidFile=$SDIR/pids/slurmctld.pidfile
SlurmdPidFile=$SDIR/pids/slurmd-%n.pidfile
SlurmctldLogFile=$SDIR/log/slurmctld.log
SlurmdLogFile=$SDIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The nodes offer the CPUs named here, not what the machine has.
SlurmdParameters=config_overrides
ReturnToService=2
# Short timeouts: a lost host is noticed in seconds, a job's end is quick.
SlurmdTimeout=10
MessageTimeout=5
KillWait=2
MinJobAge=10
InactiveLimit=0
EOF
    for node in "$@"; do
        echo "NodeName=$node NodeAddr=$(hosts addr "$node") CPUs=$CPUS State=UNKNOWN" >>"$CONF"
    done
    echo "PartitionName=hosts Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
    # slurmd loads a cgroup plugin whatever the other plugins are, and its autodetection finds
    # nothing under the hosts' /sys/fs/cgroup (`ip netns exec` mounts a fresh sysfs). Naming
    # v1 skips the detection; v1's init mounts nothing, and no plugin here asks it for more.
    echo "CgroupPlugin=cgroup/v1" >"$SDIR/etc/cgroup.conf"
}

# A daemon inside a host, in the foreground so that its pid is ours to record: the background
# job is one simple command (bash execs it in the forked child), hosts.sh execs nsenter, which
# execs env, which execs the daemon.
start_daemon() { # NAME HOST CMD...
    local name=$1 host=$2
    shift 2
    bash "$HERE/hosts.sh" exec "$host" -- env SLURM_CONF="$CONF" "$@" \
        </dev/null >>"$SDIR/log/$name.out" 2>&1 &
    echo $! >"$SDIR/pids/$name"
}

nodes_idle() { # HOST...: every HOST is idle in sinfo; fails the script if a daemon it needs exited
    local states node
    daemons_alive munged slurmctld "${@/#/slurmd-}"
    states=$(in_host "$CTL" timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    for node in "$@"; do
        grep -qx "$node idle" <<<"$states" || return 1
    done
}

# A daemon that exited will not come back: say so now rather than at the timeout.
daemons_alive() { # NAME... (munged, slurmctld, slurmd-HOST)
    local name
    for name in "$@"; do
        [[ -d /proc/$(cat "$SDIR/pids/$name") ]] || fail "$name exited (its log is below)"
    done
}

cmd_up() {
    (($# > 0)) || die "up: name at least one host"
    [[ $(id -u) == 0 ]] || die "needs root (namespaces, daemons)"
    for tool in munged slurmctld slurmd sinfo; do
        command -v "$tool" >/dev/null || die "$tool not found (bash ci/deps.sh)"
    done
    [[ $CPUS =~ ^[1-9][0-9]*$ ]] || die "REVERB_SLURM_CPUS=$CPUS: expected a positive number"
    [[ -e $SDIR ]] && die "$SDIR exists: a cluster is up (ci/slurm.sh down first)"
    mkdir -p "$SDIR/log" "$SDIR/pids"
    echo "$HOSTS_DIR ${REVERB_HOSTS_NET:-10.77.0} $CTL" >"$SDIR/where"
    CLEAN_ON_FAIL=1
    bring_hosts_up "$CTL" "$@"
    write_conf "$@"
    munge_up
    start_daemon slurmctld "$CTL" slurmctld -D -f "$CONF"
    for node in "$@"; do
        mkdir -p "$SDIR/spool/$node"
        start_daemon "slurmd-$node" "$node" slurmd -D -f "$CONF" -N "$node"
    done
    wait_for "$TIMEOUT" "every node idle in sinfo" nodes_idle "$@"
    say "up in ${SECONDS}s: slurmctld in $CTL, a slurmd in each of $*"
}

cmd_restart() { # HOST
    local host=$1
    [[ -f $CONF ]] || die "no cluster in $SDIR (ci/slurm.sh up first)"
    grep -q "^NodeName=$host " "$CONF" || die "restart: $host is not a node of this cluster"
    bring_hosts_up "$host"
    stop_daemons "$SDIR/pids/slurmd-$host"
    start_daemon "slurmd-$host" "$host" slurmd -D -f "$CONF" -N "$host"
    wait_for "$TIMEOUT" "$host idle in sinfo" nodes_idle "$host"
    say "$host is back"
}

# TERM to every recorded daemon still running its program (a pid may have been reused), then
# KILL to those left after 5 s. Together: each takes a second or two to stop.
stop_daemons() { # PID-FILE... (named after the program: slurmd-sa, slurmctld, munged)
    local f name pid live=()
    for f in "$@"; do
        name=$(basename "$f")
        [[ -f $f && $name != *.pidfile ]] || continue
        pid=$(cat "$f")
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "${name%%-*}" ]] || continue
        kill -TERM "$pid" 2>/dev/null && live+=("$pid")
    done
    for _ in $(seq 50); do
        any_alive "${live[@]}" || return 0
        sleep 0.1
    done
    kill -KILL "${live[@]}" 2>/dev/null || true
}

any_alive() { # PID...
    local pid
    for pid in "$@"; do
        [[ -d /proc/$pid ]] && return 0
    done
    return 1
}

# Jobs still running are cancelled while slurmctld is there to do it (bounded: 10 s).
cancel_jobs() {
    local ctl_pid jobs
    ctl_pid=$(cat "$SDIR/pids/slurmctld" 2>/dev/null) || return 0
    [[ $(cat "/proc/$ctl_pid/comm" 2>/dev/null) == slurmctld ]] || return 0
    for _ in $(seq 50); do
        jobs=$(in_host "$CTL" timeout 5 squeue -h -o %i 2>/dev/null) || return 0
        [[ -z $jobs ]] && return 0
        # shellcheck disable=SC2086 # one job id a word
        in_host "$CTL" timeout 5 scancel $jobs 2>/dev/null || true
        sleep 0.2
    done
    say "down: jobs still there after 10 s: $jobs"
}

tree_of() { # PID: PID's descendants, deepest first, then PID
    local child
    for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        tree_of "$child"
    done
    echo "$1"
}

# A step whose slurmd is gone (or a host that was lost) can leave a slurmstepd and its tasks:
# those in our nodes' network namespaces go.
stop_stepds() {
    local node pid
    for node in $(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$CONF" 2>/dev/null); do
        for pid in $(ip netns pids "rvb-$node" 2>/dev/null); do
            if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slurmstepd ]]; then
                # shellcheck disable=SC2046 # one pid a word
                kill -KILL $(tree_of "$pid") 2>/dev/null
            fi
        done
    done
    return 0
}

# The hosts `up` brought up go; the set goes too (bridge and all) when nothing else is left in it.
hosts_down() {
    [[ -f $SDIR/our-hosts ]] || return 0
    local host
    while read -r host; do
        hosts kill "$host"
    done <"$SDIR/our-hosts"
    if ! find "$HOSTS_DIR" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | grep -q .; then
        hosts down
    fi
}

cmd_down() {
    [[ -d $SDIR ]] || return 0
    cancel_jobs
    stop_daemons "$SDIR"/pids/slurmd-* "$SDIR"/pids/slurmctld "$SDIR"/pids/munged
    stop_stepds
    hosts_down
    rm -rf "$SDIR"
}

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    run)
        shift
        host=${1:?run HOST -- CMD...}
        shift
        [[ ${1:-} == -- ]] && shift
        (($# > 0)) || die "run: no command"
        [[ -f $CONF ]] || die "no cluster in $SDIR (ci/slurm.sh up first)"
        # exec: signals for the client (a timeout's, say) reach it, not a shell in between.
        exec bash "$HERE/hosts.sh" exec "$host" -- env SLURM_CONF="$CONF" "$@"
        ;;
    restart) cmd_restart "${2:?restart HOST}" ;;
    logs) print_logs ;;
    down) cmd_down ;;
    *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
