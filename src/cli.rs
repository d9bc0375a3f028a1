//! The command line.

use crate::options::JailOptions;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const EXIT_CODES: &str = "\
Exit status of `brig run`:
  N        the program exited with status N
  128+N    the program was killed by signal N (159 = SIGSYS: its seccomp profile killed it)
  124      brig killed the jail at --time-limit or --output-limit
  125      brig itself failed (bad option or config, setup failure); one line on stderr says why
  126      the program could not be executed
  127      the program was not found";

#[derive(Parser, Debug)]
#[command(
    name = "brig",
    version,
    about = "Run one untrusted program in a fresh Linux jail",
    long_about = "Run one untrusted program in a fresh Linux jail: new user, mount, pid, net, \
                  ipc, uts, cgroup and time namespaces, a minimal read-only root filesystem, \
                  a non-root user, no capabilities and no_new_privs.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run PROGRAM in a fresh jail and exit with its status.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Validate the options and print the fully resolved plan as YAML; runs nothing.
    Check(RunArgs),
    /// The built-in seccomp profiles: `brig seccomp list`, `brig seccomp show NAME`.
    #[command(subcommand)]
    Seccomp(SeccompCommand),
}

#[derive(Subcommand, Debug)]
pub enum SeccompCommand {
    /// List the built-in seccomp profiles.
    List,
    /// Print a built-in profile (seccompiler JSON); a copy is a starting point for your own.
    Show {
        /// The profile's name, e.g. default.
        #[arg(value_name = "NAME")]
        name: String,
    },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Read options from a YAML file; options on the command line override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub options: JailOptions,
}
