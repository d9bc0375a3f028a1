//! The verdict: one JSON object that says what happened to the program, with enough for
//! an online judge or an agent platform to decide everything from it alone. Its schema is
//! versioned (`schema`) and documented in the README and brig(1).

use crate::cgroup::Version;
use crate::error::{Context, Error, ErrorKind, Result, Stage};
use crate::jail::outcome::{Counted, Decision};
use crate::jail::{Outcome, RunReport};
use crate::plan::Plan;
use crate::rlimits::Rlimit;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::fd::{BorrowedFd, RawFd};
use std::path::{Path, PathBuf};

pub const SCHEMA: &str = "brig-verdict/1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    NonzeroExit,
    Signaled,
    Timeout,
    CpuTime,
    Oom,
    OutputLimit,
    /// `--net-bytes` or `--net-connections` was reached (brig cut or refused connections);
    /// the program ran to its end, and `exit_code` is its status.
    NetLimit,
    /// The seccomp profile killed the program.
    Seccomp,
    SetupError,
}

/// Read back (`Deserialize`, e.g. from a server's reply) it is the same verdict: the
/// names brig writes as constants (the schema, the namespaces, ...) must be ones it
/// writes, so a verdict of another schema is refused, not misread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    #[serde(deserialize_with = "known::schema")]
    pub schema: known::Name,
    pub status: Status,
    /// brig's own exit status for this run.
    pub brig_exit_code: i32,
    /// The program's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the program, when one did.
    pub signal: Option<i32>,
    pub wall_ms: u64,
    pub cpu_user_ms: u64,
    pub cpu_sys_ms: u64,
    pub max_rss_kib: u64,
    pub memory_peak_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
    pub pids_peak: Option<u64>,
    /// Counted only with --output-limit (otherwise the program writes to brig's fds directly).
    pub stdout_bytes: Option<u64>,
    pub stderr_bytes: Option<u64>,
    pub output_truncated: bool,
    /// `brig serve --warm-python`: the program ran in an interpreter started before the
    /// request; wall and CPU times are the request's own.
    pub warm: bool,
    pub limits: Option<Limits>,
    pub protections: Option<Protections>,
    pub warnings: Vec<String>,
    pub error: Option<String>,
    /// For `setup_error`: whose fault (`bad_input`, `host_lacks`, `setup_failed`,
    /// `exec_failed`, `busy`, `not_found`).
    pub error_kind: Option<ErrorKind>,
    /// For `setup_error`: the step that failed (`cgroup`, `namespaces`, `id_maps`,
    /// `mounts`, `landlock`, `seccomp`, `exec`, ...), when it is known.
    pub error_stage: Option<Stage>,
    /// With `--net filtered`: the rules, every destination the jail tried (allowed or
    /// refused, and why), the names it looked up, what was dropped, and the bytes.
    pub network: Option<crate::net::record::NetworkRecord>,
    /// A default limit this host could not enforce, and how to get it; null with
    /// `--quiet-limits` or `--memory max`. brig prints it on stderr (`brig: ...`).
    pub unenforced: Option<String>,
    /// Why brig or the kernel ended the run (a limit, a seccomp kill, a program that
    /// could not run), as brig prints it on stderr (`brig: ...`) on every path: `brig
    /// run`, `brig run --server`, `brig session exec`; null when the program ended by
    /// itself.
    pub explanation: Option<String>,
    /// A session's exec: its session's id, and its cell's language and context or its
    /// command's pid; absent on every other path (and then the JSON is as before).
    #[serde(flatten)]
    pub in_session: Option<SessionExec>,
}

/// The verdict's fields of an exec in a session (`session_exec`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionExec {
    pub session: String,
    /// A code cell's language and context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<crate::serve::protocol::Language>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// A command's pid in the jail: present for a command, null when the jail never said
    /// it (it could not be started); absent for a cell.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub pid: Option<Option<u32>>,
}

/// A field that is there, null or not (absent is `None`, by its default).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(deserializer).map(Some)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub time_limit_ms: Option<u64>,
    pub cpu_time_ms: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    /// Whether memory, pids and cpus are enforced by a cgroup in this run; without one,
    /// pids is RLIMIT_NPROC (in `rlimits`).
    pub cgroup_enforced: bool,
    pub output_limit_bytes: Option<u64>,
    pub tmpfs_size_bytes: u64,
    pub rlimits: Vec<Rlimit>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Protections {
    #[serde(deserialize_with = "known::namespaces")]
    pub namespaces: Vec<known::Name>,
    pub cgroup: Option<Version>,
    pub rootless: bool,
    pub net: crate::options::NetMode,
    #[serde(deserialize_with = "known::capabilities")]
    pub capabilities: known::Name,
    pub no_new_privs: bool,
    /// The Landlock ABI enforced; null when Landlock is off or missing.
    pub landlock_abi: Option<u8>,
    /// The seccomp profile enforced (`NAME (log)` with --seccomp-log); null with none.
    pub seccomp_profile: Option<String>,
    /// `--rootfs`: its path and recorded digest; null when the jail uses the host's /usr.
    pub rootfs: Option<crate::mount::Rootfs>,
    /// The host ids the jail's user mapped to, and whether they were its own.
    pub host_identity: HostIdentity,
}

/// `protections.host_identity`: `mode` is `per-jail` (as root, a host uid of the jail's
/// own from `--host-uid-range`, which also created its user namespace, so the kernel's
/// per-user counters are the jail's), `shared` (as root with `--host-uid-range off` or
/// `--host-uid`: one host uid for every jail, its namespace created by root) or `caller`
/// (rootless: the caller's own uid).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostIdentity {
    #[serde(deserialize_with = "known::host_mode")]
    pub mode: known::Name,
    pub uid: u32,
    pub gid: u32,
}

/// How a server ran a program, beyond what its report says.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunContext {
    /// In an interpreter started before the request (`brig serve --warm-python`): the
    /// report's times are the request's own.
    pub warm: bool,
    /// The output was captured for the reply under this limit (stdout and stderr
    /// together), which the verdict reports in place of the plan's.
    pub output_limit: Option<u64>,
    /// The cgroup's counters are shared with other programs running at the same time (a
    /// session's execs): its OOM kills are reported, but only the run's own
    /// `out_of_memory` makes the verdict `oom`.
    pub shared_cgroup: bool,
}

impl RunContext {
    pub fn warm() -> RunContext {
        RunContext {
            warm: true,
            ..RunContext::default()
        }
    }

    pub fn captured(limit: u64) -> RunContext {
        RunContext {
            output_limit: Some(limit),
            ..RunContext::default()
        }
    }
}

impl Verdict {
    /// The verdict of a run that got as far as starting the jail.
    pub fn of_run(plan: &Plan, run: &RunReport) -> Verdict {
        Verdict::of_run_in(plan, run, RunContext::default())
    }

    /// [`Verdict::of_run`] for a run a server served in `context`: in a warm
    /// interpreter, its output captured under a limit of its own.
    pub fn of_run_in(plan: &Plan, run: &RunReport, context: RunContext) -> Verdict {
        let usage = run.cgroup_usage.unwrap_or_default();
        let counted = Counted {
            oom: run.out_of_memory
                || (!context.shared_cgroup && usage.oom_kills.is_some_and(|kills| kills > 0)),
            cpu_time_limit: plan.limits.cpu_time.map(|limit| limit.0),
            net_limit: run
                .network
                .as_ref()
                .is_some_and(|network| network.limit_reached.is_some()),
        };
        let decision = run.outcome.decision(counted);
        let status = decision.status;
        let error = match &run.outcome {
            Outcome::ExecFailed { message, .. } => Some(message.clone()),
            _ => None,
        };
        let unenforced = match run.outcome {
            Outcome::ExecFailed { .. } => None,
            _ => plan.limits.unenforced_notice(),
        };
        let output_limit = context
            .output_limit
            .or(plan.limits.output_limit.map(|limit| limit.0));
        let mut limits = limits(plan, run.time_limit, run.cgroup_version.is_some());
        limits.output_limit_bytes = output_limit;
        Verdict {
            schema: SCHEMA,
            status,
            brig_exit_code: decision.exit.code(),
            exit_code: decision.exit_code,
            signal: decision.signal,
            wall_ms: run.wall.as_millis() as u64,
            cpu_user_ms: run.cpu_user.as_millis() as u64,
            cpu_sys_ms: run.cpu_sys.as_millis() as u64,
            max_rss_kib: run.max_rss_kib,
            memory_peak_bytes: usage.memory_peak_bytes,
            oom_kills: usage.oom_kills,
            pids_peak: usage.pids_peak,
            stdout_bytes: run.output.map(|output| output.stdout_bytes),
            stderr_bytes: run.output.map(|output| output.stderr_bytes),
            output_truncated: run.output.is_some_and(|output| output.truncated),
            warm: context.warm,
            limits: Some(limits),
            protections: Some(protections(plan, run.cgroup_version, run.host_ids)),
            warnings: plan.warnings.clone(),
            error_kind: error.as_ref().map(|_| ErrorKind::ExecFailed),
            error_stage: error.as_ref().map(|_| Stage::Exec),
            network: run.network.clone(),
            unenforced,
            explanation: explain(plan, run, status, output_limit),
            error,
            in_session: None,
        }
    }

    /// The verdict when brig failed before or while setting up the jail.
    pub fn of_setup_error(plan: Option<&Plan>, error: &Error) -> Verdict {
        let decision = Decision::SETUP_ERROR;
        Verdict {
            schema: SCHEMA,
            status: decision.status,
            brig_exit_code: decision.exit.code(),
            exit_code: decision.exit_code,
            signal: decision.signal,
            wall_ms: 0,
            cpu_user_ms: 0,
            cpu_sys_ms: 0,
            max_rss_kib: 0,
            memory_peak_bytes: None,
            oom_kills: None,
            pids_peak: None,
            stdout_bytes: None,
            stderr_bytes: None,
            output_truncated: false,
            warm: false,
            limits: plan.map(|plan| limits(plan, plan.time_limit, false)),
            protections: None,
            warnings: plan.map(|plan| plan.warnings.clone()).unwrap_or_default(),
            error: Some(error.to_string()),
            error_kind: Some(error.kind()),
            error_stage: error.stage(),
            network: None,
            unenforced: None,
            explanation: None,
            in_session: None,
        }
    }

    /// [`Verdict::stderr_lines`] of a verdict a server sent, as JSON.
    pub fn stderr_lines_of(verdict: &serde_json::Value) -> Vec<String> {
        let text = |key: &str| verdict[key].as_str().map(str::to_owned);
        let why = text("explanation").or(text("error"));
        // Names in them may be the jail's (a name it looked up): escaped.
        text("unenforced")
            .into_iter()
            .chain(why)
            .chain(network_line(verdict))
            .map(|line| printable(&line))
            .collect()
    }

    /// brig's lines on stderr about this run, each printed as `brig: LINE`: the
    /// unenforced default limit, then why the run ended as it did (or brig's error), then
    /// what the network refused ([`network_line`]). Every path prints these, the same.
    pub fn stderr_lines(&self) -> Vec<String> {
        Verdict::stderr_lines_of(&serde_json::to_value(self).expect("a verdict always serializes"))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a verdict always serializes")
    }
}

/// Reading a verdict back: a name brig writes as a constant is read back as that
/// constant; one brig never writes is an error that names the field.
pub(crate) mod known {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer};

    /// A name brig writes as a constant. (Spelled as an alias: serde would otherwise
    /// take a `&'static str` field as one borrowed from a `'static` input.)
    pub type Name = &'static str;

    /// The verdict's `protections.namespaces`, in the order brig lists them.
    pub const NAMESPACES: [&str; 8] = [
        "user", "mount", "pid", "net", "ipc", "uts", "cgroup", "time",
    ];

    pub fn find(name: &str, names: &[&'static str], what: &str) -> Result<&'static str, String> {
        names
            .iter()
            .copied()
            .find(|known| *known == name)
            .ok_or_else(|| {
                format!(
                    "{what} {name:?} is not one brig writes ({})",
                    names.join(", ")
                )
            })
    }

    pub fn one_of<'de, D: Deserializer<'de>>(
        deserializer: D,
        names: &[&'static str],
        what: &str,
    ) -> Result<&'static str, D::Error> {
        let name = String::deserialize(deserializer)?;
        find(&name, names, what).map_err(D::Error::custom)
    }

    pub fn schema<'de, D: Deserializer<'de>>(deserializer: D) -> Result<&'static str, D::Error> {
        one_of(deserializer, &[super::SCHEMA], "schema")
    }

    pub fn capabilities<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<&'static str, D::Error> {
        one_of(deserializer, &["none"], "capabilities")
    }

    pub fn host_mode<'de, D: Deserializer<'de>>(deserializer: D) -> Result<&'static str, D::Error> {
        one_of(
            deserializer,
            &["per-jail", "shared", "caller"],
            "host_identity.mode",
        )
    }

    pub fn namespaces<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<&'static str>, D::Error> {
        Vec::<String>::deserialize(deserializer)?
            .iter()
            .map(|name| find(name, &NAMESPACES, "namespace").map_err(D::Error::custom))
            .collect()
    }
}

/// Text that may hold names chosen by code in a jail (a file name, a path echoed in an
/// error, a name the jail looked up), made safe for a terminal: control characters (escape
/// sequences, newlines, C1 codes) and backslashes are escaped, as Rust escapes a string;
/// other characters, non-ASCII included, are kept. The server sends names with invalid
/// UTF-8 replaced (U+FFFD).
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// One line for the runs brig or the kernel ended; the program's own endings need none.
/// The time limit is the run's (a server's request may have its own).
fn explain(
    plan: &Plan,
    run: &RunReport,
    status: Status,
    output_limit: Option<u64>,
) -> Option<String> {
    let limits = &plan.limits;
    match (&run.outcome, status) {
        (Outcome::ExecFailed { message, .. }, _) => Some(message.clone()),
        (Outcome::Signaled { syscall, .. }, Status::Seccomp) => Some(match syscall {
            Some(name) => format!("the program was killed by seccomp (syscall {name})"),
            None => format!(
                "the program was killed by seccomp (a call its profile {} does not allow; `--seccomp-log` lists them)",
                plan.seccomp.profile
            ),
        }),
        (_, Status::Timeout) => run
            .time_limit
            .map(|limit| format!("time limit of {limit} reached; the jail was killed")),
        (_, Status::OutputLimit) => output_limit.map(|limit| {
            let limit = crate::units::Size(limit);
            format!("output limit of {limit} reached; the output was cut and the jail killed")
        }),
        (_, Status::Oom) => Some(match limits.cgroup.memory {
            Some(memory) => {
                format!("the jail ran out of memory (--memory {memory}); the kernel killed it")
            }
            // No cgroup of the jail's own: the limit is that of brig's cgroup.
            None => "the jail ran out of memory (the limit of the cgroup brig runs in, such as its container's); the kernel killed it".into(),
        }),
        (_, Status::CpuTime) => limits.cpu_time.map(|limit| {
            format!("CPU time limit of {limit} reached; the kernel killed the program")
        }),
        _ => None,
    }
}

fn limits(plan: &Plan, time_limit: Option<crate::units::Span>, cgroup_enforced: bool) -> Limits {
    let millis = |span: Option<crate::units::Span>| span.map(|span| span.0.as_millis() as u64);
    Limits {
        time_limit_ms: millis(time_limit),
        cpu_time_ms: millis(plan.limits.cpu_time),
        // A default memory limit this host cannot enforce is reported with
        // `cgroup_enforced: false`, as it always was.
        memory_bytes: plan
            .limits
            .cgroup
            .memory
            .or(plan.limits.not_enforced.memory)
            .map(|size| size.0),
        pids: plan.limits.cgroup.pids,
        cpus: plan.limits.cgroup.cpus,
        cgroup_enforced,
        output_limit_bytes: plan.limits.output_limit.map(|size| size.0),
        tmpfs_size_bytes: plan.limits.tmpfs_size.0,
        rlimits: plan.limits.rlimits.clone(),
    }
}

fn protections(plan: &Plan, cgroup: Option<Version>, (uid, gid): (u32, u32)) -> Protections {
    let ns = &plan.namespaces;
    let namespaces = [
        ns.user, ns.mount, ns.pid, ns.net, ns.ipc, ns.uts, ns.cgroup, ns.time,
    ]
    .into_iter()
    .zip(known::NAMESPACES)
    .filter(|(on, _)| *on)
    .map(|(_, name)| name)
    .collect();
    Protections {
        namespaces,
        cgroup,
        rootless: plan.identity.rootless,
        net: plan.net,
        capabilities: "none",
        no_new_privs: true,
        landlock_abi: Some(plan.landlock.abi).filter(|abi| *abi > 0),
        seccomp_profile: match plan.seccomp.mode {
            crate::seccomp::Mode::Enforce => Some(plan.seccomp.profile.clone()),
            crate::seccomp::Mode::Log => Some(format!("{} (log)", plan.seccomp.profile)),
            crate::seccomp::Mode::Off => None,
        },
        rootfs: plan.rootfs.clone(),
        host_identity: HostIdentity {
            mode: plan.identity.host.mode(),
            uid,
            gid,
        },
    }
}

/// Where the verdict and the audit line go. Opened before the jail starts, so that an
/// unwritable path fails the run (125) instead of losing the record afterwards.
pub struct Sinks {
    report: Option<ReportSink>,
    audit: Option<(PathBuf, std::fs::File)>,
}

enum ReportSink {
    File(PathBuf, std::fs::File),
    Fd(RawFd),
}

impl Sinks {
    pub fn open(
        report: Option<&Path>,
        report_fd: Option<RawFd>,
        audit_log: Option<&Path>,
    ) -> Result<Sinks> {
        let report = match (report, report_fd) {
            (Some(path), _) => {
                let file = std::fs::File::create(path).map_err(|err| {
                    Error::input(format!(
                        "--report {}: cannot write it: {err}; give a writable path",
                        path.display()
                    ))
                })?;
                Some(ReportSink::File(path.into(), file))
            }
            (None, Some(fd)) if crate::sys::is_fd_open(fd) => Some(ReportSink::Fd(fd)),
            (None, Some(fd)) => {
                return Err(Error::input(format!(
                    "--report-fd {fd}: descriptor is not open; open it when starting brig, e.g. `3>verdict.json`"
                )));
            }
            (None, None) => None,
        };
        let audit = match audit_log {
            Some(path) => Some((path.into(), open_audit_log(path)?)),
            None => None,
        };
        Ok(Sinks { report, audit })
    }

    /// Writes the verdict and the audit line; a failure is reported on stderr.
    pub fn deliver(&self, verdict: &Verdict, plan: Option<&Plan>) {
        // Without a sink there is nothing to write, and the digest (the plan as YAML,
        // hashed) only goes to the audit log: neither costs a run that asks for neither.
        if self.report.is_none() && self.audit.is_none() {
            return;
        }
        let value = serde_json::to_value(verdict).expect("a verdict always serializes");
        let digest = self.audit.as_ref().and(plan).map(config_digest);
        self.deliver_json(&value, digest, None);
    }

    /// [`Sinks::deliver`] for a verdict that came as JSON (from `brig serve`), with the
    /// digest of the plan it ran under and, for a server's log, the client it ran for
    /// and what it ran.
    pub fn deliver_json(
        &self,
        verdict: &serde_json::Value,
        config_digest: Option<String>,
        served: Option<Served>,
    ) {
        let mut line = serde_json::to_string(verdict).expect("JSON always serializes");
        line.push('\n');
        let written = match &self.report {
            Some(ReportSink::File(path, file)) => (&*file)
                .write_all(line.as_bytes())
                .context(|| format!("--report {}: write the verdict", path.display())),
            Some(ReportSink::Fd(fd)) => write_all(crate::sys::borrow_fd(*fd), line.as_bytes())
                .context(|| format!("--report-fd {fd}: write the verdict")),
            None => Ok(()),
        };
        if let Err(err) = written {
            eprintln!("brig: {err}");
        }
        if let Some((path, file)) = &self.audit
            && let Err(err) = append_audit(path, file, config_digest, served, verdict)
        {
            eprintln!("brig: {err}");
        }
    }
}

fn write_all(fd: BorrowedFd, mut bytes: &[u8]) -> std::result::Result<(), nix::errno::Errno> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(written) => bytes = &bytes[written..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
    Ok(())
}

/// Appends one JSON line per run: who ran what, with which plan, and what happened:
/// brig's caller and command line, or for a served run its client (SO_PEERCRED) and the
/// program it ran. An exclusive lock around a single O_APPEND write keeps concurrent
/// jails' lines whole.
fn append_audit(
    path: &Path,
    file: &std::fs::File,
    config_digest: Option<String>,
    served: Option<Served>,
    verdict: &serde_json::Value,
) -> Result<()> {
    #[derive(Serialize)]
    struct Entry<'a> {
        time: String,
        uid: u32,
        pid: i32,
        argv: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        peer: Option<Peer>,
        config_digest: Option<String>,
        verdict: &'a serde_json::Value,
    }
    let (uid, pid, argv, peer) = match served {
        Some(served) => (
            served.peer.uid,
            served.peer.pid,
            bounded_argv(served.argv),
            Some(served.peer),
        ),
        None => (
            nix::unistd::getuid().as_raw(),
            std::process::id() as i32,
            std::env::args().collect(),
            None,
        ),
    };
    let entry = Entry {
        time: rfc3339_now(),
        uid,
        pid,
        argv,
        peer,
        config_digest,
        verdict,
    };
    let mut line = serde_json::to_string(&entry).expect("an audit entry always serializes");
    line.push('\n');
    append_audit_line(file, line.as_bytes())
        .context(|| format!("--audit-log {}: append the run", path.display()))
}

/// Opens an audit log to append to (`brig run`'s, `brig serve`'s, `brig gateway`'s): made
/// `0600` when it does not exist (its lines say who ran what); an unwritable path is the
/// one-line error naming `--audit-log`.
pub fn open_audit_log(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|err| {
            Error::input(format!(
                "--audit-log {}: cannot append to it: {err}; give a writable path",
                path.display()
            ))
        })
}

/// Appends one line (or lines) whole: an exclusive lock around a single O_APPEND write,
/// so that the lines of processes sharing the log never interleave.
pub fn append_audit_line(file: &std::fs::File, line: &[u8]) -> std::io::Result<()> {
    let file = file.try_clone()?;
    let locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| std::io::Error::from(errno))?;
    (&*locked).write_all(line)
}

/// Arguments a served run's audit line keeps, and bytes of each: a client's program (a
/// warm Python's code, a session's cell) may be long; the server's line stays bounded.
/// JSON escapes the control characters.
const AUDIT_ARGS: usize = 64;
const AUDIT_ARG_BYTES: usize = 1024;

fn bounded_argv(argv: &[String]) -> Vec<String> {
    let mut kept: Vec<String> = argv
        .iter()
        .take(AUDIT_ARGS)
        .map(|arg| {
            if arg.len() <= AUDIT_ARG_BYTES {
                return arg.clone();
            }
            let mut end = AUDIT_ARG_BYTES;
            while !arg.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}... ({} more bytes)", &arg[..end], arg.len() - end)
        })
        .collect();
    if argv.len() > AUDIT_ARGS {
        kept.push(format!("... ({} more arguments)", argv.len() - AUDIT_ARGS));
    }
    kept
}

/// A served run, for the server's audit line: its client and the program it ran (a
/// session's cell: the language and the code).
#[derive(Clone, Copy)]
pub struct Served<'a> {
    pub peer: Peer,
    pub argv: &'a [String],
}

/// The client of a `brig serve` run, from the socket's peer credentials (SO_PEERCRED).
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
}

/// SHA-256 of the resolved plan as YAML: which configuration a run had.
/// How many refusals the stderr line names before "and N more".
const NETWORK_LINE_ITEMS: usize = 5;

/// One line for stderr when the jail's network refused or cut connections, or its
/// resolver answered names that are not on the list with NXDOMAIN: what, why, and where
/// the details are. Built from the verdict as JSON so that every path (a run, a run
/// through a server, a session) words it the same; None when nothing was refused.
pub fn network_line(verdict: &serde_json::Value) -> Option<String> {
    let network = verdict.get("network")?;
    let mut refused = Vec::new();
    let mut connections = 0;
    for entry in network["connections"].as_array()? {
        let Some(reason) = entry["reason"].as_str() else {
            continue;
        };
        let port = entry["port"].as_u64().unwrap_or_default();
        let target = match (entry["name"].as_str(), entry["address"].as_str()) {
            (Some(name), _) => format!("{name}:{port}"),
            (None, Some(address)) if address.contains(':') => format!("[{address}]:{port}"),
            (None, Some(address)) => format!("{address}:{port}"),
            (None, None) => format!("port {port}"),
        };
        let verb = if entry["allowed"] == true {
            "cut: "
        } else {
            ""
        };
        connections += entry["connections"].as_u64().unwrap_or(1);
        refused.push(format!("{target} ({verb}{reason})"));
    }
    let unresolved: Vec<&str> = network["lookups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|lookup| lookup["answer"].is_null())
        .filter_map(|lookup| lookup["name"].as_str())
        .collect();
    let placeholders: Vec<String> = network["secret_placeholders"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|report| report.as_str().map(str::to_string))
        .collect();
    if refused.is_empty() && unresolved.is_empty() {
        // A placeholder sent where it is not entitled is worth its own line.
        return (!placeholders.is_empty()).then(|| format!("network: {}", placeholders.join("; ")));
    }
    let list = |items: &[String]| {
        let mut text = items
            .iter()
            .take(NETWORK_LINE_ITEMS)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if items.len() > NETWORK_LINE_ITEMS {
            text.push_str(&format!(" and {} more", items.len() - NETWORK_LINE_ITEMS));
        }
        text
    };
    let mut parts = Vec::new();
    if !refused.is_empty() {
        let plural = if connections == 1 { "" } else { "s" };
        parts.push(format!(
            "{connections} connection{plural} refused or cut: {}",
            list(&refused)
        ));
    }
    if !unresolved.is_empty() {
        let names: Vec<String> = unresolved.iter().map(|name| name.to_string()).collect();
        let (count, verb) = if names.len() == 1 {
            ("1 name".to_string(), "was")
        } else {
            (format!("{} names", names.len()), "were")
        };
        parts.push(format!(
            "{count} not on the list {verb} not resolved: {}",
            list(&names)
        ));
    }
    parts.extend(placeholders);
    Some(format!(
        "network: {}; to allow a destination add `--allow-net NAME:PORT` (the report's `network` has every attempt)",
        parts.join("; ")
    ))
}

pub fn config_digest(plan: &Plan) -> String {
    use sha2::{Digest, Sha256};
    let yaml = serde_saphyr::to_string(plan).unwrap_or_default();
    let digest = Sha256::digest(yaml.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// UTC time as RFC 3339 with milliseconds, without a date crate.
pub(crate) fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = now.as_secs();
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    /// A served program's argv in the audit line: at most 64 arguments of at most 1 KiB
    /// each (cut on a character boundary), saying how much was left out.
    #[test]
    fn an_audit_line_s_argv_is_bounded() {
        let long = format!("{}é", "x".repeat(1023));
        let mut argv = vec!["python3".to_string(), "-c".into(), long];
        argv.extend((0..100).map(|n| n.to_string()));
        let kept = super::bounded_argv(&argv);
        assert_eq!(kept.len(), 65);
        assert_eq!(kept[2], format!("{}... (2 more bytes)", "x".repeat(1023)));
        assert_eq!(kept[64], "... (39 more arguments)");
        assert_eq!(super::bounded_argv(&argv[..2]), ["python3", "-c"]);
    }

    #[test]
    fn the_network_line_names_refusals_and_unlisted_names() {
        let verdict = serde_json::json!({"network": {
            "connections": [
                {"name": "web.test", "port": 80, "address": "127.0.0.1", "allowed": true,
                 "reason": null, "connections": 2},
                {"name": "web.test", "port": 81, "address": null, "allowed": false,
                 "reason": "port 81 is not allowed for web.test", "connections": 2},
                {"name": null, "port": 80, "address": "10.0.0.1", "allowed": false,
                 "reason": "private address, not on the list", "connections": 1},
                {"name": null, "port": 443, "address": "fd00::1", "allowed": false,
                 "reason": "not on the list", "connections": 1},
                {"name": "web.test", "port": 443, "address": "127.0.0.1", "allowed": true,
                 "reason": "TLS names evil.test, which is not on the list (connection for web.test)",
                 "connections": 1},
            ],
            "lookups": [
                {"name": "web.test", "answer": "198.18.0.1", "count": 1},
                {"name": "example.com", "answer": null, "count": 3},
            ],
        }});
        assert_eq!(
            super::network_line(&verdict).unwrap(),
            "network: 5 connections refused or cut: web.test:81 (port 81 is not allowed for web.test), 10.0.0.1:80 (private address, not on the list), [fd00::1]:443 (not on the list), web.test:443 (cut: TLS names evil.test, which is not on the list (connection for web.test)); 1 name not on the list was not resolved: example.com; to allow a destination add `--allow-net NAME:PORT` (the report's `network` has every attempt)"
        );
        let many: Vec<_> = (0..8)
            .map(|i| serde_json::json!({"name": format!("n{i}.test"), "answer": null}))
            .collect();
        let verdict = serde_json::json!({"network": {"connections": [], "lookups": many}});
        let line = super::network_line(&verdict).unwrap();
        assert!(
            line.contains("8 names not on the list were not resolved: n0.test, n1.test, n2.test, n3.test, n4.test and 3 more;"),
            "{line}"
        );
        let quiet = serde_json::json!({"network": {"connections": [], "lookups": []}});
        assert_eq!(super::network_line(&quiet), None);
        assert_eq!(
            super::network_line(&serde_json::json!({"network": null})),
            None
        );
    }

    /// A verdict read back is the verdict written, for every status, every field set
    /// (and the optional ones null); one of another schema, or naming a namespace brig
    /// never writes, is refused with the field named.
    #[test]
    fn a_verdict_reads_back_as_written() {
        use super::*;
        use crate::net::record::{Destination, Dropped, Lookup, NetworkRecord};
        let statuses = [
            Status::Ok,
            Status::NonzeroExit,
            Status::Signaled,
            Status::Timeout,
            Status::CpuTime,
            Status::Oom,
            Status::OutputLimit,
            Status::NetLimit,
            Status::Seccomp,
            Status::SetupError,
        ];
        let full = |status: Status| Verdict {
            schema: SCHEMA,
            status,
            brig_exit_code: 124,
            exit_code: Some(3),
            signal: Some(9),
            wall_ms: 12,
            cpu_user_ms: 5,
            cpu_sys_ms: 1,
            max_rss_kib: 4096,
            memory_peak_bytes: Some(1 << 20),
            oom_kills: Some(0),
            pids_peak: Some(2),
            stdout_bytes: Some(10),
            stderr_bytes: Some(0),
            output_truncated: true,
            warm: true,
            limits: Some(Limits {
                time_limit_ms: Some(1000),
                cpu_time_ms: None,
                memory_bytes: Some(1 << 30),
                pids: Some(256),
                cpus: Some(1.5),
                cgroup_enforced: true,
                output_limit_bytes: Some(1 << 20),
                tmpfs_size_bytes: 64 << 20,
                rlimits: vec![
                    Rlimit {
                        name: "nofile",
                        soft: Some(1024),
                        hard: None,
                    },
                    Rlimit {
                        name: "core",
                        soft: Some(0),
                        hard: Some(0),
                    },
                ],
            }),
            protections: Some(Protections {
                namespaces: known::NAMESPACES.to_vec(),
                cgroup: Some(Version::V2),
                rootless: false,
                net: crate::options::NetMode::Filtered,
                capabilities: "none",
                no_new_privs: true,
                landlock_abi: Some(4),
                seccomp_profile: Some("default (log)".into()),
                rootfs: Some(crate::mount::Rootfs {
                    path: "/srv/root".into(),
                    digest: Some("sha256:00".into()),
                }),
                host_identity: HostIdentity {
                    mode: "per-jail",
                    uid: 100_000,
                    gid: 100_000,
                },
            }),
            warnings: vec!["a warning".into()],
            error: Some("an error".into()),
            error_kind: Some(ErrorKind::BadInput),
            error_stage: Some(Stage::Mounts),
            network: Some(NetworkRecord {
                rules: vec!["web.test:443".into()],
                hosts: vec!["web.test:127.0.0.1".into()],
                connections: vec![Destination {
                    name: Some("web.test".into()),
                    port: 443,
                    address: Some("127.0.0.1".parse().unwrap()),
                    allowed: false,
                    reason: Some("not on the list".into()),
                    connections: 2,
                    bytes_sent: 3,
                    bytes_received: 4,
                }],
                lookups: vec![Lookup {
                    name: "web.test".into(),
                    answer: None,
                    count: 1,
                }],
                dropped: vec![Dropped {
                    protocol: "udp".into(),
                    address: Some("::1".parse().unwrap()),
                    port: Some(53),
                    packets: 1,
                }],
                bytes_sent: 5,
                bytes_received: 6,
                limit_reached: Some("net-bytes"),
                secret_placeholders: vec![],
            }),
            unenforced: Some("memory".into()),
            explanation: Some("why".into()),
            in_session: Some(SessionExec {
                session: "s1".into(),
                language: Some(crate::serve::protocol::Language::Bash),
                context: Some("bash-1".into()),
                pid: Some(None),
            }),
        };
        let empty = |status: Status| Verdict {
            limits: None,
            protections: None,
            network: None,
            exit_code: None,
            signal: None,
            error: None,
            error_kind: None,
            error_stage: None,
            in_session: None,
            ..full(status)
        };
        let command = |status: Status| Verdict {
            in_session: Some(SessionExec {
                session: "s2".into(),
                language: None,
                context: None,
                pid: Some(Some(7)),
            }),
            ..empty(status)
        };
        for status in statuses {
            for verdict in [full(status), empty(status), command(status)] {
                let written = verdict.to_json();
                let read: Verdict = serde_json::from_str(&written).unwrap();
                assert_eq!(read, verdict, "{written}");
                // And through a server's reply, which carries it as a JSON value.
                let value = serde_json::to_value(&verdict).unwrap();
                assert_eq!(serde_json::from_value::<Verdict>(value).unwrap(), verdict);
            }
        }
        let mut value = serde_json::to_value(full(Status::Ok)).unwrap();
        value["schema"] = "brig-verdict/2".into();
        let err = serde_json::from_value::<Verdict>(value)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("schema \"brig-verdict/2\" is not one brig writes"),
            "{err}"
        );
        let mut value = serde_json::to_value(full(Status::Ok)).unwrap();
        value["protections"]["namespaces"][0] = "time2".into();
        let err = serde_json::from_value::<Verdict>(value)
            .unwrap_err()
            .to_string();
        assert!(err.contains("namespace \"time2\""), "{err}");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let stamp = super::rfc3339_now();
        assert_eq!(stamp.len(), 24, "{stamp}");
        assert!(stamp.starts_with("20") && stamp.ends_with('Z'), "{stamp}");
    }
}
