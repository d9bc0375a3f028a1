//! The jail's identity and the user namespace. Planning: the jail's uid/gid and the host
//! ids they map to (never host root). Parent: the single uid/gid mapping and the denial of
//! setgroups. Child: the switch to that identity.

use crate::error::{Context, Error, Result};
use crate::options::{HostUidRange, JailOptions};
use nix::unistd::{Gid, Pid, Uid, setgroups, setresgid, setresuid};
use serde::Serialize;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The jail's uid and gid unless `--uid`/`--gid` say otherwise.
pub const DEFAULT_ID: u32 = 1000;
/// The host uid/gid a jail maps to when root runs brig.
pub const UNPRIVILEGED_HOST_ID: u32 = 65534;
const USER_NAME: &str = "sandbox";

/// The host uids root gives its jails by default, one of its own for each: 65,536 uids
/// from 0x70000000. Above systemd's container range (524288-1879048191, where useradd's
/// /etc/subuid blocks of 65,536 from 100000 also fall) and below both systemd's
/// "foreign" range (0x7FFE0000) and 2^31, which tools that take a uid for signed
/// mishandle; no user or service is given uids there.
pub const DEFAULT_HOST_UID_RANGE: HostUidRange = HostUidRange::Range {
    first: 0x7000_0000,
    last: 0x7000_FFFF,
};
/// Where brig holds a lock on each per-jail host uid in use: root's own directory.
pub const HOST_UID_LOCKS: &str = "/run/brig-host-uids";

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    /// The host ids the jail's uid and gid map to; never 0.
    pub host: HostIds,
    /// brig runs as an unprivileged user: the jail maps to that user.
    pub rootless: bool,
    /// Why a weaker mode applies than asked for (the default range unmapped here).
    #[serde(skip)]
    pub warning: Option<String>,
    /// A session's `root`: the jail maps uid and gid 0 too, each to a second per-jail
    /// host id, so that a program asked to run as root runs as 0 inside, without any
    /// capability (see [`allow_root`]). Off everywhere else.
    #[serde(skip)]
    pub root: bool,
}

/// Which host ids a jail maps to, and who creates its user namespace (the kernel charges
/// the jail's use of per-user counters to that uid on the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum HostIds {
    /// As root: a host uid and gid (the same number) of its own for each jail, from
    /// `first..=last`; the jail's user namespace is created by that uid.
    PerJail { first: u32, last: u32 },
    /// As root with `--host-uid-range off` or `--host-uid`/`--host-gid`: every jail maps to
    /// these ids, and its namespace is created by brig's uid (root).
    Shared { uid: u32, gid: u32 },
    /// Rootless: the caller's own ids, the namespace created by the caller.
    Caller { uid: u32, gid: u32 },
}

impl HostIds {
    /// The ids every jail maps to, unless each jail gets its own.
    pub fn fixed(&self) -> Option<(u32, u32)> {
        match *self {
            HostIds::PerJail { .. } => None,
            HostIds::Shared { uid, gid } | HostIds::Caller { uid, gid } => Some((uid, gid)),
        }
    }

    /// The name of the mode, as the verdict and `brig doctor` say it.
    pub fn mode(&self) -> &'static str {
        match self {
            HostIds::PerJail { .. } => "per-jail",
            HostIds::Shared { .. } => "shared",
            HostIds::Caller { .. } => "caller",
        }
    }

    /// Takes the host ids of one jail: with a range, a uid no other jail of any brig holds,
    /// for as long as the returned lease lives.
    pub fn lease(&self) -> Result<Lease> {
        match *self {
            HostIds::PerJail { first, last } => lease_from(first, last),
            HostIds::Shared { uid, gid } | HostIds::Caller { uid, gid } => Ok(Lease {
                uid,
                gid,
                creator: false,
                lock: None,
            }),
        }
    }
}

/// The host ids of one jail. With a per-jail range it holds the uid's lock: release it
/// only when every process of the jail is gone.
#[derive(Debug)]
pub struct Lease {
    pub uid: u32,
    pub gid: u32,
    /// The jail's user namespace is to be created by these ids (a per-jail uid).
    pub creator: bool,
    lock: Option<UidLock>,
}

impl Lease {
    /// The descriptor holding a per-jail uid's lock.
    pub fn lock_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.lock.as_ref().map(|lock| lock.file.as_raw_fd())
    }
}

/// The lock of one per-jail host uid: an exclusive flock(2) on `HOST_UID_LOCKS/UID`. Its
/// file is removed while the lock is still held, by the process that took it (so that
/// the directory holds only the uids in use): whoever takes a lock checks that the file
/// it locked is still the one of that name, and tries again otherwise.
#[derive(Debug)]
struct UidLock {
    dir: OwnedFd,
    name: String,
    file: nix::fcntl::Flock<std::fs::File>,
    /// The process that took it: a forked copy of brig never removes the file.
    owner: u32,
}

impl Drop for UidLock {
    fn drop(&mut self) {
        if std::process::id() == self.owner {
            let _ = nix::unistd::unlinkat(
                &self.dir,
                self.name.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        // Then `file` closes, which releases the lock.
    }
}

/// Opens root's directory of host-uid locks, creating it (0700) if needed; refuses one
/// that is not a directory owned by root and writable by root alone.
fn lock_directory() -> Result<OwnedFd> {
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::{Mode, fstat, mkdirat};
    let path = Path::new(HOST_UID_LOCKS);
    let (parent, name) = (
        path.parent().unwrap_or(Path::new("/")),
        path.file_name().unwrap_or_default(),
    );
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
    let parent_fd = open(parent, flags, Mode::empty()).map_err(|errno| {
        Error::os(
            format!("open {} for brig's host-uid locks", parent.display()),
            errno,
        )
        .hint(format!(
            "brig keeps the locks of its per-jail host uids in {HOST_UID_LOCKS}: give this host (or container) a {}, or pass --host-uid-range off (weaker: jails share root's per-user counters)",
            parent.display()
        ))
    })?;
    match mkdirat(&parent_fd, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(errno) => {
            return Err(Error::os(format!("create {HOST_UID_LOCKS}"), errno).hint(
                "brig keeps the locks of its per-jail host uids there: in a systemd unit with ProtectSystem=, add RuntimeDirectory=brig-host-uids (deploy/README.md); or pass --host-uid-range off (weaker: jails share root's per-user counters)",
            ));
        }
    }
    let dir = openat(&parent_fd, name, flags, Mode::empty())
        .context(|| format!("open {HOST_UID_LOCKS}"))?;
    let stat = fstat(&dir).context(|| format!("inspect {HOST_UID_LOCKS}"))?;
    if stat.st_uid != 0 || stat.st_mode & 0o022 != 0 {
        return Err(Error::setup(format!(
            "{HOST_UID_LOCKS}: owned by uid {} with mode {:o}, where brig keeps the locks of its per-jail host uids as root alone; remove it (brig creates it again, 0700)",
            stat.st_uid,
            stat.st_mode & 0o7777
        )));
    }
    Ok(dir)
}

/// Removes the lock files no one holds: those of brigs that were killed (SIGKILL) before
/// they could remove their own. Each is taken as a lessee takes it (an exclusive flock,
/// then the check that the name is still that file) and removed while held, so a brig
/// leasing the uid meanwhile either finds it held or finds its file gone and tries again
/// ([`lease_from`]). What cannot be read is left alone: the locks are an optimisation of
/// the directory's size, not of the leases' safety. The number removed.
pub fn remove_stale_locks() -> usize {
    use nix::fcntl::{Flock, FlockArg, OFlag, openat};
    use nix::sys::stat::Mode;
    let (Ok(dir), Ok(entries)) = (lock_directory(), std::fs::read_dir(HOST_UID_LOCKS)) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|name| name.parse::<u32>().is_ok()) else {
            continue;
        };
        let flags = OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(file) = openat(&dir, name, flags, Mode::empty()) else {
            continue;
        };
        let Ok(file) = Flock::lock(std::fs::File::from(file), FlockArg::LockExclusiveNonblock)
        else {
            continue;
        };
        if still_named(&dir, name, &file)
            && nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir).is_ok()
        {
            removed += 1;
        }
        // `file` closes here, which releases the lock.
    }
    removed
}

/// Whether `file` (just locked) is still the one named `name` in the lock directory: a
/// lock taken on a file its holder removed meanwhile is a lock no one else looks at.
fn still_named(dir: &OwnedFd, name: &str, file: &std::fs::File) -> bool {
    let linked = nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW);
    let ours = nix::sys::stat::fstat(file);
    matches!((linked, ours), (Ok(linked), Ok(ours))
        if (linked.st_dev, linked.st_ino) == (ours.st_dev, ours.st_ino))
}

/// A uid of `first..=last` whose lock no one holds, probing from a point derived from
/// brig's pid (concurrent brigs start apart).
fn lease_from(first: u32, last: u32) -> Result<Lease> {
    use nix::fcntl::{Flock, FlockArg, OFlag, openat};
    use nix::sys::stat::Mode;
    let dir = lock_directory()?;
    let size = u64::from(last - first) + 1;
    let start = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15) % size;
    let mut step = 0;
    let mut retries = 0;
    while step < size {
        let uid = first + ((start + step) % size) as u32;
        let name = uid.to_string();
        let file = openat(
            &dir,
            name.as_str(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .context(|| format!("open the lock of host uid {uid} in {HOST_UID_LOCKS}"))?;
        match Flock::lock(std::fs::File::from(file), FlockArg::LockExclusiveNonblock) {
            Ok(file) => {
                // The holder before may have removed the file between our open and our
                // lock: then the lock is on a file no one else will look at.
                let same = still_named(&dir, &name, &file);
                if !same && retries < 100 {
                    retries += 1;
                    continue;
                }
                if !same {
                    return Err(Error::setup(format!(
                        "lock host uid {uid} in {HOST_UID_LOCKS}: its file keeps changing; is another program removing files there?"
                    )));
                }
                let owner = std::process::id();
                return Ok(Lease {
                    uid,
                    gid: uid,
                    creator: true,
                    lock: Some(UidLock {
                        dir,
                        name,
                        file,
                        owner,
                    }),
                });
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => step += 1,
            Err((_, errno)) => {
                return Err(Error::os(
                    format!("lock host uid {uid} in {HOST_UID_LOCKS}"),
                    errno,
                ));
            }
        }
    }
    Err(Error::setup(format!(
        "--host-uid-range {first}-{last}: all {size} host uids are held by running jails; widen the range (e.g. --host-uid-range {first}-{}), or wait for jails to end",
        first.saturating_add(65535).max(last).min(u32::MAX - 1)
    )))
}

/// Whether brig's own user namespace maps every id of `first..=last` (`kind`: uid or gid):
/// inside a container with a user namespace of its own, often only a few are.
pub fn mapped_here(kind: &str, first: u32, last: u32) -> bool {
    let Ok(map) = std::fs::read_to_string(format!("/proc/self/{kind}_map")) else {
        return true;
    };
    map.lines().any(|line| {
        let numbers: Vec<u64> = line
            .split_whitespace()
            .filter_map(|field| field.parse().ok())
            .collect();
        matches!(numbers.as_slice(), [inside, _, count]
            if *inside <= u64::from(first) && u64::from(last) < inside + count)
    })
}

/// `--user NAME`, checked: a name /etc/passwd and a path component take as they are,
/// which no other account of the jail's /etc has.
fn user_name(name: &str) -> Result<String> {
    let well_formed = name.len() <= 32
        && name
            .bytes()
            .next()
            .is_some_and(|first| first.is_ascii_lowercase() || first == b'_')
        && name.bytes().all(|byte| {
            byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"_-".contains(&byte)
        });
    if !well_formed {
        return Err(Error::input(format!(
            "--user {name:?}: use 1 to 32 lowercase letters, digits, '_' or '-', starting with a letter or '_' (e.g. user)"
        )));
    }
    if ["root", "nobody"].contains(&name) {
        return Err(Error::input(format!(
            "--user {name}: that name is another account's (the jail's user is never root, and nobody is the unmapped ids'); pick another, e.g. user"
        )));
    }
    Ok(name.to_string())
}

pub fn resolve(options: &JailOptions) -> Result<Identity> {
    let uid = options.uid.unwrap_or(DEFAULT_ID);
    let gid = options.gid.unwrap_or(DEFAULT_ID);
    for (flag, id) in [("--uid", uid), ("--gid", gid)] {
        if id == u32::MAX {
            return Err(Error::input(format!(
                "{flag} {id}: not a valid id; use e.g. 1000"
            )));
        }
    }
    let user = match &options.user {
        Some(name) => user_name(name)?,
        None => USER_NAME.to_string(),
    };
    let euid = nix::unistd::geteuid().as_raw();
    let egid = nix::unistd::getegid().as_raw();
    let rootless = euid != 0;
    let mut warning = None;
    let host = if rootless {
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
        if let Some(range @ HostUidRange::Range { .. }) = options.host_uid_range {
            return Err(Error::input(format!(
                "--host-uid-range {range}: only root can give each jail a host uid of its own; rootless brig maps every jail to your own uid ({euid}), drop the option"
            )));
        }
        HostIds::Caller {
            uid: euid,
            gid: egid,
        }
    } else {
        let fixed = options.host_uid.is_some() || options.host_gid.is_some();
        match options.host_uid_range {
            Some(range @ HostUidRange::Range { .. }) if fixed => {
                return Err(Error::input(format!(
                    "--host-uid-range {range} and --host-uid/--host-gid: give one of them (the range gives each jail its own id, the others one id for all)"
                )));
            }
            Some(HostUidRange::Range { first, last }) => {
                if !(mapped_here("uid", first, last) && mapped_here("gid", first, last)) {
                    return Err(Error::input(format!(
                        "--host-uid-range {first}-{last}: brig's user namespace does not map all of these ids (inside a container?); give a range within /proc/self/uid_map and gid_map, or off"
                    )));
                }
                HostIds::PerJail { first, last }
            }
            None if !fixed => match DEFAULT_HOST_UID_RANGE {
                HostUidRange::Range { first, last }
                    if mapped_here("uid", first, last) && mapped_here("gid", first, last) =>
                {
                    HostIds::PerJail { first, last }
                }
                range => {
                    warning = Some(format!(
                        "brig's user namespace does not map the default --host-uid-range {range} (inside a container?): every jail maps to host uid 65534 and its namespace is root's, whose per-user kernel counters the jails share; pass --host-uid-range with ids /proc/self/uid_map maps"
                    ));
                    HostIds::Shared {
                        uid: UNPRIVILEGED_HOST_ID,
                        gid: UNPRIVILEGED_HOST_ID,
                    }
                }
            },
            Some(HostUidRange::Off) | None => {
                let host_uid = options.host_uid.unwrap_or(UNPRIVILEGED_HOST_ID);
                let host_gid = options.host_gid.unwrap_or(UNPRIVILEGED_HOST_ID);
                for (flag, id) in [("--host-uid", host_uid), ("--host-gid", host_gid)] {
                    if id == 0 || id == u32::MAX {
                        return Err(Error::input(format!(
                            "{flag} {id}: the jail must not map to host root or an invalid id; use an unprivileged id such as 65534"
                        )));
                    }
                }
                HostIds::Shared {
                    uid: host_uid,
                    gid: host_gid,
                }
            }
        }
    };
    Ok(Identity {
        home: Path::new("/home").join(&user),
        user,
        uid,
        gid,
        host,
        rootless,
        warning,
        root: false,
    })
}

/// Lets the jail's programs run as root inside (a session's `root`): uid and gid 0 are
/// mapped too, to a second host uid/gid leased for the jail alone. Refused where that
/// cannot be: rootless (an unprivileged user may map its own id only), and with host ids
/// shared by every jail (`--host-uid-range off`, `--host-uid`), where inside root would
/// have no host id of its own. The jail's user must not be 0 itself.
pub fn allow_root(identity: &mut Identity) -> Result<()> {
    can_map_root(identity)?;
    identity.root = true;
    Ok(())
}

/// Whether a jail of `identity` could map root too ([`allow_root`]), else why not.
pub fn can_map_root(identity: &Identity) -> Result<()> {
    if identity.rootless {
        return Err(Error::input(
            "root: a rootless brig serve maps one id into a jail (its own), so there is no second id for root inside; run brig serve as root (with its per-jail host uids) or leave root out",
        ));
    }
    if !matches!(identity.host, HostIds::PerJail { .. }) {
        return Err(Error::input(format!(
            "root: brig serve maps every jail to one shared host id ({} mode: --host-uid-range off or --host-uid/--host-gid), so root inside would have no host id of its own; serve with a --host-uid-range (the default) or leave root out",
            identity.host.mode()
        )));
    }
    if identity.uid == 0 || identity.gid == 0 {
        return Err(Error::input(format!(
            "root: the jail's user is uid {} gid {}, where root needs 0 free for itself; give the user another --uid/--gid (e.g. 1000) or leave root out",
            identity.uid, identity.gid
        )));
    }
    Ok(())
}

/// While it lives, brig's effective uid and gid are a jail's per-jail host ids, so that
/// the user namespace it clones is created by (owned by, charged to) that uid; its real
/// and saved ids stay root's, so its permitted capabilities stay, and the effective ones
/// are raised again (the uid change cleared them) for the clone's other needs (entering
/// the jail's cgroup). Dropped, brig is root again. brig must be single-threaded here
/// (`Jail::assemble` checks it): other threads would keep root's ids (the libc wrappers
/// broadcast setxid to every thread, which is not wanted either).
pub struct AsNamespaceCreator {
    euid: Uid,
    egid: Gid,
    dumpable: bool,
    /// brig's parent-death signal (a server's runner has SIGKILL), which the kernel
    /// clears at any change of the effective ids, and its parent then.
    parent_death: Option<nix::sys::signal::Signal>,
    parent: nix::unistd::Pid,
}

impl AsNamespaceCreator {
    pub fn switch(lease: &Lease) -> Result<AsNamespaceCreator> {
        let uids = nix::unistd::getresuid().context(|| "read brig's uids".into())?;
        let gids = nix::unistd::getresgid().context(|| "read brig's gids".into())?;
        // From here on, every way out restores the ids (the guard's drop).
        let guard = AsNamespaceCreator {
            euid: uids.effective,
            egid: gids.effective,
            dumpable: nix::sys::prctl::get_dumpable().unwrap_or(true),
            parent_death: nix::sys::prctl::get_pdeathsig().ok().flatten(),
            parent: nix::unistd::getppid(),
        };
        setresgid(gids.real, Gid::from_raw(lease.gid), gids.saved)
            .context(|| format!("make {} brig's effective gid", lease.gid))?;
        setresuid(uids.real, Uid::from_raw(lease.uid), uids.saved)
            .context(|| format!("make {} brig's effective uid", lease.uid))?;
        let permitted = caps::read(None, caps::CapSet::Permitted)
            .map_err(|err| Error::setup(format!("read brig's capabilities: {err}")))?;
        caps::set(None, caps::CapSet::Effective, &permitted)
            .map_err(|err| Error::setup(format!("raise brig's capabilities: {err}")))?;
        Ok(guard)
    }
}

impl Drop for AsNamespaceCreator {
    fn drop(&mut self) {
        let restored = nix::unistd::getresuid()
            .and_then(|ids| setresuid(ids.real, self.euid, ids.saved))
            .and_then(|()| nix::unistd::getresgid())
            .and_then(|ids| setresgid(ids.real, self.egid, ids.saved));
        // A uid change made brig undumpable; it was not.
        let _ = nix::sys::prctl::set_dumpable(self.dumpable);
        if restored.is_err() || nix::unistd::geteuid() != self.euid {
            // brig must never go on as a jail's uid.
            eprintln!("brig: could not become root again after creating a jail; stopping");
            std::process::abort();
        }
        // The id changes cleared the parent-death signal: set again, and sent now if the
        // parent died meanwhile (a runner must not outlive its server).
        if let Some(signal) = self.parent_death {
            let _ = nix::sys::prctl::set_pdeathsig(signal);
            if nix::unistd::getppid() != self.parent {
                let _ = nix::sys::signal::raise(signal);
            }
        }
    }
}

/// As root, brig leaves its own supplementary groups behind before creating the jail:
/// afterwards `setgroups` is denied inside, so the jail could never drop them.
pub fn drop_supplementary_groups(identity: &Identity) -> Result<()> {
    if identity.rootless {
        // An unprivileged caller cannot drop groups; inside they show as the overflow gid.
        return Ok(());
    }
    setgroups(&[]).context(|| "drop brig's supplementary groups".into())
}

/// Maps exactly one uid and one gid into the child's user namespace, and denies setgroups;
/// with `root` (a session's root, [`allow_root`]) also 0 to root's own host ids.
pub fn write_id_maps(
    child: Pid,
    identity: &Identity,
    host: &Lease,
    root: Option<&Lease>,
) -> Result<()> {
    let proc_dir = format!("/proc/{child}");
    let (root_uid, root_gid) = match root {
        Some(root) => (format!("0 {} 1\n", root.uid), format!("0 {} 1\n", root.gid)),
        None => (String::new(), String::new()),
    };
    let files = [
        ("setgroups", "deny\n".to_string()),
        (
            "uid_map",
            format!("{root_uid}{} {} 1\n", identity.uid, host.uid),
        ),
        (
            "gid_map",
            format!("{root_gid}{} {} 1\n", identity.gid, host.gid),
        ),
    ];
    for (name, contents) in files {
        let path = format!("{proc_dir}/{name}");
        std::fs::write(&path, contents.as_bytes())
            .context(|| format!("write {} to {path}", contents.trim()))?;
    }
    Ok(())
}

/// The jail's own bounds on the kernel's per-user counters, `/proc/sys/user/NAME` of its
/// user namespace: they hold for every uid in the jail whoever created the namespace,
/// rootless too (where the caller's own counters on the host are charged as well).
pub const NAMESPACE_LIMITS: &[(&str, u64)] = &[
    ("max_inotify_instances", 64),
    ("max_inotify_watches", 16384),
    ("max_fanotify_groups", 16),
    ("max_fanotify_marks", 16384),
    ("max_user_namespaces", 64),
    ("max_mnt_namespaces", 64),
    ("max_pid_namespaces", 64),
    ("max_net_namespaces", 64),
    ("max_ipc_namespaces", 64),
    ("max_uts_namespaces", 64),
    ("max_cgroup_namespaces", 64),
    ("max_time_namespaces", 64),
];

/// Writes [`NAMESPACE_LIMITS`] in the jail's user namespace, through a /proc of brig's or
/// the jail's: the kernel gives each user namespace its own `/proc/sys/user`, writable
/// with CAP_SYS_RESOURCE in it, which the jail's first process still has. A limit this
/// kernel does not have is skipped; with `read_only_is_fine` (brig's own /proc, under
/// `--proc host`), so are they all where that /proc/sys is read-only (a container's).
pub fn bound_user_namespace(read_only_is_fine: bool) -> Result<()> {
    for (name, value) in NAMESPACE_LIMITS {
        let path = format!("/proc/sys/user/{name}");
        match std::fs::write(&path, format!("{value}\n")) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) if read_only_is_fine && err.raw_os_error() == Some(libc::EROFS) => {
                return Ok(());
            }
            Err(err) => {
                return Err(Error::setup(format!(
                    "write {value} to {path} in the jail's user namespace: {err}"
                )));
            }
        }
    }
    Ok(())
}

/// Becomes the jail's user. Capabilities survive this (the process is not uid 0 of the
/// namespace), and are dropped afterwards in one place.
pub fn become_jail_user(identity: &Identity) -> Result<()> {
    let gid = Gid::from_raw(identity.gid);
    let uid = Uid::from_raw(identity.uid);
    setresgid(gid, gid, gid).context(|| format!("setresgid to {gid}"))?;
    setresuid(uid, uid, uid).context(|| format!("setresuid to {uid}"))
}

/// A root session's init keeps uid and gid 0 as its *real* ids (effective and saved stay
/// the user's), so that it may later give a program either identity with no capability
/// (an unprivileged setresuid may set each id to any of the current three), and may
/// signal programs of both: kill(2) asks that the sender's real or effective uid be the
/// target's real or saved one. Its effective ids stay the user's, so the user's
/// processes may signal it as before; ptrace of it stays denied (every id must match,
/// and it is undumpable). First, while init still holds CAP_SETPCAP, the securebits
/// that lock uid 0's special treatment away for every descendant: an execve as 0 gains
/// no capability even were the bounding set not empty.
pub fn keep_root_for_programs(identity: &Identity) -> Result<()> {
    crate::sys::lock_out_root_privileges().context(|| {
        "set SECBIT_NOROOT and its lock (the jail's root gains nothing by exec)".into()
    })?;
    let (uid, gid) = (identity.uid, identity.gid);
    crate::sys::set_task_ids((0, uid, uid), (0, gid, gid))
        .context(|| format!("keep 0 as the real uid and gid of the jail's init (user {uid})"))
}

/// A root session's program becomes who it was asked to run as, all three ids: 0 (root
/// inside, no capability) or the jail's user. Done first thing in every process init
/// starts, so none of them keeps init's real 0.
pub fn become_program_user(identity: &Identity, as_root: bool) -> Result<()> {
    let (uid, gid) = match as_root {
        true => (0, 0),
        false => (identity.uid, identity.gid),
    };
    crate::sys::set_task_ids((uid, uid, uid), (gid, gid, gid))
        .context(|| format!("become uid {uid} gid {gid} in the jail"))
}

#[cfg(test)]
mod tests {
    use super::user_name;

    #[test]
    fn a_user_name_is_checked_before_it_names_a_home() {
        for good in ["user", "_svc", "a-b_9"] {
            assert_eq!(user_name(good).unwrap(), good);
        }
        for (bad, expected) in [
            ("", "use 1 to 32 lowercase"),
            ("User", "use 1 to 32 lowercase"),
            ("9a", "use 1 to 32 lowercase"),
            ("a/b", "use 1 to 32 lowercase"),
            ("..", "use 1 to 32 lowercase"),
            (&"a".repeat(33), "use 1 to 32 lowercase"),
            ("root", "another account's"),
            ("nobody", "another account's"),
        ] {
            let err = user_name(bad).unwrap_err().to_string();
            assert!(err.contains(expected), "{bad:?}: {err}");
            assert!(err.contains("--user"), "{err}");
        }
    }
}
