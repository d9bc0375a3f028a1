//! What a client of `brig serve` may ask for. Its options are layered on the server's
//! defaults; those that would loosen isolation are refused unless the server was started
//! allowing them (`--client-may`, `--allow-bind-under`), and those that reach into the
//! server's own host (its environment, cgroups, host ids, files) are always refused.
//! Limits may only be tightened: the jail a client gets is checked against the pool's.

use crate::error::{Error, Result};
use crate::options::{JailOptions, LandlockMode, NetMode};
use crate::plan::Plan;
use crate::units::Span;
use clap::ValueEnum;
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Loosening {
    /// `--net host`.
    NetHost,
    /// `--seccomp none`.
    SeccompNone,
    /// `--landlock off`.
    LandlockOff,
    /// `--seccomp-log` (calls outside the profile allowed, and logged).
    SeccompLog,
    /// `--allow-net` and `--add-host` (a network the server's default does not give).
    AllowNet,
    /// `--proc host`.
    ProcHost,
}

/// Refuses the first option of `client` the server does not allow, naming it and the
/// server flag that would.
pub fn check_client(client: &JailOptions, may: &[Loosening], bind_under: &[PathBuf]) -> Result<()> {
    let refuse = |what: &str, fix: &str| {
        Err(Error::input(format!(
            "{what}: this server does not let clients ask for it; {fix}"
        )))
    };
    if client.net == Some(NetMode::Host) && !may.contains(&Loosening::NetHost) {
        return refuse(
            "--net host",
            "start it with --client-may net-host to allow it",
        );
    }
    if client.landlock == Some(LandlockMode::Off) && !may.contains(&Loosening::LandlockOff) {
        return refuse(
            "--landlock off",
            "start it with --client-may landlock-off to allow it",
        );
    }
    if client.seccomp_log && !may.contains(&Loosening::SeccompLog) {
        return refuse(
            "--seccomp-log",
            "start it with --client-may seccomp-log to allow it",
        );
    }
    let asks_network = !client.allow_net.is_empty()
        || !client.add_host.is_empty()
        || client.net == Some(NetMode::Filtered);
    if asks_network && !may.contains(&Loosening::AllowNet) {
        return refuse(
            "--allow-net",
            "start it with --client-may allow-net to allow it",
        );
    }
    if client.proc == Some(crate::options::ProcMode::Host) && !may.contains(&Loosening::ProcHost) {
        return refuse(
            "--proc host",
            "start it with --client-may proc-host to allow it",
        );
    }
    match client.seccomp.as_deref() {
        Some("none") if !may.contains(&Loosening::SeccompNone) => {
            return refuse(
                "--seccomp none",
                "start it with --client-may seccomp-none to allow it",
            );
        }
        Some(name) if name != "none" && crate::seccomp::builtin(name).is_none() => {
            return refuse(
                &format!("--seccomp {name}"),
                "name a built-in profile (`brig seccomp list`); a profile file is the server's to choose",
            );
        }
        _ => {}
    }
    let host_only = [
        (client.cgroup_parent.is_some(), "--cgroup-parent"),
        (client.host_uid_range.is_some(), "--host-uid-range"),
        (client.host_uid.is_some(), "--host-uid"),
        (client.host_gid.is_some(), "--host-gid"),
        (!client.env_pass.is_empty(), "--env-pass"),
        (
            client.profile.is_some(),
            "--profile (expand it on the client)",
        ),
    ];
    if let Some((_, flag)) = host_only.iter().find(|(given, _)| *given) {
        return refuse(flag, "it belongs to the server's own configuration");
    }
    let sources = client
        .ro_bind
        .iter()
        .chain(&client.bind)
        .map(|spec| spec.split(':').next().unwrap_or_default().to_string())
        .chain(client.workdir.iter().map(|dir| dir.display().to_string()))
        .chain(client.rootfs.iter().map(|dir| dir.display().to_string()));
    for source in sources {
        if !under_any(Path::new(&source), bind_under) {
            let allowed = if bind_under.is_empty() {
                "none is allowed; start the server with --allow-bind-under DIR".to_string()
            } else {
                let dirs: Vec<String> = bind_under
                    .iter()
                    .map(|dir| dir.display().to_string())
                    .collect();
                format!("bind only under {}", dirs.join(", "))
            };
            return Err(Error::input(format!(
                "bind of {source}: outside what this server lets clients bind; {allowed}"
            )));
        }
    }
    Ok(())
}

/// Where a client's options came from, when not from its command line or call: option
/// name (`time-limit`) to `profile node`, `config FILE`, `workspace_size`.
pub type Origins = std::collections::BTreeMap<String, String>;

/// The refusal of a limit looser than the server's: where the client's value came from,
/// and what each side can change (the client asks for less, the operator raises the
/// server's option).
pub fn looser_than_server(flag: &str, theirs: &str, ours: &str, origins: &Origins) -> Error {
    let option = flag.split(' ').next().unwrap_or(flag);
    let (what, client_fix) = match origins.get(option.trim_start_matches("--")) {
        // A profile or a config file the client used.
        Some(origin) if origin.contains(' ') => (
            format!("{flag} {theirs} (from {origin})"),
            format!("pass {flag} {ours} or less to override it"),
        ),
        // A field of the request that sets the option.
        Some(field) => (
            format!("{field} {theirs} (the jail's {flag})"),
            format!("ask for a {field} of at most {ours}"),
        ),
        None => (
            format!("{flag} {theirs}"),
            format!("ask for at most {ours}"),
        ),
    };
    Error::input(format!(
        "{what}: looser than this server's {ours}; the client may {client_fix}, or the server's operator raise its {option}"
    ))
}

/// The jail a client's options give, against the pool's (the server's defaults): no
/// limit looser, no weaker seccomp or Landlock mode. Loosenings the server allowed with
/// --client-may were let through by [`check_client`] and are not looked at again.
pub fn check_jail(jail: &Plan, pool: &Plan, may: &[Loosening], origins: &Origins) -> Result<()> {
    let looser = |what: &str, theirs: String, ours: String| {
        Err(looser_than_server(what, &theirs, &ours, origins))
    };
    let shown = |limit: Option<String>| limit.unwrap_or_else(|| "max".into());
    let (mine, server) = (&jail.limits, &pool.limits);
    if exceeds(
        mine.cgroup.memory.map(|size| size.0),
        server.cgroup.memory.map(|size| size.0),
    ) {
        return looser(
            "--memory",
            shown(mine.cgroup.memory.map(|s| s.to_string())),
            shown(server.cgroup.memory.map(|s| s.to_string())),
        );
    }
    if exceeds(mine.cgroup.pids, server.cgroup.pids) {
        return looser(
            "--pids",
            shown(mine.cgroup.pids.map(|n| n.to_string())),
            shown(server.cgroup.pids.map(|n| n.to_string())),
        );
    }
    if exceeds_f64(mine.cgroup.cpus, server.cgroup.cpus) {
        return looser(
            "--cpus",
            shown(mine.cgroup.cpus.map(|n| n.to_string())),
            shown(server.cgroup.cpus.map(|n| n.to_string())),
        );
    }
    let millis = |span: Option<Span>| span.map(|span| span.0.as_millis() as u64);
    if exceeds(millis(jail.time_limit), millis(pool.time_limit)) {
        return looser(
            "--time-limit",
            shown(jail.time_limit.map(|s| s.to_string())),
            shown(pool.time_limit.map(|s| s.to_string())),
        );
    }
    if exceeds(millis(mine.cpu_time), millis(server.cpu_time)) {
        return looser(
            "--cpu-time",
            shown(mine.cpu_time.map(|s| s.to_string())),
            shown(server.cpu_time.map(|s| s.to_string())),
        );
    }
    if exceeds(
        mine.output_limit.map(|s| s.0),
        server.output_limit.map(|s| s.0),
    ) {
        return looser(
            "--output-limit",
            shown(mine.output_limit.map(|s| s.to_string())),
            shown(server.output_limit.map(|s| s.to_string())),
        );
    }
    if mine.tmpfs_size.0 > server.tmpfs_size.0 {
        return looser(
            "--tmpfs-size",
            mine.tmpfs_size.to_string(),
            server.tmpfs_size.to_string(),
        );
    }
    if mine.home_size.0 > server.home_size.0 {
        return looser(
            "--home-size",
            mine.home_size.to_string(),
            server.home_size.to_string(),
        );
    }
    for rlimit in &mine.rlimits {
        let ours = server
            .rlimits
            .iter()
            .find(|theirs| theirs.name == rlimit.name);
        if let Some(ours) = ours
            && (exceeds(rlimit.hard, ours.hard) || exceeds(rlimit.soft, ours.hard))
        {
            return looser(
                &format!("--rlimit {}", rlimit.name),
                shown(rlimit.hard.map(|n| n.to_string())),
                shown(ours.hard.map(|n| n.to_string())),
            );
        }
    }
    let tighter_seccomp =
        jail.seccomp.profile == pool.seccomp.profile || jail.seccomp.profile == "strict";
    if jail.seccomp.mode == crate::seccomp::Mode::Enforce && !tighter_seccomp {
        return looser(
            "--seccomp",
            jail.seccomp.profile.clone(),
            pool.seccomp.profile.clone(),
        );
    }
    let strength = |mode: LandlockMode| match mode {
        LandlockMode::Off => 0,
        LandlockMode::BestEffort => 1,
        LandlockMode::Require(_) => 2,
    };
    if jail.landlock.mode != LandlockMode::Off
        && strength(jail.landlock.mode) < strength(pool.landlock.mode)
    {
        return looser(
            "--landlock",
            jail.landlock.mode.to_string(),
            pool.landlock.mode.to_string(),
        );
    }
    let _ = may;
    Ok(())
}

/// `mine` asks for more than `ours` (None: no limit).
fn exceeds(mine: Option<u64>, ours: Option<u64>) -> bool {
    match (mine, ours) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(mine), Some(ours)) => mine > ours,
    }
}

fn exceeds_f64(mine: Option<f64>, ours: Option<f64>) -> bool {
    match (mine, ours) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(mine), Some(ours)) => mine > ours,
    }
}

/// `path` is absolute, has no `..`, and lies under one of `dirs` (lexically; the jail's
/// own mount checks then refuse symlinks on the way).
fn under_any(path: &Path, dirs: &[PathBuf]) -> bool {
    path.is_absolute()
        && !path.components().any(|part| part == Component::ParentDir)
        && dirs.iter().any(|dir| path.starts_with(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(yaml: &str) -> JailOptions {
        crate::config::parse(yaml, "client").unwrap()
    }

    #[test]
    fn loosening_needs_the_server_s_consent() {
        let none: &[Loosening] = &[];
        for (yaml, needle) in [
            ("net: host", "--client-may net-host"),
            ("landlock: 'off'", "--client-may landlock-off"),
            ("seccomp: none", "--client-may seccomp-none"),
            ("seccomp: /etc/mine.json", "built-in profile"),
            ("cgroup-parent: /x", "--cgroup-parent"),
            ("host-uid: 0", "--host-uid"),
            ("host-uid-range: 'off'", "--host-uid-range"),
            ("env-pass: [SECRET]", "--env-pass"),
            ("ro-bind: [/etc]", "--allow-bind-under"),
            ("seccomp-log: true", "--client-may seccomp-log"),
            ("allow-net: [pypi.org]", "--client-may allow-net"),
            ("proc: host", "--client-may proc-host"),
        ] {
            let err = check_client(&client(yaml), none, &[])
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{yaml}: {err}");
        }
        assert!(check_client(&client("net: host"), &[Loosening::NetHost], &[]).is_ok());
        assert!(
            check_client(
                &client("seccomp: strict\nenv: [A=1]\ntime-limit: 1s"),
                none,
                &[]
            )
            .is_ok()
        );
    }

    #[test]
    fn binds_must_lie_under_an_allowed_directory() {
        let under = [PathBuf::from("/srv/tasks")];
        assert!(check_client(&client("ro-bind: ['/srv/tasks/1:/task']"), &[], &under).is_ok());
        for yaml in [
            "ro-bind: ['/srv/tasks/../secrets:/x']",
            "bind: ['/srv/tasksx:/x']",
            "workdir: /etc",
            "rootfs: /",
        ] {
            let err = check_client(&client(yaml), &[], &under)
                .unwrap_err()
                .to_string();
            assert!(err.contains("bind only under /srv/tasks"), "{yaml}: {err}");
        }
    }
}
