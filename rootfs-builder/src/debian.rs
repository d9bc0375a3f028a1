//! Debian packages as a source: downloaded with `apt-get download` and unpacked with
//! `dpkg-deb -x` into a staging tree. Nothing is installed and no maintainer script runs.

use crate::Error;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// Downloads `packages` into `staging/debs` and unpacks each into `staging/root`, in name
/// order. Returns the .deb file names, for the build's summary.
pub fn unpack(packages: &[String], staging: &Path) -> Result<Vec<String>, Error> {
    for package in packages {
        let valid = !package.is_empty()
            && !package.starts_with('-')
            && package
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.:=~".contains(&b));
        if !valid {
            return Err(Error::new(format!(
                "debian-packages: '{package}' is not a package name; give NAME or NAME=VERSION"
            )));
        }
    }
    let debs = staging.join("debs");
    let root = staging.join("root");
    for dir in [&debs, &root] {
        fs::create_dir_all(dir)
            .map_err(|err| Error::new(format!("create {}: {err}", dir.display())))?;
    }
    let output = Command::new("apt-get")
        .args(["download", "-q"])
        .args(packages)
        .current_dir(&debs)
        .stdin(Stdio::null())
        .output()
        .map_err(|err| {
            Error::new(format!(
                "debian-packages: cannot run apt-get: {err}; building from Debian packages needs apt (Debian or Ubuntu)"
            ))
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = stderr
            .lines()
            .find(|line| line.starts_with("E:"))
            .unwrap_or_else(|| stderr.lines().last().unwrap_or("failed"));
        return Err(Error::new(format!(
            "debian-packages: apt-get download {}: {}; check the names (`apt-cache policy NAME`) and run `apt-get update`",
            packages.join(" "),
            reason.trim()
        )));
    }
    let mut files: Vec<String> = fs::read_dir(&debs)
        .map_err(|err| Error::new(format!("read {}: {err}", debs.display())))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".deb"))
        .collect();
    files.sort();
    for file in &files {
        let status = Command::new("dpkg-deb")
            .arg("-x")
            .arg(debs.join(file))
            .arg(&root)
            .stdin(Stdio::null())
            .status()
            .map_err(|err| Error::new(format!("debian-packages: cannot run dpkg-deb: {err}")))?;
        if !status.success() {
            return Err(Error::new(format!(
                "debian-packages: dpkg-deb -x {file} failed ({status})"
            )));
        }
    }
    Ok(files)
}
