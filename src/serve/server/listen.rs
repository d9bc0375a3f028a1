//! The listening socket, bound so that no one else can swap or reach it.

use crate::error::{Context, Error, Result};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// Binds the socket: 0600, or 0660 for --socket-group. A socket left by a server that
/// died is replaced; one another server listens on is not.
///
/// Nothing is done to the socket by its final path after it appears there: a server
/// running as root that chmods or chowns the path would follow a symlink that someone
/// able to write the directory swapped in, and open a root-only file to the group. So
/// the socket is bound in a directory of brig's own (mode 0700, created next to the
/// path, so the rename stays on one filesystem), given its mode and group there, where
/// no one else can replace it, and renamed into place (RENAME_NOREPLACE: whatever
/// appeared at the path meanwhile is never overwritten). The directory itself must be
/// safe (see `check_socket_dir`), or the socket could be renamed away and replaced
/// after the server started.
pub(super) fn listen(path: &Path, group: Option<nix::unistd::Gid>) -> Result<UnixListener> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    check_socket_dir(path, dir)?;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(Error::input(format!(
                "--socket {}: exists and is not a socket; give another path",
                path.display()
            )));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(Error::input(format!(
                "--socket {}: another brig serve listens there; stop it or give another path",
                path.display()
            )));
        }
        std::fs::remove_file(path)
            .context(|| format!("--socket {}: remove the stale socket", path.display()))?;
    }
    let mut random = [0u8; 8];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").context(|| "open /dev/urandom".into())?,
        &mut random,
    )
    .context(|| "read /dev/urandom".into())?;
    let private = dir.join(format!(".brig-bind-{:016x}", u64::from_ne_bytes(random)));
    nix::unistd::mkdir(&private, nix::sys::stat::Mode::S_IRWXU).map_err(|errno| {
        Error::input(format!(
            "--socket {}: cannot listen there: cannot create {}: {errno}; give a path in a writable directory",
            path.display(),
            private.display()
        ))
    })?;
    let bound = bind_privately(path, &private.join("socket"), group);
    let _ = std::fs::remove_file(private.join("socket"));
    let _ = std::fs::remove_dir(&private);
    let listener = bound?;
    listener
        .set_nonblocking(true)
        .context(|| "make the socket non-blocking".into())?;
    Ok(listener)
}

/// Binds at `inner`, in brig's private directory, and renames the socket to `path`.
fn bind_privately(
    path: &Path,
    inner: &Path,
    group: Option<nix::unistd::Gid>,
) -> Result<UnixListener> {
    // Created with no access for anyone else: no window where others connect.
    let old_umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(inner);
    nix::sys::stat::umask(old_umask);
    let listener = bound.map_err(|err| {
        Error::input(format!(
            "--socket {}: cannot listen there: {err}; give a path in a writable directory",
            path.display()
        ))
    })?;
    if let Some(group) = group {
        // By path, but inside a 0700 directory of brig's: no one else can swap it.
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            inner,
            None,
            Some(group),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .context(|| format!("--socket {}: give it to the group", path.display()))?;
        std::fs::set_permissions(inner, std::fs::Permissions::from_mode(0o660))
            .context(|| format!("--socket {}: chmod 0660", path.display()))?;
    }
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        inner,
        nix::fcntl::AT_FDCWD,
        path,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(|errno| match errno {
        nix::errno::Errno::EEXIST => Error::input(format!(
            "--socket {}: something else appeared there while brig bound its socket; remove it or give another path",
            path.display()
        )),
        errno => Error::os(format!("--socket {}: move the socket into place", path.display()), errno),
    })?;
    Ok(listener)
}

/// The socket's directory, and each above it, must be safe from other users, as sshd's
/// StrictModes wants of a user's files: owned by root or the server's uid, and
/// writable by no one else, unless the sticky bit is set (as on /tmp): there no one
/// else can rename or remove the server's socket. Otherwise someone who can write
/// the directory (a member of its group, say the --socket-group) could rename the
/// socket away and put anything in its place while the server runs.
fn check_socket_dir(path: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(dir).map_err(|err| {
        Error::input(format!(
            "--socket {}: its directory {}: {err}; give a path in an existing directory",
            path.display(),
            dir.display()
        ))
    })?;
    let own = nix::unistd::geteuid().as_raw();
    for ancestor in real.ancestors() {
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        let mode = meta.mode();
        let (problem, fix) = if meta.uid() != 0 && meta.uid() != own {
            (format!("is owned by uid {}", meta.uid()), "chown")
        } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
                (true, true) => format!("its group (gid {}) and all users", meta.gid()),
                (true, false) => format!("its group (gid {})", meta.gid()),
                _ => "all users".to_string(),
            };
            (
                format!("is writable by {who} (mode {:04o})", mode & 0o7777),
                "chmod go-w",
            )
        } else {
            continue;
        };
        return Err(Error::input(format!(
            "--socket {}: directory {} {problem}, who could replace the socket; give a path in a directory only root or uid {own} can write ({fix} {}, or a sticky one like /tmp)",
            path.display(),
            ancestor.display(),
            ancestor.display()
        )));
    }
    Ok(())
}
