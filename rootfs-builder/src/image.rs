//! The root being built, as an in-memory tree of nodes keyed by path, filled from one or
//! more sources (a staging tree of unpacked Debian packages, then the host).
//!
//! Paths are looked up in a source the way the kernel would inside a chroot of it, and
//! every symlink met on the way is recreated in the image, so that a path that works on
//! the host (say `/lib64/ld-linux-x86-64.so.2` through merged-/usr symlinks) works the same
//! way in the root. Writing into the image follows the image's own symlinks, so sources
//! with different layouts (a package's real /bin beside the host's /bin -> usr/bin) merge.

use crate::elf::{self, Elf};
use crate::glob::Glob;
use crate::{Error, ldcache};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// How many symlinks a lookup may pass through, as the kernel's limit.
const MAX_HOPS: usize = 40;

/// Where PATH lookups for `programs` go: the jail's own PATH plus the sbin directories.
pub const PROGRAM_PATH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"];

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Dir,
    /// A copy of `src` (a real path on this machine).
    File {
        src: PathBuf,
        exec: bool,
    },
    /// Generated contents.
    Data {
        bytes: Vec<u8>,
    },
    Symlink {
        target: PathBuf,
    },
}

/// A tree the image is filled from, e.g. `/` (the host) or a staging directory.
#[derive(Clone, Debug)]
pub struct Source {
    pub root: PathBuf,
    /// The host's loader cache; staging trees have none.
    pub ldcache: Vec<(String, PathBuf)>,
}

impl Source {
    pub fn host() -> Source {
        Source {
            root: PathBuf::from("/"),
            ldcache: ldcache::read(Path::new("/etc/ld.so.cache")),
        }
    }

    pub fn staging(root: PathBuf) -> Source {
        Source {
            root,
            ldcache: Vec::new(),
        }
    }

    /// The real path of `path` (absolute, in this source's namespace).
    pub fn real(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    fn lstat(&self, path: &Path) -> Option<fs::Metadata> {
        fs::symlink_metadata(self.real(path)).ok()
    }

    /// Resolves `path` inside this source as a chroot would: the path of the object it
    /// names, with no symlink left in it, if it exists.
    pub fn resolve(&self, path: &Path) -> Option<PathBuf> {
        let mut pending: Vec<PathBuf> = vec![path.to_path_buf()];
        let mut hops = 0;
        'restart: while let Some(path) = pending.pop() {
            let parts = normal_parts(&path);
            let mut done = PathBuf::from("/");
            for (index, part) in parts.iter().enumerate() {
                let next = done.join(part);
                let meta = self.lstat(&next)?;
                if meta.file_type().is_symlink() {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return None;
                    }
                    let target = fs::read_link(self.real(&next)).ok()?;
                    let mut resolved = join_target(&done, &target);
                    for rest in &parts[index + 1..] {
                        resolved.push(rest);
                    }
                    pending.push(resolved);
                    continue 'restart;
                }
                if index + 1 < parts.len() && !meta.is_dir() {
                    return None;
                }
                done = next;
            }
            return Some(done);
        }
        None
    }
}

/// Everything added so far, and what is still to do.
pub struct Image {
    pub nodes: BTreeMap<PathBuf, Node>,
    sources: Vec<Source>,
    excludes: Vec<Glob>,
    /// ELF objects already followed to their libraries.
    scanned: BTreeSet<PathBuf>,
    /// While a library is added: the directory it was found in, its `$ORIGIN` as glibc's
    /// loader computes it (the path it opened, symlinks not resolved; a program's is its
    /// resolved path, from /proc/self/exe).
    library_origin: Option<PathBuf>,
    /// Things left out that a reader should know about.
    pub notes: Vec<String>,
}

/// Whether a missing library is an error (programs, files) or a note (trees).
#[derive(Clone, Copy, PartialEq)]
pub enum Need {
    Required,
    Optional,
}

impl Image {
    pub fn new(sources: Vec<Source>, excludes: Vec<Glob>) -> Image {
        Image {
            nodes: BTreeMap::new(),
            sources,
            excludes,
            scanned: BTreeSet::new(),
            library_origin: None,
            notes: Vec::new(),
        }
    }

    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// The first source that has `path`, with the path resolved in it.
    fn locate(&self, path: &Path) -> Option<(Source, PathBuf)> {
        self.sources
            .iter()
            .find_map(|source| Some((source.clone(), source.resolve(path)?)))
    }

    /// A program by absolute path, or by name in `PROGRAM_PATH`, in the first source that
    /// has it.
    pub fn find_program(&self, name: &str) -> Option<PathBuf> {
        if name.starts_with('/') {
            return self.locate(Path::new(name)).map(|_| PathBuf::from(name));
        }
        if name.contains('/') {
            return None;
        }
        PROGRAM_PATH.iter().find_map(|dir| {
            let candidate = Path::new(dir).join(name);
            let (source, resolved) = self.locate(&candidate)?;
            let meta = fs::metadata(source.real(&resolved)).ok()?;
            (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
        })
    }

    /// Adds `path` (and the symlinks leading to it) as it is in the first source that has
    /// it; a directory is added empty. ELF files bring their libraries, scripts their
    /// interpreter. Returns where it ended up in the image.
    pub fn add_path(&mut self, path: &Path, need: Need) -> Result<PathBuf, Error> {
        let (source, _) = self.locate(path).ok_or_else(|| {
            Error::new(format!(
                "{}: not found{}",
                path.display(),
                self.where_looked()
            ))
        })?;
        self.add_from(&source, path, need)
    }

    fn where_looked(&self) -> String {
        if self.sources.len() > 1 {
            " in the Debian packages or on the host".into()
        } else {
            " on the host".into()
        }
    }

    /// Walks `path` in `source`, mirroring each symlink into the image.
    fn add_from(&mut self, source: &Source, path: &Path, need: Need) -> Result<PathBuf, Error> {
        let mut path = path.to_path_buf();
        for _ in 0..MAX_HOPS {
            let parts = normal_parts(&path);
            let mut done = PathBuf::from("/");
            let mut followed = None;
            for (index, part) in parts.iter().enumerate() {
                let next = done.join(part);
                let meta = source.lstat(&next).ok_or_else(|| {
                    Error::new(format!("{}: not found", source.real(&next).display()))
                })?;
                if meta.file_type().is_symlink() {
                    let target = fs::read_link(source.real(&next)).map_err(|err| {
                        Error::new(format!("read the symlink {}: {err}", next.display()))
                    })?;
                    self.insert(
                        &next,
                        Node::Symlink {
                            target: target.clone(),
                        },
                    )?;
                    let mut resolved = join_target(&done, &target);
                    for rest in &parts[index + 1..] {
                        resolved.push(rest);
                    }
                    followed = Some(resolved);
                    break;
                }
                if index + 1 < parts.len() {
                    if !meta.is_dir() {
                        return Err(Error::new(format!(
                            "{}: {} is not a directory",
                            path.display(),
                            next.display()
                        )));
                    }
                    self.insert(&next, Node::Dir)?;
                } else {
                    self.add_entry(source, &next, &meta, need)?;
                }
                done = next;
            }
            match followed {
                Some(next) => path = next,
                None => return Ok(self.image_path(&done)),
            }
        }
        Err(Error::new(format!(
            "{}: too many levels of symlinks",
            path.display()
        )))
    }

    /// One object, not following a final symlink (the caller handles those).
    fn add_entry(
        &mut self,
        source: &Source,
        path: &Path,
        meta: &fs::Metadata,
        need: Need,
    ) -> Result<(), Error> {
        let file_type = meta.file_type();
        if file_type.is_dir() {
            self.insert(path, Node::Dir)
        } else if file_type.is_file() {
            let src = source.real(path);
            self.insert(
                path,
                Node::File {
                    src: src.clone(),
                    exec: meta.permissions().mode() & 0o111 != 0,
                },
            )?;
            self.follow_dependencies(source, path, &src, need)
        } else if file_type.is_symlink() {
            let target = fs::read_link(source.real(path))
                .map_err(|err| Error::new(format!("read the symlink {}: {err}", path.display())))?;
            self.insert(path, Node::Symlink { target })
        } else {
            self.notes.push(format!(
                "{}: skipped, not a file, directory or symlink",
                path.display()
            ));
            Ok(())
        }
    }

    /// A directory copied whole (`into`: where it goes, when not where it is).
    pub fn add_tree(&mut self, path: &Path, into: Option<&Path>) -> Result<(), Error> {
        let (source, resolved) = self.locate(path).ok_or_else(|| {
            Error::new(format!(
                "trees: {}: not found{}",
                path.display(),
                self.where_looked()
            ))
        })?;
        if !fs::metadata(source.real(&resolved)).is_ok_and(|meta| meta.is_dir()) {
            return Err(Error::new(format!(
                "trees: {}: not a directory; list files under files:",
                path.display()
            )));
        }
        let top = match into {
            Some(dst) => {
                self.insert(dst, Node::Dir)?;
                dst.to_path_buf()
            }
            None => {
                self.add_from(&source, path, Need::Optional)?;
                resolved.clone()
            }
        };
        self.copy_dir(&source, &resolved, &top, &resolved)
    }

    fn copy_dir(
        &mut self,
        source: &Source,
        dir: &Path,
        dst: &Path,
        tree_top: &Path,
    ) -> Result<(), Error> {
        let real = source.real(dir);
        let mut names: Vec<_> = fs::read_dir(&real)
            .map_err(|err| Error::new(format!("read {}: {err}", real.display())))?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|err| Error::new(format!("read {}: {err}", real.display())))?;
        names.sort();
        for name in names {
            let src_path = dir.join(&name);
            let dst_path = dst.join(&name);
            if self.excludes.iter().any(|glob| glob.matches(&dst_path)) {
                continue;
            }
            let meta = source
                .lstat(&src_path)
                .ok_or_else(|| Error::new(format!("{}: vanished", src_path.display())))?;
            if meta.is_dir() {
                self.insert(&dst_path, Node::Dir)?;
                self.copy_dir(source, &src_path, &dst_path, tree_top)?;
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(source.real(&src_path)).map_err(|err| {
                    Error::new(format!("read the symlink {}: {err}", src_path.display()))
                })?;
                self.insert(
                    &dst_path,
                    Node::Symlink {
                        target: target.clone(),
                    },
                )?;
                // A link out of the tree (Debian's sitecustomize.py -> /etc/python3.11/...)
                // brings its target along, so that it does not dangle in the root.
                let points_to = join_target(dir, &target);
                if !points_to.starts_with(tree_top) {
                    match self.locate(&points_to) {
                        Some(_) => {
                            self.add_path(&points_to, Need::Optional)?;
                        }
                        None => self.notes.push(format!(
                            "{} -> {}: the target is not on the host; the link dangles",
                            dst_path.display(),
                            target.display()
                        )),
                    }
                }
            } else if meta.is_file() {
                let src = source.real(&src_path);
                self.insert(
                    &dst_path,
                    Node::File {
                        src: src.clone(),
                        exec: meta.permissions().mode() & 0o111 != 0,
                    },
                )?;
                self.follow_dependencies(source, &src_path, &src, Need::Optional)?;
            } else {
                self.notes.push(format!(
                    "{}: skipped, not a file, directory or symlink",
                    src_path.display()
                ));
            }
        }
        Ok(())
    }

    /// A single file copied to `dst`.
    pub fn add_file_as(&mut self, path: &Path, dst: &Path) -> Result<(), Error> {
        let (source, resolved) = self.locate(path).ok_or_else(|| {
            Error::new(format!(
                "files: {}: not found{}",
                path.display(),
                self.where_looked()
            ))
        })?;
        let src = source.real(&resolved);
        let meta = fs::metadata(&src)
            .map_err(|err| Error::new(format!("files: {}: {err}", src.display())))?;
        if !meta.is_file() {
            return Err(Error::new(format!(
                "files: {}: not a regular file; list directories under trees:",
                path.display()
            )));
        }
        self.insert(
            dst,
            Node::File {
                src: src.clone(),
                exec: meta.permissions().mode() & 0o111 != 0,
            },
        )?;
        self.follow_dependencies(&source, &resolved, &src, Need::Required)
    }

    /// The loader, libraries (ELF) or interpreter (`#!`) that `path` needs.
    fn follow_dependencies(
        &mut self,
        source: &Source,
        path: &Path,
        real: &Path,
        need: Need,
    ) -> Result<(), Error> {
        let origin = self
            .library_origin
            .take()
            .unwrap_or_else(|| path.parent().unwrap_or(Path::new("/")).to_path_buf());
        if !self.scanned.insert(real.to_path_buf()) {
            return Ok(());
        }
        let elf = match elf::read(real) {
            Ok(Some(elf)) => elf,
            Ok(None) => {
                // Scripts named as programs or files bring their interpreter; scripts in
                // trees (a library's `#!/usr/bin/env python3` modules) do not.
                if need == Need::Required
                    && let Ok(Some(interpreter)) = elf::shebang(real)
                    && interpreter.starts_with('/')
                {
                    if self.locate(Path::new(&interpreter)).is_none() {
                        return Err(Error::new(format!(
                            "{}: its interpreter {interpreter} is not found{}",
                            path.display(),
                            self.where_looked()
                        )));
                    }
                    self.add_path(Path::new(&interpreter), need)?;
                }
                return Ok(());
            }
            Err(err) => {
                self.notes
                    .push(format!("{err}; its libraries were not followed"));
                return Ok(());
            }
        };
        if let Some(interp) = &elf.interp {
            self.add_path(Path::new(interp), Need::Required)
                .map_err(|err| err.within(&format!("{}: its loader", path.display())))?;
        }
        for name in &elf.needed {
            match self.find_library(source, name, &elf, &origin) {
                Some(library) => {
                    // A library reached through a symlink (Debian's alternatives:
                    // libblas.so.3 -> .../openblas-pthread/libblas.so.3) looks for its
                    // $ORIGIN libraries beside the link, where the root needs them too.
                    self.library_origin = library.parent().map(Path::to_path_buf);
                    let added = self.add_path(&library, need);
                    self.library_origin = None;
                    added?;
                }
                None if need == Need::Required => {
                    return Err(Error::new(format!(
                        "{}: needs {name}, which is not found{}; add it with files:",
                        path.display(),
                        self.where_looked()
                    )));
                }
                None => self.notes.push(format!(
                    "{}: needs {name}, not found; left out (it cannot load here either)",
                    path.display()
                )),
            }
        }
        Ok(())
    }

    /// Where the loader would find `name` for `object`: DT_RPATH (without DT_RUNPATH),
    /// DT_RUNPATH, the loader cache, then the standard directories; the first file of the
    /// object's class and machine wins.
    fn find_library(
        &self,
        object_source: &Source,
        name: &str,
        object: &Elf,
        origin: &Path,
    ) -> Option<PathBuf> {
        if name.contains('/') {
            return Some(join_target(origin, Path::new(name)));
        }
        let expand = |dir: &str| -> PathBuf {
            let lib = if object.class64 { "lib64" } else { "lib" };
            let text = dir
                .replace("${ORIGIN}", &origin.to_string_lossy())
                .replace("$ORIGIN", &origin.to_string_lossy())
                .replace("${LIB}", lib)
                .replace("$LIB", lib);
            PathBuf::from(text)
        };
        let mut dirs: Vec<PathBuf> = Vec::new();
        if object.runpath.is_empty() {
            dirs.extend(object.rpath.iter().map(|dir| expand(dir)));
        }
        dirs.extend(object.runpath.iter().map(|dir| expand(dir)));
        let mut candidates: Vec<PathBuf> = dirs.iter().map(|dir| dir.join(name)).collect();
        // The loader cache of the source the object came from, then the host's.
        for source in [object_source].into_iter().chain(self.sources.iter()) {
            candidates.extend(
                source
                    .ldcache
                    .iter()
                    .filter(|(key, _)| key == name)
                    .map(|(_, path)| path.clone()),
            );
        }
        let mut standard = Vec::new();
        if let Some(triplet) = object.multiarch() {
            standard.push(format!("/lib/{triplet}"));
            standard.push(format!("/usr/lib/{triplet}"));
        }
        if object.class64 {
            standard.extend(["/lib64".into(), "/usr/lib64".into()]);
        }
        standard.extend(["/lib".into(), "/usr/lib".into()]);
        candidates.extend(standard.iter().map(|dir| Path::new(dir).join(name)));
        candidates.into_iter().find(|candidate| {
            if !candidate.is_absolute() {
                return false;
            }
            let Some((source, resolved)) = self.locate(candidate) else {
                return false;
            };
            matches!(elf::read(&source.real(&resolved)), Ok(Some(lib)) if lib.compatible(object))
        })
    }

    /// Creates a directory (and its parents) that nothing on the host has to provide.
    pub fn add_dir(&mut self, path: &Path) -> Result<(), Error> {
        self.insert(path, Node::Dir)
    }

    pub fn add_symlink(&mut self, path: &Path, target: &Path) -> Result<(), Error> {
        self.replace(
            path,
            Node::Symlink {
                target: target.to_path_buf(),
            },
        )
    }

    pub fn add_data(&mut self, path: &Path, bytes: Vec<u8>) -> Result<(), Error> {
        self.replace(path, Node::Data { bytes })
    }

    /// Inserts a node, the same again being fine; a directory stays a directory, and a
    /// symlink already in place (mirrored from another source) wins over a directory.
    fn insert(&mut self, path: &Path, node: Node) -> Result<(), Error> {
        let at = self.place(path)?;
        if at == Path::new("/") {
            return Ok(());
        }
        match (self.nodes.get(&at), &node) {
            (None, _) => {
                self.nodes.insert(at, node);
                Ok(())
            }
            (Some(Node::Dir), Node::Dir) => Ok(()),
            // Sources disagree on the layout (a package's real /bin, the host's symlink):
            // the first one placed wins, and paths resolve through it either way.
            (Some(Node::Symlink { .. }), Node::Dir) | (Some(Node::Dir), Node::Symlink { .. }) => {
                Ok(())
            }
            (Some(Node::Dir), _) => Err(Error::new(format!(
                "{}: already a directory in the root, cannot also be a file or symlink",
                at.display()
            ))),
            (Some(_), _) => {
                self.nodes.insert(at, node);
                Ok(())
            }
        }
    }

    /// Like `insert`, for entries the manifest writes on purpose: they replace a file or
    /// symlink already there.
    fn replace(&mut self, path: &Path, node: Node) -> Result<(), Error> {
        let at = self.place(path)?;
        if matches!(self.nodes.get(&at), Some(Node::Dir)) || at == Path::new("/") {
            return Err(Error::new(format!(
                "{}: already a directory in the root",
                at.display()
            )));
        }
        self.nodes.insert(at, node);
        Ok(())
    }

    /// Where `path` lands in the image: its parent resolved through the image's own
    /// symlinks (as in a chroot of the root), created as directories where missing.
    fn place(&mut self, path: &Path) -> Result<PathBuf, Error> {
        let parts = normal_parts(path);
        let Some((last, parents)) = parts.split_last() else {
            return Ok(PathBuf::from("/"));
        };
        let mut dir = PathBuf::from("/");
        for part in parents {
            dir = self.step(&dir, part, 0)?;
        }
        Ok(dir.join(last))
    }

    /// One step of an image path lookup that must end on a directory.
    fn step(&mut self, dir: &Path, part: &str, hops: usize) -> Result<PathBuf, Error> {
        if hops > MAX_HOPS {
            return Err(Error::new(format!(
                "{}: too many levels of symlinks in the root",
                dir.join(part).display()
            )));
        }
        let next = dir.join(part);
        match self.nodes.get(&next).cloned() {
            None => {
                self.nodes.insert(next.clone(), Node::Dir);
                Ok(next)
            }
            Some(Node::Dir) => Ok(next),
            Some(Node::Symlink { target }) => {
                let resolved = join_target(dir, &target);
                let mut at = PathBuf::from("/");
                for part in normal_parts(&resolved) {
                    at = self.step(&at, &part, hops + 1)?;
                }
                Ok(at)
            }
            Some(_) => Err(Error::new(format!(
                "{}: a file in the root, but a directory is needed there",
                next.display()
            ))),
        }
    }

    /// The image path of a source path (the same, but resolved through image symlinks).
    fn image_path(&mut self, path: &Path) -> PathBuf {
        self.place(path).unwrap_or_else(|_| path.to_path_buf())
    }
}

/// A symlink's target as an absolute path, from the directory holding the link; `..` is
/// resolved lexically (the directory itself has no symlinks in it), never above `/`.
pub fn join_target(dir: &Path, target: &Path) -> PathBuf {
    let joined = if target.is_absolute() {
        target.to_path_buf()
    } else {
        dir.join(target)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn normal_parts(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|component| match component {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_join_lexically() {
        assert_eq!(
            join_target(Path::new("/usr/lib64"), Path::new("../lib/x/ld.so")),
            Path::new("/usr/lib/x/ld.so")
        );
        assert_eq!(
            join_target(Path::new("/a"), Path::new("../../../etc")),
            Path::new("/etc")
        );
        assert_eq!(
            join_target(Path::new("/a"), Path::new("/b/c")),
            Path::new("/b/c")
        );
    }

    #[test]
    fn image_symlinks_are_followed_when_placing() {
        let mut image = Image::new(vec![], vec![]);
        image
            .add_symlink(Path::new("/bin"), Path::new("usr/bin"))
            .unwrap();
        image
            .add_data(Path::new("/bin/tool"), b"x".to_vec())
            .unwrap();
        assert!(image.nodes.contains_key(Path::new("/usr/bin/tool")));
        assert!(matches!(
            image.nodes.get(Path::new("/usr/bin")),
            Some(Node::Dir)
        ));
    }
}
