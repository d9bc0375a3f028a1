//! What the soak leaves behind: snapshots of the host before and after, and their
//! difference, attributed to the soak wherever the host is shared with other users of
//! brig (their jails, cgroups and test files are listed, not counted).
//!
//! Ours are: processes carrying the soak's tag in their environment (brig and the jail's
//! init have brig's environment, the program has `--env SOAK_TAG=...`) or descending from
//! the soak; cgroups named after one of our brig processes or library workers
//! (`jail-PID-N`, `brig-PID`); brig-named entries in /tmp naming one of our pids or none.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The cgroup hierarchies brig may use, by the names they have under /sys/fs/cgroup.
const HIERARCHIES: &[&str] = &["memory", "pids", "cpu", "cpuacct", "unified"];

/// One process in /proc.
struct Process {
    pid: u32,
    ppid: u32,
    comm: String,
    /// Clock ticks after boot: tells a new process from an old one with a reused pid.
    start: u64,
}

fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let comm = stat[open + 1..close].to_string();
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            // After the command: state (field 3), ppid (4), ..., starttime (22).
            Some(Process {
                pid,
                ppid: fields.get(1)?.parse().ok()?,
                comm,
                start: fields.get(19)?.parse().ok()?,
            })
        })
        .collect()
}

fn has_tag(pid: u32, tag: &str) -> bool {
    let wanted = format!("SOAK_TAG={tag}");
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|byte| *byte == 0)
            .any(|entry| entry == wanted.as_bytes())
    })
}

/// The brig-named entries of /tmp: brig's own temporary names and its tests' (`brig-*`,
/// `.brig*`, `bt-*`).
fn tmp_entries() -> BTreeSet<String> {
    std::fs::read_dir("/tmp")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str().map(String::from))
                .filter(|name| {
                    name.starts_with("brig") || name.starts_with(".brig") || name.starts_with("bt-")
                })
                .collect()
        })
        .unwrap_or_default()
}

fn mountinfo() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Every cgroup directory brig may have made: `<hierarchy>/brig` and what is in it, and
/// `brig-*` leaves beside this process's own cgroup (rootless placement).
fn cgroup_dirs() -> BTreeSet<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut dirs = BTreeSet::new();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for hierarchy in HIERARCHIES {
        let mount = root.join(hierarchy);
        let parent = mount.join("brig");
        if parent.is_dir() {
            dirs.insert(parent.clone());
            dirs.extend(subdirs(&parent));
        }
        // This process's own cgroup in the hierarchy ("4:memory:/a/b", "0::/a").
        let own_path = own.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let matches = match *hierarchy {
                "unified" => controllers.is_empty(),
                name => controllers.split(',').any(|c| c == name),
            };
            matches.then(|| path.trim_start_matches('/').to_string())
        });
        if let Some(own_path) = own_path.filter(|path| !path.is_empty()) {
            dirs.extend(
                subdirs(&mount.join(own_path))
                    .into_iter()
                    .filter(|dir| file_name(dir).starts_with("brig-")),
            );
        }
    }
    dirs
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The pid in a jail cgroup's name: `jail-PID-N` or `brig-PID`.
pub fn cgroup_owner(name: &str) -> Option<u32> {
    name.strip_prefix("jail-")
        .and_then(|rest| rest.split('-').next())
        .or_else(|| name.strip_prefix("brig-"))
        .and_then(|pid| pid.parse().ok())
}

/// The host before the soak.
pub struct Snapshot {
    processes: HashSet<(u32, u64)>,
    mounts: Vec<String>,
    tmp: BTreeSet<String>,
    cgroups: BTreeSet<PathBuf>,
}

impl Snapshot {
    pub fn take() -> Snapshot {
        Snapshot {
            processes: processes().iter().map(|p| (p.pid, p.start)).collect(),
            mounts: mountinfo(),
            tmp: tmp_entries(),
            cgroups: cgroup_dirs(),
        }
    }
}

/// What is left after the soak. Each list is counted; `others` only informs.
#[derive(Debug, Default, Serialize)]
pub struct Leftovers {
    /// Processes of ours still alive: "pid comm (why ours)".
    pub processes: Vec<String>,
    /// Processes that outlived their brig and were reaped by the soak as orphans.
    pub escaped: Vec<String>,
    pub cgroups: Vec<String>,
    pub mounts_before: usize,
    pub mounts_after: usize,
    /// mountinfo lines that appeared.
    pub mounts: Vec<String>,
    pub temp_files: Vec<String>,
    /// New things of brig's that are not the soak's (other users of this host).
    pub others: Vec<String>,
}

impl Leftovers {
    /// Compares the host with `before`. `ours` are the pids of every brig process and
    /// library worker the soak started; `tag` the soak's environment tag.
    pub fn find(before: &Snapshot, ours: &HashSet<u32>, tag: &str) -> Leftovers {
        let mut leftovers = Leftovers::default();
        let me = std::process::id();

        let now = processes();
        let parents: HashMap<u32, u32> = now.iter().map(|p| (p.pid, p.ppid)).collect();
        let descends_from_me = |mut pid: u32| {
            for _ in 0..parents.len() {
                match parents.get(&pid) {
                    Some(&ppid) if ppid == me => return true,
                    Some(&ppid) if ppid > 1 => pid = ppid,
                    _ => return false,
                }
            }
            false
        };
        for process in &now {
            if process.pid == me || before.processes.contains(&(process.pid, process.start)) {
                continue;
            }
            let why = if has_tag(process.pid, tag) {
                Some("soak tag")
            } else if descends_from_me(process.pid) {
                Some("descends from the soak")
            } else {
                None
            };
            match why {
                Some(why) => leftovers
                    .processes
                    .push(format!("{} {} ({why})", process.pid, process.comm)),
                None if process.comm == "brig-init" || process.comm == "brig" => leftovers
                    .others
                    .push(format!("process {} {}", process.pid, process.comm)),
                None => {}
            }
        }

        // Cgroups: a jail's directory named after one of our processes; a `brig` parent
        // that did not exist before and is still there, empty, a moment later.
        let dirs_now = cgroup_dirs();
        for dir in &dirs_now {
            let name = file_name(dir);
            match cgroup_owner(&name) {
                Some(pid) if ours.contains(&pid) => {
                    leftovers.cgroups.push(dir.display().to_string())
                }
                Some(_) if !before.cgroups.contains(dir) => {
                    leftovers.others.push(format!("cgroup {}", dir.display()))
                }
                _ => {}
            }
        }
        let empty_new_parents: Vec<&PathBuf> = dirs_now
            .iter()
            .filter(|dir| file_name(dir) == "brig" && !before.cgroups.contains(*dir))
            .collect();
        if !empty_new_parents.is_empty() {
            std::thread::sleep(std::time::Duration::from_secs(2));
            for parent in empty_new_parents {
                if parent.is_dir() && subdirs(parent).is_empty() {
                    leftovers
                        .cgroups
                        .push(format!("{} (empty parent)", parent.display()));
                }
            }
        }

        let mounts = mountinfo();
        leftovers.mounts_before = before.mounts.len();
        leftovers.mounts_after = mounts.len();
        let old: HashSet<&String> = before.mounts.iter().collect();
        leftovers.mounts = mounts
            .iter()
            .filter(|line| !old.contains(line))
            .cloned()
            .collect();

        for name in tmp_entries().difference(&before.tmp) {
            let pids: Vec<u32> = name
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|digits| digits.parse().ok())
                .collect();
            if pids.is_empty() || pids.iter().any(|pid| ours.contains(pid)) {
                leftovers.temp_files.push(format!("/tmp/{name}"));
            } else {
                leftovers.others.push(format!("temp /tmp/{name}"));
            }
        }
        leftovers
    }
}

/// Counts by kind, for the table.
pub fn counts(leftovers: &Leftovers) -> BTreeMap<&'static str, usize> {
    BTreeMap::from([
        (
            "processes",
            leftovers.processes.len() + leftovers.escaped.len(),
        ),
        ("cgroups", leftovers.cgroups.len()),
        ("mounts", leftovers.mounts.len()),
        ("temp files", leftovers.temp_files.len()),
    ])
}
