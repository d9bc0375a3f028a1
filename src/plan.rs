//! The validated, fully resolved description of one jail. Everything the command line and
//! config say is checked here, before any namespace exists; the child only executes it.

use crate::cgroup;
use crate::error::{Error, Result};
use crate::etc;
use crate::landlock::{self, LandlockPlan};
use crate::layout::{self, MountOp};
use crate::options::{JailOptions, LandlockMode, NetMode};
use crate::rlimits::{self, Rlimit};
use crate::seccomp::{self, SeccompPlan};
use crate::units::{Count, Limit, Size, Span};
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

pub const DEFAULT_ID: u32 = 1000;
pub const UNPRIVILEGED_HOST_ID: u32 = 65534;
pub const DEFAULT_TMPFS_SIZE: Size = Size(64 << 20);
pub const DEFAULT_MEMORY: Size = Size(1 << 30);
pub const DEFAULT_PIDS: u64 = 256;
pub const DEFAULT_HOSTNAME: &str = "brig";
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
const USER_NAME: &str = "sandbox";
const MIN_TMPFS_SIZE: Size = Size(4 << 10);

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Plan {
    pub command: Vec<String>,
    pub identity: Identity,
    pub namespaces: Namespaces,
    pub net: NetMode,
    pub hostname: String,
    pub time_limit: Option<Span>,
    pub limits: Limits,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportTarget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<PathBuf>,
    pub chdir: PathBuf,
    /// `NAME=value`, the program's whole environment.
    pub env: Vec<String>,
    pub mounts: Vec<MountOp>,
    /// `--rootfs`: the prepared root and the digest `brig rootfs build` recorded in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<Rootfs>,
    /// The system-call filter, compiled here, installed right before execve.
    pub seccomp: SeccompPlan,
    /// The Landlock rules, derived from `mounts`.
    pub landlock: LandlockPlan,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

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
    pub rlimits: Vec<Rlimit>,
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

#[derive(Clone, Debug, Serialize)]
pub struct Rootfs {
    pub path: PathBuf,
    /// `sha256:...` from the root's `.brig-rootfs-digest`, as recorded at build time (not
    /// recomputed: `brig rootfs verify DIR` does that); None for a root without one.
    pub digest: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReportTarget {
    File(PathBuf),
    Fd(i32),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    /// The host ids the jail's uid and gid map to; never 0.
    pub host_uid: u32,
    pub host_gid: u32,
    /// brig runs as an unprivileged user: the jail maps to that user.
    pub rootless: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Namespaces {
    pub user: bool,
    pub mount: bool,
    pub pid: bool,
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    pub cgroup: bool,
    pub time: bool,
}

impl Plan {
    pub fn resolve(options: JailOptions) -> Result<Plan> {
        let command = options.command.clone();
        if command.is_empty() {
            return Err(Error::input(
                "no program to run: give one after the options, e.g. `brig run -- python3 main.py`",
            ));
        }
        let identity = resolve_identity(&options)?;
        let net = options.net.unwrap_or_default();
        let hostname = resolve_hostname(options.hostname.as_deref())?;
        let tmpfs_size = options.tmpfs_size.unwrap_or(DEFAULT_TMPFS_SIZE);
        check_tmpfs_size("--tmpfs-size", tmpfs_size)?;
        if let Some(limit) = options.time_limit
            && limit.0.is_zero()
        {
            return Err(Error::input("--time-limit: must be longer than 0; e.g. 5s"));
        }

        let inputs = layout::Inputs {
            tmpfs_size,
            home: &identity.home,
            uid: identity.uid,
            gid: identity.gid,
            etc_files: etc::files(&etc::Account {
                user: &identity.user,
                uid: identity.uid,
                gid: identity.gid,
                home: &identity.home,
                hostname: &hostname,
            }),
        };
        let mut rootfs_info = None;
        let mut mounts = match &options.rootfs {
            Some(dir) => {
                let rootfs = existing_path("--rootfs", &dir.to_string_lossy())?;
                if !rootfs.is_dir() {
                    return Err(Error::input(format!(
                        "--rootfs {}: not a directory; give the directory of a prepared root",
                        dir.display()
                    )));
                }
                rootfs_info = Some(Rootfs {
                    digest: brig_rootfs::recorded_digest(&rootfs),
                    path: rootfs.clone(),
                });
                layout::prepared_root(&rootfs, &inputs)
            }
            None => layout::host_root(&inputs),
        };
        let user_mounts = resolve_user_mounts(&options, tmpfs_size)?;
        // A user mount replaces a default one at the same place (e.g. `--tmpfs /tmp:1G`).
        mounts.retain(|op| !user_mounts.iter().any(|user| user.dst() == op.dst()));
        mounts.extend(user_mounts);
        check_destinations(&mounts)?;

        let limits = resolve_limits(&options, tmpfs_size)?;
        let report = resolve_report(&options)?;
        let chdir = match &options.chdir {
            Some(dir) => jail_path("--chdir", &dir.to_string_lossy())?,
            None => identity.home.clone(),
        };
        let env = resolve_env(&options, &identity)?;
        let mut warnings = Vec::new();
        if let Some(unenforced) = limits.not_enforced.describe() {
            warnings.push(format!(
                "no usable cgroup here: {unenforced} is not enforced (see `brig doctor`)"
            ));
        }
        if net == NetMode::Host {
            warnings.push("--net host: the jail shares the host's network namespace".into());
        }
        let seccomp = seccomp::resolve(options.seccomp.as_deref(), options.seccomp_log)?;
        match seccomp.mode {
            seccomp::Mode::Off => warnings.push("--seccomp none: no system-call filter".into()),
            seccomp::Mode::Log => warnings.push(format!(
                "--seccomp-log: calls outside the profile {} are allowed and logged, not denied",
                seccomp.profile
            )),
            seccomp::Mode::Enforce => {}
        }
        let landlock = landlock::plan(options.landlock.unwrap_or_default(), &mounts, net)?;
        if landlock.mode == LandlockMode::Off {
            warnings.push("--landlock off: no Landlock wall around the files".into());
        } else if landlock.abi == 0 {
            warnings.push(
                "Landlock: this kernel does not have it; only the mounts guard the files".into(),
            );
        } else if landlock.abi < landlock::FULL_ABI {
            warnings.push(format!(
                "Landlock ABI {}: files only{}; TCP and signal scoping need ABI {}",
                landlock.abi,
                if landlock.deny_tcp { " and TCP" } else { "" },
                landlock::FULL_ABI
            ));
        }
        let namespaces = Namespaces {
            user: true,
            mount: true,
            pid: true,
            net: net == NetMode::None,
            ipc: true,
            uts: true,
            cgroup: true,
            time: Path::new("/proc/self/ns/time").exists(),
        };
        let plan = Plan {
            command,
            identity,
            namespaces,
            net,
            hostname,
            time_limit: options.time_limit,
            limits,
            report,
            audit_log: options.audit_log.clone(),
            chdir,
            env,
            mounts,
            rootfs: rootfs_info,
            seccomp,
            landlock,
            warnings,
        };
        plan.check_strings()?;
        Ok(plan)
    }

    /// Every string ends up as a C string in the child; catch NUL bytes here.
    fn check_strings(&self) -> Result<()> {
        let with_nul = |what: &str, text: &str| {
            if text.contains('\0') {
                Err(Error::input(format!(
                    "{what}: contains a NUL byte; remove it"
                )))
            } else {
                Ok(())
            }
        };
        for arg in &self.command {
            with_nul("program argument", arg)?;
        }
        for var in &self.env {
            with_nul("--env", var)?;
        }
        with_nul("--hostname", &self.hostname)
    }
}

fn resolve_identity(options: &JailOptions) -> Result<Identity> {
    let uid = options.uid.unwrap_or(DEFAULT_ID);
    let gid = options.gid.unwrap_or(DEFAULT_ID);
    for (flag, id) in [("--uid", uid), ("--gid", gid)] {
        if id == u32::MAX {
            return Err(Error::input(format!(
                "{flag} {id}: not a valid id; use e.g. 1000"
            )));
        }
    }
    let euid = nix::unistd::geteuid().as_raw();
    let egid = nix::unistd::getegid().as_raw();
    let rootless = euid != 0;
    let (host_uid, host_gid) = if rootless {
        for (flag, asked, own) in [
            ("--host-uid", options.host_uid, euid),
            ("--host-gid", options.host_gid, egid),
        ] {
            if asked.is_some_and(|id| id != own) {
                return Err(Error::input(format!(
                    "{flag}: only root can choose the host id; rootless brig maps the jail to your own id ({own}), drop the option"
                )));
            }
        }
        (euid, egid)
    } else {
        let host_uid = options.host_uid.unwrap_or(UNPRIVILEGED_HOST_ID);
        let host_gid = options.host_gid.unwrap_or(UNPRIVILEGED_HOST_ID);
        for (flag, id) in [("--host-uid", host_uid), ("--host-gid", host_gid)] {
            if id == 0 || id == u32::MAX {
                return Err(Error::input(format!(
                    "{flag} {id}: the jail must not map to host root or an invalid id; use an unprivileged id such as 65534"
                )));
            }
        }
        (host_uid, host_gid)
    };
    Ok(Identity {
        user: USER_NAME.into(),
        uid,
        gid,
        home: Path::new("/home").join(USER_NAME),
        host_uid,
        host_gid,
        rootless,
    })
}

fn resolve_hostname(asked: Option<&str>) -> Result<String> {
    let name = asked.unwrap_or(DEFAULT_HOSTNAME);
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !valid {
        return Err(Error::input(format!(
            "--hostname '{name}': use 1 to 64 letters, digits, '-' or '.'"
        )));
    }
    Ok(name.into())
}

fn resolve_limits(options: &JailOptions, tmpfs_size: Size) -> Result<Limits> {
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
    let mut limits = Limits {
        cgroup: cgroup_limits,
        placement,
        not_enforced: NotEnforced::default(),
        quiet_limits: options.quiet_limits,
        cpu_time: options.cpu_time,
        output_limit: options.output_limit,
        tmpfs_size,
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

fn resolve_report(options: &JailOptions) -> Result<Option<ReportTarget>> {
    match (&options.report, options.report_fd) {
        (Some(_), Some(_)) => Err(Error::input("--report and --report-fd: choose one of them")),
        (Some(path), None) => Ok(Some(ReportTarget::File(path.clone()))),
        (None, Some(fd)) if fd < 0 || !crate::sys::is_fd_open(fd) => Err(Error::input(format!(
            "--report-fd {fd}: descriptor is not open; open it when starting brig, e.g. `3>verdict.json`"
        ))),
        (None, Some(fd)) => Ok(Some(ReportTarget::Fd(fd))),
        (None, None) => Ok(None),
    }
}

fn check_tmpfs_size(field: &str, size: Size) -> Result<()> {
    if size < MIN_TMPFS_SIZE {
        return Err(Error::input(format!(
            "{field}: {size} bytes is too small; give at least {MIN_TMPFS_SIZE}, e.g. 64M"
        )));
    }
    Ok(())
}

/// `--ro-bind`, `--bind` and `--tmpfs`, ordered so that a mount lands before those inside it.
fn resolve_user_mounts(options: &JailOptions, tmpfs_size: Size) -> Result<Vec<MountOp>> {
    let mut mounts = Vec::new();
    for (flag, specs, writable) in [
        ("--ro-bind", &options.ro_bind, false),
        ("--bind", &options.bind, true),
    ] {
        for spec in specs {
            let field = format!("{flag} {spec}");
            let (src_text, dst_text) = match spec.split_once(':') {
                Some((src, dst)) => (src, Some(dst)),
                None => (spec.as_str(), None),
            };
            let src = existing_path(&field, src_text)?;
            let dst = match dst_text {
                Some(dst) => jail_path(&field, dst)?,
                None if Path::new(src_text).is_absolute() => jail_path(&field, src_text)?,
                None => src.clone(),
            };
            if dst == Path::new("/") {
                return Err(Error::input(format!(
                    "{field}: cannot bind over the jail's root; use --rootfs DIR"
                )));
            }
            let is_dir = src.is_dir();
            mounts.push(MountOp::Bind {
                src,
                dst,
                writable,
                is_dir,
                from: Some(field),
            });
        }
    }
    for spec in &options.tmpfs {
        let field = format!("--tmpfs {spec}");
        let (dst_text, size) = match spec.rsplit_once(':') {
            Some((dst, size)) => {
                let size: Size = size
                    .parse()
                    .map_err(|why| Error::input(format!("{field}: {why}")))?;
                check_tmpfs_size(&field, size)?;
                (dst, size)
            }
            None => (spec.as_str(), tmpfs_size),
        };
        let dst = jail_path(&field, dst_text)?;
        if dst == Path::new("/") {
            return Err(Error::input(format!(
                "{field}: the root is already a fresh tmpfs; pick a directory below it"
            )));
        }
        mounts.push(MountOp::Tmpfs {
            dst,
            size,
            mode: 0o755,
            owner: None,
            exec: true,
            from: Some(field),
        });
    }
    mounts.sort_by_key(|op| op.dst().components().count());
    Ok(mounts)
}

/// Refuses, already at plan time so that `brig check` agrees with `brig run`, a user mount
/// whose destination passes through a symlink of the planned root. The child checks
/// again while it builds the root, which is what actually protects the host.
fn check_destinations(mounts: &[MountOp]) -> Result<()> {
    for (index, op) in mounts.iter().enumerate() {
        let Some(option) = op.from() else { continue };
        let mut prefix = PathBuf::from("/");
        for component in op.dst().components().skip(1) {
            prefix.push(component);
            if let Some(target) = planned_symlink(&mounts[..index], &prefix) {
                return Err(Error::input(format!(
                    "{option}: {} is a symlink in the jail (to {}); name the real path instead, symlinks are not followed",
                    prefix.display(),
                    target.display()
                )));
            }
        }
    }
    Ok(())
}

/// The target of `path` if it is a symlink in the root planned by `earlier`: a planned
/// symlink, or a host symlink inside a planned bind. The latest operation covering
/// `path` decides, as it does when the mounts are stacked.
fn planned_symlink(earlier: &[MountOp], path: &Path) -> Option<PathBuf> {
    let host_symlink = |host: PathBuf| {
        let is_link =
            std::fs::symlink_metadata(&host).is_ok_and(|meta| meta.file_type().is_symlink());
        if is_link {
            std::fs::read_link(&host).ok()
        } else {
            None
        }
    };
    for op in earlier.iter().rev() {
        match op {
            MountOp::Symlink { dst, target } if dst == path => return Some(target.clone()),
            MountOp::Bind { src, dst, .. } if path.starts_with(dst) => {
                return host_symlink(src.join(path.strip_prefix(dst).ok()?));
            }
            MountOp::RootBind { src } => {
                return host_symlink(src.join(path.strip_prefix("/").ok()?));
            }
            MountOp::Tmpfs { dst, .. } | MountOp::Proc { dst } | MountOp::Devpts { dst }
                if path.starts_with(dst) =>
            {
                return None;
            }
            _ => {}
        }
    }
    None
}

/// A host path that must exist, made absolute with symlinks resolved.
fn existing_path(field: &str, text: &str) -> Result<PathBuf> {
    if text.is_empty() {
        return Err(Error::input(format!(
            "{field}: empty path; give a host path"
        )));
    }
    std::fs::canonicalize(text).map_err(|err| {
        Error::input(format!(
            "{field}: host path {text} cannot be used: {err}; create it or fix the path"
        ))
    })
}

/// A path inside the jail: absolute, without `..`, normalized.
pub fn jail_path(field: &str, text: &str) -> Result<PathBuf> {
    let path = Path::new(text);
    if !path.is_absolute() {
        return Err(Error::input(format!(
            "{field}: '{text}' is relative; paths inside the jail must start with /"
        )));
    }
    let mut normal = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(part) => normal.push(part),
            Component::ParentDir => {
                return Err(Error::input(format!(
                    "{field}: '{text}' contains '..', which could escape the jail's root; write the path without it"
                )));
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(normal)
}

fn resolve_env(options: &JailOptions, identity: &Identity) -> Result<Vec<String>> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), identity.home.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    if let Ok(term) = std::env::var("TERM") {
        env.push(("TERM".into(), term));
    }
    let mut set = |name: &str, value: String| match env.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name.into(), value)),
    };
    for name in &options.env_pass {
        check_env_name("--env-pass", name)?;
        if let Ok(value) = std::env::var(name) {
            set(name, value);
        }
    }
    for assignment in &options.env {
        let (name, value) = assignment.split_once('=').ok_or_else(|| {
            Error::input(format!(
                "--env {assignment}: expected NAME=VALUE; to pass a host variable use --env-pass {assignment}"
            ))
        })?;
        check_env_name("--env", name)?;
        set(name, value.into());
    }
    Ok(env
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect())
}

fn check_env_name(field: &str, name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(Error::input(format!(
            "{field} {name}: not a variable name; use letters, digits and _"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(yaml: &str) -> JailOptions {
        crate::config::parse(yaml, "test").unwrap()
    }

    #[test]
    fn jail_paths_are_normalized_and_checked() {
        assert_eq!(jail_path("f", "/a//b/./c/").unwrap(), Path::new("/a/b/c"));
        assert!(jail_path("f", "a/b").is_err());
        assert!(jail_path("f", "/a/../etc").is_err());
    }

    #[test]
    fn default_plan_is_secure() {
        let plan = Plan::resolve(options("command: [true]")).unwrap();
        assert_eq!(plan.identity.uid, 1000);
        assert_ne!(plan.identity.host_uid, 0);
        assert!(plan.namespaces.net && plan.namespaces.user && plan.namespaces.pid);
        assert!(plan.env.iter().all(|v| !v.starts_with("SECRET")));
        assert!(plan.mounts.iter().any(|m| m.dst() == Path::new("/tmp")));
    }

    #[test]
    fn user_tmpfs_replaces_default_tmp() {
        let plan = Plan::resolve(options("command: [true]\ntmpfs: [/tmp:1G]")).unwrap();
        let tmp: Vec<_> = plan
            .mounts
            .iter()
            .filter(|m| m.dst() == Path::new("/tmp"))
            .collect();
        assert_eq!(tmp.len(), 1);
        assert!(matches!(tmp[0], MountOp::Tmpfs { size: Size(s), .. } if *s == 1 << 30));
    }

    #[test]
    fn bad_inputs_name_the_field() {
        let cases = [
            (
                "command: [true]\nbind: [/nonexistent-brig-src:/x]",
                "--bind",
            ),
            ("command: [true]\nro-bind: [/usr:relative]", "relative"),
            ("command: [true]\ntmpfs: [/x:0]", "too small"),
            ("command: [true]\nhostname: 'bad name'", "--hostname"),
            ("command: [true]\nenv: [NOEQUALS]", "NAME=VALUE"),
            ("command: [true]\ntime-limit: 0s", "--time-limit"),
            ("uid: 5", "no program"),
        ];
        for (yaml, needle) in cases {
            let err = Plan::resolve(options(yaml)).unwrap_err();
            assert!(err.message().contains(needle), "{yaml}: {}", err.message());
        }
    }
}
