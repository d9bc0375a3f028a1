//! Writing the image to disk, and what is computed from the disk afterwards: the
//! canonical listing, its digest, and the tar archive. Both are computed from the written
//! directory, so `verify` recomputes exactly what `build` recorded.

use crate::image::Node;
use crate::tar;
use crate::{DIGEST_FILE, Error, LISTING_FILE};
use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

/// Every directory is 0755 (/tmp 1777), every file 0755 or 0644: modes do not depend on
/// the host's umask or on what the packages shipped (setuid bits are dropped).
pub fn dir_mode(path: &Path) -> u32 {
    if path == Path::new("/tmp") {
        0o1777
    } else {
        0o755
    }
}

pub fn file_mode(exec: bool) -> u32 {
    if exec { 0o755 } else { 0o644 }
}

/// Writes the image into `dir` (which exists and is empty).
pub fn write(dir: &Path, nodes: &BTreeMap<PathBuf, Node>) -> Result<(), Error> {
    for (path, node) in nodes {
        let real = dir.join(path.strip_prefix("/").unwrap_or(path));
        let fail = |err: std::io::Error| Error::new(format!("write {}: {err}", real.display()));
        match node {
            Node::Dir => {
                fs::create_dir(&real).map_err(fail)?;
                fs::set_permissions(&real, fs::Permissions::from_mode(dir_mode(path)))
                    .map_err(fail)?;
            }
            Node::File { src, exec } => {
                copy_file(src, &real).map_err(|err| {
                    Error::new(format!(
                        "copy {} to {}: {err}",
                        src.display(),
                        real.display()
                    ))
                })?;
                fs::set_permissions(&real, fs::Permissions::from_mode(file_mode(*exec)))
                    .map_err(fail)?;
            }
            Node::Data { bytes } => {
                fs::write(&real, bytes).map_err(fail)?;
                fs::set_permissions(&real, fs::Permissions::from_mode(0o644)).map_err(fail)?;
            }
            Node::Symlink { target } => symlink(target, &real).map_err(fail)?,
        }
    }
    Ok(())
}

/// Sets every entry's times to `mtime`, children before their directories.
pub fn set_times(dir: &Path, mtime: u64) -> Result<(), Error> {
    let time = TimeSpec::new(mtime as i64, 0);
    let mut entries = walk(dir)?;
    for name in [DIGEST_FILE, LISTING_FILE] {
        if dir.join(name).exists() {
            entries.push(Entry {
                path: Path::new("/").join(name),
                real: dir.join(name),
                kind: EntryKind::File,
                mode: 0,
            });
        }
    }
    entries.push(Entry {
        path: PathBuf::from("/"),
        real: dir.to_path_buf(),
        kind: EntryKind::Dir,
        mode: 0,
    });
    for entry in entries.iter().rev() {
        utimensat(
            nix::fcntl::AT_FDCWD,
            &entry.real,
            &time,
            &time,
            UtimensatFlags::NoFollowSymlink,
        )
        .map_err(|errno| {
            Error::new(format!(
                "set the time of {}: {}",
                entry.real.display(),
                errno.desc()
            ))
        })?;
    }
    Ok(())
}

fn copy_file(src: &Path, dst: &Path) -> std::io::Result<()> {
    let mut input = File::open(src)?;
    let mut output = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)?;
    std::io::copy(&mut input, &mut output)?;
    Ok(())
}

pub enum EntryKind {
    Dir,
    File,
    Symlink(PathBuf),
}

pub struct Entry {
    /// The path in the root, e.g. `/usr/bin/python3`.
    pub path: PathBuf,
    pub real: PathBuf,
    pub kind: EntryKind,
    pub mode: u32,
}

/// Every entry below `dir` but the root itself and the digest files, sorted by path.
pub fn walk(dir: &Path) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    walk_into(dir, Path::new("/"), &mut entries)?;
    entries.sort_by(|a, b| a.path.as_os_str().cmp(b.path.as_os_str()));
    Ok(entries)
}

fn walk_into(real_dir: &Path, dir: &Path, entries: &mut Vec<Entry>) -> Result<(), Error> {
    let read = fs::read_dir(real_dir)
        .map_err(|err| Error::new(format!("read {}: {err}", real_dir.display())))?;
    for entry in read {
        let entry =
            entry.map_err(|err| Error::new(format!("read {}: {err}", real_dir.display())))?;
        let name = entry.file_name();
        let path = dir.join(&name);
        if dir == Path::new("/") && (name == DIGEST_FILE || name == LISTING_FILE) {
            continue;
        }
        let real = entry.path();
        let meta = fs::symlink_metadata(&real)
            .map_err(|err| Error::new(format!("inspect {}: {err}", real.display())))?;
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&real)
                .map_err(|err| Error::new(format!("read {}: {err}", real.display())))?;
            entries.push(Entry {
                path,
                real,
                kind: EntryKind::Symlink(target),
                mode,
            });
        } else if meta.is_dir() {
            entries.push(Entry {
                path: path.clone(),
                real: real.clone(),
                kind: EntryKind::Dir,
                mode,
            });
            walk_into(&real, &path, entries)?;
        } else if meta.is_file() {
            entries.push(Entry {
                path,
                real,
                kind: EntryKind::File,
                mode,
            });
        } else {
            return Err(Error::new(format!(
                "{}: not a file, directory or symlink; a brig root holds no others",
                real.display()
            )));
        }
    }
    Ok(())
}

/// The canonical listing, one line per entry in path order:
/// `d MODE PATH`, `f MODE SIZE SHA256 PATH`, `l PATH TARGET`, with bytes outside
/// printable ASCII (and `%` and space) percent-encoded.
pub fn listing(entries: &[Entry]) -> Result<String, Error> {
    let mut text = String::new();
    for entry in entries {
        let path = escape(entry.path.as_os_str().as_bytes());
        match &entry.kind {
            EntryKind::Dir => text.push_str(&format!("d {:04o} {path}\n", entry.mode)),
            EntryKind::File => {
                let (size, hash) = hash_file(&entry.real)?;
                text.push_str(&format!("f {:04o} {size} {hash} {path}\n", entry.mode));
            }
            EntryKind::Symlink(target) => text.push_str(&format!(
                "l {path} {}\n",
                escape(target.as_os_str().as_bytes())
            )),
        }
    }
    Ok(text)
}

pub fn digest_of(listing: &str) -> String {
    format!("sha256:{}", hex(&Sha256::digest(listing.as_bytes())))
}

fn hash_file(path: &Path) -> Result<(u64, String), Error> {
    let fail = |err: std::io::Error| Error::new(format!("read {}: {err}", path.display()));
    let mut file = File::open(path).map_err(fail)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let got = file.read(&mut buf).map_err(fail)?;
        if got == 0 {
            break;
        }
        hasher.update(&buf[..got]);
        size += got as u64;
    }
    Ok((size, hex(&hasher.finalize())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn escape(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &byte in bytes {
        if byte.is_ascii_graphic() && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02x}"));
        }
    }
    out
}

/// Writes the root at `dir` as a tar archive, digest files included, in path order.
pub fn write_tar(dir: &Path, to: &Path, mtime: u64) -> Result<(), Error> {
    let fail = |err: std::io::Error| Error::new(format!("write {}: {err}", to.display()));
    let file = File::create(to).map_err(fail)?;
    let mut writer = tar::Writer::new(BufWriter::new(file), mtime);
    let mut entries = walk(dir)?;
    for name in [DIGEST_FILE, LISTING_FILE] {
        let real = dir.join(name);
        if real.exists() {
            entries.push(Entry {
                path: Path::new("/").join(name),
                real,
                kind: EntryKind::File,
                mode: 0o644,
            });
        }
    }
    entries.sort_by(|a, b| a.path.as_os_str().cmp(b.path.as_os_str()));
    for entry in &entries {
        let name = entry.path.strip_prefix("/").unwrap_or(&entry.path);
        let name = name.as_os_str().as_bytes();
        match &entry.kind {
            EntryKind::Dir => writer
                .header(name, entry.mode, tar::Kind::Dir)
                .map_err(fail)?,
            EntryKind::Symlink(target) => writer
                .header(
                    name,
                    0o777,
                    tar::Kind::Symlink {
                        target: target.as_os_str().as_bytes(),
                    },
                )
                .map_err(fail)?,
            EntryKind::File => {
                let mut input = File::open(&entry.real)
                    .map_err(|err| Error::new(format!("read {}: {err}", entry.real.display())))?;
                let size = input
                    .metadata()
                    .map_err(|err| Error::new(format!("read {}: {err}", entry.real.display())))?
                    .len();
                writer
                    .header(name, entry.mode, tar::Kind::File { size })
                    .map_err(fail)?;
                let mut buf = vec![0u8; 1 << 16];
                let mut left = size;
                while left > 0 {
                    let want = buf.len().min(left as usize);
                    input.read_exact(&mut buf[..want]).map_err(|err| {
                        Error::new(format!("read {}: {err}", entry.real.display()))
                    })?;
                    writer.write_data(&buf[..want]).map_err(fail)?;
                    left -= want as u64;
                }
                writer.end_data(size).map_err(fail)?;
            }
        }
    }
    let mut out = writer.finish().map_err(fail)?;
    out.flush().map_err(fail)?;
    Ok(())
}
