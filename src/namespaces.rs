//! The namespaces: which ones the jail gets (planning), the clone flags that create them
//! with the jail's process (parent), and what the child sets up inside them: the UTS
//! namespace's hostname and the network namespace's `lo`, which starts down.

use crate::error::{Context, Error, Result};
use crate::options::NetMode;
use crate::sys;
use serde::Serialize;
use std::path::Path;

pub const DEFAULT_HOSTNAME: &str = "brig";

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Namespaces {
    pub user: bool,
    pub mount: bool,
    pub pid: bool,
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    pub cgroup: bool,
    pub time: bool,
}

impl Namespaces {
    /// Every namespace; the network one unless the jail shares the host's network, the
    /// time namespace where the kernel has one.
    pub fn plan(net: NetMode) -> Namespaces {
        Namespaces {
            user: true,
            mount: true,
            pid: true,
            net: net != NetMode::Host,
            ipc: true,
            uts: true,
            cgroup: true,
            time: Path::new("/proc/self/ns/time").exists(),
        }
    }

    /// The namespaces created with the jail's process. The cgroup namespace is not among
    /// them: the child unshares it once it sits in its own cgroup (see `jail/child.rs`).
    pub fn clone_flags(&self) -> u64 {
        let wanted = [
            (self.user, libc::CLONE_NEWUSER),
            (self.mount, libc::CLONE_NEWNS),
            (self.pid, libc::CLONE_NEWPID),
            (self.net, libc::CLONE_NEWNET),
            (self.ipc, libc::CLONE_NEWIPC),
            (self.uts, libc::CLONE_NEWUTS),
            (self.time, libc::CLONE_NEWTIME),
        ];
        wanted
            .iter()
            .filter(|(on, _)| *on)
            .fold(0u64, |flags, (_, flag)| flags | *flag as u64)
    }
}

pub fn resolve_hostname(asked: Option<&str>) -> Result<String> {
    let name = asked.unwrap_or(DEFAULT_HOSTNAME);
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !valid {
        return Err(Error::input(format!(
            "--hostname '{name}': use 1 to 64 letters, digits, '-' or '.'"
        )));
    }
    Ok(name.into())
}

pub fn set_hostname(name: &str) -> Result<()> {
    nix::unistd::sethostname(name).context(|| format!("set the jail's hostname to {name}"))
}

pub fn loopback_up() -> Result<()> {
    sys::interface_up("lo").context(|| "bring up lo in the jail's network namespace".into())
}
