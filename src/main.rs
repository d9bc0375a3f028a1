//! brig: run one untrusted program in a fresh Linux jail.

mod channel;
mod child;
mod cli;
mod config;
mod error;
mod etc;
mod fds;
mod init;
mod layout;
#[cfg(test)]
mod manpage;
mod mnt;
mod net;
mod options;
mod plan;
mod privs;
mod supervisor;
mod sys;
mod units;
mod user;
mod uts;

use clap::Parser;
use cli::{Cli, Command, RunArgs};
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
            let outcome = supervisor::run(&plan)?;
            match &outcome {
                Outcome::TimedOut(limit) => eprintln!(
                    "brig: time limit of {} reached; the jail was killed",
                    units::Span(*limit)
                ),
                Outcome::ExecFailed { message, .. } => eprintln!("brig: {message}"),
                Outcome::Exited(_) | Outcome::Signaled(_) => {}
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
