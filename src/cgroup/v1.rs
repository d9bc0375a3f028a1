//! cgroup v1 files. Each directory belongs to one controller's hierarchy; only the files
//! of that controller exist in it.

use super::{Limits, Usage, read_keyed, read_number, write_file};
use crate::error::Result;
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
        }
        if let Some(peak) = read_number(&dir.join("pids.peak")) {
            usage.pids_peak = Some(peak);
        }
    }
    usage
}
