//! Finding cgroup hierarchies and a place in them that brig may write.

use crate::error::{Context, Error, Result};
use nix::errno::Errno;
use serde::Serialize;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

/// How the parent directory came to be brig's to use.
#[derive(Clone, Debug, PartialEq)]
pub enum Parent {
    /// `<hierarchy>/brig`, created by brig as root.
    BrigSubtree,
    /// `--cgroup-parent`, delegated by the operator.
    Given,
    /// brig's own v2 cgroup, delegated to the caller: brig moves itself into a leaf
    /// below it first (no process may sit in a cgroup that hands controllers down).
    OwnDelegated { own: PathBuf },
}

/// The cgroup mounts of this host (from /proc/self/mountinfo), brig's own place in them
/// (/proc/self/cgroup) and brig's uid: what placing a jail's cgroup depends on.
pub struct Mounts {
    unified: Option<PathBuf>,
    /// (controller, mount point) for v1 hierarchies: memory, pids, cpu, cpuacct, freezer.
    legacy: Vec<(String, PathBuf)>,
    /// /proc/self/cgroup.
    own_cgroups: String,
    euid: u32,
}

impl Mounts {
    pub fn read() -> Result<Mounts> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .context(|| "read /proc/self/mountinfo".into())?;
        let own_cgroups = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        Ok(Mounts::parse(
            &mountinfo,
            own_cgroups,
            nix::unistd::geteuid().as_raw(),
        ))
    }

    pub fn parse(mountinfo: &str, own_cgroups: String, euid: u32) -> Mounts {
        let mut mounts = Mounts {
            unified: None,
            legacy: Vec::new(),
            own_cgroups,
            euid,
        };
        for line in mountinfo.lines() {
            let Some((before, after)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mount_point) = before.split(' ').nth(4) else {
                continue;
            };
            let mount_point = PathBuf::from(unescape(mount_point));
            let mut after = after.split(' ');
            match (after.next(), after.nth(1)) {
                (Some("cgroup2"), _) => {
                    mounts.unified.get_or_insert(mount_point);
                }
                (Some("cgroup"), Some(options)) => {
                    for option in options.split(',') {
                        if matches!(option, "memory" | "pids" | "cpu" | "cpuacct" | "freezer") {
                            mounts
                                .legacy
                                .push((option.to_string(), mount_point.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
        mounts
    }

    /// brig's own cgroup path in a hierarchy, relative to its mount ("0::/x" for v2).
    pub fn own_path(&self, controller: Option<&str>) -> Option<PathBuf> {
        self.own_cgroups.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let matches = match controller {
                None => controllers.is_empty(),
                Some(wanted) => controllers.split(',').any(|c| c == wanted),
            };
            matches.then(|| PathBuf::from(path.trim_start_matches('/')))
        })
    }

    /// The cgroup2 mount, if there is one.
    pub fn unified(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    /// (controller, mount point) of the v1 memory, pids and cpu hierarchies.
    pub fn legacy(&self) -> &[(String, PathBuf)] {
        &self.legacy
    }

    pub(super) fn legacy_mount(&self, controller: &str) -> Option<&Path> {
        self.legacy
            .iter()
            .find(|(name, _)| name == controller)
            .map(|(_, path)| path.as_path())
    }
}

/// The file whose `oom_kill` counter counts the OOM kills in the cgroup brig itself is
/// in, given /proc/self/mountinfo and /proc/self/cgroup: the v1 memory hierarchy's
/// memory.oom_control, or cgroup2's memory.events. The cgroup's path is taken relative
/// to its mount's root, so that it is found inside a container too, with or without a
/// cgroup namespace. `exists` decides among the candidates (a parameter for the tests).
pub fn oom_counter(
    mountinfo: &str,
    own_cgroups: &str,
    exists: impl Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let own = |controller: Option<&str>| {
        own_cgroups.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let matches = match controller {
                None => controllers.is_empty(),
                Some(wanted) => controllers.split(',').any(|c| c == wanted),
            };
            matches.then(|| PathBuf::from(path))
        })
    };
    let mut candidates = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let (Some(root), Some(mount_point)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        let mut after = after.split(' ');
        let (own_path, file) = match (after.next(), after.nth(1)) {
            (Some("cgroup"), Some(options)) if options.split(',').any(|o| o == "memory") => {
                (own(Some("memory")), "memory.oom_control")
            }
            (Some("cgroup2"), _) => (own(None), "memory.events"),
            _ => continue,
        };
        let Some(own_path) = own_path else { continue };
        let Ok(relative) = own_path.strip_prefix(unescape(root)) else {
            continue;
        };
        let path = Path::new(&unescape(mount_point)).join(relative).join(file);
        // v1 first: on a hybrid host the memory controller is there, not in cgroup2.
        if file == "memory.oom_control" {
            candidates.insert(0, path);
        } else {
            candidates.push(path);
        }
    }
    candidates.into_iter().find(|path| exists(path))
}

/// mountinfo escapes spaces and the like as \ooo.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let octal = bytes
            .get(index + 1..index + 4)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match (bytes[index], octal) {
            (b'\\', Some(value)) => {
                out.push(value);
                index += 4;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A hierarchy mounted read-only (inside a container, /sys/fs/cgroup usually is) has no
/// place for brig's subtree, even for root.
pub fn writable(mount: &Path) -> bool {
    use nix::sys::statvfs::{FsFlags, statvfs};
    statvfs(mount).is_ok_and(|stat| !stat.flags().contains(FsFlags::ST_RDONLY))
}

fn has_controllers(file: &Path, wanted: &[&str]) -> bool {
    let Ok(text) = fs::read_to_string(file) else {
        return false;
    };
    let available: Vec<&str> = text.split_whitespace().collect();
    wanted
        .iter()
        .all(|controller| available.contains(controller))
}

pub fn find_parent(
    mounts: &Mounts,
    controllers: &[&str],
    rootless: bool,
) -> Option<(Version, Vec<PathBuf>, Parent)> {
    if let Some(unified) = &mounts.unified {
        if !rootless
            && has_controllers(&unified.join("cgroup.subtree_control"), controllers)
            && writable(unified)
        {
            return Some((Version::V2, vec![unified.join("brig")], Parent::BrigSubtree));
        }
        // brig moves itself into a leaf below its delegated cgroup; a process it shares
        // that cgroup with (the shell that started it) would stay, and a cgroup that
        // hands controllers down may hold none.
        if rootless
            && let Some(own) = own_delegated(mounts, controllers)
            && other_processes(&own).is_empty()
        {
            return Some((Version::V2, vec![own.clone()], Parent::OwnDelegated { own }));
        }
    }
    if !rootless {
        let parents: Option<Vec<PathBuf>> = controllers
            .iter()
            .map(|controller| {
                mounts
                    .legacy_mount(controller)
                    .filter(|mount| writable(mount))
                    .map(|mount| mount.join("brig"))
            })
            .collect();
        if let Some(mut parents) = parents {
            // cpuacct is not a limit, but it is where v1 counts the jail's CPU time.
            if let Some(mount) = mounts.legacy_mount("cpuacct") {
                parents.push(mount.join("brig"));
            }
            // Nor is the freezer: it pauses a session (`freeze.rs`). First, so that the
            // jail is thawed before the other hierarchies wait for its processes to die.
            if let Some(mount) = mounts
                .legacy_mount("freezer")
                .filter(|mount| writable(mount))
            {
                parents.insert(0, mount.join("brig"));
            }
            return Some((Version::V1, distinct(parents), Parent::BrigSubtree));
        }
    }
    None
}

/// brig's own v2 cgroup when it is delegated to brig's uid and offers `controllers`.
pub fn own_delegated(mounts: &Mounts, controllers: &[&str]) -> Option<PathBuf> {
    let unified = mounts.unified.as_ref()?;
    let own = unified.join(mounts.own_path(None)?);
    (own != *unified
        && fs::metadata(&own).is_ok_and(|meta| meta.uid() == mounts.euid)
        && has_controllers(&own.join("cgroup.controllers"), controllers))
    .then_some(own)
}

/// A process that stands for brig besides brig's own: `brig doctor`, whose probe for
/// uid 65534 is a fork of it, in the same cgroup (0: none).
static STANDS_FOR_BRIG: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Counts process `pid` as brig itself when looking for other processes in its cgroup
/// (`brig doctor`'s probing child, for its parent).
pub fn count_as_brig(pid: u32) {
    STANDS_FOR_BRIG.store(pid, std::sync::atomic::Ordering::Relaxed);
}

/// The processes in the cgroup `dir` other than this one (and the one that stands for
/// brig, see [`count_as_brig`]).
pub fn other_processes(dir: &Path) -> Vec<u32> {
    let own = [
        std::process::id(),
        STANDS_FOR_BRIG.load(std::sync::atomic::Ordering::Relaxed),
    ];
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter(|pid| !own.contains(pid))
        .collect()
}

pub fn given_parent(
    mounts: &Mounts,
    path: &Path,
    controllers: &[&str],
) -> Result<(Version, Vec<PathBuf>, Parent)> {
    // The example follows the host: one directory on cgroup v2, one path found under
    // every controller's hierarchy on v1.
    let v2_usable = mounts
        .unified
        .as_ref()
        .is_some_and(|unified| has_controllers(&unified.join("cgroup.controllers"), controllers));
    let example = match (v2_usable, mounts.legacy_mount(controllers[0])) {
        (false, Some(first)) => format!(
            "give a cgroup that exists under each v1 hierarchy it needs ({}), as the path below them (e.g. /jobs for {}) or one of them in full",
            controllers.join(", "),
            first.join("jobs").display()
        ),
        _ => format!(
            "give a delegated cgroup directory, e.g. {}",
            mounts
                .unified
                .as_deref()
                .unwrap_or(Path::new("/sys/fs/cgroup"))
                .join("my.slice/brig")
                .display()
        ),
    };
    let bad = |why: &str| {
        Error::input(format!(
            "--cgroup-parent {}: {why}; {example}",
            path.display()
        ))
    };
    if let Some(unified) = &mounts.unified {
        let dir = match path.strip_prefix(unified) {
            Ok(_) => path.to_path_buf(),
            Err(_) => unified.join(path.strip_prefix("/").unwrap_or(path)),
        };
        if dir.is_dir() {
            if !has_controllers(&dir.join("cgroup.controllers"), controllers) {
                return Err(bad(&format!(
                    "its parent does not hand down {}; enable them in the parent's cgroup.subtree_control",
                    controllers.join(", ")
                )));
            }
            return Ok((Version::V2, vec![dir], Parent::Given));
        }
    }
    let mut parents = Vec::new();
    for controller in controllers {
        let mount = mounts.legacy_mount(controller).ok_or_else(|| {
            bad(&format!(
                "no cgroup hierarchy has the {controller} controller"
            ))
        })?;
        let relative = mounts
            .legacy
            .iter()
            .find_map(|(_, mount_point)| path.strip_prefix(mount_point).ok())
            .unwrap_or_else(|| path.strip_prefix("/").unwrap_or(path));
        let dir = mount.join(relative);
        if !dir.is_dir() {
            return Err(bad(&format!("{} does not exist", dir.display())));
        }
        parents.push(dir);
    }
    let relative = path.strip_prefix("/").unwrap_or(path);
    if let Some(mount) = mounts.legacy_mount("cpuacct")
        && mount.join(relative).is_dir()
    {
        parents.push(mount.join(relative));
    }
    // The freezer (pausing a session) when the operator made the cgroup there too; first,
    // as find_parent puts it.
    if let Some(mount) = mounts.legacy_mount("freezer")
        && mount.join(relative).is_dir()
    {
        parents.insert(0, mount.join(relative));
    }
    Ok((Version::V1, distinct(parents), Parent::Given))
}

/// Hierarchies mounted together (cpu,cpuacct) share one directory: keep it once.
fn distinct(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = Vec::new();
    for path in paths {
        if !seen.contains(&path) {
            seen.push(path);
        }
    }
    seen
}

/// Makes the parent ready to hold jail cgroups with the controllers enabled.
pub fn prepare_parent(
    version: Version,
    parent: &Path,
    kind: &Parent,
    controllers: &[&str],
) -> Result<()> {
    if *kind == Parent::BrigSubtree {
        match fs::create_dir(parent) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => {
                return Err(err).context(|| format!("create the cgroup {}", parent.display()));
            }
        }
    }
    if let Parent::OwnDelegated { own } = kind {
        let leaf = own.join(format!("brig-{}", std::process::id()));
        match fs::create_dir(&leaf) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => {
                return Err(err).context(|| format!("create the cgroup {}", leaf.display()));
            }
        }
        // Undone when the controllers cannot be handed down: no leaf is left behind.
        let back = || {
            let _ = fs::write(own.join("cgroup.procs"), "0");
            let _ = fs::remove_dir(&leaf);
        };
        if let Err(err) = fs::write(leaf.join("cgroup.procs"), "0") {
            back();
            return Err(err).context(|| format!("move brig itself into {}", leaf.display()));
        }
        if let Err(err) = enable_controllers(parent, controllers) {
            back();
            return Err(err);
        }
        return Ok(());
    }
    if version == Version::V2 {
        enable_controllers(parent, controllers)?;
    }
    Ok(())
}

fn enable_controllers(parent: &Path, controllers: &[&str]) -> Result<()> {
    let control = parent.join("cgroup.subtree_control");
    if has_controllers(&control, controllers) {
        return Ok(());
    }
    let request: Vec<String> = controllers.iter().map(|c| format!("+{c}")).collect();
    fs::write(&control, request.join(" ")).map_err(|err| {
        let errno = Errno::from_raw(err.raw_os_error().unwrap_or(0));
        let what = format!("enable {} in {}", controllers.join(", "), control.display());
        match errno {
            Errno::EBUSY => Error::os(what, errno).hint(
                "the cgroup still holds processes; give brig a subtree of its own with --cgroup-parent",
            ),
            _ => Error::os(what, errno),
        }
    })
}

/// Removes cgroups left by brig processes that died without cleaning up (SIGKILL).
/// A jail's cgroup is emptied and removed as brig does for its own jails: what is left
/// inside is killed, and rmdir waits for the last processes to finish exiting (a jail
/// whose brig was just SIGKILLed is still being torn down).
/// `owners` remembers which brig processes were found alive or gone: a jail has a cgroup
/// under each of its parents (three with cgroup v1), and each owner's /proc status (the
/// sweep's cost, once per live jail) is read once for all of them.
pub fn remove_stale_jails(version: Version, parent: &Path, owners: &mut Owners) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let owner = name
            .strip_prefix("jail-")
            .and_then(|rest| rest.split('-').next())
            .or_else(|| name.strip_prefix("brig-"));
        let Some(pid) = owner.and_then(|pid| pid.parse::<u32>().ok()) else {
            continue;
        };
        if !owners.alive(pid) {
            if name.starts_with("jail-") {
                kill_all(version, &entry.path());
                remove(&entry.path());
            } else {
                // A dead brig's own leaf (rootless, delegated v2): it held only brig.
                let _ = fs::remove_dir(entry.path());
            }
        }
    }
}

/// What [`remove_stale_jails`] learnt of the jails' owners, for the next parent.
#[derive(Default)]
pub struct Owners(std::collections::HashMap<u32, bool>);

impl Owners {
    /// Whether brig process `pid` lives on ([`alive`]); this process does, and so do
    /// the ones [`owners_known_alive`] named (not read: they may have died since, and
    /// then their jails wait for a sweep that does not know them).
    fn alive(&mut self, pid: u32) -> bool {
        if pid == std::process::id() || KNOWN_ALIVE.get().is_some_and(|known| known.contains(&pid))
        {
            return true;
        }
        *self.0.entry(pid).or_insert_with(|| alive(pid))
    }
}

/// Owners this process knows to be alive without reading /proc: see [`owners_known_alive`].
static KNOWN_ALIVE: std::sync::OnceLock<std::collections::HashSet<u32>> =
    std::sync::OnceLock::new();

/// Tells this process's sweeps that brig processes `pids` live: a server's runner, just
/// forked, names its sibling runners (every one not yet reaped), so that its jail build
/// reads the /proc status of no live sibling. Each sibling's jail was one such status
/// read for every create, the sweep's whole cost on a host holding many sandboxes. A
/// sibling that dies (a SIGKILLed runner leaves its jail's cgroup) is swept by the next
/// runner forked after the server reaped it, and by the server's sweeps at start and
/// exit. Set once; later calls are ignored.
pub fn owners_known_alive(pids: impl IntoIterator<Item = u32>) {
    let _ = KNOWN_ALIVE.set(pids.into_iter().collect());
}

/// Whether brig process `pid` lives on: not gone, not a zombie, and not dying (a SIGKILL
/// pending: a runner its server's death has just killed, whose jail goes with it).
fn alive(pid: u32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let state = field("State:");
    let sigkill = 1u64 << (libc::SIGKILL - 1);
    let pending = ["SigPnd:", "ShdPnd:"]
        .iter()
        .any(|key| u64::from_str_radix(&field(key), 16).is_ok_and(|mask| mask & sigkill != 0));
    !(state.starts_with('Z') || state.starts_with('X') || pending)
}

/// Kills every process still in the cgroup. A frozen cgroup (a paused session) is
/// thawed once its processes have their SIGKILL, so that they die rather than run on.
pub fn kill_all(version: Version, dir: &Path) {
    let frozen = super::freeze::control(version, dir);
    if version == Version::V2 && fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        if let Some(file) = frozen {
            let _ = super::freeze::thaw(version, &file);
        }
        return;
    }
    for round in 0..100 {
        if round == 1
            && let Some(file) = &frozen
        {
            let _ = super::freeze::thaw(version, file);
        }
        let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) else {
            return;
        };
        let pids: Vec<i32> = procs
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// rmdir, retried while the last processes finish exiting.
pub fn remove(dir: &Path) {
    for attempt in 0..200u32 {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => {
                std::thread::sleep(Duration::from_micros(250 * u64::from(attempt.min(20) + 1)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory tree standing in for /sys/fs/cgroup, removed when dropped.
    struct Fixture(PathBuf);

    impl Fixture {
        fn new(name: &str) -> Fixture {
            let dir = std::env::temp_dir()
                .join(format!("brig-cgroup-fixture-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Fixture(dir)
        }

        /// Writes `text` to the file `relative`, creating its directories.
        fn file(&self, relative: &str, text: &str) -> &Fixture {
            let path = self.0.join(relative);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
            self
        }

        fn path(&self, relative: &str) -> PathBuf {
            self.0.join(relative)
        }

        /// A mountinfo line mounting `fstype` with `options` at `relative`.
        fn mount_line(&self, relative: &str, fstype: &str, options: &str) -> String {
            fs::create_dir_all(self.path(relative)).unwrap();
            format!(
                "30 24 0:26 / {} rw,nosuid,nodev,noexec,relatime shared:4 - {fstype} {fstype} rw,{options}\n",
                self.path(relative).display()
            )
        }

        fn owner(&self) -> u32 {
            fs::metadata(&self.0).unwrap().uid()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const LIMITS: &[&str] = &["memory", "pids"];

    /// A child that has exited and is not reaped yet: a zombie.
    fn zombie() -> std::process::Child {
        let child = std::process::Command::new("true").spawn().unwrap();
        let exited = (0..1000).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            fs::read_to_string(format!("/proc/{}/stat", child.id()))
                .is_ok_and(|stat| stat.contains(") Z "))
        });
        assert!(exited, "`true` did not exit");
        child
    }

    /// The jail cgroups of a brig that is gone are removed at once, even while it is a
    /// zombie (a runner its SIGKILLed server left unreaped); a live brig's, and what is
    /// not brig's, are kept.
    #[test]
    fn leftover_jails_of_gone_brigs_are_removed() {
        let fixture = Fixture::new("leftovers");
        let mut gone = zombie();
        let live = format!("jail-{}-0", std::process::id());
        let dead = format!("jail-{}-3", gone.id());
        for name in [live.as_str(), dead.as_str(), "something-else"] {
            fs::create_dir_all(fixture.path(name)).unwrap();
        }
        assert!(alive(std::process::id()));
        assert!(!alive(gone.id()));
        remove_stale_jails(Version::V1, &fixture.0, &mut Owners::default());
        assert!(fixture.path(&live).exists());
        assert!(!fixture.path(&dead).exists());
        assert!(fixture.path("something-else").exists());
        gone.wait().unwrap();
        assert!(!alive(gone.id()));
    }

    /// A sibling a server's runner was told of is not read, so its jail stays even when
    /// it has died since: left to a later sweep (the only test that sets the list: it is
    /// the process's, once).
    #[test]
    fn owners_known_alive_are_not_read() {
        let fixture = Fixture::new("known-alive");
        let mut told = zombie();
        let mut other = zombie();
        let kept = format!("jail-{}-1", told.id());
        let removed = format!("jail-{}-2", other.id());
        for name in [kept.as_str(), removed.as_str()] {
            fs::create_dir_all(fixture.path(name)).unwrap();
        }
        owners_known_alive([told.id()]);
        remove_stale_jails(Version::V1, &fixture.0, &mut Owners::default());
        assert!(fixture.path(&kept).exists());
        assert!(!fixture.path(&removed).exists());
        told.wait().unwrap();
        other.wait().unwrap();
    }

    fn pure_v2(name: &str) -> (Fixture, String) {
        let tree = Fixture::new(name);
        tree.file("unified/cgroup.controllers", "cpuset cpu io memory pids\n")
            .file("unified/cgroup.subtree_control", "cpu memory pids\n");
        let mountinfo = format!(
            "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n{}",
            tree.mount_line("unified", "cgroup2", "nsdelegate")
        );
        (tree, mountinfo)
    }

    #[test]
    fn pure_v2_as_root_uses_a_brig_subtree() {
        let (tree, mountinfo) = pure_v2("v2-root");
        let mounts = Mounts::parse(&mountinfo, "0::/\n".into(), 0);
        assert_eq!(mounts.unified(), Some(tree.path("unified").as_path()));
        assert!(mounts.legacy().is_empty());
        let (version, parents, kind) = find_parent(&mounts, LIMITS, false).unwrap();
        assert_eq!(version, Version::V2);
        assert_eq!(parents, vec![tree.path("unified/brig")]);
        assert_eq!(kind, Parent::BrigSubtree);
    }

    #[test]
    fn pure_v2_without_the_controllers_is_unusable_as_root() {
        let (tree, mountinfo) = pure_v2("v2-bare");
        tree.file("unified/cgroup.subtree_control", "cpu\n");
        let mounts = Mounts::parse(&mountinfo, "0::/\n".into(), 0);
        assert!(find_parent(&mounts, LIMITS, false).is_none());
    }

    #[test]
    fn rootless_v2_uses_its_own_delegated_cgroup() {
        let (tree, mountinfo) = pure_v2("v2-delegated");
        tree.file(
            "unified/user.slice/user-1000.slice/brig.scope/cgroup.controllers",
            "memory pids\n",
        );
        let own = "0::/user.slice/user-1000.slice/brig.scope\n".to_string();
        let mounts = Mounts::parse(&mountinfo, own.clone(), tree.owner());
        let (version, parents, kind) = find_parent(&mounts, LIMITS, true).unwrap();
        let scope = tree.path("unified/user.slice/user-1000.slice/brig.scope");
        assert_eq!(version, Version::V2);
        assert_eq!(parents, vec![scope.clone()]);
        assert_eq!(kind, Parent::OwnDelegated { own: scope });
        // Not the caller's: not delegated.
        let mounts = Mounts::parse(&mountinfo, own, tree.owner() + 1);
        assert!(find_parent(&mounts, LIMITS, true).is_none());
        // The root cgroup is never brig's own to use.
        let mounts = Mounts::parse(&mountinfo, "0::/\n".into(), tree.owner());
        assert!(find_parent(&mounts, LIMITS, true).is_none());
    }

    /// This development machine's layout: v1 memory, pids and cpu,cpuacct, and a cgroup2
    /// mount without controllers.
    fn hybrid(name: &str) -> (Fixture, String) {
        let tree = Fixture::new(name);
        tree.file("unified/cgroup.controllers", "")
            .file("unified/cgroup.subtree_control", "");
        let mountinfo = [
            tree.mount_line("unified", "cgroup2", "nsdelegate"),
            tree.mount_line("memory", "cgroup", "memory"),
            tree.mount_line("pids", "cgroup", "pids"),
            tree.mount_line("cpu,cpuacct", "cgroup", "cpu,cpuacct"),
            tree.mount_line("freezer", "cgroup", "freezer"),
        ]
        .concat();
        (tree, mountinfo)
    }

    #[test]
    fn hybrid_as_root_uses_the_v1_hierarchies() {
        let (tree, mountinfo) = hybrid("hybrid-root");
        let mounts = Mounts::parse(&mountinfo, "0::/\n".into(), 0);
        let (version, parents, kind) =
            find_parent(&mounts, &["memory", "pids", "cpu"], false).expect("v1 is usable as root");
        assert_eq!(version, Version::V1);
        assert_eq!(kind, Parent::BrigSubtree);
        // cpu and cpuacct share one hierarchy: its brig directory appears once.
        // The freezer first (a paused jail is thawed before the others wait for it).
        assert_eq!(
            parents,
            vec![
                tree.path("freezer/brig"),
                tree.path("memory/brig"),
                tree.path("pids/brig"),
                tree.path("cpu,cpuacct/brig"),
            ]
        );
    }

    #[test]
    fn hybrid_rootless_has_no_cgroup() {
        let (tree, mountinfo) = hybrid("hybrid-rootless");
        let mounts = Mounts::parse(&mountinfo, "0::/user.slice\n".into(), tree.owner());
        assert!(find_parent(&mounts, LIMITS, true).is_none());
    }

    #[test]
    fn v1_only_with_a_given_parent() {
        let tree = Fixture::new("v1-given");
        let mountinfo = [
            tree.mount_line("memory", "cgroup", "memory"),
            tree.mount_line("pids", "cgroup", "pids"),
        ]
        .concat();
        tree.file("memory/jobs/tasks", "")
            .file("pids/jobs/tasks", "");
        let mounts = Mounts::parse(&mountinfo, String::new(), 0);
        assert!(mounts.unified().is_none());
        let given = given_parent(&mounts, Path::new("/jobs"), LIMITS).unwrap();
        assert_eq!(
            given,
            (
                Version::V1,
                vec![tree.path("memory/jobs"), tree.path("pids/jobs")],
                Parent::Given
            )
        );
        let missing = given_parent(&mounts, Path::new("/nope"), LIMITS).unwrap_err();
        assert!(
            missing.message().contains("--cgroup-parent /nope"),
            "{missing}"
        );
        assert!(missing.message().contains("does not exist"), "{missing}");
    }

    #[test]
    fn the_oom_counter_is_found_inside_containers_too() {
        // A v1 container without a cgroup namespace: the hierarchy's root is the
        // container's cgroup, /proc/self/cgroup names it from the host's root.
        let mountinfo = "\
            30 29 0:26 /bt-podman-7/libpod-ab /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup ro,memory\n\
            31 29 0:27 /bt-podman-7/libpod-ab /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup ro,pids\n\
            32 29 0:28 / /sys/fs/cgroup/unified ro - cgroup2 cgroup2 ro\n";
        let own = "9:memory:/bt-podman-7/libpod-ab\n5:pids:/bt-podman-7/libpod-ab\n0::/bt-podman-7/libpod-ab\n";
        assert_eq!(
            oom_counter(mountinfo, own, |_| true),
            Some(PathBuf::from("/sys/fs/cgroup/memory/memory.oom_control"))
        );
        assert_eq!(
            oom_counter(mountinfo, own, |path| path.ends_with("memory.events")),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/bt-podman-7/libpod-ab/memory.events"
            ))
        );
        // cgroup2 in a cgroup namespace: "0::/" and the mount's root "/".
        let mountinfo = "40 39 0:30 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            oom_counter(mountinfo, "0::/\n", |_| true),
            Some(PathBuf::from("/sys/fs/cgroup/memory.events"))
        );
        // A hierarchy whose root is not above brig's cgroup tells nothing.
        let mountinfo = "30 29 0:26 /other /sys/fs/cgroup/memory ro - cgroup cgroup ro,memory\n";
        assert_eq!(oom_counter(mountinfo, "9:memory:/mine\n", |_| true), None);
    }

    #[test]
    fn mountinfo_fields_are_unescaped() {
        let mountinfo = "40 30 0:33 / /sys/fs/cgroup/my\\040cgroups rw - cgroup2 cgroup2 rw\n\
                         41 30 0:34 / /mnt/mem rw - cgroup cgroup rw,memory\n\
                         42 30 0:35 / /proc rw - proc proc rw\n";
        let mounts = Mounts::parse(mountinfo, String::new(), 0);
        assert_eq!(
            mounts.unified(),
            Some(Path::new("/sys/fs/cgroup/my cgroups"))
        );
        assert_eq!(
            mounts.legacy(),
            [("memory".to_string(), PathBuf::from("/mnt/mem"))]
        );
        assert_eq!(unescape("a\\134b\\011c"), "a\\b\tc");
    }

    #[test]
    fn own_path_per_hierarchy() {
        let own = "12:pids:/user.slice\n4:cpu,cpuacct:/x/y\n0::/system.slice/brig.service\n";
        let mounts = Mounts::parse("", own.into(), 0);
        assert_eq!(
            mounts.own_path(None),
            Some(PathBuf::from("system.slice/brig.service"))
        );
        assert_eq!(mounts.own_path(Some("cpuacct")), Some(PathBuf::from("x/y")));
        assert_eq!(mounts.own_path(Some("memory")), None);
    }
}
