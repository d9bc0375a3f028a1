//! Raw system calls that neither nix nor std wrap, each behind a safe function. This is
//! the only module with `unsafe`; every other module goes through these wrappers or nix.

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Result of a fork-like `clone3`.
pub enum Cloned {
    Parent {
        pid: Pid,
        pidfd: OwnedFd,
        /// Whether the child started inside the requested cgroup.
        in_cgroup: bool,
    },
    Child,
}

/// CLONE_INTO_CGROUP does not fit libc's c_int constant.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Creates a child process in new namespaces (`flags` are `CLONE_NEW*`), like fork(2):
/// the child continues from here on a copy of the caller's memory. With `cgroup` (a v2
/// cgroup directory) the child starts inside that cgroup (CLONE_INTO_CGROUP, Linux 5.7+);
/// on older kernels it starts where brig is and `in_cgroup` says so. Falls back to
/// clone(2) on kernels without clone3, where a time namespace cannot be created this way.
///
/// The caller must be single-threaded, as after fork(2).
pub fn clone_process(flags: u64, cgroup: Option<BorrowedFd>) -> Result<Cloned, Errno> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: flags | libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(cgroup) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = cgroup.as_raw_fd() as u64;
    }
    let clone3 = |args: &CloneArgs| {
        // SAFETY: `args` is a valid clone_args of the size we pass; no stack is given, so
        // the child runs on a copy-on-write copy of this stack exactly as after fork(2).
        unsafe {
            libc::syscall(
                libc::SYS_clone3,
                args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        }
    };
    let mut ret = clone3(&args);
    let mut in_cgroup = cgroup.is_some();
    if ret == -1 && cgroup.is_some() && matches!(Errno::last(), Errno::EINVAL | Errno::E2BIG) {
        args.flags &= !(CLONE_INTO_CGROUP);
        args.cgroup = 0;
        in_cgroup = false;
        ret = clone3(&args);
    }
    if ret == -1 && Errno::last() == Errno::ENOSYS {
        in_cgroup = false;
        let legacy_flags = (flags & !(libc::CLONE_NEWTIME as u64)) | libc::CLONE_PIDFD as u64;
        // SAFETY: clone(2) without CLONE_VM and with a null stack behaves like fork(2);
        // the parent_tid argument receives the pidfd because of CLONE_PIDFD.
        ret = unsafe {
            libc::syscall(
                libc::SYS_clone,
                legacy_flags | libc::SIGCHLD as u64,
                0usize,
                &mut pidfd as *mut RawFd,
                0usize,
                0usize,
            )
        };
    }
    match ret {
        -1 => Err(Errno::last()),
        0 => Ok(Cloned::Child),
        pid => Ok(Cloned::Parent {
            pid: Pid::from_raw(pid as i32),
            // SAFETY: the kernel returned a fresh pidfd that nothing else owns.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
            in_cgroup,
        }),
    }
}

/// fork(2). The caller must be single-threaded.
pub fn fork_process() -> Result<Option<Pid>, Errno> {
    // SAFETY: brig is single-threaded whenever it forks, so the child may do anything.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(Some(child)),
        nix::unistd::ForkResult::Child => Ok(None),
    }
}

/// The stack a [`spawn_sharing_memory`] child runs on. Pages are touched only as used.
const SHARED_CHILD_STACK: usize = 256 * 1024;

/// Runs `child` in a new process that shares this one's memory, as vfork(2) does: the
/// calling thread waits until the child has exec'd or exited, then gets its pid. Nothing
/// is copied, unlike fork(2), and the child's exec has no copy of brig to tear down.
/// `child` runs on a stack of its own and must end in exec or exit; memory it changes
/// before that is changed for the caller too.
///
/// The caller must be single-threaded, as for fork(2).
pub fn spawn_sharing_memory(child: &mut dyn FnMut()) -> Result<Pid, Errno> {
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` points at the `&mut dyn FnMut` below, which outlives the child's
        // use of it: CLONE_VFORK holds the caller until the child execs or exits.
        let child = unsafe { &mut *arg.cast::<&mut dyn FnMut()>() };
        child();
        // Not reached: `child` execs or exits. Were it to return, the child exits with
        // brig's status for a failed setup.
        125
    }
    // calloc of this size is a fresh zeroed mapping: no page is written here.
    let mut stack = vec![0u8; SHARED_CHILD_STACK];
    // The stack grows down from its end, which must be 16-byte aligned.
    let end = stack.as_mut_ptr_range().end as usize & !15;
    let mut child: &mut dyn FnMut() = child;
    // SAFETY: the child runs `trampoline` on its own stack; CLONE_VFORK keeps this frame,
    // `stack` and `child` alive until the child no longer uses them.
    let pid = unsafe {
        libc::clone(
            trampoline,
            end as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut child as *mut &mut dyn FnMut()).cast(),
        )
    };
    drop(stack);
    Errno::result(pid).map(Pid::from_raw)
}

/// wait4(2) for any child, without blocking: None when none has exited.
pub fn wait4_any_nohang() -> Result<Option<(Pid, nix::sys::wait::WaitStatus, libc::rusage)>, Errno>
{
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid for writes for the duration of the call.
    let ret = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
    match Errno::result(ret)? {
        0 => Ok(None),
        pid => {
            let pid = Pid::from_raw(pid);
            let status = nix::sys::wait::WaitStatus::from_raw(pid, status)?;
            Ok(Some((pid, status, usage)))
        }
    }
}

/// wait4(2) for the child `pid`: how it ended, and its resource usage including that of
/// the children it reaped (unlike RUSAGE_CHILDREN, nothing of brig's other children).
pub fn wait4(pid: Pid) -> Result<(nix::sys::wait::WaitStatus, libc::rusage), Errno> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes for the duration of the call.
        let ret = unsafe { libc::wait4(pid.as_raw(), &mut status, 0, &mut usage) };
        match Errno::result(ret) {
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(errno),
            Ok(_) => return Ok((nix::sys::wait::WaitStatus::from_raw(pid, status)?, usage)),
        }
    }
}

pub fn pidfd_send_signal(pidfd: BorrowedFd, signal: Signal) -> Result<(), Errno> {
    // SAFETY: plain syscall on a valid fd; no pointers passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    Errno::result(ret).map(drop)
}

pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<(), Errno> {
    // SAFETY: both arguments are valid NUL-terminated strings.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    Errno::result(ret).map(drop)
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// Sets mount attributes on `path` and every mount below it (Linux 5.12+).
pub fn mount_setattr_recursive(path: &CStr, attr_set: u64) -> Result<(), Errno> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: valid path string and a mount_attr of the size we pass.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Closes descriptors `first..=last` (Linux 5.9+).
pub fn close_range(first: u32, last: u32) -> Result<(), Errno> {
    // SAFETY: plain syscall, no pointers; closing descriptors is memory-safe.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    Errno::result(ret).map(drop)
}

/// Sets IFF_UP on a network interface of the current network namespace.
pub fn interface_up(name: &str) -> Result<(), Errno> {
    let socket = inet_socket()?;
    let mut request = ifreq_for(name)?;
    // SAFETY: `request` is a valid ifreq for SIOCGIFFLAGS/SIOCSIFFLAGS on an open socket.
    unsafe {
        Errno::result(libc::ioctl(
            socket.as_raw_fd(),
            libc::SIOCGIFFLAGS,
            &mut request,
        ))?;
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        Errno::result(libc::ioctl(
            socket.as_raw_fd(),
            libc::SIOCSIFFLAGS,
            &request,
        ))?;
    }
    Ok(())
}

/// A socket to configure interfaces with, in the caller's network namespace.
fn inet_socket() -> Result<OwnedFd, Errno> {
    nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
}

/// An ifreq naming interface `name`, every other field zero.
fn ifreq_for(name: &str) -> Result<libc::ifreq, Errno> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= request.ifr_name.len() {
        return Err(Errno::EINVAL);
    }
    for (slot, byte) in request.ifr_name.iter_mut().zip(name.bytes()) {
        *slot = byte as libc::c_char;
    }
    Ok(request)
}

fn sockaddr_v4(address: std::net::Ipv4Addr) -> libc::sockaddr {
    let inet = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(address).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size on Linux, and every bit
    // pattern is a valid sockaddr.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(inet) }
}

/// Creates TUN device `name` (IP packets, no packet-information header) in the caller's
/// network namespace and returns its descriptor, non-blocking: the device lives as long
/// as the descriptor does. The namespace is the one /dev/net/tun was opened in.
pub fn tun_create(name: &str) -> Result<OwnedFd, Errno> {
    let tun = nix::fcntl::open(
        "/dev/net/tun",
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK,
        nix::sys::stat::Mode::empty(),
    )?;
    let mut request = ifreq_for(name)?;
    request.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads an ifreq; `request` is one, and `tun` is open.
    Errno::result(unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &request) })?;
    // Persistent, closing the last descriptor does not unregister the device (which
    // waits for an RCU barrier, ~20 ms, on brig's way out); the device goes with the
    // jail's network namespace, whose teardown the kernel does in the background.
    // SAFETY: TUNSETPERSIST takes an integer argument; `tun` is an attached TUN fd.
    Errno::result(unsafe {
        libc::ioctl(tun.as_raw_fd(), libc::TUNSETPERSIST, 1 as libc::c_ulong)
    })?;
    Ok(tun)
}

/// Gives interface `name` the IPv4 address `address/prefix` and the MTU `mtu`.
pub fn interface_address_v4(
    name: &str,
    address: std::net::Ipv4Addr,
    prefix: u8,
    mtu: u32,
) -> Result<(), Errno> {
    let socket = inet_socket()?;
    let mut request = ifreq_for(name)?;
    request.ifr_ifru.ifru_addr = sockaddr_v4(address);
    // SAFETY: SIOCSIFADDR reads an ifreq holding a sockaddr_in; the socket is open.
    Errno::result(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFADDR, &request) })?;
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    request.ifr_ifru.ifru_netmask = sockaddr_v4(std::net::Ipv4Addr::from(mask));
    // SAFETY: as above, for SIOCSIFNETMASK.
    Errno::result(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFNETMASK, &request) })?;
    request.ifr_ifru.ifru_mtu = mtu as libc::c_int;
    // SAFETY: SIOCSIFMTU reads an ifreq holding the MTU.
    Errno::result(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFMTU, &request) })?;
    Ok(())
}

/// Adds the IPv4 default route through `gateway` on interface `name`.
pub fn default_route_v4(name: &str, gateway: std::net::Ipv4Addr) -> Result<(), Errno> {
    let socket = inet_socket()?;
    let mut device: Vec<libc::c_char> = name.bytes().map(|byte| byte as libc::c_char).collect();
    device.push(0);
    // SAFETY: rtentry is plain old data; all-zero is a valid value.
    let mut route: libc::rtentry = unsafe { std::mem::zeroed() };
    route.rt_dst = sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED);
    route.rt_genmask = sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED);
    route.rt_gateway = sockaddr_v4(gateway);
    route.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
    route.rt_dev = device.as_mut_ptr();
    // SAFETY: SIOCADDRT reads an rtentry; `rt_dev` points to a NUL-terminated name that
    // outlives the call.
    Errno::result(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCADDRT, &route) })?;
    Ok(())
}

fn inet6_socket() -> Result<OwnedFd, Errno> {
    nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet6,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
}

fn interface_index(socket: &OwnedFd, name: &str) -> Result<libc::c_int, Errno> {
    let mut request = ifreq_for(name)?;
    // SAFETY: SIOCGIFINDEX reads the name from an ifreq and writes the index into it,
    // through the pointer to our mutable `request`.
    Errno::result(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFINDEX, &mut request) })?;
    // SAFETY: the kernel filled the union's ifindex member.
    Ok(unsafe { request.ifr_ifru.ifru_ifindex })
}

fn in6_addr(address: std::net::Ipv6Addr) -> libc::in6_addr {
    libc::in6_addr {
        s6_addr: address.octets(),
    }
}

/// Gives interface `name` the IPv6 address `address/prefix`. EAFNOSUPPORT: the kernel
/// has no IPv6.
pub fn interface_address_v6(
    name: &str,
    address: std::net::Ipv6Addr,
    prefix: u8,
) -> Result<(), Errno> {
    let socket = inet6_socket()?;
    let request = libc::in6_ifreq {
        ifr6_addr: in6_addr(address),
        ifr6_prefixlen: u32::from(prefix),
        ifr6_ifindex: interface_index(&socket, name)?,
    };
    // SAFETY: SIOCSIFADDR on an AF_INET6 socket reads an in6_ifreq; `request` is one.
    Errno::result(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFADDR, &request) })?;
    Ok(())
}

/// The kernel's `struct in6_rtmsg` (linux/ipv6_route.h); libc's keeps its fields private.
#[repr(C)]
struct In6RouteMessage {
    destination: libc::in6_addr,
    source: libc::in6_addr,
    gateway: libc::in6_addr,
    kind: u32,
    destination_length: u16,
    source_length: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

/// Adds the IPv6 default route through `gateway` on interface `name`.
pub fn default_route_v6(name: &str, gateway: std::net::Ipv6Addr) -> Result<(), Errno> {
    let socket = inet6_socket()?;
    let unspecified = in6_addr(std::net::Ipv6Addr::UNSPECIFIED);
    let route = In6RouteMessage {
        destination: unspecified,
        source: unspecified,
        gateway: in6_addr(gateway),
        kind: 0,
        destination_length: 0,
        source_length: 0,
        metric: 1,
        info: 0,
        flags: u32::from(libc::RTF_UP | libc::RTF_GATEWAY),
        ifindex: interface_index(&socket, name)?,
    };
    // SAFETY: SIOCADDRT on an AF_INET6 socket reads an in6_rtmsg; `route` is one.
    Errno::result(unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCADDRT, &route) })?;
    Ok(())
}

/// Resets every signal to its default disposition, so that nothing brig ignores (Rust
/// ignores SIGPIPE) or inherited as ignored reaches the jailed program.
pub fn reset_signal_dispositions() {
    for signal in Signal::iterator() {
        if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: installing SIG_DFL is always sound.
        let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) };
    }
}

/// Puts the calling process back on the normal scheduler: a real-time policy or a
/// negative nice value inherited from brig's caller would let the jail starve the host
/// (and brig, which must be able to kill it). Both changes lower priority, which needs no
/// privilege; a positive nice value is kept.
pub fn reset_scheduling() -> Result<(), Errno> {
    // SAFETY: sched_getscheduler(0) only reads the caller's own policy.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy != libc::SCHED_OTHER && policy != libc::SCHED_BATCH && policy != libc::SCHED_IDLE {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the duration of the call.
        Errno::result(unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) })?;
    }
    // getpriority may return -1 as a value: clear errno first to tell it from an error.
    Errno::clear();
    // SAFETY: reads the caller's own nice value.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if nice < 0 && Errno::last_raw() == 0 {
        // SAFETY: sets the caller's own nice value.
        Errno::result(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 0) })?;
    }
    Ok(())
}

/// The slice [`ask_for_short_turns`] asks for: the shortest the kernel grants (0.1 ms).
pub const SHORT_SLICE_NS: u64 = 100_000;

/// Asks the scheduler for short turns on the CPU ([`SHORT_SLICE_NS`] as the caller's
/// slice, `sched_attr.sched_runtime` of a fair task: Linux 6.12's EEVDF; earlier kernels
/// take the request and ignore it). Woken, the caller then preempts a task with a longer
/// slice (the default, about 1 ms) instead of waiting for the end of that task's turn:
/// for a process that sleeps until an event and answers it with little work. Its policy
/// and nice value are kept, and its children get the default slice back
/// (`SCHED_FLAG_RESET_ON_FORK`, which also gives them a nice value of 0 if the caller's
/// is below, and the normal policy if the caller's is real-time). Needs no privilege.
pub fn ask_for_short_turns() -> Result<(), Errno> {
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: sched_attr is plain old data; all-zero is a valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getattr writes at most `size` bytes into `attr`, the caller's own
    // scheduling attributes.
    Errno::result(unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut libc::sched_attr,
            size,
            0,
        )
    })?;
    // Slices are the fair policies'.
    if attr.sched_policy != libc::SCHED_OTHER as u32
        && attr.sched_policy != libc::SCHED_BATCH as u32
    {
        return Ok(());
    }
    attr.size = size;
    attr.sched_flags |= libc::SCHED_FLAG_RESET_ON_FORK as u64;
    attr.sched_runtime = SHORT_SLICE_NS;
    // SAFETY: `attr` is a valid sched_attr of `size` bytes for the duration of the call;
    // it changes the caller's own slice only (policy and nice as they were).
    Errno::result(unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &attr as *const libc::sched_attr,
            0,
        )
    })
    .map(drop)
}

/// Drops every capability in the bounding set, up to the last one the running kernel
/// knows (PR_CAPBSET_READ answers EINVAL past it), skipping those already dropped.
pub fn drop_bounding_set() -> Result<(), Errno> {
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_READ and PR_CAPBSET_DROP take a capability number only.
        match unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong) } {
            1 => {
                // SAFETY: as above.
                Errno::result(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong) })?;
            }
            0 => {}
            _ if Errno::last() == Errno::EINVAL => return Ok(()),
            _ => return Err(Errno::last()),
        }
    }
    Ok(())
}

/// setresuid(2) and setresgid(2) as the raw system calls: they change the calling task's
/// ids only. glibc's wrappers broadcast the change to every thread they know of, and a
/// [`spawn_sharing_memory`] child runs on its parent's thread descriptor: the broadcast
/// would signal the parent (init) instead of changing the child alone.
pub fn set_task_ids(uids: (u32, u32, u32), gids: (u32, u32, u32)) -> Result<(), Errno> {
    // SAFETY: setresgid and setresuid take three ids each and touch no memory.
    Errno::result(unsafe { libc::syscall(libc::SYS_setresgid, gids.0, gids.1, gids.2) })?;
    // SAFETY: as above.
    Errno::result(unsafe { libc::syscall(libc::SYS_setresuid, uids.0, uids.1, uids.2) }).map(drop)
}

/// The securebits that take uid 0's special treatment away, locked (capabilities(7)):
/// SECBIT_NOROOT (an execve by uid 0 gains no capability), SECBIT_NO_CAP_AMBIENT_RAISE
/// (no ambient capability can be raised), each with its _LOCKED bit, and
/// SECBIT_KEEP_CAPS_LOCKED (KEEP_CAPS stays off). Needs CAP_SETPCAP; inherited by every
/// descendant, across fork and execve, and never to be unset.
pub fn lock_out_root_privileges() -> Result<(), Errno> {
    let bits = libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_KEEP_CAPS_LOCKED
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: PR_SET_SECUREBITS takes a bit mask only.
    Errno::result(unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong) }).map(drop)
}

/// SIGPIPE ignored, as Rust's runtime sets it up: writing to a closed pipe fails with
/// EPIPE instead of killing brig. The program gets the default back (see
/// `reset_signal_dispositions`).
pub fn ignore_sigpipe() {
    // SAFETY: installing SIG_IGN is always sound.
    let _ =
        unsafe { nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigIgn) };
}

/// Ends the process at once: no atexit handlers, no unwinding, no stdio flushing that
/// could repeat output buffered before a fork.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit(2) is always safe to call.
    unsafe { libc::_exit(code) }
}

/// Whether descriptor `fd` is open in this process.
pub fn is_fd_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only queries the descriptor table.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// Borrows a descriptor brig inherited (e.g. `--report-fd`) for the duration of a call.
/// Callers check that it is open first.
pub fn borrow_fd<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: the descriptor is open (checked by the caller) and brig never closes it
    // while the borrow lives.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Overwrites this process's argument strings, which /proc/PID/cmdline shows to anyone
/// in its PID namespace, with `name`. The jail's init is a fork of brig and would
/// otherwise show the jail brig's whole command line (host paths of binds, configs).
pub fn scrub_cmdline(name: &str) {
    let Some(stat) = crate::procfs::Stat::read("self") else {
        return;
    };
    // arg_start and arg_end (proc(5)).
    let (Some(start), Some(end)) = (stat.field(48), stat.field(49)) else {
        return;
    };
    let (start, end) = (start as usize, end as usize);
    if start == 0 || end <= start {
        return;
    }
    let length = end - start;
    // SAFETY: [arg_start, arg_end) is this process's own argument area on its initial
    // stack, mapped and writable; nothing in this process reads argv afterwards, and the
    // area keeps its size (only its bytes change).
    unsafe {
        let area = start as *mut u8;
        std::ptr::write_bytes(area, 0, length);
        let name = name.as_bytes();
        std::ptr::copy_nonoverlapping(name.as_ptr(), area, name.len().min(length - 1));
    }
}

/// The running kernel's Landlock ABI version: 0 when it has no Landlock or it is disabled.
pub fn landlock_abi() -> u8 {
    landlock_version().unwrap_or(0)
}

/// The Landlock ABI version, or the errno the version query failed with: ENOSYS (not
/// built, or a seccomp filter that answers ENOSYS), EOPNOTSUPP (built, not enabled at
/// boot), EPERM (a seccomp filter; the kernel never answers the query so).
pub fn landlock_version() -> Result<u8, Errno> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the kernel only
    // returns a number; nothing is read or written.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(ret.clamp(0, 255) as u8)
}

/// Descriptor 0, 1 or 2, borrowed; None if it is not open.
pub fn borrow_standard_fd(fd: RawFd) -> Option<BorrowedFd<'static>> {
    if !(0..=2).contains(&fd) || !is_fd_open(fd) {
        return None;
    }
    Some(borrow_fd(fd))
}

/// Whether the kernel knows the seccomp return action `action` (SECCOMP_GET_ACTION_AVAIL):
/// a query only, nothing is installed.
pub fn seccomp_action_available(action: u32) -> Result<(), Errno> {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    // SAFETY: the kernel reads one u32 from the pointer, which points at `action`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    Errno::result(ret).map(drop)
}

/// dup2(`fd`, `target`): `target` becomes a copy of `fd`, without close-on-exec.
pub fn place_fd(fd: RawFd, target: RawFd) -> Result<(), Errno> {
    // SAFETY: dup2 on a descriptor this process holds; `target` is replaced atomically,
    // and the caller hands the program exactly these numbers.
    Errno::result(unsafe { libc::dup2(fd, target) }).map(drop)
}

/// Sends `payload` and, with it, `fds` (SCM_RIGHTS) over a unix socket, in one message.
pub fn send_with_fds(
    socket: BorrowedFd,
    payload: &[u8],
    fds: &[BorrowedFd],
) -> Result<usize, Errno> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let iov = [std::io::IoSlice::new(payload)];
    let control = [ControlMessage::ScmRights(&raw)];
    let control: &[ControlMessage] = if raw.is_empty() { &[] } else { &control };
    loop {
        match sendmsg::<()>(
            socket.as_raw_fd(),
            &iov,
            control,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
}

/// The most descriptors one message may bring; more are refused (closed).
pub const MAX_FDS_PER_MESSAGE: usize = 8;
/// The kernel's SCM_MAX_FD: room for this many, so that none is ever cut off (and lost
/// open in this process) by a message that brings too many.
const SCM_MAX_FD: usize = 253;

/// Receives into `buffer` and takes the descriptors that came with those bytes,
/// close-on-exec. Ok((0, _)) at EOF. A message whose descriptors did not fit
/// (MSG_CTRUNC) is an error: the ones that arrived are closed.
pub fn receive_with_fds(
    socket: BorrowedFd,
    buffer: &mut [u8],
) -> Result<(usize, Vec<OwnedFd>), Errno> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut iov = [std::io::IoSliceMut::new(buffer)];
    let mut space = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    let message = loop {
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(Errno::EINTR) => continue,
            other => break other?,
        }
    };
    let mut received: Vec<OwnedFd> = Vec::new();
    for control in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = control {
            // SAFETY: the kernel just installed these descriptors in this process for us;
            // nothing else owns them.
            received.extend(
                fds.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if message.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(Errno::EMSGSIZE);
    }
    Ok((message.bytes, received))
}

/// Sends one descriptor over a unix socket (SCM_RIGHTS).
pub fn send_fd(socket: BorrowedFd, fd: BorrowedFd) -> Result<(), Errno> {
    send_with_fds(socket, b"f", &[fd]).map(drop)
}

/// Receives one descriptor sent with [`send_fd`]; None at EOF, on an error, or when the
/// message carried none. Extra descriptors are closed.
pub fn receive_fd(socket: BorrowedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let (_, fds) = receive_with_fds(socket, &mut byte).ok()?;
    fds.into_iter().next()
}

/// Opens a new terminal of the devpts instance mounted at the caller's /dev/pts (through
/// /dev/ptmx, a link to pts/ptmx in a jail): its master and its slave (TIOCGPTPEER, the
/// slave of exactly this master, no path looked up), both close-on-exec and neither
/// made anyone's controlling terminal, the window `cols` × `rows`.
pub fn open_terminal(cols: u16, rows: u16) -> Result<(OwnedFd, OwnedFd), Errno> {
    let flags =
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY | nix::fcntl::OFlag::O_CLOEXEC;
    let master = nix::fcntl::open("/dev/ptmx", flags, nix::sys::stat::Mode::empty())?;
    // SAFETY: unlockpt takes a descriptor this process holds (TIOCSPTLCK with 0).
    Errno::result(unsafe { libc::unlockpt(master.as_raw_fd()) })?;
    set_window_size(master.as_fd(), cols, rows)?;
    // SAFETY: TIOCGPTPEER takes open(2) flags by value and returns a new descriptor,
    // which nothing else owns.
    let slave = Errno::result(unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            (libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) as libc::c_ulong,
        )
    })?;
    // SAFETY: `slave` was just returned by the kernel for this process.
    Ok((master, unsafe { OwnedFd::from_raw_fd(slave) }))
}

/// TIOCSWINSZ: the terminal's window is `cols` × `rows` (its foreground process group
/// gets SIGWINCH when that changes).
pub fn set_window_size(terminal: BorrowedFd, cols: u16, rows: u16) -> Result<(), Errno> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: the kernel reads one winsize from the pointer, which points at `size`.
    Errno::result(unsafe { libc::ioctl(terminal.as_raw_fd(), libc::TIOCSWINSZ, &size) }).map(drop)
}

/// TIOCSCTTY: the terminal `terminal` becomes the controlling terminal of the caller, a
/// session leader without one.
pub fn take_controlling_terminal(terminal: RawFd) -> Result<(), Errno> {
    // SAFETY: TIOCSCTTY takes an int by value (0: do not steal it from another session).
    Errno::result(unsafe { libc::ioctl(terminal, libc::TIOCSCTTY, 0 as libc::c_int) }).map(drop)
}

/// TIOCGWINSZ: the window of the terminal `terminal` is, (cols, rows); None when it is
/// not a terminal (or says 0 × 0).
pub fn window_size(terminal: BorrowedFd) -> Option<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: the kernel writes one winsize to the pointer, which points at `size`.
    let ret = unsafe { libc::ioctl(terminal.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    (ret == 0 && size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col, size.ws_row))
}
