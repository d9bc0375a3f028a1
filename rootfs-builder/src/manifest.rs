//! The manifest: what goes into a root. YAML, unknown keys rejected with the line.

use crate::Error;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The shipped manifests, name and YAML text.
pub const SHIPPED: &[(&str, &str)] = &[
    ("python", include_str!("../manifests/python.yaml")),
    ("node", include_str!("../manifests/node.yaml")),
    ("shell", include_str!("../manifests/shell.yaml")),
    ("e2b-base", include_str!("../manifests/e2b-base.yaml")),
    (
        "e2b-code-interpreter",
        include_str!("../manifests/e2b-code-interpreter.yaml"),
    ),
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    /// Debian packages to download (`apt-get download`) and unpack (`dpkg-deb -x`) into a
    /// staging tree, without installing them. Paths below are looked up there first, then
    /// on the host. `NAME` or `NAME=VERSION`.
    #[serde(default)]
    pub debian_packages: Vec<String>,
    /// Programs: absolute paths, or names looked up in /usr/local/bin, /usr/bin, /bin,
    /// /usr/sbin and /sbin. Each is copied with its ELF closure (loader and libraries) or,
    /// for a script, its `#!` interpreter.
    #[serde(default)]
    pub programs: Vec<String>,
    /// Directories copied whole, `SRC` or `SRC:DST`; a `*` in a path picks every match.
    /// ELF files in them bring their libraries; symlinks that leave the tree bring their
    /// targets.
    #[serde(default)]
    pub trees: Vec<String>,
    /// Single files, `SRC` or `SRC:DST`.
    #[serde(default)]
    pub files: Vec<String>,
    /// Empty directories to create (mount points for `--bind` and `--tmpfs`).
    #[serde(default)]
    pub dirs: Vec<String>,
    /// Symlinks to create: `PATH: TARGET`.
    #[serde(default)]
    pub symlinks: BTreeMap<String, String>,
    /// Files to write: `PATH: CONTENTS`.
    #[serde(default)]
    pub write: BTreeMap<String, String>,
    /// Patterns of paths to leave out of `trees`, e.g. `/usr/**/__pycache__`.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The generated /etc: passwd, group, hosts, hostname, nsswitch.conf.
    #[serde(default)]
    pub etc: Etc,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Etc {
    /// The jail's user; brig runs the program as uid/gid 1000 with home /home/sandbox.
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    pub shell: String,
    pub hostname: String,
}

impl Default for Etc {
    fn default() -> Etc {
        Etc {
            user: "sandbox".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/sandbox".into(),
            shell: "/bin/sh".into(),
            hostname: "brig".into(),
        }
    }
}

/// The manifest's text: a shipped one by name, or a file.
pub fn load(name_or_path: &str) -> Result<(String, String), Error> {
    let is_path = name_or_path.contains('/')
        || name_or_path.ends_with(".yaml")
        || name_or_path.ends_with(".yml");
    if !is_path {
        return match SHIPPED.iter().find(|(name, _)| *name == name_or_path) {
            Some((name, text)) => Ok((format!("manifest {name}"), text.to_string())),
            None => Err(Error::new(format!(
                "manifest {name_or_path}: no such shipped manifest; choose one of {}, or give a path to a YAML file",
                shipped_names().join(", ")
            ))),
        };
    }
    let text = std::fs::read_to_string(name_or_path).map_err(|err| {
        Error::new(format!(
            "manifest {name_or_path}: cannot read it: {err}; give the path of a readable YAML file"
        ))
    })?;
    Ok((name_or_path.to_string(), text))
}

pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(name, _)| *name).collect()
}

/// Parses a manifest; an error is one line: `origin:line:column: message (at `text`)`.
pub fn parse(text: &str, origin: &str) -> Result<Manifest, Error> {
    if text.trim().is_empty() {
        return Ok(Manifest::default());
    }
    serde_saphyr::from_str::<Manifest>(text)
        .map_err(|err| Error::new(crate::yaml_error_line(&err, text, origin)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_manifests_parse() {
        for (name, text) in SHIPPED {
            let manifest = parse(text, name).unwrap();
            assert!(!manifest.programs.is_empty(), "{name}");
        }
    }

    #[test]
    fn unknown_key_names_the_line() {
        let err = parse("programs: [sh]\nprogram: [ls]\n", "m.yaml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("m.yaml:2:1: unknown field `program`"),
            "{err}"
        );
        assert!(!err.to_string().contains('\n'));
    }
}
