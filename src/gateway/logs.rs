//! A sandbox's logs, as E2B's `GET /sandboxes/{id}/logs` and `/v2/sandboxes/{id}/logs`
//! serve them: what the gateway did to the sandbox and what ran in it, kept in memory,
//! bounded. Each entry has a time, a level and a message, with fields:
//! - `process started` (`pid`, `cmd`: the command line, its first 256 bytes) at each
//!   envd `Process/Start`;
//! - `process ended` (`pid`, `exit_code`, `status`) when that start's stream relays the
//!   end (a client that hung up before the end leaves it out; `warn` for a non-zero end);
//! - `sandbox paused`, `sandbox resumed` (`paused_ms`), `timeout set` (`timeout_s`);
//! - the first entry, `sandbox started`, at the session's creation (from `session_list`).
//!
//! The programs' own output is not in it (`commands.connect` replays the latest 1 MiB of
//! a process's). Bounds: [`PER_SANDBOX`] entries a sandbox (the oldest dropped first, and
//! counted), messages and fields cut at [`FIELD_BYTES`], [`SANDBOXES`] sandboxes (the one
//! logged to least recently forgotten first); a killed sandbox's are forgotten. Lost when
//! the gateway restarts.

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

pub const PER_SANDBOX: usize = 256;
pub const FIELD_BYTES: usize = 256;
pub const SANDBOXES: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    pub fn parse(name: &str) -> Option<Level> {
        [Level::Debug, Level::Info, Level::Warn, Level::Error]
            .into_iter()
            .find(|level| level.name() == name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub at_ms: u64,
    pub level: Level,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

impl Entry {
    /// E2B's `SandboxLogEntry`.
    pub fn structured(&self) -> Value {
        json!({
            "timestamp": super::rest::rfc3339(self.at_ms),
            "level": self.level.name(),
            "message": self.message,
            "fields": self.fields,
        })
    }

    /// E2B's `SandboxLog`: the message and its fields on one line.
    pub fn line(&self) -> Value {
        let mut line = self.message.clone();
        for (key, value) in &self.fields {
            line.push_str(&format!(" {key}={value}"));
        }
        json!({"timestamp": super::rest::rfc3339(self.at_ms), "line": line})
    }
}

#[derive(Default)]
struct Ring {
    entries: VecDeque<Entry>,
    dropped: u64,
    /// When it was last logged to (a counter), for forgetting the least recent first.
    touched: u64,
}

/// Every sandbox's log (see the module's doc).
#[derive(Default)]
pub struct Logs {
    rings: Mutex<(HashMap<String, Ring>, u64)>,
}

/// `text` cut at [`FIELD_BYTES`] (on a character boundary).
fn cut(text: &str) -> String {
    let mut end = text.len().min(FIELD_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

impl Logs {
    pub fn record(&self, sandbox: &str, level: Level, message: &str, fields: &[(&str, String)]) {
        let entry = Entry {
            at_ms: now_ms(),
            level,
            message: cut(message),
            fields: fields
                .iter()
                .map(|(key, value)| (key.to_string(), cut(value)))
                .collect(),
        };
        let mut guard = self
            .rings
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let (rings, clock) = &mut *guard;
        *clock += 1;
        if !rings.contains_key(sandbox)
            && rings.len() >= SANDBOXES
            && let Some(oldest) = rings
                .iter()
                .min_by_key(|(_, ring)| ring.touched)
                .map(|(id, _)| id.clone())
        {
            rings.remove(&oldest);
        }
        let ring = rings.entry(sandbox.to_string()).or_default();
        ring.touched = *clock;
        if ring.entries.len() >= PER_SANDBOX {
            ring.entries.pop_front();
            ring.dropped += 1;
        }
        ring.entries.push_back(entry);
    }

    /// A sandbox's entries, oldest first, and how many were dropped.
    pub fn read(&self, sandbox: &str) -> (Vec<Entry>, u64) {
        let guard = self
            .rings
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        guard.0.get(sandbox).map_or((Vec::new(), 0), |ring| {
            (ring.entries.iter().cloned().collect(), ring.dropped)
        })
    }

    pub fn forget(&self, sandbox: &str) {
        let mut guard = self
            .rings
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        guard.0.remove(sandbox);
    }
}

/// What a logs request asks for: from `start` (ms since the epoch), `forward` (oldest
/// first) or backward, at least `level`, messages containing `search`, at most `limit`.
#[derive(Debug, PartialEq)]
pub struct Selection {
    pub start: u64,
    pub forward: bool,
    pub level: Level,
    pub search: Option<String>,
    pub limit: usize,
}

impl Default for Selection {
    fn default() -> Selection {
        Selection {
            start: 0,
            forward: true,
            level: Level::Debug,
            search: None,
            limit: 1000,
        }
    }
}

impl Selection {
    /// The entries selected: forward, those at or after `start`, oldest first; backward,
    /// those at or before it (`start` 0: now), newest first.
    pub fn apply(&self, entries: Vec<Entry>) -> Vec<Entry> {
        let kept = entries.into_iter().filter(|entry| {
            entry.level >= self.level
                && self
                    .search
                    .as_ref()
                    .is_none_or(|needle| entry.message.contains(needle.as_str()))
        });
        match self.forward {
            true => kept
                .filter(|entry| entry.at_ms >= self.start)
                .take(self.limit)
                .collect(),
            false => {
                let mut newest_first: Vec<Entry> = kept
                    .filter(|entry| self.start == 0 || entry.at_ms <= self.start)
                    .collect();
                newest_first.reverse();
                newest_first.truncate(self.limit);
                newest_first
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at_ms: u64, level: Level, message: &str) -> Entry {
        Entry {
            at_ms,
            level,
            message: message.into(),
            fields: BTreeMap::new(),
        }
    }

    #[test]
    fn a_sandbox_s_log_is_bounded() {
        let logs = Logs::default();
        for index in 0..PER_SANDBOX + 5 {
            logs.record(
                "a",
                Level::Info,
                &format!("m{index}"),
                &[("k", "v".repeat(1000))],
            );
        }
        let (entries, dropped) = logs.read("a");
        assert_eq!((entries.len(), dropped), (PER_SANDBOX, 5));
        assert_eq!(entries[0].message, "m5");
        assert_eq!(entries[0].fields["k"].len(), FIELD_BYTES);
        // The least recently logged sandbox goes first once SANDBOXES are kept.
        for index in 0..SANDBOXES {
            logs.record(&format!("s{index}"), Level::Info, "x", &[]);
        }
        assert!(logs.read("a").0.is_empty());
        assert_eq!(logs.read("s0").0.len(), 1);
        logs.forget("s0");
        assert!(logs.read("s0").0.is_empty());
        assert_eq!(cut(&"é".repeat(200)).len(), FIELD_BYTES);
    }

    #[test]
    fn a_selection_filters_orders_and_limits() {
        let entries = vec![
            entry(10, Level::Info, "process started"),
            entry(20, Level::Warn, "process ended"),
            entry(30, Level::Info, "sandbox paused"),
        ];
        let messages = |selection: Selection| -> Vec<String> {
            selection
                .apply(entries.clone())
                .into_iter()
                .map(|entry| entry.message)
                .collect()
        };
        assert_eq!(messages(Selection::default()).len(), 3);
        let from_20 = Selection {
            start: 20,
            ..Selection::default()
        };
        assert_eq!(messages(from_20), ["process ended", "sandbox paused"]);
        let backward = Selection {
            forward: false,
            limit: 2,
            ..Selection::default()
        };
        assert_eq!(messages(backward), ["sandbox paused", "process ended"]);
        let warnings = Selection {
            level: Level::Warn,
            ..Selection::default()
        };
        assert_eq!(messages(warnings), ["process ended"]);
        let search = Selection {
            search: Some("process".into()),
            limit: 1,
            ..Selection::default()
        };
        assert_eq!(messages(search), ["process started"]);
    }
}
