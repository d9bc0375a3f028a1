//! cgroup v1 files. Each directory belongs to one controller's hierarchy; only the files
//! of that controller exist in it.

use super::{Limits, Usage, read_keyed, read_number, write_file};
use crate::error::Result;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

const CPU_PERIOD_US: u64 = 100_000;

pub fn write_limits(dir: &Path, limits: &Limits) -> Result<()> {
    if let Some(memory) = limits.memory
        && dir.join("memory.limit_in_bytes").exists()
    {
        write_file(dir, "memory.limit_in_bytes", &memory.0.to_string())?;
        // memory+swap equal to memory: no swap. Absent without swap accounting.
        if dir.join("memory.memsw.limit_in_bytes").exists() {
            write_file(dir, "memory.memsw.limit_in_bytes", &memory.0.to_string())?;
        }
    }
    if let Some(pids) = limits.pids
        && dir.join("pids.max").exists()
    {
        write_file(dir, "pids.max", &pids.to_string())?;
    }
    if let Some(cpus) = limits.cpus
        && dir.join("cpu.cfs_quota_us").exists()
    {
        let quota = ((cpus * CPU_PERIOD_US as f64) as u64).max(1000);
        write_file(dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
        write_file(dir, "cpu.cfs_quota_us", &quota.to_string())?;
    }
    Ok(())
}

pub fn usage(dirs: &[PathBuf]) -> Usage {
    let mut usage = Usage::default();
    for dir in dirs {
        if let Some(peak) = read_number(&dir.join("memory.max_usage_in_bytes")) {
            usage.memory_peak_bytes = Some(peak);
            usage.oom_kills = read_keyed(&dir.join("memory.oom_control"), "oom_kill");
            usage.memory_current_bytes = read_number(&dir.join("memory.usage_in_bytes"));
            usage.memory_cache_bytes = read_keyed(&dir.join("memory.stat"), "cache");
        }
        if let Some(peak) = read_number(&dir.join("pids.peak")) {
            usage.pids_peak = Some(peak);
        }
        if let Some(user_ns) = read_number(&dir.join("cpuacct.usage_user")) {
            usage.cpu_user_usec = Some(user_ns / 1000);
            usage.cpu_sys_usec = read_number(&dir.join("cpuacct.usage_sys")).map(|ns| ns / 1000);
        }
    }
    usage
}

/// Registers an eventfd for OOM notifications of a v1 memory cgroup
/// (`cgroup.event_control`, see the kernel's cgroup-v1/memory.rst).
pub fn oom_eventfd(memory: &Path) -> Option<OwnedFd> {
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::AsRawFd;
    let events = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).ok()?;
    let control = std::fs::File::open(memory.join("memory.oom_control")).ok()?;
    let registration = format!("{} {}", events.as_raw_fd(), control.as_raw_fd());
    std::fs::write(memory.join("cgroup.event_control"), registration).ok()?;
    // The registration lives as long as the eventfd; the control file may close.
    Some(events.into())
}
