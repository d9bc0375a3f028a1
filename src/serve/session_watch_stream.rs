//! Streamed directory watchers (`session_watch` with `"stream": true`): the client's
//! connection stays open and gets a `watch_event` frame for each change as the runner's
//! loop reads it (the session's inotify descriptor is one of the loop's sources), until
//! `session_unwatch` (a `watch_end` frame), the client's hang-up (the watcher goes), or
//! the session's end (an error frame, as every stream gets). The client is a
//! [`Listener`]: frames are written without blocking; past its buffer, events are
//! dropped and counted (`watch_end`'s `dropped`). The kernel's own queue overflowing
//! shows as `watch_end`'s `overflow`.

use super::session_loop::Source;
use super::*;
use crate::serve::reply::SessionReply;
use crate::serve::watch::Watches;

impl<'p> Session<'p> {
    /// Takes the watch requests a stream changes (a streamed `session_watch`, any
    /// `session_unwatch`); hands every other request back.
    pub(super) fn watch_stream_request(
        &mut self,
        request: Result<Request>,
        connection: OwnedFd,
        memfd: OwnedFd,
    ) -> Option<(Result<Request>, OwnedFd, OwnedFd)> {
        match request {
            Ok(Request::SessionWatch {
                path,
                recursive,
                stream: true,
                ..
            }) => {
                let mut client = Listener::new(connection).answering(Some(memfd));
                let workspace = workspace_of(&self.jail);
                match self.watches.create(&workspace, &path, recursive) {
                    Ok(id) => {
                        client.queue(
                            &SessionReply::Watcher {
                                watcher: id.clone(),
                                path,
                                recursive,
                                stream: Some(true),
                            },
                            None,
                        );
                        client.flush();
                        self.watches.stream_to(&id, client);
                    }
                    Err(err) => {
                        client.queue(&SessionReply::error(&err), None);
                        self.close_client(client);
                    }
                }
                None
            }
            Ok(Request::SessionUnwatch { watcher, .. }) => {
                // What changed before the unwatch is sent before the stream's end.
                self.watches.absorb(&workspace_of(&self.jail));
                let overflow = self.watches.take_overflow(&watcher);
                let reply = match self.watches.remove(&watcher) {
                    Ok(stream) => {
                        if let Some(mut stream) = stream {
                            let dropped = stream.dropped;
                            stream.queue(
                                &SessionReply::WatchEnd {
                                    watcher: watcher.clone(),
                                    why: "unwatched".into(),
                                    dropped,
                                    overflow,
                                },
                                None,
                            );
                            self.close_client(stream);
                        }
                        SessionReply::Unwatched { watcher }
                    }
                    Err(err) => SessionReply::error(&err),
                };
                let mut client = Listener::new(connection).answering(Some(memfd));
                client.queue(&reply, None);
                self.close_client(client);
                None
            }
            request => Some((request, connection, memfd)),
        }
    }

    /// Reads the kernel's events (when `events_ready`), queues them for the streams,
    /// writes what each stream's client takes; a client that hung up loses its watcher.
    pub(super) fn serve_watch_streams(&mut self, events_ready: bool) {
        if events_ready {
            self.watches.absorb(&workspace_of(&self.jail));
        }
        let mut gone = Vec::new();
        for (id, client) in self.watches.streams_mut() {
            if !client.flush() || client_gone(&client.connection) {
                gone.push(id.clone());
            }
        }
        for id in gone {
            // Nobody to tell: the watcher and its kernel watches go with the client.
            let _ = self.watches.remove(&id);
        }
    }
}

/// The loop's sources for the streamed watchers: the inotify descriptor (while one
/// streams) and each stream's client (to write what waits, and notice its hang-up).
pub(super) fn watch_stream_fds(watches: &Watches) -> (Vec<Source>, Vec<PollFd<'_>>) {
    let mut sources = Vec::new();
    let mut fds = Vec::new();
    if let Some(inotify) = watches.streaming_fd() {
        sources.push(Source::WatchEvents);
        fds.push(PollFd::new(inotify, PollFlags::POLLIN));
    }
    for client in watches.streams() {
        let flags = match client.has_pending() {
            true => PollFlags::POLLIN | PollFlags::POLLOUT,
            false => PollFlags::POLLIN,
        };
        sources.push(Source::WatchStream);
        fds.push(PollFd::new(client.connection.as_fd(), flags));
    }
    (sources, fds)
}
