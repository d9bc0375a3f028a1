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

/// Everything that bounds the jail's resources, as this host will enforce it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Limits {
    /// Memory and cpus are enforced by the jail's cgroup; so is pids, or without a
    /// cgroup by RLIMIT_NPROC (in `rlimits`).
    #[serde(flatten)]
    pub cgroup: cgroup::Limits,
    /// Where the jail's cgroup goes; absent when no cgroup is usable.
    #[serde(rename = "cgroup", skip_serializing_if = "Option::is_none")]
    pub placement: Option<cgroup::Placement>,
    /// The default limits this host cannot enforce (no usable cgroup): reported, and said
    /// on stderr unless `quiet_limits`.
    #[serde(skip_serializing_if = "NotEnforced::is_empty")]
    pub not_enforced: NotEnforced,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub quiet_limits: bool,
    pub cpu_time: Option<Span>,
    pub output_limit: Option<Size>,
    pub tmpfs_size: Size,
    pub home_size: Size,
    pub rlimits: Vec<Rlimit>,
}

impl Limits {
    /// The line brig says once after a run: the default limits this host cannot enforce
    /// and how to get them; None when all are enforced or the caller opted out.
    pub fn unenforced_notice(&self) -> Option<String> {
        if self.quiet_limits {
            return None;
        }
        let unenforced = self.not_enforced.describe()?;
        Some(format!(
            "{unenforced} was not enforced: no cgroup brig may write is usable here; {}; to run without it quietly, pass --memory max or --quiet-limits",
            cgroup::delegation_fix()
        ))
    }
}

/// Default limits that only a cgroup enforces, on a host where none is usable.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NotEnforced {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Size>,
}

impl NotEnforced {
    pub fn is_empty(&self) -> bool {
        self.memory.is_none()
    }

    /// "the default memory limit (1G)", for the warning and brig's line on stderr.
    pub fn describe(&self) -> Option<String> {
        self.memory
            .map(|memory| format!("the default memory limit ({memory})"))
    }
}

pub fn resolve(options: &JailOptions, tmpfs_size: Size, home_size: Size) -> Result<Limits> {
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
        oom_kills_one: false,
        pausable: false,
    };
    let placement = cgroup::place(
        &cgroup_limits,
        options.cgroup_parent.as_deref(),
        explicit || options.cgroup_parent.is_some(),
    )?;
    let mut limits = Limits {
        cgroup: cgroup_limits,
        placement,
        not_enforced: NotEnforced::default(),
        quiet_limits: options.quiet_limits,
        cpu_time: options.cpu_time,
        output_limit: options.output_limit,
        tmpfs_size,
        home_size,
        rlimits: rlimits::resolve(&options.rlimit, options.cpu_time)?,
    };
    if limits.placement.is_none() {
        without_cgroup(&mut limits);
    }
    Ok(limits)
}

/// No usable cgroup, and only default limits asked for (explicit ones failed closed). The
/// process count falls back to RLIMIT_NPROC: the kernel counts it per user in each user
/// namespace, and every jail has one of its own, so it bounds this jail alone (with its
/// init) and not the caller's other processes or jails. An explicit `--rlimit nproc` wins.
/// Nothing bounds one jail's memory without a cgroup (RLIMIT_AS is per process and breaks
/// runtimes), so the default memory limit is reported as not enforced.
fn without_cgroup(limits: &mut Limits) {
    limits.not_enforced.memory = limits.cgroup.memory.take();
    if let Some(pids) = limits.cgroup.pids {
        if limits.rlimits.iter().any(|limit| limit.name == "nproc") {
            limits.cgroup.pids = None;
        } else {
            limits.rlimits.push(Rlimit {
                name: "nproc",
                soft: Some(pids),
                hard: Some(pids),
            });
        }
    }
}
