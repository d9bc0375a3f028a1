//! `brig session ...`: the command line's client for a server's sessions (see
//! `session.rs` and docs/protocol.md). Each command is one request on a fresh
//! connection; `create` prints the session's id, the others take it with `--session`.

use base64::Engine;
use brig::error::{Error, Result};
use brig::exit::ExitStatus;
use brig::options::JailOptions;
use brig::serve::protocol::{ContextAction, Language, Request};
use brig::serve::reply::{Bundle, ContextInfo, SessionInfo};
use brig::serve::{Client, Create, Exec, Session};
use brig::units::{Size, Span};
use brig::verdict::{Sinks, Verdict, printable};
use clap::{Args, Subcommand};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[path = "session_dial.rs"]
mod dial;
#[path = "session_files.rs"]
mod files;
#[path = "session_processes.rs"]
mod processes;
#[path = "session_pty.rs"]
mod pty;
#[path = "session_watch.rs"]
mod watch;
pub use processes::Which;

#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Open a session on the server and print its id.
    #[command(mut_arg("command", |arg| arg.hide(true)))]
    Create(Box<CreateArgs>),
    /// Run a command (`-- ARGV...`) or a code cell (`--code FILE|-`) in a session.
    Exec(Box<ExecArgs>),
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
    /// Connect to PORT of the session's own loopback (a server a program of the session
    /// runs, on 0.0.0.0, 127.0.0.1 or ::) and copy standard input to it and what it sends
    /// to standard output, as `nc` does, until it closes. No network rule is needed: the
    /// jail's init connects inside the jail.
    Dial {
        #[command(flatten)]
        at: At,
        /// The port (1-65535).
        #[arg(value_name = "PORT")]
        port: u16,
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
        /// The new deny rules (repeatable; with any, what they do not name goes out
        /// unless an --allow-net rule names it too).
        #[arg(long, value_name = "HOST[:PORT]")]
        deny_net: Vec<String>,
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
    /// Pause the session: every process of its jail frozen where it is (the cgroup
    /// freezer) until `brig session resume`; its timeout and idle timer stop meanwhile.
    Pause {
        #[command(flatten)]
        at: At,
    },
    /// Resume a paused session where it was; its end moves by the time it was paused.
    Resume {
        #[command(flatten)]
        at: At,
    },
    /// Print the session's resource use now (CPU, memory, workspace) as JSON.
    Stats {
        #[command(flatten)]
        at: At,
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
    /// Map uid 0 into the session's jail too (a second host uid of its own), so that
    /// `brig session exec --user root` runs as root inside, without capabilities. Only
    /// with a root server using per-jail host uids.
    #[arg(long)]
    pub root: bool,
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
    /// Run the command as `root` (uid 0 inside the jail, without capabilities; a session
    /// created with --root) or as the jail's user (its name) [default: the jail's user].
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
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

impl At {
    /// The session, on its server.
    fn session(&self) -> Session {
        Client::new(&self.server).session(&self.session)
    }
}

/// Runs one `brig session` command; brig's exit status.
pub fn run(command: SessionCommand) -> Result<i32> {
    match command {
        SessionCommand::Create(args) => create(*args),
        SessionCommand::Exec(args) => exec(*args),
        SessionCommand::Put { at, local, remote } => files::put(&at, &local, &remote),
        SessionCommand::Get { at, remote, local } => files::get(&at, &remote, local.as_deref()),
        SessionCommand::Stat { at, path } => files::stat(&at, &path),
        SessionCommand::Mkdir { at, path } => at.session().mkdir(&path).map(|_| 0),
        SessionCommand::Mv {
            at,
            source,
            destination,
        } => at.session().rename(&source, &destination).map(|()| 0),
        SessionCommand::Rm { at, path } => at.session().remove(&path).map(|_| 0),
        SessionCommand::Context {
            at,
            action,
            language,
            cwd,
            context,
        } => contexts(&at, action, language, cwd, context),
        SessionCommand::Ls { at, path, depth } => {
            let (entries, _) = at.session().ls(&path, depth)?;
            for entry in entries {
                let name = match depth {
                    Some(_) => entry.path.as_deref().unwrap_or("?"),
                    None => &entry.name,
                };
                let slash = if entry.kind == "dir" { "/" } else { "" };
                println!(
                    "{:<7} {:04o} {:>10} {}{slash}",
                    entry.kind,
                    entry.mode,
                    entry.size,
                    printable(name)
                );
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
            at.session().signal(&which.target(), &signal).map(|_| 0)
        }
        SessionCommand::Kill { at, which } => at.session().kill(&which.target()).map(|()| 0),
        SessionCommand::Dial { at, port } => dial::dial(&at, port),
        SessionCommand::Pty { at, tag, command } => pty::attach(&at, command, tag),
        SessionCommand::Close { at } => at.session().close().map(|()| 0),
        SessionCommand::List { server, metadata } => {
            let filter = labels(&metadata)?;
            for session in Client::new(server).list(&filter)? {
                println!("{}", list_line(&session));
            }
            Ok(0)
        }
        SessionCommand::Net {
            at,
            allow_net,
            deny_net,
            add_host,
        } => {
            let cut = at.session().set_network(allow_net, deny_net, add_host)?;
            println!("connections cut: {cut}");
            Ok(0)
        }
        SessionCommand::Timeout { at, timeout } => {
            at.session().set_timeout(timeout)?;
            println!("session {} ends in {timeout}", at.session);
            Ok(0)
        }
        SessionCommand::Pause { at } => {
            match at.session().pause()? {
                true => println!("session {} was paused already", at.session),
                false => println!("session {} paused", at.session),
            }
            Ok(0)
        }
        SessionCommand::Resume { at } => {
            if let brig::serve::reply::SessionReply::Resumed {
                already, paused_ms, ..
            } = at.session().resume()?
            {
                match already {
                    true => println!("session {} was not paused", at.session),
                    false => println!(
                        "session {} resumed after {:.3}s paused",
                        at.session,
                        paused_ms as f64 / 1000.0
                    ),
                }
            }
            Ok(0)
        }
        SessionCommand::Stats { at } => {
            let stats = at.session().stats()?;
            println!(
                "{}",
                serde_json::to_string(&stats).expect("stats always serialize")
            );
            Ok(0)
        }
    }
}

fn create(args: CreateArgs) -> Result<i32> {
    let mut options = brig::config::resolve(args.config.as_deref(), args.options)?;
    // --secret and --secret-host are read here, on the client's side (its environment,
    // its files), and go to the server as the session's `secrets`.
    let secrets = brig::net::secrets::Given::read(
        &options.secret,
        &options.secret_host,
        &options.secret_body,
    )?;
    options.secret.clear();
    options.secret_host.clear();
    options.secret_body.clear();
    if !options.command.is_empty() {
        return Err(Error::input(
            "brig session create takes no program; run one with `brig session exec --session ID -- PROGRAM`",
        ));
    }
    let create = Create {
        options,
        session_timeout: args.session_timeout,
        idle_timeout: args.idle_timeout,
        workspace_size: args.workspace_size,
        metadata: labels(&args.metadata)?,
        secrets,
        root: args.root,
    };
    let session = Client::new(&args.server).create(&create)?;
    println!("{}", session.id());
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
fn list_line(session: &SessionInfo) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64;
    let from_now = |at: Option<u64>| {
        at.map_or("-".to_string(), |at| {
            format!("{}s", (at as i64 - now) / 1000)
        })
    };
    let labels: Vec<String> = session
        .metadata
        .iter()
        .map(|(key, value)| printable(&format!("{key}={value}")))
        .collect();
    format!(
        "{} uid={} state={} age={}ms ends_in={} idle_ends_in={} requests={} {}",
        printable(&session.session),
        session.uid,
        printable(&session.state),
        session.age_ms,
        from_now(Some(session.ends_at_ms)),
        from_now(session.idle_deadline_ms),
        session.requests,
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
    let mut exec = match (&args.code, args.command.is_empty()) {
        (Some(file), true) => {
            let code = String::from_utf8(read_local(file)?)
                .map_err(|_| Error::input(format!("--code {}: not UTF-8 text", file.display())))?;
            Exec {
                code: Some(code),
                language: args.language.map(language_of),
                context: args.context.clone(),
                user: args.user.clone(),
                ..Exec::default()
            }
        }
        (None, false) => {
            let stdin = match &args.stdin {
                Some(file) => Some(String::from_utf8(read_local(file)?).map_err(|_| {
                    Error::input(format!("--stdin {}: not UTF-8 text", file.display()))
                })?),
                None => None,
            };
            Exec {
                command: args.command.clone(),
                env: args.env.clone(),
                chdir: args.chdir.clone(),
                stdin,
                user: args.user.clone(),
                ..Exec::default()
            }
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
    exec.time_limit = args.time_limit;
    exec.output_limit = args.output_limit;
    let session = at.session();
    if args.background {
        exec.tag = args.tag.clone();
        let process = session.start(&exec)?;
        println!("{}", pid_text(process.pid));
        return Ok(0);
    }
    let reply = match args.stream {
        true => session.exec_stream(&exec, processes::print_output)?,
        false => session.exec(&exec)?,
    };
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(reply.stdout.as_deref().unwrap_or_default().as_bytes());
    let cell = reply.cell.as_ref();
    // What the cell displayed, as text (the final value's is `result`, below).
    let results = cell.map(|cell| cell.results.as_slice()).unwrap_or_default();
    for shown in results
        .iter()
        .filter(|bundle| bundle.get("is_main_result") != Some(&Value::Bool(true)))
    {
        if let Some(text) = shown.get("text/plain").and_then(Value::as_str) {
            let _ = writeln!(stdout, "{text}");
        }
    }
    if let Some(result) = cell.and_then(|cell| cell.result.as_deref()) {
        let _ = writeln!(stdout, "{result}");
    }
    if let Some(dir) = &args.results_dir {
        write_results(dir, results)?;
    }
    let _ = stdout.flush();
    let mut stderr = std::io::stderr();
    let _ = stderr.write_all(reply.stderr.as_deref().unwrap_or_default().as_bytes());
    if let Some(error) = cell.and_then(|cell| cell.error.as_ref()) {
        if !error.traceback.is_empty() {
            let _ = stderr.write_all(error.traceback.as_bytes());
        } else {
            // The jail's interpreter names the error: escaped, as names from a jail are.
            let _ = writeln!(
                stderr,
                "{}: {}",
                printable(&error.kind),
                printable(&error.message)
            );
        }
    }
    Ok(verdict_lines(Some(&reply.verdict), &sinks))
}

/// A pid as the server said it (null: the jail has not said it).
fn pid_text(pid: Option<u32>) -> String {
    pid.map_or("null".to_string(), |pid| pid.to_string())
}

/// The verdict's `brig:` lines on stderr, the verdict to `sinks`; brig's exit status.
fn verdict_lines(verdict: Option<&Verdict>, sinks: &Sinks) -> i32 {
    let Some(verdict) = verdict else {
        return ExitStatus::BRIG_FAILED;
    };
    let mut stderr = std::io::stderr();
    for line in verdict.stderr_lines() {
        let _ = writeln!(stderr, "brig: {line}");
    }
    let value = serde_json::to_value(verdict).expect("a verdict always serializes");
    sinks.deliver_json(&value, None, None);
    verdict.brig_exit_code
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
fn write_results(dir: &Path, results: &[Bundle]) -> Result<()> {
    let failed = |path: &Path, err: &dyn std::fmt::Display| {
        Error::input(format!(
            "--results-dir {}: cannot write it: {err}",
            path.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(|err| failed(dir, &err))?;
    for (index, bundle) in results.iter().enumerate() {
        for (mime, extension, base64) in RESULT_FILES {
            let data = match (bundle.get(*mime), base64) {
                (None | Some(Value::Null), _) => continue,
                (Some(Value::String(text)), true) => base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|err| {
                        Error::setup(format!(
                            "brig serve sent a {mime} that is not base64: {err}"
                        ))
                    })?,
                (Some(Value::String(text)), false) => text.clone().into_bytes(),
                (Some(value), _) => value.to_string().into_bytes(),
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
    let session = at.session();
    let mut stdout = std::io::stdout();
    match action {
        ContextActionArg::Create => {
            let created = session.create_context(language_of(language), cwd)?;
            let _ = writeln!(stdout, "{}", printable(&created.id));
        }
        ContextActionArg::List => {
            for context in session.contexts()? {
                let _ = writeln!(stdout, "{}", context_line(&context));
            }
        }
        // Without --context the server's refusal says what is missing.
        ContextActionArg::Restart | ContextActionArg::Remove => {
            let action = match action {
                ContextActionArg::Restart => ContextAction::Restart,
                _ => ContextAction::Remove,
            };
            session.client().request(&Request::SessionContext {
                session: at.session.clone(),
                action,
                language: None,
                cwd,
                context,
            })?;
        }
    }
    Ok(0)
}

/// One context of `brig session context list`: id, language, cwd, running or stopped.
fn context_line(context: &ContextInfo) -> String {
    let language = serde_json::to_value(context.language).unwrap_or_default();
    format!(
        "{}\t{}\t{}\t{}",
        printable(&context.id),
        printable(language.as_str().unwrap_or("-")),
        printable(context.cwd.as_deref().unwrap_or("-")),
        if context.running {
            "running"
        } else {
            "stopped"
        }
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn printable_escapes_control_characters_only() {
        assert_eq!(
            brig::verdict::printable("a\x1b]0;pwned\x07b\nc\\d\u{9b}é"),
            "a\\x1b]0;pwned\\x07b\\nc\\\\d\\u{9b}é"
        );
    }
}
