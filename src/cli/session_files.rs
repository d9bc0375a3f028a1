//! `brig session put/get/stat`: the command line's side of a session's files. put and
//! get stream the file on their connection (`session_write`, `session_read`): any size,
//! through a fixed buffer, nothing held whole.

use super::At;
use brig::error::{Error, Result};
use brig::verdict::printable;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;

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
    // The local file's failures are named as it: one that could not be read or shrank
    // while it was sent (the server's refusal then is only their consequence).
    let mut counted = Counted {
        inner: &mut source,
        count: 0,
        error: None,
    };
    let sent = at.session().write(remote, size, &mut counted);
    match (sent, counted.error) {
        (Ok(_), _) => Ok(0),
        (Err(_), Some(err)) => Err(cannot(err)),
        (Err(_), None) if counted.count < size => Err(Error::input(format!(
            "{}: it shrank to {} bytes while it was sent",
            local.display(),
            counted.count
        ))),
        (Err(err), None) => Err(err),
    }
}

/// A reader that counts what it gave and keeps its own error.
struct Counted<'r> {
    inner: &'r mut dyn Read,
    count: u64,
    error: Option<std::io::Error>,
}

impl Read for Counted<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        match self.inner.read(buffer) {
            Ok(count) => {
                self.count += count as u64;
                Ok(count)
            }
            Err(err) => {
                let kind = err.kind();
                self.error = Some(err);
                Err(kind.into())
            }
        }
    }
}

/// `brig session get REMOTE [LOCAL]`: REMOTE streamed to LOCAL or standard output.
pub fn get(at: &At, remote: &str, local: Option<&Path>) -> Result<i32> {
    // The local file is made once the server has said it will send.
    let mut reading = at.session().open_read(remote, 0, None)?;
    let local = local.filter(|path| *path != Path::new("-"));
    let mut sink: Box<dyn Write> =
        match local {
            Some(path) => Box::new(std::fs::File::create(path).map_err(|err| {
                Error::input(format!("{}: cannot write it: {err}", path.display()))
            })?),
            None => Box::new(std::io::stdout().lock()),
        };
    reading.copy_to(&mut sink)?;
    Ok(0)
}

/// `brig session stat PATH`: one line, as `ls` prints an entry, with its owner and time.
pub fn stat(at: &At, path: &str) -> Result<i32> {
    let entry = at.session().stat(path)?;
    let link = entry
        .symlink_target
        .as_deref()
        .map(|target| format!(" -> {}", printable(target)))
        .unwrap_or_default();
    let id = |id: Option<u32>| id.map_or("null".to_string(), |id| id.to_string());
    println!(
        "{:<7} {:04o} {:>10} uid={} gid={} mtime={:.3} {}{link}",
        entry.kind,
        entry.mode,
        entry.size,
        id(entry.uid),
        id(entry.gid),
        entry.mtime.unwrap_or(0.0),
        printable(entry.path.as_deref().unwrap_or("?")),
    );
    Ok(0)
}
