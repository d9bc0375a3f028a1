//! File descriptors: the jail inherits 0, 1 and 2 and nothing else.

use crate::error::{Context, Result};
use crate::sys;
use nix::errno::Errno;
use std::os::fd::RawFd;

/// Closes every descriptor above 2 except `keep` (brig's own channel to the jail).
pub fn close_inherited(keep: &[RawFd]) -> Result<()> {
    let mut keep: Vec<u32> = keep.iter().map(|&fd| fd as u32).collect();
    keep.sort_unstable();
    let mut first = 3u32;
    for &fd in keep.iter().chain(std::iter::once(&u32::MAX)) {
        if fd > first {
            close_between(first, fd - 1)?;
        }
        first = fd.saturating_add(1);
    }
    Ok(())
}

fn close_between(first: u32, last: u32) -> Result<()> {
    match sys::close_range(first, last) {
        Err(Errno::ENOSYS) => close_listed(first, last),
        other => other.context(|| format!("close inherited descriptors {first}..{last}")),
    }
}

/// Fallback for kernels before 5.9: close what /proc/self/fd lists.
fn close_listed(first: u32, last: u32) -> Result<()> {
    let open: Vec<u32> = std::fs::read_dir("/proc/self/fd")
        .context(|| "list /proc/self/fd".into())?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open.into_iter().filter(|fd| (first..=last).contains(fd)) {
        let _ = nix::unistd::close(fd as RawFd);
    }
    Ok(())
}

/// brig's own 0, 1 and 2 must be open, or the first pipe it creates would take their
/// place and reach the program as its stdin or stdout.
pub fn ensure_standard_fds_open() {
    for fd in 0..=2 {
        if !sys::is_fd_open(fd) {
            let _ = nix::fcntl::open(
                "/dev/null",
                nix::fcntl::OFlag::O_RDWR,
                nix::sys::stat::Mode::empty(),
            )
            .map(std::mem::forget);
        }
    }
}
