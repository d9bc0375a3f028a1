//! Every frame `brig serve` sends a client about a session, typed: the server builds them,
//! [`super::Client`] parses them, and docs/protocol.md describes each. A frame is a JSON
//! object tagged by `"type"`, as [`super::protocol::Reply`] (a run's `done`, `error`,
//! `status`) is; the names and values here are the protocol's, so that the bytes on the
//! wire are the ones the Python and Node clients read.

use crate::error::{Error, ErrorKind};
use crate::options::NetMode;
use crate::serve::protocol::{Language, PtySize};
use crate::verdict::{Status, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A cell's rich result: mime type to its data (text, base64 for binary formats, the
/// JSON value itself for `application/json`), and `is_main_result`.
pub type Bundle = serde_json::Map<String, serde_json::Value>;

/// One frame of a session's answer (docs/protocol.md, "Sessions").
#[derive(Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SessionReply {
    /// `session_create`: the new session.
    Session {
        session: String,
        workspace: String,
    },
    /// `session_close`: it and everything in it are gone.
    Closed {
        session: String,
    },
    /// The end of a `session_exec` in the foreground (streamed or not).
    Exec(Box<ExecReply>),
    /// A chunk of a program's output (a streamed exec, `session_connect`).
    Output(Output),
    /// A background process or terminal: its start, or `session_connect`'s first frame.
    Process(Box<Process>),
    /// `session_ps`.
    Processes {
        processes: Vec<ListedProcess>,
    },
    /// The end of a `session_connect`: the process ended.
    Exited(Box<Exited>),
    Stdin {
        pid: u32,
        written: usize,
        closed: bool,
    },
    Signaled {
        pid: u32,
        signal: String,
    },
    Resized {
        pid: u32,
        cols: u16,
        rows: u16,
    },
    /// `session_dial`: the connection to `port` is this frame's one descriptor.
    Dialed {
        session: String,
        port: u16,
    },
    Put {
        path: String,
        size: u64,
    },
    Get {
        path: String,
        offset: u64,
        size: u64,
        /// Base64.
        data: String,
    },
    Ls {
        path: String,
        entries: Vec<FileEntry>,
        truncated: bool,
    },
    Stat {
        entry: FileEntry,
    },
    Exists {
        path: String,
        exists: bool,
    },
    Mkdir {
        path: String,
        created: bool,
    },
    Renamed {
        source: String,
        destination: String,
    },
    Removed {
        path: String,
        removed: u64,
    },
    /// `session_write`: send the `size` bytes now.
    Ready {
        path: String,
        size: u64,
    },
    Written {
        path: String,
        size: u64,
    },
    /// `session_read`: `length` raw bytes follow.
    Reading {
        path: String,
        size: u64,
        offset: u64,
        length: u64,
    },
    Watcher {
        watcher: String,
        path: String,
        recursive: bool,
        /// Present (true) for a streamed watcher.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<bool>,
    },
    Events {
        watcher: String,
        events: Vec<WatchEvent>,
        overflow: bool,
    },
    Unwatched {
        watcher: String,
    },
    /// One change, on a streamed watcher's connection.
    WatchEvent {
        watcher: String,
        kind: String,
        path: String,
    },
    /// The end of a streamed watcher.
    WatchEnd {
        watcher: String,
        why: String,
        dropped: u64,
        overflow: bool,
    },
    Sessions {
        sessions: Vec<SessionInfo>,
    },
    Network {
        session: String,
        allow_net: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deny_net: Vec<String>,
        add_host: Vec<String>,
        cut: u64,
    },
    Timeout {
        session: String,
        timeout_ms: u64,
    },
    /// `session_pause`: its processes are frozen (`already`: it was paused before).
    Paused {
        session: String,
        already: bool,
    },
    /// `session_resume`: its processes run on (`already`: it was not paused); its end,
    /// moved by the time it was paused.
    Resumed {
        session: String,
        already: bool,
        paused_ms: u64,
        ends_at_ms: u64,
    },
    /// `session_stats`.
    Stats(Box<SessionStats>),
    Context {
        context: ContextInfo,
    },
    Contexts {
        contexts: Vec<ContextInfo>,
    },
    ContextRemoved {
        context: String,
    },
    /// A refusal, or the session's end on a stream; `kind` says whose fault.
    Error {
        message: String,
        kind: ErrorKind,
        exit_code: i32,
    },
}

impl SessionReply {
    /// The error frame for `error`.
    pub fn error(error: &Error) -> SessionReply {
        SessionReply::Error {
            message: error.to_string(),
            kind: error.kind(),
            exit_code: crate::ExitStatus::BRIG_FAILED,
        }
    }

    /// The frame's `type`, as the wire names it.
    pub fn kind(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|value| value["type"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// A foreground exec's end: its verdict, and what it wrote unless that was streamed.
#[derive(Debug, PartialEq, Deserialize, Serialize)]
pub struct ExecReply {
    pub verdict: Box<Verdict>,
    /// Not streamed: what the exec wrote (up to its output limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// A code cell's answer.
    #[serde(flatten)]
    pub cell: Option<CellReply>,
    /// Streamed: output bytes this client did not get (it read too slowly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
}

/// What a code cell answers beyond a command's verdict and output.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct CellReply {
    /// The final expression's representation; None after a statement.
    pub result: Option<String>,
    pub results: Vec<Bundle>,
    /// The context it ran in.
    pub context: String,
    pub error: Option<CellError>,
    pub state_lost: bool,
    pub state_lost_reason: Option<String>,
}

/// The error a cell raised (or brig's word on it: `InterpreterDied`, `OutputLimit`, ...).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct CellError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub traceback: String,
}

/// Which of a program's streams a chunk is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
    /// A terminal's one stream.
    Pty,
}

/// A chunk of output: `data` when it is UTF-8, else `base64` (exactly one of the two).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct Output {
    pub stream: OutputStream,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// Since the exec started.
    pub t_ms: u64,
}

impl Output {
    /// The chunk of `bytes` from `stream`: text when it is UTF-8, else base64.
    pub fn of(stream: OutputStream, bytes: &[u8], t_ms: u64) -> Output {
        use base64::Engine;
        let (data, base64) = match std::str::from_utf8(bytes) {
            Ok(text) => (Some(text.to_string()), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            ),
        };
        Output {
            stream,
            data,
            base64,
            t_ms,
        }
    }

    /// The chunk's bytes.
    pub fn bytes(&self) -> crate::error::Result<Vec<u8>> {
        use base64::Engine;
        match (&self.data, &self.base64) {
            (Some(text), _) => Ok(text.as_bytes().to_vec()),
            (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|err| {
                    Error::setup(format!("brig serve sent output that is not base64: {err}"))
                }),
            (None, None) => Ok(Vec::new()),
        }
    }
}

/// A session's process, as `session_ps`, `session_connect` and a background start say.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct Process {
    /// Its pid in the jail (None: the jail has not said it yet).
    pub pid: Option<u32>,
    pub tag: Option<String>,
    pub command: Vec<String>,
    pub background: bool,
    pub running: bool,
    /// How it ended; None while it runs.
    pub status: Option<ProcessStatus>,
    pub started_unix_ms: u64,
    pub backlog_dropped: u64,
    pub pty: Option<PtySize>,
    /// The variables its request set (`K=V`), on top of the session's.
    #[serde(default)]
    pub env: Vec<String>,
    /// Its working directory in the jail.
    #[serde(default)]
    pub cwd: String,
}

/// A process in `session_ps`'s list: a `process` frame of its own (with its `type`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename = "process")]
pub struct ListedProcess {
    #[serde(flatten)]
    pub process: Process,
}

/// How an ended process ended (its verdict's words).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ProcessStatus {
    pub status: Option<Status>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// `session_connect`'s end.
#[derive(Debug, PartialEq, Deserialize, Serialize)]
pub struct Exited {
    pub pid: Option<u32>,
    pub tag: Option<String>,
    pub verdict: Option<Box<Verdict>>,
    /// Live output bytes this client did not get (it read too slowly).
    pub dropped: u64,
}

/// One entry of a listing, or `session_stat`'s: `ls` without `depth` has the first four
/// fields only.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct FileEntry {
    pub name: String,
    /// Relative to the workspace (`stat`, `ls` with `depth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// file, dir, symlink, other.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    /// As the jail sees them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

impl From<crate::serve::files::Stat> for FileEntry {
    /// An entry as `session_stat` and a deep listing report it.
    fn from(stat: crate::serve::files::Stat) -> FileEntry {
        FileEntry {
            name: stat.name,
            path: Some(stat.path),
            kind: stat.kind.into(),
            size: stat.size,
            mode: stat.mode,
            uid: Some(stat.uid),
            gid: Some(stat.gid),
            mtime: Some(stat.mtime),
            symlink_target: stat.symlink_target,
        }
    }
}

impl From<crate::serve::workspace::Entry> for FileEntry {
    /// A directory's own entry as `ls` without `depth` reports it.
    fn from(entry: crate::serve::workspace::Entry) -> FileEntry {
        FileEntry {
            name: entry.name,
            path: None,
            kind: entry.kind.into(),
            size: entry.size,
            mode: entry.mode,
            uid: None,
            gid: None,
            mtime: None,
            symlink_target: None,
        }
    }
}

/// A change a polled watcher saw.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct WatchEvent {
    /// create, write, remove, rename (the old name), chmod.
    #[serde(rename = "type")]
    pub kind: String,
    /// Relative to the workspace.
    pub path: String,
}

impl From<crate::serve::watch::Event> for WatchEvent {
    fn from(event: crate::serve::watch::Event) -> WatchEvent {
        WatchEvent {
            kind: event.kind.into(),
            path: event.path,
        }
    }
}

/// A session as `session_list` shows it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct SessionInfo {
    pub session: String,
    pub uid: u32,
    pub metadata: BTreeMap<String, String>,
    /// busy, idle or paused.
    pub state: String,
    /// Milliseconds since the Unix epoch, by the server's clock.
    pub created_at_ms: u64,
    pub ends_at_ms: u64,
    /// None while busy.
    pub idle_deadline_ms: Option<u64>,
    pub limits: SessionLimits,
    pub age_ms: u64,
    pub idle_ms: u64,
    pub requests: u64,
}

/// A session's resource use as its runner reads it (`session_stats`): the counters of
/// its cgroup (the reader the verdict's usage uses) and its workspace's file system.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct SessionStats {
    pub session: String,
    /// `running` or `paused`.
    pub state: String,
    /// Milliseconds since the Unix epoch, when the counters were read.
    pub at_ms: u64,
    /// The CPUs the session may use (its `cpus` limit, else the host's).
    pub cpus: f64,
    /// CPU time of every process of the session since it started, microseconds; None
    /// without a cgroup that counts it.
    pub cpu_usec: Option<u64>,
    /// Of `cpus`, the percent used since the previous `session_stats` (or the session's
    /// start).
    pub cpu_percent: f64,
    /// Memory charged to the session's cgroup now, of it the page cache, and its limit.
    pub memory_bytes: Option<u64>,
    pub memory_cache_bytes: Option<u64>,
    pub memory_limit: Option<u64>,
    /// The workspace's file system: bytes used and its size.
    pub workspace_used: u64,
    pub workspace_size: u64,
}

/// A session's limits as `session_list` shows them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct SessionLimits {
    /// Bytes; None: no cap.
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    /// The workspace's size (the jail's `--home-size`), bytes.
    pub workspace_size: u64,
    pub idle_timeout_ms: u64,
    /// The session's network: only a `filtered` one can change (`session_network`).
    pub net: NetMode,
}

/// A code context (an interpreter of the session).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct ContextInfo {
    pub id: String,
    pub language: Language,
    /// Its working directory in the jail; None: the session's.
    pub cwd: Option<String>,
    pub default: bool,
    pub running: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each frame serializes to exactly these bytes and reads back as itself.
    fn round_trip(frame: SessionReply, bytes: &str) {
        assert_eq!(serde_json::to_string(&frame).unwrap(), bytes);
        let back: SessionReply = serde_json::from_str(bytes).unwrap();
        assert_eq!(back, frame, "{bytes}");
    }

    fn verdict() -> Box<Verdict> {
        let report = crate::verdict::Verdict::of_setup_error(None, &Error::input("x"));
        Box::new(report)
    }

    #[test]
    fn frames_round_trip_to_the_protocols_bytes() {
        round_trip(
            SessionReply::Session {
                session: "ab".into(),
                workspace: "/home/sandbox".into(),
            },
            r#"{"type":"session","session":"ab","workspace":"/home/sandbox"}"#,
        );
        round_trip(
            SessionReply::Output(Output::of(OutputStream::Stdout, b"one\n", 12)),
            r#"{"type":"output","stream":"stdout","data":"one\n","t_ms":12}"#,
        );
        round_trip(
            SessionReply::Output(Output::of(OutputStream::Stderr, b"\xffx", 15)),
            r#"{"type":"output","stream":"stderr","base64":"/3g=","t_ms":15}"#,
        );
        let process = Process {
            pid: Some(3),
            tag: Some("server".into()),
            command: vec!["sleep".into(), "9".into()],
            background: true,
            running: false,
            status: Some(ProcessStatus {
                status: Some(Status::Signaled),
                exit_code: None,
                signal: Some(9),
            }),
            started_unix_ms: 1795753174964,
            backlog_dropped: 0,
            pty: Some(PtySize { cols: 80, rows: 24 }),
            env: vec!["A=1".into()],
            cwd: "/home/sandbox".into(),
        };
        let fields = r#""pid":3,"tag":"server","command":["sleep","9"],"background":true,"running":false,"status":{"status":"signaled","exit_code":null,"signal":9},"started_unix_ms":1795753174964,"backlog_dropped":0,"pty":{"cols":80,"rows":24},"env":["A=1"],"cwd":"/home/sandbox""#;
        round_trip(
            SessionReply::Process(Box::new(process.clone())),
            &format!(r#"{{"type":"process",{fields}}}"#),
        );
        round_trip(
            SessionReply::Processes {
                processes: vec![ListedProcess { process }],
            },
            &format!(r#"{{"type":"processes","processes":[{{"type":"process",{fields}}}]}}"#),
        );
        round_trip(
            SessionReply::Stat {
                entry: FileEntry {
                    name: "b".into(),
                    path: Some("a/b".into()),
                    kind: "symlink".into(),
                    size: 5,
                    mode: 0o777,
                    uid: Some(1000),
                    gid: Some(1000),
                    mtime: Some(1795000000.25),
                    symlink_target: Some("../x".into()),
                },
            },
            r#"{"type":"stat","entry":{"name":"b","path":"a/b","type":"symlink","size":5,"mode":511,"uid":1000,"gid":1000,"mtime":1795000000.25,"symlink_target":"../x"}}"#,
        );
        round_trip(
            SessionReply::Watcher {
                watcher: "w1".into(),
                path: "src".into(),
                recursive: false,
                stream: None,
            },
            r#"{"type":"watcher","watcher":"w1","path":"src","recursive":false}"#,
        );
        round_trip(
            SessionReply::WatchEnd {
                watcher: "w1".into(),
                why: "unwatched".into(),
                dropped: 0,
                overflow: false,
            },
            r#"{"type":"watch_end","watcher":"w1","why":"unwatched","dropped":0,"overflow":false}"#,
        );
        round_trip(
            SessionReply::Context {
                context: ContextInfo {
                    id: "ctx-1".into(),
                    language: Language::Bash,
                    cwd: Some("/tmp".into()),
                    default: false,
                    running: true,
                },
            },
            r#"{"type":"context","context":{"id":"ctx-1","language":"bash","cwd":"/tmp","default":false,"running":true}}"#,
        );
        round_trip(
            SessionReply::error(&Error::input("session_ls: no such directory")),
            r#"{"type":"error","message":"session_ls: no such directory","kind":"bad_input","exit_code":125}"#,
        );
    }

    #[test]
    fn every_other_frame_round_trips_to_the_protocols_bytes() {
        let entry = FileEntry {
            name: "in.csv".into(),
            path: None,
            kind: "file".into(),
            size: 12,
            mode: 0o644,
            uid: None,
            gid: None,
            mtime: None,
            symlink_target: None,
        };
        let info = SessionInfo {
            session: "ab".into(),
            uid: 1000,
            metadata: [("user".to_string(), "ada".to_string())].into(),
            state: "idle".into(),
            created_at_ms: 1,
            ends_at_ms: 2,
            idle_deadline_ms: None,
            limits: SessionLimits {
                memory: Some(1 << 30),
                pids: Some(256),
                cpus: None,
                workspace_size: 64 << 20,
                idle_timeout_ms: 600000,
                net: NetMode::Filtered,
            },
            age_ms: 3,
            idle_ms: 4,
            requests: 5,
        };
        let text = |items: &[&str]| items.iter().map(|item| item.to_string()).collect();
        for (frame, bytes) in [
            (
                SessionReply::Closed {
                    session: "ab".into(),
                },
                r#"{"type":"closed","session":"ab"}"#,
            ),
            (
                SessionReply::Exited(Box::new(Exited {
                    pid: Some(3),
                    tag: None,
                    verdict: None,
                    dropped: 7,
                })),
                r#"{"type":"exited","pid":3,"tag":null,"verdict":null,"dropped":7}"#,
            ),
            (
                SessionReply::Stdin {
                    pid: 3,
                    written: 4,
                    closed: false,
                },
                r#"{"type":"stdin","pid":3,"written":4,"closed":false}"#,
            ),
            (
                SessionReply::Signaled {
                    pid: 3,
                    signal: "SIGTERM".into(),
                },
                r#"{"type":"signaled","pid":3,"signal":"SIGTERM"}"#,
            ),
            (
                SessionReply::Resized {
                    pid: 3,
                    cols: 120,
                    rows: 40,
                },
                r#"{"type":"resized","pid":3,"cols":120,"rows":40}"#,
            ),
            (
                SessionReply::Put {
                    path: "a".into(),
                    size: 5,
                },
                r#"{"type":"put","path":"a","size":5}"#,
            ),
            (
                SessionReply::Get {
                    path: "a".into(),
                    offset: 0,
                    size: 5,
                    data: "aGVsbG8=".into(),
                },
                r#"{"type":"get","path":"a","offset":0,"size":5,"data":"aGVsbG8="}"#,
            ),
            (
                SessionReply::Ls {
                    path: ".".into(),
                    entries: vec![entry],
                    truncated: false,
                },
                r#"{"type":"ls","path":".","entries":[{"name":"in.csv","type":"file","size":12,"mode":420}],"truncated":false}"#,
            ),
            (
                SessionReply::Exists {
                    path: "a/b".into(),
                    exists: true,
                },
                r#"{"type":"exists","path":"a/b","exists":true}"#,
            ),
            (
                SessionReply::Mkdir {
                    path: "a/b".into(),
                    created: true,
                },
                r#"{"type":"mkdir","path":"a/b","created":true}"#,
            ),
            (
                SessionReply::Renamed {
                    source: "a".into(),
                    destination: "b/c".into(),
                },
                r#"{"type":"renamed","source":"a","destination":"b/c"}"#,
            ),
            (
                SessionReply::Removed {
                    path: "a".into(),
                    removed: 3,
                },
                r#"{"type":"removed","path":"a","removed":3}"#,
            ),
            (
                SessionReply::Ready {
                    path: "big".into(),
                    size: 9,
                },
                r#"{"type":"ready","path":"big","size":9}"#,
            ),
            (
                SessionReply::Written {
                    path: "big".into(),
                    size: 9,
                },
                r#"{"type":"written","path":"big","size":9}"#,
            ),
            (
                SessionReply::Reading {
                    path: "big".into(),
                    size: 9,
                    offset: 1,
                    length: 8,
                },
                r#"{"type":"reading","path":"big","size":9,"offset":1,"length":8}"#,
            ),
            (
                SessionReply::Events {
                    watcher: "w1".into(),
                    events: vec![WatchEvent {
                        kind: "create".into(),
                        path: "src/a.py".into(),
                    }],
                    overflow: false,
                },
                r#"{"type":"events","watcher":"w1","events":[{"type":"create","path":"src/a.py"}],"overflow":false}"#,
            ),
            (
                SessionReply::Unwatched {
                    watcher: "w1".into(),
                },
                r#"{"type":"unwatched","watcher":"w1"}"#,
            ),
            (
                SessionReply::WatchEvent {
                    watcher: "w1".into(),
                    kind: "write".into(),
                    path: "src/a.py".into(),
                },
                r#"{"type":"watch_event","watcher":"w1","kind":"write","path":"src/a.py"}"#,
            ),
            (
                SessionReply::Sessions {
                    sessions: vec![info],
                },
                r#"{"type":"sessions","sessions":[{"session":"ab","uid":1000,"metadata":{"user":"ada"},"state":"idle","created_at_ms":1,"ends_at_ms":2,"idle_deadline_ms":null,"limits":{"memory":1073741824,"pids":256,"cpus":null,"workspace_size":67108864,"idle_timeout_ms":600000,"net":"filtered"},"age_ms":3,"idle_ms":4,"requests":5}]}"#,
            ),
            (
                SessionReply::Network {
                    session: "ab".into(),
                    allow_net: text(&["pypi.org:443"]),
                    deny_net: vec![],
                    add_host: vec![],
                    cut: 1,
                },
                r#"{"type":"network","session":"ab","allow_net":["pypi.org:443"],"add_host":[],"cut":1}"#,
            ),
            (
                SessionReply::Timeout {
                    session: "ab".into(),
                    timeout_ms: 1800000,
                },
                r#"{"type":"timeout","session":"ab","timeout_ms":1800000}"#,
            ),
            (
                SessionReply::Contexts {
                    contexts: vec![ContextInfo {
                        id: "python".into(),
                        language: Language::Python,
                        cwd: None,
                        default: true,
                        running: true,
                    }],
                },
                r#"{"type":"contexts","contexts":[{"id":"python","language":"python","cwd":null,"default":true,"running":true}]}"#,
            ),
            (
                SessionReply::ContextRemoved {
                    context: "ctx-1".into(),
                },
                r#"{"type":"context_removed","context":"ctx-1"}"#,
            ),
        ] {
            round_trip(frame, bytes);
        }
    }

    /// The runner's frames say what the run path's say: its error frame is the run
    /// protocol's, a shallow listing's entry is the workspace's own.
    #[test]
    fn session_frames_match_the_shapes_they_replaced() {
        let err = Error::input("session_put: \"data\" is not base64");
        assert_eq!(
            serde_json::to_string(&SessionReply::error(&err)).unwrap(),
            serde_json::to_string(&crate::serve::protocol::Reply::error(&err)).unwrap()
        );
        let entry = crate::serve::workspace::Entry {
            name: "a.py".into(),
            kind: "file",
            size: 3,
            mode: 0o600,
        };
        let plain = serde_json::to_string(&entry).unwrap();
        assert_eq!(
            serde_json::to_string(&FileEntry::from(entry)).unwrap(),
            plain
        );
    }

    #[test]
    fn exec_replies_of_commands_cells_and_streams() {
        let verdict_json = serde_json::to_string(&verdict()).unwrap();
        let command = SessionReply::Exec(Box::new(ExecReply {
            verdict: verdict(),
            stdout: Some("hi\n".into()),
            stderr: Some(String::new()),
            cell: None,
            dropped: None,
        }));
        round_trip(
            command,
            &format!(r#"{{"type":"exec","verdict":{verdict_json},"stdout":"hi\n","stderr":""}}"#),
        );
        let cell = CellReply {
            result: None,
            results: vec![],
            context: "python".into(),
            error: Some(CellError {
                kind: "ZeroDivisionError".into(),
                message: "division by zero".into(),
                traceback: "Traceback".into(),
            }),
            state_lost: false,
            state_lost_reason: None,
        };
        let streamed_cell = SessionReply::Exec(Box::new(ExecReply {
            verdict: verdict(),
            stdout: None,
            stderr: None,
            cell: Some(cell),
            dropped: Some(0),
        }));
        round_trip(
            streamed_cell,
            &format!(
                r#"{{"type":"exec","verdict":{verdict_json},"result":null,"results":[],"context":"python","error":{{"type":"ZeroDivisionError","message":"division by zero","traceback":"Traceback"}},"state_lost":false,"state_lost_reason":null,"dropped":0}}"#
            ),
        );
        // A cell not streamed: its output, and a rich result (open mime keys).
        let bundle: Bundle =
            serde_json::from_str(r#"{"is_main_result":true,"text/plain":"2"}"#).unwrap();
        let cell = CellReply {
            result: Some("2".into()),
            results: vec![bundle],
            context: "ctx-1".into(),
            error: None,
            state_lost: false,
            state_lost_reason: None,
        };
        round_trip(
            SessionReply::Exec(Box::new(ExecReply {
                verdict: verdict(),
                stdout: Some("out\n".into()),
                stderr: Some(String::new()),
                cell: Some(cell),
                dropped: None,
            })),
            &format!(
                r#"{{"type":"exec","verdict":{verdict_json},"stdout":"out\n","stderr":"","result":"2","results":[{{"is_main_result":true,"text/plain":"2"}}],"context":"ctx-1","error":null,"state_lost":false,"state_lost_reason":null}}"#
            ),
        );
        // The server's sorted keys (a `json!` map) read the same.
        let sorted = format!(
            r#"{{"dropped":3,"stderr":"","stdout":"","type":"exec","verdict":{verdict_json}}}"#
        );
        let SessionReply::Exec(exec) = serde_json::from_str(&sorted).unwrap() else {
            panic!("not an exec");
        };
        assert_eq!((exec.dropped, exec.cell), (Some(3), None));
    }
}
