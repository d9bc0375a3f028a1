//! A session's pause and resume as time: a paused session's clock stops. Its end
//! (`session_timeout`, moved by `session_set_timeout`) moves by the time it was paused,
//! and its idle timer does not run meanwhile. The server (for `session_list`) and the
//! session's runner (which ends it) keep the same arithmetic, these pure functions.
//! How a jail is paused is the cgroup freezer (`cgroup/freeze.rs`); what a paused
//! session answers is `session_lifecycle.rs`.

use super::protocol::Request;
use crate::error::Error;
use std::time::{Duration, Instant};

/// What a routed `session_pause` or `session_resume` does to the server's record of the
/// session at `now` (its runner does the same on its own clock): paused from now, or its
/// end moved by the time it was paused. A pause of a paused session, a resume of a
/// running one change nothing. A `session_set_timeout` while paused (its new end already
/// set from now) counts the pause from now: the new timeout runs from the resume.
pub fn routed(
    request: &Request,
    ends_at: &mut Instant,
    paused_at: &mut Option<Instant>,
    now: Instant,
) {
    match request {
        Request::SessionSetTimeout { .. } if paused_at.is_some() => *paused_at = Some(now),
        Request::SessionPause { .. } if paused_at.is_none() => *paused_at = Some(now),
        Request::SessionResume { .. } => {
            if let Some(since) = paused_at.take() {
                *ends_at = resumed(*ends_at, since, now).0;
            }
        }
        _ => {}
    }
}

/// The refusal of `session_pause` for a session whose jail has no cgroup with a freezer.
pub fn unfreezable(id: &str) -> Error {
    Error::host(format!(
        "session_pause: session {id} cannot be paused: its jail has no cgroup of its own with a freezer (cgroup v2, or v1's freezer hierarchy) to stop its processes with; {}",
        crate::cgroup::delegation_fix()
    ))
}

/// A session's end while it is paused since `paused_at`, as of `now`: the time paused so
/// far does not count, so the end moves with the clock until it is resumed.
pub fn end_as_of(ends_at: Instant, paused_at: Option<Instant>, now: Instant) -> Instant {
    match paused_at {
        Some(paused_at) => ends_at + now.saturating_duration_since(paused_at),
        None => ends_at,
    }
}

/// A session's end once resumed at `now` after a pause from `paused_at`, and how long it
/// was paused.
pub fn resumed(ends_at: Instant, paused_at: Instant, now: Instant) -> (Instant, Duration) {
    let paused = now.saturating_duration_since(paused_at);
    (ends_at + paused, paused)
}

/// A session's CPU use between two readings of its cgroup's counter, in percent of the
/// CPUs it may use (100: all of them busy the whole time): E2B's `cpuUsedPct`.
pub fn cpu_percent(used_usec: u64, over: Duration, cpus: f64) -> f64 {
    let wall_usec = over.as_micros() as f64 * cpus.max(0.01);
    match wall_usec > 0.0 {
        true => (used_usec as f64 * 100.0 / wall_usec).clamp(0.0, 100.0),
        false => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_paused_session_s_end_moves_by_the_time_paused() {
        let start = Instant::now();
        let ends_at = start + 60 * S;
        // Running: the end stays where it is.
        assert_eq!(end_as_of(ends_at, None, start + 10 * S), ends_at);
        // Paused at 10 s: at 40 s the end is 30 s later, and keeps moving.
        let paused_at = Some(start + 10 * S);
        assert_eq!(
            end_as_of(ends_at, paused_at, start + 40 * S),
            ends_at + 30 * S
        );
        // Paused past its first end, it is not over: 100 s in, the end is 150 s.
        assert_eq!(
            end_as_of(ends_at, paused_at, start + 100 * S),
            start + 150 * S
        );
        // Resumed at 40 s: 30 s paused, the end at 90 s, fixed from there on.
        let (end, paused) = resumed(ends_at, start + 10 * S, start + 40 * S);
        assert_eq!((end, paused), (start + 90 * S, 30 * S));
        assert_eq!(end_as_of(end, None, start + 80 * S), start + 90 * S);
        // Two pauses add up: 30 s, then 5 s more.
        let (end, paused) = resumed(end, start + 50 * S, start + 55 * S);
        assert_eq!((end, paused), (start + 95 * S, 5 * S));
        // A clock read before the pause (another thread's `now`) moves nothing.
        assert_eq!(
            resumed(ends_at, start + 10 * S, start + 9 * S).1,
            Duration::ZERO
        );
        assert_eq!(end_as_of(ends_at, paused_at, start), ends_at);
    }

    #[test]
    fn the_server_s_record_follows_pause_and_resume() {
        let start = Instant::now();
        let (mut ends_at, mut paused_at) = (start + 60 * S, None);
        let pause = Request::SessionPause {
            session: "ab".into(),
        };
        let resume = Request::SessionResume {
            session: "ab".into(),
        };
        // A resume of a running session changes nothing.
        routed(&resume, &mut ends_at, &mut paused_at, start + S);
        assert_eq!((ends_at, paused_at), (start + 60 * S, None));
        routed(&pause, &mut ends_at, &mut paused_at, start + 10 * S);
        assert_eq!(paused_at, Some(start + 10 * S));
        // Paused again: still paused since the first.
        routed(&pause, &mut ends_at, &mut paused_at, start + 20 * S);
        assert_eq!(paused_at, Some(start + 10 * S));
        routed(&resume, &mut ends_at, &mut paused_at, start + 25 * S);
        assert_eq!((ends_at, paused_at), (start + 75 * S, None));
        // A timeout of 30 s set while paused (at 40 s, paused since 30 s) runs from the
        // resume (at 50 s): the end is 80 s.
        routed(&pause, &mut ends_at, &mut paused_at, start + 30 * S);
        let timeout = Request::SessionSetTimeout {
            session: "ab".into(),
            timeout: crate::units::Span(30 * S),
        };
        ends_at = start + 40 * S + 30 * S;
        routed(&timeout, &mut ends_at, &mut paused_at, start + 40 * S);
        routed(&resume, &mut ends_at, &mut paused_at, start + 50 * S);
        assert_eq!((ends_at, paused_at), (start + 80 * S, None));
        let refusal = unfreezable("ab").to_string();
        assert!(
            refusal.starts_with("session_pause: session ab cannot be paused"),
            "{refusal}"
        );
        assert!(!refusal.contains('\n'), "{refusal}");
    }

    #[test]
    fn cpu_percent_is_of_the_cpus_the_session_may_use() {
        // 0.5 s of CPU in 1 s: half of one CPU, a quarter of two.
        assert_eq!(cpu_percent(500_000, S, 1.0), 50.0);
        assert_eq!(cpu_percent(500_000, S, 2.0), 25.0);
        // Never above 100 (counters read at slightly different moments), nor NaN.
        assert_eq!(cpu_percent(2_000_000, S, 1.0), 100.0);
        assert_eq!(cpu_percent(1, Duration::ZERO, 1.0), 0.0);
        assert_eq!(cpu_percent(0, S, 0.0), 0.0);
    }
}
