//! Landlock: a second wall around the files, derived from the mount plan. Read-only places
//! get read (and execute) access, writable binds and the tmpfs mounts full access, devices
//! read and write; nothing else is reachable, whatever the mounts would allow. Abstract
//! unix sockets and signals are scoped to the jail (ABI 6). TCP is left to the network
//! namespace: under `--net none` the jail's only interface is its own `lo`, so denying TCP
//! there would protect nothing and break every local server and test suite; under
//! `--net host` the caller asked for the network.
//!
//! The rules are computed in the parent from the plan; the program's process opens the
//! paths inside the jail (after pivot_root) and enforces them after no_new_privs and
//! before seccomp.

use crate::error::{Error, Result};
use crate::mount::MountOp;
use crate::options::LandlockMode;
use crate::sys;
use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use serde::Serialize;
use std::path::PathBuf;

/// The newest Landlock ABI whose rights brig asks for (and was tested with). Newer kernels
/// are used at this ABI.
pub const MAX_ABI: u8 = 7;
/// What `--landlock require` asks for: everything brig uses (fs 5, scopes 6).
pub const FULL_ABI: u8 = 6;
const SCOPE_ABI: u8 = 6;

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LandlockPlan {
    pub mode: LandlockMode,
    /// The ABI brig enforces: the kernel's, up to MAX_ABI; 0 when Landlock is off or the
    /// kernel lacks it.
    pub abi: u8,
    /// The running kernel's Landlock ABI (0: none).
    pub kernel_abi: u8,
    /// Abstract unix sockets and signals are scoped to the jail.
    pub scoped: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    pub path: PathBuf,
    pub access: Rights,
    /// A directory (else a file, which takes only file rights); known from the mount
    /// plan, so the jail does not stat it again.
    #[serde(skip)]
    pub is_dir: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rights {
    /// List and read (procfs).
    Read,
    /// List, read and execute.
    ReadExec,
    /// Read, write and ioctl on existing files (device nodes); nothing created.
    Device,
    /// Everything: create, write, remove, execute.
    Full,
}

/// Derives the rules from the mount plan and checks the mode against the kernel.
pub fn plan(mode: LandlockMode, mounts: &[MountOp]) -> Result<LandlockPlan> {
    let kernel_abi = sys::landlock_abi();
    if let LandlockMode::Require(wanted) = mode {
        let wanted = wanted.unwrap_or(FULL_ABI);
        if wanted > MAX_ABI {
            return Err(Error::input(format!(
                "--landlock require={wanted}: brig uses Landlock up to ABI {MAX_ABI}; ask for at most require={MAX_ABI}"
            )));
        }
        if kernel_abi < wanted {
            if let Some(missing) = Unavailable::here() {
                return Err(Error::host(format!(
                    "--landlock {mode}: Landlock is {}; {}, or use --landlock best-effort",
                    missing.reason(),
                    missing.fix()
                )));
            }
            return Err(Error::host(format!(
                "--landlock {mode}: this kernel's Landlock ABI is {kernel_abi}; use --landlock best-effort, or a kernel with ABI {wanted} (Linux {})",
                kernel_for(wanted)
            )));
        }
    }
    let abi = match mode {
        LandlockMode::Off => 0,
        _ => kernel_abi.min(MAX_ABI),
    };
    Ok(LandlockPlan {
        mode,
        abi,
        kernel_abi,
        scoped: abi >= SCOPE_ABI,
        rules: if abi > 0 { rules(mounts) } else { Vec::new() },
    })
}

/// Why Landlock is not there for brig, from the errno of the ABI version query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub errno: nix::errno::Errno,
    /// A seccomp filter is on brig (`Seccomp: 2` in /proc/self/status).
    pub filtered: bool,
    /// The container (manager) brig runs in, if any.
    pub container: Option<String>,
}

const LANDLOCK_CALLS: &str = "landlock_create_ruleset landlock_add_rule landlock_restrict_self";

impl Unavailable {
    /// Asks the kernel; None when Landlock is there.
    pub fn here() -> Option<Unavailable> {
        let errno = sys::landlock_version().err()?;
        let filtered = std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
            status
                .lines()
                .any(|line| line.split_whitespace().eq(["Seccomp:", "2"]))
        });
        Some(Unavailable {
            errno,
            filtered,
            container: crate::doctor::in_container(),
        })
    }

    /// What is missing, in a few words.
    pub fn reason(&self) -> String {
        use nix::errno::Errno;
        let errno = format!("landlock_create_ruleset: {:?}", self.errno);
        match self.errno {
            Errno::EOPNOTSUPP => {
                format!("built into this kernel but not enabled at boot ({errno})")
            }
            Errno::ENOSYS if self.filtered => format!(
                "not built into this kernel, or hidden by the seccomp filter on brig ({errno})"
            ),
            Errno::ENOSYS => format!("not built into this kernel ({errno})"),
            Errno::EPERM | Errno::EACCES => {
                let whose = match &self.container {
                    Some(runtime) => format!("the seccomp filter of the container ({runtime})"),
                    None => "a seccomp filter on brig".into(),
                };
                format!("{whose} refuses it, not the kernel ({errno})")
            }
            _ => format!("the kernel refused the version query ({errno})"),
        }
    }

    /// The fix that fits the reason.
    pub fn fix(&self) -> String {
        use nix::errno::Errno;
        let boot = "boot a 5.13+ kernel with Landlock in the LSM list, e.g. lsm=landlock,lockdown,yama,integrity,apparmor";
        let filter = match self.container.as_deref() {
            Some("systemd-nspawn") => format!(
                "allow the calls in the container: `systemd-nspawn --system-call-filter='{LANDLOCK_CALLS}'` (SystemCallFilter= in the .nspawn file)"
            ),
            Some("podman" | "docker" | "kubernetes") => format!(
                "run the container with a seccomp profile that allows {LANDLOCK_CALLS} (or seccomp=unconfined)"
            ),
            _ => format!("allow {LANDLOCK_CALLS} in the seccomp filter brig runs under"),
        };
        match self.errno {
            Errno::EOPNOTSUPP => "add landlock to the kernel's lsm= boot parameter, e.g. lsm=landlock,lockdown,yama,integrity,apparmor".into(),
            Errno::ENOSYS if self.filtered => format!("{filter}; if that is not it, {boot}"),
            Errno::ENOSYS => boot.into(),
            _ => filter,
        }
    }
}

fn kernel_for(abi: u8) -> &'static str {
    match abi {
        0 | 1 => "5.13",
        2 => "5.19",
        3 => "6.2",
        4 => "6.7",
        5 => "6.10",
        6 => "6.12",
        _ => "6.15",
    }
}

/// One rule per mount: a read-only mount gives read access, a writable one full access.
/// The jail's root covers everything that is not a mount of its own (/etc's files,
/// directories, symlinks).
pub fn rules(mounts: &[MountOp]) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for op in mounts {
        let (path, access, is_dir) = match op {
            MountOp::RootTmpfs { .. } | MountOp::RootBind { .. } => {
                ("/".into(), Rights::ReadExec, true)
            }
            MountOp::Bind {
                dst,
                writable,
                is_dir,
                ..
            } => (
                dst.clone(),
                if *writable {
                    Rights::Full
                } else {
                    Rights::ReadExec
                },
                *is_dir,
            ),
            MountOp::Device { dst, .. } => (dst.clone(), Rights::Device, false),
            MountOp::Devpts { dst } => (dst.clone(), Rights::Device, true),
            MountOp::Tmpfs { dst, .. } => (dst.clone(), Rights::Full, true),
            MountOp::Proc { dst } => (dst.clone(), Rights::Read, true),
            // A mount made read-only once populated (/dev) keeps only read access.
            MountOp::ReadOnly { dst } => {
                for rule in rules.iter_mut().filter(|rule| rule.path == *dst) {
                    rule.access = Rights::ReadExec;
                }
                continue;
            }
            // The overlay on a prepared root's /etc is read-only, as the root around it.
            MountOp::Dir { .. }
            | MountOp::Symlink { .. }
            | MountOp::File { .. }
            | MountOp::Overlay { .. } => continue,
        };
        rules.push(Rule {
            path,
            access,
            is_dir,
        });
    }
    rules
}

/// Enforces the plan on the calling process (and what it executes). Fails unless every
/// right brig asked for at the plan's ABI is enforced, so the plan's ABI is the truth.
pub fn enforce(plan: &LandlockPlan) -> Result<()> {
    if plan.abi == 0 {
        return Ok(());
    }
    let abi = ABI::from(i32::from(plan.abi));
    let fail = |what: &str, err: &dyn std::fmt::Display| {
        Error::setup(format!("Landlock: {what}: {err}"))
            .hint("run with --landlock off to do without it (reported), or report this as a bug")
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|err| fail("handle file access", &err))?;
    if plan.scoped {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|err| fail("scope signals and abstract sockets", &err))?;
    }
    let mut created = ruleset
        .create()
        .map_err(|err| fail("create a ruleset", &err))?;
    for rule in &plan.rules {
        let fd = PathFd::new(&rule.path)
            .map_err(|err| fail(&format!("open {} in the jail", rule.path.display()), &err))?;
        let mut access = rights(rule.access, abi);
        if !rule.is_dir {
            access &= AccessFs::from_file(abi);
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|err| fail(&format!("add the rule for {}", rule.path.display()), &err))?;
    }
    created = allow_standard_streams(created, abi)?;
    let status = created
        .restrict_self()
        .map_err(|err| fail("enforce the ruleset", &err))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(Error::setup(format!(
            "Landlock: the kernel enforced the ruleset only partly ({:?}) at ABI {}; run with --landlock off to do without it (reported)",
            status.ruleset, plan.abi
        )));
    }
    Ok(())
}

/// The files behind descriptors 0, 1 and 2 are the caller's, outside the jail's tree;
/// reopening them through /proc/self/fd (`echo x > /dev/stderr`) would be denied. Each gets
/// the rights it is open with, no more: a write-only stdout can be reopened for writing
/// (and truncating) but not for reading. Pipes and sockets need no rule.
fn allow_standard_streams(
    mut created: landlock::RulesetCreated,
    abi: ABI,
) -> Result<landlock::RulesetCreated> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use nix::sys::stat::{SFlag, fstat};
    for fd in 0..=2 {
        let Some(borrowed) = sys::borrow_standard_fd(fd) else {
            continue;
        };
        let (Ok(flags), Ok(stat)) = (fcntl(borrowed, FcntlArg::F_GETFL), fstat(borrowed)) else {
            continue;
        };
        let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFREG && kind != SFlag::S_IFCHR {
            continue;
        }
        let mode = OFlag::from_bits_truncate(flags) & OFlag::O_ACCMODE;
        let mut access = BitFlags::<AccessFs>::empty();
        if mode != OFlag::O_WRONLY {
            access |= AccessFs::ReadFile;
        }
        if mode != OFlag::O_RDONLY {
            access |= AccessFs::WriteFile;
            if abi >= ABI::V3 && kind == SFlag::S_IFREG {
                access |= AccessFs::Truncate;
            }
        }
        let Ok(file) = PathFd::new(format!("/proc/self/fd/{fd}")) else {
            continue;
        };
        created = created
            .add_rule(PathBeneath::new(file, access))
            .map_err(|err| {
                Error::setup(format!("Landlock: add the rule for descriptor {fd}: {err}"))
            })?;
    }
    Ok(created)
}

fn rights(access: Rights, abi: ABI) -> BitFlags<AccessFs> {
    match access {
        Rights::Read => AccessFs::ReadFile | AccessFs::ReadDir,
        Rights::ReadExec => AccessFs::from_read(abi),
        Rights::Device => {
            let mut device = AccessFs::ReadFile | AccessFs::WriteFile;
            if abi >= ABI::V5 {
                device |= AccessFs::IoctlDev;
            }
            device
        }
        Rights::Full => AccessFs::from_all(abi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn plan_for(yaml: &str) -> crate::plan::Plan {
        crate::plan::Plan::resolve(crate::config::parse(yaml, "test").unwrap()).unwrap()
    }

    fn access_of(rules: &[Rule], path: &str) -> Option<Rights> {
        rules
            .iter()
            .rev()
            .find(|rule| rule.path == Path::new(path))
            .map(|rule| rule.access)
    }

    #[test]
    fn rules_follow_the_mount_plan() {
        let plan =
            plan_for("command: [true]\nbind: [/tmp:/out]\nro-bind: [/usr:/ro]\ntmpfs: [/scratch]");
        let rules = rules(&plan.mounts);
        assert_eq!(access_of(&rules, "/"), Some(Rights::ReadExec));
        assert_eq!(access_of(&rules, "/usr"), Some(Rights::ReadExec));
        assert_eq!(access_of(&rules, "/out"), Some(Rights::Full));
        assert_eq!(access_of(&rules, "/ro"), Some(Rights::ReadExec));
        assert_eq!(access_of(&rules, "/scratch"), Some(Rights::Full));
        assert_eq!(access_of(&rules, "/tmp"), Some(Rights::Full));
        assert_eq!(access_of(&rules, "/home/sandbox"), Some(Rights::Full));
        assert_eq!(access_of(&rules, "/dev/shm"), Some(Rights::Full));
        assert_eq!(access_of(&rules, "/dev"), Some(Rights::ReadExec));
        assert_eq!(access_of(&rules, "/dev/null"), Some(Rights::Device));
        assert_eq!(access_of(&rules, "/proc"), Some(Rights::Read));
        assert_eq!(access_of(&rules, "/etc"), None);
    }

    #[test]
    fn policy_options_parse_from_yaml_and_flags() {
        let options = crate::config::parse(
            "seccomp: strict\nseccomp-log: true\nlandlock: require=6\ncommand: [x]\n",
            "test",
        )
        .unwrap();
        assert_eq!(options.seccomp.as_deref(), Some("strict"));
        assert!(options.seccomp_log);
        assert_eq!(options.landlock, Some(LandlockMode::Require(Some(6))));
        for (text, mode) in [
            ("best-effort", LandlockMode::BestEffort),
            ("require", LandlockMode::Require(None)),
            ("off", LandlockMode::Off),
        ] {
            assert_eq!(text.parse::<LandlockMode>(), Ok(mode));
            assert_eq!(mode.to_string(), text);
        }
        for bad in [
            "",
            "on",
            "require=",
            "require=0",
            "require=x",
            "best_effort",
        ] {
            assert!(bad.parse::<LandlockMode>().is_err(), "{bad}");
        }
        let err = crate::config::parse("landlock: sometimes\n", "c.yaml").unwrap_err();
        assert!(err.message().starts_with("c.yaml:1:"), "{}", err.message());
    }

    #[test]
    fn a_missing_landlock_is_told_apart_by_its_errno() {
        use nix::errno::Errno;
        let missing = |errno, filtered, container: Option<&str>| Unavailable {
            errno,
            filtered,
            container: container.map(String::from),
        };
        let nspawn = missing(Errno::EPERM, true, Some("systemd-nspawn"));
        assert_eq!(
            nspawn.reason(),
            "the seccomp filter of the container (systemd-nspawn) refuses it, not the kernel (landlock_create_ruleset: EPERM)"
        );
        assert_eq!(
            nspawn.fix(),
            "allow the calls in the container: `systemd-nspawn --system-call-filter='landlock_create_ruleset landlock_add_rule landlock_restrict_self'` (SystemCallFilter= in the .nspawn file)"
        );
        let disabled = missing(Errno::EOPNOTSUPP, false, None);
        assert!(
            disabled
                .reason()
                .starts_with("built into this kernel but not enabled at boot")
        );
        assert!(
            disabled
                .fix()
                .starts_with("add landlock to the kernel's lsm= boot parameter")
        );
        let absent = missing(Errno::ENOSYS, false, None);
        assert_eq!(
            absent.reason(),
            "not built into this kernel (landlock_create_ruleset: ENOSYS)"
        );
        assert!(absent.fix().starts_with("boot a 5.13+ kernel"));
        // podman's default profile answers unknown calls with ENOSYS: both are named.
        let hidden = missing(Errno::ENOSYS, true, Some("podman"));
        assert!(
            hidden
                .reason()
                .contains("or hidden by the seccomp filter on brig")
        );
        assert!(hidden.fix().starts_with(
            "run the container with a seccomp profile that allows landlock_create_ruleset"
        ));
        assert!(hidden.fix().contains("boot a 5.13+ kernel"));
    }

    #[test]
    fn require_checks_the_kernel() {
        let kernel = sys::landlock_abi();
        let too_new = LandlockMode::Require(Some(MAX_ABI + 1));
        let err = plan(too_new, &[]).unwrap_err();
        assert!(
            err.message().contains("at most require=7"),
            "{}",
            err.message()
        );
        if kernel < MAX_ABI {
            let err = plan(LandlockMode::Require(Some(kernel + 1)), &[]).unwrap_err();
            assert!(err.message().contains("best-effort"), "{}", err.message());
        }
        let off = plan(LandlockMode::Off, &[]).unwrap();
        assert_eq!((off.abi, off.scoped), (0, false));
    }
}
