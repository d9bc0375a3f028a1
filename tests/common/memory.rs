//! Another process's memory, read as root through /proc/PID/mem (the secrets tests look
//! for a value in every process of a jail).

use std::io::{Read, Seek, SeekFrom};

/// Every process whose ancestry leads to `root` (itself included).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the command's closing parenthesis: state, ppid, ...
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        parents.push((pid, ppid));
    }
    let mut found = vec![root];
    let mut at = 0;
    while at < found.len() {
        let parent = found[at];
        found.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        at += 1;
    }
    found
}

pub fn pid_namespace(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .map(|link| link.display().to_string())
        .unwrap_or_default()
}

/// Whether `needle` is in any readable mapping of `pid` (read through /proc/PID/mem, as
/// root). Err: the process's memory could not be opened at all.
pub fn memory_holds(pid: u32, needle: &[u8]) -> Result<bool, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| e.to_string())?;
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).map_err(|err| err.to_string())?;
    let mut read_any = false;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (range, perms) = (fields.next().unwrap(), fields.next().unwrap());
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let mut region = vec![0u8; (end - start).min(512 << 20) as usize];
        if mem.seek(SeekFrom::Start(start)).is_err() {
            continue;
        }
        let Ok(count) = mem.read(&mut region) else {
            continue;
        };
        read_any |= count > 0;
        if region[..count]
            .windows(needle.len())
            .any(|window| window == needle)
        {
            return Ok(true);
        }
    }
    match read_any {
        true => Ok(false),
        false => Err("no mapping could be read".into()),
    }
}
