//! The server↔runner frames, in one place (as youki keeps its parent↔child messages in
//! `process/message.rs`). They travel the control socket between the server and the
//! runner it forked, as the protocol's length-prefixed JSON frames, with descriptors as
//! SCM_RIGHTS. Clients never see them. A runner starts from what it is forked for
//! (`Start`, in the memory it shares with the server); then the server sends it its `Job`,
//! or a session's runner `ToSession` frames (its `Opening`, then each request); a runner
//! tells the server its `Report`s.
//!
//! This module depends on no runner: `runner.rs`, `warm.rs` and `session.rs` take their
//! frames from here.

use super::protocol::StdioMode;
use super::session_meta;
use crate::jail::Program;
use crate::options::JailOptions;
use crate::plan::Plan;
use crate::units::Span;
use crate::verdict::Peer;
use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;

/// What the server sends a runner with a request (and, as SCM_RIGHTS, the client's
/// connection, then its stdin, stdout and stderr in `fds` mode).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Job {
    /// The server's defaults with the client's options on top, checked: the plan of a
    /// jail built for this job.
    pub options: JailOptions,
    /// What runs, and for how long at most.
    pub program: Program,
    pub time_limit: Option<Span>,
    /// Of the plan the job runs under.
    pub config_digest: String,
    pub stdio: StdioMode,
    pub stdin: Option<String>,
    pub peer: Peer,
}

/// What a runner tells the server.
#[derive(Debug, Deserialize, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Report {
    /// The pooled jail is assembled and waits.
    Ready,
    /// The pooled jail could not be assembled.
    Failed { message: String },
    /// The client has its answer; the jail is being torn down.
    Answered,
    /// The jail of a runner forked for a request (a session's own, a one-shot run's) is
    /// assembled: the server times its build (`metrics.rs`).
    Built,
    /// A session's counts since it began (its OOM kills, its network's bytes), after an
    /// exec and as it ends: the server keeps the totals.
    Counters(super::metrics::SessionCounters),
    /// A session's `session_pause` failed (its freeze did not finish): the server, which
    /// marked the session paused as it routed the request, marks it running again.
    NotPaused,
}

/// The interpreters a pooled jail can keep started (how each is launched: `warm.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warm {
    Python,
    Node,
}

/// What a runner is forked for. The server decides it and keeps what it needs of it; the
/// forked runner starts from it (the plans of the server's own jails it reads from the
/// server's memory it shares, `runner::Prepared`).
pub enum Start {
    /// Assemble the server's default jail, with `warm`'s interpreter started in it if
    /// any, and wait for a job.
    Pooled { warm: Option<Warm> },
    /// Assemble a session's jail of the server's shape, start its interpreter, and wait
    /// for a session to serve.
    SessionPool,
    /// Assemble the jail of this job and run it (its descriptors: connection, streams).
    ForJob(Box<Job>, Vec<OwnedFd>),
    /// Assemble a session's own jail and serve it.
    Session(Box<SessionStart>),
}

/// A session of a shape of its own: its plan, its options, the server's word that it is
/// created, and the client's connection.
pub struct SessionStart {
    pub plan: Plan,
    pub options: JailOptions,
    pub opening: Opening,
    pub connection: OwnedFd,
}

/// A session as the server opens it.
#[derive(Debug, Deserialize, Serialize)]
pub struct Opening {
    pub id: String,
    pub owner: Peer,
    pub session_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    /// The server's --drain-grace: a request running when the server drains may take
    /// this long, then the session ends.
    #[serde(default)]
    pub drain_grace_ms: u64,
    /// The server's own (`session_list`), not sent to the runner.
    #[serde(skip)]
    pub metadata: session_meta::Metadata,
    #[serde(skip)]
    pub limits: session_meta::Limits,
    /// The session's jail has a cgroup with a freezer: `session_pause` can be served.
    #[serde(skip)]
    pub freezable: bool,
}

/// Why a session ends when its server drains (SIGTERM, SIGINT); what its waiting clients
/// are told.
pub const DRAINING: &str = "the server is draining";

/// What the server sends a session's runner, with the client's connection.
#[derive(Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToSession {
    /// The session is created: answer the client with its id.
    Open(Opening),
    /// A request for the session (checked by the server: its owner, its form). Its
    /// descriptors: the connection, then a memfd holding the request's frame (which may
    /// be large: the server's writes to a busy runner must stay small).
    Request { peer: Peer },
}
