//! `brig serve`: a jail server with a warm pool. It listens on a unix socket; each run
//! gets a fresh jail, never reused: one from the pool (assembled before the request came:
//! namespaces, id maps, cgroup, mount tree, init waiting) when the request's jail has the
//! pool's shape, else one built for it. `brig run --server` is its client (`client.rs`);
//! [`Client`] (`api.rs`) is the typed client of its sessions, which `brig session ...`
//! and any Rust program use.
//!
//! - `protocol.rs`: the versioned wire format (length-prefixed JSON, SCM_RIGHTS), the
//!   requests and a run's replies; `reply.rs`: every frame of a session's answer, typed;
//! - `server/`: the listening process, single-threaded: it accepts, checks the peer and
//!   the request, and hands each run to a runner (one file per job, see its module doc);
//! - `runner.rs`: a process forked from the server for each jail: it assembles the jail
//!   (before the request, for the pool), runs the program with the client's streams,
//!   answers the client directly and exits; it dispatches to `warm.rs` and `session.rs`,
//!   and all three take what they share from `runner_common.rs`;
//! - `wire.rs`: every frame between the server and its runners (`Job`, `Report`,
//!   `ToSession`), and what a runner is forked for (`Start`);
//! - `policy.rs`: what a client may ask for: one rule per option, checked in one place;
//! - `session.rs`: a session's runner, which keeps one jail between requests (commands,
//!   code cells in a persistent interpreter), and `workspace.rs`, its files.

mod api;
pub mod client;
mod files;
mod kernel;
pub mod lifecycle;
pub mod metrics;
pub mod policy;
pub mod protocol;
pub mod reply;
mod runner;
mod runner_common;
mod server;
mod session;
mod session_dial;
mod session_meta;
mod session_network;
mod warm;
mod watch;
mod wire;
mod workspace;

use crate::options::JailOptions;
use crate::units::Span;
use clap::Args;
use std::path::PathBuf;

pub use api::{Client, Create, Exec, Frames, ProcessRef, Reading, Session};
pub use policy::Loosening;
pub use server::serve;

#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// The unix socket to listen on (created 0600, or 0660 with --socket-group). Its
    /// directory, and each above, must be owned by root or the server's user and writable
    /// by no one else unless sticky (as /tmp); brig refuses another.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,

    /// Jails kept assembled and waiting for a request.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub pool: usize,

    /// Pooled jails with Python already started inside (under all their restrictions):
    /// `python3 -c CODE`, `python3 SCRIPT` and `python3 -` requests of the pool's shape
    /// skip the interpreter's startup.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warm_python: usize,

    /// Pooled jails with Node already started inside (under all their restrictions):
    /// `node -e CODE`, `node SCRIPT` and `node -` requests of the pool's shape skip its
    /// startup.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warm_node: usize,

    /// Session jails kept assembled, with Python started inside, for `session_create`
    /// requests of the server's shape.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub session_pool: usize,

    /// Sessions open at once; more `session_create` requests are refused.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_sessions: usize,

    /// Sessions one uid may have open at once; more of its `session_create` requests are
    /// refused while other uids' are served. Default: half of --max-sessions (rounded
    /// up); 0 for no cap of its own.
    #[arg(long, value_name = "N")]
    pub max_sessions_per_uid: Option<usize>,

    /// A session's total life, by default and at most (a client may ask for less).
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub session_timeout: Span,

    /// A session with no request for this long ends, by default and at most.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub idle_timeout: Span,

    /// Jails running at once; more requests wait (--queue-timeout).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_jails: usize,

    /// Jails one uid may run at once; its further requests wait (--queue-timeout) while
    /// other uids' are served. Default: half of --max-jails (rounded up); 0 for no cap
    /// of its own.
    #[arg(long, value_name = "N")]
    pub max_jails_per_uid: Option<usize>,

    /// Connections one uid may hold open with requests not yet running (being sent, or
    /// waiting for a slot); more are refused at once. A request must arrive whole
    /// within 5s of connecting. 0 for no cap.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_connections_per_uid: usize,

    /// How long a request waits for a free slot before it fails.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub queue_timeout: Span,

    /// On SIGTERM, how long running jails (and session requests) may finish before they
    /// are ended and their clients told that the server is draining.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub drain_grace: Span,

    /// Let this group's members connect too (the socket becomes 0660).
    #[arg(long, value_name = "GROUP")]
    pub socket_group: Option<String>,

    /// Clients may bind host paths under DIR into their jails (repeatable); no other.
    #[arg(long = "allow-bind-under", value_name = "DIR")]
    pub allow_bind_under: Vec<PathBuf>,

    /// Let clients loosen isolation this way (repeatable); refused otherwise. Limits
    /// (time, memory, pids, cpus, CPU time, output, each tmpfs, each rlimit, network
    /// bytes and connections) may only ever be tightened.
    #[arg(long = "client-may", value_name = "WHAT")]
    pub client_may: Vec<Loosening>,

    /// Print the status of the server on --socket and exit.
    #[arg(long)]
    pub status: bool,

    /// Read the jails' default options from a YAML file (as `brig run --config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The defaults of every jail, as for `brig run` (`--audit-log` is the server's: one
    /// line per run with the client's uid and pid and the program it ran).
    #[command(flatten)]
    pub options: JailOptions,
}
