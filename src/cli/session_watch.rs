//! `brig session watch`: a streamed directory watcher on the command line
//! (docs/protocol.md, "Watchers"). One line per event, `KIND<TAB>PATH`, as it arrives;
//! a line on stderr once the watch is in place.

use super::At;
use brig::error::{Error, Result};
use brig::serve::reply::SessionReply;
use brig::verdict::printable;
use std::io::Write;

/// Prints the watcher's events until its stream ends: `session_unwatch` (its `watch_end`)
/// or the session's end (the error frame every stream gets after its start; said on
/// stderr) exit 0. SIGINT and SIGTERM keep their default action (the shell sees 130 or
/// 143): the connection closes with the process, and the server drops the watcher on the
/// hang-up. A refused watch (a path out of the workspace, a cap) is an error, exit 125.
pub fn watch(at: &At, path: &str, recursive: bool) -> Result<i32> {
    let (watcher, mut frames) = at.session().watch_stream(path, recursive)?;
    // Said once the kernel's watches are in place: what changes from now on is printed
    // (and the watcher's id ends it from elsewhere, `session_unwatch`).
    eprintln!(
        "brig: watching {} (watcher {})",
        printable(path),
        printable(&watcher)
    );
    let mut stdout = std::io::stdout().lock();
    loop {
        let Some(frame) = frames.next_frame()? else {
            return Err(Error::setup(format!(
                "--server {}: the server closed the watch's connection without ending it",
                at.server.display()
            )));
        };
        match frame {
            // After the start, an error frame is the session's end (docs/protocol.md).
            SessionReply::Error { message, .. } => {
                eprintln!("brig: {}", printable(&message));
                return Ok(0);
            }
            SessionReply::WatchEvent { kind, path, .. } => {
                let line = writeln!(stdout, "{}\t{}", printable(&kind), printable(&path))
                    .and_then(|()| stdout.flush());
                // Whoever read the lines went away: nothing more to print to.
                if line.is_err() {
                    return Ok(0);
                }
            }
            SessionReply::WatchEnd {
                dropped, overflow, ..
            } => {
                if dropped > 0 {
                    eprintln!("brig: {dropped} events were dropped: this client read too slowly");
                }
                if overflow {
                    eprintln!("brig: the kernel's event queue overflowed: some changes were lost");
                }
                return Ok(0);
            }
            other => {
                return Err(Error::setup(format!(
                    "brig serve answered with a `{}` frame where `watch_event` was due",
                    printable(&other.kind())
                )));
            }
        }
    }
}
