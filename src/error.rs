//! brig's own failures. Every one is a single line that says what failed, on which path,
//! and, where there is one, the fix. All of them end brig with exit status 125.

use nix::errno::Errno;
use std::fmt;

#[derive(Debug)]
pub struct Error {
    message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Bad input (flag, config, path, size): the message names the field and the fix.
    pub fn input(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
        }
    }

    /// A setup step failed for a reason other than a system call's errno.
    pub fn setup(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
        }
    }

    /// A system call failed: `what` names the operation and its path.
    pub fn os(what: impl fmt::Display, errno: Errno) -> Error {
        Error {
            message: format!("{what}: {} ({errno:?})", errno.desc()),
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

    #[cfg(test)]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

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
