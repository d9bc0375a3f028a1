//! The metrics a host's `brig serve` keeps itself (the status reply's `metrics`,
//! src/serve/metrics.rs), on the host gateway's `/metrics`: jail build times, sessions'
//! OOM kills and network bytes. The server holds the totals (ended sessions included);
//! each scrape asks for its status and this collector encodes the latest answer, so the
//! values are the server's own and reset only when it restarts. The server's failure
//! counts go into the gateway's `brig_failures_total` instead (`health.rs`), one family
//! for every failure.

use crate::serve::metrics::{BuildTimes, ServerMetrics};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use std::sync::Mutex;

/// The server's metrics as its last status said them (zeros before the first).
#[derive(Debug, Default)]
pub struct ServerCollector {
    last: Mutex<ServerMetrics>,
}

impl ServerCollector {
    pub fn update(&self, metrics: &ServerMetrics) {
        if let Ok(mut last) = self.last.lock() {
            *last = metrics.clone();
        }
    }
}

/// Prometheus' buckets (upper bound in seconds, builds in that bucket alone) from the
/// server's cumulative counts.
fn buckets(times: &BuildTimes) -> Vec<(f64, u64)> {
    let mut below = 0;
    times
        .bounds_us
        .iter()
        .zip(&times.counts)
        .map(|(bound, cumulative)| {
            let alone = cumulative.saturating_sub(below);
            below = below.max(*cumulative);
            (*bound as f64 / 1e6, alone)
        })
        .collect()
}

impl Collector for ServerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let metrics = match self.last.lock() {
            Ok(last) => last.clone(),
            Err(_) => ServerMetrics::default(),
        };
        let mut builds = encoder.encode_descriptor(
            "brig_jail_build_seconds",
            "How long the server took to assemble a jail, from its runner's fork to the jail ready, by kind (pooled, warm_python, warm_node, session_pool, session, job)",
            None,
            MetricType::Histogram,
        )?;
        for times in &metrics.jail_builds {
            let labels = [("kind", times.kind.as_str())];
            builds
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(
                    times.sum_us as f64 / 1e6,
                    times.count,
                    &buckets(times),
                    None,
                )?;
        }
        ConstCounter::new(metrics.oom_kills).encode(encoder.encode_descriptor(
            "brig_oom_kills",
            "OOM kills in sandboxes' cgroups (the kernel's memory.events oom_kill), ended sandboxes included",
            None,
            MetricType::Counter,
        )?)?;
        let mut bytes = encoder.encode_descriptor(
            "brig_network_bytes",
            "Payload bytes sandboxes moved through brig's user-mode network (--net filtered), out (sent) and in (received), ended sandboxes included; host total",
            None,
            MetricType::Counter,
        )?;
        for (direction, count) in [
            ("out", metrics.net_bytes_sent),
            ("in", metrics.net_bytes_received),
        ] {
            ConstCounter::new(count).encode(bytes.encode_family(&[("direction", direction)])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::metrics::{JailKind, SessionCounters};
    use prometheus_client::encoding::prometheus_text;
    use prometheus_client::registry::Registry;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_servers_metrics_are_encoded_as_prometheus_names_them() {
        let collector = Arc::new(ServerCollector::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Arc::clone(&collector)));
        let mut metrics = ServerMetrics::default();
        metrics.built(JailKind::Session, Duration::from_millis(3));
        metrics.built(JailKind::Session, Duration::from_millis(40));
        let counted = SessionCounters {
            oom_kills: 1,
            net_bytes_sent: 100,
            net_bytes_received: 2_000,
        };
        metrics.counted(&SessionCounters::default(), &counted);
        collector.update(&metrics);
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry).unwrap();
        for expected in [
            "# TYPE brig_jail_build_seconds histogram",
            "brig_jail_build_seconds_bucket{kind=\"session\",le=\"0.002\"} 0",
            "brig_jail_build_seconds_bucket{kind=\"session\",le=\"0.004\"} 1",
            "brig_jail_build_seconds_bucket{kind=\"session\",le=\"0.064\"} 2",
            "brig_jail_build_seconds_bucket{kind=\"session\",le=\"+Inf\"} 2",
            "brig_jail_build_seconds_count{kind=\"session\"} 2",
            "brig_jail_build_seconds_sum{kind=\"session\"} 0.043",
            "# TYPE brig_oom_kills_total counter",
            "brig_oom_kills_total 1",
            "brig_network_bytes_total{direction=\"out\"} 100",
            "brig_network_bytes_total{direction=\"in\"} 2000",
        ] {
            assert!(text.contains(expected), "{expected} in:\n{text}");
        }
    }
}
