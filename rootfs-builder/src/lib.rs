//! brig-rootfs: builds a hermetic, minimal root filesystem for `brig run --rootfs`, so that
//! a jail need not see the host's /usr at all.
//!
//! A YAML manifest lists programs (copied with their ELF closure: PT_INTERP and DT_NEEDED,
//! resolved through RPATH/RUNPATH, the loader cache and the standard directories), whole
//! directories, single files, symlinks and generated files; optionally Debian packages,
//! unpacked without installing them, serve as a source before the host. The output is a
//! directory (and optionally a tar archive) that is reproducible: the same inputs give the
//! same bytes, modes are normalized and times fixed (`SOURCE_DATE_EPOCH`, else 0). Its
//! digest, SHA-256 of a canonical listing (path, type, mode, size, content hash), is
//! written to `OUT/.brig-rootfs-digest` and reported by brig's verdict.

#![forbid(unsafe_code)]

mod debian;
mod elf;
mod glob;
mod image;
mod ldcache;
mod manifest;
mod output;

pub use manifest::{SHIPPED, shipped_names};

/// A serde-saphyr error as one line: `origin:line:column: message (at `source line`)`.
/// serde-saphyr renders a multi-line snippet; this keeps its first line without the
/// "error: line L column C:" prefix and quotes the offending source line instead, which
/// names the key. Shared with brig's `--config` parser.
pub fn yaml_error_line(err: &serde_saphyr::Error, text: &str, origin: &str) -> String {
    let rendered = err.to_string();
    let first_line = rendered.lines().next().unwrap_or_default();
    let message = first_line
        .split_once(": ")
        .map(|(_, rest)| rest)
        .map(|rest| match rest.split_once(": ") {
            Some((position, detail)) if position.starts_with("line ") => detail,
            _ => rest,
        })
        .unwrap_or(first_line)
        .trim_start_matches("error: ");
    match err.location() {
        Some(at) => {
            let quoted = text
                .lines()
                .nth(at.line().saturating_sub(1) as usize)
                .map(|line| format!(" (at `{}`)", line.trim()))
                .unwrap_or_default();
            format!("{origin}:{}:{}: {message}{quoted}", at.line(), at.column())
        }
        None => format!("{origin}: {message}"),
    }
}

use glob::Glob;
use image::{Image, Need, Source};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// In the root's top directory: the digest, one line `sha256:HEX`.
pub const DIGEST_FILE: &str = ".brig-rootfs-digest";
/// In the root's top directory: the canonical listing the digest is computed from.
pub const LISTING_FILE: &str = ".brig-rootfs-listing";

/// One line saying what went wrong and, where there is one, the fix.
#[derive(Debug)]
pub struct Error(String);

impl Error {
    pub fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }

    fn within(self, context: &str) -> Error {
        Error(format!("{context}: {}", self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

#[derive(Debug, Default)]
pub struct Options {
    /// Also write the root as a tar archive here.
    pub tar: Option<PathBuf>,
    /// Replace `out` if it is a root built before (it has a digest file).
    pub force: bool,
}

#[derive(Debug)]
pub struct Summary {
    pub digest: String,
    pub entries: usize,
    pub bytes: u64,
    /// Things left out that the reader should know about (missing optional libraries,
    /// dangling links, special files).
    pub notes: Vec<String>,
    /// The Debian packages unpacked, as .deb file names (name_version_arch).
    pub debs: Vec<String>,
}

/// The digest recorded in a root built by brig-rootfs, if it has one.
pub fn recorded_digest(dir: &Path) -> Option<String> {
    let text = fs::read_to_string(dir.join(DIGEST_FILE)).ok()?;
    let digest = text.trim();
    let valid = digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    valid.then(|| digest.to_string())
}

/// A cheap check, for every run: the first entry of the root or of its top level that
/// changed after the digest was recorded (its ctime is later), if any. Changes deeper in
/// the tree are left to `verify`, which reads every file.
pub fn changed_since_recorded(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let recorded = fs::symlink_metadata(dir.join(DIGEST_FILE)).ok()?;
    // The build renames the finished root into place right after writing the digest.
    let limit = recorded.ctime() + 2;
    let changed = |path: &Path| fs::symlink_metadata(path).is_ok_and(|meta| meta.ctime() > limit);
    if changed(dir) {
        return Some(dir.to_path_buf());
    }
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| changed(path))
}

/// Recomputes the digest of `dir` and compares it with the recorded one. Returns the
/// digest, or an error naming the first entries that differ.
pub fn verify(dir: &Path) -> Result<String, Error> {
    let recorded = recorded_digest(dir).ok_or_else(|| {
        Error::new(format!(
            "{}: no {DIGEST_FILE} here; it is not a root built by `brig rootfs build`",
            dir.display()
        ))
    })?;
    let listing = output::listing(&output::walk(dir)?)?;
    let digest = output::digest_of(&listing);
    if digest == recorded {
        return Ok(digest);
    }
    let stored = fs::read_to_string(dir.join(LISTING_FILE)).unwrap_or_default();
    let old: std::collections::BTreeSet<&str> = stored.lines().collect();
    let new: std::collections::BTreeSet<&str> = listing.lines().collect();
    let mut changes: Vec<String> = new
        .difference(&old)
        .map(|line| format!("+{line}"))
        .chain(old.difference(&new).map(|line| format!("-{line}")))
        .take(3)
        .collect();
    if changes.is_empty() {
        changes.push(format!("{LISTING_FILE} was changed too"));
    }
    Err(Error::new(format!(
        "{}: the root changed since it was built: digest {digest}, recorded {recorded} ({}); rebuild it",
        dir.display(),
        changes.join(", ")
    )))
}

/// The build time every entry gets: `SOURCE_DATE_EPOCH`, else 0.
fn build_time() -> Result<u64, Error> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(text) => text.trim().parse().map_err(|_| {
            Error::new(format!(
                "SOURCE_DATE_EPOCH={text}: not a number of seconds; unset it or give e.g. 1700000000"
            ))
        }),
        Err(_) => Ok(0),
    }
}

/// A directory next to `out` that is removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(out: &Path, label: &str) -> Result<Scratch, Error> {
        let name = out
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "rootfs".into());
        let path = out.with_file_name(format!(".{name}.{label}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir(&path)
            .map_err(|err| Error::new(format!("create {}: {err}", path.display())))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Builds the root that `manifest` (a shipped name or a YAML file) describes into `out`.
pub fn build(manifest: &str, out: &Path, options: &Options) -> Result<Summary, Error> {
    let (origin, text) = manifest::load(manifest)?;
    let manifest = manifest::parse(&text, &origin)?;
    let mtime = build_time()?;
    check_out(out, options.force)?;

    let staging = if manifest.debian_packages.is_empty() {
        None
    } else {
        Some(Scratch::new(out, "staging")?)
    };
    let mut sources = Vec::new();
    let mut debs = Vec::new();
    if let Some(staging) = &staging {
        debs = debian::unpack(&manifest.debian_packages, &staging.0)?;
        sources.push(Source::staging(staging.0.join("root")));
    }
    sources.push(Source::host());
    let excludes = manifest
        .exclude
        .iter()
        .map(|pattern| Glob::new(pattern).map_err(|why| Error::new(format!("exclude: {why}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let mut image = Image::new(sources, excludes);
    fill(&mut image, &manifest)?;

    let partial = Scratch::new(out, "partial")?;
    output::write(&partial.0, &image.nodes)?;
    output::set_times(&partial.0, mtime)?;
    let entries = output::walk(&partial.0)?;
    let bytes = entries
        .iter()
        .filter(|entry| matches!(entry.kind, output::EntryKind::File))
        .filter_map(|entry| fs::metadata(&entry.real).ok())
        .map(|meta| meta.len())
        .sum();
    let listing = output::listing(&entries)?;
    let digest = output::digest_of(&listing);
    for (name, contents) in [
        (LISTING_FILE, listing.clone()),
        (DIGEST_FILE, format!("{digest}\n")),
    ] {
        let path = partial.0.join(name);
        fs::write(&path, contents)
            .map_err(|err| Error::new(format!("write {}: {err}", path.display())))?;
    }
    output::set_times(&partial.0, mtime)?;
    if let Some(tar) = &options.tar {
        output::write_tar(&partial.0, tar, mtime)?;
    }
    if out.exists() {
        fs::remove_dir_all(out)
            .map_err(|err| Error::new(format!("replace {}: {err}", out.display())))?;
    }
    fs::rename(&partial.0, out).map_err(|err| {
        Error::new(format!(
            "move the root into place at {}: {err}",
            out.display()
        ))
    })?;
    Ok(Summary {
        digest,
        entries: entries.len(),
        bytes,
        notes: image.notes,
        debs,
    })
}

/// `out` must be new, an empty directory, or (with `force`) a root built before.
fn check_out(out: &Path, force: bool) -> Result<(), Error> {
    let parent = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Error::new(format!(
            "{}: its parent directory does not exist; create it first",
            out.display()
        )));
    }
    let Ok(meta) = fs::symlink_metadata(out) else {
        return Ok(());
    };
    let empty = meta.is_dir()
        && fs::read_dir(out)
            .map(|mut entries| entries.next().is_none())
            .unwrap_or(false);
    if empty {
        return Ok(());
    }
    if meta.is_dir() && recorded_digest(out).is_some() {
        if force {
            return Ok(());
        }
        return Err(Error::new(format!(
            "{}: already holds a root; add --force to replace it",
            out.display()
        )));
    }
    Err(Error::new(format!(
        "{}: exists and is not a root brig built; give a new directory",
        out.display()
    )))
}

/// Everything the manifest asks for, in a fixed order.
fn fill(image: &mut Image, manifest: &manifest::Manifest) -> Result<(), Error> {
    let etc = &manifest.etc;
    let home = jail_path("etc: home", &etc.home)?;
    // The mount points brig needs in a prepared root.
    for dir in ["/etc", "/proc", "/dev", "/tmp"] {
        image.add_dir(Path::new(dir))?;
    }
    image.add_dir(&home)?;
    for program in &manifest.programs {
        let path = image.find_program(program).ok_or_else(|| {
            Error::new(format!(
                "programs: {program}: not found{}; give an absolute path or install it",
                if program.starts_with('/') {
                    String::new()
                } else {
                    format!(" in {}", image::PROGRAM_PATH.join(":"))
                }
            ))
        })?;
        image
            .add_path(&path, Need::Required)
            .map_err(|err| err.within(&format!("programs: {program}")))?;
    }
    for spec in &manifest.trees {
        let (src, dst) = split_spec("trees", spec)?;
        for src in expand("trees", image, &src)? {
            image.add_tree(&src, dst.as_deref())?;
        }
    }
    for spec in &manifest.files {
        let (src, dst) = split_spec("files", spec)?;
        match dst {
            Some(dst) => image.add_file_as(&src, &dst)?,
            None => {
                image
                    .add_path(&src, Need::Required)
                    .map_err(|err| err.within("files"))?;
            }
        }
    }
    for dir in &manifest.dirs {
        image.add_dir(&jail_path("dirs", dir)?)?;
    }
    for (path, target) in &manifest.symlinks {
        image.add_symlink(&jail_path("symlinks", path)?, Path::new(target))?;
    }
    for (path, contents) in etc_files(etc) {
        image.add_data(Path::new(path), contents.into_bytes())?;
    }
    for (path, contents) in &manifest.write {
        image.add_data(&jail_path("write", path)?, contents.clone().into_bytes())?;
    }
    Ok(())
}

/// The generated /etc: the jail's user, root and nobody; localhost; files-only lookups.
fn etc_files(etc: &manifest::Etc) -> Vec<(&'static str, String)> {
    let manifest::Etc {
        user,
        uid,
        gid,
        home,
        shell,
        hostname,
    } = etc;
    let passwd = format!(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n{user}:x:{uid}:{gid}:{user}:{home}:{shell}\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    );
    let group = format!("root:x:0:\n{user}:x:{gid}:\nnogroup:x:65534:\n");
    let hosts = format!(
        "127.0.0.1\tlocalhost\n127.0.1.1\t{hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    );
    let nsswitch = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n\
                    networks: files\nprotocols: files\nservices: files\n";
    vec![
        ("/etc/passwd", passwd),
        ("/etc/group", group),
        ("/etc/hosts", hosts),
        ("/etc/hostname", format!("{hostname}\n")),
        ("/etc/nsswitch.conf", nsswitch.to_string()),
    ]
}

/// `SRC` or `SRC:DST`, both absolute.
fn split_spec(key: &str, spec: &str) -> Result<(PathBuf, Option<PathBuf>), Error> {
    match spec.split_once(':') {
        Some((src, dst)) => Ok((
            jail_path(key, src)?,
            Some(jail_path(&format!("{key}: {spec}"), dst)?),
        )),
        None => Ok((jail_path(key, spec)?, None)),
    }
}

fn jail_path(key: &str, text: &str) -> Result<PathBuf, Error> {
    let path = Path::new(text);
    if !path.is_absolute()
        || path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(Error::new(format!(
            "{key}: '{text}' must be an absolute path without '..'"
        )));
    }
    Ok(path.to_path_buf())
}

/// A path with `*` or `?` expanded against the sources, in sorted order.
fn expand(key: &str, image: &Image, path: &Path) -> Result<Vec<PathBuf>, Error> {
    let text = path.to_string_lossy();
    let pattern = Glob::new(&text).map_err(|why| Error::new(format!("{key}: {why}")))?;
    if !pattern.has_wildcards() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found = vec![PathBuf::from("/")];
    for part in text.split('/').filter(|part| !part.is_empty()) {
        let mut next = Vec::new();
        for dir in &found {
            if !part.contains(['*', '?']) {
                next.push(dir.join(part));
                continue;
            }
            let matcher =
                glob::component(part).map_err(|why| Error::new(format!("{key}: {why}")))?;
            let mut names = std::collections::BTreeSet::new();
            for source in image.sources() {
                if let Ok(entries) = fs::read_dir(source.real(dir)) {
                    for entry in entries.flatten() {
                        let name = entry.file_name();
                        if matcher.is_match(&name) {
                            names.insert(name);
                        }
                    }
                }
            }
            next.extend(names.into_iter().map(|name| dir.join(name)));
        }
        found = next;
    }
    found.retain(|path| image.sources().iter().any(|s| s.resolve(path).is_some()));
    if found.is_empty() {
        return Err(Error::new(format!(
            "{key}: {text}: matches nothing on the host"
        )));
    }
    Ok(found)
}

/// Parses a manifest without building anything; the error is the one `build` would give.
pub fn check_manifest(text: &str) -> Result<(), String> {
    manifest::parse(text, "manifest")
        .map(drop)
        .map_err(|err| err.to_string())
}
