//! The command line.

use brig::ExitStatus;
pub use brig::doctor::DoctorArgs;
use brig::options::JailOptions;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

// `brig run --server` and `brig serve --status` (served.rs), `brig session ...`
// (session.rs): clap types and printing over `brig::serve`'s clients.
mod deferred;
pub mod served;
pub mod session;

pub use deferred::{Deferred, built_whole};

#[derive(Parser, Debug)]
#[command(
    name = "brig",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("BRIG_COMMIT"), ")"),
    about = "Run one untrusted program in a fresh Linux jail",
    long_about = "Run one untrusted program in a fresh Linux jail: new user, mount, pid, net, \
                  ipc, uts, cgroup and time namespaces, a minimal read-only root filesystem, \
                  a non-root user, no capabilities and no_new_privs.",
    after_help = ExitStatus::help_text()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run PROGRAM in a fresh jail and exit with its status.
    #[command(after_help = ExitStatus::help_text())]
    Run(Deferred<RunArgs>),
    /// A jail server with a warm pool: `brig serve --socket PATH [--pool N] [RUN OPTIONS]`;
    /// clients run with `brig run --server PATH -- PROGRAM`.
    #[command(
        after_help = "Exit status of `brig serve`: 0 once drained (SIGTERM, SIGINT); 125 when it \
                      cannot start as configured (one line on stderr says why and the fix): a bad \
                      option, or --memory/--pids/--cpus this host cannot enforce for its user. A \
                      restart fails the same way: a systemd unit names it in \
                      RestartPreventExitStatus=125."
    )]
    Serve(deferred::ServeArgs),
    /// E2B's API (REST and envd) on HOST:PORT, for the official SDKs: each sandbox a
    /// session of the `brig serve` on SOCKET, each API key a tenant.
    #[command(
        after_help = "An E2B program then needs only E2B_API_URL=http://HOST:PORT \
                      E2B_SANDBOX_URL=http://HOST:PORT E2B_API_KEY=KEY. Exit status: 0 once \
                      stopped (SIGTERM, SIGINT); 125 when it cannot start as configured (one \
                      line on stderr names the option or file:line and the fix)."
    )]
    Gateway(Deferred<brig::gateway::GatewayArgs>),
    /// Sessions on a `brig serve`: a jail that lives between requests (variables of its
    /// interpreter, files of its workspace): create, exec, put, get, ls, close, list.
    #[command(subcommand)]
    Session(Deferred<session::SessionCommand>),
    /// Validate the options and print the fully resolved plan as YAML; runs nothing.
    Check(Deferred<RunArgs>),
    /// The built-in seccomp profiles: `brig seccomp list`, `brig seccomp show NAME`.
    #[command(subcommand)]
    Seccomp(SeccompCommand),
    /// Probe this host: what works, what does not, and the fix; exit 0 when a default jail
    /// can run here.
    Doctor(DoctorArgs),
    /// Print a shell completion script: `source <(brig completions bash)`.
    Completions {
        /// bash, zsh or fish.
        #[arg(value_name = "SHELL")]
        shell: CompletionShell,
    },
    /// Hermetic root filesystems for `--rootfs`: `brig rootfs build`, `verify`, `show`.
    #[command(subcommand)]
    Rootfs(RootfsCommand),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Subcommand, Debug)]
pub enum RootfsCommand {
    /// Build a root filesystem from a manifest (a YAML file, or python, node, shell,
    /// e2b-base or e2b-code-interpreter for the shipped ones) into a new directory OUT,
    /// with its digest in OUT/.brig-rootfs-digest.
    Build {
        /// The manifest: a path, or the name of a shipped one (python, node, shell, e2b-base,
        /// e2b-code-interpreter: E2B's templates `base` and `code-interpreter-v1`).
        #[arg(value_name = "MANIFEST")]
        manifest: String,
        /// The directory to create.
        #[arg(value_name = "OUT")]
        out: PathBuf,
        /// Also write the root as a reproducible tar archive (fixed owners and times).
        #[arg(long, value_name = "FILE")]
        tar: Option<PathBuf>,
        /// Replace OUT if it is a root brig built before.
        #[arg(long)]
        force: bool,
    },
    /// Recompute the digest of a root and compare it with the one recorded at build time.
    Verify {
        /// The root's directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print a shipped manifest, a starting point for your own.
    Show {
        /// python, node, shell, e2b-base or e2b-code-interpreter.
        #[arg(value_name = "NAME")]
        name: String,
    },
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

    /// Run in a jail of the `brig serve` listening on this socket (same options, exit
    /// status and verdict; a fresh jail from its warm pool). Only this option sends a run
    /// to a server: `brig run` does not read BRIG_SERVER (`brig session` and the clients
    /// do), so that where a program runs is always on the command line.
    #[arg(long, value_name = "SOCKET")]
    pub server: Option<PathBuf>,

    #[command(flatten)]
    pub options: JailOptions,
}
