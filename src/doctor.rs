//! `brig doctor`: probes this host for everything a jail needs and says, one line each,
//! what works, what does not, and the fix. The probes are real: a child is cloned into new
//! user, mount, pid, network, ipc and uts namespaces and mounts a fresh /proc and
//! pivot_roots there; the default seccomp profile is installed in a forked child and must
//! deny a call; the cgroup placement is decided by the code `brig run` uses; and brig's own
//! binary runs a default jail end to end. As root, the same probes also run as uid 65534 to
//! show what an unprivileged user gets.
//!
//! Exit status: 0 when no check failed, i.e. a default jail can run here; 1 otherwise.

use crate::cgroup::{self, Version};
use crate::cli::DoctorArgs;
use crate::plan::{DEFAULT_MEMORY, DEFAULT_PIDS, UNPRIVILEGED_HOST_ID};
use crate::sys::{self, Cloned};
use crate::{landlock, seccomp};
use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;
use nix::sys::wait::waitpid;
use nix::unistd::{AccessFlags, Gid, Uid};
use serde::Serialize;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but weaker than it could be, or only for other users.
    Warn,
    /// A default jail cannot run here (for the user running doctor), or what was asked
    /// for (`--cgroup-parent`) is unusable.
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    pub fix: Option<String>,
}

fn check(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    /// No check failed: a default jail can run here.
    ok: bool,
    /// brig ran as a non-root user.
    rootless: bool,
    checks: &'a [Check],
}

pub fn run(args: &DoctorArgs) -> i32 {
    let checks = checks(args);
    let ok = checks.iter().all(|check| check.status != Status::Fail);
    if args.json {
        let report = Report {
            schema: "brig-doctor/1",
            ok,
            rootless: !is_root(),
            checks: &checks,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serializes")
        );
    } else {
        for check in &checks {
            println!("{}", line(check));
        }
        println!(
            "{}",
            if ok {
                "brig can run a default jail here."
            } else {
                "brig cannot run a default jail here: fix the FAIL lines above."
            }
        );
    }
    if ok { 0 } else { 1 }
}

/// `ok    name: detail`, `warn  ...`, `FAIL  name: detail — fix: ...`.
fn line(check: &Check) -> String {
    let status = match check.status {
        Status::Ok => "ok",
        Status::Warn => "warn",
        Status::Fail => "FAIL",
    };
    let mut text = format!("{status:<5} {}: {}", check.name, check.detail);
    if let Some(fix) = &check.fix {
        text.push_str(&format!(" — fix: {fix}"));
    }
    text
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn checks(args: &DoctorArgs) -> Vec<Check> {
    let root = is_root();
    let who = if root {
        "as root".to_string()
    } else {
        format!("rootless, uid {}", nix::unistd::geteuid())
    };
    let mut checks = vec![kernel()];
    let sysctls = Sysctls::read();
    checks.extend(sysctls.checks(root));
    // The namespace probes, for the current user, then (as root) for uid 65534.
    let probe = probe_namespaces();
    checks.extend(namespace_checks(
        &probe,
        &who,
        Status::Fail,
        &sysctls,
        !root,
    ));
    checks.extend(cgroup_checks(args.cgroup_parent.as_deref(), &who));
    checks.push(landlock_check());
    checks.extend(seccomp_checks());
    if !args.no_run {
        checks.push(end_to_end(None, &who));
    }
    if root {
        // What an unprivileged user would get: the same probes as uid 65534. Failures
        // there are warnings, since root's own jails work.
        let nobody = format!("rootless, uid {UNPRIVILEGED_HOST_ID}");
        match in_fork(|| {
            drop_to_nobody()?;
            let mut lines = probe_namespaces().into_lines();
            lines.extend(placement_lines());
            Ok(lines)
        }) {
            Ok(lines) => {
                let probe = Probe::from_lines(&lines);
                checks.extend(namespace_checks(
                    &probe,
                    &nobody,
                    Status::Warn,
                    &sysctls,
                    true,
                ));
                checks.push(rootless_cgroup_check(&lines));
            }
            Err(why) => checks.push(check(
                format!("user namespaces ({nobody})"),
                Status::Warn,
                format!("could not probe as uid {UNPRIVILEGED_HOST_ID}: {why}"),
            )),
        }
        if !args.no_run {
            checks.push(end_to_end(Some(UNPRIVILEGED_HOST_ID), &nobody));
        }
    }
    checks
}

fn kernel() -> Check {
    let uname = nix::sys::utsname::uname();
    let release = uname
        .as_ref()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let machine = uname
        .as_ref()
        .map(|u| u.machine().to_string_lossy().into_owned())
        .unwrap_or_default();
    let container = in_container();
    let mut detail = format!("Linux {release} {machine}");
    if let Some(runtime) = &container {
        detail.push_str(&format!(", inside a container ({runtime})"));
    }
    check("kernel", Status::Ok, detail)
}

/// The container runtime brig seems to run in, from the usual markers.
fn in_container() -> Option<String> {
    if Path::new("/.dockerenv").exists() {
        return Some("docker".into());
    }
    if let Ok(text) = std::fs::read_to_string("/run/.containerenv")
        && !text.is_empty()
    {
        return Some("podman".into());
    }
    std::fs::read_to_string("/proc/1/environ")
        .ok()?
        .split('\0')
        .find_map(|var| var.strip_prefix("container="))
        .map(str::to_string)
}

/// The kernel settings that decide whether unprivileged users get user namespaces.
struct Sysctls {
    max_user_namespaces: Option<u64>,
    /// Debian's and Ubuntu's older switch; absent upstream.
    unprivileged_userns_clone: Option<u64>,
    /// Ubuntu 23.10+: AppArmor denies unprivileged user namespaces to unconfined programs.
    apparmor_restrict: Option<u64>,
}

const MAX_USER_NAMESPACES: &str = "/proc/sys/user/max_user_namespaces";
const UNPRIVILEGED_USERNS_CLONE: &str = "/proc/sys/kernel/unprivileged_userns_clone";
const APPARMOR_RESTRICT: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";
const APPARMOR_FIX: &str = "install deploy/apparmor/brig (`install -m 644 deploy/apparmor/brig /etc/apparmor.d/brig && apparmor_parser -r /etc/apparmor.d/brig`, see deploy/README.md), or allow it for all programs with `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`";

impl Sysctls {
    fn read() -> Sysctls {
        let number =
            |path: &str| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
        Sysctls {
            max_user_namespaces: number(MAX_USER_NAMESPACES),
            unprivileged_userns_clone: number(UNPRIVILEGED_USERNS_CLONE),
            apparmor_restrict: number(APPARMOR_RESTRICT),
        }
    }

    fn checks(&self, root: bool) -> Vec<Check> {
        // Settings that only stop unprivileged users warn as root, and fail rootless.
        let for_rootless = if root { Status::Warn } else { Status::Fail };
        let mut checks = Vec::new();
        checks.push(match self.max_user_namespaces {
            Some(0) => check(
                "user.max_user_namespaces",
                Status::Fail,
                "0: nobody, root included, may create a user namespace",
            )
            .fix("sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)"),
            Some(max) => check("user.max_user_namespaces", Status::Ok, max.to_string()),
            None => check(
                "user.max_user_namespaces",
                Status::Fail,
                format!("{MAX_USER_NAMESPACES} is missing: this kernel has no user namespaces"),
            )
            .fix("use a kernel built with CONFIG_USER_NS=y"),
        });
        checks.push(match self.unprivileged_userns_clone {
            Some(0) => check(
                "kernel.unprivileged_userns_clone",
                for_rootless,
                "0: only root may create user namespaces",
            )
            .fix("sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/)"),
            Some(value) => check(
                "kernel.unprivileged_userns_clone",
                Status::Ok,
                value.to_string(),
            ),
            None => check(
                "kernel.unprivileged_userns_clone",
                Status::Ok,
                "not present (upstream kernel): unprivileged user namespaces are not switched off here",
            ),
        });
        checks.push(match self.apparmor_restrict {
            Some(1) => check(
                "AppArmor userns restriction",
                for_rootless,
                "kernel.apparmor_restrict_unprivileged_userns=1: unconfined programs of unprivileged users get user namespaces without capabilities",
            )
            .fix(APPARMOR_FIX),
            Some(value) => check(
                "AppArmor userns restriction",
                Status::Ok,
                format!("kernel.apparmor_restrict_unprivileged_userns={value}"),
            ),
            None => check(
                "AppArmor userns restriction",
                Status::Ok,
                "not present (no Ubuntu-style restriction in this kernel)",
            ),
        });
        checks
    }
}

/// What the namespace probe found: each step's result, `Ok` or the reason it failed.
struct Probe {
    steps: Vec<(String, Result<(), String>)>,
}

impl Probe {
    fn get(&self, step: &str) -> Option<&Result<(), String>> {
        self.steps
            .iter()
            .find(|(name, _)| name == step)
            .map(|(_, result)| result)
    }

    fn into_lines(self) -> Vec<(String, String)> {
        self.steps
            .into_iter()
            .map(|(name, result)| {
                let value = match result {
                    Ok(()) => "ok".to_string(),
                    Err(why) => format!("err {why}"),
                };
                (name, value)
            })
            .collect()
    }

    fn from_lines(lines: &[(String, String)]) -> Probe {
        Probe {
            steps: lines
                .iter()
                .filter(|(name, _)| !name.starts_with("placement"))
                .map(|(name, value)| {
                    let result = match value.strip_prefix("err ") {
                        Some(why) => Err(why.to_string()),
                        None => Ok(()),
                    };
                    (name.clone(), result)
                })
                .collect(),
        }
    }
}

/// The namespaces brig creates with the jail's process (the cgroup and time namespaces
/// are unshared inside, as the jail's init does).
const JAIL_NAMESPACES: i32 = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

/// Clones a child into the jail's namespaces and has it do what the jail's init does:
/// make the mounts private, mount a fresh /proc, pivot_root, unshare cgroup and time
/// namespaces. The child reports each step through a pipe.
fn probe_namespaces() -> Probe {
    let mut steps = Vec::new();
    let (reader, writer) = match nix::unistd::pipe() {
        Ok(pair) => pair,
        Err(errno) => {
            steps.push(("clone".into(), Err(format!("pipe: {}", errno.desc()))));
            return Probe { steps };
        }
    };
    // The child maps its uid 0 to the caller's ids (a process may map its own creator's
    // ids): without a mapping it could not create files in the mounts it makes.
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    match sys::clone_process(JAIL_NAMESPACES as u64, None) {
        Ok(Cloned::Child) => {
            drop(reader);
            let report = jail_steps(uid, gid);
            let text: String = report
                .into_iter()
                .map(|(name, value)| format!("{name}\t{value}\n"))
                .collect();
            let _ = nix::unistd::write(&writer, text.as_bytes());
            sys::exit_now(0);
        }
        Ok(Cloned::Parent { pid, .. }) => {
            drop(writer);
            let text = read_all(reader);
            let _ = waitpid(pid, None);
            steps.push(("clone".into(), Ok(())));
            for line in text.lines() {
                if let Some((name, value)) = line.split_once('\t') {
                    let result = match value.strip_prefix("err ") {
                        Some(why) => Err(why.to_string()),
                        None => Ok(()),
                    };
                    steps.push((name.to_string(), result));
                }
            }
        }
        Err(errno) => {
            // Which namespace is refused? A user namespace alone tells them apart.
            let user_alone = match sys::clone_process(libc::CLONE_NEWUSER as u64, None) {
                Ok(Cloned::Child) => sys::exit_now(0),
                Ok(Cloned::Parent { pid, .. }) => {
                    let _ = waitpid(pid, None);
                    true
                }
                Err(_) => false,
            };
            let why = format!("{} ({errno:?})", errno.desc());
            if user_alone {
                steps.push(("clone".into(), Err(format!(
                    "a user namespace alone works, but with mount, pid, net, ipc and uts namespaces clone fails: {why}"
                ))));
            } else {
                steps.push(("clone".into(), Err(why)));
            }
        }
    }
    Probe { steps }
}

/// Runs in the cloned child, PID 1 of its namespaces; only system calls, then exit.
fn jail_steps(uid: Uid, gid: Gid) -> Vec<(&'static str, String)> {
    let result = |r: Result<(), Errno>| match r {
        Ok(()) => "ok".to_string(),
        Err(errno) => format!("err {} ({errno:?})", errno.desc()),
    };
    let mut report = Vec::new();
    let maps = [
        ("/proc/self/setgroups", "deny\n".to_string()),
        ("/proc/self/uid_map", format!("0 {uid} 1\n")),
        ("/proc/self/gid_map", format!("0 {gid} 1\n")),
    ];
    for (path, contents) in maps {
        if let Err(err) = std::fs::write(path, contents.as_bytes()) {
            report.push(("idmap", format!("err write {path}: {err}")));
            return report;
        }
    }
    report.push(("idmap", "ok".to_string()));
    let has_timens = Path::new("/proc/self/ns/time").exists();
    let private = mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    );
    report.push(("mount", result(private)));
    if private.is_err() {
        return report;
    }
    let proc = mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    );
    report.push(("proc", result(proc)));
    let pivot = (|| {
        mount(
            Some("tmpfs"),
            "/tmp",
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755,size=64k"),
        )?;
        nix::unistd::mkdir("/tmp/old", nix::sys::stat::Mode::from_bits_truncate(0o755))?;
        let new_root = c"/tmp";
        let put_old = c"/tmp/old";
        sys::pivot_root(new_root, put_old)
    })();
    report.push(("pivot_root", result(pivot)));
    report.push((
        "cgroupns",
        result(nix::sched::unshare(CloneFlags::CLONE_NEWCGROUP)),
    ));
    if has_timens {
        report.push((
            "timens",
            result(nix::sched::unshare(CloneFlags::from_bits_retain(
                libc::CLONE_NEWTIME,
            ))),
        ));
    }
    report
}

fn namespace_checks(
    probe: &Probe,
    who: &str,
    failing: Status,
    sysctls: &Sysctls,
    rootless: bool,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let name = format!("user namespaces ({who})");
    match probe.get("clone") {
        Some(Ok(())) => checks.push(check(
            name,
            Status::Ok,
            "a child was cloned into new user, mount, pid, net, ipc and uts namespaces",
        )),
        Some(Err(why)) => {
            let fix = if rootless && sysctls.apparmor_restrict == Some(1) {
                APPARMOR_FIX.to_string()
            } else if rootless && sysctls.unprivileged_userns_clone == Some(0) {
                "sysctl -w kernel.unprivileged_userns_clone=1".into()
            } else if sysctls.max_user_namespaces == Some(0) || why.contains("ENOSPC") {
                "sysctl -w user.max_user_namespaces=15000".into()
            } else if in_container().is_some() {
                "the container runtime blocks namespaces: run the container with `--security-opt seccomp=unconfined --security-opt apparmor=unconfined` (Docker, Podman), or run brig on the host".into()
            } else {
                "enable user namespaces (CONFIG_USER_NS, user.max_user_namespaces); see the lines above".into()
            };
            checks.push(check(name, failing, format!("clone failed: {why}")).fix(fix));
            return checks;
        }
        None => {
            checks.push(check(name, failing, "the probe did not run"));
            return checks;
        }
    }
    let step = |step: &str, label: &str, ok: &str, fix: &str, status: Status| match probe.get(step)
    {
        Some(Ok(())) => Some(check(format!("{label} ({who})"), Status::Ok, ok)),
        Some(Err(why)) => Some(check(format!("{label} ({who})"), status, why.clone()).fix(fix)),
        None => None,
    };
    checks.extend(step(
        "idmap",
        "id mapping",
        "uid and gid maps written",
        "the kernel refused a one-id mapping; check /proc/sys/user/max_user_namespaces and any LSM policy",
        failing,
    ));
    checks.extend(step(
        "mount",
        "mount namespace",
        "mounts made private",
        "the kernel refused mount(2) in a new mount namespace; run brig outside this sandbox",
        failing,
    ));
    checks.extend(step(
        "proc",
        "fresh /proc",
        "mounted in a new pid namespace",
        "the host's /proc has parts hidden or read-only (Docker, Podman, Kubernetes mask /proc): run the container with `--security-opt systempaths=unconfined` (Docker) or `--security-opt unmask=/proc/*` (Podman), or Kubernetes `procMount: Unmasked`; or run brig on the host",
        failing,
    ));
    checks.extend(step(
        "pivot_root",
        "pivot_root",
        "into a fresh tmpfs",
        "pivot_root fails when / is the initramfs (rootfs): switch_root to a tmpfs first, or boot with a real root",
        failing,
    ));
    checks.extend(step(
        "cgroupns",
        "cgroup namespace",
        "unshared",
        "use a kernel with CONFIG_CGROUPS and cgroup namespaces (4.6+)",
        failing,
    ));
    match probe.get("timens") {
        Some(Ok(())) => checks.push(check(
            format!("time namespace ({who})"),
            Status::Ok,
            "unshared",
        )),
        Some(Err(why)) => checks.push(
            check(format!("time namespace ({who})"), failing, why.clone())
                .fix("brig creates one where /proc/self/ns/time exists; the kernel refused it here"),
        ),
        None if probe.get("cgroupns").is_none() => {}
        None => checks.push(check(
            format!("time namespace ({who})"),
            Status::Warn,
            "this kernel has none (5.6+ with CONFIG_TIME_NS): jails share the host's boot and monotonic clocks",
        )),
    }
    checks
}

/// Runs `work` in a forked child and returns the `key\tvalue` lines it reports.
fn in_fork(
    work: impl FnOnce() -> Result<Vec<(String, String)>, String>,
) -> Result<Vec<(String, String)>, String> {
    let (reader, writer) = nix::unistd::pipe().map_err(|errno| errno.desc().to_string())?;
    match sys::fork_process() {
        Ok(None) => {
            drop(reader);
            let text = match work() {
                Ok(lines) => lines
                    .into_iter()
                    .map(|(key, value)| format!("{key}\t{value}\n"))
                    .collect::<String>(),
                Err(why) => format!("error\t{why}\n"),
            };
            let _ = nix::unistd::write(&writer, text.as_bytes());
            sys::exit_now(0);
        }
        Ok(Some(pid)) => {
            drop(writer);
            let text = read_all(reader);
            let _ = waitpid(pid, None);
            let lines: Vec<(String, String)> = text
                .lines()
                .filter_map(|line| line.split_once('\t'))
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect();
            if let Some((_, why)) = lines.iter().find(|(key, _)| key == "error") {
                return Err(why.clone());
            }
            Ok(lines)
        }
        Err(errno) => Err(format!("fork: {}", errno.desc())),
    }
}

fn read_all(fd: OwnedFd) -> String {
    let mut file = std::fs::File::from(fd);
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    text
}

/// In a forked child of root: become uid/gid 65534 with no supplementary groups.
fn drop_to_nobody() -> Result<(), String> {
    let id = UNPRIVILEGED_HOST_ID;
    nix::unistd::setgroups(&[]).map_err(|errno| format!("setgroups: {}", errno.desc()))?;
    let gid = Gid::from_raw(id);
    let uid = Uid::from_raw(id);
    nix::unistd::setresgid(gid, gid, gid)
        .map_err(|errno| format!("setresgid: {}", errno.desc()))?;
    nix::unistd::setresuid(uid, uid, uid)
        .map_err(|errno| format!("setresuid: {}", errno.desc()))?;
    // Changing uid made the process non-dumpable, which leaves its /proc files (the id
    // maps of its children among them) to root; a user starting brig has no such problem.
    nix::sys::prctl::set_dumpable(true).map_err(|errno| format!("set dumpable: {}", errno.desc()))
}

/// The default limits, as `brig run` asks for them.
fn default_limits() -> cgroup::Limits {
    cgroup::Limits {
        memory: Some(DEFAULT_MEMORY),
        pids: Some(DEFAULT_PIDS),
        cpus: None,
    }
}

/// Where `brig run` would put the jail's cgroup, as `key\tvalue` lines (for the fork).
fn placement_lines() -> Vec<(String, String)> {
    match cgroup::place(&default_limits(), None, false) {
        Ok(Some(placement)) => vec![("placement".into(), describe_placement(&placement))],
        Ok(None) => vec![("placement-none".into(), String::new())],
        Err(err) => vec![("placement-error".into(), err.to_string())],
    }
}

fn describe_placement(placement: &cgroup::Placement) -> String {
    let version = match placement.version {
        Version::V1 => "v1",
        Version::V2 => "v2",
    };
    let parents: Vec<String> = placement
        .parents
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    format!("{version}, jail cgroups under {}", parents.join(", "))
}

fn rootless_cgroup_check(lines: &[(String, String)]) -> Check {
    let name = format!("cgroup limits (rootless, uid {UNPRIVILEGED_HOST_ID})");
    let value = |key: &str| {
        lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value.clone())
    };
    if let Some(placement) = value("placement") {
        return check(
            name,
            Status::Ok,
            format!("{placement}; memory and pids enforced"),
        );
    }
    let why = value("placement-error").unwrap_or_else(|| {
        "brig's cgroup here is not delegated to that user, so the default memory limit would not be enforced (processes would be bounded by RLIMIT_NPROC)".into()
    });
    check(name, Status::Warn, why).fix(ROOTLESS_CGROUP_FIX)
}

const ROOTLESS_CGROUP_FIX: &str = "run rootless brig in a delegated cgroup v2: `systemd-run --user --scope -p Delegate=yes brig run ...`, or from a unit with Delegate=yes (deploy/systemd/brig-worker.service), or give one with --cgroup-parent";

fn cgroup_checks(cgroup_parent: Option<&Path>, who: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    let layout = match cgroup::layout() {
        Ok(layout) => layout,
        Err(err) => {
            checks.push(
                check("cgroup layout", Status::Warn, err.to_string())
                    .fix("mount cgroup2 at /sys/fs/cgroup"),
            );
            return checks;
        }
    };
    let legacy: Vec<&str> = layout.legacy.iter().map(|(c, _)| c.as_str()).collect();
    let describe_v2 = |(dir, controllers): &(PathBuf, Vec<String>)| {
        if controllers.is_empty() {
            format!("cgroup2 at {} with no controllers", dir.display())
        } else {
            format!(
                "cgroup2 at {} with {}",
                dir.display(),
                controllers.join(", ")
            )
        }
    };
    let (kind, detail) = match (&layout.unified, legacy.is_empty()) {
        (Some(unified), true) => ("v2 (unified)", describe_v2(unified)),
        (Some(unified), false) => (
            "hybrid",
            format!("v1 {} and {}", legacy.join(", "), describe_v2(unified)),
        ),
        (None, false) => ("v1 (legacy)", format!("v1 {}", legacy.join(", "))),
        (None, true) => ("none", "no cgroup hierarchy is mounted".to_string()),
    };
    checks.push(check(
        "cgroup layout",
        Status::Ok,
        format!("{kind}: {detail}"),
    ));
    // The placement `brig run` would choose with its default limits.
    let name = format!("cgroup limits ({who})");
    checks.push(match cgroup::place(&default_limits(), None, false) {
        Ok(Some(placement)) => {
            let detail = describe_placement(&placement);
            let unwritable: Vec<String> = placement
                .parents
                .iter()
                .filter_map(|parent| {
                    // The directory brig writes into: the parent, or where it creates it.
                    let dir = if parent.exists() {
                        parent.as_path()
                    } else {
                        parent.parent()?
                    };
                    nix::unistd::access(dir, AccessFlags::W_OK)
                        .err()
                        .map(|errno| format!("{}: {}", dir.display(), errno.desc()))
                })
                .collect();
            if unwritable.is_empty() {
                check(
                    name,
                    Status::Ok,
                    format!("{detail}; --memory, --pids and --cpus are enforced"),
                )
            } else {
                check(
                    name,
                    Status::Warn,
                    format!("{detail}, but not writable: {}", unwritable.join("; ")),
                )
                .fix("give brig a delegated cgroup it may write with --cgroup-parent")
            }
        }
        Ok(None) => {
            let own = layout
                .own_v2
                .as_ref()
                .map(|own| format!(" (brig's own cgroup is {})", own.display()))
                .unwrap_or_default();
            let fix = if is_root() {
                "mount cgroup2 with the memory and pids controllers, or the v1 memory and pids hierarchies".to_string()
            } else {
                ROOTLESS_CGROUP_FIX.to_string()
            };
            check(
                name,
                Status::Warn,
                format!("no usable cgroup{own}: the default memory limit is not enforced (processes are bounded by RLIMIT_NPROC), and --memory, --pids, --cpus fail (125)"),
            )
            .fix(fix)
        }
        Err(err) => check(name, Status::Warn, err.to_string()),
    });
    if let Some(parent) = cgroup_parent {
        let name = format!("--cgroup-parent {}", parent.display());
        let limits = cgroup::Limits {
            cpus: Some(1.0),
            ..default_limits()
        };
        checks.push(match cgroup::place(&limits, Some(parent), true) {
            Ok(Some(placement)) => {
                let unwritable: Vec<String> = placement
                    .parents
                    .iter()
                    .filter_map(|dir| {
                        nix::unistd::access(dir.as_path(), AccessFlags::W_OK)
                            .err()
                            .map(|errno| format!("{}: {}", dir.display(), errno.desc()))
                    })
                    .collect();
                let controllers = placement
                    .parents
                    .iter()
                    .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok())
                    .map(|text| text.trim().to_string())
                    .next();
                let detail = match controllers {
                    Some(list) => format!("{}; controllers: {list}", describe_placement(&placement)),
                    None => describe_placement(&placement),
                };
                if unwritable.is_empty() {
                    check(name, Status::Ok, format!("{detail}; writable"))
                } else {
                    check(
                        name,
                        Status::Fail,
                        format!("{detail}; not writable: {}", unwritable.join("; ")),
                    )
                    .fix("delegate it to this user (Delegate=yes in the unit, or chown the directory and its cgroup.procs, cgroup.subtree_control)")
                }
            }
            Ok(None) => check(name, Status::Fail, "no cgroup"),
            Err(err) => check(name, Status::Fail, err.to_string()),
        });
    }
    checks
}

fn landlock_check() -> Check {
    let abi = sys::landlock_abi();
    match abi {
        0 => check(
            "Landlock",
            Status::Warn,
            "not available: only the mounts guard the files (--landlock require fails)",
        )
        .fix("boot a 5.13+ kernel with Landlock in the LSM list, e.g. lsm=landlock,lockdown,yama,integrity,apparmor"),
        abi if abi < landlock::FULL_ABI => check(
            "Landlock",
            Status::Warn,
            format!(
                "ABI {abi}: files only; TCP denial and scoping of abstract sockets and signals need ABI {}",
                landlock::FULL_ABI
            ),
        )
        .fix("a 6.12+ kernel has everything brig uses"),
        abi => check(
            "Landlock",
            Status::Ok,
            format!(
                "ABI {abi} (brig uses up to {}): files, TCP and scoping enforced",
                landlock::MAX_ABI
            ),
        ),
    }
}

const SECCOMP_RET_LOG: u32 = 0x7ffc_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;

fn seccomp_checks() -> Vec<Check> {
    let mut checks = Vec::new();
    // The default profile, installed in a forked child, must deny unshare(2) with EPERM.
    let installed = seccomp::resolve(None, false).map_err(|err| err.to_string());
    let result = installed.and_then(|plan| {
        let lines = in_fork(move || {
            nix::sys::prctl::set_no_new_privs().map_err(|errno| errno.desc().to_string())?;
            seccomp::install(&plan).map_err(|err| err.to_string())?;
            let denied = match nix::sched::unshare(CloneFlags::CLONE_NEWUSER) {
                Err(Errno::EPERM) => "denied",
                Err(_) => "other",
                Ok(()) => "allowed",
            };
            Ok(vec![("unshare".into(), denied.into())])
        })?;
        match lines.first().map(|(_, value)| value.as_str()) {
            Some("denied") => Ok(()),
            Some(other) => Err(format!(
                "the filter was installed but unshare(2) was {other}, not denied with EPERM"
            )),
            None => Err("the child reported nothing".into()),
        }
    });
    checks.push(match result {
        Ok(()) => check(
            "seccomp filter",
            Status::Ok,
            "the default profile installs and denies unshare(2) with EPERM",
        ),
        Err(why) => check("seccomp filter", Status::Fail, why)
            .fix("use a kernel with CONFIG_SECCOMP_FILTER; inside a container, allow seccomp(2) and prctl(2)"),
    });
    let available = |action: u32| sys::seccomp_action_available(action).is_ok();
    checks.push(if available(SECCOMP_RET_LOG) {
        let audit = if is_root() {
            if seccomp::AuditLog::open(0).is_some() {
                "; brig reads the audit records and names the calls"
            } else {
                "; the audit records are not readable here, so brig cannot name the calls"
            }
        } else {
            "; rootless, brig cannot read the audit records (they are in the kernel log)"
        };
        check(
            "seccomp log",
            Status::Ok,
            format!("SECCOMP_RET_LOG available (--seccomp-log){audit}"),
        )
    } else {
        check(
            "seccomp log",
            Status::Warn,
            "SECCOMP_RET_LOG is not available: --seccomp-log cannot work",
        )
        .fix("a 4.14+ kernel")
    });
    checks.push(if available(SECCOMP_RET_USER_NOTIF) {
        check(
            "seccomp user-notify",
            Status::Ok,
            "SECCOMP_RET_USER_NOTIF available (brig does not need it)",
        )
    } else {
        check(
            "seccomp user-notify",
            Status::Ok,
            "not available (5.0+); brig does not need it",
        )
    });
    checks
}

/// Runs brig's own binary: `brig run --profile python -- python3 -c pass` where python3
/// is installed, else `--profile shell -- sh -c true`; as uid `as_user` when given.
fn end_to_end(as_user: Option<u32>, who: &str) -> Check {
    let has_python = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join("python3").is_file());
    let jail: &[&str] = if has_python {
        &["--profile", "python", "--", "python3", "-c", "pass"]
    } else {
        &["--profile", "shell", "--", "sh", "-c", "true"]
    };
    let shown = format!("brig run {}", jail.join(" "));
    let name = format!("end to end ({who})");
    // The binary by descriptor: another user may not be able to reach its path.
    let exe = match std::fs::File::open("/proc/self/exe") {
        Ok(exe) => exe,
        Err(err) => return check(name, Status::Fail, format!("open /proc/self/exe: {err}")),
    };
    let mut command = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
    command
        .arg("run")
        .args(jail)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(id) = as_user {
        use std::os::unix::process::CommandExt;
        // std drops the supplementary groups when root sets a uid.
        command.uid(id).gid(id);
    }
    let started = Instant::now();
    let output = match spawn_with_timeout(command, Duration::from_secs(60)) {
        Ok(output) => output,
        Err(why) => return check(name, Status::Fail, format!("{shown}: {why}")),
    };
    drop(exe);
    let elapsed = started.elapsed().as_millis();
    let failing = if as_user.is_some() {
        Status::Warn
    } else {
        Status::Fail
    };
    match output.status.code() {
        Some(0) => check(name, Status::Ok, format!("{shown}: exit 0 in {elapsed} ms")),
        code => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let first = stderr.lines().next().unwrap_or("").trim();
            let status = code.map_or_else(|| "killed".to_string(), |c| format!("exit {c}"));
            check(name, failing, format!("{shown}: {status}: {first}"))
                .fix("see the failed checks above and the message")
        }
    }
}

fn spawn_with_timeout(
    mut command: Command,
    limit: Duration,
) -> Result<std::process::Output, String> {
    let mut child = command.spawn().map_err(|err| format!("spawn: {err}"))?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("still running after {}s; killed", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(err) => return Err(format!("wait: {err}")),
        }
    }
    child
        .wait_with_output()
        .map_err(|err| format!("collect the output: {err}"))
}
