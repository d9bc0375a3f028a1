//! `brig session watch`: a streamed directory watcher on the command line
//! (docs/protocol.md, "Watchers"). One line per event, `KIND<TAB>PATH`, as it arrives;
//! a line on stderr once the watch is in place.

use super::{At, next_reply};
use crate::error::{Error, Result};
use crate::serve::protocol::{self, FrameReader};
use crate::verdict::printable;
use serde_json::{Value, json};
use std::io::Write;
use std::os::fd::AsFd;

/// Prints the watcher's events until its stream ends: `session_unwatch` (its `watch_end`)
/// or the session's end (the error frame every stream gets after its start; said on
/// stderr) exit 0. SIGINT and SIGTERM keep their default action (the shell sees 130 or
/// 143): the connection closes with the process, and the server drops the watcher on the
/// hang-up. A refused watch (a path out of the workspace, a cap) is an error, exit 125.
pub fn watch(at: &At, path: &str, recursive: bool) -> Result<i32> {
    let message = json!({
        "brig": protocol::VERSION,
        "type": "session_watch",
        "session": at.session,
        "path": path,
        "recursive": recursive,
        "stream": true,
    });
    let connection = crate::serve::client::connect(&at.server)?;
    protocol::write_frame(connection.as_fd(), &message, &[])?;
    let mut reader = FrameReader::replies();
    let started = next_reply(&at.server, &connection, &mut reader)?;
    if started["type"] != "watcher" {
        return Err(unexpected(&started, "watcher"));
    }
    // Said once the kernel's watches are in place: what changes from now on is printed
    // (and the watcher's id ends it from elsewhere, `session_unwatch`).
    eprintln!(
        "brig: watching {} (watcher {})",
        printable(path),
        printable(started["watcher"].as_str().unwrap_or("?"))
    );
    let mut stdout = std::io::stdout().lock();
    loop {
        let Some((body, _)) = reader.read_blocking(&connection)? else {
            return Err(Error::setup(format!(
                "--server {}: the server closed the watch's connection without ending it",
                at.server.display()
            )));
        };
        let frame: Value = serde_json::from_slice(&body).map_err(|err| {
            Error::setup(format!("brig serve sent a frame that is not JSON: {err}"))
        })?;
        // After the start, an error frame is the session's end (docs/protocol.md).
        if frame["type"] == "error" {
            eprintln!(
                "brig: {}",
                printable(frame["message"].as_str().unwrap_or("the session ended"))
            );
            return Ok(0);
        }
        match frame["type"].as_str() {
            Some("watch_event") => {
                let line = writeln!(
                    stdout,
                    "{}\t{}",
                    printable(frame["kind"].as_str().unwrap_or("?")),
                    printable(frame["path"].as_str().unwrap_or("?"))
                )
                .and_then(|()| stdout.flush());
                // Whoever read the lines went away: nothing more to print to.
                if line.is_err() {
                    return Ok(0);
                }
            }
            Some("watch_end") => {
                let dropped = frame["dropped"].as_u64().unwrap_or(0);
                if dropped > 0 {
                    eprintln!("brig: {dropped} events were dropped: this client read too slowly");
                }
                if frame["overflow"] == true {
                    eprintln!("brig: the kernel's event queue overflowed: some changes were lost");
                }
                return Ok(0);
            }
            _ => return Err(unexpected(&frame, "watch_event")),
        }
    }
}

fn unexpected(frame: &Value, due: &str) -> Error {
    Error::setup(format!(
        "brig serve answered with a `{}` frame where `{due}` was due",
        printable(frame["type"].as_str().unwrap_or("?"))
    ))
}
