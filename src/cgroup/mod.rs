//! cgroups: one leaf cgroup per jail carries its memory, pids and cpu limits, tells how
//! much it used, and lets brig kill whatever is left. cgroup v2 first; v1 hierarchies
//! (hybrid and legacy hosts) as the fallback, with the same limits and the same verdict.
//!
//! Where the jail's cgroup goes is decided at plan time (reading only), in this order:
//! 1. `--cgroup-parent PATH`, an explicitly delegated subtree;
//! 2. as root: a `brig` subtree brig creates (never writing the root cgroup's controllers);
//! 3. rootless: brig's own cgroup when it is delegated to the caller (owned by its uid).
//!
//! When a limit was asked for and none of these works, brig fails closed.

pub mod freeze;
mod hierarchy;

pub use hierarchy::owners_known_alive;
mod v1;
mod v2;

use crate::error::{Context, Error, Result};
use crate::units::Size;
pub use hierarchy::Version;
pub use hierarchy::count_as_brig;
use hierarchy::{Mounts, Parent};
use serde::Serialize;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The limits a cgroup enforces.
#[derive(Clone, Copy, Debug, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Limits {
    pub memory: Option<Size>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    /// An OOM kill takes one process, not the whole jail (v2's memory.oom.group off): a
    /// session's jail outlives its interpreter's OOM kill.
    #[serde(skip)]
    pub oom_kills_one: bool,
    /// The jail may be paused (a session's): on cgroup v1 it gets a cgroup in the freezer
    /// hierarchy too, which other jails are spared.
    #[serde(skip)]
    pub pausable: bool,
}

impl Limits {
    fn controllers(&self) -> Vec<&'static str> {
        let mut wanted = Vec::new();
        if self.memory.is_some() {
            wanted.push("memory");
        }
        if self.pids.is_some() {
            wanted.push("pids");
        }
        if self.cpus.is_some() {
            wanted.push("cpu");
        }
        wanted
    }
}

/// Where the jail's cgroup will be created, decided before anything is touched.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Placement {
    pub version: Version,
    /// Directories the jail's cgroup is created in (v1: one per controller hierarchy).
    pub parents: Vec<PathBuf>,
    #[serde(skip)]
    parent_kind: Parent,
    #[serde(skip)]
    controllers: Vec<&'static str>,
    /// The jail's cgroup can be frozen (a session paused): cgroup v2, or a v1 freezer
    /// hierarchy among the parents.
    #[serde(skip)]
    pub freezer: bool,
    /// v1: the parent in the freezer hierarchy, used only for a jail whose limits say
    /// `pausable`.
    #[serde(skip)]
    freezer_parent: Option<PathBuf>,
}

/// Where brig runs, as far as the way to give it a cgroup depends on it.
#[derive(Debug, Default)]
pub struct Situation {
    /// The container runtime brig runs in (`doctor::in_container`), when it mounted the
    /// cgroup hierarchies read-only, as runtimes do.
    pub container: Option<String>,
    pub rootless: bool,
    /// The memory controller is a v1 hierarchy (hybrid or legacy host): the mount points
    /// of the v1 memory, pids and cpu hierarchies; empty on cgroup v2.
    pub v1_mounts: Vec<PathBuf>,
    /// A systemd user manager runs for this user (`systemd-run --user` works).
    pub user_manager: bool,
    /// This user's name (or uid), for the commands root runs.
    pub user: String,
}

impl Situation {
    pub fn here() -> Situation {
        let uid = nix::unistd::getuid();
        let mounts = Mounts::read().ok();
        let memory_mount = mounts.as_ref().and_then(|mounts| {
            let legacy = mounts.legacy().iter().find(|(c, _)| c == "memory");
            legacy.map(|(_, path)| path.as_path()).or(mounts.unified())
        });
        // A container as far as cgroups go: its runtime mounted them read-only.
        let read_only = memory_mount.is_some_and(|mount| !hierarchy::writable(mount));
        Situation {
            container: crate::doctor::in_container().filter(|_| read_only),
            rootless: !uid.is_root(),
            v1_mounts: mounts
                .as_ref()
                .filter(|mounts| mounts.legacy().iter().any(|(c, _)| c == "memory"))
                .map(|mounts| {
                    let mut dirs: Vec<PathBuf> = Vec::new();
                    for (controller, dir) in mounts.legacy() {
                        if controller != "cpuacct" && !dirs.contains(dir) {
                            dirs.push(dir.clone());
                        }
                    }
                    dirs
                })
                .unwrap_or_default(),
            user_manager: Path::new(&format!("/run/user/{uid}/systemd")).is_dir(),
            user: nix::unistd::User::from_uid(uid)
                .ok()
                .flatten()
                .map_or(uid.to_string(), |user| user.name),
        }
    }
}

/// How to give brig a cgroup it may use, for the messages about missing ones, here.
pub fn delegation_fix() -> String {
    delegation_fix_for(&Situation::here())
}

/// How to give brig a cgroup in `situation`: a container's own limits or a writable cgroup
/// namespace; on a v1 memory hierarchy a cgroup root creates and hands over (systemd
/// delegates none there); on cgroup v2 a systemd delegation, or without a user manager
/// a cgroup root creates, hands over and starts brig in.
pub fn delegation_fix_for(situation: &Situation) -> String {
    let user = &situation.user;
    if let Some(runtime) = &situation.container {
        return format!(
            "inside a container ({runtime}) /sys/fs/cgroup is read-only: the container's own limits bound brig and all its jails together (`--memory`, `--pids-limit`; Kubernetes `resources.limits`); for limits per jail, run the container with its own cgroup namespace and a writable cgroup v2 (Podman: `--cgroupns=private --systemd=always` on a cgroup v2 host)"
        );
    }
    if !situation.v1_mounts.is_empty() {
        if !situation.rootless {
            return "mount the v1 memory and pids hierarchies writable (as root brig makes its own `brig` cgroups there), or give a cgroup brig may write with --cgroup-parent".into();
        }
        let dirs: Vec<String> = situation
            .v1_mounts
            .iter()
            .map(|dir| dir.display().to_string())
            .collect();
        return format!(
            "this host's memory controller is cgroup v1, where systemd delegates nothing to users: as root, create a cgroup in each hierarchy and hand it to {user} (`for d in {}; do mkdir $d/brig-{user}; chown -R {user} $d/brig-{user}; done`), then pass `--cgroup-parent /brig-{user}` (deploy/README.md)",
            dirs.join(" ")
        );
    }
    if !situation.rootless {
        return "mount cgroup2 with the memory and pids controllers enabled at its root, or give a cgroup brig may write with --cgroup-parent".into();
    }
    if situation.user_manager {
        return "run brig from a unit with Delegate=yes, under `systemd-run --user --scope -p Delegate=yes`, or give a delegated subtree with --cgroup-parent (`brig doctor` shows what is missing)".into();
    }
    format!(
        "no systemd user manager delegates a cgroup to {user} here: as root, create one with the controllers, hand it over and start brig inside it (`mkdir /sys/fs/cgroup/brig-{user}; echo '+memory +pids +cpu' > /sys/fs/cgroup/cgroup.subtree_control; chown -R {user} /sys/fs/cgroup/brig-{user}; echo $PID > /sys/fs/cgroup/brig-{user}/cgroup.procs` for the shell that starts brig); brig then uses it as its own delegated cgroup"
    )
}

/// For a delegated cgroup brig shares with other processes.
pub const SHARED_DELEGATION_FIX: &str = "a cgroup that hands controllers down to jails may hold no process, and brig can move only itself out: start brig as the only process there (`exec brig ...`, as a unit's main process, or `systemd-run --user --scope -p Delegate=yes brig ...`), or give --cgroup-parent a delegated cgroup of its own";

/// Rootless: brig's own v2 cgroup, delegated to it, and the other processes in it (the
/// shell that started brig, say), which keep brig from handing controllers down there.
fn shared_delegation(mounts: &Mounts, controllers: &[&str]) -> Option<(PathBuf, Vec<u32>)> {
    if nix::unistd::geteuid().is_root() {
        return None;
    }
    let own = hierarchy::own_delegated(mounts, controllers)?;
    let others = hierarchy::other_processes(&own);
    (!others.is_empty()).then_some((own, others))
}

/// "pids 12, 34" (at most a few).
fn describe_pids(pids: &[u32]) -> String {
    let shown: Vec<String> = pids.iter().take(5).map(u32::to_string).collect();
    let more = if pids.len() > 5 { ", ..." } else { "" };
    format!("pid {}{more}", shown.join(", "))
}

/// Decides where the jail's cgroup goes. `Ok(None)` when no usable place exists and no
/// limit was explicitly asked for (the default limits are then reported as not enforced).
pub fn place(
    limits: &Limits,
    cgroup_parent: Option<&Path>,
    explicit: bool,
) -> Result<Option<Placement>> {
    let controllers = limits.controllers();
    if controllers.is_empty() {
        return Ok(None);
    }
    let mounts = Mounts::read()?;
    let rootless = !nix::unistd::geteuid().is_root();
    let found = match cgroup_parent {
        Some(path) => Some(hierarchy::given_parent(&mounts, path, &controllers)?),
        None => hierarchy::find_parent(&mounts, &controllers, rootless),
    };
    match found {
        Some((version, parents, parent_kind)) => Ok(Some(Placement {
            freezer_parent: mounts.legacy_mount("freezer").and_then(|mount| {
                parents
                    .iter()
                    .find(|parent| version == Version::V1 && parent.starts_with(mount))
                    .cloned()
            }),
            freezer: version == Version::V2
                || mounts
                    .legacy_mount("freezer")
                    .is_some_and(|mount| parents.iter().any(|parent| parent.starts_with(mount))),
            version,
            parents,
            parent_kind,
            controllers,
        })),
        None if explicit => Err(match shared_delegation(&mounts, &controllers) {
            Some((own, others)) => Error::host(format!(
                "--memory/--pids/--cpus need a cgroup ({}) brig may write: brig's cgroup {} is delegated to it but holds other processes too ({}); {SHARED_DELEGATION_FIX}",
                controllers.join(", "),
                own.display(),
                describe_pids(&others),
            )),
            None => Error::host(format!(
                "--memory/--pids/--cpus need a cgroup ({}) brig may write, and none is usable here; {}",
                controllers.join(", "),
                delegation_fix()
            )),
        }),
        None => Ok(None),
    }
}

/// The host's cgroup layout as `place` sees it, for `brig doctor`.
#[derive(Debug)]
pub struct Layout {
    /// The cgroup2 mount and the controllers its root offers (`cgroup.controllers`).
    pub unified: Option<(PathBuf, Vec<String>)>,
    /// (controller, mount point) of the v1 memory, pids and cpu hierarchies.
    pub legacy: Vec<(String, PathBuf)>,
    /// brig's own cgroup in the cgroup2 hierarchy, as a directory.
    pub own_v2: Option<PathBuf>,
    /// Rootless: brig's own v2 cgroup is delegated to it but holds these other processes
    /// too, so brig cannot use it (see [`SHARED_DELEGATION_FIX`]).
    pub shared_with: Option<(PathBuf, String)>,
}

pub fn layout() -> Result<Layout> {
    let mounts = Mounts::read()?;
    let unified = mounts.unified().map(|dir| {
        let controllers = fs::read_to_string(dir.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        (dir.to_path_buf(), controllers)
    });
    let own_v2 = mounts
        .unified()
        .zip(mounts.own_path(None))
        .map(|(dir, own)| {
            if own.as_os_str().is_empty() {
                dir.to_path_buf()
            } else {
                dir.join(own)
            }
        });
    let shared_with = shared_delegation(&mounts, &["memory", "pids"])
        .map(|(own, others)| (own, describe_pids(&others)));
    Ok(Layout {
        unified,
        legacy: mounts.legacy().to_vec(),
        own_v2,
        shared_with,
    })
}

impl Placement {
    /// Removes the jail cgroups a brig process that is gone left under this placement's
    /// parents (only brig's own: `jail-PID-N`, PID no longer alive), killing what is left
    /// inside first. `brig serve` does this before it listens, so that the jails of a
    /// server that was killed are gone before the next one serves, and again as it exits.
    pub fn remove_leftover_jails(&self) {
        let mut owners = hierarchy::Owners::default();
        for parent in &self.parents {
            hierarchy::remove_stale_jails(self.version, parent, &mut owners);
        }
    }

    /// For `brig serve`, rootless in a cgroup v2 delegated to it (a unit with
    /// Delegate=yes): the server moves into a leaf of its own (`brig-PID`), once, so that
    /// the delegated cgroup holds no process and can hand controllers down; its jails'
    /// cgroups then go beside that leaf ([`ServerLeaf::jails_parent`]). Its runners are
    /// forked into the leaf and never move. None for any other placement.
    pub fn settle_server(&self) -> Result<Option<ServerLeaf>> {
        let Parent::OwnDelegated { own } = &self.parent_kind else {
            return Ok(None);
        };
        let before = fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
        hierarchy::prepare_parent(self.version, own, &self.parent_kind, &self.controllers)?;
        let enabled = self
            .controllers
            .iter()
            .copied()
            .filter(|controller| !before.split_whitespace().any(|on| on == *controller))
            .collect();
        Ok(Some(ServerLeaf {
            own: own.clone(),
            leaf: own.join(format!("brig-{}", std::process::id())),
            enabled,
            pid: std::process::id(),
        }))
    }
}

/// Where a rootless server sits in its delegated cgroup ([`Placement::settle_server`]).
pub struct ServerLeaf {
    own: PathBuf,
    leaf: PathBuf,
    /// The controllers the server enabled in the delegated cgroup's subtree_control.
    enabled: Vec<&'static str>,
    /// The server's: a runner (a fork) unwinding from a panic leaves it alone.
    pid: u32,
}

impl ServerLeaf {
    /// The delegated cgroup, where the jails' cgroups go (`--cgroup-parent`).
    pub fn jails_parent(&self) -> &Path {
        &self.own
    }
}

/// Dropped as the server ends (its jails are gone; its runners, forks, exit without
/// dropping it): the delegated cgroup is left as the server found it, the controllers it
/// enabled off again, the server back in it, its leaf removed.
impl Drop for ServerLeaf {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            return;
        }
        if !self.enabled.is_empty() {
            let off: Vec<String> = self.enabled.iter().map(|c| format!("-{c}")).collect();
            let _ = fs::write(self.own.join("cgroup.subtree_control"), off.join(" "));
        }
        let _ = fs::write(self.own.join("cgroup.procs"), "0");
        let _ = fs::remove_dir(&self.leaf);
    }
}

/// The jail's own cgroup(s). Dropping it kills every process left inside and removes it.
pub struct JailCgroup {
    version: Version,
    dirs: Vec<PathBuf>,
    /// The parents are `brig` subtrees brig created: remove them when they are empty.
    remove_parents: bool,
    /// v2: the cgroup's directory, for clone3(CLONE_INTO_CGROUP).
    dir_fd: Option<OwnedFd>,
    /// v1: the way in for the jail's first process (see [`Entry`]).
    entry: Option<Entry>,
}

/// How the jail's first process joins its v1 cgroups by itself: brig opens each
/// hierarchy's `tasks` file, and the process writes 0 (itself) to it after clone. v1 has
/// no CLONE_INTO_CGROUP, and brig writing the process's pid to `cgroup.procs` waits for an
/// RCU grace period, 8-14 ms here unless another move happened just before (the lock it
/// takes covers every thread group; a thread moving itself needs none). The kernel checks
/// the credentials of whoever opened the file, so the process may already be in its own
/// user namespace.
pub struct Entry(Vec<OwnedFd>);

impl Entry {
    /// Moves the calling thread, the only one of its process, into the cgroups.
    pub fn join(&self) -> Result<()> {
        for tasks in &self.0 {
            nix::unistd::write(tasks, b"0")
                .context(|| "join the jail's cgroup (write 0 to its tasks file)".into())?;
        }
        Ok(())
    }
}

/// What the cgroup measured over the jail's life.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub memory_peak_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
    pub pids_peak: Option<u64>,
    /// CPU time of every process that ran in the cgroup, reaped or not.
    pub cpu_user_usec: Option<u64>,
    pub cpu_sys_usec: Option<u64>,
    /// Memory charged to the cgroup now, and of it the page cache (a session's metrics).
    pub memory_current_bytes: Option<u64>,
    pub memory_cache_bytes: Option<u64>,
}

/// Reads a [`JailCgroup`]'s counters (while the cgroup exists).
#[derive(Clone, Debug)]
pub struct UsageProbe {
    version: Version,
    dirs: Vec<PathBuf>,
}

impl UsageProbe {
    pub fn usage(&self) -> Usage {
        match self.version {
            Version::V2 => v2::usage(&self.dirs[0]),
            Version::V1 => v1::usage(&self.dirs),
        }
    }
}

impl JailCgroup {
    /// Creates the jail's cgroup with its limits; nothing runs in it yet.
    pub fn create(placement: &Placement, limits: &Limits) -> Result<JailCgroup> {
        let name = format!("jail-{}-{}", std::process::id(), unique_suffix());
        let mut cgroup = JailCgroup {
            version: placement.version,
            dirs: Vec::new(),
            dir_fd: None,
            entry: None,
            remove_parents: placement.parent_kind == hierarchy::Parent::BrigSubtree,
        };
        // Only a jail that may be paused gets the v1 freezer's cgroup (a cgroup less to
        // make, join and remove for every other run).
        let parents = placement
            .parents
            .iter()
            .filter(|parent| limits.pausable || placement.freezer_parent.as_ref() != Some(*parent));
        let mut owners = hierarchy::Owners::default();
        for parent in parents {
            let dir = parent.join(&name);
            // The last jail to leave a `brig` subtree removes it; a concurrent brig may do
            // so between preparing the parent and creating the jail's cgroup: prepare again.
            let mut attempts = 0;
            loop {
                hierarchy::prepare_parent(
                    placement.version,
                    parent,
                    &placement.parent_kind,
                    &placement.controllers,
                )?;
                hierarchy::remove_stale_jails(placement.version, parent, &mut owners);
                match fs::create_dir(&dir) {
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound && attempts < 3 => {
                        attempts += 1
                    }
                    created => {
                        created
                            .context(|| format!("create the jail's cgroup {}", dir.display()))?;
                        break;
                    }
                }
            }
            cgroup.dirs.push(dir);
        }
        match placement.version {
            Version::V2 => {
                v2::write_limits(&cgroup.dirs[0], limits)?;
                let fd = nix::fcntl::open(
                    &cgroup.dirs[0],
                    nix::fcntl::OFlag::O_DIRECTORY
                        | nix::fcntl::OFlag::O_PATH
                        | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )
                .context(|| format!("open {}", cgroup.dirs[0].display()))?;
                cgroup.dir_fd = Some(fd);
            }
            Version::V1 => {
                let mut tasks_files = Vec::new();
                for dir in &cgroup.dirs {
                    v1::write_limits(dir, limits)?;
                    let tasks = dir.join("tasks");
                    let file = fs::OpenOptions::new()
                        .write(true)
                        .open(&tasks)
                        .context(|| format!("open {}", tasks.display()))?;
                    tasks_files.push(OwnedFd::from(file));
                }
                cgroup.entry = Some(Entry(tasks_files));
            }
        }
        Ok(cgroup)
    }

    /// The v2 directory fd that lets clone3 start the jail inside the cgroup.
    pub fn clone_into(&self) -> Option<BorrowedFd<'_>> {
        self.dir_fd.as_ref().map(|fd| fd.as_fd())
    }

    /// v1: the way in for the jail's first process, which then joins by itself.
    pub fn entry(&self) -> Option<&Entry> {
        self.entry.as_ref()
    }

    /// Moves a process in (v2 without CLONE_INTO_CGROUP).
    pub fn add_process(&self, pid: nix::unistd::Pid) -> Result<()> {
        for dir in &self.dirs {
            let procs = dir.join("cgroup.procs");
            fs::write(&procs, pid.to_string())
                .context(|| format!("move the jail into {}", procs.display()))?;
        }
        Ok(())
    }

    /// v1 only (v2 has memory.oom.group): an eventfd that becomes readable when the
    /// kernel OOM-kills a process in the jail, so that brig ends the whole jail as v2
    /// would. None where the memory hierarchy offers no notification.
    pub fn oom_events(&self) -> Option<OwnedFd> {
        if self.version != Version::V1 {
            return None;
        }
        let memory = self
            .dirs
            .iter()
            .find(|dir| dir.join("memory.oom_control").exists())?;
        v1::oom_eventfd(memory)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The file that freezes the jail (v2's `cgroup.freeze`, the v1 freezer hierarchy's
    /// `freezer.state`); None when its cgroups have no freezer (v1 without a freezer
    /// hierarchy brig may write).
    fn freezer(&self) -> Option<PathBuf> {
        self.dirs
            .iter()
            .find_map(|dir| freeze::control(self.version, dir))
    }

    /// Whether [`JailCgroup::freeze`] can pause this jail.
    pub fn freezable(&self) -> bool {
        self.freezer().is_some()
    }

    /// Stops every process of the jail where it is, until [`JailCgroup::thaw`]; returns
    /// once the kernel says all are frozen.
    pub fn freeze(&self) -> Result<()> {
        let file = self.freezer().ok_or_else(|| {
            Error::host(format!(
                "pause: the jail's cgroups have no freezer ({:?}: {}); mount the v1 freezer hierarchy writable, or use cgroup v2",
                self.version,
                self.dirs
                    .iter()
                    .map(|dir| dir.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        freeze::freeze(self.version, &file)
    }

    /// Lets the jail's processes run on where they were frozen.
    pub fn thaw(&self) -> Result<()> {
        match self.freezer() {
            Some(file) => freeze::thaw(self.version, &file),
            None => Ok(()),
        }
    }

    pub fn usage(&self) -> Usage {
        self.probe().usage()
    }

    /// A reader of the cgroup's counters that another thread can keep.
    pub fn probe(&self) -> UsageProbe {
        UsageProbe {
            version: self.version,
            dirs: self.dirs.clone(),
        }
    }

    fn kill_and_remove(&mut self) {
        for dir in self.dirs.drain(..) {
            hierarchy::kill_all(self.version, &dir);
            hierarchy::remove(&dir);
            if self.remove_parents
                && let Some(parent) = dir.parent()
            {
                // Fails (EBUSY) while other jails use it, as it should.
                let _ = fs::remove_dir(parent);
            }
        }
    }
}

impl Drop for JailCgroup {
    fn drop(&mut self) {
        self.kill_and_remove();
    }
}

/// Distinguishes several jails started by one brig process (tests, future batch mode).
fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The OOM kills counted so far in the cgroup brig itself is in (the container's, when
/// brig runs in one and has no cgroup of its own for the jail). Read before and after a
/// run: a SIGKILL while it went up is the kernel's OOM killer, under a limit brig did not
/// set. None when this cgroup's counter cannot be read.
pub fn enclosing_oom_kills() -> Option<u64> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let file = hierarchy::oom_counter(&mountinfo, &own, Path::exists)?;
    read_keyed(&file, "oom_kill")
}

/// Reads a cgroup file holding one number; `max` is None.
fn read_number(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Reads `key value` lines (memory.events, memory.oom_control) and returns `key`'s value.
fn read_keyed(path: &Path, key: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.lines().find_map(|line| {
        line.strip_prefix(key)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn write_file(dir: &Path, name: &str, value: &str) -> Result<()> {
    let path = dir.join(name);
    fs::write(&path, value).context(|| format!("write {value} to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::{Situation, delegation_fix_for};

    fn fix(situation: Situation) -> String {
        delegation_fix_for(&Situation {
            user: "worker".into(),
            ..situation
        })
    }

    #[test]
    fn the_cgroup_fix_fits_the_host() {
        // A container: its own limits, or a writable cgroup namespace; nothing systemd.
        let text = fix(Situation {
            container: Some("docker".into()),
            rootless: true,
            ..Situation::default()
        });
        assert!(text.starts_with("inside a container (docker) /sys/fs/cgroup is read-only: the container's own limits bound brig"), "{text}");
        assert!(text.contains("--cgroupns=private"), "{text}");
        assert!(!text.contains("systemd-run"), "{text}");
        // A hybrid host, rootless: root creates and chowns the v1 cgroups.
        let text = fix(Situation {
            rootless: true,
            v1_mounts: vec!["/sys/fs/cgroup/memory".into(), "/sys/fs/cgroup/pids".into()],
            user_manager: true,
            ..Situation::default()
        });
        assert!(text.contains("`for d in /sys/fs/cgroup/memory /sys/fs/cgroup/pids; do mkdir $d/brig-worker; chown -R worker $d/brig-worker; done`"), "{text}");
        assert!(text.contains("--cgroup-parent /brig-worker"), "{text}");
        assert!(!text.contains("Delegate=yes"), "{text}");
        // Pure v2 with a user manager: systemd's delegation.
        let text = fix(Situation {
            rootless: true,
            user_manager: true,
            ..Situation::default()
        });
        assert!(
            text.contains("systemd-run --user --scope -p Delegate=yes"),
            "{text}"
        );
        // Pure v2 without one: root hands a cgroup over and starts brig in it.
        let text = fix(Situation {
            rootless: true,
            ..Situation::default()
        });
        assert!(
            text.contains("chown -R worker /sys/fs/cgroup/brig-worker"),
            "{text}"
        );
        assert!(text.contains("cgroup.procs"), "{text}");
        assert!(!text.contains("systemd-run"), "{text}");
        // Root on a v1 host.
        let text = fix(Situation {
            v1_mounts: vec!["/sys/fs/cgroup/memory".into()],
            ..Situation::default()
        });
        assert!(
            text.starts_with("mount the v1 memory and pids hierarchies writable"),
            "{text}"
        );
    }
}
