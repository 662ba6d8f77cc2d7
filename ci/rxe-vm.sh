#!/bin/bash
# Run a command inside a QEMU (TCG) VM that has Soft-RoCE (rdma_rxe) devices.
#
# Why: the host kernel has no RDMA, and /dev/kvm (nested) cannot boot a guest.
# The VM boots Debian's stock kernel (it ships rdma_rxe as a module) with a tiny
# busybox initramfs, mounts the host's / read-only over virtio-9p and chroots
# into it, so host-built binaries and host-installed tools run unchanged.
# See docs/ci.md (the soft-RoCE VM) and the device table in ci/vm/guest.sh.
#
# Usage:
#   bash ci/rxe-vm.sh [--netns] [--timeout SECS] [--mem MB] [--smp N] [--rw DIR]... [--ro DIR]...
#                    -- CMD ARGS...
#   --nic listen|connect:PORT --addr A.B.C.D/24 [--hostname NAME]
#                                    # a virtio NIC wired to another VM through a QEMU
#                                    # socket netdev on the host's 127.0.0.1:PORT (one VM
#                                    # listens, the other connects), with an rxe device on
#                                    # it (rxe_nic); see ci/two-vm.sh
#   bash ci/rxe-vm.sh [--netns] --smoke
#   bash ci/rxe-vm.sh --build        # only (re)build the cached kernel + initramfs
#   --kernel 6.1|6.12|auto           # guest kernel series (default $REVERB_VM_KERNEL or 6.1)
# CMD runs in the current directory (same path in the guest), with the caller's
# environment, as root. Exit status = CMD's status; 124 = VM timeout; 125 = VM failure.
# Writable in the guest: /tmp, /run, /dev/shm (tmpfs, lost at exit), the repo's
# target/ (if it exists) and every --rw DIR (9p, written through to the host).
# Everything else under / is read-only. A --ro DIR inside a writable one (the build's
# binaries, target/ci) stays read-only and cached: under TCG, reading a test binary over the
# writable share again at each of its ranks' execs cost more than the tests.
#
# Environment: REVERB_VM_KERNEL (as --kernel), RXE_VM_RO (directories, as --ro each),
# RXE_VM_CACHE (default ci/cache),
# RXE_VM_QUIET=1 hides kernel/console noise before the command starts (the command's
# output is always shown).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
CACHE=${RXE_VM_CACHE:-$REPO/ci/cache}
VMDIR=$HERE/vm

KSERIES=${REVERB_VM_KERNEL:-6.1}
NETNS=0 TIMEOUT=1200 MEM=2048 SMP=2 SMOKE=0 BUILD_ONLY=0 NIC= NIC_ADDR= VM_HOSTNAME=rxevm
RW=() RO=()
for d in ${RXE_VM_RO:-}; do [ -d "$d" ] && RO+=("$(cd "$d" && pwd)"); done
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --netns) NETNS=1 ;;
        --nic) NIC=$2; shift ;;
        --addr) NIC_ADDR=$2; shift ;;
        --hostname) VM_HOSTNAME=$2; shift ;;
        --kernel) KSERIES=$2; shift ;;
        --timeout) TIMEOUT=$2; shift ;;
        --mem) MEM=$2; shift ;;
        --smp) SMP=$2; shift ;;
        --rw) RW+=("$(cd "$2" && pwd)"); shift ;;
        --ro) RO+=("$(cd "$2" && pwd)"); shift ;;
        --smoke) SMOKE=1 ;;
        --build) BUILD_ONLY=1 ;;
        -h|--help) usage 0 ;;
        --) shift; break ;;
        *) echo "rxe-vm: unknown option $1" >&2; usage ;;
    esac
    shift
done
if [ "$SMOKE" = 1 ]; then
    set -- bash "$VMDIR/smoke.sh"
elif [ "$BUILD_ONLY" = 0 ] && [ $# -eq 0 ]; then
    echo "rxe-vm: no command given" >&2; usage
fi

log() { echo "rxe-vm: $*" >&2; }

# ---- host packages (idempotent: only what is missing) ----------------------------------
PKGS="qemu-system-x86 busybox-static cpio kmod xz-utils zstd iproute2 rdma-core ibverbs-providers
      ibverbs-utils perftest rdmacm-utils"
ensure_packages() {
    local missing=() p
    for p in $PKGS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]}"
    local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# ---- kernel + initramfs cache -----------------------------------------------------------
# Kernel series: REVERB_VM_KERNEL (or --kernel) = 6.1 (bookworm's linux-image-amd64),
# 6.12 (bookworm's linux-image-6.12-amd64, from bookworm-backports/updates), or auto:
# 6.12 when apt knows it or it is cached, else 6.1. Each series has its own cache dir
# (kernel, module closure, initramfs); 6.1 keeps the original layout (ci/cache/kernel,
# ci/cache/initramfs.cpio). The exact version is fixed when the cache is first built.
# The uncompressed ELF vmlinux (PVH entry note) boots directly: under TCG this skips
# several seconds of in-guest xz decompression.
MODS="virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm ib_umad ib_uverbs dummy veth virtio_net"
meta_package() {   # series -> the meta package whose Depends names the image package
    case "$1" in
        6.1) echo linux-image-amd64 ;;
        *) echo "linux-image-$1-amd64" ;;
    esac
}
select_kernel() {
    case "$KSERIES" in
        auto)
            if [ -s "$CACHE/kernel-6.12/kernel/kernel" ] ||
                apt-cache show "$(meta_package 6.12)" >/dev/null 2>&1; then
                KSERIES=6.12
            else
                KSERIES=6.1
            fi ;;
        6.1|6.12) ;;
        *) log "unknown kernel series '$KSERIES' (want 6.1, 6.12 or auto)"; exit 125 ;;
    esac
    if [ "$KSERIES" = 6.1 ]; then
        KDIR=$CACHE/kernel INITRD=$CACHE/initramfs.cpio STAMP=$CACHE/initramfs.stamp
    else
        KDIR=$CACHE/kernel-$KSERIES/kernel
        INITRD=$CACHE/kernel-$KSERIES/initramfs.cpio STAMP=$CACHE/kernel-$KSERIES/initramfs.stamp
    fi
}
is_elf() { [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; }
extract_payload() {   # FILE MAGIC DECOMPRESSOR: inflate from the first MAGIC (stdout)
    local off
    off=$(LC_ALL=C grep -obUaP "$2" "$1" | head -1 | cut -d: -f1) || true
    [ -n "$off" ] || return 0
    tail -c +$((off + 1)) "$1" | $3 2>/dev/null || true
}
build_kernel() {
    local meta pkg kver tmp off
    meta=$(meta_package "$KSERIES")
    pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [ -n "$pkg" ] || { log "cannot resolve $meta (apt-get update?)"; exit 125; }
    kver=${pkg#linux-image-}
    log "fetching kernel $pkg"
    tmp=$(mktemp -d "$CACHE/tmp.XXXXXX")
    (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) || { log "apt-get download $pkg failed"; exit 125; }
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/root"
    depmod -b "$tmp/root" "$kver"   # the .deb ships no modules.dep (postinst makes it)
    # bzImage payload is xz (6.1) or zstd (6.12): find the first stream magic and inflate it
    # (zstd complains about the bytes after the frame; what it wrote before is the ELF).
    extract_payload "$tmp/root/boot/vmlinuz-$kver" '\xfd7zXZ\x00' "xz -dc --single-stream" >"$tmp/vmlinux"
    is_elf "$tmp/vmlinux" ||
        extract_payload "$tmp/root/boot/vmlinuz-$kver" '\x28\xb5\x2f\xfd' "zstd -dcq" >"$tmp/vmlinux"
    if is_elf "$tmp/vmlinux"; then
        cp "$tmp/vmlinux" "$tmp/kernel"
    else
        log "vmlinux extraction failed, booting the bzImage"
        cp "$tmp/root/boot/vmlinuz-$kver" "$tmp/kernel"
    fi
    # Module closure, dependency order, deduplicated. A module built into this kernel
    # shows as "builtin"; one that does not exist at all is only a warning.
    mkdir -p "$tmp/modules"
    local m line
    for m in $MODS; do
        modprobe -d "$tmp/root" -S "$kver" --show-depends "$m" || log "warning: no module $m in $kver"
    done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' >"$tmp/modlist"
    : >"$tmp/modules/order"
    # 6.12 ships .ko.xz: store them inflated (busybox insmod passes the bytes to init_module,
    # and inflating under TCG is slow anyway).
    while read -r line; do
        m=$(basename "$line")
        case "$m" in
            *.ko.xz) m=${m%.xz}; xz -dc "$line" >"$tmp/modules/$m" ;;
            *.ko.zst) m=${m%.zst}; zstd -dcq "$line" >"$tmp/modules/$m" ;;
            *) cp "$line" "$tmp/modules/" ;;
        esac
        echo "$m" >>"$tmp/modules/order"
    done <"$tmp/modlist"
    rm -rf "$KDIR"
    mkdir -p "$KDIR"
    mv "$tmp/kernel" "$tmp/modules" "$KDIR/"
    echo "$kver" >"$KDIR/version"
    echo "$MODS" >"$KDIR/mods"
    rm -rf "$tmp"
}

build_initramfs() {
    local tmp
    tmp=$(mktemp -d "$CACHE/tmp.XXXXXX")
    mkdir -p "$tmp/bin" "$tmp/dev"
    cp /bin/busybox "$tmp/bin/busybox"
    cp "$VMDIR/init" "$tmp/init"
    chmod 755 "$tmp/init"
    cp -r "$KDIR/modules" "$tmp/modules"
    # The kernel opens /dev/console before /init runs; devtmpfs is not there yet.
    mknod "$tmp/dev/console" c 5 1
    # Uncompressed: the closure is small and TCG is slow at inflating.
    (cd "$tmp" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$INITRD.new"
    mv "$INITRD.new" "$INITRD"
    sha256sum "$VMDIR/init" >"$STAMP"
    rm -rf "$tmp"
}

ensure_images() {
    mkdir -p "$CACHE"
    select_kernel
    # Rebuilt when missing or when the module list changed (a cache from before virtio_net).
    [ -s "$KDIR/kernel" ] && [ -s "$KDIR/modules/order" ] && [ "$(cat "$KDIR/mods" 2>/dev/null)" = "$MODS" ] ||
        { build_kernel; rm -f "$INITRD"; }
    # Rebuild the initramfs when missing or when ci/vm/init changed.
    if [ ! -s "$INITRD" ] || ! sha256sum -c --status "$STAMP" 2>/dev/null; then
        build_initramfs
    fi
    KVER=$(cat "$KDIR/version" 2>/dev/null || echo "?")
}

ensure_packages
ensure_images
[ "$BUILD_ONLY" = 1 ] && { log "cache ready: kernel $KVER in $KDIR"; exit 0; }

# ---- per-run directory (the "vmrun" 9p share: config, command, exit code) --------------
mkdir -p "$CACHE/runs"
RUNDIR=$(mktemp -d "$CACHE/runs/run.XXXXXX")
cleanup() { rm -rf "$RUNDIR"; }
trap cleanup EXIT

CWD=$(pwd)
# The repo's target/ is writable by default: tests write there (cargo target dir).
[ -d "$REPO/target" ] && RW=("$REPO/target" "${RW[@]}")
{
    echo "guest $VMDIR/guest.sh"
    echo "run $RUNDIR"
    # Paths the guest must still see if they sit under a tmpfs it mounts (/tmp, /run).
    echo "keep $REPO"
    [ "$CWD" = "$REPO" ] || echo "keep $CWD"
    i=0
    for d in "${RW[@]}"; do echo "rw rw$i $d"; i=$((i + 1)); done
    for d in "${RO[@]}"; do echo "ro $d"; done
} >"$RUNDIR/config"
{
    echo "NETNS=$NETNS"
    printf 'NIC_ADDR=%q\nVM_HOSTNAME=%q\n' "$NIC_ADDR" "$VM_HOSTNAME"
} >"$RUNDIR/opts"
export -p >"$RUNDIR/env.sh"
{
    echo '. "$RXE_VM_RUN/env.sh" 2>/dev/null'
    echo 'unset OLDPWD'
    echo 'export RXE_VM=1'
    printf 'cd -- %q || exit 125\n' "$CWD"
    printf 'export PWD=%q\n' "$CWD"
    printf 'exec'; printf ' %q' "$@"; echo
} >"$RUNDIR/cmd.sh"

# cryptomgr.notests: no crypto self-tests at module load; under TCG with the host loaded
# one of them once spun a vCPU for the whole 900 s timeout at boot.
QEMU=(qemu-system-x86_64
    -accel tcg -cpu max -m "$MEM" -smp "$SMP"
    -nodefaults -no-user-config -display none -no-reboot
    -serial stdio
    -kernel "$KDIR/kernel" -initrd "$INITRD"
    -append "console=ttyS0 panic=-1 quiet loglevel=3 mitigations=off tsc=reliable no_timer_check cryptomgr.notests=1"
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -virtfs "local,path=$RUNDIR,mount_tag=vmrun,security_model=none,multidevs=remap")
if [ -n "$NIC" ]; then
    case "$NIC" in
        listen:[0-9]*|connect:[0-9]*) ;;
        *) log "--nic wants listen:PORT or connect:PORT, not '$NIC'"; exit 125 ;;
    esac
    [[ $NIC_ADDR =~ ^10\.[0-9]+\.[0-9]+\.([0-9]+)/[0-9]+$ ]] ||
        { log "--nic needs --addr 10.x.y.z/NN (a private address), not '$NIC_ADDR'"; exit 125; }
    # The MAC's last byte is the address's: two VMs on one wire never share one.
    mac=$(printf '52:54:00:7e:00:%02x' "${BASH_REMATCH[1]}")
    QEMU+=(-netdev "socket,id=wire,${NIC%%:*}=127.0.0.1:${NIC#*:}" -device "virtio-net-pci,netdev=wire,mac=$mac")
fi
i=0
for d in "${RW[@]}"; do
    QEMU+=(-virtfs "local,path=$d,mount_tag=rw$i,security_model=none,multidevs=remap")
    i=$((i + 1))
done

START=$(date +%s%N)
set +e
timeout -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 | tee "$RUNDIR/console.log"
qrc=${PIPESTATUS[0]}
set -e
ms=$((($(date +%s%N) - START) / 1000000)); ELAPSED=$((ms / 1000)).$(printf %03d $((ms % 1000)))
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    log "TIMEOUT after ${TIMEOUT}s; console tail:"
    tail -n 40 "$RUNDIR/console.log" >&2
    exit 124
fi
if [ ! -s "$RUNDIR/rc" ]; then
    log "VM exited (qemu status $qrc) without reporting an exit code; console tail:"
    tail -n 40 "$RUNDIR/console.log" >&2
    exit 125
fi
rc=$(cat "$RUNDIR/rc")
log "command exited $rc (VM wall time ${ELAPSED}s, kernel $KVER)"
exit "$rc"
