//! A session's jail: assembled once, then given programs one after another for as long as
//! it lives (a `brig serve` session: commands, and the interpreter whose state persists
//! between code cells). Each program is started by the jail's init exactly as a one-shot
//! program is (rlimits → capabilities → no_new_privs → Landlock → seccomp → exec); the
//! jail's namespaces, cgroup and workspace outlive them. Dropped, the jail is killed
//! whole and its cgroup removed.

use super::Program;
use super::channel::{Command, Message};
use super::child::Shape;
use super::supervisor::Jail;
use crate::cgroup::{Usage, Version};
use crate::error::{AtStage, Context, Result, Stage};
use crate::net::forward::Forwarder;
use crate::net::policy::Policy;
use crate::plan::Plan;
use nix::sys::signal::Signal;
use std::os::fd::BorrowedFd;

pub use super::channel::Ended;

/// What a session's jail reports about its programs.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// Program `id` could not be started or executed: 125 (set-up), 126, 127 (not
    /// found); its `Ended` follows.
    Failed { id: u32, code: u8, message: String },
    /// Program `id` ended.
    Ended { id: u32, end: Ended },
    /// Program `id` runs as process `pid` of the jail (its PID namespace's number).
    Started { id: u32, pid: u32 },
}

pub struct SessionJail<'p> {
    jail: Jail<'p>,
    /// A frame's start, waiting for its rest.
    pending: Vec<u8>,
    /// Events read while waiting for a sweep to finish.
    queued: Vec<Event>,
    next_id: u32,
    /// `--net filtered`: relaying for the session's whole life, ...
    forwarder: Option<Forwarder>,
    /// ... under this policy (the plan's, until a client replaces it).
    network: Option<Policy>,
}

impl<'p> SessionJail<'p> {
    /// Builds the jail `plan` describes (its `command` is not run) and starts its
    /// network relay, if it has one.
    pub fn assemble(plan: &'p Plan) -> Result<SessionJail<'p>> {
        let mut jail = Jail::assemble_with(plan, Shape::Session)?;
        jail.channel()
            .report_without_waiting()
            .context(|| "make the jail's report pipe non-blocking".into())?;
        let forwarder = jail.start_network()?;
        Ok(SessionJail {
            jail,
            pending: Vec::new(),
            queued: Vec::new(),
            next_id: 1,
            network: forwarder.as_ref().and(plan.network.clone()),
            forwarder,
        })
    }

    pub fn plan(&self) -> &'p Plan {
        self.jail.plan()
    }

    /// The network policy the session relays under now; None: not `--net filtered`.
    pub fn network(&self) -> Option<&Policy> {
        self.network.as_ref()
    }

    /// Payload bytes the session's network relay has moved so far: sent out, received;
    /// (0, 0) without one (`--net filtered` only).
    pub fn network_bytes(&self) -> (u64, u64) {
        self.forwarder
            .as_ref()
            .map_or((0, 0), Forwarder::bytes_so_far)
    }

    /// Replaces the session's network policy (`--net filtered` only): new connections are
    /// judged by `policy` once this returns, and open ones it would refuse are cut. How
    /// many were cut.
    pub fn replace_network(&mut self, policy: Policy) -> Result<usize> {
        let forwarder = self.forwarder.as_ref().ok_or_else(|| {
            crate::error::Error::input(
                "the session has no filtered network to change; create it with --net filtered (an empty --allow-net list is allowed)",
            )
        })?;
        let ended = forwarder
            .replace_policy(policy.clone())
            .context(|| "hand the new network policy to the session's relay".into())?;
        self.network = Some(policy);
        Ok(ended)
    }

    /// The host uid and gid the jail's user maps to.
    pub fn host_ids(&self) -> (u32, u32) {
        self.jail.host_ids()
    }

    /// A root session's: the host uid and gid the jail's 0 maps to.
    pub fn root_host_ids(&self) -> Option<(u32, u32)> {
        self.jail.root_host_ids()
    }

    /// The workspace (the jail's home directory), opened inside the jail: paths are
    /// resolved beneath it.
    pub fn workspace(&self) -> BorrowedFd<'_> {
        self.jail
            .workspace()
            .expect("a session's jail has a workspace")
    }

    /// Starts `program` with `stdio` as its descriptors 0, 1, 2, ..., in a process group
    /// of its own; its id, for [`Event`]s and signals.
    pub fn spawn(&mut self, program: &Program, stdio: &[BorrowedFd]) -> Result<u32> {
        program.check()?;
        let id = self.next_id;
        self.next_id += 1;
        let command = Command::Spawn {
            id,
            program: program.clone(),
        };
        self.jail
            .channel()
            .send_command(&command, stdio)
            .context(|| "hand the program to the session's jail".into())
            .at(Stage::Spawn)?;
        Ok(id)
    }

    /// Starts `program` on a new terminal of the jail's own devpts (`cols` × `rows`),
    /// opened by the jail's init: the terminal is its stdin, stdout, stderr and
    /// controlling terminal, and it leads a session of its own. Its id, and the
    /// terminal's master, which only brig holds.
    pub fn spawn_terminal(
        &mut self,
        program: &Program,
        cols: u16,
        rows: u16,
    ) -> Result<(u32, std::os::fd::OwnedFd)> {
        program.check()?;
        let id = self.next_id;
        self.next_id += 1;
        let command = Command::SpawnTerminal {
            id,
            program: program.clone(),
            cols,
            rows,
        };
        self.discard_late_handovers();
        self.jail
            .channel()
            .send_command(&command, &[])
            .context(|| "hand the program to the session's jail".into())
            .at(Stage::Spawn)?;
        let master = self
            .receive_from_init("open a terminal")?
            .map_err(|errno| {
                crate::error::Error::os(
                    "open a terminal of the jail's /dev/ptmx (its devpts)",
                    errno,
                )
            })
            .at(Stage::Spawn)?;
        Ok((id, master))
    }

    /// A connection to `port` of the jail's own loopback (a server one of its programs
    /// runs), opened by the jail's init inside the jail's network namespace and handed
    /// over: the jail never holds it. It may still be being accepted (a listener's full
    /// backlog): wait until it is writable. The inner Err is the connect's errno
    /// (ECONNREFUSED: nothing listens there).
    pub fn dial(
        &mut self,
        port: u16,
    ) -> Result<std::result::Result<std::os::fd::OwnedFd, nix::errno::Errno>> {
        if !self.plan().namespaces.net {
            return Err(crate::error::Error::input(format!(
                "port {port}: the session shares the host's network (--net host): its loopback is the host's, which brig does not dial for a client; create it with --net none or --net filtered"
            )));
        }
        self.discard_late_handovers();
        self.jail
            .channel()
            .send_command(&Command::Dial { port }, &[])
            .context(|| format!("ask the session's jail to connect to its port {port}"))?;
        self.receive_from_init("connect to its loopback")
    }

    /// Drops what init handed over after brig gave up waiting for it (an answer later
    /// than [`SWEEP_WAIT`], from a jail whose init could not get a CPU), so that the
    /// next command's answer is its own: a terminal's master is never taken for a
    /// connection, nor the reverse. Nothing else comes from init on that socket while
    /// the session runs.
    fn discard_late_handovers(&self) {
        let channel = self.jail.channel();
        let Some(socket) = channel.descriptors_fd() else {
            return;
        };
        loop {
            let mut fds = [nix::poll::PollFd::new(socket, nix::poll::PollFlags::POLLIN)];
            let pending = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO)
                .is_ok_and(|ready| ready > 0);
            // EPIPE: init hung up (or sent no frame); nothing more to drop.
            if !pending || matches!(channel.receive_handed(), Err(nix::errno::Errno::EPIPE)) {
                return;
            }
        }
    }

    /// The descriptor init hands over at once after a command (or the errno it sent
    /// instead); a jail whose init cannot get a CPU (or died) is given up after
    /// [`SWEEP_WAIT`].
    fn receive_from_init(
        &self,
        what: &str,
    ) -> Result<std::result::Result<std::os::fd::OwnedFd, nix::errno::Errno>> {
        let channel = self.jail.channel();
        let socket = channel
            .descriptors_fd()
            .expect("a session's jail has a descriptor socket");
        let mut fds = [
            nix::poll::PollFd::new(socket, nix::poll::PollFlags::POLLIN),
            nix::poll::PollFd::new(self.jail.init_pidfd(), nix::poll::PollFlags::POLLIN),
        ];
        let timeout = nix::poll::PollTimeout::try_from(SWEEP_WAIT.as_millis() as i32)
            .unwrap_or(nix::poll::PollTimeout::MAX);
        let arrived =
            nix::poll::poll(&mut fds, timeout).is_ok_and(|_| fds[0].any().unwrap_or(false));
        if !arrived {
            return Err(crate::error::Error::setup(format!(
                "the session's jail did not {what} (its init did not answer)"
            ))
            .at(Stage::Spawn));
        }
        Ok(channel.receive_handed())
    }

    /// Sends `signal` to program `id` (to its process group with `group`).
    pub fn signal(&self, id: u32, signal: Signal, group: bool) -> Result<()> {
        let command = Command::Signal {
            id,
            signal: signal as i32,
            group,
        };
        self.jail
            .channel()
            .send_command(&command, &[])
            .context(|| "signal a program of the session".into())
    }

    /// Kills every process of the jail but its init, the programs `keep`, and the
    /// programs `keep_groups` with their process groups; waits until they are gone (at
    /// most [`SWEEP_WAIT`]).
    pub fn sweep(&mut self, keep: &[u32], keep_groups: &[u32]) -> Result<()> {
        let command = Command::Sweep {
            keep: keep.to_vec(),
            keep_groups: keep_groups.to_vec(),
        };
        self.jail
            .channel()
            .send_command(&command, &[])
            .context(|| "end the processes of a session".into())?;
        let deadline = std::time::Instant::now() + SWEEP_WAIT;
        loop {
            for message in self.jail.channel().read_available(&mut self.pending) {
                match message {
                    Message::Swept => return Ok(()),
                    other => self.queued.extend(event(other)),
                }
            }
            if !self.await_report(deadline) {
                return Ok(());
            }
        }
    }

    /// Waits until program `id` has ended and the jail's init has reaped it (no longer
    /// counted against the session's pids), at most [`SWEEP_WAIT`]; its end, or None when
    /// it did not come in time. Other events wait for [`Self::events`].
    pub fn wait_for_end(&mut self, id: u32) -> Option<Ended> {
        let ended = |event: &Event| matches!(event, Event::Ended { id: of, .. } if *of == id);
        let deadline = std::time::Instant::now() + SWEEP_WAIT;
        let mut index = 0;
        loop {
            if let Some(at) = self.queued[index..].iter().position(ended) {
                return match self.queued.remove(index + at) {
                    Event::Ended { end, .. } => Some(end),
                    _ => None,
                };
            }
            index = self.queued.len();
            let arrived = self.jail.channel().read_available(&mut self.pending);
            if !arrived.is_empty() {
                self.queued.extend(arrived.into_iter().filter_map(event));
                continue;
            }
            if !self.await_report(deadline) {
                return None;
            }
        }
    }

    /// Waits until the jail reports something; false once `deadline` has passed or the
    /// jail's init has died (nothing more will come).
    fn await_report(&self, deadline: std::time::Instant) -> bool {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds = [
            nix::poll::PollFd::new(self.events_fd(), nix::poll::PollFlags::POLLIN),
            nix::poll::PollFd::new(self.init_fd(), nix::poll::PollFlags::POLLIN),
        ];
        let timeout = nix::poll::PollTimeout::try_from(left.as_millis().max(1) as i32)
            .unwrap_or(nix::poll::PollTimeout::MAX);
        !nix::poll::poll(&mut fds, timeout).is_ok_and(|_| fds[1].any().unwrap_or(false))
    }

    /// Readable when the jail has [`Event`]s to read.
    pub fn events_fd(&self) -> BorrowedFd<'_> {
        self.jail.channel().report_fd()
    }

    /// Readable when the jail's init has died (the session is over).
    pub fn init_fd(&self) -> BorrowedFd<'_> {
        self.jail.init_pidfd()
    }

    /// The events that have arrived; never blocks.
    pub fn events(&mut self) -> Vec<Event> {
        let mut events = std::mem::take(&mut self.queued);
        let arrived = self.jail.channel().read_available(&mut self.pending);
        events.extend(arrived.into_iter().filter_map(event));
        events
    }

    /// What the session's cgroup counts so far (memory peak, OOM kills, pids, CPU).
    pub fn usage(&self) -> Option<Usage> {
        self.jail.usage()
    }

    pub fn cgroup_version(&self) -> Option<Version> {
        self.jail.cgroup_version()
    }

    /// Whether the jail can be paused: it has a cgroup with a freezer.
    pub fn freezable(&self) -> bool {
        self.jail
            .cgroup()
            .is_some_and(crate::cgroup::JailCgroup::freezable)
    }

    /// Stops every process of the jail where it is (the cgroup freezer), init too: no
    /// program may be started or signalled until [`SessionJail::thaw`].
    pub fn freeze(&self) -> Result<()> {
        match self.jail.cgroup() {
            Some(cgroup) => cgroup.freeze(),
            None => Err(crate::error::Error::host(format!(
                "pause: the session's jail has no cgroup of its own to freeze; {}",
                crate::cgroup::delegation_fix()
            ))),
        }
    }

    pub fn thaw(&self) -> Result<()> {
        self.jail
            .cgroup()
            .map_or(Ok(()), crate::cgroup::JailCgroup::thaw)
    }

    /// Ends the session: every process killed, init reaped, the network relay stopped;
    /// the cgroup goes as this is dropped. A paused jail is thawed first: a frozen init
    /// does not die of its SIGKILL (v1) until it is.
    pub fn end(mut self) {
        let _ = self.thaw();
        self.jail.end();
        if let Some(forwarder) = self.forwarder.take() {
            forwarder.finish();
        }
    }
}

/// How long a sweep may take before brig goes on without its word (a jail whose init
/// cannot get a CPU behind a fork bomb; its processes die with the jail at the latest).
const SWEEP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn event(message: Message) -> Option<Event> {
    match message {
        Message::ProgramError { id, code, message } => Some(Event::Failed { id, code, message }),
        Message::Ended { id, end } => Some(Event::Ended { id, end }),
        Message::Started { id, pid } => Some(Event::Started { id, pid }),
        _ => None,
    }
}

impl Drop for SessionJail<'_> {
    fn drop(&mut self) {
        self.jail.end();
    }
}
