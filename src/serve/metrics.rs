//! What `brig serve` counts for a platform's metrics, since it started: how long its jails
//! took to build (a histogram per kind of jail), its sessions' OOM kills and the bytes
//! their network moved (ended sessions included: the server keeps the totals). Carried in
//! the status reply's `metrics` object (docs/protocol.md, "status"); `brig gateway`
//! exposes them on `/metrics` (src/gateway/health.rs).
//!
//! Counting stays cheap and in the server's one thread: a build is timed from the runner's
//! fork to its word that the jail is assembled (`Report::Ready` of a pooled jail,
//! `Report::Built` of one built for a request); a session's runner sends its cumulative
//! counters (`Report::Counters`) after each exec and as it ends, and the server adds what
//! grew.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The version of the `metrics` object: a new field may come within one version; a
/// field's meaning changes only with the next.
pub const METRICS_VERSION: u32 = 1;

/// The upper bounds of the build-time buckets, in microseconds: 0.5 ms doubling to about
/// 16 s (the gateway's request latencies use the same).
pub const BUILD_BOUNDS_US: [u64; 16] = {
    let mut bounds = [0u64; 16];
    let mut at = 0;
    while at < 16 {
        bounds[at] = 500 << at;
        at += 1;
    }
    bounds
};

/// The kinds of jail the server builds, as the metrics name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JailKind {
    /// A cold pooled jail (`--pool`).
    Pooled,
    /// A pooled jail with a warm Python or Node started (`--warm-python`, `--warm-node`).
    WarmPython,
    WarmNode,
    /// A pooled session jail (`--session-pool`).
    SessionPool,
    /// A session's jail built on demand (a create of a shape of its own, or the pool
    /// empty).
    Session,
    /// A one-shot run's jail built for it (no pooled jail of its shape ready).
    Job,
}

impl JailKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JailKind::Pooled => "pooled",
            JailKind::WarmPython => "warm_python",
            JailKind::WarmNode => "warm_node",
            JailKind::SessionPool => "session_pool",
            JailKind::Session => "session",
            JailKind::Job => "job",
        }
    }
}

/// One kind's build times: Prometheus' histogram, in whole microseconds.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct BuildTimes {
    /// `pooled`, `warm_python`, `warm_node`, `session_pool`, `session` or `job`.
    pub kind: String,
    /// The buckets' upper bounds ([`BUILD_BOUNDS_US`]) ...
    pub bounds_us: Vec<u64>,
    /// ... and the builds that took at most each (cumulative, as Prometheus counts).
    pub counts: Vec<u64>,
    /// Every build of the kind, and their sum.
    pub count: u64,
    pub sum_us: u64,
}

impl BuildTimes {
    fn of(kind: JailKind) -> BuildTimes {
        BuildTimes {
            kind: kind.as_str().into(),
            bounds_us: BUILD_BOUNDS_US.to_vec(),
            counts: vec![0; BUILD_BOUNDS_US.len()],
            count: 0,
            sum_us: 0,
        }
    }

    fn observe(&mut self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        for (bound, count) in self.bounds_us.iter().zip(self.counts.iter_mut()) {
            if micros <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(micros);
    }
}

/// What one session's runner has counted since its session began: its cgroup's OOM kills,
/// and the payload bytes its network relay moved (`--net filtered`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct SessionCounters {
    pub oom_kills: u64,
    pub net_bytes_sent: u64,
    pub net_bytes_received: u64,
}

/// The status reply's `metrics`: since the server started.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct ServerMetrics {
    /// [`METRICS_VERSION`].
    pub version: u32,
    /// One entry per kind of jail built at least once.
    pub jail_builds: Vec<BuildTimes>,
    /// OOM kills in sessions' cgroups (the kernel's `memory.events` `oom_kill`), sessions
    /// that ended included. A session without a memory cgroup of its own counts none.
    pub oom_kills: u64,
    /// Payload bytes sessions sent out through brig's user-mode network and received
    /// through it, ended sessions included.
    pub net_bytes_sent: u64,
    pub net_bytes_received: u64,
}

impl Default for ServerMetrics {
    fn default() -> ServerMetrics {
        ServerMetrics {
            version: METRICS_VERSION,
            jail_builds: Vec::new(),
            oom_kills: 0,
            net_bytes_sent: 0,
            net_bytes_received: 0,
        }
    }
}

impl ServerMetrics {
    /// A jail of `kind` took `took` to build.
    pub fn built(&mut self, kind: JailKind, took: Duration) {
        let name = kind.as_str();
        let at = match self.jail_builds.iter().position(|times| times.kind == name) {
            Some(at) => at,
            None => {
                self.jail_builds.push(BuildTimes::of(kind));
                self.jail_builds.len() - 1
            }
        };
        self.jail_builds[at].observe(took);
    }

    /// A session's runner counted `now`, having said `before` last: what grew is added.
    /// (A runner's counts only grow; one that went down is taken as no growth.)
    pub fn counted(&mut self, before: &SessionCounters, now: &SessionCounters) {
        let grew = |before: u64, now: u64| now.saturating_sub(before);
        self.oom_kills += grew(before.oom_kills, now.oom_kills);
        self.net_bytes_sent += grew(before.net_bytes_sent, now.net_bytes_sent);
        self.net_bytes_received += grew(before.net_bytes_received, now.net_bytes_received);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_counts_in_every_bucket_at_or_above_its_time_and_by_its_kind() {
        let mut metrics = ServerMetrics::default();
        let ms = Duration::from_millis;
        metrics.built(JailKind::Session, ms(3));
        metrics.built(JailKind::Session, ms(40));
        metrics.built(JailKind::Pooled, Duration::from_micros(500));
        metrics.built(JailKind::Session, Duration::from_secs(100));
        let session = &metrics.jail_builds[0];
        assert_eq!(session.kind, "session");
        assert_eq!((session.count, session.sum_us), (3, 100_043_000));
        // 0.5, 1, 2 ms: none; 4 ms: the 3 ms build; 64 ms on: the 40 ms one too; the
        // 100 s one in no bucket (only in +Inf, which is the count).
        let expected: Vec<u64> = BUILD_BOUNDS_US
            .iter()
            .map(|bound| match bound {
                0..3_000 => 0,
                3_000..40_000 => 1,
                _ => 2,
            })
            .collect();
        assert_eq!(session.counts, expected);
        let pooled = &metrics.jail_builds[1];
        assert_eq!((pooled.kind.as_str(), pooled.count), ("pooled", 1));
        assert!(pooled.counts.iter().all(|count| *count == 1), "{pooled:?}");
        assert_eq!(BUILD_BOUNDS_US[15], 16_384_000);
    }

    #[test]
    fn a_sessions_counters_add_what_grew_and_ended_sessions_stay_counted() {
        let mut metrics = ServerMetrics::default();
        let counters = |oom_kills, net_bytes_sent, net_bytes_received| SessionCounters {
            oom_kills,
            net_bytes_sent,
            net_bytes_received,
        };
        // One session says 1 kill then 2; another 5 bytes out; the first's count read
        // lower (never: it is taken as nothing new).
        metrics.counted(&counters(0, 0, 0), &counters(1, 10, 20));
        metrics.counted(&counters(1, 10, 20), &counters(2, 10, 25));
        metrics.counted(&counters(0, 0, 0), &counters(0, 5, 0));
        metrics.counted(&counters(2, 10, 25), &counters(1, 10, 25));
        assert_eq!(
            (
                metrics.oom_kills,
                metrics.net_bytes_sent,
                metrics.net_bytes_received
            ),
            (2, 15, 25)
        );
    }

    #[test]
    fn the_metrics_object_is_versioned_and_read_back_as_written() {
        let mut metrics = ServerMetrics::default();
        metrics.built(JailKind::Job, Duration::from_millis(7));
        let text = serde_json::to_string(&metrics).unwrap();
        assert!(text.starts_with("{\"version\":1,"), "{text}");
        let read: ServerMetrics = serde_json::from_str(&text).unwrap();
        assert_eq!(read, metrics);
    }
}
