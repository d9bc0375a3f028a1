//! Writing the image to disk, and what is computed from the disk afterwards: the
//! canonical listing, its digest, and the tar archive. Both are computed from the written
//! directory, so `verify` recomputes exactly what `build` recorded.

use crate::image::Node;
use crate::{DIGEST_FILE, Error, LISTING_FILE};
use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use tar::{EntryType, Header};

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

/// Writes the root at `dir` as a tar archive, digest files included, in path order: ustar
/// headers, owners 0:0 (`root`), every time `mtime`, and a pax extended header for a name or
/// link target too long for them.
pub fn write_tar(dir: &Path, to: &Path, mtime: u64) -> Result<(), Error> {
    let fail = |err: io::Error| Error::new(format!("write {}: {err}", to.display()));
    let file = File::create(to).map_err(fail)?;
    let mut archive = tar::Builder::new(BufWriter::new(file));
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
            EntryKind::Dir => {
                let mut name = name.to_vec();
                name.push(b'/');
                let header = ustar_header(EntryType::Directory, entry.mode, 0, mtime);
                append(&mut archive, header, &name, None, io::empty()).map_err(fail)?;
            }
            EntryKind::Symlink(target) => {
                let header = ustar_header(EntryType::Symlink, 0o777, 0, mtime);
                let target = Some(target.as_os_str().as_bytes());
                append(&mut archive, header, name, target, io::empty()).map_err(fail)?;
            }
            EntryKind::File => {
                let read_fail =
                    |err: io::Error| Error::new(format!("read {}: {err}", entry.real.display()));
                let input = File::open(&entry.real).map_err(read_fail)?;
                let size = input.metadata().map_err(read_fail)?.len();
                let header = ustar_header(EntryType::Regular, entry.mode, size, mtime);
                let mut data = input.take(size);
                append(&mut archive, header, name, None, &mut data).map_err(fail)?;
                if data.limit() != 0 {
                    return Err(read_fail(io::ErrorKind::UnexpectedEof.into()));
                }
            }
        }
    }
    let mut out = archive.into_inner().map_err(fail)?;
    out.flush().map_err(fail)?;
    Ok(())
}

/// A ustar header with everything but the names.
fn ustar_header(kind: EntryType, mode: u32, size: u64, mtime: u64) -> Header {
    let mut header = Header::new_ustar();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(size);
    header.set_mtime(mtime);
    // Cannot fail: a ustar header has these fields, and "root" fits in them.
    let fields = header
        .set_username("root")
        .and_then(|()| header.set_groupname("root"))
        .and_then(|()| header.set_device_major(0))
        .and_then(|()| header.set_device_minor(0));
    fields.expect("a ustar header has owner names and device numbers");
    header
}

/// Appends one entry named `name` (a path relative to the root), with a pax extended
/// header first for a name or link target that does not fit in `header`.
fn append<W: Write>(
    archive: &mut tar::Builder<W>,
    mut header: Header,
    name: &[u8],
    link: Option<&[u8]>,
    data: impl Read,
) -> io::Result<()> {
    let mut pax: Vec<(&str, &[u8])> = Vec::new();
    let fresh = header.clone();
    if header.set_path(OsStr::from_bytes(name)).is_err() {
        // Neither the name field nor prefix and name hold it: the pax record does, and the
        // header keeps the entry's own name, cut to fit, for readers without pax.
        header = fresh;
        pax.push(("path", name));
        let own = Path::new(OsStr::from_bytes(name))
            .file_name()
            .map(OsStrExt::as_bytes)
            .unwrap_or(name);
        let field = header.as_old().name.len();
        header.set_path(OsStr::from_bytes(&own[..own.len().min(field)]))?;
    }
    if let Some(link) = link
        && header.set_link_name_literal(link).is_err()
    {
        pax.push(("linkpath", link));
        let field = header.as_old().linkname.len();
        header.set_link_name_literal(&link[..link.len().min(field)])?;
    }
    archive.append_pax_extensions(pax)?;
    header.set_cksum();
    archive.append(&header, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A directory under the system's temporary directory, removed when dropped.
    struct Temp(PathBuf);

    impl Temp {
        fn new(label: &str) -> Temp {
            let path =
                std::env::temp_dir().join(format!("brig-rootfs-{label}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir(&path).unwrap();
            Temp(path)
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// (path, type, mode, uid, gid, user, group, mtime, link, data) of every entry, as the
    /// tar crate's reader sees them (pax records applied, checksums checked).
    type Seen = (
        Vec<u8>,
        u8,
        u32,
        u64,
        u64,
        String,
        String,
        u64,
        Vec<u8>,
        Vec<u8>,
    );

    fn read_back(archive: &Path) -> Vec<Seen> {
        let mut archive = tar::Archive::new(File::open(archive).unwrap());
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let header = entry.header().clone();
            let path = entry.path_bytes().into_owned();
            let link = entry
                .link_name_bytes()
                .map(|link| link.into_owned())
                .unwrap_or_default();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            assert!(header.as_ustar().is_some(), "not a ustar header");
            seen.push((
                path,
                header.entry_type().as_byte(),
                header.mode().unwrap(),
                header.uid().unwrap(),
                header.gid().unwrap(),
                header.username().unwrap().unwrap().to_string(),
                header.groupname().unwrap().unwrap().to_string(),
                header.mtime().unwrap(),
                link,
                data,
            ));
        }
        seen
    }

    #[test]
    fn archive_is_ustar_with_fixed_owners_and_times() {
        let temp = Temp::new("tar-fixed");
        let root = temp.0.join("root");
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::write(root.join("usr/bin/x"), b"abc").unwrap();
        fs::set_permissions(root.join("usr/bin/x"), fs::Permissions::from_mode(0o755)).unwrap();
        symlink("usr/bin", root.join("bin")).unwrap();
        fs::write(root.join(DIGEST_FILE), b"sha256:0\n").unwrap();
        fs::set_permissions(root.join("usr"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(root.join("usr/bin"), fs::Permissions::from_mode(0o755)).unwrap();
        let first = temp.0.join("first.tar");
        let second = temp.0.join("second.tar");
        write_tar(&root, &first, 1_700_000_000).unwrap();
        write_tar(&root, &second, 1_700_000_000).unwrap();
        let bytes = fs::read(&first).unwrap();
        assert_eq!(bytes, fs::read(&second).unwrap());
        // Five headers, a block of data for each of the two files, two zero blocks.
        assert_eq!(bytes.len(), 512 * (5 + 2 + 2));
        assert_eq!(&bytes[257..265], b"ustar\x0000");
        let owner = |path: &str, kind: u8, mode: u32, link: &str, data: &str| -> Seen {
            let (user, mtime) = ("root".to_string(), 1_700_000_000);
            let (link, data) = (link.as_bytes().to_vec(), data.as_bytes().to_vec());
            (
                path.into(),
                kind,
                mode,
                0,
                0,
                user.clone(),
                user,
                mtime,
                link,
                data,
            )
        };
        assert_eq!(
            read_back(&first),
            vec![
                owner(DIGEST_FILE, b'0', 0o644, "", "sha256:0\n"),
                owner("bin", b'2', 0o777, "usr/bin", ""),
                owner("usr/", b'5', 0o755, "", ""),
                owner("usr/bin/", b'5', 0o755, "", ""),
                owner("usr/bin/x", b'0', 0o755, "", "abc"),
            ]
        );
    }

    #[test]
    fn long_names_and_link_targets_round_trip() {
        let temp = Temp::new("tar-long");
        let root = temp.0.join("root");
        // 101 to 255 bytes: ustar's prefix and name fields; longer, or a last component
        // over 100 bytes: a pax `path` record. A target over 100 bytes: a pax `linkpath`.
        let split = format!("srv/{}/file.txt", ["abcdefghijklmn"; 8].join("/"));
        let deep = format!(
            "srv/{}/f.txt",
            ["abcdefghijklmnopqrstuvwxyz012"; 10].join("/")
        );
        let wide = format!("srv/{}", "n".repeat(120));
        let target = format!("../../{}", "t".repeat(120));
        assert!(split.len() > 100 && split.len() <= 255 && deep.len() > 255);
        for (path, contents) in [(&split, "split\n"), (&deep, "deep\n"), (&wide, "wide\n")] {
            let real = root.join(path);
            fs::create_dir_all(real.parent().unwrap()).unwrap();
            fs::write(&real, contents).unwrap();
            fs::set_permissions(&real, fs::Permissions::from_mode(0o644)).unwrap();
        }
        symlink(&target, root.join("srv/link")).unwrap();
        let archive = temp.0.join("long.tar");
        write_tar(&root, &archive, 0).unwrap();

        let seen = read_back(&archive);
        let find = |path: &str| seen.iter().find(|entry| entry.0 == path.as_bytes());
        for (path, contents) in [(&split, "split\n"), (&deep, "deep\n"), (&wide, "wide\n")] {
            let entry = find(path).unwrap_or_else(|| panic!("{path} not in the archive"));
            assert_eq!(entry.9, contents.as_bytes(), "{path}");
        }
        assert_eq!(find("srv/link").unwrap().8, target.as_bytes());

        // GNU tar reads it the same way.
        let out = temp.0.join("extracted");
        fs::create_dir(&out).unwrap();
        let status = Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&out)
            .status()
            .expect("GNU tar runs");
        assert!(status.success());
        for (path, contents) in [(&split, "split\n"), (&deep, "deep\n"), (&wide, "wide\n")] {
            assert_eq!(fs::read_to_string(out.join(path)).unwrap(), contents);
        }
        assert_eq!(
            fs::read_link(out.join("srv/link")).unwrap(),
            Path::new(&target)
        );
        assert_eq!(
            listing(&walk(&out).unwrap()).unwrap(),
            listing(&walk(&root).unwrap()).unwrap()
        );
    }
}
