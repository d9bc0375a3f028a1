#!/bin/sh
# The guest of `run-in-vm.sh --systemd`: a real systemd as PID 1 on pure cgroup v2.
#
# run-in-vm.sh puts this script and run.conf in /jail-vm of the initramfs and boots with
# rdinit=/jail-vm/systemd-init.sh. As the initramfs's PID 1 (busybox sh), it builds the
# root systemd boots: the host's own / (shared read-only over 9p, tag `hostroot`) under an
# overlay whose upper layer is a tmpfs, so the guest can install units, add users and
# write /etc and /var without touching the host. It adds to that root's /etc:
#   * an empty /etc/fstab, the hostname jail-vm;
#   * jail-vm.target, the default target (systemd.unit= on the kernel command line):
#     basic.target and jail-vm-run.service, nothing of the host's multi-user.target
#     (its databases, timers and gettys only slow the boot down);
#   * jail-vm-run.service: runs COMMAND (from run.conf) as root in the shared directory,
#     its stdout/stderr on ttyS1/ttyS2 and its exit status on ttyS3 as in the busybox
#     guest, then powers the VM off (systemctl poweroff --force: the root is a tmpfs
#     overlay, nothing to save);
#   * masks for the units that hang or fail in a VM without the host's disks and modules.
# Then it switch_roots to the overlay and execs /lib/systemd/systemd. The unit runs
# `sh /jail-vm/systemd-init.sh --run`, the second part of this script.
#
# Nothing reaches the host but the shared directory (read-write, at its own path) and
# the serial ports.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

if [ "${1:-}" = --run ]; then
    # Under systemd, as jail-vm-run.service (the host's /bin/sh).
    . /jail-vm/run.conf
    export HOME=/root TERM=dumb JAIL_VM=1 JAIL_VM_SYSTEMD=1
    for t in 1 2 3; do stty -F /dev/ttyS$t raw -echo; done
    status=125
    if cd "$JAIL_VM_DIR" 2>/dev/ttyS2; then
        ("$@") </dev/null >/dev/ttyS1 2>/dev/ttyS2
        status=$?
    fi
    echo $status >/dev/ttyS3
    # stty applies its settings with TCSADRAIN: it returns once all output has left.
    for t in 1 2 3; do stty -F /dev/ttyS$t raw; done
    sync
    systemctl poweroff --force --force
    exit 0
fi

fatal() {
    echo "jail-vm systemd-init: $*" >&2
    echo "jail-vm systemd-init: $*" >/dev/ttyS2
    echo 125 >/dev/ttyS3
    poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do
    insmod "/lib/modules/$m" || echo "jail-vm systemd-init: insmod $m failed" >&2
done </lib/modules/load-order

[ -r /jail-vm/run.conf ] || fatal "no /jail-vm/run.conf in the initramfs"
. /jail-vm/run.conf

new=/newroot
mkdir -p /lower /upper $new
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=262144 hostroot /lower ||
    fatal "cannot mount the host's root (9p tag hostroot)"
mount -t tmpfs -o mode=0755 upper /upper && mkdir /upper/data /upper/work ||
    fatal "cannot mount the overlay's tmpfs"
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay $new ||
    fatal "cannot mount the overlay of the host's root"
[ -x $new/lib/systemd/systemd ] || fatal "the host has no /lib/systemd/systemd (apt-get install systemd)"

# /tmp and /var/tmp of their own: systemd-tmpfiles would empty the host's through the
# overlay (slow: a whiteout for each file).
for d in tmp var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $new/$d || fatal "cannot mount /$d"; done

mkdir -p "$new$JAIL_VM_DIR" &&
    mount -t 9p -o trans=virtio,version=9p2000.L,cache=mmap,msize=262144 share "$new$JAIL_VM_DIR" ||
    fatal "cannot mount the shared directory at $JAIL_VM_DIR"

# The host's marker of a container: systemd would take the VM for one (and ignore the
# kernel's command line).
rm -f $new/.dockerenv $new/run/.containerenv

# The root's /etc: no disks, no gettys, the test's target.
etc=$new/etc
: >$etc/fstab
echo jail-vm >$etc/hostname
printf '127.0.0.1 localhost jail-vm\n::1 localhost\n' >$etc/hosts
rm -rf $etc/systemd/system/*.wants $etc/systemd/system/default.target
for u in systemd-remount-fs.service systemd-modules-load.service systemd-firstboot.service \
    systemd-timesyncd.service systemd-pstore.service systemd-networkd-wait-online.service \
    systemd-udev-settle.service systemd-udev-trigger.service systemd-udevd.service \
    systemd-udevd-control.socket systemd-udevd-kernel.socket \
    systemd-hwdb-update.service systemd-journal-catalog-update.service \
    systemd-update-utmp.service systemd-update-done.service ldconfig.service \
    systemd-binfmt.service proc-sys-fs-binfmt_misc.automount sys-kernel-config.mount \
    sys-kernel-debug.mount sys-kernel-tracing.mount sys-fs-fuse-connections.mount \
    dev-hugepages.mount dev-mqueue.mount \
    getty.target serial-getty@.service getty@.service console-getty.service \
    e2scrub_reap.service cryptsetup.target swap.target remote-fs.target; do
    ln -sf /dev/null "$etc/systemd/system/$u"
done
cat >$etc/systemd/system/jail-vm.target <<'EOF'
[Unit]
Description=run-in-vm.sh's command
Requires=basic.target jail-vm-run.service
After=basic.target jail-vm-run.service
AllowIsolate=yes
EOF
cat >$etc/systemd/system/jail-vm-run.service <<'EOF'
[Unit]
Description=run-in-vm.sh's command
After=basic.target
[Service]
Type=oneshot
ExecStart=/bin/sh /jail-vm/systemd-init.sh --run
TimeoutStartSec=infinity
StandardOutput=journal+console
StandardError=journal+console
EOF
mkdir -p $new/jail-vm && cp /jail-vm/run.conf /jail-vm/systemd-init.sh $new/jail-vm/ ||
    fatal "cannot copy /jail-vm into the new root"

for d in proc sys dev; do mount --move /$d $new/$d || fatal "cannot move /$d into the new root"; done
exec switch_root $new /lib/systemd/systemd
