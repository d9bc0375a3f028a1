//! `--seccomp-log` and the naming of a seccomp kill: the kernel's audit records of what
//! the jail's filter did, read while the jail runs, and the line brig prints about them.

use super::syscall_name;
use std::collections::BTreeSet;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// The kernel's audit records of seccomp actions (type 1326, AUDIT_SECCOMP), read from the
/// audit netlink socket's read-only multicast group. Unlike the copies the kernel prints to
/// its log, these are not rate-limited. Reading them needs CAP_AUDIT_READ, i.e. root, so a
/// rootless brig cannot name the calls. Records carry the host uid and pid but nothing that
/// names a jail: brig keeps those of the jail's host uid seen while the jail ran.
pub struct AuditLog {
    socket: OwnedFd,
    host_uid: String,
    logged: Logged,
    allowed: BTreeSet<String>,
}

/// What the kernel logged while the jail ran.
#[derive(Clone, Debug, Default)]
pub struct Logged {
    /// Calls the profile would have denied (SECCOMP_RET_LOG in log mode), sorted.
    pub allowed: Vec<String>,
    /// Calls that killed a process, each once, in the order first seen.
    pub killed: Vec<String>,
    /// The socket overflowed: some records were lost and the lists may be incomplete.
    pub lossy: bool,
}

const AUDIT_SECCOMP: u16 = 1326;
/// AUDIT_ARCH_* of this architecture, as the records print it.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: &str = "c000003e";
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: &str = "c00000b7";
const AUDIT_NLGRP_READLOG: u32 = 1;
const RET_LOG: &str = "0x7ffc0000";
const RET_KILL_PROCESS: &str = "0x80000000";
const RET_KILL_THREAD: &str = "0x0";

impl AuditLog {
    /// Starts listening; only records from now on count. None where brig may not read
    /// the audit records (not root) or the kernel has no audit support.
    pub fn open(host_uid: u32) -> Option<AuditLog> {
        use nix::sys::socket::{
            AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, setsockopt, socket,
            sockopt,
        };
        let socket = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkAudit,
        )
        .ok()?;
        bind(
            socket.as_raw_fd(),
            &NetlinkAddr::new(0, AUDIT_NLGRP_READLOG),
        )
        .ok()?;
        // Room for bursts between two reads; brig also reads while the jail runs.
        let _ = setsockopt(&socket, sockopt::RcvBufForce, &(8 << 20));
        Some(AuditLog {
            socket,
            host_uid: host_uid.to_string(),
            logged: Logged::default(),
            allowed: BTreeSet::new(),
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Reads every record that has arrived.
    pub fn drain(&mut self) {
        let mut buffer = vec![0u8; 16384];
        loop {
            match nix::sys::socket::recv(
                self.socket.as_raw_fd(),
                &mut buffer,
                nix::sys::socket::MsgFlags::empty(),
            ) {
                Ok(0) => return,
                Ok(count) => self.parse_datagram(&buffer[..count]),
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::ENOBUFS) => self.logged.lossy = true,
                Err(_) => return,
            }
        }
    }

    /// Reads what is left. The kernel's audit thread sends records shortly after the
    /// fact, so this waits up to `linger` for the first record that `enough` accepts.
    pub fn finish(mut self, linger: Duration, enough: impl Fn(&Logged) -> bool) -> Logged {
        let deadline = Instant::now() + linger;
        loop {
            self.drain();
            let now = Instant::now();
            if enough(&self.logged) || now >= deadline {
                break;
            }
            let mut fds = [nix::poll::PollFd::new(
                self.socket.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let millis = u16::try_from((deadline - now).as_millis()).unwrap_or(u16::MAX);
            if let Err(errno) = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(millis))
                && errno != nix::errno::Errno::EINTR
            {
                break;
            }
        }
        let mut logged = std::mem::take(&mut self.logged);
        logged.allowed = std::mem::take(&mut self.allowed).into_iter().collect();
        logged
    }

    /// A datagram holds netlink messages: a 16-byte header (length, type, ...) and text.
    fn parse_datagram(&mut self, mut bytes: &[u8]) {
        while bytes.len() >= 16 {
            let length = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
            let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
            let Some(message) = bytes.get(16..length.max(16)) else {
                return;
            };
            if kind == AUDIT_SECCOMP {
                self.note(&String::from_utf8_lossy(message));
            }
            // Messages are 4-byte aligned.
            let next = length.div_ceil(4) * 4;
            if next == 0 || next > bytes.len() {
                return;
            }
            bytes = &bytes[next..];
        }
    }

    /// One record: `audit(T:N): auid=... uid=U ... syscall=N compat=0 ip=... code=C`.
    fn note(&mut self, record: &str) {
        let field = |name: &str| {
            record
                .split_whitespace()
                .find_map(|token| token.strip_prefix(name))
        };
        if field("uid=") != Some(self.host_uid.as_str()) {
            return;
        }
        let Some(number) = field("syscall=").and_then(|nr| nr.parse::<u32>().ok()) else {
            return;
        };
        let name = match field("arch=") {
            Some(AUDIT_ARCH) | None => {
                syscall_name(number).map_or_else(|| format!("#{number}"), str::to_string)
            }
            Some("40000003") => format!("i386 #{number}"),
            Some(arch) => format!("#{number} of arch {arch}"),
        };
        match field("code=") {
            Some(RET_LOG) => {
                self.allowed.insert(name);
            }
            Some(RET_KILL_PROCESS | RET_KILL_THREAD) if !self.logged.killed.contains(&name) => {
                self.logged.killed.push(name);
            }
            _ => {}
        }
    }
}

/// `--seccomp-log`: one line naming the calls the profile would have denied.
pub fn report_log(profile: &str, logged: Option<&Logged>) -> String {
    match logged {
        None => "--seccomp-log: brig cannot read the kernel's audit records here (that takes root); as root, read them with `journalctl -k -g type=1326` or `dmesg | grep type=1326` (syscall=N is the number)".to_string(),
        Some(logged) if logged.allowed.is_empty() => format!(
            "--seccomp-log: the profile {profile} denied nothing{}",
            if logged.lossy {
                " (some audit records were lost)"
            } else {
                ""
            }
        ),
        Some(logged) => format!(
            "--seccomp-log: the profile {profile} would have denied: {}{}",
            logged.allowed.join(", "),
            if logged.lossy {
                " (some audit records were lost; the list may be incomplete)"
            } else {
                ""
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_records_are_parsed() {
        // Parsing needs no audit socket: any descriptor stands in for it.
        let (socket, _other) = nix::unistd::pipe().unwrap();
        let mut log = AuditLog {
            socket,
            host_uid: "65534".into(),
            logged: Logged::default(),
            allowed: BTreeSet::new(),
        };
        let record = |uid: u32, syscall: u32, code: &str| {
            let arch = if syscall == 20 {
                "40000003"
            } else {
                AUDIT_ARCH
            };
            let text = format!(
                "audit(1.2:3): auid=4294967295 uid={uid} gid={uid} ses=4294967295 pid=9 comm=\"p\" exe=\"/p\" sig=0 arch={arch} syscall={syscall} compat=0 ip=0x1 code={code}"
            );
            let mut datagram = ((16 + text.len()) as u32).to_ne_bytes().to_vec();
            datagram.extend_from_slice(&AUDIT_SECCOMP.to_ne_bytes());
            datagram.extend_from_slice(&[0; 10]);
            datagram.extend_from_slice(text.as_bytes());
            datagram
        };
        log.parse_datagram(&record(65534, 321, "0x7ffc0000"));
        log.parse_datagram(&record(65534, 250, "0x80000000"));
        log.parse_datagram(&record(0, 1, "0x7ffc0000"));
        log.parse_datagram(&record(65534, 20, "0x80000000"));
        let logged = log.finish(Duration::ZERO, |_| true);
        assert_eq!(logged.allowed, vec!["bpf"]);
        assert_eq!(logged.killed, vec!["keyctl", "i386 #20"]);
    }
}
