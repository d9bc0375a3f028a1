//! brig's own failures. Every one is a single line that says what failed, on which path,
//! and, where there is one, the fix; it carries a kind (whose fault, for a caller to branch
//! on) and, for a step in the jail, the stage and the errno. All of them end `brig run`
//! with exit status 125.

use nix::errno::Errno;
use serde::Serialize;
use std::fmt;

/// Whose fault a failure is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A flag, config, path, size or message is wrong: the message names it and the fix.
    BadInput,
    /// The host lacks something brig needs (user namespaces, a usable cgroup, a kernel
    /// feature): `brig doctor` tells what.
    HostLacks,
    /// A setup step failed: the kernel refused it, or brig could not do it.
    SetupFailed,
    /// The program could not be executed or found (exit status 126 or 127).
    ExecFailed,
    /// A server refused the request for its load or its state right now (its slots,
    /// queues or buffers are full, it is draining, the jail it chose just went away):
    /// nothing ran, and the same request may succeed if sent again later.
    Busy,
    /// What the request names is not there (any more): a session closed, ended at its
    /// timeout or never created. Sending the same request again gives the same answer.
    NotFound,
}

/// The step of building the jail a failure belongs to, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The jail's cgroup, created and limited by brig before the jail exists.
    Cgroup,
    /// clone3 into every namespace.
    Namespaces,
    /// The uid/gid maps, written by brig.
    IdMaps,
    /// The jail's first process joins its cgroup and roots a cgroup namespace there.
    CgroupJoin,
    /// The jail's uid and gid.
    Identity,
    /// Standard streams and the descriptors the jail must not inherit.
    Descriptors,
    /// Session, hostname, `lo`.
    Isolation,
    /// The mount tree and pivot_root.
    Mounts,
    /// The program's process, spawned by the jail's init.
    Spawn,
    Rlimits,
    Capabilities,
    NoNewPrivs,
    /// The working directory.
    Chdir,
    Landlock,
    Seccomp,
    /// The jail's init, hardening itself.
    Init,
    /// execve of the program.
    Exec,
}

impl Stage {
    const ALL: [Stage; 17] = [
        Stage::Cgroup,
        Stage::Namespaces,
        Stage::IdMaps,
        Stage::CgroupJoin,
        Stage::Identity,
        Stage::Descriptors,
        Stage::Isolation,
        Stage::Mounts,
        Stage::Spawn,
        Stage::Rlimits,
        Stage::Capabilities,
        Stage::NoNewPrivs,
        Stage::Chdir,
        Stage::Landlock,
        Stage::Seccomp,
        Stage::Init,
        Stage::Exec,
    ];

    /// A stable number for the parent/child channel.
    pub fn to_wire(self) -> u8 {
        Stage::ALL
            .iter()
            .position(|stage| *stage == self)
            .unwrap_or(0) as u8
    }

    pub fn from_wire(byte: u8) -> Option<Stage> {
        Stage::ALL.get(byte as usize).copied()
    }
}

#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    stage: Option<Stage>,
    errno: Option<Errno>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Bad input (flag, config, path, size): the message names the field and the fix.
    pub fn input(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::BadInput, message)
    }

    /// The host lacks what brig needs; the message says what and the fix.
    pub fn host(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::HostLacks, message)
    }

    /// A setup step failed for a reason other than a system call's errno.
    pub fn setup(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::SetupFailed, message)
    }

    /// A refusal to retry later: the server is at a limit or draining, nothing ran; the
    /// message names the limit and when to retry.
    pub fn busy(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Busy, message)
    }

    /// What the request names (a session) does not exist, or no longer: the message
    /// names it.
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NotFound, message)
    }

    /// A system call failed: `what` names the operation and its path.
    pub fn os(what: impl fmt::Display, errno: Errno) -> Error {
        Error {
            errno: Some(errno),
            ..Error::new(
                ErrorKind::SetupFailed,
                format!("{what}: {} ({errno:?})", errno.desc()),
            )
        }
    }

    /// A failure the jail reported over its channel, already one line.
    pub fn from_jail(message: String, stage: Option<Stage>, errno: Option<Errno>) -> Error {
        Error {
            kind: ErrorKind::SetupFailed,
            message,
            stage,
            errno,
        }
    }

    /// A failure of `kind` someone else reported (a server's error frame).
    pub fn of_kind(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error::new(kind, message)
    }

    fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            stage: None,
            errno: None,
        }
    }

    /// Puts the option or step the failure belongs to in front: `--bind a:b: ...`.
    pub fn within(mut self, context: impl fmt::Display) -> Error {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// Adds the fix to the message.
    pub fn hint(mut self, fix: impl fmt::Display) -> Error {
        self.message = format!("{}; {fix}", self.message);
        self
    }

    /// Marks the failure as the host's lack, not a broken step.
    pub fn host_lacks(mut self) -> Error {
        self.kind = ErrorKind::HostLacks;
        self
    }

    /// The step the failure belongs to, unless a deeper one already said.
    pub fn at(mut self, stage: Stage) -> Error {
        self.stage.get_or_insert(stage);
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether sending the same request again later may succeed (kind `busy`).
    pub fn is_retryable(&self) -> bool {
        self.kind == ErrorKind::Busy
    }

    pub fn stage(&self) -> Option<Stage> {
        self.stage
    }

    pub fn errno(&self) -> Option<Errno> {
        self.errno
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Attaches "what failed, on which path" to a raw errno result.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, Errno> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|errno| Error::os(what(), errno))
    }
}

impl<T> Context<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|err| match err.raw_os_error() {
            Some(code) => Error::os(what(), Errno::from_raw(code)),
            None => Error::input(format!("{}: {err}", what())),
        })
    }
}

/// Tags every error of a result with its stage.
pub trait AtStage<T> {
    fn at(self, stage: Stage) -> Result<T>;
}

impl<T> AtStage<T> for Result<T> {
    fn at(self, stage: Stage) -> Result<T> {
        self.map_err(|err| err.at(stage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_cross_the_wire() {
        for stage in Stage::ALL {
            assert_eq!(Stage::from_wire(stage.to_wire()), Some(stage));
        }
        assert_eq!(Stage::from_wire(200), None);
    }

    /// A refusal to retry later is kind `busy` on the wire (error frames, the verdict's
    /// `error_kind`), and the only retryable kind.
    #[test]
    fn busy_is_its_own_kind_on_the_wire() {
        let busy = Error::busy("brig serve: all 4 jails are busy (--max-jails); retry later");
        assert!(busy.is_retryable());
        assert_eq!(serde_json::to_value(busy.kind()).unwrap(), "busy");
        let kind: ErrorKind = serde_json::from_str(r#""busy""#).unwrap();
        assert_eq!(kind, ErrorKind::Busy);
        for other in [Error::input("x"), Error::host("x"), Error::setup("x")] {
            assert!(!other.is_retryable(), "{:?}", other.kind());
        }
    }
}
