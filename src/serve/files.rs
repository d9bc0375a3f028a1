//! A session's files beyond put/get/ls: stat, exists, mkdir, rename, remove, a listing
//! with depth, and files of any size streamed on the request's connection
//! (`session_write`, `session_read`). Every path is resolved beneath the workspace by the
//! kernel (openat2 with RESOLVE_BENEATH, as in `workspace.rs`), and whatever walks a tree
//! (remove, a deep listing) opens each directory with O_NOFOLLOW relative to its parent's
//! descriptor: a symlink the jail plants is an entry, never a way out.

use super::protocol::{self, Request};
use super::reply::{FileEntry, SessionReply, WatchEvent};
use super::watch::Watches;
use super::workspace::{self, AsJailUser, Workspace};
use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, SpliceFFlags};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

/// How deep a listing goes at most (`depth`), and a removal: a tree deeper than this is
/// refused rather than walked with one descriptor a level.
pub const MAX_DEPTH: u32 = 64;
/// The pipe a streamed write is spliced through (and the most one splice moves): what the
/// runner holds of a file of any size.
const STREAM_BUFFER: usize = 256 << 10;
/// What one sendfile(2) moves at most, so that the stall clock is looked at between.
const SEND_CHUNK: usize = 1 << 20;

/// Whether `request` is one this module answers (`session_ls` with a depth too).
pub fn answers(request: &Request) -> bool {
    matches!(
        request,
        Request::SessionLs { depth: Some(_), .. }
            | Request::SessionStat { .. }
            | Request::SessionExists { .. }
            | Request::SessionMkdir { .. }
            | Request::SessionRename { .. }
            | Request::SessionRemove { .. }
            | Request::SessionWrite { .. }
            | Request::SessionRead { .. }
            | Request::SessionWatch { .. }
            | Request::SessionWatchEvents { .. }
            | Request::SessionUnwatch { .. }
    )
}

/// Answers one files request: the reply, or `None` when the answer went out on the
/// connection already (a read's data).
pub fn handle(
    workspace: &Workspace,
    watches: &mut Watches,
    request: Request,
    connection: &OwnedFd,
    (end_by, drain): (Option<Instant>, Option<Drain>),
) -> Result<Option<SessionReply>> {
    let reply = match request {
        Request::SessionLs {
            path,
            depth: Some(depth),
            ..
        } => {
            let (entries, truncated) = workspace.list_deep(&path, depth)?;
            SessionReply::Ls {
                path,
                entries: entries.into_iter().map(FileEntry::from).collect(),
                truncated,
            }
        }
        Request::SessionStat { path, .. } => SessionReply::Stat {
            entry: workspace.stat(&path)?.into(),
        },
        Request::SessionExists { path, .. } => {
            let exists = workspace.exists(&path)?;
            SessionReply::Exists { path, exists }
        }
        Request::SessionMkdir { path, parents, .. } => {
            let created = workspace.make_dir(&path, parents)?;
            SessionReply::Mkdir { path, created }
        }
        Request::SessionRename {
            source,
            destination,
            ..
        } => {
            workspace.rename(&source, &destination)?;
            SessionReply::Renamed {
                source,
                destination,
            }
        }
        Request::SessionRemove { path, .. } => {
            let removed = workspace.remove(&path)?;
            SessionReply::Removed { path, removed }
        }
        Request::SessionWrite { path, size, .. } => {
            let stream = Stream::new(connection, end_by, drain);
            let size = workspace.write_stream(&path, size, &stream)?;
            SessionReply::Written { path, size }
        }
        Request::SessionRead {
            path,
            offset,
            length,
            ..
        } => {
            let stream = Stream::new(connection, end_by, drain);
            workspace.read_stream(&path, offset, length, &stream)?;
            return Ok(None);
        }
        Request::SessionWatch {
            path, recursive, ..
        } => {
            let id = watches.create(workspace, &path, recursive)?;
            SessionReply::Watcher {
                watcher: id,
                path,
                recursive,
                stream: None,
            }
        }
        Request::SessionWatchEvents { watcher, .. } => {
            let (events, overflow) = watches.events(workspace, &watcher)?;
            SessionReply::Events {
                watcher,
                events: events.into_iter().map(WatchEvent::from).collect(),
                overflow,
            }
        }
        Request::SessionUnwatch { watcher, .. } => {
            watches.remove(&watcher)?;
            SessionReply::Unwatched { watcher }
        }
        _ => {
            return Err(Error::input(
                "brig serve: a files request the runner does not know",
            ));
        }
    };
    Ok(Some(reply))
}

/// One entry as stat and a listing report it.
#[derive(Debug, serde::Serialize, PartialEq)]
pub struct Stat {
    pub name: String,
    /// Relative to the workspace.
    pub path: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: u64,
    pub mode: u32,
    /// As the jail sees them (the jail user's ids for its files).
    pub uid: u32,
    pub gid: u32,
    /// Seconds since the epoch.
    pub mtime: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

pub(super) fn kind_of(stat: &FileStat) -> &'static str {
    match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => "file",
        SFlag::S_IFDIR => "dir",
        SFlag::S_IFLNK => "symlink",
        _ => "other",
    }
}

/// The server's control socket, whose hang-up starts the drain, and the drain's grace.
pub type Drain<'a> = (BorrowedFd<'a>, std::time::Duration);

/// The client's connection, on which a stream's bytes go, each step within the stall
/// time ([`protocol::REPLY_TIMEOUT`]) and never past the session's end, nor past the
/// drain's grace once the server drains.
pub struct Stream<'a> {
    connection: BorrowedFd<'a>,
    end_by: std::cell::Cell<Option<Instant>>,
    drain: std::cell::Cell<Option<Drain<'a>>>,
    /// Whether the server began to drain during the transfer.
    drained: std::cell::Cell<bool>,
}

impl<'a> Stream<'a> {
    fn new(
        connection: &'a OwnedFd,
        end_by: Option<Instant>,
        drain: Option<Drain<'a>>,
    ) -> Stream<'a> {
        // Non-blocking: every wait is a poll with a timeout.
        let _ = nix::fcntl::fcntl(connection, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
        Stream {
            connection: connection.as_fd(),
            end_by: end_by.into(),
            drain: drain.into(),
            drained: false.into(),
        }
    }

    /// Waits until the connection is ready for `flags`; an error when the client stalls,
    /// the session ends or the drain's grace is over.
    fn wait(&self, flags: PollFlags, what: &str) -> Result<()> {
        let stall_until = Instant::now() + protocol::REPLY_TIMEOUT;
        loop {
            let end = self.end_by.get();
            let until = end.map_or(stall_until, |end| end.min(stall_until));
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let why = match (
                    self.drained.get(),
                    end.is_some_and(|end| end <= stall_until),
                ) {
                    (true, _) => "the server is draining".to_string(),
                    (false, true) => "the session ended".to_string(),
                    (false, false) => format!(
                        "the client moved no data for {} s",
                        protocol::REPLY_TIMEOUT.as_secs()
                    ),
                };
                return Err(Error::input(format!("{what}: {why}; the transfer is cut")));
            }
            let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
            // The control socket is polled for its hang-up only (poll always reports it).
            let mut fds = vec![PollFd::new(self.connection, flags)];
            if let Some((control, _)) = self.drain.get() {
                fds.push(PollFd::new(control, PollFlags::empty()));
            }
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) | Err(Errno::EINTR) => {}
                Ok(_) => {
                    let hung_up = fds.get(1).and_then(PollFd::revents).is_some_and(|events| {
                        events.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)
                    });
                    if hung_up && let Some((_, grace)) = self.drain.take() {
                        let drain_by = Instant::now() + grace;
                        self.end_by
                            .set(Some(end.map_or(drain_by, |end| end.min(drain_by))));
                        self.drained.set(true);
                    }
                    if fds[0].any().unwrap_or(false) {
                        return Ok(());
                    }
                }
                Err(errno) => return Err(Error::os(format!("{what}: poll"), errno)),
            }
        }
    }
}

impl Workspace<'_> {
    /// The parent directory of `path` (not created) and its last component; `None` for
    /// the workspace itself.
    fn parent_of(&self, path: &str) -> Result<Option<(OwnedFd, String)>> {
        let mut parts = workspace::components(path)?;
        let Some(name) = parts.pop() else {
            return Ok(None);
        };
        Ok(Some((self.directory(&parts, false, path)?, name)))
    }

    fn stat_entry(
        &self,
        stat: &FileStat,
        name: String,
        path: String,
        link: Option<String>,
    ) -> Stat {
        let jail_id = |id: u32, host: u32, jail: u32| if id == host { jail } else { id };
        Stat {
            name,
            path,
            kind: kind_of(stat),
            size: stat.st_size as u64,
            mode: stat.st_mode & 0o7777,
            uid: jail_id(stat.st_uid, self.owner.0, self.jail_ids.0),
            gid: jail_id(stat.st_gid, self.owner.1, self.jail_ids.1),
            mtime: stat.st_mtime as f64 + stat.st_mtime_nsec as f64 / 1e9,
            symlink_target: link,
        }
    }

    /// What `path` is (a symlink is reported as itself, with its target).
    pub fn stat(&self, path: &str) -> Result<Stat> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let normal = workspace::components(path)?.join("/");
        let Some((dir, name)) = self.parent_of(path)? else {
            let stat = nix::sys::stat::fstat(self.dir)
                .map_err(|errno| Error::os("stat the workspace", errno))?;
            return Ok(self.stat_entry(&stat, ".".into(), ".".into(), None));
        };
        let stat = nix::sys::stat::fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|errno| workspace::resolve_error(path, "stat", errno))?;
        let link = (kind_of(&stat) == "symlink")
            .then(|| nix::fcntl::readlinkat(&dir, name.as_str()).ok())
            .flatten()
            .map(|target| target.to_string_lossy().into_owned());
        Ok(self.stat_entry(&stat, name, normal, link))
    }

    /// Whether `path` names something (a dangling symlink does); a path that leads out
    /// is still an error.
    pub fn exists(&self, path: &str) -> Result<bool> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let parts = workspace::components(path)?;
        if parts.is_empty() {
            return Ok(true);
        }
        // O_PATH with O_NOFOLLOW: the name itself, a symlink included, opened beneath the
        // workspace like any path (a component leading out is refused, not "missing").
        let how = nix::fcntl::OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(workspace::resolve());
        match nix::fcntl::openat2(self.dir, parts.join("/").as_str(), how) {
            Ok(_) => Ok(true),
            Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(false),
            Err(errno) => Err(workspace::resolve_error(path, "look up", errno)),
        }
    }

    /// Makes directory `path` (with its parents when `parents`); whether it was made
    /// (false: it was there).
    pub fn make_dir(&self, path: &str, parents: bool) -> Result<bool> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let mut parts = workspace::components(path)?;
        let Some(name) = parts.pop() else {
            return Ok(false);
        };
        let dir = self.directory(&parts, parents, path)?;
        match nix::sys::stat::mkdirat(&dir, name.as_str(), Mode::from_bits_truncate(0o755)) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => {
                let stat =
                    nix::sys::stat::fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map_err(|errno| workspace::resolve_error(path, "stat", errno))?;
                match kind_of(&stat) {
                    "dir" => Ok(false),
                    _ => Err(Error::input(format!(
                        "path {path:?}: exists and is not a directory; remove it first or pick another name"
                    ))),
                }
            }
            Err(Errno::ENOSPC | Errno::EDQUOT) => Err(self.full(path)),
            Err(errno) => Err(workspace::resolve_error(path, "make directory", errno)),
        }
    }

    /// Moves `source` to `destination` (replacing a file there, as mv does); a symlink
    /// moves as itself.
    pub fn rename(&self, source: &str, destination: &str) -> Result<()> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let workspace_itself = |path: &str| {
            Error::input(format!(
                "path {path:?}: names the workspace itself; give a path beneath it"
            ))
        };
        let (from_dir, from) = self
            .parent_of(source)?
            .ok_or_else(|| workspace_itself(source))?;
        let (to_dir, to) = self
            .parent_of(destination)?
            .ok_or_else(|| workspace_itself(destination))?;
        nix::fcntl::renameat(&from_dir, from.as_str(), &to_dir, to.as_str()).map_err(|errno| {
            match errno {
                Errno::EINVAL => Error::input(format!(
                    "rename {source:?} to {destination:?}: a directory cannot move beneath itself"
                )),
                Errno::ENOTEMPTY | Errno::EEXIST => Error::input(format!(
                    "rename {source:?} to {destination:?}: the destination is a directory that is not empty; remove it first"
                )),
                Errno::EISDIR | Errno::ENOTDIR => Error::input(format!(
                    "rename {source:?} to {destination:?}: one is a directory and the other is not"
                )),
                Errno::ENOENT => Error::input(format!("path {source:?}: no such file in the workspace")),
                errno => workspace::resolve_error(source, "rename", errno),
            }
        })
    }

    /// Removes `path`: a file, a symlink (the link, never its target) or a directory
    /// with everything beneath it; how many entries went.
    pub fn remove(&self, path: &str) -> Result<u64> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let (dir, name) = self.parent_of(path)?.ok_or_else(|| {
            Error::input(format!(
                "path {path:?}: names the workspace itself; remove what is in it instead"
            ))
        })?;
        remove_entry(dir.as_fd(), &name, path, 0)
    }

    /// The entries beneath directory `path`, `depth` levels deep (1: its own), sorted by
    /// path: the first [`workspace::MAX_ENTRIES`], and whether there were more.
    pub fn list_deep(&self, path: &str, depth: u32) -> Result<(Vec<Stat>, bool)> {
        if depth == 0 || depth > MAX_DEPTH {
            return Err(Error::input(format!(
                "session_ls: \"depth\" {depth} is out of range; give 1 (the directory's own entries) to {MAX_DEPTH}"
            )));
        }
        let _as_jail_user = AsJailUser::new(self.owner);
        let parts = workspace::components(path)?;
        let dir = self.directory(&parts, false, path)?;
        let mut entries = Vec::new();
        let mut truncated = false;
        self.list_into(dir, &parts.join("/"), depth, &mut entries, &mut truncated)?;
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((entries, truncated))
    }

    fn list_into(
        &self,
        dir: OwnedFd,
        prefix: &str,
        depth: u32,
        entries: &mut Vec<Stat>,
        truncated: &mut bool,
    ) -> Result<()> {
        for name in workspace::names(&dir, prefix)? {
            if entries.len() >= workspace::MAX_ENTRIES {
                *truncated = true;
                return Ok(());
            }
            let Ok(stat) =
                nix::sys::stat::fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            let path = join(prefix, &name);
            let link = (kind_of(&stat) == "symlink")
                .then(|| nix::fcntl::readlinkat(&dir, name.as_str()).ok())
                .flatten()
                .map(|target| target.to_string_lossy().into_owned());
            let is_dir = kind_of(&stat) == "dir";
            entries.push(self.stat_entry(&stat, name.clone(), path.clone(), link));
            if is_dir && depth > 1 {
                // Gone or swapped for a symlink meanwhile: not walked.
                if let Ok(child) = open_child_dir(dir.as_fd(), &name) {
                    self.list_into(child, &path, depth - 1, entries, truncated)?;
                }
            }
        }
        Ok(())
    }

    /// Writes `size` bytes the client streams on the connection to `path` (replacing
    /// it, creating its directories), spliced through a pipe of [`STREAM_BUFFER`]. The
    /// client is told `ready` first, then sends the bytes raw. A write that fails leaves
    /// no file.
    pub fn write_stream(&self, path: &str, size: u64, stream: &Stream) -> Result<u64> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let mut parts = workspace::components(path)?;
        let Some(name) = parts.pop() else {
            return Err(Error::input(format!(
                "path {path:?}: names the workspace itself; give a file's path"
            )));
        };
        let dir = self.directory(&parts, true, path)?;
        // Non-blocking, so that a FIFO planted by the jail cannot hold brig.
        let file = self.open_at(
            dir.as_fd(),
            &name,
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_NOFOLLOW
                | OFlag::O_NONBLOCK
                | OFlag::O_TRUNC,
            path,
        )?;
        workspace::regular_file(&file, path)?;
        let fail = |err: Error| {
            // Only the file this write made: the jail may have put another in its place.
            let ours = nix::sys::stat::fstat(&file).ok();
            let there =
                nix::sys::stat::fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).ok();
            if let (Some(ours), Some(there)) = (ours, there)
                && (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino)
            {
                let _ = nix::unistd::unlinkat(&dir, name.as_str(), UnlinkatFlags::NoRemoveDir);
            }
            err
        };
        let free = nix::sys::statvfs::fstatvfs(&dir)
            .map(|vfs| vfs.blocks_available().saturating_mul(vfs.fragment_size()))
            .unwrap_or(u64::MAX);
        if size > free {
            return Err(fail(self.full(path)));
        }
        protocol::write_frame(
            stream.connection,
            &SessionReply::Ready {
                path: path.into(),
                size,
            },
            &[],
        )
        .map_err(&fail)?;
        let what = format!("session_write {path:?}");
        // socket -> pipe -> file by splice(2): the bytes are copied once (into the
        // file's pages), never through the runner's memory; the pipe holds at most
        // STREAM_BUFFER.
        let (from_socket, into_pipe) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
            .map_err(|errno| fail(Error::os(format!("{what}: pipe"), errno)))?;
        let _ = nix::fcntl::fcntl(
            &into_pipe,
            nix::fcntl::FcntlArg::F_SETPIPE_SZ(STREAM_BUFFER as i32),
        );
        let moving = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        let mut done = 0u64;
        while done < size {
            let want = STREAM_BUFFER.min((size - done) as usize);
            let count = match nix::fcntl::splice(
                stream.connection,
                None,
                &into_pipe,
                None,
                want,
                moving,
            ) {
                Ok(0) => {
                    return Err(fail(Error::input(format!(
                        "{what}: the client closed the connection after {done} of {size} bytes; nothing was kept"
                    ))));
                }
                Ok(count) => count,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => {
                    stream.wait(PollFlags::POLLIN, &what).map_err(fail)?;
                    continue;
                }
                Err(errno) => {
                    return Err(fail(Error::os(
                        format!("{what}: read the connection"),
                        errno,
                    )));
                }
            };
            let mut written = 0;
            while written < count {
                match nix::fcntl::splice(&from_socket, None, &file, None, count - written, moving) {
                    Ok(n) => written += n,
                    Err(Errno::EINTR) => {}
                    Err(Errno::ENOSPC | Errno::EDQUOT | Errno::EFBIG) => {
                        return Err(fail(self.full(path)));
                    }
                    Err(errno) => {
                        return Err(fail(Error::os(
                            format!("write {path:?} in the workspace"),
                            errno,
                        )));
                    }
                }
            }
            done += count as u64;
        }
        Ok(done)
    }

    /// Streams `path` (from `offset`, `length` bytes or to its end) to the client: a
    /// `reading` frame with the count, then the bytes raw, by sendfile(2) (no buffer in
    /// the runner). A file that shrinks meanwhile ends the connection short.
    pub fn read_stream(
        &self,
        path: &str,
        offset: u64,
        length: Option<u64>,
        stream: &Stream,
    ) -> Result<()> {
        let _as_jail_user = AsJailUser::new(self.owner);
        let (file, size) = self.open_regular(path)?;
        let count = length.unwrap_or(u64::MAX).min(size.saturating_sub(offset));
        protocol::write_frame(
            stream.connection,
            &SessionReply::Reading {
                path: path.into(),
                size,
                offset,
                length: count,
            },
            &[],
        )?;
        let what = format!("session_read {path:?}");
        let mut at = offset as libc::off64_t;
        let end = offset + count;
        while (at as u64) < end {
            let chunk = SEND_CHUNK.min((end - at as u64) as usize);
            match nix::sys::sendfile::sendfile64(stream.connection, &file, Some(&mut at), chunk) {
                // The file shrank: the client sees the connection end short.
                Ok(0) => {
                    return Err(Error::input(format!(
                        "{what}: the file shrank while it was read"
                    )));
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => stream.wait(PollFlags::POLLOUT, &what)?,
                Err(errno) => return Err(Error::os(format!("{what}: send"), errno)),
            }
        }
        Ok(())
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// Directory `name` in `dir`, opened without following a symlink (nor leaving `dir`).
fn open_child_dir(dir: BorrowedFd, name: &str) -> nix::Result<OwnedFd> {
    let how = nix::fcntl::OpenHow::new()
        .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(workspace::resolve());
    nix::fcntl::openat2(dir, name, how)
}

/// Removes `name` in `dir`, and if it is a directory (not a symlink to one), what is in
/// it first, each level opened from the one above with O_NOFOLLOW; the count removed.
fn remove_entry(dir: BorrowedFd, name: &str, path: &str, level: u32) -> Result<u64> {
    let stat = nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|errno| workspace::resolve_error(path, "remove", errno))?;
    if kind_of(&stat) != "dir" {
        nix::unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)
            .map_err(|errno| workspace::resolve_error(path, "remove", errno))?;
        return Ok(1);
    }
    if level >= MAX_DEPTH {
        return Err(Error::input(format!(
            "path {path:?}: the tree is deeper than {MAX_DEPTH} levels; remove its deepest part first"
        )));
    }
    let child = open_child_dir(dir, name)
        .map_err(|errno| workspace::resolve_error(path, "remove", errno))?;
    let mut removed = 0;
    for entry in workspace::names(&child, path)? {
        removed += remove_entry(child.as_fd(), &entry, &join(path, &entry), level + 1)?;
    }
    nix::unistd::unlinkat(dir, name, UnlinkatFlags::RemoveDir).map_err(|errno| match errno {
        Errno::ENOTEMPTY => Error::input(format!(
            "path {path:?}: something was added to it while it was removed; remove it again"
        )),
        errno => workspace::resolve_error(path, "remove", errno),
    })?;
    Ok(removed + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Size;
    use std::path::Path;

    fn workspace_fd(dir: &Path) -> OwnedFd {
        nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_RDONLY, Mode::empty()).unwrap()
    }

    #[test]
    fn trees_are_walked_by_descriptor_and_never_through_a_symlink() {
        let root = std::env::temp_dir().join(format!("brig-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let home = root.join("home");
        std::fs::create_dir_all(home.join("a/b/c")).unwrap();
        std::fs::create_dir_all(root.join("outside/deep")).unwrap();
        std::fs::write(root.join("outside/deep/keep"), "host").unwrap();
        std::fs::write(home.join("a/b/c/f"), "12345").unwrap();
        std::os::unix::fs::symlink(root.join("outside"), home.join("a/b/out")).unwrap();
        std::os::unix::fs::symlink("../..", home.join("a/up")).unwrap();
        let fd = workspace_fd(&home);
        let ids = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let workspace = Workspace {
            dir: fd.as_fd(),
            owner: ids,
            jail_ids: (1000, 1000),
            size: Size(1 << 20),
        };

        let (entries, truncated) = workspace.list_deep(".", 10).unwrap();
        let paths: Vec<_> = entries.iter().map(|e| (e.path.as_str(), e.kind)).collect();
        assert_eq!(
            paths,
            [
                ("a", "dir"),
                ("a/b", "dir"),
                ("a/b/c", "dir"),
                ("a/b/c/f", "file"),
                ("a/b/out", "symlink"),
                ("a/up", "symlink"),
            ]
        );
        assert!(!truncated);
        // The owner's files are the jail user's, as the jail sees them.
        assert_eq!((entries[3].uid, entries[3].size), (1000, 5));
        let link = workspace.stat("a/up").unwrap();
        assert_eq!(link.symlink_target.as_deref(), Some("../.."));
        assert!(workspace.exists("a/b/out").unwrap());
        assert!(!workspace.exists("a/nothing/here").unwrap());
        let err = workspace.exists("a/b/out/deep").unwrap_err().to_string();
        assert!(err.contains("leads out"), "{err}");
        let err = workspace.remove("a/up/outside").unwrap_err().to_string();
        assert!(err.contains("leads out"), "{err}");
        assert!(workspace.make_dir("x/y", true).unwrap());
        assert!(!workspace.make_dir("x/y", true).unwrap());
        workspace.rename("a/b/c/f", "x/y/g").unwrap();
        assert_eq!(
            std::fs::read_to_string(home.join("x/y/g")).unwrap(),
            "12345"
        );
        // The whole tree, the links in it as links: the outside is untouched.
        assert_eq!(workspace.remove("a").unwrap(), 5);
        assert!(!home.join("a").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("outside/deep/keep")).unwrap(),
            "host"
        );
        let err = workspace.list_deep(".", 0).unwrap_err().to_string();
        assert!(err.contains("\"depth\" 0"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
