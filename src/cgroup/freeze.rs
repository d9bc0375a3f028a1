//! Pausing a jail whole: the cgroup freezer stops every process of the jail where it is
//! (no signal the processes could see or handle), and thaws them where they stopped.
//! cgroup v2: `cgroup.freeze`, done when `cgroup.events` says `frozen 1`. cgroup v1: the
//! `freezer` hierarchy's `freezer.state`, `FREEZING` until every task is frozen, then
//! `FROZEN`. A frozen v1 task does not die of SIGKILL until it is thawed, so killing a
//! jail thaws it after the signals (`hierarchy::kill_all`).

use super::Version;
use crate::error::{Context, Error, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the kernel may take to freeze every task (one stuck in an uninterruptible
/// sleep, on a slow disk or a FUSE call, holds the freeze back): past it the freeze is
/// undone and refused.
pub const FREEZE_WAIT: Duration = Duration::from_secs(5);

/// The file that freezes the cgroup `dir`, if `dir` has one.
pub fn control(version: Version, dir: &Path) -> Option<PathBuf> {
    let file = match version {
        Version::V2 => dir.join("cgroup.freeze"),
        Version::V1 => dir.join("freezer.state"),
    };
    file.exists().then_some(file)
}

/// Freezes the cgroup whose freezer file is `file` and waits until every task is
/// frozen; thaws it again and fails if that takes longer than [`FREEZE_WAIT`].
pub fn freeze(version: Version, file: &Path) -> Result<()> {
    let (request, done) = match version {
        Version::V2 => ("1", frozen_v2 as fn(&Path) -> bool),
        Version::V1 => ("FROZEN", frozen_v1 as fn(&Path) -> bool),
    };
    fs::write(file, request)
        .context(|| format!("freeze the jail: write {request} to {}", file.display()))?;
    let deadline = Instant::now() + FREEZE_WAIT;
    let mut pause = Duration::from_micros(50);
    while !done(file) {
        if Instant::now() >= deadline {
            let _ = thaw(version, file);
            return Err(Error::setup(format!(
                "freeze the jail: {} did not say frozen within {}s (a process of the jail is stuck in the kernel, in a disk or FUSE wait); it was thawed again, retry later",
                file.display(),
                FREEZE_WAIT.as_secs()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
    Ok(())
}

/// Thaws the cgroup whose freezer file is `file` (at once: thawing does not wait).
pub fn thaw(version: Version, file: &Path) -> Result<()> {
    let request = match version {
        Version::V2 => "0",
        Version::V1 => "THAWED",
    };
    fs::write(file, request)
        .context(|| format!("thaw the jail: write {request} to {}", file.display()))
}

/// v2: `cgroup.events` beside `cgroup.freeze` says `frozen 1`.
fn frozen_v2(file: &Path) -> bool {
    let events = file.with_file_name("cgroup.events");
    super::read_keyed(&events, "frozen") == Some(1)
}

/// v1: reading `freezer.state` moves it from FREEZING to FROZEN once every task is.
fn frozen_v1(file: &Path) -> bool {
    fs::read_to_string(file).is_ok_and(|state| state.trim() == "FROZEN")
}
