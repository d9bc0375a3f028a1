//! Planning the mount tree: the user's `--ro-bind`, `--bind` and `--tmpfs` mounts, their
//! paths checked, and the default layout they go on top of (`layout.rs`).

use super::{MountOp, etc, layout};
use crate::error::{Error, Result};
use crate::identity::Identity;
use crate::net::policy::Policy;
use crate::options::JailOptions;
use crate::units::Size;
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

/// The jail's whole mount tree, in the order the child applies it: the default layout
/// (the host's /usr or a prepared `--rootfs`), then the user's mounts, shallowest first;
/// a user mount on the same place as a default one replaces it.
pub fn plan(
    options: &JailOptions,
    identity: &Identity,
    hostname: &str,
    (tmpfs_size, home_size): (Size, Size),
    network: Option<&Policy>,
) -> Result<(Vec<MountOp>, Option<Rootfs>)> {
    let inputs = layout::Inputs {
        tmpfs_size,
        home_size,
        proc: options.proc.unwrap_or_default(),
        home: &identity.home,
        uid: identity.uid,
        gid: identity.gid,
        etc_files: etc::files(&etc::Account {
            user: &identity.user,
            uid: identity.uid,
            gid: identity.gid,
            home: &identity.home,
            hostname,
            network: network.map(|policy| etc::Network {
                resolver: crate::net::RESOLVER,
                hosts: policy.synthetic_hosts(),
                ca_bundle: policy.secrets.as_ref().map(|secrets| secrets.ca_bundle()),
            }),
        }),
        network: network.is_some(),
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
            check_mount_points(&rootfs, identity)?;
            if network.is_some() {
                check_etc(&rootfs)?;
            }
            rootfs_info = Some(Rootfs {
                digest: brig_rootfs::recorded_digest(&rootfs),
                path: rootfs.clone(),
            });
            layout::prepared_root(&rootfs, &inputs)
        }
        None => layout::host_root(&inputs),
    };
    let user_mounts = resolve_user_mounts(options, tmpfs_size)?;
    mounts.retain(|op| !user_mounts.iter().any(|user| user.dst() == op.dst()));
    mounts.extend(user_mounts);
    check_destinations(&mounts)?;
    Ok((mounts, rootfs_info))
}

/// Where `--workdir DIR` puts DIR in the jail.
pub const WORKDIR: &str = "/work";

pub const DEFAULT_TMPFS_SIZE: Size = Size(64 << 20);
const MIN_TMPFS_SIZE: Size = Size(4 << 10);

#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Rootfs {
    pub path: PathBuf,
    /// `sha256:...` from the root's `.brig-rootfs-digest`, as recorded at build time (not
    /// recomputed: `brig rootfs verify DIR` does that); None for a root without one.
    pub digest: Option<String>,
}

pub fn check_tmpfs_size(field: &str, size: Size) -> Result<()> {
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
    // `--workdir DIR` is `--ro-bind DIR:/work`; its own errors name it.
    let mut workdir = Vec::new();
    if let Some(dir) = &options.workdir {
        let text = dir.to_string_lossy();
        let field = format!("--workdir {text}");
        if !existing_path(&field, &text)?.is_dir() {
            return Err(Error::input(format!(
                "{field}: not a directory; give the directory the program works in"
            )));
        }
        workdir.push(format!("{text}:{WORKDIR}"));
    }
    for (flag, specs, writable) in [
        ("--workdir", &workdir, false),
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

/// A prepared root is bound read-only: the mount points of the runtime mounts must be
/// there already.
fn check_mount_points(rootfs: &Path, identity: &Identity) -> Result<()> {
    let needed = [
        Path::new("/proc"),
        Path::new("/dev"),
        Path::new("/tmp"),
        identity.home.as_path(),
    ];
    let missing: Vec<String> = needed
        .iter()
        .filter(|dir| !rootfs.join(dir.strip_prefix("/").unwrap_or(dir)).is_dir())
        .map(|dir| dir.display().to_string())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if let [only] = missing.as_slice()
        && Path::new(only) == identity.home
        && let Some(user) = only_home(rootfs)
    {
        // A root built for another user (E2B's roots are `user`'s): name the option that
        // fits it rather than a rebuild.
        return Err(Error::input(format!(
            "--rootfs {}: the root has no {only}, the home of the jail's user {:?}; it has /home/{user}: give --user {user} (a session's `user`), or build it for that user (`etc: {{user: NAME, home: /home/NAME}}`)",
            rootfs.display(),
            identity.user
        )));
    }
    Err(Error::input(format!(
        "--rootfs {}: the root lacks {}, where brig mounts the jail's fresh /proc, /dev, /tmp and home; build it with `brig rootfs build`, or create those directories in it",
        rootfs.display(),
        missing.join(", ")
    )))
}

/// The user of a root whose /home holds exactly one directory.
fn only_home(rootfs: &Path) -> Option<String> {
    let mut homes = std::fs::read_dir(rootfs.join("home"))
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()));
    let home = homes.next()?;
    if homes.next().is_some() {
        return None;
    }
    home.file_name().into_string().ok()
}

/// Under `--net filtered` brig lays the jail's resolv.conf and hosts over the root's /etc:
/// it must be a directory there (not a symlink, which brig does not follow).
fn check_etc(rootfs: &Path) -> Result<()> {
    let etc = rootfs.join("etc");
    match std::fs::symlink_metadata(&etc) {
        Ok(meta) if meta.is_dir() => Ok(()),
        found => Err(Error::input(format!(
            "--rootfs {}: {} {}, where brig puts the jail's resolv.conf and hosts for --allow-net/--add-host; create the directory /etc in the root (`brig rootfs build` does), or run without a network",
            rootfs.display(),
            etc.display(),
            if found.is_ok() {
                "is not a directory"
            } else {
                "does not exist"
            },
        ))),
    }
}

/// A warning when a prepared root changed after `brig rootfs build` recorded its digest,
/// as far as a cheap look at its top level tells.
pub fn rootfs_warning(rootfs: &Rootfs) -> Option<String> {
    rootfs.digest.as_ref()?;
    let changed = brig_rootfs::changed_since_recorded(&rootfs.path)?;
    Some(format!(
        "--rootfs {}: {} changed after its digest was recorded, so the digest may not describe what runs; `brig rootfs verify {}` checks every file, `brig rootfs build --force` records it anew",
        rootfs.path.display(),
        changed.display(),
        rootfs.path.display()
    ))
}

/// Warnings for writable binds the jail's user cannot write: it maps to `host`'s ids (a
/// uid of its own from a range owns nothing yet: only world-writable binds are), and the
/// host's permission bits decide (ACLs aside).
pub fn unwritable_binds(mounts: &[MountOp], host: &crate::identity::HostIds) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    mounts
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind {
                src,
                writable: true,
                from: Some(option),
                ..
            } => {
                let meta = std::fs::metadata(src).ok()?;
                let mode = meta.mode();
                let writable = host.fixed().is_some_and(|(host_uid, host_gid)| {
                    (meta.uid() == host_uid && mode & 0o200 != 0)
                        || (meta.gid() == host_gid && mode & 0o020 != 0)
                }) || mode & 0o002 != 0;
                let src = src.display();
                (!writable).then(|| match (host.fixed(), host) {
                    (Some((host_uid, _)), _) => format!(
                        "{option}: {src} is not writable by host uid {host_uid}, which the jail's user maps to, so writes there fail with EACCES; `chown {host_uid} {src}` or make it group- or world-writable"
                    ),
                    (None, crate::identity::HostIds::PerJail { first, last }) => format!(
                        "{option}: {src} is not world-writable, and the jail's user maps to a host uid of its own (one of --host-uid-range {first}-{last}), so writes there fail with EACCES; `chmod 1777 {src}`, or give every jail one host uid with --host-uid (weaker: jails then share per-user kernel counters)"
                    ),
                    (None, _) => unreachable!("only a per-jail range has no fixed ids"),
                })
            }
            _ => None,
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jail_paths_are_normalized_and_checked() {
        assert_eq!(jail_path("f", "/a//b/./c/").unwrap(), Path::new("/a/b/c"));
        assert!(jail_path("f", "a/b").is_err());
        assert!(jail_path("f", "/a/../etc").is_err());
    }
}
