//! brig: run one untrusted program in a fresh Linux jail.

// The C runtime calls brig's `main` directly: see there.
#![cfg_attr(not(test), no_main)]
#![deny(unsafe_code)]

mod cli;
#[cfg(test)]
mod manpage;

use brig::error::{Error, Result};
use brig::plan::{Plan, ReportTarget};
use brig::verdict::{Sinks, Verdict};
use brig::{ExitStatus, config, doctor, seccomp};
use clap::Parser;
use cli::{Cli, Command, CompletionShell, Deferred, RootfsCommand, RunArgs, SeccompCommand};

/// brig's entry, called by the C runtime without Rust's runtime setup, which would cost
/// every jail a read of /proc/self/maps and an alternate signal stack for its stack
/// overflow message. Of that setup brig keeps what it needs: SIGPIPE ignored, so that a
/// closed pipe is an error to handle and not brig's death. Every path out ends in
/// `std::process::exit`, which flushes stdout.
#[cfg(not(test))]
#[allow(unsafe_code)] // exporting the C symbol `main` is the one unsafe attribute here
#[unsafe(no_mangle)]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    brig_main()
}

// Unit tests have the test harness's main instead.
#[cfg_attr(test, allow(dead_code))]
fn brig_main() -> ! {
    brig::prepare_process();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(), // --help, --version
        Err(err) => {
            eprintln!("brig: {}", one_line_clap_error(&err));
            std::process::exit(ExitStatus::BRIG_FAILED);
        }
    };
    let code = match dispatch(cli.command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("brig: {err}");
            ExitStatus::BRIG_FAILED
        }
    };
    std::process::exit(code);
}

fn dispatch(command: Command) -> Result<i32> {
    match command {
        Command::Run(Deferred(args)) if args.server.is_some() => {
            let socket = args.server.clone().expect("checked");
            let origins = config::origins(args.config.as_deref(), &args.options)?;
            let options = config::resolve(args.config.as_deref(), args.options)?;
            cli::served::run(&socket, options, origins)
        }
        Command::Run(Deferred(args)) => Ok(run(args)),
        Command::Serve(args) if args.status => cli::served::status(&args.socket),
        Command::Serve(args) => brig::serve::serve(*args.0),
        Command::Session(command) => cli::session::run(command.0),
        Command::Gateway(args) => brig::gateway::run(args.0),
        Command::Check(args) => {
            let plan = resolve(args.0)?;
            let yaml = serde_saphyr::to_string(&plan)
                .map_err(|err| Error::setup(format!("print the plan as YAML: {err}")))?;
            print!("{yaml}");
            Ok(0)
        }
        Command::Seccomp(SeccompCommand::List) => {
            for profile in seccomp::PROFILES {
                println!("{:<8} {}", profile.name, profile.about);
            }
            println!("{:<8} no filter (reported as a warning)", "none");
            Ok(0)
        }
        Command::Seccomp(SeccompCommand::Show { name }) => {
            let profile = seccomp::builtin(&name).ok_or_else(|| {
                Error::input(format!(
                    "seccomp show {name}: no such built-in profile; choose one of {}",
                    seccomp::names().join(", ")
                ))
            })?;
            print!("{}", profile.json);
            Ok(0)
        }
        Command::Doctor(args) => Ok(doctor::run(&args)),
        Command::Completions { shell } => {
            print!("{}", completions(shell));
            Ok(0)
        }
        Command::Rootfs(command) => rootfs(command),
    }
}

/// The completion script for `shell`, generated from the command-line definitions.
pub fn completions(shell: CompletionShell) -> String {
    use clap_complete::Shell;
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli::built_whole::<Cli>(), "brig", &mut script);
    String::from_utf8(script).expect("completion scripts are UTF-8")
}

fn rootfs(command: RootfsCommand) -> Result<i32> {
    match command {
        RootfsCommand::Build {
            manifest,
            out,
            tar,
            force,
        } => {
            let options = brig_rootfs::Options {
                tar: tar.clone(),
                force,
            };
            let summary = brig_rootfs::build(&manifest, &out, &options)
                .map_err(|err| Error::input(format!("rootfs build: {err}")))?;
            for note in &summary.notes {
                eprintln!("brig: rootfs build: note: {note}");
            }
            for deb in &summary.debs {
                eprintln!("brig: rootfs build: unpacked {deb}");
            }
            println!(
                "{} {} ({} entries, {} bytes in files)",
                summary.digest,
                out.display(),
                summary.entries,
                summary.bytes
            );
            if let Some(tar) = tar {
                println!("tar archive: {}", tar.display());
            }
            Ok(0)
        }
        RootfsCommand::Verify { dir } => {
            let digest = brig_rootfs::verify(&dir)
                .map_err(|err| Error::input(format!("rootfs verify: {err}")))?;
            println!("{digest} {}", dir.display());
            Ok(0)
        }
        RootfsCommand::Show { name } => {
            let (_, text) = brig_rootfs::SHIPPED
                .iter()
                .find(|(known, _)| *known == name)
                .ok_or_else(|| {
                    Error::input(format!(
                        "rootfs show {name}: no such shipped manifest; choose one of {}",
                        brig_rootfs::shipped_names().join(", ")
                    ))
                })?;
            print!("{text}");
            Ok(0)
        }
    }
}

/// Runs the jail and delivers the verdict: exit status, one line on stderr when brig
/// ended or failed the run, the JSON report, the audit log.
fn run(args: RunArgs) -> i32 {
    // If the options do not resolve, the command line still says where the verdict goes.
    let cli = args.options.clone();
    let plan = match resolve(args) {
        Ok(plan) => plan,
        Err(err) => {
            eprintln!("brig: {err}");
            let verdict = Verdict::of_setup_error(None, &err);
            let report_fd = cli.report_fd;
            if let Ok(sinks) =
                Sinks::open(cli.report.as_deref(), report_fd, cli.audit_log.as_deref())
            {
                sinks.deliver(&verdict, None);
            }
            return verdict.brig_exit_code;
        }
    };
    let (report, report_fd) = match &plan.report {
        Some(ReportTarget::File(path)) => (Some(path.as_path()), None),
        Some(ReportTarget::Fd(fd)) => (None, Some(*fd)),
        None => (None, None),
    };
    let sinks = match Sinks::open(report, report_fd, plan.audit_log.as_deref()) {
        Ok(sinks) => sinks,
        Err(err) => {
            eprintln!("brig: {err}");
            return ExitStatus::BRIG_FAILED;
        }
    };
    for warning in &plan.run_warnings {
        eprintln!("brig: warning: {warning}");
    }
    let verdict = match brig::jail::run(&plan) {
        Ok(report) => {
            let verdict = Verdict::of_run(&plan, &report);
            // After output cut mid-line, start brig's own lines on a fresh one.
            let mut fresh_line = if report.output.is_some_and(|output| output.stderr_mid_line) {
                "\n"
            } else {
                ""
            };
            for line in verdict.stderr_lines() {
                eprintln!("{fresh_line}brig: {line}");
                fresh_line = "";
            }
            if plan.seccomp.mode == seccomp::Mode::Log {
                let line = seccomp::report_log(&plan.seccomp.profile, report.seccomp_log.as_ref());
                eprintln!("brig: {line}");
            }
            verdict
        }
        Err(err) => {
            eprintln!("brig: {err}");
            Verdict::of_setup_error(Some(&plan), &err)
        }
    };
    sinks.deliver(&verdict, Some(&plan));
    verdict.brig_exit_code
}

fn resolve(args: RunArgs) -> Result<Plan> {
    let options = config::resolve(args.config.as_deref(), args.options)?;
    Plan::resolve(options)
}

/// Arguments a variable can give instead (`brig session`'s), as clap names them.
const ENV_DEFAULTS: [(&str, &str); 2] = [
    ("--server <SOCKET>", "BRIG_SERVER"),
    ("--session <ID>", "BRIG_SESSION"),
];

/// clap explains a bad command line over several lines; brig's contract is one line,
/// which keeps what names the fix: the missing arguments, the possible values, clap's
/// "a similar argument exists" tips, and the subcommand whose help to read.
fn one_line_clap_error(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let mut lines = rendered.lines().map(str::trim);
    let mut message = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    // The lines under the first, up to a blank one: the missing arguments, or the values.
    let items: Vec<String> = lines
        .by_ref()
        .take_while(|line| !line.is_empty())
        .map(
            |item| match ENV_DEFAULTS.iter().find(|(arg, _)| *arg == item) {
                Some((_, variable)) => format!("{item} (or ${variable})"),
                None => item.to_string(),
            },
        )
        .collect();
    if !items.is_empty() {
        let list = items.join(", ");
        message = match message.strip_suffix(':') {
            Some(head) => format!("{head}: {list}"),
            None => format!("{message} {list}"),
        };
    }
    let mut help = "brig".to_string();
    for line in lines {
        if let Some(tip) = line.strip_prefix("tip: ") {
            message.push_str(&format!("; {tip}"));
        } else if let Some(usage) = line.strip_prefix("Usage: ") {
            // `brig serve --socket <PATH>`: the command, up to its first argument.
            help = usage
                .split_whitespace()
                .take_while(|word| !word.starts_with(['-', '[', '<']))
                .collect::<Vec<_>>()
                .join(" ");
            break;
        }
    }
    format!("{message}; see `{help} --help`")
}
