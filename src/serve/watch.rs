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

use super::session::Listener;
use super::workspace::{self, AsJailUser, Workspace};
use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::{HashMap, VecDeque};
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
}

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
        let (ids, _) = self
            .directories
            .entry(wd)
            .or_insert_with(|| (Vec::new(), path.to_string()));
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
            if entry.file_type() == Some(nix::dir::Type::Directory) {
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
            let new_directory = kind == "create" && event.mask.contains(AddWatchFlags::IN_ISDIR);
            for id in ids {
                let Some(watcher) = self.watchers.get_mut(&id) else {
                    continue;
                };
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
                if !(new_directory && watcher.recursive) {
                    continue;
                }
                // What was made in the new directory before brig watched it is reported
                // as made; if it cannot be followed (the cap, or gone already), its
                // events are lost, and the watcher says so.
                let mut found = Vec::new();
                self.at_bound = false;
                let followed = self.watch_tree(workspace, &id, &path, 0, &mut found);
                found.sort();
                let watcher = self.watchers.get_mut(&id).expect("looked up above");
                watcher.overflow |= followed.is_err();
                for path in found {
                    match watcher.queue.len() < MAX_QUEUED {
                        true => watcher.queue.push_back(Event {
                            kind: "create",
                            path,
                        }),
                        false => watcher.overflow = true,
                    }
                }
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
