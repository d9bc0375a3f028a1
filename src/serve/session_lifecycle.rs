//! A session's runner pausing, resuming and measuring its jail. `session_pause` freezes
//! every process of the jail with the cgroup freezer (`cgroup/freeze.rs`), the jail's
//! init too; `session_resume` thaws them where they stopped. While paused the session's
//! end moves with the clock and its idle timer does not run (`lifecycle.rs`, the same
//! arithmetic the server keeps), and the requests that need the jail's processes
//! (exec, cells, stdin, signals, terminals, connect, network) are refused (`busy`): a
//! frozen init starts and signals nothing. Files, watchers, `session_ps`, `session_stats`
//! and timeouts are served. A command's own `time_limit` is wall-clock and keeps
//! running. `session_stats` reads the cgroup's counters (the reader the verdict uses)
//! and the workspace's file system.

use super::session_process::Listener;
use super::*;
use crate::serve::reply::SessionStats;
use crate::serve::{lifecycle, session_meta};

/// The runner's side of a session's pause and its CPU readings.
#[derive(Default)]
pub(super) struct Lifecycle {
    /// Paused since then.
    paused_at: Option<Instant>,
    /// The session's end moves by the time paused from then on: the pause's start, or a
    /// `session_set_timeout` while paused (whose timeout runs from the resume).
    end_stopped_at: Option<Instant>,
    /// The previous `session_stats`' CPU reading (when, microseconds used), for the
    /// percent used since.
    last_cpu: Option<(Instant, u64)>,
}

impl Lifecycle {
    pub(super) fn paused(&self) -> bool {
        self.paused_at.is_some()
    }
}

/// Whether a request needs the jail's processes to run (a frozen init starts, signals
/// and feeds nothing): refused while the session is paused. Files, watchers, `session_ps`
/// and `session_set_timeout` are the runner's own and are served.
fn needs_the_jail(request: &Request) -> bool {
    matches!(
        request,
        Request::SessionExec { .. }
            | Request::SessionContext { .. }
            | Request::SessionStdin { .. }
            | Request::SessionSignal { .. }
            | Request::SessionKill { .. }
            | Request::SessionResize { .. }
            | Request::SessionConnect { .. }
            | Request::SessionNetwork { .. }
    )
}

impl Session<'_> {
    /// Answers `session_pause`, `session_resume` and `session_stats`; while paused,
    /// refuses what a frozen jail cannot serve. Any other request is handed back.
    pub(super) fn lifecycle_request(
        &mut self,
        request: Result<Request>,
        connection: OwnedFd,
        memfd: OwnedFd,
    ) -> Option<(Result<Request>, OwnedFd, OwnedFd)> {
        let reply = match &request {
            Ok(Request::SessionPause { .. }) => self.pause(),
            Ok(Request::SessionResume { .. }) => self.resume(),
            Ok(Request::SessionStats { .. }) => Ok(self.stats()),
            // Its new end is set from now (`handle`); the pause counts from now too, so
            // that the timeout runs from the resume (as the server counts it).
            Ok(Request::SessionSetTimeout { .. }) if self.lifecycle.paused() => {
                self.lifecycle.end_stopped_at = Some(Instant::now());
                return Some((request, connection, memfd));
            }
            Ok(asked) if self.lifecycle.paused() && needs_the_jail(asked) => {
                Err(Error::busy(format!(
                    "brig serve: session {} is paused; session_resume it first",
                    self.id
                )))
            }
            _ => return Some((request, connection, memfd)),
        };
        let mut client = Listener::new(connection).answering(Some(memfd));
        client.queue(&reply.unwrap_or_else(|err| error_reply(&err)), None);
        self.close_client(client);
        None
    }

    fn pause(&mut self) -> Result<SessionReply> {
        let already = self.lifecycle.paused();
        if !already {
            if let Err(err) = self.jail.freeze() {
                // The server marked it paused as it routed the request; before the client
                // hears of the failure, the server hears it runs.
                if let Some(control) = &self.control {
                    let _ = protocol::write_frame(control.as_fd(), &Report::NotPaused, &[]);
                }
                return Err(err);
            }
            self.lifecycle.paused_at = Some(Instant::now());
            self.lifecycle.end_stopped_at = self.lifecycle.paused_at;
        }
        Ok(SessionReply::Paused {
            session: self.id.clone(),
            already,
        })
    }

    fn resume(&mut self) -> Result<SessionReply> {
        let now = Instant::now();
        let since = self.lifecycle.paused_at;
        let mut paused = Duration::ZERO;
        if let Some(since) = since {
            self.jail.thaw()?;
            self.lifecycle.paused_at = None;
            paused = now.saturating_duration_since(since);
            let stopped = self.lifecycle.end_stopped_at.take().unwrap_or(since);
            if let Some(ends_at) = self.ends_at {
                self.ends_at = Some(lifecycle::resumed(ends_at, stopped, now).0);
            }
        }
        Ok(SessionReply::Resumed {
            session: self.id.clone(),
            already: since.is_none(),
            paused_ms: paused.as_millis() as u64,
            ends_at_ms: self.ends_at.map_or(0, session_meta::unix_ms),
        })
    }

    /// The session's resource use now.
    fn stats(&mut self) -> SessionReply {
        let now = Instant::now();
        let usage = self.jail.usage().unwrap_or_default();
        let plan = self.plan();
        let cpus = plan.limits.cgroup.cpus.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1.0, |count| count.get() as f64)
        });
        let cpu_usec = usage
            .cpu_user_usec
            .zip(usage.cpu_sys_usec)
            .map(|(user, sys)| user + sys);
        let cpu_percent = match (cpu_usec, self.lifecycle.last_cpu) {
            (Some(used), Some((at, before))) => {
                lifecycle::cpu_percent(used.saturating_sub(before), now - at, cpus)
            }
            _ => 0.0,
        };
        if let Some(used) = cpu_usec {
            self.lifecycle.last_cpu = Some((now, used));
        }
        let (workspace_used, workspace_size) = nix::sys::statvfs::fstatvfs(self.jail.workspace())
            .map_or((0, 0), |fs| {
                let block = fs.fragment_size();
                let size = fs.blocks() * block;
                (size.saturating_sub(fs.blocks_free() * block), size)
            });
        SessionReply::Stats(Box::new(SessionStats {
            session: self.id.clone(),
            state: match self.lifecycle.paused() {
                true => "paused",
                false => "running",
            }
            .into(),
            at_ms: session_meta::wall_ms(std::time::SystemTime::now()),
            cpus,
            cpu_usec,
            cpu_percent,
            memory_bytes: usage.memory_current_bytes,
            memory_cache_bytes: usage.memory_cache_bytes,
            memory_limit: plan.limits.cgroup.memory.map(|size| size.0),
            workspace_used,
            workspace_size,
        }))
    }
}
