//! cgroup v2 files.

use super::{Limits, Usage, read_keyed, read_number, write_file};
use crate::error::Result;
use std::path::Path;

const CPU_PERIOD_US: u64 = 100_000;

pub fn write_limits(dir: &Path, limits: &Limits) -> Result<()> {
    if let Some(memory) = limits.memory {
        write_file(dir, "memory.max", &memory.0.to_string())?;
        // Without swap accounting the file is absent, and there is no swap to escape to.
        if dir.join("memory.swap.max").exists() {
            write_file(dir, "memory.swap.max", "0")?;
        }
        // An OOM kill takes the whole jail, not one random process of it.
        if !limits.oom_kills_one {
            write_file(dir, "memory.oom.group", "1")?;
        }
    }
    if let Some(pids) = limits.pids {
        write_file(dir, "pids.max", &pids.to_string())?;
    }
    if let Some(cpus) = limits.cpus {
        let quota = ((cpus * CPU_PERIOD_US as f64) as u64).max(1000);
        write_file(dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
    }
    Ok(())
}

pub fn usage(dir: &Path) -> Usage {
    Usage {
        memory_peak_bytes: read_number(&dir.join("memory.peak")),
        oom_kills: read_keyed(&dir.join("memory.events"), "oom_kill"),
        pids_peak: read_number(&dir.join("pids.peak")),
        cpu_user_usec: read_keyed(&dir.join("cpu.stat"), "user_usec"),
        cpu_sys_usec: read_keyed(&dir.join("cpu.stat"), "system_usec"),
        memory_current_bytes: read_number(&dir.join("memory.current")),
        memory_cache_bytes: read_keyed(&dir.join("memory.stat"), "file"),
    }
}
