//! brig's side of a run: create the jail's cgroup and its process in all its namespaces,
//! write its id maps, then watch it — forwarding signals, relaying bounded output,
//! enforcing the time limit — until it is gone, and measure what it used.

use super::Program;
use super::channel::{Channel, Message, ParentEnd, Stdio};
use super::child::{self, Shape};
use super::init;
use super::kill::{Init, Measured, descendants_usage};
use super::outcome::{EndedBy, Outcome, ProgramEnd, RunReport, Spent, decide};
use super::output::{Captured, JailEnds, Output};
use crate::cgroup::JailCgroup;
use crate::error::{AtStage, Context, Error, Result, Stage};
use crate::net::forward::Forwarder;
use crate::plan::Plan;
use crate::sys::{self, Cloned};
use crate::units::Span;
use crate::{identity, seccomp};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::WaitStatus;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

/// A jail that is assembled — namespaces, id maps, cgroup, mount tree — and whose init
/// waits for a program. Dropped without running one, it is killed and its cgroup removed.
pub struct Jail<'p> {
    plan: &'p Plan,
    init: Init,
    channel: ParentEnd,
    signals: SignalFd,
    /// The output collector: with `--output-limit`, or a captured run's.
    output: Option<Output>,
    audit: Option<seccomp::AuditLog>,
    /// `--net filtered`: the jail's TUN device, until `run` starts relaying for it.
    tun: Option<OwnedFd>,
    /// A session's home directory, opened inside the jail.
    workspace: Option<OwnedFd>,
    /// The plan's `--time-limit`, unless the run was given another.
    time_limit: Option<Span>,
    /// A server's jail with `--output-limit` or a captured run: brig's copies of the
    /// collector's pipes' write ends, which the program gets as its stdout and stderr in
    /// place of the client's (the collector relays to those, or keeps the output,
    /// within the limit).
    output_ends: Option<JailEnds>,
    /// A program started before its request (a warm interpreter): the time limit starts
    /// when a [`RequestClock`] says so, not with the program.
    clock: Option<OwnedFd>,
    // Declared last: dropped (killing what is left inside, then removed) after `init` is
    // reaped on every path.
    cgroup: Option<JailCgroup>,
    reaped: bool,
    /// The jail's host ids. Declared after `cgroup`: a per-jail uid's lock is released
    /// only once nothing of the jail is left.
    host: identity::Lease,
    /// A root session's second lease: the host uid/gid the jail's uid and gid 0 map to
    /// (`Identity::root`), released with the jail as the first one is.
    root_host: Option<identity::Lease>,
}

impl<'p> Jail<'p> {
    /// Builds the jail `plan` describes, up to the point where only the program is missing.
    /// Its program inherits init's standard streams ([`Jail::run`]).
    pub fn assemble(plan: &'p Plan) -> Result<Jail<'p>> {
        Jail::assemble_with(plan, Shape::OneShot)
    }

    /// [`Jail::assemble`], for a jail whose program will be given its descriptors
    /// ([`Jail::run_with_stdio`]): a server's pooled jail.
    pub fn assemble_for_streams(plan: &'p Plan) -> Result<Jail<'p>> {
        Jail::assemble_with(plan, Shape::Streams)
    }

    /// Builds a jail of the given [`Shape`].
    pub(super) fn assemble_with(plan: &'p Plan, shape: Shape) -> Result<Jail<'p>> {
        // The jail's first process is cloned without exec and allocates: in a process
        // with other threads it could inherit a lock one of them held.
        // procfs gives a process's task directory one link per thread, plus two.
        if !std::fs::metadata("/proc/self/task").is_ok_and(|meta| meta.nlink() == 3) {
            return Err(Error::setup(
                "brig must create jails from a single-threaded process (another thread could hold a lock the jail's process inherits); create them before starting threads, or from a helper process",
            )
            .at(Stage::Namespaces));
        }
        // Signals for the program arrive on a signalfd; the mask is inherited by the jail's
        // init, which waits for them synchronously too.
        let forwarded = init::forwarded_signals();
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&forwarded), None)
            .context(|| "block signals".into())?;
        let signals =
            SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                .context(|| "create a signalfd".into())?;
        let channel = Channel::new(shape != Shape::OneShot || plan.network.is_some())
            .context(|| "create the pipes to the jail".into())?;
        let (output, jail_output) = match plan.limits.output_limit {
            Some(limit) => {
                let (output, ends) =
                    Output::new(limit.0).context(|| "create the output pipes".into())?;
                (Some(output), Some(ends))
            }
            None => (None, None),
        };
        identity::drop_supplementary_groups(&plan.identity).at(Stage::Identity)?;
        // The jail's host ids: with a per-jail range, a uid no other jail holds.
        let host = plan.identity.host.lease().at(Stage::Identity)?;
        // A root session's inside 0: a second per-jail uid, never the user's own.
        let root_host = match plan.identity.root {
            true => Some(plan.identity.host.lease().at(Stage::Identity)?),
            false => None,
        };
        // The kernel's seccomp records name the call that killed the program or, in log
        // mode, the calls the profile would deny.
        let audit = match plan.seccomp.mode {
            seccomp::Mode::Off => None,
            _ => seccomp::AuditLog::open(host.uid),
        };
        // Created before the jail so that the jail starts inside it; removed (after
        // killing whatever is left inside) when dropped.
        let cgroup = match &plan.limits.placement {
            Some(placement) => {
                Some(JailCgroup::create(placement, &plan.limits.cgroup).at(Stage::Cgroup)?)
            }
            None => None,
        };

        let cgroup_fd = cgroup.as_ref().and_then(|cgroup| cgroup.clone_into());
        // A per-jail host uid creates the jail's user namespace: the kernel charges what
        // the jail uses of its per-user counters (inotify, pending signals, message
        // queues, namespaces) to the namespace's creator at the host's level. brig does it
        // here, as the parent, switching only its effective ids around the clone and the
        // id maps (the child could not: once in its own user namespace it can no longer
        // choose who owns it). The maps are written as the namespace's owner, which holds
        // every capability in it (root in a container may lack CAP_SYS_ADMIN, which
        // writing them as anyone else takes); the switch ends before anything else. The
        // child starts with the per-jail effective uid; the v1 cgroup files it writes to
        // were opened by root.
        // The jail's init starts as a copy of this process: no copy of a secret's value
        // but the one brig keeps (which the init zeroes first thing) goes with it.
        if let Some(secrets) = plan.secrets() {
            secrets.scrub_copies();
        }
        let creator = match host.creator {
            true => Some(identity::AsNamespaceCreator::switch(&host).at(Stage::Namespaces)?),
            false => None,
        };
        let host_locks: Vec<_> = host
            .lock_fd()
            .into_iter()
            .chain(root_host.as_ref().and_then(identity::Lease::lock_fd))
            .collect();
        let cloned = sys::clone_process(plan.namespaces.clone_flags(), cgroup_fd).map_err(|errno| {
            let err = Error::os("create the jail's namespaces (clone3)", errno);
            // Inside a container its settings are the cause (named by the caller).
            let err = if errno == Errno::EPERM && crate::doctor::in_container().is_some() {
                err
            } else {
                err.hint("user namespaces may be disabled or restricted here (kernel.unprivileged_userns_clone, user.max_user_namespaces, AppArmor); see `brig doctor`")
            };
            err.host_lacks().at(Stage::Namespaces)
        })?;
        let (pid, pidfd, in_cgroup) = match cloned {
            Cloned::Child => child::run(
                plan,
                channel.child_end(),
                jail_output,
                cgroup.as_ref().and_then(JailCgroup::entry),
                shape,
                host_locks,
            ),
            Cloned::Parent {
                pid,
                pidfd,
                in_cgroup,
            } => (pid, pidfd, in_cgroup),
        };
        // Kept only for a server's jail, to give its program with its other streams.
        let output_ends = jail_output.filter(|_| shape == Shape::Streams);
        let mut jail = Jail {
            plan,
            init: Init::new(pid, pidfd, plan.identity.rootless),
            channel: channel.parent_end(),
            signals,
            output,
            audit,
            tun: None,
            workspace: None,
            time_limit: plan.time_limit,
            output_ends,
            clock: None,
            cgroup,
            reaped: false,
            host,
            root_host,
        };
        let mapped =
            identity::write_id_maps(pid, &plan.identity, &jail.host, jail.root_host.as_ref());
        drop(creator);
        mapped.at(Stage::IdMaps)?;
        if let Some(cgroup) = &jail.cgroup
            && !in_cgroup
            && cgroup.entry().is_none()
        {
            cgroup.add_process(pid).at(Stage::Cgroup)?;
        }
        jail.channel
            .say_go()
            .context(|| "tell the jail to start".into())
            .at(Stage::Namespaces)?;
        if let Err(messages) = jail.channel.wait_until_ready() {
            jail.reap();
            return Err(setup_error(messages));
        }
        if plan.network.is_some() {
            let tun = jail.channel.take_handed_over().ok_or_else(|| {
                Error::setup("the jail did not hand over its TUN device").at(Stage::Isolation)
            })?;
            jail.tun = Some(tun);
        }
        if shape == Shape::Session {
            let workspace = jail.channel.take_handed_over().ok_or_else(|| {
                Error::setup("the jail did not hand over its workspace").at(Stage::Mounts)
            })?;
            jail.workspace = Some(workspace);
        }
        Ok(jail)
    }

    /// A pidfd of the jail's init: a signal to it (SIGKILL) ends the jail, and after the
    /// jail is reaped it reaches nobody.
    pub fn init_pidfd(&self) -> BorrowedFd<'_> {
        self.init.pidfd()
    }

    /// The host uid and gid the jail's user maps to (its own, with a per-jail range).
    pub fn host_ids(&self) -> (u32, u32) {
        (self.host.uid, self.host.gid)
    }

    /// A root session's: the host uid and gid the jail's 0 maps to.
    pub fn root_host_ids(&self) -> Option<(u32, u32)> {
        self.root_host.as_ref().map(|root| (root.uid, root.gid))
    }

    pub(super) fn plan(&self) -> &'p Plan {
        self.plan
    }

    /// brig's end of the channel to the jail's init: a session's jail speaks its commands
    /// and reads its events over it.
    pub(super) fn channel(&self) -> &ParentEnd {
        &self.channel
    }

    /// `--net filtered`: starts relaying the jail's network under the plan's policy, with
    /// the TUN device the jail handed over (once: a second call finds none); None
    /// without a filtered network.
    pub(super) fn start_network(&mut self) -> Result<Option<Forwarder>> {
        match (self.tun.take(), &self.plan.network) {
            (Some(tun), Some(policy)) => Forwarder::start(tun, policy)
                .context(|| "start relaying the jail's network".into())
                .at(Stage::Isolation)
                .map(Some),
            _ => Ok(None),
        }
    }

    /// A session's workspace (the jail's home directory), opened inside the jail; None
    /// for a jail of another shape.
    pub(super) fn workspace(&self) -> Option<BorrowedFd<'_>> {
        self.workspace.as_ref().map(AsFd::as_fd)
    }

    /// What the jail's cgroup counts so far; None without a cgroup of its own.
    pub(super) fn usage(&self) -> Option<crate::cgroup::Usage> {
        self.cgroup.as_ref().map(JailCgroup::usage)
    }

    pub(super) fn cgroup_version(&self) -> Option<crate::cgroup::Version> {
        self.cgroup.as_ref().map(JailCgroup::version)
    }

    /// The jail's own cgroup (a session pauses and thaws it); None without one.
    pub(super) fn cgroup(&self) -> Option<&JailCgroup> {
        self.cgroup.as_ref()
    }

    /// A reader of the jail cgroup's counters for another thread; None without a cgroup.
    pub fn cgroup_probe(&self) -> Option<crate::cgroup::UsageProbe> {
        self.cgroup.as_ref().map(crate::cgroup::JailCgroup::probe)
    }

    /// Gives the run a wall-clock limit other than the plan's (a server's request).
    pub fn limit_time(&mut self, limit: Option<Span>) {
        self.time_limit = limit;
    }

    /// For a program that starts before its request (a warm interpreter): its time limit
    /// is not armed when it starts, but when the returned clock is started, from then on
    /// (the supervisor keeps that deadline as any other).
    pub fn time_limit_from_request(&mut self) -> Result<RequestClock> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .context(|| "create the pipe of the request's clock".into())?;
        self.clock = Some(read);
        Ok(RequestClock(write))
    }

    /// Runs `program` in the jail and watches it until the jail is gone: forwarding
    /// signals, relaying bounded output, enforcing the time limit. The wall clock and
    /// the time limit start here. The program inherits init's standard streams (brig's
    /// when the jail was assembled).
    pub fn run(self, program: &Program) -> Result<RunReport> {
        self.run_with_stdio(program, None)
    }

    /// [`Jail::run`], with `stdio` as the program's standard input, output and error (a
    /// server gives a pooled jail its client's); the jail must come from
    /// [`Jail::assemble_for_streams`].
    pub fn run_with_stdio(self, program: &Program, stdio: Option<Stdio>) -> Result<RunReport> {
        Ok(self.run_watching(program, stdio, None)?.0)
    }

    /// [`Jail::run_with_stdio`] with `stdin` as the program's standard input and its
    /// stdout and stderr captured: at most `limit` bytes of both together (no more than
    /// the plan's `--output-limit`), the jail killed at the cut, as a relayed run's. The
    /// jail must come from [`Jail::assemble_for_streams`].
    pub fn run_capturing(
        mut self,
        program: &Program,
        stdin: OwnedFd,
        limit: u64,
    ) -> Result<(RunReport, Captured)> {
        if self.output_ends.is_none() {
            let (output, ends) = Output::new(limit).context(|| "create the output pipes".into())?;
            self.output = Some(output);
            self.output_ends = Some(ends);
        }
        if let Some(output) = self.output.as_mut() {
            output.capture(limit);
        }
        let (report, output) = self.run_watching(program, Some(vec![stdin]), None)?;
        let captured = output.map(Output::into_captured).unwrap_or_default();
        Ok((report, captured))
    }

    /// [`Jail::run_with_stdio`], calling `ended` with the run's report as soon as the
    /// program has ended, before the jail is torn down (init's exit, the namespaces, the
    /// cgroup), where that report is already whole: a jail without an output relay, a
    /// network to record or a seccomp log. A server answers its client there; the
    /// teardown then costs the client nothing. The report returned is the final one.
    pub fn run_reporting_early(
        self,
        program: &Program,
        stdio: Option<Stdio>,
        ended: impl FnOnce(&RunReport),
    ) -> Result<RunReport> {
        let mut ended = Some(ended);
        let mut call = |report: &RunReport| {
            if let Some(ended) = ended.take() {
                ended(report);
            }
        };
        Ok(self.run_watching(program, stdio, Some(&mut call))?.0)
    }

    /// The run, with `ended` called early when a caller asked for it (a one-shot run
    /// does not: its report waits for the teardown anyway); and its output collector.
    fn run_watching(
        mut self,
        program: &Program,
        stdio: Option<Stdio>,
        ended: Option<&mut dyn FnMut(&RunReport)>,
    ) -> Result<(RunReport, Option<Output>)> {
        let plan = self.plan;
        program.check()?;
        let early = ended.is_some()
            && self.output.is_none()
            && plan.network.is_none()
            && plan.seccomp.mode != seccomp::Mode::Log;
        if early {
            self.channel
                .report_without_waiting()
                .context(|| "make the jail's report pipe non-blocking".into())?;
        }
        // With --output-limit the program writes into the collector, which relays to
        // the given stdout and stderr within the limit; a captured run is given its stdin
        // alone, and the collector keeps its output.
        let stdio = match (stdio, self.output_ends.take(), self.output.as_mut()) {
            (Some(mut given), Some(ends), Some(output)) if given.len() >= 3 => {
                let stdout = std::mem::replace(&mut given[1], ends.stdout);
                let stderr = std::mem::replace(&mut given[2], ends.stderr);
                if !output.is_capturing() {
                    output.relay_to(stdout, stderr);
                }
                Some(given)
            }
            (Some(mut given), Some(ends), Some(_)) if given.len() == 1 => {
                given.extend([ends.stdout, ends.stderr]);
                Some(given)
            }
            (stdio, _, _) => stdio,
        };
        // The filter relays from the program's first packet on.
        let forwarder = self.start_network()?;
        // Without a cgroup of its own the jail is in brig's, whose memory limit (a
        // container's) the kernel may enforce: its OOM kills are counted there.
        let enclosing_ooms = self
            .cgroup
            .is_none()
            .then(crate::cgroup::enclosing_oom_kills)
            .flatten();
        let started = Instant::now();
        self.channel
            .send_program(program, stdio.as_ref())
            .context(|| "hand the program to the jail".into())
            .at(Stage::Spawn)?;
        // The jail holds them now; brig's copies would keep a client's pipe open.
        drop(stdio);
        let clock = self.clock.take();
        let deadline = match clock {
            Some(_) => None,
            None => self.time_limit.map(|limit| started + limit.0),
        };
        let mut early_messages = Vec::new();
        let watch = Watch {
            output: self.output.as_mut(),
            audit: self.audit.as_mut(),
            oom: self.cgroup.as_ref().and_then(JailCgroup::oom_events),
            clock,
            clock_started: false,
            report: early.then_some(EarlyReport {
                channel: &self.channel,
                pending: Vec::new(),
                messages: &mut early_messages,
            }),
        };
        let ending = self.init.supervise(&self.signals, deadline, watch)?;
        if ending.program_ended {
            let wall = started.elapsed();
            if let (Ok(report), Some(ended)) = (self.early_report(&early_messages, wall), ended) {
                ended(&report);
            }
            self.init.wait_for_exit();
        }
        let (init_status, reaped) = self.reap();
        let wall = started.elapsed();
        let network = forwarder.map(Forwarder::finish);
        if let Some(output) = self.output.as_mut() {
            output.drain();
        }
        let mut messages = early_messages;
        messages.extend(self.channel.collect());
        let mut outcome = decide(program_end(messages)?, init_status, ending.by)?;
        let seccomp_log = name_seccomp_kill(plan, &mut outcome, self.audit.take());
        let killed_by_enclosing_oom = matches!(
            outcome,
            Outcome::Signaled {
                signal: libc::SIGKILL,
                seccomp: false,
                ..
            }
        ) && enclosing_ooms
            .zip(crate::cgroup::enclosing_oom_kills())
            .is_some_and(|(before, after)| after > before);
        let cgroup = self.cgroup.as_ref();
        let cgroup_usage = cgroup.map(JailCgroup::usage);
        // Reaping init yields its usage and that of every process it reaped, the program
        // among them when it ended by itself. The processes killed with the jail are reaped
        // by nobody (init ignores SIGCHLD as it dies): brig measured them just before.
        let killed = ending.at_kill.unwrap_or_default();
        // The cgroup counts the CPU of every process of the jail.
        let cpu_user = cgroup_usage
            .and_then(|usage| usage.cpu_user_usec)
            .map(Duration::from_micros)
            .unwrap_or(reaped.user + killed.user);
        let cpu_sys = cgroup_usage
            .and_then(|usage| usage.cpu_sys_usec)
            .map(Duration::from_micros)
            .unwrap_or(reaped.system + killed.system);
        let spent = Spent {
            wall,
            cpu_user,
            cpu_sys,
            max_rss_kib: reaped.max_rss_kib.max(killed.max_rss_kib),
        };
        let cgroup = (cgroup.map(JailCgroup::version), cgroup_usage);
        let mut report = RunReport::new(outcome, self.time_limit, spent, cgroup, self.host_ids());
        let output = self.output.take();
        report.out_of_memory = ending.by == EndedBy::OutOfMemory || killed_by_enclosing_oom;
        report.output = output.as_ref().map(|output| output.counts);
        report.seccomp_log = seccomp_log;
        report.network = network;
        Ok((report, output))
    }

    fn reap(&mut self) -> (Option<WaitStatus>, Measured) {
        self.reaped = true;
        self.init.reap()
    }

    /// The report of a program that ended by itself, from init's word and the cgroup's
    /// counters, while the jail is still there.
    fn early_report(&self, messages: &[Message], wall: Duration) -> Result<RunReport> {
        let end = messages
            .iter()
            .find_map(|message| match message {
                Message::Ended { end, .. } => Some(*end),
                _ => None,
            })
            .unwrap_or_default();
        let outcome = decide(program_end(messages.to_vec())?, None, EndedBy::Program)?;
        let cgroup = self.cgroup.as_ref();
        let cgroup_usage = cgroup.map(JailCgroup::usage);
        let cpu =
            |from_cgroup: Option<u64>, own: u64| Duration::from_micros(from_cgroup.unwrap_or(own));
        let spent = Spent {
            wall,
            cpu_user: cpu(cgroup_usage.and_then(|u| u.cpu_user_usec), end.cpu_user_us),
            cpu_sys: cpu(cgroup_usage.and_then(|u| u.cpu_sys_usec), end.cpu_sys_us),
            max_rss_kib: end.max_rss_kib,
        };
        let cgroup = (cgroup.map(JailCgroup::version), cgroup_usage);
        Ok(RunReport::new(
            outcome,
            self.time_limit,
            spent,
            cgroup,
            self.host_ids(),
        ))
    }

    /// Kills every process of the jail at once and reaps init (a session's end).
    pub(super) fn end(&mut self) {
        if !self.reaped {
            self.init.kill();
            self.reap();
        }
    }
}

impl Drop for Jail<'_> {
    fn drop(&mut self) {
        if !self.reaped {
            // An unused jail has only its init.
            self.init.kill_init();
            self.init.reap();
        }
    }
}

/// The error a jail reported while it was assembled.
fn setup_error(messages: Vec<Message>) -> Error {
    messages
        .into_iter()
        .find_map(|message| match message {
            Message::SetupError {
                stage,
                errno,
                message,
            } => Some(Error::from_jail(message, stage, errno.map(Errno::from_raw))),
            _ => None,
        })
        .unwrap_or_else(|| {
            Error::setup("the jail's first process ended before the jail was assembled")
                .at(Stage::Namespaces)
        })
}

/// Marks a SIGSYS death under an enforced filter as the profile's doing, names the call
/// when the audit records agree on one, and returns the log-mode list.
fn name_seccomp_kill(
    plan: &Plan,
    outcome: &mut Outcome,
    audit: Option<seccomp::AuditLog>,
) -> Option<seccomp::Logged> {
    if let Outcome::Signaled {
        signal, seccomp, ..
    } = outcome
    {
        *seccomp = *signal == libc::SIGSYS && plan.seccomp.mode == seccomp::Mode::Enforce;
    }
    let killed_by_seccomp = matches!(outcome, Outcome::Signaled { seccomp: true, .. });
    let log_mode = plan.seccomp.mode == seccomp::Mode::Log;
    let logged = audit.map(|audit| {
        // The kernel's audit thread sends the records a moment after the fact.
        let linger = if killed_by_seccomp || log_mode {
            Duration::from_millis(200)
        } else {
            Duration::ZERO
        };
        audit.finish(linger, |logged| !log_mode && !logged.killed.is_empty())
    });
    if let (Outcome::Signaled { syscall, .. }, Some(logged)) = (&mut *outcome, &logged)
        && killed_by_seccomp
        // Records carry no jail id: name the call only when every kill seen agrees.
        && let [only] = logged.killed.as_slice()
    {
        *syscall = Some(only.clone());
    }
    logged.filter(|_| log_mode)
}

/// How long the program has to act on a SIGTERM, SIGINT, SIGHUP or SIGQUIT sent to
/// brig before brig kills the jail, so that being stopped never leaves it behind.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Why the jail ended and, when brig ended it, what its processes had used by then.
struct Ending {
    by: EndedBy,
    at_kill: Option<Measured>,
    /// Init reported the program's end; init itself may not have exited yet.
    program_ended: bool,
}

impl Ending {
    fn end(&mut self, jail: &Init, why: EndedBy) {
        if self.by == EndedBy::Program {
            // Processes killed now are reaped by nobody whose usage brig learns: measure
            // them first, stopped, so that none forks, spins or frees memory meanwhile.
            jail.signal_from_inside(Signal::SIGSTOP);
            self.at_kill = Some(descendants_usage(jail.pid()));
            jail.kill();
            self.by = why;
        }
    }
}

/// What brig watches besides the jail's exit and its own signals.
struct Watch<'a> {
    output: Option<&'a mut Output>,
    audit: Option<&'a mut seccomp::AuditLog>,
    /// v1 OOM notifications (see `JailCgroup::oom_events`).
    oom: Option<OwnedFd>,
    /// A [`RequestClock`]'s words: the time limit starts now; then, the output was cut.
    clock: Option<OwnedFd>,
    clock_started: bool,
    /// To report the run before the jail's teardown: the jail's messages as they come.
    report: Option<EarlyReport<'a>>,
}

struct EarlyReport<'a> {
    channel: &'a ParentEnd,
    pending: Vec<u8>,
    messages: &'a mut Vec<Message>,
}

#[derive(Clone, Copy, PartialEq)]
enum Source {
    Exit,
    Signals,
    Output(usize),
    Audit,
    Oom,
    Clock,
    Report,
}

/// Starts the time limit of a jail whose program started before its request
/// ([`Jail::time_limit_from_request`]), and tells its supervisor when the request's
/// output collector cut the output: the supervisor ends the jail and decides the outcome,
/// as for a run whose output it collects itself.
pub struct RequestClock(OwnedFd);

impl RequestClock {
    /// The request starts now: `limit` (none: no limit) counts from here.
    pub fn start(&self, limit: Option<Span>) {
        let millis = limit.map_or(u64::MAX, |limit| limit.0.as_millis() as u64);
        let _ = nix::unistd::write(&self.0, &millis.to_le_bytes());
    }

    /// The request's output passed its limit: the jail ends (`output_limit`).
    pub fn output_cut(&self) {
        let _ = nix::unistd::write(&self.0, &0u64.to_le_bytes());
    }
}

/// Watching the jail is the supervisor's; holding, killing and reaping its init is
/// kill.rs's.
impl Init {
    /// Waits until init exits, passing signals on, relaying output, and killing the jail
    /// at the deadline, past the output limit, on an OOM kill (v1), or when brig is
    /// stopped and the grace period is over.
    fn supervise(
        &self,
        signals: &SignalFd,
        deadline: Option<Instant>,
        mut watch: Watch,
    ) -> Result<Ending> {
        let mut ending = Ending {
            by: EndedBy::Program,
            at_kill: None,
            program_ended: false,
        };
        let mut deadline = deadline;
        let mut stop_at: Option<Instant> = None;
        loop {
            let next = [deadline, stop_at].into_iter().flatten().min();
            let timeout = match next {
                Some(next) if ending.by == EndedBy::Program => {
                    let left = next.saturating_duration_since(Instant::now());
                    // Round up so the deadline has passed when poll returns.
                    let millis = left.as_micros().div_ceil(1000);
                    PollTimeout::try_from(millis.min(i32::MAX as u128) as i32)
                        .unwrap_or(PollTimeout::MAX)
                }
                _ => PollTimeout::NONE,
            };
            let mut sources = vec![
                (Source::Exit, self.pidfd()),
                (Source::Signals, signals.as_fd()),
            ];
            if let Some(output) = &watch.output {
                sources.extend(
                    output
                        .open_pipes()
                        .into_iter()
                        .map(|(index, fd)| (Source::Output(index), fd)),
                );
            }
            if let Some(audit) = &watch.audit {
                sources.push((Source::Audit, audit.fd()));
            }
            if let Some(oom) = &watch.oom {
                sources.push((Source::Oom, oom.as_fd()));
            }
            if let Some(clock) = &watch.clock {
                sources.push((Source::Clock, clock.as_fd()));
            }
            if let Some(report) = &watch.report
                && ending.by == EndedBy::Program
            {
                sources.push((Source::Report, report.channel.report_fd()));
            }
            let mut fds: Vec<PollFd> = sources
                .iter()
                .map(|(_, fd)| PollFd::new(*fd, PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(errno) => return Err(Error::os("wait for the jail", errno)),
            }
            let ready: Vec<Source> = sources
                .iter()
                .zip(&fds)
                .filter(|(_, fd)| fd.any().unwrap_or(false))
                .map(|((source, _), _)| *source)
                .collect();
            drop(fds);
            drop(sources);
            for source in &ready {
                match source {
                    Source::Output(index) => {
                        if let Some(output) = watch.output.as_deref_mut()
                            && !output.pump(*index)
                        {
                            ending.end(self, EndedBy::OutputLimit);
                        }
                    }
                    Source::Audit => {
                        if let Some(audit) = watch.audit.as_deref_mut() {
                            audit.drain();
                        }
                    }
                    // The kernel killed a process for memory: end the jail, as v2's
                    // memory.oom.group does by itself.
                    Source::Oom => {
                        ending.end(self, EndedBy::OutOfMemory);
                        watch.oom = None;
                    }
                    // The request started: its limit counts from now (the first word);
                    // any word after it: the request's output collector cut the output.
                    Source::Clock => {
                        let mut word = [0u8; 8];
                        let read = watch
                            .clock
                            .as_ref()
                            .map(|clock| nix::unistd::read(clock, &mut word));
                        match read {
                            Some(Ok(8)) if !watch.clock_started => {
                                watch.clock_started = true;
                                let millis = u64::from_le_bytes(word);
                                deadline = (millis != u64::MAX)
                                    .then(|| Instant::now() + Duration::from_millis(millis));
                            }
                            Some(Ok(8)) => ending.end(self, EndedBy::OutputLimit),
                            Some(Err(Errno::EINTR | Errno::EAGAIN)) => {}
                            // Closed: the clock has nothing more to say.
                            _ => watch.clock = None,
                        }
                    }
                    Source::Signals => {
                        while let Ok(Some(info)) = signals.read_signal() {
                            let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                                continue;
                            };
                            let _ = sys::pidfd_send_signal(self.pidfd(), signal);
                            let stopping = !matches!(signal, Signal::SIGUSR1 | Signal::SIGUSR2);
                            if stopping && stop_at.is_none() {
                                stop_at = Some(Instant::now() + STOP_GRACE);
                            }
                        }
                    }
                    Source::Report => {
                        if let Some(report) = watch.report.as_mut() {
                            let arrived = report.channel.read_available(&mut report.pending);
                            let status = arrived.iter().any(|message| {
                                matches!(message, Message::Exited(_) | Message::Signaled { .. })
                            });
                            report.messages.extend(arrived);
                            if status && ending.by == EndedBy::Program {
                                ending.program_ended = true;
                            }
                        }
                    }
                    Source::Exit => {}
                }
            }
            if ending.program_ended {
                return Ok(ending);
            }
            if ready.contains(&Source::Exit) {
                return Ok(ending);
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                ending.end(self, EndedBy::TimeLimit);
                deadline = None;
            }
            if stop_at.is_some_and(|stop_at| now >= stop_at) {
                ending.end(self, EndedBy::Stopped);
                stop_at = None;
            }
        }
    }
}

/// The program's end as the jail's init reported it (the first exec failure, else the
/// last status), or the setup error it reported instead. The program's usage (`Ended`,
/// for an early report) and a session's messages say nothing of it.
fn program_end(messages: Vec<Message>) -> Result<Option<ProgramEnd>> {
    let mut end = None;
    for message in messages {
        match message {
            Message::SetupError {
                stage,
                errno,
                message,
            } => {
                return Err(Error::from_jail(message, stage, errno.map(Errno::from_raw)));
            }
            Message::ExecError { code, message } => {
                return Ok(Some(ProgramEnd::ExecFailed { code, message }));
            }
            Message::Exited(code) => end = Some(ProgramEnd::Exited(code)),
            Message::Signaled { signal, cpu_ms } => {
                end = Some(ProgramEnd::Signaled {
                    signal,
                    cpu: Some(Duration::from_millis(cpu_ms)),
                })
            }
            Message::Ready
            | Message::ProgramError { .. }
            | Message::Ended { .. }
            | Message::Started { .. }
            | Message::Swept => {}
        }
    }
    Ok(end)
}
