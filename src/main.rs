//! brig: run one untrusted program in a fresh Linux jail.

mod channel;
mod child;
mod cli;
mod config;
mod error;
mod etc;
mod fds;
mod init;
mod landlock;
mod layout;
#[cfg(test)]
mod manpage;
mod mnt;
mod net;
mod options;
mod plan;
mod privs;
mod seccomp;
mod supervisor;
mod sys;
mod syscalls;
mod units;
mod user;
mod uts;

use clap::Parser;
use cli::{Cli, Command, RunArgs, SeccompCommand};
use error::{Error, Result};
use plan::Plan;
use supervisor::Outcome;

/// Exit status when brig itself fails.
const EXIT_BRIG_FAILED: i32 = 125;

fn main() {
    fds::ensure_standard_fds_open();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(), // --help, --version
        Err(err) => {
            eprintln!("brig: {}", one_line_clap_error(&err));
            std::process::exit(EXIT_BRIG_FAILED);
        }
    };
    let code = match dispatch(cli.command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("brig: {err}");
            EXIT_BRIG_FAILED
        }
    };
    std::process::exit(code);
}

fn dispatch(command: Command) -> Result<i32> {
    match command {
        Command::Run(args) => {
            let plan = resolve(args)?;
            let finished = supervisor::run(&plan)?;
            let outcome = &finished.outcome;
            match outcome {
                Outcome::TimedOut(limit) => eprintln!(
                    "brig: time limit of {} reached; the jail was killed",
                    units::Span(*limit)
                ),
                Outcome::ExecFailed { message, .. } => eprintln!("brig: {message}"),
                Outcome::Signaled {
                    seccomp: true,
                    syscall,
                    ..
                } => match syscall {
                    Some(name) => {
                        eprintln!("brig: the program was killed by seccomp (syscall {name})")
                    }
                    None => eprintln!(
                        "brig: the program was killed by seccomp (a call its profile {} does not allow)",
                        plan.seccomp.profile
                    ),
                },
                Outcome::Exited(_) | Outcome::Signaled { .. } => {}
            }
            if plan.seccomp.mode == seccomp::Mode::Log {
                report_seccomp_log(&plan, finished.seccomp_log.as_ref());
            }
            Ok(outcome.exit_code())
        }
        Command::Check(args) => {
            let plan = resolve(args)?;
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
    }
}

/// `--seccomp-log`: one line naming the calls the profile would have denied.
fn report_seccomp_log(plan: &Plan, logged: Option<&seccomp::Logged>) {
    let profile = &plan.seccomp.profile;
    match logged {
        None => eprintln!(
            "brig: --seccomp-log: brig cannot read the kernel's audit records here (that takes root); as root, read them with `journalctl -k -g type=1326` or `dmesg | grep type=1326` (syscall=N is the number)"
        ),
        Some(logged) if logged.allowed.is_empty() => eprintln!(
            "brig: --seccomp-log: the profile {profile} denied nothing{}",
            if logged.lossy {
                " (some audit records were lost)"
            } else {
                ""
            }
        ),
        Some(logged) => eprintln!(
            "brig: --seccomp-log: the profile {profile} would have denied: {}{}",
            logged.allowed.join(", "),
            if logged.lossy {
                " (some audit records were lost; the list may be incomplete)"
            } else {
                ""
            }
        ),
    }
}

fn resolve(args: RunArgs) -> Result<Plan> {
    let options = config::resolve(args.config.as_deref(), args.options)?;
    Plan::resolve(options)
}

/// clap explains a bad flag over several lines; brig's contract is one line.
fn one_line_clap_error(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let first = rendered
        .lines()
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ");
    format!("{first}; see `brig --help`")
}
