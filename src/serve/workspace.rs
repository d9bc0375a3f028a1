//! A session's files: put, get and list in its workspace (the jail's home directory, a
//! sized tmpfs). brig works on them through a descriptor of the workspace the jail handed
//! over, from outside the jail: every path is resolved beneath it by openat2(2)
//! (RESOLVE_BENEATH), so that `..`, absolute paths and symlinks leading out are refused by
//! the kernel, race-free, whatever the jail's programs do to the tree meanwhile.

use crate::error::{Error, Result};
use crate::units::Size;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{Mode, SFlag};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

/// The most data one put or get carries (base64 in a frame of at most 1 MiB).
pub const MAX_CHUNK: u64 = 512 << 10;
/// The most entries one `ls` lists (the first by name); the reply says when there were more.
pub const MAX_ENTRIES: usize = 10_000;

/// While it lives, this thread touches files as `(uid, gid)`: the jail user's host ids.
/// The workspace is a tmpfs of the jail's user namespace, where an owner the namespace
/// does not map (brig's root) can create nothing (EOVERFLOW); and as the jail user, brig
/// has no more right to the workspace's files than the jail itself.
pub(super) struct AsJailUser {
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
}

impl AsJailUser {
    pub(super) fn new((uid, gid): (u32, u32)) -> AsJailUser {
        AsJailUser {
            gid: nix::unistd::setfsgid(nix::unistd::Gid::from_raw(gid)),
            uid: nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid)),
        }
    }
}

impl Drop for AsJailUser {
    fn drop(&mut self) {
        nix::unistd::setfsuid(self.uid);
        nix::unistd::setfsgid(self.gid);
    }
}

/// The workspace of one session, with the owner its files get (the jail user's host ids).
pub struct Workspace<'a> {
    pub dir: BorrowedFd<'a>,
    pub owner: (u32, u32),
    /// The jail user's ids as the jail sees them (what stat reports for its files).
    pub jail_ids: (u32, u32),
    pub size: Size,
}

/// One directory entry, as `ls` reports it.
#[derive(Debug, serde::Serialize, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: u64,
    pub mode: u32,
}

pub(super) fn resolve() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS | ResolveFlag::RESOLVE_NO_XDEV
}

/// The path's components, checked: relative, no `..`, no NUL; `.` alone is the workspace.
pub(super) fn components(path: &str) -> Result<Vec<String>> {
    let refuse = |why: &str| {
        Err(Error::input(format!(
            "path {path:?}: {why}; give a path relative to the workspace, e.g. data/in.csv"
        )))
    };
    if path.is_empty() {
        return refuse("empty");
    }
    if path.contains('\0') {
        return refuse("contains a NUL byte");
    }
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => return refuse("`..` is not allowed"),
            Component::RootDir | Component::Prefix(_) => {
                return refuse("absolute paths are not allowed");
            }
        }
    }
    Ok(parts)
}

/// The error for a path the kernel refused to resolve beneath the workspace.
pub(super) fn resolve_error(path: &str, what: &str, errno: Errno) -> Error {
    match errno {
        Errno::EXDEV | Errno::ELOOP => Error::input(format!(
            "path {path:?}: leads out of the workspace (through a symlink or a mount); refused"
        )),
        Errno::ENOENT => Error::input(format!("path {path:?}: no such file in the workspace")),
        Errno::ENOTDIR => Error::input(format!("path {path:?}: a part of it is not a directory")),
        Errno::EISDIR => Error::input(format!("path {path:?}: is a directory")),
        // A FIFO without a reader, a socket: nothing brig writes to.
        Errno::ENXIO | Errno::ENODEV | Errno::EOPNOTSUPP => Error::input(format!(
            "path {path:?}: not a regular file; put and get take regular files only"
        )),
        errno => Error::os(format!("{what} {path:?} in the workspace"), errno),
    }
}

/// The size of `file`, which must be a regular file (not a directory, FIFO or device).
pub(super) fn regular_file(file: &OwnedFd, path: &str) -> Result<u64> {
    let stat = nix::sys::stat::fstat(file).map_err(|errno| Error::os("stat", errno))?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(Error::input(format!(
            "path {path:?}: not a regular file; put and get take regular files only (ls lists directories)"
        )));
    }
    Ok(stat.st_size as u64)
}

impl Workspace<'_> {
    pub(super) fn open_at(
        &self,
        dir: BorrowedFd,
        name: &str,
        flags: OFlag,
        path: &str,
    ) -> Result<OwnedFd> {
        let mut how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(resolve());
        // openat2 takes a mode only for a file it may create.
        if flags.contains(OFlag::O_CREAT) {
            how = how.mode(Mode::from_bits_truncate(0o644));
        }
        nix::fcntl::openat2(dir, name, how).map_err(|errno| resolve_error(path, "open", errno))
    }

    /// The directory `parts` names, created (with its parents, owned by the jail user)
    /// when `create`.
    pub(super) fn directory(&self, parts: &[String], create: bool, path: &str) -> Result<OwnedFd> {
        let mut dir = self.open_at(self.dir, ".", OFlag::O_DIRECTORY | OFlag::O_RDONLY, path)?;
        for part in parts {
            if create {
                match nix::sys::stat::mkdirat(&dir, part.as_str(), Mode::from_bits_truncate(0o755))
                {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(Errno::ENOSPC | Errno::EDQUOT) => return Err(self.full(path)),
                    Err(errno) => return Err(resolve_error(path, "create a directory for", errno)),
                }
            }
            dir = self.open_at(
                dir.as_fd(),
                part,
                OFlag::O_DIRECTORY | OFlag::O_RDONLY,
                path,
            )?;
        }
        Ok(dir)
    }

    pub(super) fn full(&self, path: &str) -> Error {
        Error::input(format!(
            "path {path:?}: the workspace is full (workspace_size {}); remove files or create the session with a larger workspace_size",
            self.size
        ))
    }

    /// Writes `data` to `path` (or appends it), creating its directories; the file's size
    /// after the write.
    pub fn put(&self, path: &str, data: &[u8], append: bool) -> Result<u64> {
        let _as_jail_user = AsJailUser::new(self.owner);
        if data.len() as u64 > MAX_CHUNK {
            return Err(Error::input(format!(
                "session_put: {} bytes in one request; send at most {MAX_CHUNK} and the rest with \"append\": true",
                data.len()
            )));
        }
        let mut parts = components(path)?;
        let Some(name) = parts.pop() else {
            return Err(Error::input(format!(
                "path {path:?}: names the workspace itself; give a file's path"
            )));
        };
        let dir = self.directory(&parts, true, path)?;
        let mode = if append {
            OFlag::O_APPEND
        } else {
            OFlag::O_TRUNC
        };
        // Non-blocking, so that a FIFO planted by the jail cannot hold brig.
        let file = self.open_at(
            dir.as_fd(),
            &name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | mode,
            path,
        )?;
        regular_file(&file, path)?;
        let mut written = 0;
        while written < data.len() {
            match nix::unistd::write(&file, &data[written..]) {
                Ok(count) => written += count,
                Err(Errno::EINTR) => {}
                Err(Errno::ENOSPC | Errno::EDQUOT | Errno::EFBIG) => return Err(self.full(path)),
                Err(errno) => {
                    return Err(Error::os(format!("write {path:?} in the workspace"), errno));
                }
            }
        }
        let stat = nix::sys::stat::fstat(&file).map_err(|errno| Error::os("stat", errno))?;
        Ok(stat.st_size as u64)
    }

    /// The regular file `path` opened for reading (non-blocking: a FIFO the jail planted
    /// cannot hold brig), and its size. The caller is the jail user already.
    pub(super) fn open_regular(&self, path: &str) -> Result<(OwnedFd, u64)> {
        let parts = components(path)?;
        if parts.is_empty() {
            return Err(Error::input(format!(
                "path {path:?}: names the workspace itself; give a file's path"
            )));
        }
        let file = self.open_at(
            self.dir,
            &parts.join("/"),
            OFlag::O_RDONLY | OFlag::O_NONBLOCK,
            path,
        )?;
        let size = regular_file(&file, path)?;
        Ok((file, size))
    }

    /// Up to `length` bytes (at most [`MAX_CHUNK`]) of the regular file `path` from
    /// `offset`, and the file's whole size.
    pub fn get(&self, path: &str, offset: u64, length: Option<u64>) -> Result<(Vec<u8>, u64)> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let (file, size) = self.open_regular(path)?;
        let wanted = length.unwrap_or(MAX_CHUNK).min(MAX_CHUNK);
        let mut data = vec![0u8; wanted.min(size.saturating_sub(offset)) as usize];
        let mut read = 0;
        while read < data.len() {
            match nix::sys::uio::pread(&file, &mut data[read..], (offset + read as u64) as i64) {
                Ok(0) => break,
                Ok(count) => read += count,
                Err(Errno::EINTR) => {}
                Err(errno) => {
                    return Err(Error::os(format!("read {path:?} in the workspace"), errno));
                }
            }
        }
        data.truncate(read);
        Ok((data, size))
    }

    /// The entries of directory `path`, sorted by name: the first [`MAX_ENTRIES`], and
    /// whether there were more.
    pub fn list(&self, path: &str) -> Result<(Vec<Entry>, bool)> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let parts = if path == "." {
            Vec::new()
        } else {
            components(path)?
        };
        let dir = self.directory(&parts, false, path)?;
        let mut entries = Vec::new();
        for name in names(&dir, path)? {
            let Ok(stat) = nix::sys::stat::fstatat(
                &dir,
                name.as_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) else {
                continue;
            };
            let kind = match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFREG => "file",
                SFlag::S_IFDIR => "dir",
                SFlag::S_IFLNK => "symlink",
                _ => "other",
            };
            entries.push(Entry {
                name,
                kind,
                size: if kind == "file" {
                    stat.st_size as u64
                } else {
                    0
                },
                mode: stat.st_mode & 0o7777,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let truncated = entries.len() > MAX_ENTRIES;
        entries.truncate(MAX_ENTRIES);
        Ok((entries, truncated))
    }
}

/// The names in directory `dir` (the workspace's `path`) but `.` and `..`.
pub(super) fn names(dir: &OwnedFd, path: &str) -> Result<Vec<String>> {
    let listing = nix::dir::Dir::from_fd(
        dir.try_clone()
            .map_err(|err| Error::setup(format!("dup: {err}")))?,
    )
    .map_err(|errno| Error::os(format!("list {path:?} in the workspace"), errno))?;
    Ok(listing
        .into_iter()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "." && name != "..")
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace_in(dir: &Path) -> OwnedFd {
        nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty()).unwrap()
    }

    #[test]
    fn files_stay_beneath_the_workspace() {
        let root = std::env::temp_dir().join(format!("brig-workspace-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::write(root.join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink("../secret", root.join("home/out")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("home/abs")).unwrap();
        let fd = workspace_in(&root.join("home"));
        let owner = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let workspace = Workspace {
            dir: fd.as_fd(),
            owner,
            jail_ids: (1000, 1000),
            size: Size(1 << 20),
        };

        assert_eq!(workspace.put("a/b/c.txt", b"hello", false).unwrap(), 5);
        assert_eq!(workspace.put("a/b/c.txt", b" world", true).unwrap(), 11);
        assert_eq!(
            workspace.get("a/b/c.txt", 0, None).unwrap(),
            (b"hello world".to_vec(), 11)
        );
        assert_eq!(
            workspace.get("./a/b/c.txt", 6, Some(3)).unwrap(),
            (b"wor".to_vec(), 11)
        );
        let (entries, truncated) = workspace.list(".").unwrap();
        assert!(!truncated);
        let names: Vec<_> = entries.into_iter().map(|e| (e.name, e.kind)).collect();
        assert_eq!(
            names,
            [
                ("a".into(), "dir"),
                ("abs".into(), "symlink"),
                ("out".into(), "symlink")
            ]
        );

        for (path, needle) in [
            ("../secret", "`..`"),
            ("/etc/passwd", "absolute"),
            ("out", "leads out"),
            ("abs", "leads out"),
            ("", "empty"),
            ("missing", "no such file"),
            ("a", "not a regular file"),
        ] {
            let err = workspace.get(path, 0, None).unwrap_err().to_string();
            assert!(err.contains(needle), "{path}: {err}");
        }
        // The control: followed as any open follows it, `out` does lead out.
        assert_eq!(
            std::fs::read_to_string(root.join("home/out")).unwrap(),
            "outside"
        );
        let err = workspace.put("out", b"x", false).unwrap_err().to_string();
        assert!(err.contains("leads out"), "{err}");
        assert_eq!(
            std::fs::read_to_string(root.join("secret")).unwrap(),
            "outside"
        );
        let err = workspace
            .put("big", &vec![0u8; MAX_CHUNK as usize + 1], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("append"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
