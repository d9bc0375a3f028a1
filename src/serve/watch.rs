//! A session's directory watchers (`session_watch`, `session_watch_events`,
//! `session_unwatch`), polled (the kernel holds the events between requests) or streamed
//! (a watcher with a client, `session_watch_stream.rs`: its events are queued for the
//! client as each read of the kernel's queue hands them out).
//!
//! One inotify instance per session runner, made at the first watcher. Each directory is
//! opened beneath the workspace with openat2 (as every path of a session's files), then
//! watched through `/proc/self/fd/N`: the kernel resolved the path, not a string, so a
//! `..`, an absolute path or a symlink the jail planted cannot aim a watch outside.
//! inotify's counters are charged to the runner's uid (root for a root server), so a
//! session has at most [`MAX_WATCHERS`] watchers and [`MAX_WATCHES`] watched directories;
//! each watcher holds at most [`MAX_QUEUED`] events between calls, and says `overflow`
//! when some were lost.
//!
//! A recursive watcher follows a new directory as inotify-based watchers do: watch it,
//! then scan it and report what is already there as made. What is made between the watch
//! and the scan is both found and reported by the kernel; the watcher remembers what its
//! scans reported and drops the kernel's create for it. A directory's path is tracked
//! through renames the watches see (the kernel's IN_MOVED_FROM/IN_MOVED_TO pair).

use super::session::Listener;
use super::workspace::{self, AsJailUser, Workspace};
use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Watchers a session may have at once.
pub const MAX_WATCHERS: usize = 16;
/// Directories a session may watch at once (kernel watches; a recursive watcher takes one
/// for each directory beneath it).
pub const MAX_WATCHES: usize = 1024;
/// Events a watcher holds between two `session_watch_events`; past it they are dropped
/// and the next answer says `overflow`.
pub const MAX_QUEUED: usize = 4096;

/// One change, as a watcher reports it.
#[derive(Clone, Debug, serde::Serialize, PartialEq, Eq)]
pub struct Event {
    /// create, write, remove, rename (the old name), chmod.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Relative to the workspace.
    pub path: String,
}

struct Watcher {
    recursive: bool,
    /// Streamed (`"stream": true`): its events go out on this connection as they are
    /// read (`session_watch_stream.rs`), not held for `session_watch_events`.
    stream: Option<Listener>,
    queue: VecDeque<Event>,
    overflow: bool,
    watching: Vec<WatchDescriptor>,
    /// What a scan of a newly followed directory reported as created (at most
    /// [`MAX_QUEUED`]): the kernel's own create event for it may still come (made between
    /// the watch and the scan), and is then dropped. Until the path is removed or renamed
    /// away, a create event for it can only be that one: the kernel reports no create for
    /// a name that exists.
    scanned: HashSet<String>,
}

/// A session's watchers.
#[derive(Default)]
pub struct Watches {
    inotify: Option<Inotify>,
    made: u64,
    watchers: HashMap<String, Watcher>,
    /// Each kernel watch: the watchers it serves, and the directory's path in the
    /// workspace.
    directories: HashMap<WatchDescriptor, (Vec<String>, String)>,
    /// The last watch refused for a bound (the session's cap, the host's inotify
    /// watches), not because its directory went: a tree being walked stops there.
    at_bound: bool,
    /// Directories renamed away whose new name may still come (the kernel's
    /// IN_MOVED_FROM without its IN_MOVED_TO yet): their cookie and old path, the last
    /// [`MAX_RENAMES`].
    renamed_from: VecDeque<(u32, String)>,
}

/// Directory renames awaiting their new name; one moved out of every watched directory
/// never gets it, and the oldest goes.
const MAX_RENAMES: usize = 64;

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_ONLYDIR
}

fn unknown(id: &str) -> Error {
    Error::input(format!(
        "watcher {id:?}: no such watcher in this session (removed, or never made); make one with session_watch"
    ))
}

impl Watches {
    /// A watcher on directory `path`, and with `recursive` every directory beneath it
    /// (and those made later); its id.
    pub fn create(&mut self, workspace: &Workspace, path: &str, recursive: bool) -> Result<String> {
        if self.watchers.len() >= MAX_WATCHERS {
            return Err(Error::input(format!(
                "session_watch: the session has {MAX_WATCHERS} watchers already; remove one with session_unwatch"
            )));
        }
        let root = workspace::components(path)?.join("/");
        if self.inotify.is_none() {
            let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                .map_err(|errno| match errno {
                    Errno::EMFILE => Error::setup(
                        "session_watch: the server's inotify instances are used up (fs.inotify.max_user_instances, one a session that watches); retry once other sessions stop watching, or raise it",
                    ),
                    errno => Error::os("session_watch: inotify_init1", errno),
                })?;
            self.inotify = Some(inotify);
        }
        self.made += 1;
        let id = format!("w{}", self.made);
        self.watchers.insert(
            id.clone(),
            Watcher {
                recursive,
                stream: None,
                queue: VecDeque::new(),
                overflow: false,
                watching: Vec::new(),
                scanned: HashSet::new(),
            },
        );
        self.at_bound = false;
        let added = match recursive {
            true => self.watch_tree(workspace, &id, &root, 0, &mut Vec::new()),
            false => self.watch_directory(workspace, &id, &root).map(|_| ()),
        };
        if let Err(err) = added {
            let _ = self.remove(&id);
            return Err(err);
        }
        Ok(id)
    }

    /// Adds a watch on directory `path` for watcher `id`; the directory's descriptor.
    fn watch_directory(&mut self, workspace: &Workspace, id: &str, path: &str) -> Result<OwnedFd> {
        let _as_jail_user = AsJailUser::new(workspace.owner);
        let parts = workspace::components(if path.is_empty() { "." } else { path })?;
        let shown = if path.is_empty() { "." } else { path };
        let dir = workspace.directory(&parts, false, shown)?;
        let inotify = self.inotify.as_ref().expect("made before any watch");
        // The kernel resolved the directory beneath the workspace; the watch goes on the
        // inode it found, named by the descriptor, not by the path again.
        let by_descriptor = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let wd = match inotify.add_watch(by_descriptor.as_str(), mask()) {
            Ok(wd) => wd,
            Err(Errno::ENOSPC) => {
                self.at_bound = true;
                return Err(Error::input(
                    "session_watch: the host's inotify watches are used up (fs.inotify.max_user_watches); remove watchers",
                ));
            }
            Err(errno) => {
                return Err(Error::os(format!("session_watch: watch {shown:?}"), errno));
            }
        };
        if !self.directories.contains_key(&wd) && self.directories.len() >= MAX_WATCHES {
            let _ = inotify.rm_watch(wd);
            self.at_bound = true;
            return Err(Error::input(format!(
                "session_watch: the session watches {MAX_WATCHES} directories already; watch fewer (a recursive watcher takes one a directory)"
            )));
        }
        let (ids, known_as) = self
            .directories
            .entry(wd)
            .or_insert_with(|| (Vec::new(), path.to_string()));
        // Watched already under another name (renamed since, its rename not seen): the
        // kernel just found it at `path`.
        if known_as != path {
            *known_as = path.to_string();
        }
        if !ids.iter().any(|other| other == id) {
            ids.push(id.to_string());
            if let Some(watcher) = self.watchers.get_mut(id) {
                watcher.watching.push(wd);
            }
        }
        Ok(dir)
    }

    /// Watches `path` and every directory beneath it (not through symlinks) for `id`.
    fn watch_tree(
        &mut self,
        workspace: &Workspace,
        id: &str,
        path: &str,
        level: u32,
        found: &mut Vec<String>,
    ) -> Result<()> {
        let dir = self.watch_directory(workspace, id, path)?;
        if level >= super::files::MAX_DEPTH {
            return Ok(());
        }
        let listing = nix::dir::Dir::from_fd(
            dir.try_clone()
                .map_err(|err| Error::setup(format!("dup: {err}")))?,
        )
        .map_err(|errno| Error::os(format!("session_watch: list {path:?}"), errno))?;
        let mut subdirectories = Vec::new();
        for entry in listing.into_iter().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            let child = if path.is_empty() {
                name
            } else {
                format!("{path}/{name}")
            };
            let is_directory = match entry.file_type() {
                Some(kind) => kind == nix::dir::Type::Directory,
                // A file system that does not say (DT_UNKNOWN): the entry's own type.
                None => nix::sys::stat::fstatat(
                    &dir,
                    entry.file_name(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .is_ok_and(|stat| super::files::kind_of(&stat) == "dir"),
            };
            if is_directory {
                subdirectories.push(child.clone());
            }
            found.push(child);
        }
        drop(dir);
        for child in subdirectories {
            match self.watch_tree(workspace, id, &child, level + 1, found) {
                // Gone meanwhile (or swapped for a symlink leading out): not watched.
                Ok(()) => {}
                Err(err) if self.at_bound => return Err(err),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// The events of watcher `id` since the last call, and whether some were lost.
    pub fn events(&mut self, workspace: &Workspace, id: &str) -> Result<(Vec<Event>, bool)> {
        match self.watchers.get(id) {
            None => return Err(unknown(id)),
            Some(watcher) if watcher.stream.is_some() => {
                return Err(Error::input(format!(
                    "watcher {id:?} streams its events on its session_watch connection; poll a watcher made without \"stream\""
                )));
            }
            Some(_) => {}
        }
        self.absorb(workspace);
        let watcher = self.watchers.get_mut(id).expect("checked");
        let overflow = std::mem::take(&mut watcher.overflow);
        Ok((watcher.queue.drain(..).collect(), overflow))
    }

    /// Reads what the kernel holds and hands each event to the watchers of its directory.
    pub fn absorb(&mut self, workspace: &Workspace) {
        let Some(inotify) = self.inotify.as_ref() else {
            return;
        };
        let mut batches = Vec::new();
        while let Ok(events) = inotify.read_events() {
            if events.is_empty() {
                break;
            }
            batches.push(events);
        }
        for batch in batches {
            self.hand_out(workspace, batch);
            // Streams take each read's events, so only a polled watcher's queue fills.
            self.publish();
        }
    }

    /// Hands each event of one read to the watchers of its directory.
    fn hand_out(&mut self, workspace: &Workspace, batch: Vec<nix::sys::inotify::InotifyEvent>) {
        for event in batch {
            if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                for watcher in self.watchers.values_mut() {
                    watcher.overflow = true;
                    // A removal may be among the lost: a create may now be new.
                    watcher.scanned.clear();
                }
                continue;
            }
            if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                // The directory went (or the watch was removed).
                if let Some((ids, _)) = self.directories.remove(&event.wd) {
                    for id in ids {
                        if let Some(watcher) = self.watchers.get_mut(&id) {
                            watcher.watching.retain(|wd| *wd != event.wd);
                        }
                    }
                }
                continue;
            }
            let Some((ids, dir)) = self.directories.get(&event.wd).cloned() else {
                continue;
            };
            let Some(name) = event
                .name
                .as_ref()
                .map(|name| name.to_string_lossy().into_owned())
            else {
                continue;
            };
            let path = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            let kind = if event
                .mask
                .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
            {
                "create"
            } else if event.mask.contains(AddWatchFlags::IN_MODIFY) {
                "write"
            } else if event.mask.contains(AddWatchFlags::IN_DELETE) {
                "remove"
            } else if event.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
                "rename"
            } else if event.mask.contains(AddWatchFlags::IN_ATTRIB) {
                "chmod"
            } else {
                continue;
            };
            let is_directory = event.mask.contains(AddWatchFlags::IN_ISDIR);
            if is_directory {
                self.follow_rename(&event, &path);
            }
            let new_directory = kind == "create" && is_directory;
            for id in ids {
                let Some(watcher) = self.watchers.get_mut(&id) else {
                    continue;
                };
                if kind == "remove" || kind == "rename" {
                    match is_directory {
                        true => forget_scanned(&mut watcher.scanned, &path),
                        false => _ = watcher.scanned.remove(&path),
                    }
                } else if kind == "create" && !watcher.scanned.is_empty() {
                    let reported = watcher.scanned.remove(&path);
                    // Made between the watch on its directory and that directory's scan:
                    // reported (and followed) by the scan already.
                    if reported && event.mask.contains(AddWatchFlags::IN_CREATE) {
                        continue;
                    }
                }
                let event = Event {
                    kind,
                    path: path.clone(),
                };
                // A file written in many writes is one `write` until something else happens.
                if kind == "write" && watcher.queue.back() == Some(&event) {
                } else if watcher.queue.len() >= MAX_QUEUED {
                    watcher.overflow = true;
                } else {
                    watcher.queue.push_back(event);
                }
                if !watcher.recursive || !is_directory {
                    continue;
                }
                if new_directory {
                    self.follow(workspace, &id, &path);
                } else if kind == "rename" {
                    // Renamed away: it left this watcher's tree (a rename within it
                    // follows it again at its new name, as a new directory).
                    self.leave(&id, &path);
                }
            }
        }
    }

    /// Watcher `id` follows new directory `path` and every one beneath it; what they
    /// already hold (made before brig watched them) is reported as made, in name order,
    /// and remembered to drop the kernel's own create for it should it come too. If it
    /// cannot be followed (the cap, or gone already), its events are lost, and the watcher
    /// says so.
    fn follow(&mut self, workspace: &Workspace, id: &str, path: &str) {
        let mut found = Vec::new();
        self.at_bound = false;
        let followed = self.watch_tree(workspace, id, path, 0, &mut found);
        found.sort();
        let Some(watcher) = self.watchers.get_mut(id) else {
            return;
        };
        watcher.overflow |= followed.is_err();
        // A directory of that name before (renamed away, its removal unseen): what
        // its scan found is no longer there.
        forget_scanned(&mut watcher.scanned, path);
        for path in found {
            if watcher.queue.len() >= MAX_QUEUED {
                watcher.overflow = true;
                break;
            }
            if watcher.scanned.len() < MAX_QUEUED {
                watcher.scanned.insert(path.clone());
            }
            watcher.queue.push_back(Event {
                kind: "create",
                path,
            });
        }
    }

    /// Watcher `id` stops watching directory `path` and those beneath it; a kernel watch
    /// no other watcher uses goes.
    fn leave(&mut self, id: &str, path: &str) {
        let Some(watcher) = self.watchers.get_mut(id) else {
            return;
        };
        let directories = &mut self.directories;
        let inotify = self.inotify.as_ref();
        watcher.watching.retain(|wd| {
            let Some((ids, known_as)) = directories.get_mut(wd) else {
                return true;
            };
            if beneath(known_as, path).is_none() {
                return true;
            }
            ids.retain(|other| other != id);
            if ids.is_empty() {
                directories.remove(wd);
                if let Some(inotify) = inotify {
                    let _ = inotify.rm_watch(*wd);
                }
            }
            false
        });
    }

    /// A directory renamed from one watched directory to another: from its new name on,
    /// its watches (and those beneath it) report paths under the new name. A directory
    /// renamed out of every watched directory keeps its old one.
    fn follow_rename(&mut self, event: &nix::sys::inotify::InotifyEvent, path: &str) {
        if event.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
            if self.renamed_from.len() >= MAX_RENAMES {
                self.renamed_from.pop_front();
            }
            self.renamed_from
                .push_back((event.cookie, path.to_string()));
            return;
        }
        if !event.mask.contains(AddWatchFlags::IN_MOVED_TO) {
            return;
        }
        let Some(at) = (self.renamed_from.iter()).position(|(cookie, _)| *cookie == event.cookie)
        else {
            return;
        };
        let (_, old) = self.renamed_from.remove(at).expect("found");
        for (_, known_as) in self.directories.values_mut() {
            if let Some(rest) = beneath(known_as, &old) {
                *known_as = format!("{path}{rest}");
            }
        }
    }

    /// Removes watcher `id` and the kernel watches only it used; its stream's client (to
    /// be sent its last frame), if it streamed.
    pub fn remove(&mut self, id: &str) -> Result<Option<Listener>> {
        let watcher = self.watchers.remove(id).ok_or_else(|| unknown(id))?;
        for wd in watcher.watching {
            let Some((ids, _)) = self.directories.get_mut(&wd) else {
                continue;
            };
            ids.retain(|other| other != id);
            if ids.is_empty() {
                self.directories.remove(&wd);
                if let Some(inotify) = self.inotify.as_ref() {
                    let _ = inotify.rm_watch(wd);
                }
            }
        }
        if self.watchers.is_empty() {
            // Nothing watched: the instance (and what the kernel queued) goes too.
            self.inotify = None;
            self.directories.clear();
            self.renamed_from.clear();
        }
        Ok(watcher.stream)
    }

    /// The inotify descriptor, for the session's loop to poll while a watcher streams.
    pub fn streaming_fd(&self) -> Option<BorrowedFd<'_>> {
        let streaming = self.watchers.values().any(|w| w.stream.is_some());
        self.inotify
            .as_ref()
            .filter(|_| streaming)
            .map(|inotify| inotify.as_fd())
    }

    /// Watcher `id` (just made) streams its events to `client` from now on.
    pub fn stream_to(&mut self, id: &str, client: Listener) {
        if let Some(watcher) = self.watchers.get_mut(id) {
            watcher.stream = Some(client);
        }
    }

    /// The streamed watchers' clients.
    pub fn streams(&self) -> impl Iterator<Item = &Listener> {
        self.watchers.values().filter_map(|w| w.stream.as_ref())
    }

    /// Every stream's client, taken out (the session ends).
    pub fn take_streams(&mut self) -> Vec<Listener> {
        (self.watchers.values_mut())
            .filter_map(|w| w.stream.take())
            .collect()
    }

    /// The streamed watchers' ids and clients.
    pub fn streams_mut(&mut self) -> impl Iterator<Item = (&String, &mut Listener)> {
        (self.watchers.iter_mut()).filter_map(|(id, w)| w.stream.as_mut().map(|s| (id, s)))
    }

    /// Queues each streamed watcher's events for its client, one `watch_event` frame
    /// each (dropped and counted in its `dropped` past the client's buffer).
    fn publish(&mut self) {
        for (id, watcher) in &mut self.watchers {
            let Some(client) = watcher.stream.as_mut() else {
                continue;
            };
            for event in watcher.queue.drain(..) {
                let frame = crate::serve::reply::SessionReply::WatchEvent {
                    watcher: id.clone(),
                    kind: event.kind.into(),
                    path: event.path,
                };
                client.queue(&frame, Some(1));
            }
        }
    }

    /// Whether watcher `id` lost events in the kernel's queue (read and reset).
    pub fn take_overflow(&mut self, id: &str) -> bool {
        (self.watchers.get_mut(id)).is_some_and(|w| std::mem::take(&mut w.overflow))
    }
}

/// The rest of `path` after directory `directory` ("" for the directory itself, "/x"
/// for what is in it); None when it is elsewhere.
fn beneath<'a>(path: &'a str, directory: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(directory)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Forgets what a scan reported at `path` and beneath it (removed or renamed away: a
/// create there from now on is new).
fn forget_scanned(scanned: &mut HashSet<String>, path: &str) {
    if !scanned.is_empty() {
        scanned.retain(|reported| beneath(reported, path).is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beneath_is_the_directory_or_what_is_in_it() {
        assert_eq!(beneath("a", "a"), Some(""));
        assert_eq!(beneath("a/b/c", "a"), Some("/b/c"));
        assert_eq!(beneath("a/b", "a/b"), Some(""));
        // A sibling that shares the name's start is not in it.
        assert_eq!(beneath("ab", "a"), None);
        assert_eq!(beneath("ab/c", "a"), None);
        assert_eq!(beneath("b/a", "a"), None);
    }

    #[test]
    fn a_removed_directory_forgets_what_was_scanned_in_it() {
        let mut scanned: HashSet<String> =
            ["a", "a/b", "a/b/f", "ab", "c"].map(String::from).into();
        forget_scanned(&mut scanned, "a/b");
        let mut left: Vec<_> = scanned.iter().map(String::as_str).collect();
        left.sort();
        assert_eq!(left, ["a", "ab", "c"]);
        forget_scanned(&mut scanned, "a");
        let mut left: Vec<_> = scanned.iter().map(String::as_str).collect();
        left.sort();
        assert_eq!(left, ["ab", "c"]);
    }
}
