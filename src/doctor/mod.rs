//! `brig doctor`: probes this host for everything a jail needs and says, one line each,
//! what works, what does not, and the fix. The probes are real and use brig's own code: a
//! default jail is assembled by `Jail::assemble` (every namespace, the id maps, the cgroup
//! namespace, the mount tree with a fresh /proc, pivot_root) in a forked child; the default
//! seccomp profile is installed in a forked child and must deny a call; the cgroup
//! placement is decided by the code `brig run` uses; and brig's own binary runs a default
//! jail end to end. As root, the same probes also run as uid 65534 to show what an
//! unprivileged user gets.
//!
//! `probes.rs` gathers the data, `checks.rs` judges it; this module runs them and prints.
//!
//! Exit status: 0 when no check failed, i.e. a default jail can run here; 1 otherwise.

mod checks;
mod pod;
mod probes;

pub use checks::container_settings;
pub use probes::in_container;

use checks::Who;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but weaker than it could be, or only for other users.
    Warn,
    /// A default jail cannot run here (for the user running doctor), or what was asked
    /// for (`--cgroup-parent`) is unusable.
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    pub fix: Option<String>,
}

fn check(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// `brig doctor`'s options.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Print the checks as one JSON object instead of one line each.
    #[arg(long)]
    pub json: bool,

    /// Also check this delegated cgroup, as `brig run --cgroup-parent PATH` would use it.
    #[arg(long, value_name = "PATH")]
    pub cgroup_parent: Option<PathBuf>,

    /// Skip the end-to-end runs of `brig run` (only probe the kernel).
    #[arg(long)]
    pub no_run: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    /// No check failed: a default jail can run here.
    ok: bool,
    /// brig ran as a non-root user.
    rootless: bool,
    checks: &'a [Check],
}

pub fn run(args: &DoctorArgs) -> i32 {
    let checks = checks(args);
    let ok = checks.iter().all(|check| check.status != Status::Fail);
    if args.json {
        let report = Report {
            schema: "brig-doctor/1",
            ok,
            rootless: !nix::unistd::geteuid().is_root(),
            checks: &checks,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serializes")
        );
    } else {
        for check in &checks {
            println!("{}", line(check));
        }
        println!(
            "{}",
            if ok {
                "brig can run a default jail here."
            } else {
                "brig cannot run a default jail here: fix the FAIL lines above."
            }
        );
    }
    if ok { 0 } else { 1 }
}

/// `ok    name: detail`, `warn  ...`, `FAIL  name: detail — fix: ...`.
fn line(check: &Check) -> String {
    let status = match check.status {
        Status::Ok => "ok",
        Status::Warn => "warn",
        Status::Fail => "FAIL",
    };
    let mut text = format!("{status:<5} {}: {}", check.name, check.detail);
    if let Some(fix) = &check.fix {
        text.push_str(&format!(" — fix: {fix}"));
    }
    text
}

fn checks(args: &DoctorArgs) -> Vec<Check> {
    let host = probes::Host::read();
    let sysctls = probes::Sysctls::read();
    let who = Who::current(&host);
    let container = host.container.as_deref();
    let mut checks = vec![checks::kernel(&host)];
    checks.extend(checks::sysctl_checks(&sysctls, host.root()));
    checks.extend(checks::namespace_checks(
        &probes::assembly(),
        &who,
        &sysctls,
        container,
    ));
    let cgroups = probes::cgroups(args.cgroup_parent.as_deref());
    checks.extend(checks::cgroup_checks(&cgroups, &who));
    checks.push(checks::landlock_check(probes::landlock_abi()));
    let tun = probes::tun(false);
    checks.push(checks::tun_check(&tun, &who));
    let host_uids = host.root().then(probes::host_uids).flatten();
    checks.push(checks::host_identity_check(host_uids.as_ref(), &who));
    checks.extend(checks::seccomp_checks(&probes::seccomp()));
    if !args.no_run {
        checks.push(checks::end_to_end(&probes::end_to_end(None), &who));
    }
    if pod::in_pod() {
        checks.extend(pod::pod_checks(&pod::probe(), &cgroups, &tun, &sysctls));
    }
    if host.root() {
        // What an unprivileged user would get: the same probes as uid 65534. Failures
        // there are warnings, since root's own jails work.
        let nobody = Who::nobody();
        match probes::as_nobody() {
            Ok(probe) => {
                checks.extend(checks::namespace_checks(
                    &probe.assembly,
                    &nobody,
                    &sysctls,
                    container,
                ));
                checks.push(checks::rootless_cgroup_check(
                    &probe.placement,
                    &cgroups.rootless_fix,
                ));
                checks.push(checks::tun_check(&probes::tun(true), &nobody));
            }
            Err(why) => checks.push(checks::nobody_unprobed(&why)),
        }
        if !args.no_run {
            let run = probes::end_to_end(Some(crate::identity::UNPRIVILEGED_HOST_ID));
            checks.push(checks::end_to_end(&run, &nobody));
        }
    }
    checks
}
