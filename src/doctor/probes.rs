//! Everything doctor learns from the host: files under /proc/sys, the kernel's answers,
//! and jails assembled by the jail's own code. Each probe returns plain data;
//! `checks.rs` turns it into the lines doctor prints.
//!
//! Probes that change the process (a jail's signal mask, a seccomp filter, another uid)
//! run in a forked child ([`in_fork`]), which reports back as `key\tvalue` lines.

use crate::cgroup::{self, Version};
use crate::error::Stage;
use crate::identity::UNPRIVILEGED_HOST_ID;
use crate::jail::Jail;
use crate::limits::{DEFAULT_MEMORY, DEFAULT_PIDS};
use crate::namespaces::Namespaces;
use crate::plan::Plan;
use crate::seccomp;
use crate::sys::{self, Cloned};
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::wait::waitpid;
use nix::unistd::{AccessFlags, Gid, Uid};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `key\tvalue` lines, as a forked probe reports them.
pub type Lines = Vec<(String, String)>;

/// The kernel and what brig runs as, and in.
pub struct Host {
    pub release: String,
    pub machine: String,
    /// The container runtime brig seems to run in.
    pub container: Option<String>,
    pub euid: u32,
}

impl Host {
    pub fn read() -> Host {
        let uname = nix::sys::utsname::uname();
        let field = |get: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
            uname
                .as_ref()
                .map(|u| get(u).to_string_lossy().into_owned())
                .ok()
        };
        Host {
            release: field(|u| u.release()).unwrap_or_else(|| "unknown".into()),
            machine: field(|u| u.machine()).unwrap_or_default(),
            container: in_container(),
            euid: nix::unistd::geteuid().as_raw(),
        }
    }

    pub fn root(&self) -> bool {
        self.euid == 0
    }
}

/// The container runtime brig seems to run in, from the usual markers.
pub fn in_container() -> Option<String> {
    // First: CRI-O's pods have podman's /run/.containerenv too.
    if super::pod::in_pod() {
        return Some("kubernetes".into());
    }
    if Path::new("/.dockerenv").exists() {
        return Some("docker".into());
    }
    // podman writes it, empty unless the container asks for its details.
    if Path::new("/run/.containerenv").exists() {
        return Some("podman".into());
    }
    std::fs::read_to_string("/proc/1/environ")
        .ok()?
        .split('\0')
        .find_map(|var| var.strip_prefix("container="))
        .map(str::to_string)
}

/// The kernel settings that decide whether unprivileged users get user namespaces.
#[derive(Default)]
pub struct Sysctls {
    pub max_user_namespaces: Option<u64>,
    /// Debian's and Ubuntu's older switch; absent upstream.
    pub unprivileged_userns_clone: Option<u64>,
    /// Ubuntu 23.10+: AppArmor denies unprivileged user namespaces to unconfined programs.
    pub apparmor_restrict: Option<u64>,
}

pub const MAX_USER_NAMESPACES: &str = "/proc/sys/user/max_user_namespaces";
const UNPRIVILEGED_USERNS_CLONE: &str = "/proc/sys/kernel/unprivileged_userns_clone";
const APPARMOR_RESTRICT: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";

impl Sysctls {
    pub fn read() -> Sysctls {
        let number =
            |path: &str| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
        Sysctls {
            max_user_namespaces: number(MAX_USER_NAMESPACES),
            unprivileged_userns_clone: number(UNPRIVILEGED_USERNS_CLONE),
            apparmor_restrict: number(APPARMOR_RESTRICT),
        }
    }
}

/// What happened when a default jail was assembled with `Jail::assemble`.
#[derive(Debug)]
pub struct Assembly {
    /// The namespaces the jail is cloned into, as the plan has them (`user`, ..., `time`).
    pub namespaces: Vec<String>,
    pub outcome: Result<(), Refusal>,
}

/// The error `Jail::assemble` (or resolving its plan) returned.
#[derive(Debug)]
pub struct Refusal {
    pub stage: Option<Stage>,
    pub errno: Option<Errno>,
    pub message: String,
    /// clone3 failed: whether a user namespace alone could be created.
    pub user_alone: Option<bool>,
}

impl Assembly {
    /// Whether the jail gets a time namespace (the kernel has them).
    pub fn time(&self) -> bool {
        self.namespaces.iter().any(|name| name == "time")
    }

    fn failed(message: String) -> Assembly {
        Assembly {
            namespaces: Vec::new(),
            outcome: Err(Refusal {
                stage: None,
                errno: None,
                message,
                user_alone: None,
            }),
        }
    }

    fn to_lines(&self) -> Lines {
        let mut lines = vec![("namespaces".to_string(), self.namespaces.join(" "))];
        match &self.outcome {
            Ok(()) => lines.push(("assembled".into(), String::new())),
            Err(refusal) => {
                if let Some(stage) = refusal.stage {
                    lines.push(("stage".into(), stage.to_wire().to_string()));
                }
                if let Some(errno) = refusal.errno {
                    lines.push(("errno".into(), (errno as i32).to_string()));
                }
                if let Some(alone) = refusal.user_alone {
                    lines.push(("user-alone".into(), alone.to_string()));
                }
                // One line, whatever the message holds.
                let message = refusal.message.replace(['\n', '\t'], " ");
                lines.push(("message".into(), message));
            }
        }
        lines
    }

    fn from_lines(lines: &[(String, String)]) -> Assembly {
        let value = |key: &str| lines.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let namespaces = value("namespaces")
            .map(|names| names.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let outcome = match (value("assembled"), value("message")) {
            (Some(_), None) => Ok(()),
            (_, message) => Err(Refusal {
                stage: value("stage")
                    .and_then(|wire| wire.parse().ok())
                    .and_then(Stage::from_wire),
                errno: value("errno")
                    .and_then(|code| code.parse().ok())
                    .map(Errno::from_raw),
                message: message
                    .cloned()
                    .unwrap_or_else(|| "the probe's child reported nothing".into()),
                user_alone: value("user-alone").map(|alone| alone == "true"),
            }),
        };
        Assembly {
            namespaces,
            outcome,
        }
    }
}

/// The jail doctor assembles: brig's defaults, without memory and pids limits, so that
/// the probe creates no cgroup (the cgroup checks look at placement separately).
const PROBE_JAIL: &str = "command: [true]\nmemory: max\npids: max\n";

/// Assembles a default jail with the jail's own code, in a forked child: the namespaces
/// (clone3), the id maps, the cgroup namespace, the jail's identity, the whole mount tree
/// with its fresh /proc, and pivot_root. The jail is killed right after.
pub fn assembly() -> Assembly {
    match in_fork(|| Ok(assemble().to_lines())) {
        Ok(lines) => Assembly::from_lines(&lines),
        Err(why) => Assembly::failed(format!("the probe's child failed: {why}")),
    }
}

/// Runs in the forked child.
fn assemble() -> Assembly {
    let plan = match crate::config::parse(PROBE_JAIL, "doctor").and_then(Plan::resolve) {
        Ok(plan) => plan,
        Err(err) => return Assembly::failed(format!("resolve a default jail: {err}")),
    };
    let namespaces = namespace_names(&plan.namespaces);
    let outcome = match Jail::assemble(&plan) {
        // Dropping the jail kills and reaps it.
        Ok(jail) => {
            drop(jail);
            Ok(())
        }
        Err(err) => {
            // Which namespace is refused? A user namespace alone tells them apart.
            let cloning = err.stage() == Some(Stage::Namespaces)
                && err.errno().is_some()
                && err.message().contains("clone3");
            Err(Refusal {
                stage: err.stage(),
                errno: err.errno(),
                message: err.message().to_string(),
                user_alone: cloning.then(user_namespace_alone),
            })
        }
    };
    Assembly {
        namespaces,
        outcome,
    }
}

fn namespace_names(namespaces: &Namespaces) -> Vec<String> {
    [
        (namespaces.user, "user"),
        (namespaces.mount, "mount"),
        (namespaces.pid, "pid"),
        (namespaces.net, "net"),
        (namespaces.ipc, "ipc"),
        (namespaces.uts, "uts"),
        (namespaces.time, "time"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| name.to_string())
    .collect()
}

/// Whether this process may clone a child into a new user namespace and nothing else.
fn user_namespace_alone() -> bool {
    match sys::clone_process(libc::CLONE_NEWUSER as u64, None) {
        Ok(Cloned::Child) => sys::exit_now(0),
        Ok(Cloned::Parent { pid, .. }) => {
            let _ = waitpid(pid, None);
            true
        }
        Err(_) => false,
    }
}

/// What uid 65534 gets: a default jail assembled, and the cgroup placement.
pub struct AsNobody {
    pub assembly: Assembly,
    pub placement: Placement,
}

/// Runs the assembly and placement probes in a forked child that became uid 65534.
pub fn as_nobody() -> Result<AsNobody, String> {
    let lines = in_fork(|| {
        // brig doctor, this child's parent, is brig here, not another process that
        // shares its cgroup.
        cgroup::count_as_brig(nix::unistd::getppid().as_raw() as u32);
        drop_to_nobody()?;
        let mut lines = assemble().to_lines();
        lines.extend(default_placement().to_lines());
        Ok(lines)
    })?;
    Ok(AsNobody {
        assembly: Assembly::from_lines(&lines),
        placement: Placement::from_lines(&lines),
    })
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

/// Whether a TUN device can be created in a fresh network namespace, as the jail of
/// `--net filtered` does (as uid 65534 when `as_nobody`); Err with the reason.
pub fn tun(as_nobody: bool) -> Result<(), String> {
    in_fork(|| {
        if as_nobody {
            drop_to_nobody()?;
        }
        nix::sched::unshare(
            nix::sched::CloneFlags::CLONE_NEWUSER | nix::sched::CloneFlags::CLONE_NEWNET,
        )
        .map_err(|errno| format!("create a user and network namespace: {}", errno.desc()))?;
        crate::net::tun::set_up().map_err(|err| match err.errno() {
            Some(errno) => format!("/dev/net/tun: {} ({errno:?})", errno.desc()),
            None => err.message().to_string(),
        })?;
        Ok(Vec::new())
    })
    .map(drop)
}

/// Where a jail's cgroup would go.
#[derive(Debug)]
pub enum Placement {
    Placed {
        version: Version,
        parents: Vec<PathBuf>,
        /// `DIR: reason` for each directory there this user may not write.
        unwritable: Vec<String>,
        /// The controllers the first parent offers (`cgroup.controllers`), when read.
        controllers: Option<String>,
    },
    /// No usable cgroup: the default limits would not be enforced.
    Nowhere,
    /// brig's own cgroup is delegated to it, but other processes (`others`) share it, so
    /// brig cannot hand controllers down there.
    Shared {
        own: PathBuf,
        others: String,
    },
    Failed(String),
}

impl Placement {
    fn to_lines(&self) -> Lines {
        let line = |key: &str, value: &str| (key.to_string(), value.to_string());
        match self {
            Placement::Placed {
                version,
                parents,
                unwritable,
                controllers,
            } => {
                let mut lines = vec![line("placement", version_name(*version))];
                lines.extend(
                    parents
                        .iter()
                        .map(|dir| line("placement-parent", &dir.display().to_string())),
                );
                lines.extend(
                    unwritable
                        .iter()
                        .map(|why| line("placement-unwritable", why)),
                );
                lines.extend(
                    controllers
                        .iter()
                        .map(|list| line("placement-controllers", list)),
                );
                lines
            }
            Placement::Nowhere => vec![line("placement-none", "")],
            Placement::Shared { own, others } => vec![
                line("placement-shared", &own.display().to_string()),
                line("placement-others", others),
            ],
            Placement::Failed(why) => vec![line("placement-error", why)],
        }
    }

    fn from_lines(lines: &[(String, String)]) -> Placement {
        let values = |key: &str| -> Vec<String> {
            lines
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, value)| value.clone())
                .collect()
        };
        if let Some(why) = values("placement-error").pop() {
            return Placement::Failed(why);
        }
        if let Some(own) = values("placement-shared").pop() {
            return Placement::Shared {
                own: own.into(),
                others: values("placement-others").pop().unwrap_or_default(),
            };
        }
        let version = match values("placement").first().map(String::as_str) {
            Some("v1") => Version::V1,
            Some("v2") => Version::V2,
            _ => return Placement::Nowhere,
        };
        Placement::Placed {
            version,
            parents: values("placement-parent")
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            unwritable: values("placement-unwritable"),
            controllers: values("placement-controllers").pop(),
        }
    }
}

pub fn version_name(version: Version) -> &'static str {
    match version {
        Version::V1 => "v1",
        Version::V2 => "v2",
    }
}

/// The default limits, as `brig run` asks for them.
fn default_limits() -> cgroup::Limits {
    cgroup::Limits {
        memory: Some(DEFAULT_MEMORY),
        pids: Some(DEFAULT_PIDS),
        cpus: None,
        oom_kills_one: false,
        pausable: false,
    }
}

/// Where `brig run` would put the jail's cgroup with its default limits.
fn default_placement() -> Placement {
    match cgroup::place(&default_limits(), None, false) {
        Ok(Some(placement)) => {
            let unwritable = placement
                .parents
                .iter()
                .filter_map(|parent| {
                    // The directory brig writes into: the parent, or where it creates it.
                    let dir = if parent.exists() {
                        parent.as_path()
                    } else {
                        parent.parent()?
                    };
                    not_writable(dir)
                })
                .collect();
            Placement::Placed {
                version: placement.version,
                parents: placement.parents,
                unwritable,
                controllers: None,
            }
        }
        Ok(None) => match cgroup::layout().ok().and_then(|layout| layout.shared_with) {
            // Delegated, but shared with the process that started brig.
            Some((own, others)) => Placement::Shared { own, others },
            None => Placement::Nowhere,
        },
        Err(err) => Placement::Failed(err.to_string()),
    }
}

/// A `--cgroup-parent`, as `brig run` would use it (with a CPU limit too).
fn given_placement(parent: &Path) -> Placement {
    let limits = cgroup::Limits {
        cpus: Some(1.0),
        ..default_limits()
    };
    match cgroup::place(&limits, Some(parent), true) {
        Ok(Some(placement)) => {
            let unwritable = placement
                .parents
                .iter()
                .filter_map(|dir| not_writable(dir))
                .collect();
            let controllers = placement
                .parents
                .iter()
                .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok())
                .map(|text| text.trim().to_string())
                .next();
            Placement::Placed {
                version: placement.version,
                parents: placement.parents,
                unwritable,
                controllers,
            }
        }
        Ok(None) => Placement::Nowhere,
        Err(err) => Placement::Failed(err.to_string()),
    }
}

fn not_writable(dir: &Path) -> Option<String> {
    nix::unistd::access(dir, AccessFlags::W_OK)
        .err()
        .map(|errno| format!("{}: {}", dir.display(), errno.desc()))
}

/// The cgroup hierarchies, and where jails' cgroups would go.
pub struct Cgroups {
    pub layout: Result<cgroup::Layout, String>,
    pub placement: Placement,
    /// `--cgroup-parent PATH` and what `brig run` would make of it.
    pub parent: Option<(PathBuf, Placement)>,
    /// How an unprivileged user gets a cgroup here: this user, or uid 65534 when doctor
    /// runs as root.
    pub rootless_fix: String,
}

pub fn cgroups(cgroup_parent: Option<&Path>) -> Cgroups {
    let mut situation = cgroup::Situation::here();
    if !situation.rootless {
        situation.rootless = true;
        situation.user = nix::unistd::User::from_uid(UNPRIVILEGED_HOST_ID.into())
            .ok()
            .flatten()
            .map_or(UNPRIVILEGED_HOST_ID.to_string(), |user| user.name);
        situation.user_manager = false;
    }
    Cgroups {
        rootless_fix: cgroup::delegation_fix_for(&situation),
        layout: cgroup::layout().map_err(|err| err.to_string()),
        placement: default_placement(),
        parent: cgroup_parent.map(|parent| (parent.to_path_buf(), given_placement(parent))),
    }
}

/// The Landlock ABI the kernel offers; 0 without Landlock.
pub fn landlock_abi() -> Result<u8, crate::landlock::Unavailable> {
    match crate::landlock::Unavailable::here() {
        Some(missing) => Err(missing),
        None => Ok(sys::landlock_abi()),
    }
}

pub struct Seccomp {
    /// The default profile, installed in a forked child, denied unshare(2) with EPERM.
    pub filter: Result<(), String>,
    pub log: bool,
    pub user_notif: bool,
    /// As root: whether brig can read the kernel's audit records. None rootless.
    pub audit_readable: Option<bool>,
}

const SECCOMP_RET_LOG: u32 = 0x7ffc_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;

pub fn seccomp() -> Seccomp {
    let available = |action: u32| sys::seccomp_action_available(action).is_ok();
    let root = nix::unistd::geteuid().is_root();
    Seccomp {
        filter: seccomp_filter(),
        log: available(SECCOMP_RET_LOG),
        user_notif: available(SECCOMP_RET_USER_NOTIF),
        audit_readable: root.then(|| seccomp::AuditLog::open(0).is_some()),
    }
}

/// The default profile, installed in a forked child, must deny unshare(2) with EPERM.
fn seccomp_filter() -> Result<(), String> {
    let plan = seccomp::resolve(None, false).map_err(|err| err.to_string())?;
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
}

/// One run of brig's own binary.
pub struct EndToEnd {
    /// The command line, as shown: `brig run --profile ...`.
    pub shown: String,
    pub outcome: Result<Ran, String>,
}

pub struct Ran {
    /// The exit status; None when killed by a signal.
    pub code: Option<i32>,
    /// The first line brig wrote to stderr.
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs brig's own binary: `brig run --profile python -- python3 -c pass` where python3
/// is installed, else `--profile shell -- sh -c true`; as uid `as_user` when given.
pub fn end_to_end(as_user: Option<u32>) -> EndToEnd {
    let has_python = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join("python3").is_file());
    let jail: &[&str] = if has_python {
        &["--profile", "python", "--", "python3", "-c", "pass"]
    } else {
        &["--profile", "shell", "--", "sh", "-c", "true"]
    };
    let shown = format!("brig run {}", jail.join(" "));
    EndToEnd {
        outcome: run_brig(jail, as_user),
        shown,
    }
}

fn run_brig(jail: &[&str], as_user: Option<u32>) -> Result<Ran, String> {
    // The binary by descriptor: another user may not be able to reach its path.
    let exe = std::fs::File::open("/proc/self/exe")
        .map_err(|err| format!("open /proc/self/exe: {err}"))?;
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
    let output = spawn_with_timeout(command, Duration::from_secs(60))?;
    let elapsed = started.elapsed();
    drop(exe);
    let stderr = String::from_utf8_lossy(&output.stderr);
    Ok(Ran {
        code: output.status.code(),
        stderr: stderr.lines().next().unwrap_or("").trim().to_string(),
        elapsed,
    })
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

/// Runs `work` in a forked child and returns the `key\tvalue` lines it reports. Whatever
/// `work` does to its process (signal masks, filters, uids) stays in the child.
pub(super) fn in_fork(work: impl FnOnce() -> Result<Lines, String>) -> Result<Lines, String> {
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
            let lines: Lines = text
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

/// As root: what the default per-jail host uid range meets here.
pub struct HostUids {
    pub first: u32,
    pub last: u32,
    /// A uid of the range could be leased (its lock taken, then released).
    pub lease: Result<(), String>,
    /// brig's user namespace maps the whole range (not so in many containers).
    pub mapped: bool,
    /// The users (/etc/passwd) and subordinate id ranges (/etc/subuid, /etc/subgid)
    /// of this host that fall in the range, `FILE: name`.
    pub overlaps: Vec<String>,
}

pub fn host_uids() -> Option<HostUids> {
    let crate::options::HostUidRange::Range { first, last } =
        crate::identity::DEFAULT_HOST_UID_RANGE
    else {
        return None;
    };
    let lease = crate::identity::HostIds::PerJail { first, last }
        .lease()
        .map(drop)
        .map_err(|err| err.to_string());
    let inside = |start: u64, count: u64| {
        start <= u64::from(last) && start + count > u64::from(first) && count > 0
    };
    let mut overlaps = Vec::new();
    // /etc/passwd: name:x:uid:...; /etc/subuid and /etc/subgid: name:start:count.
    for (file, subordinate) in [
        ("/etc/passwd", false),
        ("/etc/subuid", true),
        ("/etc/subgid", true),
    ] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            let (start, count) = match (subordinate, fields.as_slice()) {
                (false, [_, _, uid, ..]) => (uid.parse().ok(), Some(1)),
                (true, [_, start, count, ..]) => (start.parse().ok(), count.parse().ok()),
                _ => (None, None),
            };
            if let (Some(start), Some(count)) = (start, count)
                && inside(start, count)
            {
                overlaps.push(format!("{file}: {}", fields[0]));
            }
        }
    }
    Some(HostUids {
        first,
        last,
        lease,
        mapped: crate::identity::mapped_here("uid", first, last)
            && crate::identity::mapped_here("gid", first, last),
        overlaps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assembly_crosses_the_fork() {
        let refused = Assembly {
            namespaces: vec!["user".into(), "mount".into(), "time".into()],
            outcome: Err(Refusal {
                stage: Some(Stage::Mounts),
                errno: Some(Errno::EPERM),
                message: "mount a fresh /proc on /proc:\nOperation not permitted".into(),
                user_alone: None,
            }),
        };
        let back = Assembly::from_lines(&refused.to_lines());
        assert_eq!(back.namespaces, refused.namespaces);
        assert!(back.time());
        let refusal = back.outcome.unwrap_err();
        assert_eq!(refusal.stage, Some(Stage::Mounts));
        assert_eq!(refusal.errno, Some(Errno::EPERM));
        assert_eq!(
            refusal.message,
            "mount a fresh /proc on /proc: Operation not permitted"
        );
        assert_eq!(refusal.user_alone, None);

        let assembled = Assembly {
            namespaces: vec!["user".into()],
            outcome: Ok(()),
        };
        let back = Assembly::from_lines(&assembled.to_lines());
        assert!(back.outcome.is_ok() && !back.time());
        // A child that said nothing did not assemble a jail.
        assert!(Assembly::from_lines(&[]).outcome.is_err());
    }

    #[test]
    fn a_placement_crosses_the_fork() {
        let placed = Placement::Placed {
            version: Version::V1,
            parents: vec![
                "/sys/fs/cgroup/memory/brig".into(),
                "/sys/fs/cgroup/pids/brig".into(),
            ],
            unwritable: vec!["/sys/fs/cgroup/pids: Permission denied".into()],
            controllers: None,
        };
        match Placement::from_lines(&placed.to_lines()) {
            Placement::Placed {
                version,
                parents,
                unwritable,
                controllers,
            } => {
                assert_eq!(version, Version::V1);
                assert_eq!(parents.len(), 2);
                assert_eq!(unwritable.len(), 1);
                assert_eq!(controllers, None);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Placement::from_lines(&Placement::Nowhere.to_lines()),
            Placement::Nowhere
        ));
        assert!(matches!(
            Placement::from_lines(&Placement::Failed("no".into()).to_lines()),
            Placement::Failed(why) if why == "no"
        ));
    }
}
