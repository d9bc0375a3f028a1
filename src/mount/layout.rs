//! The jail's filesystem as an ordered list of mount operations, planned in the parent
//! from the host's layout and the options, executed in order by `mnt` in the child.

use crate::options::ProcMode;
use crate::units::Size;
use serde::{Serialize, Serializer};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum MountOp {
    /// The jail's root: a fresh tmpfs, made read-only once everything is mounted.
    RootTmpfs {
        size: Size,
    },
    /// The jail's root: a prepared directory, bound read-only.
    RootBind {
        src: PathBuf,
    },
    Dir {
        dst: PathBuf,
    },
    Symlink {
        dst: PathBuf,
        target: PathBuf,
    },
    /// A host file or directory bound in, nosuid and nodev, read-only unless `writable`.
    Bind {
        src: PathBuf,
        dst: PathBuf,
        writable: bool,
        #[serde(skip)]
        is_dir: bool,
        /// The option that asked for it; absent for brig's own mounts.
        #[serde(skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    /// A host device node (null, zero, ...) bound onto an empty file.
    Device {
        src: PathBuf,
        dst: PathBuf,
    },
    Tmpfs {
        dst: PathBuf,
        size: Size,
        #[serde(serialize_with = "octal")]
        mode: u32,
        /// Owner inside the jail; the mounting user when absent.
        #[serde(skip_serializing_if = "Option::is_none")]
        owner: Option<Owner>,
        exec: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    Proc {
        dst: PathBuf,
    },
    Devpts {
        dst: PathBuf,
    },
    /// A small file brig writes into the (still writable) root, e.g. /etc/passwd.
    File {
        dst: PathBuf,
        #[serde(serialize_with = "shown_contents")]
        contents: String,
    },
    /// Makes the mount at `dst` read-only once it is populated, e.g. /dev.
    ReadOnly {
        dst: PathBuf,
    },
    /// A read-only overlay on a prepared root's directory `dst` (its /etc) with `files`
    /// written over what the root has there: the jail's resolv.conf and hosts.
    Overlay {
        dst: PathBuf,
        files: Vec<(PathBuf, String)>,
    },
}

impl MountOp {
    /// The option that asked for this operation, for error messages.
    pub fn from(&self) -> Option<&str> {
        match self {
            MountOp::Bind { from, .. } | MountOp::Tmpfs { from, .. } => from.as_deref(),
            _ => None,
        }
    }

    /// Where in the jail this operation acts.
    pub fn dst(&self) -> &Path {
        match self {
            MountOp::RootTmpfs { .. } | MountOp::RootBind { .. } => Path::new("/"),
            MountOp::Dir { dst }
            | MountOp::Symlink { dst, .. }
            | MountOp::Bind { dst, .. }
            | MountOp::Device { dst, .. }
            | MountOp::Tmpfs { dst, .. }
            | MountOp::Proc { dst }
            | MountOp::Devpts { dst }
            | MountOp::File { dst, .. }
            | MountOp::ReadOnly { dst }
            | MountOp::Overlay { dst, .. } => dst,
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

fn octal<S: Serializer>(mode: &u32, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&format_args!("{mode:04o}"))
}

/// Host directories bound read-only by default; merged-/usr symlinks stay symlinks.
const HOST_SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];

/// Host files and directories that make up the default /etc besides the generated files.
const HOST_ETC_ENTRIES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ssl/certs",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust/extracted",
    // Debian's alternatives: the symlinks through which system libraries are found
    // (libblas.so.3, so numpy and matplotlib) and commands named; symlinks only.
    "/etc/alternatives",
];

const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

pub struct Inputs<'a> {
    pub tmpfs_size: Size,
    /// The home directory's own size (a session's workspace).
    pub home_size: Size,
    pub proc: ProcMode,
    pub home: &'a Path,
    pub uid: u32,
    pub gid: u32,
    pub etc_files: Vec<(PathBuf, String)>,
    /// `--net filtered`: a prepared root gets the jail's resolv.conf and hosts too.
    pub network: bool,
}

/// The files of the synthesized /etc a prepared root must get under `--net filtered`, so
/// that the allowed names resolve through brig's resolver.
const NETWORK_ETC_FILES: &[&str] = &["/etc/resolv.conf", "/etc/hosts"];

/// The root built from the host's /usr and friends plus a synthesized /etc.
pub fn host_root(inputs: &Inputs) -> Vec<MountOp> {
    let mut ops = vec![MountOp::RootTmpfs {
        size: Size(1 << 20),
    }];
    for dir in HOST_SYSTEM_DIRS {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    ops.push(MountOp::Symlink {
                        dst: path.into(),
                        target,
                    });
                }
            }
            Ok(meta) if meta.is_dir() => ops.push(host_bind(path, false, true)),
            _ => {}
        }
    }
    ops.push(MountOp::Dir { dst: "/etc".into() });
    for (dst, contents) in &inputs.etc_files {
        ops.push(MountOp::File {
            dst: dst.clone(),
            contents: contents.clone(),
        });
    }
    for entry in HOST_ETC_ENTRIES {
        if let Ok(meta) = std::fs::metadata(entry) {
            ops.push(host_bind(Path::new(entry), false, meta.is_dir()));
        }
    }
    push_runtime_mounts(&mut ops, inputs);
    ops
}

/// A prepared root: only the runtime mounts go on top, onto mount points it must have,
/// and under `--net filtered` the jail's resolv.conf and hosts over its /etc.
pub fn prepared_root(rootfs: &Path, inputs: &Inputs) -> Vec<MountOp> {
    let mut ops = vec![MountOp::RootBind { src: rootfs.into() }];
    if inputs.network {
        let files = inputs
            .etc_files
            .iter()
            .filter(|(dst, _)| NETWORK_ETC_FILES.iter().any(|file| dst == Path::new(file)))
            .cloned()
            .collect();
        ops.push(MountOp::Overlay {
            dst: "/etc".into(),
            files,
        });
    }
    push_runtime_mounts(&mut ops, inputs);
    ops
}

/// /proc, /dev, /tmp and the home directory: fresh for every jail.
fn push_runtime_mounts(ops: &mut Vec<MountOp>, inputs: &Inputs) {
    ops.push(match inputs.proc {
        ProcMode::Fresh => MountOp::Proc {
            dst: "/proc".into(),
        },
        ProcMode::Host => MountOp::Bind {
            src: "/proc".into(),
            dst: "/proc".into(),
            writable: false,
            is_dir: true,
            from: Some("--proc host".into()),
        },
    });
    ops.push(MountOp::Tmpfs {
        dst: "/dev".into(),
        size: Size(64 << 10),
        mode: 0o755,
        owner: None,
        exec: false,
        from: None,
    });
    for device in DEVICES {
        let path = Path::new("/dev").join(device);
        ops.push(MountOp::Device {
            src: path.clone(),
            dst: path,
        });
    }
    ops.push(MountOp::Devpts {
        dst: "/dev/pts".into(),
    });
    let links = [
        ("/dev/ptmx", "pts/ptmx"),
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ];
    for (dst, target) in links {
        ops.push(MountOp::Symlink {
            dst: dst.into(),
            target: target.into(),
        });
    }
    ops.push(MountOp::Tmpfs {
        dst: "/dev/shm".into(),
        size: inputs.tmpfs_size,
        mode: 0o1777,
        owner: None,
        exec: false,
        from: None,
    });
    ops.push(MountOp::ReadOnly { dst: "/dev".into() });
    ops.push(MountOp::Tmpfs {
        dst: "/tmp".into(),
        size: inputs.tmpfs_size,
        mode: 0o1777,
        owner: None,
        exec: true,
        from: None,
    });
    ops.push(MountOp::Tmpfs {
        dst: inputs.home.into(),
        size: inputs.home_size,
        mode: 0o700,
        owner: Some(Owner {
            uid: inputs.uid,
            gid: inputs.gid,
        }),
        exec: true,
        from: None,
    });
}

fn host_bind(path: &Path, writable: bool, is_dir: bool) -> MountOp {
    MountOp::Bind {
        src: path.into(),
        dst: path.into(),
        writable,
        is_dir,
        from: None,
    }
}

/// A generated file's contents as `brig check` shows them: in full when small, else its
/// size and SHA-256 (the jail's CA bundle holds the host's roots: a few hundred KiB).
fn shown_contents<S: Serializer>(contents: &str, serializer: S) -> Result<S::Ok, S::Error> {
    const SHOWN_IN_FULL: usize = 4096;
    if contents.len() <= SHOWN_IN_FULL {
        return serializer.serialize_str(contents);
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(contents.as_bytes());
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    serializer.serialize_str(&format!("({} bytes, sha256:{hex})", contents.len()))
}
