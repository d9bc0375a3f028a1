//! `brig doctor` inside a Kubernetes pod: what the pod spec must change, one line per pod
//! field. The other checks stop at the first step of a jail that fails; these probe each
//! restriction a pod can put on brig on its own, so that one run names every field to
//! change: the seccomp profile, the AppArmor profile (on AppArmor nodes), the masked /proc
//! (procMount, which needs hostUsers), user namespaces, the cgroup limits and the TUN
//! device.
//!
//! A pod is told by `KUBERNETES_SERVICE_HOST`, which the kubelet sets in every container
//! (with or without `enableServiceLinks`).

use super::probes::{self, Cgroups, Lines, Placement, Sysctls};
use super::{Check, Status, check};
use nix::errno::Errno;
use nix::sched::CloneFlags;

/// Whether brig runs in a Kubernetes pod.
pub fn in_pod() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// What a pod's settings do to brig, each probed on its own.
#[derive(Debug, Default)]
pub struct PodProbe {
    /// A seccomp filter is on brig (`Seccomp: 2` in /proc/self/status).
    pub filtered: bool,
    /// The calls a jail needs that failed, `(call, errno)`, in the order tried: a user
    /// namespace; then in it, a mount and a UTS namespace, the mounts made private, the
    /// hostname set. Each needs no privilege there, so EPERM is a filter's.
    pub refused: Vec<(String, Errno)>,
    /// Mounts over parts of /proc (the runtime's masks and read-only binds), which make
    /// the kernel refuse a fresh /proc in a user namespace.
    pub proc_masks: Vec<String>,
    /// brig's /proc/self/uid_map, when it is not the host's identity map: the pod has a
    /// user namespace of its own (`hostUsers: false`).
    pub pod_user_namespace: Option<String>,
    /// The AppArmor profile brig runs under (`/proc/self/attr/apparmor/current`), on
    /// kernels with AppArmor.
    pub apparmor: Option<String>,
}

/// The calls, in the order the forked probe makes them.
const UNSHARE_USER: &str = "unshare(CLONE_NEWUSER)";
const UNSHARE_MOUNT_UTS: &str = "unshare(CLONE_NEWNS|CLONE_NEWUTS)";
const MOUNT_PRIVATE: &str = "mount(/, MS_REC|MS_PRIVATE)";
const SETHOSTNAME: &str = "sethostname";

pub fn probe() -> PodProbe {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let refused = match probes::in_fork(|| Ok(refused_calls())) {
        Ok(lines) => lines
            .into_iter()
            .map(|(call, errno)| (call, Errno::from_raw(errno.parse().unwrap_or(0))))
            .collect(),
        // The filter may refuse fork itself (clone without namespace flags).
        Err(why) => {
            let errno = if why.ends_with(Errno::EPERM.desc()) {
                Errno::EPERM
            } else {
                Errno::UnknownErrno
            };
            vec![("fork".to_string(), errno)]
        }
    };
    PodProbe {
        filtered: status
            .lines()
            .any(|line| line.split_whitespace().eq(["Seccomp:", "2"])),
        refused,
        proc_masks: proc_masks(&mountinfo),
        pod_user_namespace: own_user_namespace(&uid_map),
        apparmor: std::fs::read_to_string("/proc/self/attr/apparmor/current")
            .ok()
            .map(|profile| profile.trim().to_string())
            .filter(|profile| !profile.is_empty()),
    }
}

/// In the forked child: the calls a jail is built with, until the first that fails.
fn refused_calls() -> Lines {
    let failed = |call: &str, errno: Errno| vec![(call.to_string(), (errno as i32).to_string())];
    if let Err(errno) = nix::sched::unshare(CloneFlags::CLONE_NEWUSER) {
        return failed(UNSHARE_USER, errno);
    }
    if let Err(errno) = nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS) {
        return failed(UNSHARE_MOUNT_UTS, errno);
    }
    let private = nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE;
    if let Err(errno) = nix::mount::mount(None::<&str>, "/", None::<&str>, private, None::<&str>) {
        return failed(MOUNT_PRIVATE, errno);
    }
    if let Err(errno) = nix::unistd::sethostname("brig-doctor") {
        return failed(SETHOSTNAME, errno);
    }
    Vec::new()
}

/// The mount points below /proc in `mountinfo`. /proc/sys/fs/binfmt_misc is left out: it
/// is a permanently empty directory, which the kernel does not count as hiding anything.
fn proc_masks(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .filter(|point| point.starts_with("/proc/") && *point != "/proc/sys/fs/binfmt_misc")
        .map(str::to_string)
        .collect()
}

/// `Some(map)` unless `uid_map` is the initial user namespace's `0 0 4294967295`.
fn own_user_namespace(uid_map: &str) -> Option<String> {
    let map = uid_map.split_whitespace().collect::<Vec<_>>().join(" ");
    (!map.is_empty() && map != "0 0 4294967295").then_some(map)
}

const PROFILE_FIX: &str = "set the pod's `securityContext.seccompProfile: {type: Localhost, localhostProfile: profiles/brig.json}`, with deploy/kubernetes/profiles/brig.json (the runtime's default with these calls allowed, made by deploy/kubernetes/brig-seccomp-profile.py) at /var/lib/kubelet/seccomp/profiles/brig.json on every node; `type: Unconfined` works too, but the baseline Pod Security level refuses it";

/// One line per pod field: `pod spec: FIELD`.
pub fn pod_checks(
    probe: &PodProbe,
    cgroups: &Cgroups,
    tun: &Result<(), String>,
    sysctls: &Sysctls,
) -> Vec<Check> {
    let mut checks = vec![seccomp_check(probe)];
    checks.extend(apparmor_check(probe));
    checks.extend([
        proc_mount_check(probe),
        user_namespace_check(probe, sysctls),
        cgroup_check(cgroups),
        tun_check(tun),
    ]);
    checks
}

/// On AppArmor nodes: the runtime's default profile denies mount(2) (EACCES, where a
/// seccomp filter says EPERM). No line on nodes without AppArmor.
fn apparmor_check(probe: &PodProbe) -> Option<Check> {
    let profile = probe.apparmor.as_deref()?;
    let name = "pod spec: securityContext.appArmorProfile";
    let denied: Vec<&(String, Errno)> = probe
        .refused
        .iter()
        .filter(|(_, errno)| *errno == Errno::EACCES)
        .collect();
    Some(if denied.is_empty() {
        check(
            name,
            Status::Ok,
            format!("AppArmor profile {profile} lets brig build a jail"),
        )
    } else {
        check(
            name,
            Status::Fail,
            format!(
                "AppArmor profile {profile} denies what brig builds a jail with ({})",
                listed(&denied)
            ),
        )
        .fix("load an AppArmor profile that allows mount and user namespaces on the nodes and set the pod's `securityContext.appArmorProfile: {type: Localhost, localhostProfile: NAME}`; `type: Unconfined` works too, but the baseline Pod Security level refuses it")
    })
}

fn listed(refused: &[&(String, Errno)]) -> String {
    refused
        .iter()
        .map(|(call, errno)| format!("{call}: {errno:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn seccomp_check(probe: &PodProbe) -> Check {
    let name = "pod spec: securityContext.seccompProfile";
    // EPERM where the caller holds every capability of its own namespaces: a filter's.
    let by_filter: Vec<&(String, Errno)> = probe
        .refused
        .iter()
        .filter(|(_, errno)| *errno == Errno::EPERM)
        .collect();
    if probe.filtered && !by_filter.is_empty() {
        return check(
            name,
            Status::Fail,
            format!(
                "the container's seccomp filter refuses what brig builds a jail with ({})",
                listed(&by_filter)
            ),
        )
        .fix(PROFILE_FIX);
    }
    // Failures that are not a filter's EPERM, other than the user namespace's (its own
    // line): the probe could not tell.
    let unexplained: Vec<&(String, Errno)> = probe
        .refused
        .iter()
        .filter(|(call, errno)| {
            *errno != Errno::EPERM
                && !(*errno == Errno::EACCES && probe.apparmor.is_some())
                && call != UNSHARE_USER
        })
        .collect();
    if !unexplained.is_empty() {
        return check(
            name,
            Status::Warn,
            format!("could not tell: {}", listed(&unexplained)),
        )
        .fix("see the namespace and mount lines above");
    }
    let detail = if probe.filtered {
        "a seccomp filter is on brig and lets it build a jail (user, mount and UTS namespaces, private mounts, the hostname)"
    } else {
        "no seccomp filter on brig (brig's own is on each sandbox's program)"
    };
    check(name, Status::Ok, detail)
}

fn proc_mount_check(probe: &PodProbe) -> Check {
    let name = "pod spec: containers[].securityContext.procMount";
    if probe.proc_masks.is_empty() {
        return check(
            name,
            Status::Ok,
            "/proc is not masked: a sandbox gets a fresh /proc",
        );
    }
    const SHOWN: usize = 4;
    let mut masks = probe.proc_masks[..probe.proc_masks.len().min(SHOWN)].join(", ");
    if probe.proc_masks.len() > SHOWN {
        masks.push_str(&format!(", and {} more", probe.proc_masks.len() - SHOWN));
    }
    let host_users = if probe.pod_user_namespace.is_some() {
        "this pod has one"
    } else {
        "this pod has none: set `spec.hostUsers: false` too"
    };
    check(
        name,
        Status::Fail,
        format!("/proc is masked ({masks}): the kernel refuses a sandbox a fresh /proc (EPERM)"),
    )
    .fix(format!(
        "set the container's `securityContext.procMount: Unmasked`, which needs the pod's `spec.hostUsers: false` ({host_users}; the baseline Pod Security level allows it from policy version 1.35 in such pods); or run brig with `--proc host` (brig's /proc, read-only: weaker, reported)"
    ))
}

fn user_namespace_check(probe: &PodProbe, sysctls: &Sysctls) -> Check {
    let name = "pod spec: spec.hostUsers";
    let user = probe
        .refused
        .iter()
        .find(|(call, _)| call == UNSHARE_USER)
        .map(|(_, errno)| *errno);
    let own = match &probe.pod_user_namespace {
        Some(map) => format!("false: the pod has a user namespace of its own (uid map {map})"),
        None => "true or unset: the pod shares the node's user namespace".to_string(),
    };
    match user {
        // A filter's EPERM is the seccomp line's.
        Some(errno) if !(probe.filtered && errno == Errno::EPERM) => {
            let limit = match sysctls.max_user_namespaces {
                Some(0) => "user.max_user_namespaces is 0",
                _ => "the node's kernel settings refuse them",
            };
            check(
                name,
                Status::Fail,
                format!("{own}; a user namespace is refused ({errno:?}: {limit})"),
            )
            .fix("no pod field lifts this: on every node allow user namespaces (`sysctl -w user.max_user_namespaces=15000`; on Debian kernels `kernel.unprivileged_userns_clone=1`; on Ubuntu 23.10+ `kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for brig), then give the pod `spec.hostUsers: false`")
        }
        _ if probe.pod_user_namespace.is_some() => check(name, Status::Ok, own),
        _ => check(
            name,
            Status::Warn,
            format!("{own}: brig works, but procMount: Unmasked is accepted only with hostUsers: false, and the pod's uids are the node's"),
        )
        .fix("set `spec.hostUsers: false` (Kubernetes 1.33+, Linux 6.3+ nodes)"),
    }
}

fn cgroup_check(cgroups: &Cgroups) -> Check {
    let name = "pod spec: resources.limits";
    let writable = match &cgroups.placement {
        Placement::Placed { unwritable, .. } => unwritable.is_empty(),
        _ => false,
    };
    if writable {
        return check(
            name,
            Status::Ok,
            "brig may write a cgroup here: --memory, --pids and --cpus hold for each sandbox",
        );
    }
    check(
        name,
        Status::Warn,
        "no cgroup brig may write (/sys/fs/cgroup is read-only in a pod): the container's resources.limits bound brig and all its sandboxes together, and --memory, --pids, --cpus fail (125)",
    )
    .fix("keep `resources.limits` on the container (deploy/kubernetes/hosts.yaml sizes them) and run brig with `--memory max`; limits per sandbox need a writable cgroup v2 delegated to the container, today the runtime's option (containerd's `cgroup_writable`, CRI-O's annotation `io.kubernetes.cri-o.cgroup2-mount-hierarchy-rw`), a securityContext field once KEP-5474 lands; then give brig a subtree of it with `--cgroup-parent`")
}

fn tun_check(tun: &Result<(), String>) -> Check {
    let name = "pod spec: resources.limits (/dev/net/tun)";
    match tun {
        Ok(()) => check(name, Status::Ok, "/dev/net/tun works: --allow-net is possible"),
        Err(why) => check(
            name,
            Status::Warn,
            format!("{why}: --allow-net and --net filtered fail here; --net none works"),
        )
        .fix("request a device plugin's TUN resource in the container's `resources.limits` (a plugin that exposes /dev/net/tun); or keep the sandboxes at `--net none`. A hostPath CharDevice volume also works, but the baseline Pod Security level refuses hostPath"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroups(placement: Placement) -> Cgroups {
        Cgroups {
            layout: Err("n/a".into()),
            placement,
            parent: None,
            rootless_fix: String::new(),
        }
    }

    fn by_name<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks
            .iter()
            .find(|check| check.name == name)
            .unwrap_or_else(|| panic!("no {name}: {checks:?}"))
    }

    const PODMAN_MOUNTINFO: &str = "\
812 700 0:57 / / rw,relatime - overlay overlay rw
813 812 0:60 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
820 813 0:5 /null /proc/kcore ro,nosuid - devtmpfs udev rw
821 813 0:62 / /proc/acpi ro,relatime - tmpfs tmpfs ro
822 813 0:60 /sys /proc/sys ro,relatime - proc proc rw
823 822 0:30 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw
";

    #[test]
    fn a_default_pod_names_every_field() {
        let probe = PodProbe {
            filtered: true,
            refused: vec![(UNSHARE_USER.into(), Errno::EPERM)],
            proc_masks: proc_masks(PODMAN_MOUNTINFO),
            pod_user_namespace: own_user_namespace("         0          0 4294967295\n"),
            apparmor: None,
        };
        assert_eq!(probe.proc_masks, ["/proc/kcore", "/proc/acpi", "/proc/sys"]);
        assert_eq!(probe.pod_user_namespace, None);
        let checks = pod_checks(
            &probe,
            &cgroups(Placement::Nowhere),
            &Err("/dev/net/tun: No such file or directory (ENOENT)".into()),
            &Sysctls::default(),
        );
        let seccomp = by_name(&checks, "pod spec: securityContext.seccompProfile");
        assert_eq!(seccomp.status, Status::Fail);
        assert!(seccomp.detail.contains("unshare(CLONE_NEWUSER): EPERM"));
        assert!(seccomp.fix.as_deref().unwrap().contains("type: Localhost"));
        let proc = by_name(&checks, "pod spec: containers[].securityContext.procMount");
        assert_eq!(proc.status, Status::Fail);
        assert!(proc.detail.contains("/proc/kcore, /proc/acpi, /proc/sys)"));
        let fix = proc.fix.as_deref().unwrap();
        assert!(
            fix.contains("procMount: Unmasked") && fix.contains("set `spec.hostUsers: false` too")
        );
        // The filter's EPERM on the user namespace is the seccomp line's, not this one's.
        let users = by_name(&checks, "pod spec: spec.hostUsers");
        assert_eq!(users.status, Status::Warn);
        let limits = by_name(&checks, "pod spec: resources.limits");
        assert_eq!(limits.status, Status::Warn);
        let tun = by_name(&checks, "pod spec: resources.limits (/dev/net/tun)");
        assert_eq!(tun.status, Status::Warn);
        assert!(tun.detail.starts_with("/dev/net/tun: No such file"));
    }

    #[test]
    fn a_pod_with_the_manifests_settings_passes() {
        let probe = PodProbe {
            filtered: true,
            refused: Vec::new(),
            proc_masks: Vec::new(),
            pod_user_namespace: own_user_namespace("0 3221225472 65536\n"),
            apparmor: None,
        };
        let checks = pod_checks(
            &probe,
            &cgroups(Placement::Nowhere),
            &Ok(()),
            &Sysctls::default(),
        );
        let statuses: Vec<(Status, &str)> = checks
            .iter()
            .map(|check| (check.status, check.name.as_str()))
            .collect();
        assert_eq!(
            statuses,
            [
                (Status::Ok, "pod spec: securityContext.seccompProfile"),
                (
                    Status::Ok,
                    "pod spec: containers[].securityContext.procMount"
                ),
                (Status::Ok, "pod spec: spec.hostUsers"),
                (Status::Warn, "pod spec: resources.limits"),
                (Status::Ok, "pod spec: resources.limits (/dev/net/tun)"),
            ]
        );
        assert!(checks[2].detail.contains("uid map 0 3221225472 65536"));
    }

    #[test]
    fn an_apparmor_profile_that_denies_mount_names_the_field() {
        let probe = PodProbe {
            filtered: true,
            refused: vec![(MOUNT_PRIVATE.into(), Errno::EACCES)],
            pod_user_namespace: Some("0 100000 65536".into()),
            apparmor: Some("cri-containerd.apparmor.d (enforce)".into()),
            ..PodProbe::default()
        };
        let checks = pod_checks(
            &probe,
            &cgroups(Placement::Nowhere),
            &Ok(()),
            &Sysctls::default(),
        );
        let apparmor = by_name(&checks, "pod spec: securityContext.appArmorProfile");
        assert_eq!(apparmor.status, Status::Fail);
        assert_eq!(
            apparmor.detail,
            "AppArmor profile cri-containerd.apparmor.d (enforce) denies what brig builds a jail with (mount(/, MS_REC|MS_PRIVATE): EACCES)"
        );
        assert!(apparmor.fix.as_deref().unwrap().contains("type: Localhost"));
        // The seccomp filter is not blamed for AppArmor's EACCES.
        let seccomp = by_name(&checks, "pod spec: securityContext.seccompProfile");
        assert_eq!(seccomp.status, Status::Ok);
        // Without AppArmor there is no such line.
        let without = PodProbe {
            apparmor: None,
            refused: Vec::new(),
            ..probe
        };
        let checks = pod_checks(
            &without,
            &cgroups(Placement::Nowhere),
            &Ok(()),
            &Sysctls::default(),
        );
        assert!(!checks.iter().any(|check| check.name.contains("appArmor")));
    }

    #[test]
    fn user_namespaces_refused_by_the_node() {
        let probe = PodProbe {
            filtered: false,
            refused: vec![(UNSHARE_USER.into(), Errno::ENOSPC)],
            ..PodProbe::default()
        };
        let sysctls = Sysctls {
            max_user_namespaces: Some(0),
            ..Sysctls::default()
        };
        let checks = pod_checks(&probe, &cgroups(Placement::Nowhere), &Ok(()), &sysctls);
        let users = by_name(&checks, "pod spec: spec.hostUsers");
        assert_eq!(users.status, Status::Fail);
        assert!(
            users
                .detail
                .contains("ENOSPC: user.max_user_namespaces is 0")
        );
        assert!(
            users
                .fix
                .as_deref()
                .unwrap()
                .contains("user.max_user_namespaces=15000")
        );
        // No filter: the seccomp line is fine.
        let seccomp = by_name(&checks, "pod spec: securityContext.seccompProfile");
        assert_eq!(seccomp.status, Status::Ok);
    }
}
