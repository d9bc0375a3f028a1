//! brig: run one untrusted program in a fresh Linux jail.
//!
//! The library behind the `brig` command. The data flows one way:
//! [`options::JailOptions`] (the command line and YAML, layered by [`config`]) →
//! [`plan::Plan`], validated and fully resolved before the kernel is touched →
//! [`jail`]: the supervisor clones the jail's first process, which assembles the jail and
//! runs the program as its init → [`jail::RunReport`] → [`verdict::Verdict`].
//! See ARCHITECTURE.md for the picture and where each kernel subsystem lives.

#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod config;
pub mod doctor;
pub mod error;
pub mod exit;
pub mod gateway;
pub mod jail;
pub mod net;
pub mod options;
pub mod plan;
pub mod seccomp;
pub mod serve;
pub mod units;
pub mod verdict;

mod cgroup;
mod environment;
mod fds;
mod identity;
mod landlock;
mod limits;
mod mount;
mod namespaces;
mod privileges;
mod procfs;
mod rlimits;
#[allow(unsafe_code)]
mod sys;

pub use error::{Error, ErrorKind, Result, Stage};
pub use exit::ExitStatus;
pub use plan::Plan;
pub use verdict::Verdict;

/// What every brig process does first: SIGPIPE ignored, so that a closed pipe is an error
/// to handle and not brig's death, and descriptors 0, 1 and 2 open, so that the first
/// pipe brig creates cannot take their place and reach the program as its stdin.
pub fn prepare_process() {
    sys::ignore_sigpipe();
    fds::ensure_standard_fds_open();
}
