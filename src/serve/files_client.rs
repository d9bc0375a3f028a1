//! `brig session put/get/stat/mkdir/mv/rm`: the command line's side of a session's files
//! (`files.rs`). put and get stream the file on their connection (`session_write`,
//! `session_read`): any size, through a fixed buffer, nothing held whole.

use super::protocol;
use super::session_client::{At, checked, request};
use crate::error::{Error, Result};
use crate::verdict::printable;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// One reply frame read byte-exact from `stream` (no read-ahead: raw data may follow).
fn reply_on(mut stream: &UnixStream, socket: &Path) -> Result<Value> {
    let gone = |err: std::io::Error| {
        Error::setup(format!(
            "--server {}: the server closed the connection without an answer ({err})",
            socket.display()
        ))
    };
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).map_err(gone)?;
    let length = u32::from_be_bytes(length) as usize;
    if length > protocol::MAX_REPLY {
        return Err(Error::setup(format!(
            "brig serve sent a frame of {length} bytes"
        )));
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).map_err(gone)?;
    checked(&body)
}

fn open_request(at: &At, mut message: Value) -> Result<UnixStream> {
    message["brig"] = json!(protocol::VERSION);
    message["session"] = json!(at.session);
    let stream = super::client::connect(&at.server)?;
    protocol::write_frame(stream.as_fd(), &message, &[])?;
    Ok(stream)
}

/// `brig session put LOCAL REMOTE`: LOCAL (or standard input) streamed to REMOTE.
pub fn put(at: &At, local: &Path, remote: &str) -> Result<i32> {
    let cannot =
        |err: std::io::Error| Error::input(format!("{}: cannot read it: {err}", local.display()));
    let mut source: Box<dyn Read> = if local == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(local).map_err(cannot)?)
    };
    // A regular file (standard input redirected from one too) has its size; a pipe is
    // read first, since the request says the size.
    let size = match local == Path::new("-") {
        true => nix::sys::stat::fstat(std::io::stdin().as_fd()).ok(),
        false => nix::sys::stat::stat(local).ok(),
    }
    .filter(|stat| stat.st_mode & libc::S_IFMT == libc::S_IFREG)
    .map(|stat| stat.st_size as u64);
    let (size, mut source): (u64, Box<dyn Read>) = match size {
        Some(size) => (size, source),
        None => {
            let mut data = Vec::new();
            source.read_to_end(&mut data).map_err(cannot)?;
            (data.len() as u64, Box::new(std::io::Cursor::new(data)))
        }
    };
    let mut stream = open_request(
        at,
        json!({"type": "session_write", "path": remote, "size": size}),
    )?;
    reply_on(&stream, &at.server)?;
    let sent = std::io::copy(&mut (&mut source).take(size), &mut stream);
    // A runner that stopped reading (a full workspace) answers why; a file that shrank
    // while it was sent is this side's error.
    let reply = reply_on(&stream, &at.server);
    match (sent, reply) {
        (_, Err(err)) => Err(err),
        (Ok(count), Ok(_)) if count == size => Ok(0),
        (Ok(count), Ok(_)) => Err(Error::input(format!(
            "{}: it shrank to {count} bytes while it was sent",
            local.display()
        ))),
        (Err(err), Ok(_)) => Err(cannot(err)),
    }
}

/// `brig session get REMOTE [LOCAL]`: REMOTE streamed to LOCAL or standard output.
pub fn get(at: &At, remote: &str, local: Option<&Path>) -> Result<i32> {
    let stream = open_request(at, json!({"type": "session_read", "path": remote}))?;
    let header = reply_on(&stream, &at.server)?;
    let length = header["length"].as_u64().unwrap_or(0);
    let local = local.filter(|path| *path != Path::new("-"));
    let mut sink: Box<dyn Write> =
        match local {
            Some(path) => Box::new(std::fs::File::create(path).map_err(|err| {
                Error::input(format!("{}: cannot write it: {err}", path.display()))
            })?),
            None => Box::new(std::io::stdout().lock()),
        };
    let copied = std::io::copy(&mut (&stream).take(length), &mut sink)
        .and_then(|count| sink.flush().map(|()| count))
        .map_err(|err| Error::setup(format!("session_read {remote:?}: {err}")))?;
    if copied != length {
        return Err(Error::setup(format!(
            "session_read {remote:?}: the connection ended after {copied} of {length} bytes (the file shrank while it was read, or the session ended)"
        )));
    }
    Ok(0)
}

/// `brig session stat PATH`: one line, as `ls` prints an entry, with its owner and time.
pub fn stat(at: &At, path: &str) -> Result<i32> {
    let reply = request(
        &at.server,
        json!({"type": "session_stat", "session": at.session, "path": path}),
    )?;
    let entry = &reply["entry"];
    let link = entry["symlink_target"]
        .as_str()
        .map(|target| format!(" -> {}", printable(target)))
        .unwrap_or_default();
    println!(
        "{:<7} {:04o} {:>10} uid={} gid={} mtime={:.3} {}{link}",
        entry["type"].as_str().unwrap_or("?"),
        entry["mode"].as_u64().unwrap_or(0),
        entry["size"].as_u64().unwrap_or(0),
        entry["uid"],
        entry["gid"],
        entry["mtime"].as_f64().unwrap_or(0.0),
        printable(entry["path"].as_str().unwrap_or("?")),
    );
    Ok(0)
}

/// A files request whose reply says nothing to print.
pub fn simple(at: &At, mut message: Value) -> Result<i32> {
    message["session"] = json!(at.session);
    request(&at.server, message)?;
    Ok(0)
}
