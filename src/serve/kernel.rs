//! What the kernel says about a jail's interpreter, where brig must not take the
//! interpreter's word (issue 21's trust boundary): which process wrote to its control
//! socket (SCM_CREDENTIALS, filled in by the kernel), whether its main thread is blocked
//! waiting for its next request (/proc/PID/syscall), and the CPU time it has used
//! (/proc/PID/stat). Code running in the interpreter can write anything to the socket;
//! it cannot change these.

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

/// Asks the kernel to attach the sender's credentials to what arrives on `socket`.
pub fn pass_credentials(socket: &impl AsFd) -> nix::Result<()> {
    setsockopt(socket, sockopt::PassCred, &true)
}

/// Receives into `buffer`; with the pid of the process that sent it, as the kernel
/// attached it (in this process's pid namespace), on a socket that passes credentials.
pub fn receive(
    socket: BorrowedFd,
    buffer: &mut [u8],
    flags: MsgFlags,
) -> nix::Result<(usize, Option<u32>)> {
    let mut iov = [IoSliceMut::new(buffer)];
    let mut space = nix::cmsg_space!(libc::ucred);
    let message = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space), flags)?;
    let pid = message.cmsgs()?.find_map(|cmsg| match cmsg {
        ControlMessageOwned::ScmCredentials(credentials) => u32::try_from(credentials.pid()).ok(),
        _ => None,
    });
    Ok((message.bytes, pid))
}

/// What a process's main thread is doing, from /proc/PID/syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscall {
    /// On a CPU, or ready to run.
    Running,
    /// Blocked outside any system call (a page fault, a stop).
    Blocked,
    /// Blocked in system call `number`, whose first argument is `first`.
    In { number: libc::c_long, first: u64 },
}

/// The main thread's state; the error (with the path) when the file cannot be read, as
/// when brig may not ptrace the process.
pub fn syscall(pid: u32) -> Result<Syscall, String> {
    let path = format!("/proc/{pid}/syscall");
    let text = std::fs::read_to_string(&path).map_err(|err| format!("{path}: {err}"))?;
    let mut words = text.split_whitespace();
    match words.next() {
        Some("running") => Ok(Syscall::Running),
        Some(number) => {
            let number: libc::c_long = number
                .parse()
                .map_err(|_| format!("{path}: unexpected {text:?}"))?;
            if number < 0 {
                return Ok(Syscall::Blocked);
            }
            let first = words
                .next()
                .and_then(|word| u64::from_str_radix(word.trim_start_matches("0x"), 16).ok())
                .ok_or_else(|| format!("{path}: unexpected {text:?}"))?;
            Ok(Syscall::In { number, first })
        }
        None => Err(format!("{path}: empty")),
    }
}

/// What descriptor `fd` of `pid` is (the link /proc/PID/fd/FD: `socket:[INODE]`,
/// `pipe:[INODE]`, a path); the error (with the path) when it cannot be read.
pub fn descriptor(pid: u32, fd: u32) -> Result<String, String> {
    let path = format!("/proc/{pid}/fd/{fd}");
    std::fs::read_link(&path)
        .map(|target| target.to_string_lossy().into_owned())
        .map_err(|err| format!("{path}: {err}"))
}

/// Whether epoll descriptor `epoll` of `pid` watches the file of inode `inode` (its
/// /proc/PID/fdinfo: a `tfd:` line per watched descriptor, with `ino:` in hex).
pub fn epoll_watches(pid: u32, epoll: u64, inode: u64) -> Result<bool, String> {
    let path = format!("/proc/{pid}/fdinfo/{epoll}");
    let info = std::fs::read_to_string(&path).map_err(|err| format!("{path}: {err}"))?;
    let wanted = format!("ino:{inode:x}");
    Ok(info
        .lines()
        .any(|line| line.starts_with("tfd:") && line.split_whitespace().any(|word| word == wanted)))
}

/// Whether `number` is a system call that reads a socket (as Python's driver does,
/// blocked on its control socket).
pub fn is_receive(number: libc::c_long) -> bool {
    [libc::SYS_read, libc::SYS_recvfrom, libc::SYS_recvmsg].contains(&number)
}

/// Whether `number` is an epoll wait (as Node's event loop is, idle).
pub fn is_epoll_wait(number: libc::c_long) -> bool {
    #[cfg(target_arch = "x86_64")]
    if number == libc::SYS_epoll_wait {
        return true;
    }
    [libc::SYS_epoll_pwait, libc::SYS_epoll_pwait2].contains(&number)
}

/// The CPU time `pid` has used so far, its own and that of the children it reaped (user,
/// system): the kernel's count in clock ticks; None once it is gone.
pub fn cpu_time(pid: u32) -> Option<(Duration, Duration)> {
    crate::procfs::Stat::read(pid).map(|stat| stat.cpu(true))
}
