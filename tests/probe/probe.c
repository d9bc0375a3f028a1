/* brig's attack probe: run inside a jail as `probe ATTACK [ARG]`, it makes one attack and
 * prints one line: `ok` when the kernel let it through, `errno=NAME` when the attack's
 * system call failed, `STEP: errno=NAME` when an earlier step of a longer attack failed,
 * or what it observed (`signal=SIGSYS`, `uid=... euid=...`). tests/jail/attacks.rs asserts the
 * exact line. Built with `gcc -static` so that it needs nothing from the jail. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/sched.h>
#include <linux/userfaultfd.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int report(long ret) {
    if (ret < 0)
        printf("errno=%s\n", strerrorname_np(errno));
    else
        printf("ok\n");
    return 0;
}

static int step_failed(const char *step) {
    printf("%s: errno=%s\n", step, strerrorname_np(errno));
    return 0;
}

/* Runs fn in a child and reports how the child ended: its line, or the signal. */
static int in_child(int (*fn)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return step_failed("fork");
    if (pid == 0) {
        fn();
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        printf("signal=%s\n", sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
    return 0;
}

/* A child that waits to be attacked. */
static pid_t sleeper(void) {
    pid_t pid = fork();
    if (pid == 0) {
        for (;;)
            pause();
    }
    return pid;
}

static void end(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* fork-like clone(2)/clone3(2) with extra flags; the child exits at once. */
static long fork_with(unsigned long flags) {
    long pid = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return pid;
}

static long fork3_with(unsigned long flags) {
    struct clone_args args = {.flags = flags, .exit_signal = SIGCHLD};
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return pid;
}

static int int80_getpid(void) {
    long ret;
    /* i386 getpid is 20; through the 32-bit entry point. */
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory");
    printf(ret > 0 ? "ok\n" : "errno=%ld\n", -ret);
    return 0;
}

static int open_pty(int *slave) {
    int master = open("/dev/ptmx", O_RDWR | O_NOCTTY);
    if (master < 0)
        return -1;
    if (grantpt(master) || unlockpt(master))
        return -1;
    *slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    return *slave < 0 ? -1 : master;
}

/* Types into a terminal: the pty becomes the controlling terminal of a new session, as
 * the user's terminal would be, then TIOCSTI pushes a byte into its input. */
static int tiocsti(unsigned long request) {
    int slave;
    if (open_pty(&slave) < 0)
        return step_failed("pty");
    if (setsid() < 0)
        return step_failed("setsid");
    if (ioctl(slave, TIOCSCTTY, 0) < 0)
        return step_failed("TIOCSCTTY");
    char byte = 'x';
    return report(syscall(SYS_ioctl, slave, request, &byte));
}

static int unshare_then(int flags, const char *then) {
    if (unshare(flags) < 0)
        return step_failed("unshare");
    if (!strcmp(then, "mount"))
        return report(mount("none", "/tmp", "tmpfs", 0, NULL));
    if (!strcmp(then, "remount"))
        return report(mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL));
    if (!strcmp(then, "packet"))
        return report(socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)));
    return report(0);
}

/* The classic chroot escape, from a nested user namespace: chroot into a subdirectory
 * while the working directory stays outside, climb, chroot there. Reports whether a host
 * path (absent from the jail) is reachable afterwards. */
static int chroot_escape(const char *host_path) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
        return step_failed("unshare");
    mkdir("/tmp/inner", 0755);
    if (chroot("/tmp/inner") < 0)
        return step_failed("chroot");
    for (int i = 0; i < 64; i++)
        if (chdir("..") < 0)
            return step_failed("chdir");
    if (chroot(".") < 0)
        return step_failed("chroot .");
    struct stat st;
    if (stat(host_path, &st) < 0)
        return step_failed("host path");
    printf("escaped\n");
    return 0;
}

static int connect_to(int domain, const struct sockaddr *addr, socklen_t len) {
    int fd = socket(domain, SOCK_STREAM, 0);
    if (fd < 0)
        return step_failed("socket");
    return report(connect(fd, addr, len));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: probe ATTACK [ARG]\n");
        return 2;
    }
    const char *attack = argv[1];
    const char *arg = argc > 2 ? argv[2] : "";
    setvbuf(stdout, NULL, _IONBF, 0);

    /* namespaces */
    if (!strcmp(attack, "unshare-user"))
        return report(unshare(CLONE_NEWUSER));
    if (!strcmp(attack, "unshare"))
        return report(unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET));
    if (!strcmp(attack, "clone-user"))
        return report(fork_with(CLONE_NEWUSER));
    if (!strcmp(attack, "clone"))
        return report(fork_with(0));
    if (!strcmp(attack, "clone3"))
        return report(fork3_with(0));
    if (!strcmp(attack, "clone3-user"))
        return report(fork3_with(CLONE_NEWUSER));
    if (!strcmp(attack, "setns")) {
        int fd = open("/proc/self/ns/net", O_RDONLY);
        if (fd < 0)
            return step_failed("open");
        return report(setns(fd, CLONE_NEWNET));
    }
    if (!strcmp(attack, "setns-badfd"))
        return report(setns(-1, 0));

    /* mounts and roots */
    if (!strcmp(attack, "mount"))
        return report(mount("none", "/tmp", "tmpfs", 0, NULL));
    if (!strcmp(attack, "remount-rw"))
        return report(mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL));
    if (!strcmp(attack, "userns-mount"))
        return unshare_then(CLONE_NEWUSER | CLONE_NEWNS, "mount");
    if (!strcmp(attack, "userns-remount-rw"))
        return unshare_then(CLONE_NEWUSER | CLONE_NEWNS, "remount");
    if (!strcmp(attack, "pivot-root"))
        return report(syscall(SYS_pivot_root, ".", "."));
    if (!strcmp(attack, "chroot"))
        return report(chroot("/tmp"));
    if (!strcmp(attack, "chroot-escape"))
        return chroot_escape(arg);

    /* other processes */
    if (!strcmp(attack, "ptrace")) {
        pid_t pid = sleeper();
        long ret = syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, pid, 0, 0);
        int saved = errno;
        end(pid);
        errno = saved;
        return report(ret);
    }
    if (!strcmp(attack, "ptrace-init"))
        return report(syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, 1, 0, 0));
    if (!strcmp(attack, "process-vm")) {
        static char secret[8] = "secret";
        char copy[8];
        pid_t pid = sleeper();
        struct iovec local = {copy, sizeof copy}, remote = {secret, sizeof secret};
        long ret = syscall(SYS_process_vm_readv, pid, &local, 1, &remote, 1, 0);
        int saved = errno;
        end(pid);
        errno = saved;
        return report(ret);
    }
    if (!strcmp(attack, "kill-init"))
        return report(kill(1, 0));

    /* kernel interfaces */
    if (!strcmp(attack, "keyctl"))
        return report(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1));
    if (!strcmp(attack, "add-key"))
        return report(syscall(SYS_add_key, "user", "brig", "x", 1, KEY_SPEC_PROCESS_KEYRING));
    if (!strcmp(attack, "request-key"))
        return report(syscall(SYS_request_key, "user", "brig", NULL, 0));
    if (!strcmp(attack, "bpf")) {
        union bpf_attr attr = {.map_type = BPF_MAP_TYPE_ARRAY, .key_size = 4, .value_size = 4, .max_entries = 1};
        return report(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
    }
    if (!strcmp(attack, "bpf-badcmd"))
        return report(syscall(SYS_bpf, 0x7fff, NULL, 0));
    if (!strcmp(attack, "perf")) {
        struct perf_event_attr attr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof attr,
                                       .config = PERF_COUNT_SW_TASK_CLOCK,
                                       .exclude_kernel = 1, .exclude_hv = 1};
        return report(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
    }
    if (!strcmp(attack, "userfaultfd"))
        return report(syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
    if (!strcmp(attack, "io-uring")) {
        struct io_uring_params params = {0};
        return report(syscall(SYS_io_uring_setup, 4, &params));
    }
    if (!strcmp(attack, "open-by-handle") || !strcmp(attack, "open-by-handle-badfd")) {
        struct {
            struct file_handle handle;
            unsigned char bytes[8];
        } h = {{.handle_bytes = 8, .handle_type = 1}};
        int mount_fd = !strcmp(attack, "open-by-handle") ? AT_FDCWD : -1;
        return report(syscall(SYS_open_by_handle_at, mount_fd, &h.handle, O_RDONLY));
    }
    if (!strcmp(attack, "module")) {
        int fd = open("/dev/null", O_RDONLY);
        return report(syscall(SYS_finit_module, fd, "", 0));
    }
    if (!strcmp(attack, "reboot"))
        return report(syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
                              LINUX_REBOOT_CMD_CAD_OFF, NULL));
    if (!strcmp(attack, "settime")) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        return report(clock_settime(CLOCK_REALTIME, &now));
    }
    if (!strcmp(attack, "settime-null"))
        return report(syscall(SYS_clock_settime, CLOCK_REALTIME, NULL));

    /* other ABIs */
    if (!strcmp(attack, "int80"))
        return in_child(int80_getpid);
    if (!strcmp(attack, "x32"))
        return report(syscall(0x40000000 | SYS_getpid));

    /* terminals */
    if (!strcmp(attack, "tiocsti"))
        return tiocsti(TIOCSTI);
    if (!strcmp(attack, "tiocsti-highbits"))
        return tiocsti(TIOCSTI | (1UL << 32));
    if (!strcmp(attack, "tioclinux")) {
        int slave;
        if (open_pty(&slave) < 0)
            return step_failed("pty");
        char subcode = 6;
        return report(ioctl(slave, TIOCLINUX, &subcode));
    }

    /* sockets */
    if (!strcmp(attack, "packet"))
        return report(socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)));
    if (!strcmp(attack, "raw"))
        return report(socket(AF_INET, SOCK_RAW, IPPROTO_RAW));
    if (!strcmp(attack, "userns-packet"))
        return unshare_then(CLONE_NEWUSER | CLONE_NEWNET, "packet");
    if (!strcmp(attack, "netlink-audit"))
        return report(socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT));
    if (!strcmp(attack, "netlink-uevent"))
        return report(socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT));
    if (!strcmp(attack, "netlink-route"))
        return report(socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE));
    if (!strcmp(attack, "tcp-connect")) {
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(arg)),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        return connect_to(AF_INET, (struct sockaddr *)&addr, sizeof addr);
    }
    if (!strcmp(attack, "abstract-connect")) {
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        size_t len = strlen(arg);
        memcpy(addr.sun_path + 1, arg, len);
        return connect_to(AF_UNIX, (struct sockaddr *)&addr,
                          offsetof(struct sockaddr_un, sun_path) + 1 + len);
    }

    /* files */
    if (!strcmp(attack, "read"))
        return report(open(arg, O_RDONLY));
    if (!strcmp(attack, "stat")) {
        struct stat st;
        return report(stat(arg, &st));
    }
    if (!strcmp(attack, "create"))
        return report(open(arg, O_WRONLY | O_CREAT | O_EXCL, 0644));
    if (!strcmp(attack, "write")) {
        int fd = open(arg, O_WRONLY);
        if (fd < 0)
            return report(fd);
        return report(write(fd, "brig", 4));
    }
    if (!strcmp(attack, "reopen-stdout"))
        return report(open("/proc/self/fd/1", O_RDWR));
    if (!strcmp(attack, "ids")) {
        uid_t r, e, s;
        getresuid(&r, &e, &s);
        printf("uid=%d euid=%d suid=%d\n", r, e, s);
        return 0;
    }
    fprintf(stderr, "probe: unknown attack %s\n", attack);
    return 2;
}
