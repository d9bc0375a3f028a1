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
    write_existing(file, request)
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
    write_existing(file, request)
        .context(|| format!("thaw the jail: write {request} to {}", file.display()))
}

/// Writes `value` to the cgroup file `file`, which must exist (a path that is not a
/// cgroup's is refused, not created).
fn write_existing(file: &Path, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .open(file)?
        .write_all(value.as_bytes())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::hierarchy::{Mounts, kill_all};
    use std::process::{Child, Command};

    /// A shell counting in `file` (written whole by a rename, so a read never sees it
    /// half written) as fast as it can.
    fn counter(file: &Path) -> Child {
        let script = format!(
            "i=0; while :; do i=$((i+1)); echo $i > {0}.new; mv {0}.new {0}; done",
            file.display()
        );
        Command::new("sh").args(["-c", &script]).spawn().unwrap()
    }

    fn count(file: &Path) -> u64 {
        fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits, by reading, until `done`; fails after a minute (a broken freezer, not a
    /// slow one: the assertions compare counts, not times).
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let give_up = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < give_up, "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// What the test made, undone even when it fails: its shells killed (a frozen
    /// cgroup thawed first, so that they die), its cgroups and files removed.
    #[derive(Default)]
    struct Made {
        shells: Vec<Child>,
        cgroups: Vec<(Version, PathBuf)>,
        work: Option<PathBuf>,
    }

    impl Drop for Made {
        fn drop(&mut self) {
            for shell in &mut self.shells {
                let _ = shell.kill();
            }
            for (version, dir) in &self.cgroups {
                if let Some(file) = control(*version, dir) {
                    let _ = thaw(*version, &file);
                }
            }
            for shell in &mut self.shells {
                let _ = shell.wait();
            }
            for (_, dir) in &self.cgroups {
                crate::cgroup::hierarchy::remove(dir);
            }
            if let Some(work) = &self.work {
                let _ = fs::remove_dir_all(work);
            }
        }
    }

    /// On this kernel, each freezer brig may use (cgroup2's, the v1 freezer hierarchy's):
    /// a frozen shell counts nothing while a shell beside it counts 200, counts on from
    /// where it was once thawed, and, frozen again, dies of `kill_all` (which thaws it
    /// after the SIGKILL) so that its cgroup goes. Without root (or any such hierarchy)
    /// a freeze is refused with the path it could not write.
    #[test]
    fn a_frozen_cgroup_makes_no_progress_thaws_where_it_was_and_dies_frozen() {
        let mounts = Mounts::read().unwrap();
        let mut hierarchies: Vec<(Version, PathBuf)> = Vec::new();
        if let Some(unified) = mounts.unified() {
            hierarchies.push((Version::V2, unified.to_path_buf()));
        }
        if let Some(freezer) = mounts.legacy_mount("freezer") {
            hierarchies.push((Version::V1, freezer.to_path_buf()));
        }
        let work = std::env::temp_dir().join(format!("brig-freeze-test-{}", std::process::id()));
        fs::create_dir_all(&work).unwrap();
        let mut made = Made::default();
        made.work = Some(work.clone());
        if !nix::unistd::geteuid().is_root() || hierarchies.is_empty() {
            let missing = work.join("cgroup.freeze");
            let err = freeze(Version::V2, &missing).unwrap_err().to_string();
            assert!(err.contains(&missing.display().to_string()), "{err}");
            assert!(err.contains("No such file"), "{err}");
            return;
        }
        let witness_file = work.join("witness");
        made.shells.push(counter(&witness_file));
        for (version, mount) in hierarchies {
            let dir = mount.join(format!("brig-freeze-test-{}", std::process::id()));
            fs::create_dir(&dir).unwrap();
            made.cgroups.push((version, dir.clone()));
            let file = work.join(format!("{version:?}"));
            let frozen = counter(&file);
            fs::write(dir.join("cgroup.procs"), frozen.id().to_string()).unwrap();
            made.shells.push(frozen);
            let control = control(version, &dir).expect("a freezer file");
            // A `mv` the shell forked before it was moved stays outside the cgroup (a
            // jail's processes are all born inside); two counts later it has ended.
            let moved_at = count(&file);
            wait_for("the counter runs", || count(&file) >= moved_at + 2);
            freeze(version, &control).unwrap();
            let at_freeze = count(&file);
            let from = count(&witness_file);
            wait_for("the witness counts 200", || {
                count(&witness_file) >= from + 200
            });
            assert_eq!(count(&file), at_freeze, "{version:?}: it ran while frozen");
            thaw(version, &control).unwrap();
            wait_for("it counts on", || count(&file) > at_freeze + 3);
            freeze(version, &control).unwrap();
            kill_all(version, &dir);
            let frozen = made.shells.last_mut().expect("its shell");
            let mut ended = None;
            wait_for("the frozen shell dies", || {
                ended = frozen.try_wait().unwrap();
                ended.is_some()
            });
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&ended.unwrap()),
                Some(libc::SIGKILL)
            );
            crate::cgroup::hierarchy::remove(&dir);
            assert!(!dir.exists(), "{}", dir.display());
        }
    }
}
