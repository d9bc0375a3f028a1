//! The jail's options: one struct that is both the `brig run` command line and the YAML
//! config schema, so every option has the same name in both places.

use crate::units::{Count, Limit, Size, Span};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetMode {
    /// A private network namespace with only `lo`, up.
    #[default]
    None,
    /// Share the host's network namespace (reported as a warning).
    Host,
    /// A private network namespace whose only way out is brig, which lets through the
    /// connections `--allow-net` allows (implied by `--allow-net`).
    Filtered,
}

/// The jail's /proc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcMode {
    /// A fresh /proc of the jail's own PID namespace.
    #[default]
    Fresh,
    /// brig's own /proc, bound read-only: for hosts that refuse a fresh one (containers
    /// that mask /proc); the jail then sees the processes of brig's PID namespace
    /// (reported as a warning).
    Host,
}

/// How strictly Landlock must be enforced: `best-effort`, `require`, `require=ABI` or `off`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum LandlockMode {
    /// Enforce what the kernel supports and report it.
    #[default]
    BestEffort,
    /// Fail (125) unless the kernel enforces everything brig asks for, or at least this ABI.
    Require(Option<u8>),
    /// No Landlock (reported).
    Off,
}

impl FromStr for LandlockMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "best-effort" => Ok(LandlockMode::BestEffort),
            "require" => Ok(LandlockMode::Require(None)),
            "off" => Ok(LandlockMode::Off),
            _ => match text.strip_prefix("require=").map(str::parse::<u8>) {
                Some(Ok(abi)) if abi >= 1 => Ok(LandlockMode::Require(Some(abi))),
                _ => Err(format!(
                    "'{text}' is not a Landlock mode; use best-effort, require, require=ABI (e.g. require=6) or off"
                )),
            },
        }
    }
}

impl fmt::Display for LandlockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LandlockMode::BestEffort => f.write_str("best-effort"),
            LandlockMode::Require(None) => f.write_str("require"),
            LandlockMode::Require(Some(abi)) => write!(f, "require={abi}"),
            LandlockMode::Off => f.write_str("off"),
        }
    }
}

impl TryFrom<String> for LandlockMode {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<LandlockMode> for String {
    fn from(mode: LandlockMode) -> String {
        mode.to_string()
    }
}

/// The host uids root gives its jails, one of its own for each: `FIRST-LAST`, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum HostUidRange {
    /// Every jail maps to one shared host uid (65534 or `--host-uid`), and its user
    /// namespace is created by brig's own uid: the weaker, older behaviour.
    Off,
    /// Each jail gets a host uid (and the gid of the same number) of its own in
    /// `first..=last`, and its user namespace is created by that uid.
    Range { first: u32, last: u32 },
}

impl FromStr for HostUidRange {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text == "off" {
            return Ok(HostUidRange::Off);
        }
        let usage = "use FIRST-LAST, e.g. 1879048192-1879113727, or off";
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| format!("'{text}' is not a range of host uids; {usage}"))?;
        let number = |part: &str| {
            part.parse::<u32>()
                .map_err(|_| format!("'{part}' in '{text}' is not a uid; {usage}"))
        };
        let (first, last) = (number(first)?, number(last)?);
        if first > last {
            return Err(format!(
                "'{text}': the first uid is above the last; write it as {last}-{first}"
            ));
        }
        if first == 0 || last == u32::MAX {
            return Err(format!(
                "'{text}' holds host root (0) or the invalid uid {}; {usage}",
                u32::MAX
            ));
        }
        let nobody = crate::identity::UNPRIVILEGED_HOST_ID;
        if (first..=last).contains(&nobody) {
            return Err(format!(
                "'{text}' holds {nobody} (nobody), which other programs share; pick uids no user or service has, {usage}"
            ));
        }
        Ok(HostUidRange::Range { first, last })
    }
}

impl fmt::Display for HostUidRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostUidRange::Off => f.write_str("off"),
            HostUidRange::Range { first, last } => write!(f, "{first}-{last}"),
        }
    }
}

impl TryFrom<String> for HostUidRange {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<HostUidRange> for String {
    fn from(range: HostUidRange) -> String {
        range.to_string()
    }
}

#[derive(Args, Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct JailOptions {
    /// Start from a built-in profile: python, node or shell.
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(["python", "node", "shell"]))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,

    /// /proc: `fresh` (the jail's own) or `host` (brig's, read-only: a weaker mode for
    /// containers that refuse a fresh /proc; reported) [default: fresh].
    #[arg(long, value_name = "MODE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc: Option<ProcMode>,

    /// Network: `none` (only the jail's own lo), `filtered` (only what --allow-net
    /// allows, or all but what --deny-net refuses, through brig) or `host` [default: none;
    /// filtered with --allow-net or --deny-net].
    #[arg(long, value_name = "MODE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net: Option<NetMode>,

    /// Let the jail connect to HOST[:PORT], *.DOMAIN[:PORT], IP[:PORT] or CIDR[:PORT]
    /// (IPv6 in brackets; no port: any port); `tcp://RULE:PORT` also lets bytes that are
    /// neither HTTP nor TLS through (refused on ports 80 and 443 otherwise),
    /// `ech://NAME[:PORT]` encrypted ClientHellos with that outer name; repeatable;
    /// implies --net filtered.
    #[arg(long = "allow-net", value_name = "RULE")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_net: Vec<String>,

    /// Refuse what RULE names (the --allow-net spelling, without a scheme), unless an
    /// --allow-net rule names it too, and let everything else out (loopback, private and
    /// link-local addresses and the host's own stay refused); repeatable; implies --net
    /// filtered.
    #[arg(long = "deny-net", value_name = "RULE")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_net: Vec<String>,

    /// Resolve NAME to IP for the jail (repeatable); brig connects to IP even when it is
    /// a private or loopback address, since you named it.
    #[arg(long = "add-host", value_name = "NAME:IP")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_host: Vec<String>,

    /// --net filtered: total bytes the jail may send and receive (e.g. 100M); then every
    /// connection is cut and new ones refused.
    #[arg(long, value_name = "SIZE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_bytes: Option<Size>,

    /// --net filtered: connections open at once; more are refused [default: 256].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_connections: Option<u32>,

    /// --net filtered: a secret the jail may use without seeing it, `NAME=env:VAR` (brig's
    /// own environment) or `NAME=file:PATH`; inside the jail NAME holds a random
    /// placeholder that brig replaces with the value in HTTPS request headers to the hosts
    /// --secret-host entitles (repeatable).
    #[arg(long, value_name = "NAME=env:VAR|file:PATH")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret: Vec<String>,

    /// --net filtered: HOST (and PORT, else any) is entitled to the secret NAME: brig
    /// decrypts the jail's TLS to it with a CA made for this jail, puts the value in and
    /// connects on verifying HOST's real certificate (repeatable).
    #[arg(long = "secret-host", value_name = "NAME=HOST[:PORT]")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_host: Vec<String>,

    /// The secret NAME's placeholder is replaced in request bodies to its hosts too (text,
    /// JSON and form bodies up to 1 MiB; repeatable).
    #[arg(long = "secret-body", value_name = "NAME")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_body: Vec<String>,

    /// A secret's placeholder sent to a host not entitled to it ends that connection
    /// (without it the placeholder goes on unchanged and is reported).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret_strict: bool,

    /// PEM CA certificates brig also trusts for the hosts it decrypts for a secret,
    /// besides the host's roots (an operator's private CA).
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<PathBuf>,

    /// The jail user's name (its /etc/passwd entry: what whoami says) and so its home and workspace,
    /// /home/NAME [default: sandbox]: lowercase letters, digits, '_' and '-', starting with
    /// a letter or '_', at most 32; not root or nobody (E2B's sandboxes: `user`).
    #[arg(long, value_name = "NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Secrets a client of `brig serve` gave with their values (a session's `secrets`):
    /// set by the server after its checks, never read from a command line, a file or the
    /// wire as an option, never serialized.
    #[arg(skip)]
    #[serde(skip)]
    pub given_secrets: Vec<crate::net::secrets::Given>,

    /// User id inside the jail [default: 1000].
    #[arg(long, value_name = "UID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,

    /// Group id inside the jail [default: 1000].
    #[arg(long, value_name = "GID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,

    /// As root: the host uids for jails, FIRST-LAST; each jail gets one of its own (uid and
    /// gid of that number), which also creates its user namespace, so the kernel's per-user
    /// counters (inotify, signals, message queues) are the jail's own. `off`: every jail
    /// maps to 65534 (or --host-uid) with its namespace owned by root, sharing root's
    /// counters (weaker). Rootless brig always maps to your own uid [default:
    /// 1879048192-1879113727].
    #[arg(long, value_name = "FIRST-LAST|off")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_uid_range: Option<HostUidRange>,

    /// As root: one host uid every jail user maps to, in place of --host-uid-range (its
    /// namespace is owned by root, as with `--host-uid-range off`).
    #[arg(long, value_name = "UID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_uid: Option<u32>,

    /// As root: one host gid every jail group maps to, in place of --host-uid-range.
    #[arg(long, value_name = "GID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_gid: Option<u32>,

    /// Hostname inside the jail [default: brig].
    #[arg(long, value_name = "NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,

    /// Use a prepared root filesystem, bound read-only as `/`, instead of the host's /usr.
    #[arg(long, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<PathBuf>,

    /// Bind a host path read-only into the jail (repeatable).
    #[arg(long = "ro-bind", value_name = "SRC[:DST]")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ro_bind: Vec<String>,

    /// Bind a host path read-write into the jail (repeatable).
    #[arg(long, value_name = "SRC[:DST]")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bind: Vec<String>,

    /// Mount a fresh tmpfs at DST, SIZE defaults to --tmpfs-size (repeatable).
    #[arg(long, value_name = "DST[:SIZE]")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tmpfs: Vec<String>,

    /// Size of /tmp, the home directory and /dev/shm [default: 64M].
    #[arg(long, value_name = "SIZE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tmpfs_size: Option<Size>,

    /// Size of the home directory alone [default: --tmpfs-size] (a session's workspace).
    #[arg(long, value_name = "SIZE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home_size: Option<Size>,

    /// Bind this host directory read-only at /work and start there: short for
    /// `--ro-bind DIR:/work --chdir /work` (for outputs, add a writable `--bind`).
    #[arg(short = 'w', long, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,

    /// Working directory inside the jail [default: the home directory, or /work with --workdir].
    #[arg(long, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chdir: Option<PathBuf>,

    /// Set an environment variable inside the jail (repeatable).
    #[arg(long, value_name = "K=V")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,

    /// Pass a variable from brig's environment into the jail, if set (repeatable).
    #[arg(long, value_name = "NAME")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_pass: Vec<String>,

    /// Kill the whole jail after this much wall-clock time (e.g. 5s, 1500ms, 2m).
    #[arg(long, value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<Span>,

    /// Memory limit for the whole jail, a cgroup limit; no swap; `max` for none
    /// [default: 1G].
    #[arg(long, value_name = "SIZE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Limit<Size>>,

    /// Most processes and threads the jail may have at once, brig's init among them, a
    /// cgroup limit of at least 2 (the default is RLIMIT_NPROC where no cgroup is usable);
    /// `max` for none [default: 256].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<Limit<Count>>,

    /// CPU bandwidth for the jail in CPUs, e.g. 0.5 or 2, a cgroup limit [default: unlimited].
    #[arg(long, value_name = "CPUS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,

    /// Run without a line on stderr when this host cannot enforce the default memory
    /// limit (no usable cgroup); the verdict still warns.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quiet_limits: bool,

    /// A delegated cgroup to create the jail's cgroup in (e.g. a unit with Delegate=yes).
    #[arg(long, value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_parent: Option<PathBuf>,

    /// A resource limit, NAME=VALUE or NAME=SOFT:HARD, e.g. nofile=4096 (repeatable)
    /// [default: core=0 nofile=1024 fsize=1G].
    #[arg(long, value_name = "NAME=VALUE")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rlimit: Vec<String>,

    /// CPU-time limit per process (RLIMIT_CPU), e.g. 10s; reported apart from --time-limit.
    #[arg(long, value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<Span>,

    /// Relay at most SIZE bytes of stdout and stderr together, then kill the jail.
    #[arg(long, value_name = "SIZE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_limit: Option<Size>,

    /// Write the verdict, one JSON object, to FILE.
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<PathBuf>,

    /// Write the verdict, one JSON object, to the inherited descriptor N.
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_fd: Option<i32>,

    /// Append one JSON line per run (time, caller, argv, config digest, verdict) to FILE.
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<PathBuf>,
    /// System-call filter: a built-in profile (default, strict), a seccompiler JSON file, or
    /// none [default: default]. See `brig seccomp list`.
    #[arg(long, value_name = "NAME|FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<String>,

    /// Let calls outside the seccomp profile through and list them (the kernel logs them; brig
    /// reads the log as root), to extend a profile for an interpreter.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seccomp_log: bool,

    /// Landlock: best-effort, require, require=ABI or off [default: best-effort].
    #[arg(long, value_name = "MODE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landlock: Option<LandlockMode>,

    /// The program to run and its arguments.
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

impl JailOptions {
    /// Layers `over` on top of `self`: a value set in `over` wins, lists are appended in
    /// order, and a non-empty command replaces the one below. A `net` of `none` or `host`
    /// above replaces the filtered network below with its `allow-net` rules and
    /// `add-host` pins (a client asking a filtering server for no network at all).
    pub fn overlay(mut self, over: JailOptions) -> JailOptions {
        fn append(mut below: Vec<String>, above: Vec<String>) -> Vec<String> {
            below.extend(above);
            below
        }
        if matches!(over.net, Some(NetMode::None | NetMode::Host)) {
            self.allow_net.clear();
            self.deny_net.clear();
            self.add_host.clear();
        }
        JailOptions {
            profile: over.profile.or(self.profile),
            proc: over.proc.or(self.proc),
            net: over.net.or(self.net),
            allow_net: append(self.allow_net, over.allow_net),
            deny_net: append(self.deny_net, over.deny_net),
            add_host: append(self.add_host, over.add_host),
            net_bytes: over.net_bytes.or(self.net_bytes),
            net_connections: over.net_connections.or(self.net_connections),
            secret: append(self.secret, over.secret),
            secret_host: append(self.secret_host, over.secret_host),
            secret_body: append(self.secret_body, over.secret_body),
            secret_strict: self.secret_strict || over.secret_strict,
            upstream_ca: over.upstream_ca.or(self.upstream_ca),
            user: over.user.or(self.user),
            given_secrets: [self.given_secrets, over.given_secrets].concat(),
            uid: over.uid.or(self.uid),
            gid: over.gid.or(self.gid),
            host_uid_range: over.host_uid_range.or(self.host_uid_range),
            host_uid: over.host_uid.or(self.host_uid),
            host_gid: over.host_gid.or(self.host_gid),
            hostname: over.hostname.or(self.hostname),
            rootfs: over.rootfs.or(self.rootfs),
            ro_bind: append(self.ro_bind, over.ro_bind),
            bind: append(self.bind, over.bind),
            tmpfs: append(self.tmpfs, over.tmpfs),
            tmpfs_size: over.tmpfs_size.or(self.tmpfs_size),
            home_size: over.home_size.or(self.home_size),
            workdir: over.workdir.or(self.workdir),
            chdir: over.chdir.or(self.chdir),
            env: append(self.env, over.env),
            env_pass: append(self.env_pass, over.env_pass),
            time_limit: over.time_limit.or(self.time_limit),
            memory: over.memory.or(self.memory),
            pids: over.pids.or(self.pids),
            cpus: over.cpus.or(self.cpus),
            quiet_limits: self.quiet_limits || over.quiet_limits,
            cgroup_parent: over.cgroup_parent.or(self.cgroup_parent),
            rlimit: append(self.rlimit, over.rlimit),
            cpu_time: over.cpu_time.or(self.cpu_time),
            output_limit: over.output_limit.or(self.output_limit),
            report: over.report.or(self.report),
            report_fd: over.report_fd.or(self.report_fd),
            audit_log: over.audit_log.or(self.audit_log),
            seccomp: over.seccomp.or(self.seccomp),
            seccomp_log: self.seccomp_log || over.seccomp_log,
            landlock: over.landlock.or(self.landlock),
            command: if over.command.is_empty() {
                self.command
            } else {
                over.command
            },
        }
    }
}
