//! From probe data to the lines doctor prints: what works, what does not, and the fix.
//! Nothing here touches the host; `probes.rs` gathers what these functions judge.

use super::probes::{
    self, Assembly, Cgroups, EndToEnd, Host, MAX_USER_NAMESPACES, Placement, Refusal, Seccomp,
    Sysctls,
};
use super::{Check, Status, check};
use crate::cgroup::Version;
use crate::error::Stage;
use crate::identity::UNPRIVILEGED_HOST_ID;
use crate::landlock;
use nix::errno::Errno;
use std::path::{Path, PathBuf};

/// Whose probes a check describes.
pub struct Who {
    /// The checks' suffix: `as root`, `rootless, uid 1000`.
    pub label: String,
    /// How a check that fails for them counts: root's own jails work even when uid 65534's
    /// do not, so those failures only warn.
    pub failing: Status,
    /// An unprivileged user: the settings that only stop unprivileged users apply.
    pub rootless: bool,
}

impl Who {
    /// The user running doctor.
    pub fn current(host: &Host) -> Who {
        Who {
            label: if host.root() {
                "as root".into()
            } else {
                format!("rootless, uid {}", host.euid)
            },
            failing: Status::Fail,
            rootless: !host.root(),
        }
    }

    /// uid 65534, probed by root.
    pub fn nobody() -> Who {
        Who {
            label: format!("rootless, uid {UNPRIVILEGED_HOST_ID}"),
            failing: Status::Warn,
            rootless: true,
        }
    }

    fn name(&self, what: &str) -> String {
        format!("{what} ({})", self.label)
    }
}

pub fn kernel(host: &Host) -> Check {
    let mut detail = format!("Linux {} {}", host.release, host.machine);
    if let Some(runtime) = &host.container {
        detail.push_str(&format!(", inside a container ({runtime})"));
    }
    check("kernel", Status::Ok, detail)
}

pub const APPARMOR_FIX: &str = "install deploy/apparmor/brig (`install -m 644 deploy/apparmor/brig /etc/apparmor.d/brig && apparmor_parser -r /etc/apparmor.d/brig`, see deploy/README.md), or allow it for all programs with `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`";

pub fn sysctl_checks(sysctls: &Sysctls, root: bool) -> Vec<Check> {
    // Settings that only stop unprivileged users warn as root, and fail rootless.
    let for_rootless = if root { Status::Warn } else { Status::Fail };
    let max_user_namespaces = match sysctls.max_user_namespaces {
        Some(0) => check(
            "user.max_user_namespaces",
            Status::Fail,
            "0: nobody, root included, may create a user namespace",
        )
        .fix("sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)"),
        Some(max) => check("user.max_user_namespaces", Status::Ok, max.to_string()),
        None => check(
            "user.max_user_namespaces",
            Status::Fail,
            format!("{MAX_USER_NAMESPACES} is missing: this kernel has no user namespaces"),
        )
        .fix("use a kernel built with CONFIG_USER_NS=y"),
    };
    let unprivileged_userns_clone = match sysctls.unprivileged_userns_clone {
        Some(0) => check(
            "kernel.unprivileged_userns_clone",
            for_rootless,
            "0: only root may create user namespaces",
        )
        .fix("sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/)"),
        Some(value) => check(
            "kernel.unprivileged_userns_clone",
            Status::Ok,
            value.to_string(),
        ),
        None => check(
            "kernel.unprivileged_userns_clone",
            Status::Ok,
            "not present (upstream kernel): unprivileged user namespaces are not switched off here",
        ),
    };
    let apparmor = match sysctls.apparmor_restrict {
        Some(1) => check(
            "AppArmor userns restriction",
            for_rootless,
            "kernel.apparmor_restrict_unprivileged_userns=1: unconfined programs of unprivileged users get user namespaces without capabilities",
        )
        .fix(APPARMOR_FIX),
        Some(value) => check(
            "AppArmor userns restriction",
            Status::Ok,
            format!("kernel.apparmor_restrict_unprivileged_userns={value}"),
        ),
        None => check(
            "AppArmor userns restriction",
            Status::Ok,
            "not present (no Ubuntu-style restriction in this kernel)",
        ),
    };
    vec![max_user_namespaces, unprivileged_userns_clone, apparmor]
}

/// The steps of assembling a jail that doctor reports, in the order `Jail::assemble`
/// completes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// clone3 into every namespace (the time namespace included, where there is one).
    Clone,
    /// The uid and gid maps, and the switch to the jail's ids.
    IdMap,
    CgroupNs,
    /// Private mounts, the scratch root, the jail's root and its bind mounts.
    Mount,
    Proc,
    PivotRoot,
    /// Anything else `Jail::assemble` does (the session, hostname and `lo`; the bounding
    /// set; init's signal mask): reported only when it fails.
    Other,
}

const STEPS: [Step; 6] = [
    Step::Clone,
    Step::IdMap,
    Step::CgroupNs,
    Step::Mount,
    Step::Proc,
    Step::PivotRoot,
];

/// The step a failure belongs to, and the steps known to have worked before it. Steps
/// that were not reached, or not finished, are left out.
fn locate(refusal: &Refusal) -> (Step, &'static [Step]) {
    let step = match refusal.stage {
        None | Some(Stage::Namespaces) => Step::Clone,
        Some(Stage::IdMaps | Stage::Identity) => Step::IdMap,
        Some(Stage::CgroupJoin) => Step::CgroupNs,
        // The mount steps name their operation (mount/apply.rs): the fresh /proc is one
        // of the jail's mounts; pivot_root happens into the scratch root, then into the
        // jail's root.
        Some(Stage::Mounts) if refusal.message.contains("pivot_root") => Step::PivotRoot,
        Some(Stage::Mounts) if refusal.message.contains("fresh /proc") => Step::Proc,
        Some(Stage::Mounts) => Step::Mount,
        Some(_) => Step::Other,
    };
    let before: &'static [Step] = match (step, refusal.stage) {
        // The jail's cgroup is made before anything else.
        (Step::Other, Some(Stage::Cgroup)) => &[],
        (Step::Other, Some(Stage::Descriptors | Stage::Isolation)) => &STEPS[..3],
        (Step::Other, _) => &STEPS,
        // /proc is mounted after the first pivot_root, into the scratch root.
        (Step::PivotRoot, _) => &STEPS[..4],
        (step, _) => {
            let at = STEPS.iter().position(|s| *s == step).unwrap_or(0);
            &STEPS[..at]
        }
    };
    (step, before)
}

/// The namespace, id-map, mount and pivot_root lines from a default jail assembled by
/// `Jail::assemble`, for `who`.
pub fn namespace_checks(
    probe: &Assembly,
    who: &Who,
    sysctls: &Sysctls,
    container: Option<&str>,
) -> Vec<Check> {
    let (worked, failed): (&[Step], _) = match &probe.outcome {
        Ok(()) => (&STEPS, None),
        Err(refusal) => {
            let (step, before) = locate(refusal);
            (before, Some((step, refusal)))
        }
    };
    let mut checks = Vec::new();
    for step in STEPS.into_iter().chain([Step::Other]) {
        if worked.contains(&step) {
            checks.push(check(
                who.name(label(step)),
                Status::Ok,
                ok_detail(step, probe),
            ));
        } else if let Some((failed_step, refusal)) = failed
            && failed_step == step
        {
            checks.push(failure(step, refusal, probe, who, sysctls, container));
        }
        // The time namespace is created with the others.
        if step == Step::Clone && worked.contains(&Step::Clone) {
            checks.push(time_namespace(probe, who));
        }
    }
    checks
}

fn label(step: Step) -> &'static str {
    match step {
        Step::Clone => "user namespaces",
        Step::IdMap => "id mapping",
        Step::CgroupNs => "cgroup namespace",
        Step::Mount => "mount namespace",
        Step::Proc => "fresh /proc",
        Step::PivotRoot => "pivot_root",
        Step::Other => "jail assembly",
    }
}

fn ok_detail(step: Step, probe: &Assembly) -> String {
    match step {
        Step::Clone => format!(
            "a child was cloned into new {} namespaces",
            listed(&probe.namespaces)
        ),
        Step::IdMap => "uid and gid maps written".into(),
        Step::CgroupNs => "unshared".into(),
        Step::Mount => {
            "mounts made private; the jail's root and the host's system directories mounted".into()
        }
        Step::Proc => "mounted in a new pid namespace".into(),
        Step::PivotRoot => "into a fresh tmpfs".into(),
        Step::Other => "the jail was assembled".into(),
    }
}

/// `a, b and c`.
fn listed(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

fn failure(
    step: Step,
    refusal: &Refusal,
    probe: &Assembly,
    who: &Who,
    sysctls: &Sysctls,
    container: Option<&str>,
) -> Check {
    let name = who.name(label(step));
    if step == Step::Clone {
        return clone_failure(name, refusal, probe, who, sysctls, container);
    }
    let fix = if who.rootless
        && sysctls.apparmor_restrict == Some(1)
        && refusal.errno == Some(Errno::EPERM)
    {
        // Cloned, but without capabilities in the new namespaces.
        APPARMOR_FIX
    } else {
        match step {
            Step::IdMap => {
                "the kernel refused a one-id mapping; check /proc/sys/user/max_user_namespaces and any LSM policy"
            }
            Step::CgroupNs => "use a kernel with CONFIG_CGROUPS and cgroup namespaces (4.6+)",
            Step::Mount => {
                "the kernel refused mount(2) in a new mount namespace; run brig outside this sandbox"
            }
            Step::Proc => {
                "the host's /proc has parts hidden or read-only (Docker, Podman, Kubernetes mask /proc): run the container with `--security-opt systempaths=unconfined` (Docker) or `--security-opt unmask=/proc/*` (Podman), or Kubernetes `procMount: Unmasked`; or run brig with `--proc host` (brig's own /proc, read-only: a weaker, reported mode); or run brig on the host"
            }
            Step::PivotRoot => {
                "pivot_root fails when / is the initramfs (rootfs): switch_root to a tmpfs first, or boot with a real root"
            }
            // setsid, sethostname and lo need no privilege in the jail's own
            // namespaces: EPERM there is a seccomp filter on brig itself.
            Step::Other
                if refusal.stage == Some(Stage::Isolation)
                    && refusal.errno == Some(Errno::EPERM) =>
            {
                "a seccomp filter on brig refuses it (Podman's and CRI-O's default profile allows sethostname(2) only with CAP_SYS_ADMIN): run the container with `--security-opt seccomp=unconfined` or a profile made by deploy/kubernetes/brig-seccomp-profile.py; in Kubernetes `seccompProfile: {type: Localhost, localhostProfile: profiles/brig.json}` (deploy/kubernetes/profiles/brig.json on the nodes)"
            }
            Step::Clone | Step::Other => {
                "`brig run` fails the same way here; the message names the step"
            }
        }
    };
    check(name, who.failing, refusal.message.clone()).fix(fix)
}

fn clone_failure(
    name: String,
    refusal: &Refusal,
    probe: &Assembly,
    who: &Who,
    sysctls: &Sysctls,
    container: Option<&str>,
) -> Check {
    // The probe tried a user namespace alone only when clone3 itself failed.
    let detail = match (refusal.errno, refusal.user_alone) {
        (Some(errno), Some(alone)) => {
            let why = format!("{} ({errno:?})", errno.desc());
            if alone {
                let others: Vec<String> = probe
                    .namespaces
                    .iter()
                    .filter(|name| *name != "user")
                    .cloned()
                    .collect();
                format!(
                    "clone failed: a user namespace alone works, but with {} namespaces clone fails: {why}",
                    listed(&others)
                )
            } else {
                format!("clone failed: {why}")
            }
        }
        _ => refusal.message.clone(),
    };
    let fix = if who.rootless && sysctls.apparmor_restrict == Some(1) {
        APPARMOR_FIX.to_string()
    } else if who.rootless && sysctls.unprivileged_userns_clone == Some(0) {
        "sysctl -w kernel.unprivileged_userns_clone=1".into()
    } else if sysctls.max_user_namespaces == Some(0) || refusal.errno == Some(Errno::ENOSPC) {
        "sysctl -w user.max_user_namespaces=15000".into()
    } else if let Some(runtime) = container {
        format!(
            "the container runtime blocks namespaces: {}; or run brig on the host",
            container_settings(runtime)
        )
    } else {
        "enable user namespaces (CONFIG_USER_NS, user.max_user_namespaces); see the lines above"
            .into()
    };
    check(name, who.failing, detail).fix(fix)
}

/// The container settings brig needs, for the runtime `in_container` named: the runtime's
/// seccomp filter off brig (or one that allows what brig needs), /proc unmasked, and on
/// AppArmor hosts the runtime's profile off (deploy/README.md has the table).
pub fn container_settings(runtime: &str) -> String {
    const PROFILE: &str = "(deploy/kubernetes/brig-seccomp-profile.py makes a seccomp profile to use instead of unconfined)";
    match runtime {
        "podman" => format!(
            "run the container with `--security-opt seccomp=unconfined --security-opt unmask=/proc/*`, and `--security-opt apparmor=unconfined` on AppArmor hosts {PROFILE}"
        ),
        "docker" => format!(
            "run the container with `--security-opt seccomp=unconfined --security-opt systempaths=unconfined --security-opt apparmor=unconfined` {PROFILE}"
        ),
        "kubernetes" => "give the pod `securityContext.seccompProfile: {type: Localhost, localhostProfile: profiles/brig.json}` (deploy/kubernetes/profiles/brig.json on every node; `Unconfined` works too, but the baseline Pod Security level refuses it) and the container `securityContext.procMount: Unmasked` (which needs the pod's `hostUsers: false`); on AppArmor nodes an `appArmorProfile` that allows mount; `brig doctor` in the pod names each field"
        .to_string(),
        other => format!(
            "run the container ({other}) without the runtime's seccomp filter and with /proc unmasked: Podman `--security-opt seccomp=unconfined --security-opt unmask=/proc/*`, Docker `--security-opt seccomp=unconfined --security-opt systempaths=unconfined`, plus `--security-opt apparmor=unconfined` on AppArmor hosts {PROFILE}"
        ),
    }
}

fn time_namespace(probe: &Assembly, who: &Who) -> Check {
    let name = who.name("time namespace");
    if probe.time() {
        check(name, Status::Ok, "created with the others")
    } else {
        check(
            name,
            Status::Warn,
            "this kernel has none (5.6+ with CONFIG_TIME_NS): jails share the host's boot and monotonic clocks",
        )
        .fix("a 5.6+ kernel built with CONFIG_TIME_NS")
    }
}

/// When root could not become uid 65534 to probe for it.
pub fn nobody_unprobed(why: &str) -> Check {
    check(
        Who::nobody().name("user namespaces"),
        Status::Warn,
        format!("could not probe as uid {UNPRIVILEGED_HOST_ID}: {why}"),
    )
    .fix("see the message")
}

fn describe_placement(version: Version, parents: &[PathBuf]) -> String {
    let parents: Vec<String> = parents
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    format!(
        "{}, jail cgroups under {}",
        probes::version_name(version),
        parents.join(", ")
    )
}

/// The cgroup layout, where `brig run` puts the jail's cgroup with the default limits,
/// and what it would make of `--cgroup-parent`.
pub fn cgroup_checks(probe: &Cgroups, who: &Who) -> Vec<Check> {
    let layout = match &probe.layout {
        Ok(layout) => layout,
        Err(why) => {
            return vec![
                check("cgroup layout", Status::Warn, why.clone())
                    .fix("mount cgroup2 at /sys/fs/cgroup"),
            ];
        }
    };
    let mut checks = Vec::new();
    let legacy: Vec<&str> = layout.legacy.iter().map(|(c, _)| c.as_str()).collect();
    let describe_v2 = |(dir, controllers): &(PathBuf, Vec<String>)| {
        if controllers.is_empty() {
            format!("cgroup2 at {} with no controllers", dir.display())
        } else {
            format!(
                "cgroup2 at {} with {}",
                dir.display(),
                controllers.join(", ")
            )
        }
    };
    let (kind, detail) = match (&layout.unified, legacy.is_empty()) {
        (Some(unified), true) => ("v2 (unified)", describe_v2(unified)),
        (Some(unified), false) => (
            "hybrid",
            format!("v1 {} and {}", legacy.join(", "), describe_v2(unified)),
        ),
        (None, false) => ("v1 (legacy)", format!("v1 {}", legacy.join(", "))),
        (None, true) => ("none", "no cgroup hierarchy is mounted".to_string()),
    };
    checks.push(check(
        "cgroup layout",
        Status::Ok,
        format!("{kind}: {detail}"),
    ));
    let name = who.name("cgroup limits");
    checks.push(match &probe.placement {
        Placement::Placed {
            version,
            parents,
            unwritable,
            ..
        } => {
            let detail = describe_placement(*version, parents);
            if unwritable.is_empty() {
                check(
                    name,
                    Status::Ok,
                    format!("{detail}; --memory, --pids and --cpus are enforced"),
                )
            } else {
                check(
                    name,
                    Status::Warn,
                    format!("{detail}, but not writable: {}", unwritable.join("; ")),
                )
                .fix("give brig a delegated cgroup it may write with --cgroup-parent")
            }
        }
        Placement::Shared { own, others } => shared_check(name, own, others),
        Placement::Nowhere => {
            let own = layout
                .own_v2
                .as_ref()
                .map(|own| format!(" (brig's own cgroup is {})", own.display()))
                .unwrap_or_default();
            let fix = if who.rootless {
                probe.rootless_fix.as_str()
            } else {
                "mount cgroup2 with the memory and pids controllers, or the v1 memory and pids hierarchies"
            };
            check(
                name,
                Status::Warn,
                format!("no usable cgroup{own}: the default memory limit is not enforced (processes are bounded by RLIMIT_NPROC), and --memory, --pids, --cpus fail (125)"),
            )
            .fix(fix)
        }
        Placement::Failed(why) => check(name, Status::Warn, why.clone()).fix(if who.rootless {
            probe.rootless_fix.as_str()
        } else {
            "give brig a cgroup it may write with --cgroup-parent"
        }),
    });
    if let Some((parent, placement)) = &probe.parent {
        checks.push(cgroup_parent_check(parent, placement));
    }
    checks
}

fn cgroup_parent_check(parent: &Path, placement: &Placement) -> Check {
    let name = format!("--cgroup-parent {}", parent.display());
    match placement {
        Placement::Placed {
            version,
            parents,
            unwritable,
            controllers,
        } => {
            let placed = describe_placement(*version, parents);
            let detail = match controllers {
                Some(list) => format!("{placed}; controllers: {list}"),
                None => placed,
            };
            if unwritable.is_empty() {
                check(name, Status::Ok, format!("{detail}; writable"))
            } else {
                check(
                    name,
                    Status::Fail,
                    format!("{detail}; not writable: {}", unwritable.join("; ")),
                )
                .fix("delegate it to this user (Delegate=yes in the unit, or chown the directory and its cgroup.procs, cgroup.subtree_control)")
            }
        }
        Placement::Nowhere | Placement::Shared { .. } => check(name, Status::Fail, "no cgroup")
            .fix("give a cgroup directory brig may write, under a mounted hierarchy"),
        Placement::Failed(why) => check(name, Status::Fail, why.clone())
            .fix("give a cgroup directory brig may write, under a mounted hierarchy"),
    }
}

/// Where uid 65534's jails would get their cgroup, as root sees it for them.
pub fn rootless_cgroup_check(placement: &Placement, fix: &str) -> Check {
    let name = Who::nobody().name("cgroup limits");
    match placement {
        Placement::Placed {
            version,
            parents,
            unwritable,
            ..
        } if unwritable.is_empty() => check(
            name,
            Status::Ok,
            format!(
                "{}; memory and pids enforced",
                describe_placement(*version, parents)
            ),
        ),
        Placement::Placed {
            version,
            parents,
            unwritable,
            ..
        } => check(
            name,
            Status::Warn,
            format!(
                "{}, but not writable: {}",
                describe_placement(*version, parents),
                unwritable.join("; ")
            ),
        )
        .fix(fix),
        Placement::Nowhere => check(
            name,
            Status::Warn,
            "brig's cgroup here is not delegated to that user, so the default memory limit would not be enforced (processes would be bounded by RLIMIT_NPROC)",
        )
        .fix(fix),
        Placement::Shared { own, others } => shared_check(name, own, others),
        Placement::Failed(why) => check(name, Status::Warn, why.clone()).fix(fix),
    }
}

/// brig's delegated cgroup, shared with other processes (the shell that started it).
fn shared_check(name: String, own: &Path, others: &str) -> Check {
    check(
        name,
        Status::Warn,
        format!("brig's own cgroup {} is delegated to it but holds other processes too ({others}): the default memory limit is not enforced, and --memory, --pids, --cpus fail (125)", own.display()),
    )
    .fix(crate::cgroup::SHARED_DELEGATION_FIX)
}

/// `--net filtered` needs a TUN device in the jail's network namespace. A default jail
/// does not, so a failure only warns.
pub fn tun_check(probe: &Result<(), String>, who: &Who) -> Check {
    let name = who.name("TUN device for --net filtered");
    match probe {
        Ok(()) => check(name, Status::Ok, "created in a fresh network namespace"),
        Err(why) => check(name, Status::Warn, format!("{why}: --allow-net and --net filtered fail here"))
            .fix(if who.rootless {
                "load the tun module (`modprobe tun`) and make /dev/net/tun usable by everyone (`chmod 0666 /dev/net/tun`, the usual mode: a user can only create devices in namespaces they own); in a container, pass the device in (`--device /dev/net/tun`)"
            } else {
                "load the tun module (`modprobe tun`); in a container, pass the device in (`--device /dev/net/tun`)"
            }),
    }
}

pub fn landlock_check(abi: Result<u8, landlock::Unavailable>) -> Check {
    match abi {
        Err(missing) => check(
            "Landlock",
            Status::Warn,
            format!(
                "not available: {}; only the mounts guard the files (--landlock require fails)",
                missing.reason()
            ),
        )
        .fix(missing.fix()),
        Ok(0) => check(
            "Landlock",
            Status::Warn,
            "not available: only the mounts guard the files (--landlock require fails)",
        )
        .fix("boot a 5.13+ kernel with Landlock in the LSM list, e.g. lsm=landlock,lockdown,yama,integrity,apparmor"),
        Ok(abi) if abi < landlock::FULL_ABI => check(
            "Landlock",
            Status::Warn,
            format!(
                "ABI {abi}: files only; scoping of abstract sockets and signals needs ABI {}",
                landlock::FULL_ABI
            ),
        )
        .fix("a 6.12+ kernel has everything brig uses"),
        Ok(abi) => check(
            "Landlock",
            Status::Ok,
            format!(
                "ABI {abi} (brig uses up to {}): files and scoping enforced",
                landlock::MAX_ABI
            ),
        ),
    }
}

pub fn seccomp_checks(probe: &Seccomp) -> Vec<Check> {
    let filter = match &probe.filter {
        Ok(()) => check(
            "seccomp filter",
            Status::Ok,
            "the default profile installs and denies unshare(2) with EPERM",
        ),
        Err(why) => check("seccomp filter", Status::Fail, why.clone())
            .fix("use a kernel with CONFIG_SECCOMP_FILTER; inside a container, allow seccomp(2) and prctl(2)"),
    };
    let log = if probe.log {
        let audit = match probe.audit_readable {
            Some(true) => "; brig reads the audit records and names the calls",
            Some(false) => {
                "; the audit records are not readable here, so brig cannot name the calls"
            }
            None => "; rootless, brig cannot read the audit records (they are in the kernel log)",
        };
        check(
            "seccomp log",
            Status::Ok,
            format!("SECCOMP_RET_LOG available (--seccomp-log){audit}"),
        )
    } else {
        check(
            "seccomp log",
            Status::Warn,
            "SECCOMP_RET_LOG is not available: --seccomp-log cannot work",
        )
        .fix("a 4.14+ kernel")
    };
    let user_notif = if probe.user_notif {
        check(
            "seccomp user-notify",
            Status::Ok,
            "SECCOMP_RET_USER_NOTIF available (brig does not need it)",
        )
    } else {
        check(
            "seccomp user-notify",
            Status::Ok,
            "not available (5.0+); brig does not need it",
        )
    };
    vec![filter, log, user_notif]
}

pub fn end_to_end(probe: &EndToEnd, who: &Who) -> Check {
    let name = who.name("end to end");
    let shown = &probe.shown;
    match &probe.outcome {
        Err(why) => check(name, who.failing, format!("{shown}: {why}"))
            .fix("see the failed checks above and the message"),
        Ok(ran) if ran.code == Some(0) => check(
            name,
            Status::Ok,
            format!("{shown}: exit 0 in {} ms", ran.elapsed.as_millis()),
        ),
        Ok(ran) => {
            let status = ran
                .code
                .map_or_else(|| "killed".to_string(), |c| format!("exit {c}"));
            check(
                name,
                who.failing,
                format!("{shown}: {status}: {}", ran.stderr),
            )
            .fix("see the failed checks above and the message")
        }
    }
}

/// Which host ids jails get: as root, a host uid of its own for each jail (the default
/// range, usable and clear of this host's users and subordinate id ranges); rootless,
/// the caller's own uid, whose per-user counters the jails share.
pub fn host_identity_check(probe: Option<&probes::HostUids>, who: &Who) -> Check {
    let name = who.name("host identities");
    let bounds = "each bounded by its own namespace's /proc/sys/user limits (64 inotify instances, 16384 watches) and RLIMIT_SIGPENDING 1024, RLIMIT_MSGQUEUE 800K";
    let Some(probe) = probe else {
        return check(
            name,
            Status::Ok,
            format!(
                "caller: jails map to your own uid, whose per-user kernel counters (inotify, pending signals, message queues) they share with you, {bounds}"
            ),
        );
    };
    let range = format!("{}-{}", probe.first, probe.last);
    if !probe.mapped {
        return check(
            name,
            Status::Warn,
            format!(
                "shared: brig's user namespace does not map the default range {range} (a container's), so every jail maps to 65534 and its namespace is root's, whose per-user kernel counters (inotify, pending signals, message queues) the jails share"
            ),
        )
        .fix("pass --host-uid-range with a block of ids /proc/self/uid_map and gid_map map (unused by anyone), or map the range into the container");
    }
    match (&probe.lease, probe.overlaps.as_slice()) {
        (Err(why), _) => check(
            name,
            Status::Fail,
            format!("per-jail: no host uid of the range {range} could be taken: {why}"),
        )
        .fix(format!(
            "make {} a directory of root's alone, or pass --host-uid-range off (weaker: jails share root's per-user counters)",
            crate::identity::HOST_UID_LOCKS
        )),
        (Ok(()), []) => check(
            name,
            Status::Ok,
            format!(
                "per-jail: each jail maps to, and its user namespace is created by, a host uid of its own from {range} (locks in {}), {bounds}; with --host-uid-range off all share 65534 and root's counters",
                crate::identity::HOST_UID_LOCKS
            ),
        ),
        (Ok(()), overlaps) => check(
            name,
            Status::Warn,
            format!(
                "per-jail: the range {range} holds ids this host gives out ({}): a jail could act as them on files",
                overlaps.join(", ")
            ),
        )
        .fix("pass --host-uid-range with a block no user or subordinate id range of this host uses"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Layout;
    use crate::doctor::probes::Ran;
    use std::time::Duration;

    const ALL_NAMESPACES: [&str; 7] = ["user", "mount", "pid", "net", "ipc", "uts", "time"];

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| name.to_string()).collect()
    }

    fn assembled() -> Assembly {
        Assembly {
            namespaces: names(&ALL_NAMESPACES),
            outcome: Ok(()),
        }
    }

    fn refused(stage: Stage, errno: Errno, message: &str) -> Assembly {
        Assembly {
            namespaces: names(&ALL_NAMESPACES),
            outcome: Err(Refusal {
                stage: Some(stage),
                errno: Some(errno),
                message: message.into(),
                user_alone: None,
            }),
        }
    }

    /// clone3 refused with `errno`, as `Jail::assemble` says it.
    fn clone_refused(errno: Errno, user_alone: bool) -> Assembly {
        let mut probe = refused(
            Stage::Namespaces,
            errno,
            &format!(
                "create the jail's namespaces (clone3): {} ({errno:?}); user namespaces may be disabled or restricted here",
                errno.desc()
            ),
        );
        if let Err(refusal) = &mut probe.outcome {
            refusal.user_alone = Some(user_alone);
        }
        probe
    }

    fn healthy_sysctls() -> Sysctls {
        Sysctls {
            max_user_namespaces: Some(15000),
            unprivileged_userns_clone: None,
            apparmor_restrict: None,
        }
    }

    fn root() -> Who {
        Who {
            label: "as root".into(),
            failing: Status::Fail,
            rootless: false,
        }
    }

    fn user() -> Who {
        Who {
            label: "rootless, uid 1000".into(),
            failing: Status::Fail,
            rootless: true,
        }
    }

    /// (status, name) of each check; every problem comes with a fix.
    fn summary(checks: &[Check]) -> Vec<(Status, &str)> {
        for check in checks {
            assert!(
                check.status == Status::Ok || check.fix.is_some(),
                "a problem without a fix: {check:?}"
            );
        }
        checks
            .iter()
            .map(|check| (check.status, check.name.as_str()))
            .collect()
    }

    fn find<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks
            .iter()
            .find(|check| check.name == name)
            .unwrap_or_else(|| panic!("no check {name} in {checks:#?}"))
    }

    fn fix(check: &Check) -> &str {
        check.fix.as_deref().unwrap_or("")
    }

    #[test]
    fn a_healthy_host_is_all_ok() {
        let checks = namespace_checks(&assembled(), &root(), &healthy_sysctls(), None);
        assert_eq!(
            summary(&checks),
            [
                (Status::Ok, "user namespaces (as root)"),
                (Status::Ok, "time namespace (as root)"),
                (Status::Ok, "id mapping (as root)"),
                (Status::Ok, "cgroup namespace (as root)"),
                (Status::Ok, "mount namespace (as root)"),
                (Status::Ok, "fresh /proc (as root)"),
                (Status::Ok, "pivot_root (as root)"),
            ]
        );
        assert_eq!(
            checks[0].detail,
            "a child was cloned into new user, mount, pid, net, ipc, uts and time namespaces"
        );
        let sysctls = sysctl_checks(&healthy_sysctls(), false);
        assert!(
            summary(&sysctls)
                .iter()
                .all(|(status, _)| *status == Status::Ok)
        );
    }

    #[test]
    fn clone_refused_under_apparmor_restriction_gives_the_apparmor_fix() {
        let sysctls = Sysctls {
            apparmor_restrict: Some(1),
            ..healthy_sysctls()
        };
        let checks = namespace_checks(&clone_refused(Errno::EPERM, false), &user(), &sysctls, None);
        // Nothing after clone was reached.
        assert_eq!(
            summary(&checks),
            [(Status::Fail, "user namespaces (rootless, uid 1000)")]
        );
        assert_eq!(
            checks[0].detail,
            "clone failed: Operation not permitted (EPERM)"
        );
        assert!(
            fix(&checks[0]).contains("deploy/apparmor/brig"),
            "{checks:?}"
        );
        assert!(fix(&checks[0]).contains("kernel.apparmor_restrict_unprivileged_userns=0"));
        // The sysctl itself: a failure rootless, a warning as root.
        let line = |root| {
            let checks = sysctl_checks(&sysctls, root);
            let check = find(&checks, "AppArmor userns restriction");
            (check.status, check.fix.clone())
        };
        assert_eq!(line(false), (Status::Fail, Some(APPARMOR_FIX.into())));
        assert_eq!(line(true), (Status::Warn, Some(APPARMOR_FIX.into())));
        // The restriction does not stop root: root's failure is another one.
        let checks = namespace_checks(&clone_refused(Errno::EPERM, false), &root(), &sysctls, None);
        assert!(!fix(&checks[0]).contains("apparmor"), "{checks:?}");
    }

    #[test]
    fn a_step_refused_under_apparmor_restriction_gives_the_apparmor_fix() {
        // Ubuntu's restriction lets the clone through, without capabilities inside.
        let sysctls = Sysctls {
            apparmor_restrict: Some(1),
            ..healthy_sysctls()
        };
        let probe = refused(
            Stage::Identity,
            Errno::EPERM,
            "set the jail's uid: Operation not permitted (EPERM)",
        );
        let checks = namespace_checks(&probe, &user(), &sysctls, None);
        assert_eq!(
            summary(&checks),
            [
                (Status::Ok, "user namespaces (rootless, uid 1000)"),
                (Status::Ok, "time namespace (rootless, uid 1000)"),
                (Status::Fail, "id mapping (rootless, uid 1000)"),
            ]
        );
        assert_eq!(fix(&checks[2]), APPARMOR_FIX);
    }

    #[test]
    fn no_user_namespaces_allowed() {
        let sysctls = Sysctls {
            max_user_namespaces: Some(0),
            ..healthy_sysctls()
        };
        let lines = sysctl_checks(&sysctls, true);
        let max = find(&lines, "user.max_user_namespaces");
        assert_eq!(max.status, Status::Fail);
        assert!(
            max.detail.starts_with("0: nobody, root included"),
            "{max:?}"
        );
        assert!(fix(max).contains("sysctl -w user.max_user_namespaces=15000"));
        let checks = namespace_checks(
            &clone_refused(Errno::ENOSPC, false),
            &root(),
            &sysctls,
            None,
        );
        assert_eq!(
            summary(&checks),
            [(Status::Fail, "user namespaces (as root)")]
        );
        assert_eq!(
            checks[0].detail,
            "clone failed: No space left on device (ENOSPC)"
        );
        assert_eq!(fix(&checks[0]), "sysctl -w user.max_user_namespaces=15000");
        // Without the sysctl file, the kernel has no user namespaces at all.
        let missing = sysctl_checks(&Sysctls::default(), true);
        let max = find(&missing, "user.max_user_namespaces");
        assert_eq!(max.status, Status::Fail);
        assert!(fix(max).contains("CONFIG_USER_NS"));
    }

    #[test]
    fn clone_refused_inside_a_container_says_which_namespaces() {
        let checks = namespace_checks(
            &clone_refused(Errno::EPERM, true),
            &root(),
            &healthy_sysctls(),
            Some("docker"),
        );
        assert_eq!(
            summary(&checks),
            [(Status::Fail, "user namespaces (as root)")]
        );
        assert_eq!(
            checks[0].detail,
            "clone failed: a user namespace alone works, but with mount, pid, net, ipc, uts and time namespaces clone fails: Operation not permitted (EPERM)"
        );
        assert!(fix(&checks[0]).contains("--security-opt seccomp=unconfined"));
        // Docker masks /proc too: the fix unmasks it, with Docker's own option.
        assert!(
            fix(&checks[0]).contains("--security-opt systempaths=unconfined"),
            "{}",
            fix(&checks[0])
        );
        assert!(!fix(&checks[0]).contains("unmask=/proc"));
        let podman = namespace_checks(
            &clone_refused(Errno::EPERM, true),
            &root(),
            &healthy_sysctls(),
            Some("podman"),
        );
        assert!(
            fix(&podman[0])
                .contains("`--security-opt seccomp=unconfined --security-opt unmask=/proc/*`")
        );
        // For uid 65534, probed by root, it is only a warning.
        let checks = namespace_checks(
            &clone_refused(Errno::EPERM, true),
            &Who::nobody(),
            &healthy_sysctls(),
            Some("docker"),
        );
        assert_eq!(
            summary(&checks),
            [(Status::Warn, "user namespaces (rootless, uid 65534)")]
        );
    }

    #[test]
    fn proc_refused_inside_a_container_gives_the_unmask_fix() {
        let probe = refused(
            Stage::Mounts,
            Errno::EPERM,
            "mount a fresh /proc on /proc: Operation not permitted (EPERM); the host hides parts of its /proc (common inside containers); run brig where /proc is fully visible",
        );
        let checks = namespace_checks(&probe, &root(), &healthy_sysctls(), Some("docker"));
        // pivot_root into the jail's root comes after /proc: not reached.
        assert_eq!(
            summary(&checks),
            [
                (Status::Ok, "user namespaces (as root)"),
                (Status::Ok, "time namespace (as root)"),
                (Status::Ok, "id mapping (as root)"),
                (Status::Ok, "cgroup namespace (as root)"),
                (Status::Ok, "mount namespace (as root)"),
                (Status::Fail, "fresh /proc (as root)"),
            ]
        );
        let proc = &checks[5];
        assert!(
            proc.detail
                .starts_with("mount a fresh /proc on /proc: Operation not permitted")
        );
        assert!(fix(proc).contains("procMount: Unmasked"), "{proc:?}");
        assert!(
            fix(proc).contains("--security-opt unmask=/proc/*"),
            "{proc:?}"
        );
        assert!(
            fix(proc).contains("--security-opt systempaths=unconfined"),
            "{proc:?}"
        );
    }

    #[test]
    fn each_mount_failure_lands_on_its_step() {
        let at = |message: &str| {
            let probe = refused(Stage::Mounts, Errno::EINVAL, message);
            let checks = namespace_checks(&probe, &root(), &healthy_sysctls(), None);
            summary(&checks)
                .into_iter()
                .filter(|(status, name)| *status != Status::Ok || name.starts_with("mount"))
                .map(|(status, name)| (status, name.to_string()))
                .collect::<Vec<_>>()
        };
        // pivot_root into the scratch root: the private mounts worked, /proc not reached.
        assert_eq!(
            at("pivot_root into /tmp: Invalid argument (EINVAL)"),
            [
                (Status::Ok, "mount namespace (as root)".into()),
                (Status::Fail, "pivot_root (as root)".into()),
            ]
        );
        assert_eq!(
            at(
                "make the host's mounts private in the jail's mount namespace: Invalid argument (EINVAL)"
            ),
            [(Status::Fail, "mount namespace (as root)".into())]
        );
        assert_eq!(
            at("bind /usr to /usr in the jail: Invalid argument (EINVAL)"),
            [(Status::Fail, "mount namespace (as root)".into())]
        );
    }

    #[test]
    fn other_steps_are_reported_where_they_fail() {
        let probe = refused(
            Stage::Isolation,
            Errno::EPERM,
            "set the jail's hostname to brig: Operation not permitted (EPERM)",
        );
        let checks = namespace_checks(&probe, &root(), &healthy_sysctls(), None);
        assert_eq!(
            summary(&checks),
            [
                (Status::Ok, "user namespaces (as root)"),
                (Status::Ok, "time namespace (as root)"),
                (Status::Ok, "id mapping (as root)"),
                (Status::Ok, "cgroup namespace (as root)"),
                (Status::Fail, "jail assembly (as root)"),
            ]
        );
        assert!(checks[4].detail.contains("hostname"));
        let probe = refused(
            Stage::CgroupJoin,
            Errno::EPERM,
            "create the jail's cgroup namespace: Operation not permitted (EPERM)",
        );
        let checks = namespace_checks(&probe, &root(), &healthy_sysctls(), None);
        assert_eq!(
            summary(&checks).last(),
            Some(&(Status::Fail, "cgroup namespace (as root)"))
        );
        assert_eq!(checks.len(), 4);
    }

    #[test]
    fn no_time_namespace_is_a_warning() {
        let probe = Assembly {
            namespaces: names(&ALL_NAMESPACES[..6]),
            outcome: Ok(()),
        };
        let checks = namespace_checks(&probe, &root(), &healthy_sysctls(), None);
        let time = find(&checks, "time namespace (as root)");
        assert_eq!(time.status, Status::Warn);
        assert!(time.detail.contains("5.6+"), "{time:?}");
        assert_eq!(
            checks[0].detail,
            "a child was cloned into new user, mount, pid, net, ipc and uts namespaces"
        );
        assert!(
            summary(&checks)
                .iter()
                .all(|(status, name)| *status == Status::Ok || name.starts_with("time"))
        );
    }

    fn layout(unified: Option<(&str, &[&str])>, legacy: &[&str]) -> Layout {
        Layout {
            unified: unified.map(|(dir, controllers)| (PathBuf::from(dir), names(controllers))),
            legacy: legacy
                .iter()
                .map(|c| (c.to_string(), Path::new("/sys/fs/cgroup").join(c)))
                .collect(),
            own_v2: unified.map(|(dir, _)| Path::new(dir).join("user.slice")),
            shared_with: None,
        }
    }

    fn placed(version: Version, parents: &[&str]) -> Placement {
        Placement::Placed {
            version,
            parents: parents.iter().map(PathBuf::from).collect(),
            unwritable: Vec::new(),
            controllers: None,
        }
    }

    fn cgroup_lines(layout: Layout, placement: Placement, who: &Who) -> Vec<(Status, String)> {
        let probe = Cgroups {
            layout: Ok(layout),
            placement,
            parent: None,
            rootless_fix: "the rootless fix".into(),
        };
        let checks = cgroup_checks(&probe, who);
        summary(&checks);
        checks
            .iter()
            .map(|check| (check.status, format!("{}: {}", check.name, check.detail)))
            .collect()
    }

    #[test]
    fn cgroup_v2_placement() {
        let lines = cgroup_lines(
            layout(Some(("/sys/fs/cgroup", &["cpu", "memory", "pids"])), &[]),
            placed(Version::V2, &["/sys/fs/cgroup/brig"]),
            &root(),
        );
        assert_eq!(
            lines,
            [
                (Status::Ok, "cgroup layout: v2 (unified): cgroup2 at /sys/fs/cgroup with cpu, memory, pids".into()),
                (Status::Ok, "cgroup limits (as root): v2, jail cgroups under /sys/fs/cgroup/brig; --memory, --pids and --cpus are enforced".into()),
            ]
        );
    }

    #[test]
    fn cgroup_hybrid_placement() {
        let lines = cgroup_lines(
            layout(Some(("/sys/fs/cgroup/unified", &[])), &["memory", "pids"]),
            placed(
                Version::V1,
                &["/sys/fs/cgroup/memory/brig", "/sys/fs/cgroup/pids/brig"],
            ),
            &root(),
        );
        assert_eq!(
            lines,
            [
                (Status::Ok, "cgroup layout: hybrid: v1 memory, pids and cgroup2 at /sys/fs/cgroup/unified with no controllers".into()),
                (Status::Ok, "cgroup limits (as root): v1, jail cgroups under /sys/fs/cgroup/memory/brig, /sys/fs/cgroup/pids/brig; --memory, --pids and --cpus are enforced".into()),
            ]
        );
    }

    #[test]
    fn cgroup_v1_placement_not_writable() {
        let placement = Placement::Placed {
            version: Version::V1,
            parents: vec!["/sys/fs/cgroup/memory/brig".into()],
            unwritable: vec!["/sys/fs/cgroup/memory: Permission denied".into()],
            controllers: None,
        };
        let lines = cgroup_lines(layout(None, &["memory", "pids"]), placement, &root());
        assert_eq!(
            lines[0],
            (
                Status::Ok,
                "cgroup layout: v1 (legacy): v1 memory, pids".into()
            )
        );
        assert_eq!(lines[1].0, Status::Warn);
        assert!(
            lines[1]
                .1
                .ends_with("but not writable: /sys/fs/cgroup/memory: Permission denied"),
            "{lines:?}"
        );
    }

    #[test]
    fn no_usable_cgroup() {
        let lines = cgroup_lines(layout(None, &[]), Placement::Nowhere, &root());
        assert_eq!(
            lines[0],
            (
                Status::Ok,
                "cgroup layout: none: no cgroup hierarchy is mounted".into()
            )
        );
        assert_eq!(lines[1].0, Status::Warn);
        assert!(lines[1].1.starts_with(
            "cgroup limits (as root): no usable cgroup: the default memory limit is not enforced"
        ));
        // Rootless, the fix is a delegated cgroup; brig's own cgroup is named.
        let probe = Cgroups {
            layout: Ok(layout(Some(("/sys/fs/cgroup", &["memory", "pids"])), &[])),
            placement: Placement::Nowhere,
            parent: None,
            rootless_fix: "the rootless fix".into(),
        };
        let checks = cgroup_checks(&probe, &user());
        let limits = find(&checks, "cgroup limits (rootless, uid 1000)");
        assert!(
            limits
                .detail
                .contains("(brig's own cgroup is /sys/fs/cgroup/user.slice)")
        );
        assert_eq!(fix(limits), "the rootless fix");
    }

    #[test]
    fn a_delegated_cgroup_shared_with_the_caller_is_not_usable() {
        let probe = Cgroups {
            layout: Ok(layout(Some(("/sys/fs/cgroup", &["memory", "pids"])), &[])),
            placement: Placement::Shared {
                own: "/sys/fs/cgroup/svc".into(),
                others: "pid 42".into(),
            },
            parent: None,
            rootless_fix: "the rootless fix".into(),
        };
        let checks = cgroup_checks(&probe, &user());
        let limits = find(&checks, "cgroup limits (rootless, uid 1000)");
        assert_eq!(limits.status, Status::Warn);
        assert!(
            limits.detail.starts_with(
                "brig's own cgroup /sys/fs/cgroup/svc is delegated to it but holds other processes too (pid 42)"
            ),
            "{}",
            limits.detail
        );
        assert_eq!(fix(limits), crate::cgroup::SHARED_DELEGATION_FIX);
    }

    #[test]
    fn cgroup_limits_for_uid_65534() {
        let ok = rootless_cgroup_check(&placed(Version::V2, &["/sys/fs/cgroup/deleg"]), "fix");
        assert_eq!(
            (ok.status, ok.name.as_str(), ok.detail.as_str()),
            (
                Status::Ok,
                "cgroup limits (rootless, uid 65534)",
                "v2, jail cgroups under /sys/fs/cgroup/deleg; memory and pids enforced"
            )
        );
        let none = rootless_cgroup_check(&Placement::Nowhere, "the rootless fix");
        assert_eq!(none.status, Status::Warn);
        assert!(none.detail.contains("not delegated to that user"));
        assert_eq!(fix(&none), "the rootless fix");
    }

    #[test]
    fn a_given_cgroup_parent() {
        let parent = Path::new("/sys/fs/cgroup/deleg");
        let placement = Placement::Placed {
            version: Version::V2,
            parents: vec![parent.into()],
            unwritable: Vec::new(),
            controllers: Some("cpu memory pids".into()),
        };
        let ok = cgroup_parent_check(parent, &placement);
        assert_eq!(ok.status, Status::Ok);
        assert_eq!(
            ok.detail,
            "v2, jail cgroups under /sys/fs/cgroup/deleg; controllers: cpu memory pids; writable"
        );
        let missing = cgroup_parent_check(parent, &Placement::Failed("no such cgroup".into()));
        assert_eq!(
            (missing.status, missing.name.as_str()),
            (Status::Fail, "--cgroup-parent /sys/fs/cgroup/deleg")
        );
    }

    #[test]
    fn landlock_seccomp_and_end_to_end() {
        assert_eq!(landlock_check(Ok(0)).status, Status::Warn);
        assert_eq!(landlock_check(Ok(5)).status, Status::Warn);
        assert_eq!(landlock_check(Ok(landlock::FULL_ABI)).status, Status::Ok);
        // systemd-nspawn's seccomp filter, not the kernel: the line says so and names
        // nspawn's option.
        let nspawn = landlock_check(Err(landlock::Unavailable {
            errno: Errno::EPERM,
            filtered: true,
            container: Some("systemd-nspawn".into()),
        }));
        assert_eq!(nspawn.status, Status::Warn);
        assert_eq!(
            nspawn.detail,
            "not available: the seccomp filter of the container (systemd-nspawn) refuses it, not the kernel (landlock_create_ruleset: EPERM); only the mounts guard the files (--landlock require fails)"
        );
        assert!(fix(&nspawn).contains("--system-call-filter='landlock_create_ruleset landlock_add_rule landlock_restrict_self'"));
        let seccomp = Seccomp {
            filter: Err("install the seccomp profile default: Operation not permitted".into()),
            log: false,
            user_notif: false,
            audit_readable: None,
        };
        assert_eq!(
            summary(&seccomp_checks(&seccomp)),
            [
                (Status::Fail, "seccomp filter"),
                (Status::Warn, "seccomp log"),
                (Status::Ok, "seccomp user-notify"),
            ]
        );
        let run = |code| EndToEnd {
            shown: "brig run --profile shell -- sh -c true".into(),
            outcome: Ok(Ran {
                code,
                stderr: "brig: no".into(),
                elapsed: Duration::from_millis(80),
            }),
        };
        let ok = end_to_end(&run(Some(0)), &root());
        assert_eq!(
            ok.detail,
            "brig run --profile shell -- sh -c true: exit 0 in 80 ms"
        );
        let failed = end_to_end(&run(Some(125)), &Who::nobody());
        assert_eq!(failed.status, Status::Warn);
        assert_eq!(
            failed.detail,
            "brig run --profile shell -- sh -c true: exit 125: brig: no"
        );
        assert_eq!(end_to_end(&run(None), &root()).status, Status::Fail);
    }
}
