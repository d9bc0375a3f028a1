#!/usr/bin/env bash
# run-in-vm.sh: run a command in a throwaway qemu VM whose Linux kernel has a
# pure cgroup v2 hierarchy (all controllers enabled). DIR is shared read-write
# over 9p and mounted at the same path; the command runs there.
# Exit status: the command's own; 124 on timeout; 125 when the rig itself fails.
#
# brig's test rig for cgroup v2 (its development machines and CI have hybrid cgroups):
# tests/operators/cgroup_v2.rs and tests/operators/doctor.rs boot it, through `common::Vm`, and
# tests/operators/deploy.rs with --systemd. It is the team's shared/vm/run-in-vm.sh, kept here so
# that the repository tests itself, plus --systemd; guest-init.sh beside it is the
# guest's PID 1 (byte-identical to shared/vm's, so both copies share one cached
# initramfs; --systemd adds systemd-init.sh to each run's part of the initramfs).
#
#   tests/vm/run-in-vm.sh [--mem 1G] [--cpus 2] [--timeout 120] [--share DIR] [--systemd] -- COMMAND...
#
# * First use, as root: apt-get installs qemu-system-x86 (and xz-utils); apt-get
#   download fetches Debian's kernel and busybox-static, unpacked (never installed) into
#   the cache: /var/cache/jail-vm as root, else ~/.cache/jail-vm ($JAIL_VM_CACHE), about
#   70 MB, filled under flock so that concurrent runs are safe. Delete it to start over.
# * The guest: Debian's kernel (PVH boot of the vmlinux), an initramfs of busybox, the
#   host's glibc and guest-init.sh; cgroup2 alone at /sys/fs/cgroup with nsdelegate and
#   every controller in the root's subtree_control; DIR mounted over 9p at its own path;
#   the command runs there as root, in the root cgroup, with JAIL_VM=1. Users root (0),
#   user (1000), nobody (65534). stdin is /dev/null; stdout/stderr come back over
#   serial ports (ttys in the guest).
# * --systemd: the guest boots a real systemd as PID 1 instead (systemd-init.sh beside
#   this script): the host's own / shared read-only over 9p under a tmpfs overlay, DIR
#   at its own path, the command run by a unit after basic.target (tests/operators/deploy.rs runs
#   the shipped units there). The host needs systemd installed; the guest runs the
#   host's programs, so there is nothing more to download.
# * KVM when /dev/kvm is backed by kvm_intel/kvm_amd, else TCG (about 3 s a boot here).
# * qemu runs under `timeout --kill-after=5 SECS`; each run's temp dir is removed on
#   exit, Ctrl-C or SIGTERM. The host's cgroups are never touched.
# Knobs: JAIL_VM_CACHE, JAIL_VM_KERNEL_PKG, JAIL_VM_ACCEL=kvm|tcg, JAIL_VM_HOST_BINS.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
modules=(virtio_pci 9pnet_virtio 9p overlay veth)   # loaded in the guest
host_bins=${JAIL_VM_HOST_BINS-ip}                   # copied to /usr/local/bin, with their libraries
glibc=(/lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/{libc.so.6,libm.so.6,libgcc_s.so.1,libpthread.so.0,libdl.so.2,librt.so.1,libutil.so.1})

usage() {
    cat <<'EOF'
usage: run-in-vm.sh [--mem 1G] [--cpus 2] [--timeout 120] [--share DIR] [--systemd] [--verbose] [--quiet] -- COMMAND [ARGS...]
  --mem SIZE      guest memory, qemu syntax (default 1G)
  --cpus N        guest CPUs (default 2)
  --timeout SECS  kill the VM after SECS seconds and exit 124 (default 120)
  --share DIR     directory shared read-write at the same path; COMMAND runs there (default: .)
  --systemd       boot the host's systemd as PID 1 (the host's / read-only under an overlay)
  --verbose       print the guest's kernel log to stderr afterwards
  --quiet         print no notes (errors are still printed)
environment: JAIL_VM_CACHE (cache dir), JAIL_VM_KERNEL_PKG (kernel package), JAIL_VM_ACCEL (kvm|tcg),
  JAIL_VM_HOST_BINS (host programs to copy into the guest, default "ip")
EOF
    exit 0
}
die() { echo "run-in-vm: error: $*" >&2; exit 125; }
on_error() { (($1 == 125)) || echo "run-in-vm: error: unexpected failure (status $1) at line $2" >&2; exit 125; }
trap 'on_error $? $LINENO' ERR
note() { [[ -n $quiet ]] || echo "run-in-vm: $*" >&2; }
qarg() { printf '%s' "${1//,/,,}"; }                       # escape a value in qemu's a=b,c=d options
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }               # quote for the guest shell

mem=1G cpus=2 timeout=120 share=. systemd='' verbose='' quiet=''
while (($#)); do
    case $1 in
        --mem | --cpus | --timeout | --share)
            (($# >= 2)) || die "$1 needs a value"
            declare "${1#--}=$2"; shift 2 ;; # e.g. --mem 2G sets mem=2G
        --systemd) systemd=1; shift ;;
        --verbose) verbose=1; shift ;;
        --quiet) quiet=1; shift ;;
        -h | --help) usage ;;
        --) shift; break ;;
        *) die "unknown option '$1' (COMMAND goes after --; see --help)" ;;
    esac
done
(($#)) || die "no COMMAND given; usage: run-in-vm.sh [options] -- COMMAND [ARGS...]"
[[ $mem =~ ^[0-9]+[KMGT]?$ ]] || die "--mem must look like 512M or 2G, got '$mem'"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus must be a positive integer, got '$cpus'"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer, got '$timeout'"
[[ -d $share ]] || die "--share: '$share' is not a directory"
share=$(realpath "$share")
[[ $share =~ ^/(proc|sys|dev)?(/|$) ]] && die "--share: refusing to share '$share'"
[[ -z $systemd || -x /lib/systemd/systemd ]] || die "--systemd: the host has no /lib/systemd/systemd; apt-get install systemd"

# 9>&-: nothing apt starts may keep our cache lock (fd 9) open.
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 -o APT::Sandbox::User=root "$@" 9>&-; }

ensure_tools() {
    local missing=()
    command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
    command -v xz >/dev/null || missing+=(xz-utils)
    ((${#missing[@]})) || return 0
    ((EUID == 0)) || die "missing ${missing[*]}: run once as root, or apt-get install ${missing[*]}"
    note "installing ${missing[*]} with apt-get ..."
    apt_get update -qq && apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
        die "apt-get install ${missing[*]} failed; run it by hand to see why"
}

# apt-get download PKG into the current directory, refreshing the lists once if needed.
apt_download() {
    apt_get download "$1" >/dev/null 2>&1 && return
    ((EUID == 0)) && apt_get update -qq && apt_get download "$1" >/dev/null && return
    die "apt-get download $1 failed"
}

kernel_package() {
    [[ -n ${JAIL_VM_KERNEL_PKG:-} ]] && { echo "$JAIL_VM_KERNEL_PKG"; return; }
    [[ -s $cache/kernel-pkg ]] && { cat "$cache/kernel-pkg"; return; }
    local pkg resolve='$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk "$resolve" || true)
    if [[ -z $pkg ]] && ((EUID == 0)); then
        apt_get update -qq
        pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk "$resolve" || true)
    fi
    [[ -n $pkg ]] || die "cannot resolve linux-image-amd64; set JAIL_VM_KERNEL_PKG=linux-image-<version>-amd64"
    echo "$pkg" | tee "$cache/kernel-pkg"
}

new_stage() { mktemp -d "$cache/.stage.XXXXXX"; }   # scratch dir, removed under the lock

# bzImage -> vmlinux (Debian compresses with xz). Booting the ELF directly (PVH)
# skips the kernel's self-decompression, which takes seconds under TCG.
extract_vmlinux() { # BZIMAGE OUT
    local off
    off=$(LC_ALL=C grep -abo $'\xfd7zXZ' "$1" | head -n 1 | cut -d: -f1 || true)
    [[ -n $off ]] || return 1
    tail -c +$((off + 1)) "$1" | xz -dc >"$2" 2>/dev/null || true # xz complains about trailing data
    [[ $(head -c 4 "$2") == $'\x7fELF' ]]
}

# Copy module $1 and its dependencies from $kdir to $mods, appending them to
# $mods/load-order dependencies first. Built-in modules are skipped.
declare -A ko_path=() ko_seen=()
add_module() {
    local m=${1//-/_} d
    [[ -z ${ko_seen[$m]:-} ]] || return 0
    ko_seen[$m]=1
    if [[ -z ${ko_path[$m]:-} ]]; then
        grep -q "/${m//_/[-_]}\.ko" "$kdir/modules.builtin" || die "kernel module $m not found"
        return 0
    fi
    case ${ko_path[$m]} in
        *.ko) cp "${ko_path[$m]}" "$mods/$m.ko" ;;
        *.ko.xz) xz -dc "${ko_path[$m]}" >"$mods/$m.ko" ;;
        *) die "unsupported module compression: ${ko_path[$m]}" ;;
    esac
    for d in $(tr '\0' '\n' <"$mods/$m.ko" | sed -n 's/^depends=//p' | tr , ' '); do add_module "$d"; done
    echo "$m.ko" >>"$mods/load-order"
}

# $cache/<pkg>/kernel (vmlinux, or the bzImage if extraction fails) and
# $cache/<pkg>/modules/ (*.ko, load-order).
fetch_kernel() {
    local pkg=$1 stage f b
    [[ -s $cache/$pkg/kernel ]] && return
    note "downloading $pkg into $cache (once) ..."
    stage=$(new_stage)
    (cd "$stage" && apt_download "$pkg")
    dpkg-deb -x "$stage"/*.deb "$stage/x"
    f=$(echo "$stage"/x/boot/vmlinuz-*)
    [[ -f $f ]] || die "$pkg has no /boot/vmlinuz-*"
    mkdir -p "$stage/out/modules"
    extract_vmlinux "$f" "$stage/out/kernel" || cp "$f" "$stage/out/kernel"
    kdir=$(echo "$stage"/x/lib/modules/*) mods=$stage/out/modules
    while read -r f; do b=${f##*/} b=${b%%.ko*}; ko_path[${b//-/_}]=$f; done < <(find "$kdir" -name '*.ko*')
    for f in "${modules[@]}"; do add_module "$f"; done
    touch "$mods/load-order"
    rm -rf "${cache:?}/$pkg" && mv "$stage/out" "$cache/$pkg" && rm -rf "$stage"
}

fetch_busybox() {
    [[ -x $cache/busybox ]] && return
    local stage
    stage=$(new_stage)
    (cd "$stage" && apt_download busybox-static)
    dpkg-deb -x "$stage"/*.deb "$stage/x"
    install -m 755 "$(find "$stage/x" -path '*bin/busybox' -type f)" "$cache/busybox" && rm -rf "$stage"
}

# Base initramfs: busybox, guest-init.sh as /init, modules, host glibc (so that
# dynamically linked binaries built here also run), host_bins, minimal /etc.
build_initramfs() {
    local pkg=$1 key root a l bins=()
    for a in $host_bins; do
        if l=$(command -v "$a"); then bins+=("$l"); else note "note: host program '$a' not found, not copied"; fi
    done
    key=$({ cat "$here/guest-init.sh" "$cache/$pkg/modules/load-order" "$cache/busybox" "${bins[@]}"
        echo "${glibc[*]}"; dpkg-query -W libc6 libgcc-s1 2>/dev/null || true; } | sha256sum | cut -c1-16)
    initramfs=$cache/initramfs-$key.cpio.gz
    [[ -s $initramfs ]] && return
    note "building initramfs (once) ..."
    root=$(new_stage) && chmod 755 "$root"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,mnt,root,lib64,lib/x86_64-linux-gnu}
    cp "$cache/busybox" "$root/bin/busybox"
    for a in $("$root/bin/busybox" --list-full); do [[ -e $root/$a ]] || ln -s /bin/busybox "$root/$a"; done
    install -m 755 "$here/guest-init.sh" "$root/init"
    cp -r "$cache/$pkg/modules" "$root/lib/modules"
    for a in "${glibc[@]}"; do [[ ! -e $a ]] || cp -L "$a" "$root$a"; done
    mkdir -p "$root/usr/local/bin"
    for a in "${bins[@]}"; do
        cp -L "$a" "$root/usr/local/bin/"
        for l in $(ldd "$a" 2>/dev/null | grep -o '/[^ ]*' || true); do mkdir -p "$root${l%/*}" && cp -L "$l" "$root$l"; done
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n' >"$root/etc/group"
    printf 'passwd: files\ngroup: files\nhosts: files\n' >"$root/etc/nsswitch.conf"
    printf '127.0.0.1 localhost jail-vm\n::1 localhost\n' >"$root/etc/hosts"
    ln -s /proc/self/mounts "$root/etc/mtab"
    (cd "$root" && find . | "$cache/busybox" cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) >"$root.cpio.gz"
    rm -f "$cache"/initramfs-*.cpio.gz
    mv "$root.cpio.gz" "$initramfs" && rm -rf "$root"
}

pick_accel() {
    case ${JAIL_VM_ACCEL:-auto} in
        kvm) accel=kvm; return ;;
        tcg) accel=tcg; return ;;
        auto) ;;
        *) die "JAIL_VM_ACCEL must be kvm or tcg, got '$JAIL_VM_ACCEL'" ;;
    esac
    accel=tcg
    if [[ ! -r /dev/kvm || ! -w /dev/kvm ]]; then
        note "note: /dev/kvm missing or not accessible; using TCG software emulation (slower)"
    elif [[ ! -d /sys/module/kvm_intel && ! -d /sys/module/kvm_amd ]]; then
        # e.g. kvm_pvm in Firecracker-style VMs: it only runs PVM-enabled guest kernels.
        note "note: /dev/kvm has no kvm_intel/kvm_amd behind it; using TCG software emulation (slower)"
    else
        accel=kvm
    fi
}

cache=${XDG_CACHE_HOME:-$HOME/.cache}/jail-vm
((EUID != 0)) || cache=/var/cache/jail-vm
cache=${JAIL_VM_CACHE:-$cache}
mkdir -p "$cache" || die "cannot create cache dir $cache"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/run-in-vm.XXXXXX")
vm_pid='' out_pid='' err_pid=''
cleanup() {
    trap - ERR
    set +e
    [[ -z $vm_pid ]] || { kill "$vm_pid" && wait "$vm_pid"; } 2>/dev/null
    for p in $out_pid $err_pid; do kill "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Concurrent runs share the cache: install tools, fill the cache and copy from it under a lock.
exec 9>"$cache/lock"
flock -w 900 9 || die "timed out waiting for the lock on $cache"
rm -rf "$cache"/.stage.*
ensure_tools
pkg=$(kernel_package)
fetch_kernel "$pkg"
fetch_busybox
build_initramfs "$pkg"
mkdir "$tmp/run" "$tmp/run/jail-vm"
{
    printf 'JAIL_VM_DIR=%s\nset --' "$(shq "$share")"
    for a in "$@"; do printf ' %s' "$(shq "$a")"; done
    echo
} >"$tmp/run/jail-vm/run.conf"
[[ -z $systemd ]] || install -m 755 "$here/systemd-init.sh" "$tmp/run/jail-vm/systemd-init.sh"
(cd "$tmp/run" && find jail-vm | "$cache/busybox" cpio -o -H newc -R 0:0 2>/dev/null) >"$tmp/run.cpio"
cat "$tmp/run.cpio" "$initramfs" >"$tmp/initrd" # uncompressed part first: 4-byte alignment
exec 9>&-

pick_accel
cpu=max; [[ $accel == kvm ]] && cpu=host
append="console=ttyS0 panic=-1 rdinit=/init"
hostroot=()
if [[ -n $systemd ]]; then
    append="console=ttyS0 panic=-1 rdinit=/jail-vm/systemd-init.sh systemd.unit=jail-vm.target"
    append+=" systemd.unified_cgroup_hierarchy=1 systemd.show_status=auto"
    hostroot=(-fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
        -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot)
fi
[[ -n $verbose ]] || append+=" quiet"

# Serial ports: ttyS0 console (kernel log), ttyS1/ttyS2 the command's stdout/stderr,
# streamed through FIFOs so that only we write the caller's stdout/stderr, ttyS3 exit status.
mkfifo "$tmp/out" "$tmp/err"
cat "$tmp/out" & out_pid=$!
cat "$tmp/err" >&2 & err_pid=$!
timeout --kill-after=5 "$timeout" qemu-system-x86_64 \
    -machine q35 -accel "$accel" -cpu "$cpu" -smp "$cpus" -m "$mem" \
    -display none -nodefaults -no-user-config -no-reboot \
    -kernel "$cache/$pkg/kernel" -initrd "$tmp/initrd" -append "$append" \
    -chardev "file,id=con,path=$(qarg "$tmp/console.log")" -serial chardev:con \
    -chardev "file,id=out,path=$(qarg "$tmp/out")" -serial chardev:out \
    -chardev "file,id=err,path=$(qarg "$tmp/err")" -serial chardev:err \
    -chardev "file,id=status,path=$(qarg "$tmp/status")" -serial chardev:status \
    -fsdev "local,id=share,path=$(qarg "$share"),security_model=none,multidevs=remap" \
    -device virtio-9p-pci,fsdev=share,mount_tag=share "${hostroot[@]}" \
    </dev/null >"$tmp/qemu.log" 2>&1 &
vm_pid=$!
rc=0
wait "$vm_pid" 2>/dev/null || rc=$? # 2>/dev/null: no "Aborted ..." job notice if qemu crashes
vm_pid=''
# Unblock the readers even if qemu never opened the FIFOs, then let them drain.
: <>"$tmp/out" <>"$tmp/err"
wait "$out_pid" "$err_pid" || true
out_pid='' err_pid=''

console() { [[ ! -f $tmp/console.log ]] || tr -d '\r' <"$tmp/console.log" | sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g'; }
[[ -z $verbose ]] || console >&2
status=''
[[ ! -s $tmp/status ]] || status=$(tr -cd 0-9 <"$tmp/status")
if ((rc == 124)); then
    echo "run-in-vm: error: timed out after ${timeout}s (accel=$accel); console tail:" >&2
    console | tail -n 20 >&2
    exit 124
elif [[ -z $status ]]; then
    echo "run-in-vm: error: the VM stopped without reporting an exit status (qemu exit $rc)" >&2
    cat "$tmp/qemu.log" >&2
    console | tail -n 30 >&2
    exit 125
fi
exit "$status"
