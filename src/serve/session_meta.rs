//! What the server knows of a session beyond its runner: the client's metadata (bounded,
//! shown and filtered by `session_list`), the session's end (moved by
//! `session_set_timeout`), and whether it is serving a request now. Pure checks, so the
//! unit tests call them directly.

use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::units::Span;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Labels one session may carry, and the bytes of each key and value.
pub const MAX_METADATA_KEYS: usize = 32;
pub const MAX_METADATA_KEY: usize = 64;
pub const MAX_METADATA_VALUE: usize = 512;

pub type Metadata = BTreeMap<String, String>;

/// `session_create`'s `metadata` within its bounds (and `session_list`'s filter: no
/// larger than what a session can hold); the one-line error names the field and the fix.
pub fn check_metadata(metadata: &Metadata) -> Result<()> {
    if metadata.len() > MAX_METADATA_KEYS {
        return Err(Error::input(format!(
            "metadata: {} keys, at most {MAX_METADATA_KEYS}; keep fewer labels",
            metadata.len()
        )));
    }
    for (key, value) in metadata {
        if key.is_empty() {
            return Err(Error::input("metadata: an empty key; name each label"));
        }
        if key.len() > MAX_METADATA_KEY {
            return Err(Error::input(format!(
                "metadata key {}...: {} bytes, at most {MAX_METADATA_KEY}; shorten it",
                prefix(key),
                key.len()
            )));
        }
        if value.len() > MAX_METADATA_VALUE {
            return Err(Error::input(format!(
                "metadata[{key:?}]: {} bytes, at most {MAX_METADATA_VALUE}; shorten the value",
                value.len()
            )));
        }
    }
    Ok(())
}

/// A key's first bytes, for an error line that stays one short line.
fn prefix(text: &str) -> String {
    let mut end = text.len().min(16);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}", &text[..end])
}

/// Whether a session's `metadata` holds every pair of `filter` (E2B's list query).
pub fn matches(metadata: &Metadata, filter: &Metadata) -> bool {
    filter
        .iter()
        .all(|(key, value)| metadata.get(key) == Some(value))
}

/// `session_set_timeout`'s `timeout`: more than 0, at most the server's
/// `--session-timeout`.
pub fn check_timeout(timeout: Span, most: Span) -> Result<Duration> {
    if timeout.0.is_zero() {
        return Err(Error::input(
            "session_set_timeout: \"timeout\" must be longer than 0; e.g. 10m (session_close ends a session now)",
        ));
    }
    if timeout.0 > most.0 {
        return Err(Error::input(format!(
            "session_set_timeout: \"timeout\" {timeout} is longer than this server allows (--session-timeout {most}); ask for at most {most}"
        )));
    }
    Ok(timeout.0)
}

/// A session's limits as `session_list` shows them (the reply's type).
pub use super::reply::SessionLimits as Limits;

impl Limits {
    pub fn of(plan: &Plan, idle_timeout: Duration) -> Limits {
        let cgroup = &plan.limits.cgroup;
        Limits {
            memory: cgroup.memory.map(|size| size.0),
            pids: cgroup.pids,
            cpus: cgroup.cpus,
            workspace_size: plan.limits.home_size.0,
            idle_timeout_ms: idle_timeout.as_millis() as u64,
            net: plan.net,
        }
    }
}

/// What the server tracks of a session's requests: the memfd of each it routed and the
/// runner has not finished (the runner empties it once it answered), and when the last
/// one finished.
#[derive(Default)]
pub struct Activity {
    in_flight: Vec<OwnedFd>,
    last_done: Option<SystemTime>,
}

impl Activity {
    pub fn routed(&mut self, memfd: OwnedFd) {
        self.settle();
        self.in_flight.push(memfd);
    }

    /// Forgets the requests the runner has answered (their memfds emptied), keeping when
    /// the last of them was answered (the memfd's mtime, set by the truncate).
    fn settle(&mut self) {
        let mut last_done = self.last_done;
        self.in_flight
            .retain(|memfd| match nix::sys::stat::fstat(memfd) {
                Ok(stat) if stat.st_size == 0 => {
                    let at = UNIX_EPOCH
                        + Duration::new(stat.st_mtime.max(0) as u64, stat.st_mtime_nsec as u32);
                    last_done = last_done.max(Some(at));
                    false
                }
                Ok(_) => true,
                Err(_) => false,
            });
        self.last_done = last_done;
    }

    /// Whether a request is being served or waits for the runner; and since when the
    /// session has been idle otherwise (None: never served one).
    pub fn state(&mut self) -> (bool, Option<SystemTime>) {
        self.settle();
        (!self.in_flight.is_empty(), self.last_done)
    }
}

/// Milliseconds since the Unix epoch of `at`, a moment of the monotonic clock.
pub fn unix_ms(at: Instant) -> u64 {
    let now = Instant::now();
    let wall = match at.checked_duration_since(now) {
        Some(ahead) => SystemTime::now() + ahead,
        None => SystemTime::now() - now.saturating_duration_since(at),
    };
    wall_ms(wall)
}

pub fn wall_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn metadata_is_bounded_with_one_line_errors() {
        let many: Metadata = (0..33).map(|i| (format!("k{i}"), String::new())).collect();
        let long_key = "k".repeat(65);
        let long_value = "v".repeat(513);
        let cases = [
            (labels(&[]), None),
            (labels(&[("user", "ada"), ("purpose", "ci")]), None),
            (labels(&[(&"k".repeat(64), &"v".repeat(512))]), None),
            (
                many,
                Some("metadata: 33 keys, at most 32; keep fewer labels"),
            ),
            (
                labels(&[("", "x")]),
                Some("metadata: an empty key; name each label"),
            ),
            (
                labels(&[(&long_key, "x")]),
                Some("metadata key \"kkkkkkkkkkkkkkkk\"...: 65 bytes, at most 64; shorten it"),
            ),
            (
                labels(&[("note", &long_value)]),
                Some("metadata[\"note\"]: 513 bytes, at most 512; shorten the value"),
            ),
        ];
        for (metadata, expected) in cases {
            let got = check_metadata(&metadata).err().map(|err| err.to_string());
            assert_eq!(got.as_deref(), expected, "{metadata:?}");
        }
    }

    #[test]
    fn a_filter_matches_sessions_holding_all_its_pairs() {
        let session = labels(&[("user", "ada"), ("purpose", "ci")]);
        assert!(matches(&session, &labels(&[])));
        assert!(matches(&session, &labels(&[("user", "ada")])));
        assert!(matches(&session, &session.clone()));
        assert!(!matches(&session, &labels(&[("user", "bob")])));
        assert!(!matches(
            &session,
            &labels(&[("user", "ada"), ("team", "x")])
        ));
    }

    #[test]
    fn a_timeout_is_more_than_zero_and_at_most_the_server_s() {
        let most = Span(Duration::from_secs(600));
        assert_eq!(
            check_timeout(Span(Duration::from_secs(60)), most).unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(check_timeout(most, most).unwrap(), most.0);
        let zero = check_timeout(Span(Duration::ZERO), most).unwrap_err();
        assert!(zero.to_string().contains("must be longer than 0"), "{zero}");
        let long = check_timeout(Span(Duration::from_secs(601)), most).unwrap_err();
        assert!(
            long.to_string().contains("--session-timeout") && long.to_string().contains("at most"),
            "{long}"
        );
    }
}
