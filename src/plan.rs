//! The validated, fully resolved description of one jail. Everything the command line and
//! config say is checked here, before any namespace exists; the child only executes it.
//! Each subsystem plans its own part (`identity`, `namespaces`, `mount`, `limits`,
//! `environment`, `seccomp`, `landlock`); this module only assembles them.

use crate::environment;
use crate::error::{Error, Result};
use crate::identity::{self, Identity};
use crate::landlock::{self, LandlockPlan};
use crate::limits::{self, Limits};
use crate::mount::{self, MountOp, Rootfs};
use crate::namespaces::{self, Namespaces};
use crate::net::policy::Policy;
use crate::net::secrets::{self, Secrets};
use crate::options::{JailOptions, LandlockMode, NetMode, ProcMode};
use crate::seccomp::{self, SeccompPlan};
use crate::units::Span;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Plan {
    pub command: Vec<String>,
    pub identity: Identity,
    pub namespaces: Namespaces,
    pub net: NetMode,
    /// `--net filtered`: what the jail may reach through brig.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Policy>,
    pub hostname: String,
    pub time_limit: Option<Span>,
    pub limits: Limits,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportTarget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<PathBuf>,
    pub chdir: PathBuf,
    /// `NAME=value`, the program's whole environment.
    pub env: Vec<String>,
    pub mounts: Vec<MountOp>,
    /// `--rootfs`: the prepared root and the digest `brig rootfs build` recorded in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<Rootfs>,
    /// The system-call filter, compiled here, installed right before execve.
    pub seccomp: SeccompPlan,
    /// The Landlock rules, derived from `mounts`.
    pub landlock: LandlockPlan,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The warnings that mean the program will likely fail or reach nothing where the
    /// caller expects it to (a `--bind` it cannot write, a loopback `--allow-net` rule):
    /// also printed on stderr, once, before the program starts. Part of `warnings`.
    #[serde(skip)]
    pub run_warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReportTarget {
    File(PathBuf),
    Fd(i32),
}

impl Plan {
    pub fn resolve(options: JailOptions) -> Result<Plan> {
        let command = options.command.clone();
        if command.is_empty() {
            return Err(Error::input(
                "no program to run: give one after the options, e.g. `brig run -- python3 main.py`",
            ));
        }
        let identity = identity::resolve(&options)?;
        let (net, network) = resolve_network(&options)?;
        let hostname = namespaces::resolve_hostname(options.hostname.as_deref())?;
        let tmpfs_size = options.tmpfs_size.unwrap_or(mount::DEFAULT_TMPFS_SIZE);
        mount::check_tmpfs_size("--tmpfs-size", tmpfs_size)?;
        let home_size = options.home_size.unwrap_or(tmpfs_size);
        mount::check_tmpfs_size("--home-size", home_size)?;
        if let Some(limit) = options.time_limit
            && limit.0.is_zero()
        {
            return Err(Error::input("--time-limit: must be longer than 0; e.g. 5s"));
        }

        let (mounts, rootfs) = mount::plan(
            &options,
            &identity,
            &hostname,
            (tmpfs_size, home_size),
            network.as_ref(),
        )?;
        let limits = limits::resolve(&options, tmpfs_size, home_size)?;
        let report = resolve_report(&options)?;
        let chdir = match &options.chdir {
            Some(dir) => mount::jail_path("--chdir", &dir.to_string_lossy())?,
            None if options.workdir.is_some() => PathBuf::from(mount::WORKDIR),
            None => identity.home.clone(),
        };
        let env = with_secrets(environment::resolve(&options, &identity)?, network.as_ref());
        let mut run_warnings = mount::unwritable_binds(&mounts, &identity.host);
        run_warnings.extend(network.iter().flat_map(Policy::loopback_warnings));
        let mut warnings = run_warnings.clone();
        warnings.extend(identity.warning.clone());
        warnings.extend(rootfs.as_ref().and_then(mount::rootfs_warning));
        if let Some(unenforced) = limits.not_enforced.describe() {
            warnings.push(format!(
                "no usable cgroup here: {unenforced} is not enforced (see `brig doctor`)"
            ));
        }
        if options.proc == Some(ProcMode::Host) {
            warnings.push("--proc host: the jail sees brig's own /proc, read-only: the processes of brig's PID namespace, not only its own; and where brig's /proc/sys is read-only (a container's), the jail's user namespace keeps no limits of its own on inotify and namespaces".into());
        }
        if net == NetMode::Host {
            warnings.push("--net host: the jail shares the host's network namespace".into());
        }
        let seccomp = seccomp::resolve(options.seccomp.as_deref(), options.seccomp_log)?;
        match seccomp.mode {
            seccomp::Mode::Off => warnings.push("--seccomp none: no system-call filter".into()),
            seccomp::Mode::Log => warnings.push(format!(
                "--seccomp-log: calls outside the profile {} are allowed and logged, not denied",
                seccomp.profile
            )),
            seccomp::Mode::Enforce => {}
        }
        let landlock = landlock::plan(options.landlock.unwrap_or_default(), &mounts)?;
        if landlock.mode == LandlockMode::Off {
            warnings.push("--landlock off: no Landlock wall around the files".into());
        } else if landlock.abi == 0 {
            warnings.push(match landlock::Unavailable::here() {
                Some(missing) => format!(
                    "Landlock is {}: only the mounts guard the files; {}",
                    missing.reason(),
                    missing.fix()
                ),
                None => {
                    "Landlock: this kernel does not have it; only the mounts guard the files".into()
                }
            });
        } else if landlock.abi < landlock::FULL_ABI {
            warnings.push(format!(
                "Landlock ABI {}: files only; scoping of signals and abstract sockets needs ABI {}",
                landlock.abi,
                landlock::FULL_ABI
            ));
        }
        let namespaces = Namespaces::plan(net);
        let plan = Plan {
            command,
            identity,
            namespaces,
            net,
            network,
            hostname,
            time_limit: options.time_limit,
            limits,
            report,
            audit_log: options.audit_log.clone(),
            chdir,
            env,
            mounts,
            rootfs,
            seccomp,
            landlock,
            warnings,
            run_warnings,
        };
        plan.check_strings()?;
        Ok(plan)
    }

    /// The jail's secrets (`--secret`, or a session's), when its network has any.
    pub fn secrets(&self) -> Option<&crate::net::secrets::Secrets> {
        self.network.as_ref()?.secrets.as_deref()
    }

    /// Every string ends up as a C string in the child; catch NUL bytes here.
    fn check_strings(&self) -> Result<()> {
        let with_nul = |what: &str, text: &str| {
            if text.contains('\0') {
                Err(Error::input(format!(
                    "{what}: contains a NUL byte; remove it"
                )))
            } else {
                Ok(())
            }
        };
        for arg in &self.command {
            with_nul("program argument", arg)?;
        }
        for var in &self.env {
            with_nul("--env", var)?;
        }
        with_nul("--hostname", &self.hostname)
    }
}

/// A program's environment with the jail's secrets' placeholders and the CA variables,
/// which win over `--env` of the same name (every program of a jail: a run's, a
/// session's commands and interpreters, a pooled run's).
pub fn with_secrets(mut env: Vec<String>, network: Option<&Policy>) -> Vec<String> {
    if let Some(secrets) = network.and_then(|policy| policy.secrets.as_ref()) {
        let ours = secrets.environment();
        env.retain(|var| {
            let name = var.split('=').next().unwrap_or_default();
            !ours.iter().any(|mine| mine.split('=').next() == Some(name))
        });
        env.extend(ours);
    }
    env
}

/// The network mode (`--allow-net` implies `filtered`) and, for `filtered`, the policy.
fn resolve_network(options: &JailOptions) -> Result<(NetMode, Option<Policy>)> {
    let filtering_options = [
        (!options.allow_net.is_empty(), "--allow-net"),
        (!options.deny_net.is_empty(), "--deny-net"),
        (!options.add_host.is_empty(), "--add-host"),
        (options.net_bytes.is_some(), "--net-bytes"),
        (options.net_connections.is_some(), "--net-connections"),
        (!options.secret.is_empty(), "--secret"),
        (!options.secret_host.is_empty(), "--secret-host"),
        (!options.secret_body.is_empty(), "--secret-body"),
        (options.secret_strict, "--secret-strict"),
        (options.upstream_ca.is_some(), "--upstream-ca"),
        (!options.given_secrets.is_empty(), "secrets"),
    ];
    let net = match options.net {
        Some(net) => net,
        None if options.allow_net.is_empty() && options.deny_net.is_empty() => NetMode::None,
        None => NetMode::Filtered,
    };
    if net != NetMode::Filtered {
        if let Some((_, flag)) = filtering_options.iter().find(|(given, _)| *given) {
            let given = match flag {
                &"--allow-net" => format!("--allow-net {}", options.allow_net[0]),
                &"--deny-net" => format!("--deny-net {}", options.deny_net[0]),
                &"--add-host" => format!("--add-host {}", options.add_host[0]),
                other => other.to_string(),
            };
            let mode = if net == NetMode::Host { "host" } else { "none" };
            return Err(Error::input(format!(
                "{given}: only with --net filtered, not --net {mode}; drop --net {mode} (--allow-net implies filtered)"
            )));
        }
        return Ok((net, None));
    }
    let mut policy = Policy::plan(
        &options.allow_net,
        &options.add_host,
        options.net_bytes,
        options.net_connections,
    )?
    .deny(&options.deny_net)?;
    policy.secrets = Secrets::plan(&secrets::Asked {
        secret: &options.secret,
        secret_host: &options.secret_host,
        upstream_ca: options.upstream_ca.as_deref(),
        strict: options.secret_strict,
        secret_body: &options.secret_body,
        given: &options.given_secrets,
    })?
    .map(Arc::new);
    if let Some(secrets) = &policy.secrets {
        for secret in &secrets.secrets {
            for (host, port) in &secret.hosts {
                if !policy.name_allowed(host, port.unwrap_or(443)) {
                    let port = port.unwrap_or(443);
                    let name = &secret.name;
                    let given = options
                        .given_secrets
                        .iter()
                        .any(|given| &given.name == name);
                    return Err(Error::input(if given {
                        format!(
                            "secrets ({name}): its host {host} is not allowed; add {host}:{port} to the session's allow-net"
                        )
                    } else {
                        format!(
                            "--secret-host {name}={host}: {host} is not allowed; add --allow-net {host}:{port}"
                        )
                    }));
                }
            }
        }
    }
    Ok((net, Some(policy)))
}

fn resolve_report(options: &JailOptions) -> Result<Option<ReportTarget>> {
    match (&options.report, options.report_fd) {
        (Some(_), Some(_)) => Err(Error::input("--report and --report-fd: choose one of them")),
        (Some(path), None) => Ok(Some(ReportTarget::File(path.clone()))),
        (None, Some(fd)) if fd < 0 || !crate::sys::is_fd_open(fd) => Err(Error::input(format!(
            "--report-fd {fd}: descriptor is not open; open it when starting brig, e.g. `3>verdict.json`"
        ))),
        (None, Some(fd)) => Ok(Some(ReportTarget::Fd(fd))),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Size;
    use std::path::Path;

    fn options(yaml: &str) -> JailOptions {
        crate::config::parse(yaml, "test").unwrap()
    }

    #[test]
    fn default_plan_is_secure() {
        let plan = Plan::resolve(options("command: [true]")).unwrap();
        assert_eq!(plan.identity.uid, 1000);
        assert!(
            plan.identity
                .host
                .fixed()
                .is_none_or(|(uid, gid)| uid != 0 && gid != 0)
        );
        assert!(plan.namespaces.net && plan.namespaces.user && plan.namespaces.pid);
        assert!(plan.env.iter().all(|v| !v.starts_with("SECRET")));
        assert!(plan.mounts.iter().any(|m| m.dst() == Path::new("/tmp")));
    }

    #[test]
    fn user_tmpfs_replaces_default_tmp() {
        let plan = Plan::resolve(options("command: [true]\ntmpfs: [/tmp:1G]")).unwrap();
        let tmp: Vec<_> = plan
            .mounts
            .iter()
            .filter(|m| m.dst() == Path::new("/tmp"))
            .collect();
        assert_eq!(tmp.len(), 1);
        assert!(matches!(tmp[0], MountOp::Tmpfs { size: Size(s), .. } if *s == 1 << 30));
    }

    #[test]
    fn bad_inputs_name_the_field() {
        let cases = [
            (
                "command: [true]\nbind: [/nonexistent-brig-src:/x]",
                "--bind",
            ),
            ("command: [true]\nro-bind: [/usr:relative]", "relative"),
            ("command: [true]\ntmpfs: [/x:0]", "too small"),
            ("command: [true]\nhostname: 'bad name'", "--hostname"),
            ("command: [true]\nenv: [NOEQUALS]", "NAME=VALUE"),
            ("command: [true]\ntime-limit: 0s", "--time-limit"),
            ("uid: 5", "no program"),
        ];
        for (yaml, needle) in cases {
            let err = Plan::resolve(options(yaml)).unwrap_err();
            assert!(err.message().contains(needle), "{yaml}: {}", err.message());
        }
    }
}
