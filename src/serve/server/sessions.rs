//! The session registry: opening a session (a pooled session jail or one built for it),
//! routing a session's requests to its runner, listing sessions.

use super::admit::{Full, full};
use super::pool::{Phase, Role, Runner, SESSIONS};
use super::{Server, with_placeholder};
use crate::error::{Context, Error, Result};
use crate::options::JailOptions;
use crate::plan::Plan;
use crate::serve::policy;
use crate::serve::protocol::{self, Request};
use crate::serve::reply::{SessionInfo, SessionReply};
use crate::serve::wire::{Opening, SessionStart, Start, ToSession};
use crate::serve::{lifecycle, session_meta, session_network};
use crate::units::{Size, Span};
use crate::verdict::Peer;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// An open session, as the server knows it.
pub(super) struct SessionEntry {
    pub(super) id: String,
    pub(super) owner: Peer,
    pub(super) created: Instant,
    pub(super) created_at: std::time::SystemTime,
    pub(super) last_request: Instant,
    pub(super) requests: u64,
    /// The session's end (its runner ends it then), moved by session_set_timeout.
    pub(super) ends_at: Instant,
    pub(super) metadata: session_meta::Metadata,
    pub(super) limits: session_meta::Limits,
    pub(super) activity: session_meta::Activity,
    /// Its `session_close` was routed: the server knows it no more (not listed, no
    /// request routed) while its runner tears it down, so that a client answered
    /// `closed` never finds it again.
    pub(super) closing: bool,
    /// Paused since then (`session_pause` routed): its end moves meanwhile
    /// (`lifecycle.rs`).
    pub(super) paused_at: Option<Instant>,
    /// Its jail has a cgroup with a freezer (else `session_pause` is refused).
    pub(super) freezable: bool,
}

impl Server {
    /// Opens a session: a pooled session jail when the client asks for the server's
    /// shape, else one built for it. The runner answers the client with the session's id.
    pub(super) fn create_session(
        &mut self,
        stream: &UnixStream,
        asked: SessionAsk,
        peer: Peer,
    ) -> Result<()> {
        let SessionAsk {
            options: mut client,
            session_timeout,
            idle_timeout,
            workspace_size,
            metadata,
            secrets,
            root,
        } = asked;
        session_meta::check_metadata(&metadata)?;
        let of_uid = self
            .runners
            .iter()
            .filter_map(Runner::session)
            .filter(|session| session.owner.uid == peer.uid)
            .count();
        let (max, per_uid) = (self.args.max_sessions, self.sessions_per_uid);
        match full(self.status.sessions, of_uid, max, per_uid) {
            Some(Full::All) => {
                return Err(Error::busy(format!(
                    "brig serve: {} sessions are open (--max-sessions); close one or retry later",
                    self.status.sessions
                )));
            }
            Some(Full::Uid) => {
                return Err(Error::busy(format!(
                    "brig serve: uid {} has {of_uid} sessions open, its share (--max-sessions-per-uid {per_uid}); close one or retry later",
                    peer.uid
                )));
            }
            None => {}
        }
        let session_timeout = at_most(
            "session_timeout",
            session_timeout,
            self.args.session_timeout,
        )?;
        let idle_timeout = at_most("idle_timeout", idle_timeout, self.args.idle_timeout)?;
        if !client.command.is_empty() {
            return Err(Error::input(
                "session_create: options take no \"command\"; run programs with session_exec",
            ));
        }
        client.report = None;
        client.report_fd = None;
        client.audit_log = None;
        // A session with secrets gets a jail built for it: its own CA and placeholders.
        // So does a root session: its jail maps a second id.
        let pooled = has_pool_shape(&client, workspace_size) && secrets.is_empty() && !root;
        client.home_size = workspace_size.or(client.home_size);
        // A session's workspace_size is its jail's --home-size.
        let origins: policy::Origins = workspace_size
            .map(|_| ("home-size".to_string(), "workspace_size".to_string()))
            .into_iter()
            .collect();
        let mut options = self.defaults.clone().overlay(client.clone());
        options.given_secrets = secrets;
        let asked = if pooled {
            policy::Asked::Prepared(policy::Jail::of(&self.session_plan))
        } else {
            policy::Asked::Built(Box::new(with_placeholder(options.clone())))
        };
        let planned = policy::check(&client, &origins, &self.policy(), asked)?;
        let mut id_bytes = [0u8; 16];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").context(|| "open /dev/urandom".into())?,
            &mut id_bytes,
        )
        .context(|| "read /dev/urandom".into())?;
        let id: String = id_bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut opening = Opening {
            id,
            owner: peer,
            session_timeout_ms: session_timeout.as_millis() as u64,
            idle_timeout_ms: idle_timeout.as_millis() as u64,
            drain_grace_ms: self.args.drain_grace.0.as_millis() as u64,
            metadata,
            limits: session_meta::Limits::default(),
            freezable: false,
        };
        let connection = OwnedFd::from(
            stream
                .try_clone()
                .context(|| "keep the client's connection".into())?,
        );
        let ready = self
            .runners
            .iter()
            .position(|runner| runner.ready_in(SESSIONS));
        match ready {
            Some(at) if pooled => {
                opening.limits = session_meta::Limits::of(&self.session_plan, idle_timeout);
                opening.freezable = freezable(&self.session_plan);
                let runner = &mut self.runners[at];
                let entry = SessionEntry::of(&opening);
                let open = ToSession::Open(opening);
                protocol::write_frame(runner.control.as_fd(), &open, &[connection.as_fd()])?;
                runner.role = Role::Session(Box::new(entry));
                runner.phase = Phase::Busy;
                self.count_ready();
            }
            _ => {
                let mut plan = match planned {
                    Some(plan) => plan,
                    None => Plan::resolve(with_placeholder(options.clone()))?,
                };
                if root {
                    crate::identity::allow_root(&mut plan.identity)?;
                }
                plan.limits.cgroup.oom_kills_one = true;
                plan.limits.cgroup.pausable = true;
                opening.limits = session_meta::Limits::of(&plan, idle_timeout);
                opening.freezable = freezable(&plan);
                let start = SessionStart {
                    plan,
                    options,
                    opening,
                    connection,
                };
                self.spawn(Start::Session(Box::new(start)))?;
            }
        }
        self.status.sessions += 1;
        Ok(())
    }

    /// Hands a request to its session's runner, which answers the client. The request
    /// goes in a memfd: what the server writes to a busy runner stays a few bytes.
    pub(super) fn route_to_session(
        &mut self,
        stream: &UnixStream,
        request: &Request,
        body: &[u8],
        peer: Peer,
    ) -> Result<()> {
        let id = request.session().unwrap_or_default();
        let gone = || {
            Error::not_found(format!(
                "brig serve: no session {id} (closed, expired or never created)"
            ))
        };
        let (control, session) = self
            .runners
            .iter_mut()
            .find_map(|runner| match &mut runner.role {
                Role::Session(session) if session.id == id && !session.closing => {
                    Some((&runner.control, session))
                }
                _ => None,
            })
            .ok_or_else(gone)?;
        if peer.uid != session.owner.uid && peer.uid != 0 {
            return Err(Error::input(format!(
                "brig serve: session {id} belongs to another user (uid {}); use your own",
                session.owner.uid
            )));
        }
        crate::serve::session::check_request(request)?;
        let memfd =
            nix::sys::memfd::memfd_create(c"brig-request", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .context(|| "create a memfd for a session's request".into())?;
        std::io::Write::write_all(
            &mut std::fs::File::from(memfd.try_clone().context(|| "dup".into())?),
            body,
        )
        .context(|| "write a session's request".into())?;
        let connection = stream
            .try_clone()
            .context(|| "keep the client's connection".into())?;
        let frame = ToSession::Request { peer };
        // Non-blocking: a runner that stopped reading must not stop the server.
        let _ = nix::fcntl::fcntl(
            control,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        );
        protocol::write_frame(
            control.as_fd(),
            &frame,
            &[connection.as_fd(), memfd.as_fd()],
        )
        .map_err(|err| match err.errno() {
            Some(nix::errno::Errno::EAGAIN) => Error::busy(format!(
                "brig serve: session {id} has too many requests waiting; retry once its current one is answered"
            )),
            _ => gone(),
        })?;
        session.last_request = Instant::now();
        session.requests += 1;
        if let Request::SessionSetTimeout { timeout, .. } = request {
            session.ends_at = Instant::now() + timeout.0;
        }
        lifecycle::routed(
            request,
            &mut session.ends_at,
            &mut session.paused_at,
            Instant::now(),
        );
        session.activity.routed(memfd);
        if let Request::SessionClose { .. } = request {
            session.closing = true;
        }
        Ok(())
    }

    /// What the server checks of a session request before its runner sees it, beyond
    /// its owner (`route_to_session`): a new network by the server's policy, a new end
    /// against its --session-timeout.
    pub(super) fn admit_to_session(&self, request: &Request, peer: &Peer) -> Result<()> {
        let id = request.session().unwrap_or_default();
        // Another uid's session: route_to_session refuses it, before these checks say
        // anything about the server's policy.
        let owned = self
            .runners
            .iter()
            .filter_map(Runner::session)
            .find(|session| session.id == id && (session.owner.uid == peer.uid || peer.uid == 0));
        let Some(session) = owned else {
            return Ok(());
        };
        match request {
            Request::SessionNetwork { .. }
                if session.limits.net != crate::options::NetMode::Filtered =>
            {
                Err(session_network::fixed(id, session.limits.net))
            }
            Request::SessionNetwork {
                allow_net,
                deny_net,
                add_host,
                ..
            } => {
                let client = session_network::asked_options(
                    allow_net,
                    deny_net,
                    add_host.as_deref().unwrap_or(&[]),
                );
                let planned = with_placeholder(session_network::planned(&self.defaults, &client));
                session_network::check(&client, &self.policy(), planned)
            }
            Request::SessionSetTimeout { timeout, .. } => {
                session_meta::check_timeout(*timeout, self.args.session_timeout).map(|_| ())
            }
            Request::SessionPause { .. } if !session.freezable => Err(lifecycle::unfreezable(id)),
            _ => Ok(()),
        }
    }

    /// The peer's sessions (all of them for root and the server's own uid).
    pub(super) fn list_sessions(
        &mut self,
        peer: &Peer,
        filter: &session_meta::Metadata,
    ) -> SessionReply {
        let own = nix::unistd::geteuid().as_raw();
        let sessions = self
            .runners
            .iter_mut()
            .filter_map(Runner::session_mut)
            // Closed, or past its end (its runner is ending it): gone for its clients. A
            // paused session's end moves with the clock.
            .filter(|session| {
                !session.closing
                    && lifecycle::end_as_of(session.ends_at, session.paused_at, Instant::now())
                        > Instant::now()
            })
            .filter(|session| peer.uid == 0 || peer.uid == own || peer.uid == session.owner.uid)
            .filter(|session| session_meta::matches(&session.metadata, filter))
            .map(|session| {
                let (busy, last_done) = session.activity.state();
                // Idle since its last request was answered (or routed, if later); a busy
                // session has no idle deadline running.
                let idle_since = session_meta::unix_ms(session.last_request)
                    .max(last_done.map_or(0, session_meta::wall_ms));
                let paused = session.paused_at.is_some();
                let idle_deadline =
                    (!busy && !paused).then(|| idle_since + session.limits.idle_timeout_ms);
                let ends_at =
                    lifecycle::end_as_of(session.ends_at, session.paused_at, Instant::now());
                SessionInfo {
                    session: session.id.clone(),
                    uid: session.owner.uid,
                    metadata: session.metadata.clone(),
                    state: match (paused, busy) {
                        (true, _) => "paused",
                        (false, true) => "busy",
                        (false, false) => "idle",
                    }
                    .into(),
                    created_at_ms: session_meta::wall_ms(session.created_at),
                    ends_at_ms: session_meta::unix_ms(ends_at),
                    idle_deadline_ms: idle_deadline,
                    limits: session.limits.clone(),
                    age_ms: session.created.elapsed().as_millis() as u64,
                    idle_ms: session.last_request.elapsed().as_millis() as u64,
                    requests: session.requests,
                }
            })
            .collect();
        SessionReply::Sessions { sessions }
    }
}
/// A session's timeout as asked (`field`), or the server's when not asked: longer than 0,
/// and no longer than the server's.
fn at_most(field: &str, asked: Option<Span>, ours: Span) -> Result<Duration> {
    match asked {
        Some(asked) if asked.0.is_zero() => Err(Error::input(format!(
            "{field}: must be longer than 0; e.g. 10m"
        ))),
        Some(asked) if asked.0 > ours.0 => Err(Error::input(format!(
            "{field} {asked}: longer than this server allows ({ours}); ask for at most {ours}"
        ))),
        asked => Ok(asked.unwrap_or(ours).0),
    }
}

/// Whether a jail of `plan` can be paused: a cgroup of its own with a freezer.
fn freezable(plan: &Plan) -> bool {
    plan.limits
        .placement
        .as_ref()
        .is_some_and(|placement| placement.freezer)
}

/// A session asking for nothing of its own (no option, no workspace size) gets a jail
/// of the session pool's shape.
pub(super) fn has_pool_shape(client: &JailOptions, workspace_size: Option<Size>) -> bool {
    workspace_size.is_none()
        && serde_json::to_value(client)
            .ok()
            .and_then(|value| value.as_object().map(|object| object.is_empty()))
            .unwrap_or(false)
}

/// What a `session_create` asks for.
pub(super) struct SessionAsk {
    pub(super) options: JailOptions,
    pub(super) session_timeout: Option<Span>,
    pub(super) idle_timeout: Option<Span>,
    pub(super) workspace_size: Option<Size>,
    pub(super) metadata: session_meta::Metadata,
    /// Given with their values: into the jail's plan, nowhere else.
    pub(super) secrets: Vec<crate::net::secrets::Given>,
    /// Inside root for its commands (`identity::allow_root`): a jail built for it.
    pub(super) root: bool,
}

impl SessionEntry {
    pub(super) fn of(opening: &Opening) -> SessionEntry {
        SessionEntry {
            id: opening.id.clone(),
            owner: opening.owner,
            created: Instant::now(),
            created_at: std::time::SystemTime::now(),
            last_request: Instant::now(),
            requests: 0,
            ends_at: Instant::now() + Duration::from_millis(opening.session_timeout_ms),
            metadata: opening.metadata.clone(),
            limits: opening.limits.clone(),
            activity: session_meta::Activity::default(),
            closing: false,
            paused_at: None,
            freezable: opening.freezable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_session_timeout_is_the_servers_unless_asked_shorter() {
        let span = |text: &str| text.parse::<Span>().expect("a span");
        // (asked, the server's) -> the timeout, or what the one-line error says
        for (asked, ours, expected) in [
            (None, "10m", Ok(600)),
            (Some("5m"), "10m", Ok(300)),
            (Some("10m"), "10m", Ok(600)),
            (Some("1s"), "10m", Ok(1)),
            (
                Some("11m"),
                "10m",
                Err("idle_timeout 660s: longer than this server allows (600s)"),
            ),
            (
                Some("0s"),
                "10m",
                Err("idle_timeout: must be longer than 0"),
            ),
        ] {
            let got = at_most("idle_timeout", asked.map(span), span(ours));
            match (got, expected) {
                (Ok(got), Ok(secs)) => assert_eq!(got.as_secs(), secs, "{asked:?} of {ours}"),
                (Err(err), Err(says)) => {
                    assert_eq!(err.kind(), ErrorKind::BadInput, "{asked:?} of {ours}");
                    assert!(err.to_string().contains(says), "{asked:?} of {ours}: {err}");
                }
                (got, expected) => panic!("{asked:?} of {ours}: {got:?}, not {expected:?}"),
            }
        }
    }

    #[test]
    fn a_session_gets_a_pooled_jail_only_when_it_asks_for_nothing_of_its_own() {
        // (the client's options, workspace_size) -> a jail of the session pool's shape
        for (options, workspace_size, expected) in [
            (serde_json::json!({}), None, true),
            (serde_json::json!({}), Some(Size(1 << 20)), false),
            (serde_json::json!({"memory": "64M"}), None, false),
            (
                serde_json::json!({"allow-net": ["example.com"]}),
                None,
                false,
            ),
            // An empty list, as a default, is nothing of its own.
            (serde_json::json!({"allow-net": []}), None, true),
            (serde_json::json!({"env": ["A=1"]}), None, false),
            (serde_json::json!({"net": "filtered"}), None, false),
            (serde_json::json!({"quiet-limits": false}), None, true),
        ] {
            let client: JailOptions =
                serde_json::from_value(options.clone()).expect("valid options");
            assert_eq!(
                has_pool_shape(&client, workspace_size),
                expected,
                "{options}, workspace_size {workspace_size:?}"
            );
        }
    }
}
