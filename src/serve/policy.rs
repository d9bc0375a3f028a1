//! What a client of `brig serve` may ask for. Its options are layered on the server's
//! defaults; those that would loosen isolation are refused unless the server was started
//! allowing them (`--client-may`, `--allow-bind-under`), and those that reach into the
//! server's own host (its environment, cgroups, host ids, files) are always refused.

use crate::error::{Error, Result};
use crate::options::{JailOptions, LandlockMode, NetMode};
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
            ("env-pass: [SECRET]", "--env-pass"),
            ("ro-bind: [/etc]", "--allow-bind-under"),
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
