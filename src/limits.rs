//! Everything that bounds the jail's resources, planned from the options: the cgroup
//! limits and where the cgroup goes (`cgroup/` applies them), the CPU-time and output
//! limits, the tmpfs size and the rlimits.

use crate::cgroup;
use crate::error::{Error, Result};
use crate::options::JailOptions;
use crate::rlimits::{self, Rlimit};
use crate::units::{Count, Limit, Size, Span};
use serde::Serialize;

pub const DEFAULT_MEMORY: Size = Size(1 << 30);
pub const DEFAULT_PIDS: u64 = 256;

/// Everything that bounds the jail's resources.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Limits {
    #[serde(flatten)]
    pub cgroup: cgroup::Limits,
    /// Where the jail's cgroup goes; absent when no cgroup is usable (then the default
    /// memory and pids limits are reported as not enforced).
    #[serde(rename = "cgroup", skip_serializing_if = "Option::is_none")]
    pub placement: Option<cgroup::Placement>,
    pub cpu_time: Option<Span>,
    pub output_limit: Option<Size>,
    pub tmpfs_size: Size,
    pub rlimits: Vec<Rlimit>,
}

impl Limits {
    pub fn cgroup_wanted(&self) -> bool {
        let limits = &self.cgroup;
        limits.memory.is_some() || limits.pids.is_some() || limits.cpus.is_some()
    }
}

pub fn resolve(options: &JailOptions, tmpfs_size: Size) -> Result<Limits> {
    if let Some(Limit::To(memory)) = options.memory
        && memory < Size(4 << 20)
    {
        return Err(Error::input(
            "--memory: below 4M nothing starts; give e.g. 256M",
        ));
    }
    if let Some(Limit::To(Count(pids))) = options.pids
        && pids < 2
    {
        return Err(Error::input(format!(
            "--pids {pids}: the jail's init and the program need at least 2; give e.g. 64"
        )));
    }
    if let Some(cpus) = options.cpus
        && !(cpus.is_finite() && cpus >= 0.01)
    {
        return Err(Error::input(format!(
            "--cpus {cpus}: give a number of CPUs of at least 0.01, e.g. 0.5"
        )));
    }
    if options.cpu_time.is_some_and(|limit| limit.0.is_zero()) {
        return Err(Error::input("--cpu-time: must be longer than 0; e.g. 2s"));
    }
    if options.output_limit == Some(Size(0)) {
        return Err(Error::input(
            "--output-limit: must be at least 1 byte; e.g. 1M",
        ));
    }
    // An explicit limit must be enforced or brig fails; `max` asks for none.
    let explicit = matches!(options.memory, Some(Limit::To(_)))
        || matches!(options.pids, Some(Limit::To(_)))
        || options.cpus.is_some();
    let cgroup_limits = cgroup::Limits {
        memory: options.memory.unwrap_or(Limit::To(DEFAULT_MEMORY)).value(),
        pids: options
            .pids
            .unwrap_or(Limit::To(Count(DEFAULT_PIDS)))
            .value()
            .map(|count| count.0),
        cpus: options.cpus,
    };
    let placement = cgroup::place(
        &cgroup_limits,
        options.cgroup_parent.as_deref(),
        explicit || options.cgroup_parent.is_some(),
    )?;
    Ok(Limits {
        cgroup: cgroup_limits,
        placement,
        cpu_time: options.cpu_time,
        output_limit: options.output_limit,
        tmpfs_size,
        rlimits: rlimits::resolve(&options.rlimit, options.cpu_time)?,
    })
}
