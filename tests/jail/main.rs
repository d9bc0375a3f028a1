//! `brig run`, for real, as root and rootless: one test binary (linking one binary instead
//! of thirteen is most of what a test build costs here). Each module is one area of the
//! jail; its own doc says what it covers. Filter by module: `cargo test --test jail
//! isolation::`.
//!
//! The modules' tests run in parallel with each other (libtest's threads), so none may
//! assume the host is quiet: they watch only their own processes, cgroups and temp dirs.
//! What takes a host-wide counter (host root's inotify instances, pending signals) is
//! tests/host_identity.rs, a binary of its own, which cargo runs alone.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod attacks;
mod audit;
mod cgroup_lifecycle;
mod error_stages;
mod input;
mod isolation;
mod limits;
mod network;
mod privileges;
mod process;
mod rootfs;
mod rootless_limits;
mod secrets;
mod secrets_memory;
mod verdict;
