//! `brig session ...`: the command line's client for a server's sessions (see
//! `session.rs` and docs/protocol.md). Each command is one request on a fresh
//! connection; `create` prints the session's id, the others take it with `--session`.

use super::files_client;
use super::protocol::{self, FrameReader, Language};
use crate::error::{Error, Result};
use crate::exit::ExitStatus;
use crate::options::JailOptions;
use crate::units::{Size, Span};
use crate::verdict::{Sinks, printable};
use base64::Engine;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

#[path = "session_client_processes.rs"]
mod processes;
#[path = "session_client_pty.rs"]
mod pty;
#[path = "session_client_watch.rs"]
mod watch;
pub use processes::Which;

#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Open a session on the server and print its id.
    #[command(mut_arg("command", |arg| arg.hide(true)))]
    Create(Box<CreateArgs>),
    /// Run a command (`-- ARGV...`) or a code cell (`--code FILE|-`) in a session.
    Exec(ExecArgs),
    /// Write a local file (or - for stdin) into the session's workspace, streamed (any
    /// size up to the workspace).
    Put {
        #[command(flatten)]
        at: At,
        /// The local file, or - for standard input.
        #[arg(value_name = "LOCAL")]
        local: PathBuf,
        /// Its path in the workspace (relative).
        #[arg(value_name = "REMOTE")]
        remote: String,
    },
    /// Read a file of the session's workspace into a local file (or standard output),
    /// streamed.
    Get {
        #[command(flatten)]
        at: At,
        /// Its path in the workspace (relative).
        #[arg(value_name = "REMOTE")]
        remote: String,
        /// The local file to write; standard output when absent or -.
        #[arg(value_name = "LOCAL")]
        local: Option<PathBuf>,
    },
    /// List a directory of the session's workspace.
    Ls {
        #[command(flatten)]
        at: At,
        /// The directory, relative to the workspace.
        #[arg(value_name = "PATH", default_value = ".")]
        path: String,
        /// List this many levels deep (1: the directory's own entries), with paths.
        #[arg(long, value_name = "N")]
        depth: Option<u32>,
    },
    /// Show what a path of the workspace is: type, mode, size, owner, time, link target.
    Stat {
        #[command(flatten)]
        at: At,
        #[arg(value_name = "PATH")]
        path: String,
    },
    /// Make a directory in the workspace, with its parents.
    Mkdir {
        #[command(flatten)]
        at: At,
        #[arg(value_name = "PATH")]
        path: String,
    },
    /// Move a file or directory of the workspace.
    Mv {
        #[command(flatten)]
        at: At,
        #[arg(value_name = "SOURCE")]
        source: String,
        #[arg(value_name = "DESTINATION")]
        destination: String,
    },
    /// Remove a file, a symlink (not its target) or a directory tree of the workspace.
    Rm {
        #[command(flatten)]
        at: At,
        #[arg(value_name = "PATH")]
        path: String,
    },
    /// Print the changes under a directory of the workspace as they happen, one line
    /// each (`KIND<TAB>PATH`; KIND: create, write, remove, rename, chmod), until the
    /// watch is ended (`session_unwatch`) or the session ends (exit 0); SIGINT or SIGTERM
    /// stop it (by the signal's default action: 130, 143) and the server drops the watcher.
    Watch {
        #[command(flatten)]
        at: At,
        /// Watch the directories beneath it too.
        #[arg(long)]
        recursive: bool,
        /// The directory, relative to the workspace.
        #[arg(value_name = "PATH", default_value = ".")]
        path: String,
    },
    /// Close the session: its jail, processes and workspace are destroyed.
    Close {
        #[command(flatten)]
        at: At,
    },
    /// List the session's processes: running ones, and the last ended background ones.
    Ps {
        #[command(flatten)]
        at: At,
    },
    /// Attach to a process: print what it wrote (the latest MiB of what came before, then
    /// live) until it ends; exit as it did.
    Connect {
        #[command(flatten)]
        at: At,
        #[command(flatten)]
        which: Which,
    },
    /// Write standard input (or --data) to a process's stdin.
    Stdin {
        #[command(flatten)]
        at: At,
        #[command(flatten)]
        which: Which,
        /// The text to write, instead of this command's standard input.
        #[arg(long, value_name = "TEXT")]
        data: Option<String>,
        /// Close the process's stdin after.
        #[arg(long)]
        close: bool,
    },
    /// Send a signal (a name, TERM or SIGTERM, or a number) to a process's group.
    Signal {
        #[command(flatten)]
        at: At,
        #[command(flatten)]
        which: Which,
        /// The signal.
        #[arg(long, value_name = "SIGNAL")]
        signal: String,
    },
    /// Start a program (`-- ARGV...`; by default the jail's shell) on a terminal of the
    /// session's jail and attach this terminal to it (raw mode; a resize follows) until it
    /// ends; exit as it did. Without a terminal, standard input is typed into it.
    Pty {
        #[command(flatten)]
        at: At,
        /// A tag for it (for `connect`, `signal`, `kill` by --tag).
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
        /// The program and its arguments.
        #[arg(last = true, value_name = "ARGV")]
        command: Vec<String>,
    },
    /// Kill a process's group (SIGKILL).
    Kill {
        #[command(flatten)]
        at: At,
        #[command(flatten)]
        which: Which,
    },
    /// Create, list, restart or remove the session's code contexts (interpreters with
    /// state of their own); `create` prints the new context's id.
    Context {
        #[command(flatten)]
        at: At,
        #[arg(value_enum, value_name = "ACTION")]
        action: ContextActionArg,
        /// create: the context's language.
        #[arg(long, value_name = "LANGUAGE", value_enum, default_value = "python")]
        language: LanguageArg,
        /// create: its working directory in the jail.
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// restart, remove: the context's id.
        #[arg(long, value_name = "ID")]
        context: Option<String>,
    },
    /// List the sessions open on the server (yours; all of them for root).
    List {
        /// The server's socket.
        #[arg(long, value_name = "SOCKET", env = "BRIG_SERVER")]
        server: PathBuf,
        /// Only the sessions with this label (repeatable: all must hold).
        #[arg(long, value_name = "KEY=VALUE")]
        metadata: Vec<String>,
    },
    /// Replace a `--net filtered` session's network rules while it runs: new
    /// connections are judged by them at once; open ones they refuse are cut.
    Net {
        #[command(flatten)]
        at: At,
        /// The new rules, replacing all the old ones (repeatable; none: nothing gets out).
        #[arg(long, value_name = "HOST[:PORT]")]
        allow_net: Vec<String>,
        /// The new pins, replacing the old ones (repeatable).
        #[arg(long, value_name = "NAME:IP")]
        add_host: Vec<String>,
    },
    /// Set the session's end to now + DURATION (at most the server's --session-timeout).
    Timeout {
        #[command(flatten)]
        at: At,
        /// How long the session may live from now.
        #[arg(value_name = "DURATION")]
        timeout: Span,
    },
}

/// Which server, which session.
#[derive(Args, Debug)]
pub struct At {
    /// The server's socket.
    #[arg(long, value_name = "SOCKET", env = "BRIG_SERVER")]
    pub server: PathBuf,
    /// The session's id (as `brig session create` printed it).
    #[arg(long, value_name = "ID", env = "BRIG_SESSION")]
    pub session: String,
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The server's socket.
    #[arg(long, value_name = "SOCKET", env = "BRIG_SERVER")]
    pub server: PathBuf,
    /// The session's whole life [default: the server's --session-timeout].
    #[arg(long, value_name = "DURATION")]
    pub session_timeout: Option<Span>,
    /// The session ends after this long without a request [default: the server's
    /// --idle-timeout].
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<Span>,
    /// The size of the session's workspace, its home directory [default: --tmpfs-size].
    #[arg(long, value_name = "SIZE")]
    pub workspace_size: Option<Size>,
    /// A label for the session, shown and filtered by `brig session list` (repeatable;
    /// at most 32, keys up to 64 bytes, values up to 512).
    #[arg(long, value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,
    /// Read the session's options from a YAML file (as `brig run --config`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The session's jail, as for `brig run` (memory, pids and cpus hold for the whole
    /// session).
    #[command(flatten)]
    pub options: JailOptions,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub at: At,
    /// Run this file's code (- for standard input) in the session's interpreter, whose
    /// variables live on between cells.
    #[arg(long, value_name = "FILE")]
    pub code: Option<PathBuf>,
    /// The interpreter for --code: its default context [default: python, or the
    /// language of --context].
    #[arg(long, value_name = "LANGUAGE", value_enum)]
    pub language: Option<LanguageArg>,
    /// Run --code in this context (see `brig session context`).
    #[arg(long, value_name = "ID")]
    pub context: Option<String>,
    /// Write the cell's rich results (PNG, SVG, HTML, ...) to files in DIR, named
    /// result-N.EXT; their text is printed either way.
    #[arg(long, value_name = "DIR")]
    pub results_dir: Option<PathBuf>,
    /// Wall-clock limit of this exec (at most the session's --time-limit).
    #[arg(long, value_name = "DURATION")]
    pub time_limit: Option<Span>,
    /// Output kept, stdout, stderr and a cell's rich results together (1 MiB by default,
    /// at most 8 MiB); past it the exec is stopped (results past it are dropped).
    #[arg(long, value_name = "SIZE")]
    pub output_limit: Option<Size>,
    /// Set a variable for the command (repeatable).
    #[arg(long, value_name = "K=V")]
    pub env: Vec<String>,
    /// The command's working directory in the jail.
    #[arg(long, value_name = "DIR")]
    pub chdir: Option<PathBuf>,
    /// The command's standard input: a file, or - for this one's.
    #[arg(long, value_name = "FILE")]
    pub stdin: Option<PathBuf>,
    /// Write the exec's verdict (JSON) to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Print the output as it is produced (then the verdict's lines).
    #[arg(long, conflicts_with = "background")]
    pub stream: bool,
    /// Start the command without waiting and print its pid (see `brig session ps`,
    /// `connect`, `stdin`, `signal`, `kill`); it lives until it ends, is killed, or the
    /// session ends.
    #[arg(long)]
    pub background: bool,
    /// A name for a background process, usable instead of its pid.
    #[arg(long, value_name = "TAG", requires = "background")]
    pub tag: Option<String>,
    /// The command to run (after --).
    #[arg(last = true, value_name = "ARGV")]
    pub command: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ContextActionArg {
    Create,
    List,
    Restart,
    Remove,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum LanguageArg {
    Python,
    Node,
    Bash,
}

/// Runs one `brig session` command; brig's exit status.
pub fn run(command: SessionCommand) -> Result<i32> {
    match command {
        SessionCommand::Create(args) => create(*args),
        SessionCommand::Exec(args) => exec(args),
        SessionCommand::Put { at, local, remote } => files_client::put(&at, &local, &remote),
        SessionCommand::Get { at, remote, local } => {
            files_client::get(&at, &remote, local.as_deref())
        }
        SessionCommand::Stat { at, path } => files_client::stat(&at, &path),
        SessionCommand::Mkdir { at, path } => {
            files_client::simple(&at, json!({"type": "session_mkdir", "path": path}))
        }
        SessionCommand::Mv {
            at,
            source,
            destination,
        } => files_client::simple(
            &at,
            json!({"type": "session_rename", "source": source, "destination": destination}),
        ),
        SessionCommand::Rm { at, path } => {
            files_client::simple(&at, json!({"type": "session_remove", "path": path}))
        }
        SessionCommand::Context {
            at,
            action,
            language,
            cwd,
            context,
        } => contexts(&at, action, language, cwd, context),
        SessionCommand::Ls { at, path, depth } => {
            let reply = request(
                &at.server,
                json!({"type": "session_ls", "session": at.session, "path": path, "depth": depth}),
            )?;
            for entry in reply["entries"].as_array().into_iter().flatten() {
                let kind = entry["type"].as_str().unwrap_or("?");
                let mode = entry["mode"].as_u64().unwrap_or(0);
                let size = entry["size"].as_u64().unwrap_or(0);
                let name = printable(
                    entry[if depth.is_some() { "path" } else { "name" }]
                        .as_str()
                        .unwrap_or("?"),
                );
                let slash = if kind == "dir" { "/" } else { "" };
                println!("{kind:<7} {mode:04o} {size:>10} {name}{slash}");
            }
            Ok(0)
        }
        SessionCommand::Watch {
            at,
            recursive,
            path,
        } => watch::watch(&at, &path, recursive),
        SessionCommand::Ps { at } => processes::ps(&at),
        SessionCommand::Connect { at, which } => processes::connect(&at, &which),
        SessionCommand::Stdin {
            at,
            which,
            data,
            close,
        } => processes::stdin(&at, &which, data, close),
        SessionCommand::Signal { at, which, signal } => {
            processes::signal(&at, &which, Some(&signal))
        }
        SessionCommand::Kill { at, which } => processes::signal(&at, &which, None),
        SessionCommand::Pty { at, tag, command } => pty::attach(&at, command, tag),
        SessionCommand::Close { at } => {
            request(
                &at.server,
                json!({"type": "session_close", "session": at.session}),
            )?;
            Ok(0)
        }
        SessionCommand::List { server, metadata } => {
            let filter = labels(&metadata)?;
            let reply = request(&server, json!({"type": "session_list", "metadata": filter}))?;
            for session in reply["sessions"].as_array().into_iter().flatten() {
                println!("{}", list_line(session));
            }
            Ok(0)
        }
        SessionCommand::Net {
            at,
            allow_net,
            add_host,
        } => {
            let reply = request(
                &at.server,
                json!({"type": "session_network", "session": at.session, "allow_net": allow_net, "add_host": add_host}),
            )?;
            println!("connections cut: {}", reply["cut"]);
            Ok(0)
        }
        SessionCommand::Timeout { at, timeout } => {
            request(
                &at.server,
                json!({"type": "session_set_timeout", "session": at.session, "timeout": timeout}),
            )?;
            println!("session {} ends in {timeout}", at.session);
            Ok(0)
        }
    }
}

/// One request, one reply; a server's error reply is this side's error.
pub fn request(socket: &Path, mut message: Value) -> Result<Value> {
    message["brig"] = json!(protocol::VERSION);
    let stream = super::client::connect(socket)?;
    protocol::write_frame(stream.as_fd(), &message, &[])?;
    let mut reader = FrameReader::replies();
    next_reply(socket, &stream, &mut reader)
}

/// The next frame on `stream`; a server's error frame is this side's error.
fn next_reply(socket: &Path, stream: &impl AsFd, reader: &mut FrameReader) -> Result<Value> {
    let (body, _) = reader.read_blocking(stream)?.ok_or_else(|| {
        Error::setup(format!(
            "--server {}: the server closed the connection without an answer",
            socket.display()
        ))
    })?;
    checked(&body)
}

/// A reply's JSON, or this side's error for an error reply.
pub fn checked(body: &[u8]) -> Result<Value> {
    let reply: Value = serde_json::from_slice(body).map_err(|err| {
        Error::setup(format!("brig serve sent an answer that is not JSON: {err}"))
    })?;
    if reply["type"] == "error" {
        let message = printable(
            reply["message"]
                .as_str()
                .unwrap_or("brig serve refused the request"),
        );
        return Err(match reply["kind"].as_str() {
            Some("bad_input") => Error::input(message),
            _ => Error::setup(message),
        });
    }
    Ok(reply)
}

fn create(args: CreateArgs) -> Result<i32> {
    let mut options = crate::config::resolve(args.config.as_deref(), args.options)?;
    if !options.command.is_empty() {
        return Err(Error::input(
            "brig session create takes no program; run one with `brig session exec --session ID -- PROGRAM`",
        ));
    }
    options.profile = None;
    let mut message = json!({"type": "session_create", "options": options});
    if let Some(span) = args.session_timeout {
        message["session_timeout"] = json!(span);
    }
    if let Some(span) = args.idle_timeout {
        message["idle_timeout"] = json!(span);
    }
    if let Some(size) = args.workspace_size {
        message["workspace_size"] = json!(size);
    }
    if !args.metadata.is_empty() {
        message["metadata"] = json!(labels(&args.metadata)?);
    }
    let reply = request(&args.server, message)?;
    println!("{}", reply["session"].as_str().unwrap_or_default());
    Ok(0)
}

/// `--metadata KEY=VALUE` flags as a map (the server checks the bounds).
fn labels(flags: &[String]) -> Result<std::collections::BTreeMap<String, String>> {
    flags
        .iter()
        .map(|flag| {
            flag.split_once('=')
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .ok_or_else(|| {
                    Error::input(format!(
                        "--metadata {flag}: give KEY=VALUE, e.g. --metadata user=ada"
                    ))
                })
        })
        .collect()
}

/// One session of `brig session list`: id, owner, state, times (seconds from now),
/// labels; what the jail's side chose (the labels) escaped for the terminal.
fn list_line(session: &Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64;
    let from_now = |key: &str| {
        session[key]
            .as_i64()
            .map_or("-".to_string(), |at| format!("{}s", (at - now) / 1000))
    };
    let labels: Vec<String> = session["metadata"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(key, value)| printable(&format!("{key}={}", value.as_str().unwrap_or_default())))
        .collect();
    format!(
        "{} uid={} state={} age={}ms ends_in={} idle_ends_in={} requests={} {}",
        session["session"].as_str().unwrap_or("?"),
        session["uid"],
        session["state"].as_str().unwrap_or("?"),
        session["age_ms"],
        from_now("ends_at_ms"),
        from_now("idle_deadline_ms"),
        session["requests"],
        labels.join(",")
    )
    .trim_end()
    .to_string()
}

fn read_local(path: &Path) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().read_to_end(&mut data).map(drop)
    } else {
        std::fs::File::open(path).and_then(|mut file| file.read_to_end(&mut data).map(drop))
    };
    read.map_err(|err| Error::input(format!("{}: cannot read it: {err}", path.display())))?;
    Ok(data)
}

fn exec(args: ExecArgs) -> Result<i32> {
    let sinks = Sinks::open(args.report.as_deref(), None, None)?;
    let at = &args.at;
    let mut message = match (&args.code, args.command.is_empty()) {
        (Some(file), true) => {
            let code = String::from_utf8(read_local(file)?)
                .map_err(|_| Error::input(format!("--code {}: not UTF-8 text", file.display())))?;
            let mut message = json!({"type": "session_exec", "session": at.session, "code": code});
            if let Some(language) = args.language {
                message["language"] = json!(language_of(language));
            }
            if let Some(context) = &args.context {
                message["context"] = json!(context);
            }
            message
        }
        (None, false) => {
            let mut message = json!({
                "type": "session_exec",
                "session": at.session,
                "command": args.command,
                "env": args.env,
            });
            if let Some(dir) = &args.chdir {
                message["chdir"] = json!(dir);
            }
            if let Some(file) = &args.stdin {
                let input = String::from_utf8(read_local(file)?).map_err(|_| {
                    Error::input(format!("--stdin {}: not UTF-8 text", file.display()))
                })?;
                message["stdin"] = json!(input);
            }
            message
        }
        (Some(_), false) => {
            return Err(Error::input(
                "brig session exec: --code or a command after --, not both",
            ));
        }
        (None, true) => {
            return Err(Error::input(
                "brig session exec: nothing to run; give --code FILE or a command after --",
            ));
        }
    };
    if let Some(span) = args.time_limit {
        message["time_limit"] = json!(span);
    }
    if let Some(size) = args.output_limit {
        message["output_limit"] = json!(size);
    }
    if args.background {
        message["background"] = json!(true);
        if let Some(tag) = &args.tag {
            message["tag"] = json!(tag);
        }
        let reply = request(&at.server, message)?;
        println!("{}", reply["pid"]);
        return Ok(0);
    }
    let reply = match args.stream {
        true => {
            message["stream"] = json!(true);
            processes::stream(&at.server, message, "exec")?
        }
        false => request(&at.server, message)?,
    };
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(reply["stdout"].as_str().unwrap_or_default().as_bytes());
    // What the cell displayed, as text (the final value's is `result`, below).
    let results = reply["results"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for shown in results
        .iter()
        .filter(|bundle| bundle["is_main_result"] != true)
    {
        if let Some(text) = shown["text/plain"].as_str() {
            let _ = writeln!(stdout, "{text}");
        }
    }
    if let Some(result) = reply["result"].as_str() {
        let _ = writeln!(stdout, "{result}");
    }
    if let Some(dir) = &args.results_dir {
        write_results(dir, results)?;
    }
    let _ = stdout.flush();
    let mut stderr = std::io::stderr();
    let _ = stderr.write_all(reply["stderr"].as_str().unwrap_or_default().as_bytes());
    if let Some(traceback) = reply["error"]["traceback"]
        .as_str()
        .filter(|text| !text.is_empty())
    {
        let _ = stderr.write_all(traceback.as_bytes());
    } else if let Some(message) = reply["error"]["message"].as_str() {
        // The jail's interpreter names the error: escaped, as names from a jail are.
        let _ = writeln!(
            stderr,
            "{}: {}",
            printable(reply["error"]["type"].as_str().unwrap_or("Error")),
            printable(message)
        );
    }
    Ok(verdict_lines(&reply["verdict"], &sinks))
}

/// The verdict's `brig:` lines on stderr, the verdict to `sinks`; brig's exit status.
fn verdict_lines(verdict: &Value, sinks: &Sinks) -> i32 {
    let mut stderr = std::io::stderr();
    for line in crate::verdict::Verdict::stderr_lines_of(verdict) {
        let _ = writeln!(stderr, "brig: {line}");
    }
    sinks.deliver_json(verdict, None, None);
    verdict["brig_exit_code"]
        .as_i64()
        .unwrap_or(i64::from(ExitStatus::BRIG_FAILED)) as i32
}

fn language_of(language: LanguageArg) -> Language {
    match language {
        LanguageArg::Python => Language::Python,
        LanguageArg::Node => Language::Node,
        LanguageArg::Bash => Language::Bash,
    }
}

/// The files a cell's rich results are written to, by mime type: the extension, and
/// whether the data is base64.
const RESULT_FILES: &[(&str, &str, bool)] = &[
    ("image/png", "png", true),
    ("image/jpeg", "jpeg", true),
    ("application/pdf", "pdf", true),
    ("image/svg+xml", "svg", false),
    ("text/html", "html", false),
    ("text/markdown", "md", false),
    ("text/latex", "tex", false),
    ("application/json", "json", false),
];

/// Writes each result's rich formats to DIR/result-N.EXT (N from 1, in the cell's order).
fn write_results(dir: &Path, results: &[Value]) -> Result<()> {
    let failed = |path: &Path, err: &dyn std::fmt::Display| {
        Error::input(format!(
            "--results-dir {}: cannot write it: {err}",
            path.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(|err| failed(dir, &err))?;
    for (index, bundle) in results.iter().enumerate() {
        for (mime, extension, base64) in RESULT_FILES {
            let data = match (&bundle[*mime], base64) {
                (Value::Null, _) => continue,
                (Value::String(text), true) => base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|err| {
                        Error::setup(format!(
                            "brig serve sent a {mime} that is not base64: {err}"
                        ))
                    })?,
                (Value::String(text), false) => text.clone().into_bytes(),
                (value, _) => value.to_string().into_bytes(),
            };
            let path = dir.join(format!("result-{}.{extension}", index + 1));
            std::fs::write(&path, data).map_err(|err| failed(&path, &err))?;
        }
    }
    Ok(())
}

/// `brig session context ACTION`.
fn contexts(
    at: &At,
    action: ContextActionArg,
    language: LanguageArg,
    cwd: Option<PathBuf>,
    context: Option<String>,
) -> Result<i32> {
    let action = match action {
        ContextActionArg::Create => "create",
        ContextActionArg::List => "list",
        ContextActionArg::Restart => "restart",
        ContextActionArg::Remove => "remove",
    };
    let mut message = json!({"type": "session_context", "session": at.session, "action": action});
    if action == "create" {
        message["language"] = json!(language_of(language));
    }
    if let Some(cwd) = cwd {
        message["cwd"] = json!(cwd);
    }
    if let Some(context) = context {
        message["context"] = json!(context);
    }
    let reply = request(&at.server, message)?;
    let mut stdout = std::io::stdout();
    let listed = match reply["contexts"].as_array() {
        Some(all) => all.clone(),
        None if action == "create" => vec![reply["context"].clone()],
        None => Vec::new(),
    };
    for context in listed {
        let field = |name: &str| printable(context[name].as_str().unwrap_or("-"));
        let _ = match action {
            "create" => writeln!(stdout, "{}", field("id")),
            _ => writeln!(
                stdout,
                "{}\t{}\t{}\t{}",
                field("id"),
                field("language"),
                field("cwd"),
                if context["running"] == true {
                    "running"
                } else {
                    "stopped"
                }
            ),
        };
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn printable_escapes_control_characters_only() {
        assert_eq!(
            crate::verdict::printable("a\x1b]0;pwned\x07b\nc\\d\u{9b}é"),
            "a\\x1b]0;pwned\\x07b\\nc\\\\d\\u{9b}é"
        );
    }
}
