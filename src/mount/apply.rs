//! The mount namespace: builds the jail's root from the plan's mount operations.
//!
//! Sequence (runs in the child, inside the new user and mount namespaces):
//! 1. make every mount private, so nothing propagates back to the host;
//! 2. mount a scratch tmpfs on /tmp and pivot into it: the host tree is now /oldroot,
//!    complete (host /tmp included), and the jail is assembled at /newroot;
//! 3. run the operations in order: sources come from /oldroot, destinations are created
//!    under /newroot without ever following a symlink;
//! 4. pivot into /newroot and detach the scratch root, /oldroot with it: one detach, as
//!    each one waits for an (expedited) RCU grace period;
//! 5. make the root read-only.

use super::MountOp;
use crate::error::{Context, Error, Result};
use crate::sys;
use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::{Mode, SFlag, lstat};
use nix::unistd::{chdir, fchdir, mkdir};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

const SCRATCH: &str = "/tmp";
const NEW_ROOT: &str = "/newroot";
const OLD_ROOT: &str = "/oldroot";

pub fn build_root(ops: &[MountOp]) -> Result<()> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context(|| "make the host's mounts private in the jail's mount namespace".into())?;
    mount(
        Some("tmpfs"),
        SCRATCH,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=64k"),
    )
    .context(|| format!("mount the scratch tmpfs on {SCRATCH}"))?;
    for dir in ["newroot", "oldroot"] {
        let path = Path::new(SCRATCH).join(dir);
        mkdir(&path, Mode::from_bits_truncate(0o755))
            .context(|| format!("create {}", path.display()))?;
    }
    let put_old = CString::new(format!("{SCRATCH}{OLD_ROOT}")).expect("no NUL");
    let scratch = CString::new(SCRATCH).expect("no NUL");
    sys::pivot_root(&scratch, &put_old).context(|| format!("pivot_root into {SCRATCH}"))?;
    chdir("/").context(|| "chdir to the scratch root".into())?;

    let mut root_is_tmpfs = false;
    for op in ops {
        root_is_tmpfs |= matches!(op, MountOp::RootTmpfs { .. });
        apply(op).map_err(|err| match op.from() {
            Some(option) => err.within(option),
            None => err,
        })?;
    }

    let scratch_root = open(
        "/",
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .context(|| "open the scratch root".into())?;
    chdir(NEW_ROOT).context(|| format!("chdir to {NEW_ROOT}"))?;
    // pivot_root(".", ".") stacks the scratch root on top of the new one; detaching it
    // from there leaves the new root alone, without needing a directory inside it. The
    // host's tree, still mounted on the scratch root's /oldroot, goes with it.
    let dot = CString::new(".").expect("no NUL");
    sys::pivot_root(&dot, &dot).context(|| format!("pivot_root into {NEW_ROOT}"))?;
    fchdir(&scratch_root).context(|| "chdir to the scratch root".into())?;
    umount2(".", MntFlags::MNT_DETACH)
        .context(|| "detach the scratch root and the host's tree".into())?;
    drop(scratch_root);
    chdir("/").context(|| "chdir to the jail's root".into())?;
    if root_is_tmpfs {
        remount_read_only(Path::new("/")).context(|| "make the jail's root read-only".into())?;
    }
    Ok(())
}

/// Where a jail path is while the jail is being assembled.
fn staged(dst: &Path) -> PathBuf {
    Path::new(NEW_ROOT).join(dst.strip_prefix("/").unwrap_or(dst))
}

/// Where a host path is while the jail is being assembled.
fn host(src: &Path) -> PathBuf {
    Path::new(OLD_ROOT).join(src.strip_prefix("/").unwrap_or(src))
}

fn apply(op: &MountOp) -> Result<()> {
    match op {
        MountOp::RootTmpfs { size } => mount_tmpfs(
            Path::new(NEW_ROOT),
            &format!("mode=0755,size={}", size.0),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        )
        .context(|| "mount the jail's root tmpfs".into()),
        MountOp::RootBind { src } => {
            bind(&host(src), Path::new(NEW_ROOT))
                .context(|| format!("bind --rootfs {} as the jail's root", src.display()))?;
            set_flags(
                Path::new(NEW_ROOT),
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
            )
            .context(|| format!("make --rootfs {} read-only", src.display()))
        }
        MountOp::Dir { dst } => make_mount_point(dst, Kind::Dir),
        MountOp::Symlink { dst, target } => {
            let parent = dst.parent().unwrap_or(Path::new("/"));
            make_mount_point(parent, Kind::Dir)?;
            std::os::unix::fs::symlink(target, staged(dst)).context(|| {
                format!(
                    "create the symlink {} -> {}",
                    dst.display(),
                    target.display()
                )
            })
        }
        MountOp::Bind {
            src,
            dst,
            writable,
            is_dir,
            ..
        } => {
            make_mount_point(dst, if *is_dir { Kind::Dir } else { Kind::File })?;
            let what = || format!("bind {} to {} in the jail", src.display(), dst.display());
            bind(&host(src), &staged(dst)).context(what)?;
            let mut flags = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
            if !writable {
                flags |= sys::MOUNT_ATTR_RDONLY;
            }
            set_flags(&staged(dst), flags).context(what)
        }
        MountOp::Device { src, dst } => {
            make_mount_point(dst, Kind::File)?;
            let what = || format!("bind the device {} into the jail", src.display());
            bind(&host(src), &staged(dst)).context(what)?;
            set_flags(
                &staged(dst),
                sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
            )
            .context(what)
        }
        MountOp::Tmpfs {
            dst,
            size,
            mode,
            owner,
            exec,
            ..
        } => {
            make_mount_point(dst, Kind::Dir)?;
            let mut data = format!("mode={mode:04o},size={}", size.0);
            if let Some(owner) = owner {
                data.push_str(&format!(",uid={},gid={}", owner.uid, owner.gid));
            }
            let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
            if !exec {
                flags |= MsFlags::MS_NOEXEC;
            }
            mount_tmpfs(&staged(dst), &data, flags)
                .context(|| format!("mount a tmpfs on {} in the jail", dst.display()))
        }
        MountOp::Proc { dst } => {
            make_mount_point(dst, Kind::Dir)?;
            mount(
                Some("proc"),
                &staged(dst),
                Some("proc"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .map_err(|errno| {
                Error::os(format!("mount a fresh /proc on {}", dst.display()), errno).hint(
                    "the host hides parts of its /proc (common inside containers): unmask it (Podman `--security-opt unmask=/proc/*`, Docker `--security-opt systempaths=unconfined`, Kubernetes `procMount: Unmasked`), or use `--proc host` (brig's own /proc, read-only; reported)",
                )
            })
        }
        MountOp::Devpts { dst } => {
            make_mount_point(dst, Kind::Dir)?;
            mount(
                Some("devpts"),
                &staged(dst),
                Some("devpts"),
                MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
                Some("newinstance,ptmxmode=0666,mode=0620"),
            )
            .context(|| format!("mount a private devpts on {}", dst.display()))
        }
        MountOp::ReadOnly { dst } => {
            remount_read_only(&staged(dst)).context(|| format!("make {} read-only", dst.display()))
        }
        MountOp::Overlay { dst, files } => overlay(dst, files),
        MountOp::File { dst, contents } => {
            let parent = dst.parent().unwrap_or(Path::new("/"));
            make_mount_point(parent, Kind::Dir)?;
            write_new_file(&staged(dst), contents.as_bytes())
                .context(|| format!("write {} in the jail", dst.display()))
        }
    }
}

/// Lays a read-only overlay on `dst` of a prepared root, its upper layer a small tmpfs on
/// the scratch root, and writes `files` there over whatever the root has (a file, a
/// symlink, nothing). Mounted inside the jail's user namespace, so the overlay keeps its
/// own metadata in user.* extended attributes (`userxattr`).
fn overlay(dst: &Path, files: &[(PathBuf, String)]) -> Result<()> {
    let what = || format!("lay the jail's files over {} of --rootfs", dst.display());
    let layers = Path::new("/").join(format!(
        "overlay{}",
        dst.display().to_string().replace('/', "-")
    ));
    mkdir(&layers, Mode::from_bits_truncate(0o755)).context(what)?;
    mount_tmpfs(
        &layers,
        "mode=0755,size=256k",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
    )
    .context(what)?;
    let (upper, work) = (layers.join("upper"), layers.join("work"));
    for dir in [&upper, &work] {
        mkdir(dir, Mode::from_bits_truncate(0o755)).context(what)?;
    }
    let target = staged(dst);
    let options = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        target.display(),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        &target,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .context(what)?;
    for (file, contents) in files {
        let path = staged(file);
        match lstat(&path) {
            Ok(stat)
                if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR =>
            {
                return Err(Error::input(format!(
                    "--rootfs: {} is a directory in the root but brig writes the jail's file there; remove it from the root",
                    file.display()
                )));
            }
            Ok(_) => nix::unistd::unlink(&path)
                .context(|| format!("replace {} of --rootfs", file.display()))?,
            Err(Errno::ENOENT) => {}
            Err(errno) => {
                return Err(Error::os(
                    format!("inspect {} in the jail", file.display()),
                    errno,
                ));
            }
        }
        write_new_file(&path, contents.as_bytes())
            .context(|| format!("write {} in the jail", file.display()))?;
    }
    remount_read_only(&target).context(what)
}

/// A mount brig made itself (a tmpfs): read-only, and nothing on it runs or is a device.
fn remount_read_only(path: &Path) -> Result<(), Errno> {
    let flags = MsFlags::MS_REMOUNT
        | MsFlags::MS_BIND
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | MsFlags::MS_NOEXEC;
    mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
}

fn mount_tmpfs(path: &Path, data: &str, flags: MsFlags) -> Result<(), Errno> {
    mount(Some("tmpfs"), path, Some("tmpfs"), flags, Some(data))
}

fn bind(src: &Path, dst: &Path) -> Result<(), Errno> {
    mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
}

/// Adds mount flags to a mount and all mounts below it. Flags the host locked on a mount
/// are kept as they are: only flags are added, none cleared.
fn set_flags(path: &Path, attrs: u64) -> Result<(), Errno> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    match sys::mount_setattr_recursive(&c_path, attrs) {
        Err(Errno::ENOSYS) => remount_with_flags(path, attrs),
        other => other,
    }
}

/// Fallback for kernels before 5.12: remount the top mount only, keeping the flags it
/// has, since a user namespace may not clear flags the host locked.
fn remount_with_flags(path: &Path, attrs: u64) -> Result<(), Errno> {
    use nix::sys::statvfs::{FsFlags, statvfs};
    let current = statvfs(path)?.flags();
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND;
    let keep = [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ];
    for (have, as_mount_flag) in keep {
        if current.contains(have) {
            flags |= as_mount_flag;
        }
    }
    let add = [
        (sys::MOUNT_ATTR_RDONLY, MsFlags::MS_RDONLY),
        (sys::MOUNT_ATTR_NOSUID, MsFlags::MS_NOSUID),
        (sys::MOUNT_ATTR_NODEV, MsFlags::MS_NODEV),
        (sys::MOUNT_ATTR_NOEXEC, MsFlags::MS_NOEXEC),
    ];
    for (attr, as_mount_flag) in add {
        if attrs & attr != 0 {
            flags |= as_mount_flag;
        }
    }
    mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
}

fn write_new_file(path: &Path, contents: &[u8]) -> Result<(), Errno> {
    let fd = open(
        path,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    let mut written = 0;
    while written < contents.len() {
        written += nix::unistd::write(&fd, &contents[written..])?;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Dir,
    File,
}

/// Makes sure `dst` (a path inside the jail) exists as a directory or file to mount on,
/// creating what is missing. No component may be a symlink: a destination that resolves
/// through one could land outside the jail's root or on another mount than intended.
fn make_mount_point(dst: &Path, kind: Kind) -> Result<()> {
    let components: Vec<_> = dst
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect();
    let mut jail_path = PathBuf::from("/");
    for (index, part) in components.iter().enumerate() {
        jail_path.push(part);
        let is_last = index + 1 == components.len();
        let want = if is_last { kind } else { Kind::Dir };
        let path = staged(&jail_path);
        match lstat(&path) {
            Ok(stat) => {
                let file_type = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
                if file_type == SFlag::S_IFLNK {
                    return Err(Error::input(format!(
                        "{} is a symlink in the jail; name the real path instead, symlinks are not followed",
                        jail_path.display()
                    )));
                }
                let is_dir = file_type == SFlag::S_IFDIR;
                if (want == Kind::Dir) != is_dir {
                    let (expected, found) = if is_dir {
                        ("a file", "a directory")
                    } else {
                        ("a directory", "a file")
                    };
                    return Err(Error::input(format!(
                        "{} is {found} in the jail but {expected} is needed there; pick another destination",
                        jail_path.display()
                    )));
                }
            }
            Err(Errno::ENOENT) => {
                let created = match want {
                    Kind::Dir => mkdir(&path, Mode::from_bits_truncate(0o755)),
                    Kind::File => write_new_file(&path, b""),
                };
                created.map_err(|errno| {
                    let fix = if errno == Errno::EROFS {
                        "it lies on a read-only mount; choose a destination that exists there or lies outside it (e.g. under /mnt)"
                    } else {
                        "choose another destination"
                    };
                    Error::os(format!("create the mount point {} in the jail", jail_path.display()), errno)
                        .hint(fix)
                })?;
            }
            Err(errno) => {
                return Err(Error::os(
                    format!("inspect {} in the jail", jail_path.display()),
                    errno,
                ));
            }
        }
    }
    Ok(())
}
