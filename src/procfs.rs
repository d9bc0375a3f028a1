//! Reading /proc/PID/stat and status (proc(5)): the jail's init reads its own argument
//! area and the program's CPU time from it, brig the CPU time and peak memory of processes
//! it is about to kill.

use std::time::Duration;

/// The numeric fields of one /proc/PID/stat, numbered as proc(5) numbers them.
pub struct Stat {
    /// Field 3 (state) onwards: everything after the parenthesised command name,
    /// which may itself contain spaces and parentheses.
    after_name: Vec<String>,
}

impl Stat {
    /// `process` is a pid or `self`.
    pub fn read(process: impl std::fmt::Display) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{process}/stat")).ok()?;
        let (_, after_name) = text.rsplit_once(')')?;
        Some(Stat {
            after_name: after_name.split_whitespace().map(String::from).collect(),
        })
    }

    /// Field 3: R, S, D, Z (a zombie), T, ...
    pub fn state(&self) -> Option<char> {
        self.after_name.first()?.chars().next()
    }

    /// Field `number` (4 = ppid, 14 = utime, 48 = arg_start, ...) as a number.
    pub fn field(&self, number: usize) -> Option<u64> {
        self.after_name.get(number.checked_sub(3)?)?.parse().ok()
    }

    /// User and system CPU time: the process's own (fields 14, 15) plus, with
    /// `with_reaped`, that of the children it reaped (16, 17).
    pub fn cpu(&self, with_reaped: bool) -> (Duration, Duration) {
        let get = |number| self.field(number).unwrap_or(0);
        let (mut user, mut system) = (get(14), get(15));
        if with_reaped {
            user += get(16);
            system += get(17);
        }
        (ticks(user), ticks(system))
    }
}

/// The peak resident set of a live process (VmHWM in /proc/PID/status), in KiB; None once
/// it has exited.
pub fn peak_rss_kib(pid: u64) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?;
    line.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// Clock ticks (as /proc counts CPU time) as a duration.
fn ticks(count: u64) -> Duration {
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100)
        .max(1) as u64;
    Duration::from_millis(count * 1000 / per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stat_has_pid_and_arguments() {
        let stat = Stat::read("self").unwrap();
        assert_eq!(
            stat.field(4),
            Some(u64::from(nix::unistd::getppid().as_raw() as u32))
        );
        let (start, end) = (stat.field(48).unwrap(), stat.field(49).unwrap());
        assert!(start > 0 && end > start);
    }

    #[test]
    fn own_peak_rss_is_read() {
        let peak = peak_rss_kib(u64::from(std::process::id())).unwrap();
        assert!(peak > 0);
    }
}
