//! A jail's life, across its three processes: brig's supervisor (`supervisor.rs`), the
//! jail's first process, which assembles the jail and stays as its PID 1 (`child.rs`,
//! then `init.rs`), and the program. They talk over `channel.rs`; `output.rs` collects
//! their bounded output.
//!
//! A jail is assembled first and given its program later ([`Jail::assemble`], then
//! [`Jail::run`]): between the two, its init waits with every namespace, the id maps, the
//! cgroup and the mount tree in place. `brig run` does both at once ([`run`]).

mod channel;
mod child;
mod init;
pub mod outcome;
pub mod output;
pub mod session;
mod supervisor;

use crate::error::{Error, Result};
use crate::plan::Plan;
use std::path::PathBuf;

pub use channel::Stdio;
pub use init::forwarded_signals;
pub use outcome::{Outcome, RunReport};
pub use output::{Captured, Counts as OutputCounts, Output};
pub use session::SessionJail;
pub use supervisor::{Jail, RequestClock};

/// What runs in an assembled jail: the arguments (the first one is looked up in the
/// jail's `PATH` unless it has a `/`), the whole environment and the working directory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Program {
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub chdir: PathBuf,
}

impl Program {
    /// What the jail's init needs of a program it is handed: something to run, and no
    /// NUL byte in any string (each becomes a C string).
    pub fn check(&self) -> Result<()> {
        if self.argv.is_empty() {
            return Err(Error::input(
                "no program to run: give one, e.g. `python3 main.py`",
            ));
        }
        let strings = self.argv.iter().chain(&self.env);
        let chdir = self.chdir.to_string_lossy();
        if strings
            .chain(std::iter::once(&chdir.to_string()))
            .any(|text| text.contains('\0'))
        {
            return Err(Error::input(
                "the program's arguments, environment or directory contain a NUL byte; remove it",
            ));
        }
        if !self.chdir.is_absolute() {
            return Err(Error::input(format!(
                "the program's directory {} is relative; give an absolute path in the jail",
                self.chdir.display()
            )));
        }
        Ok(())
    }

    /// The program the plan names.
    pub fn of(plan: &Plan) -> Program {
        Program {
            argv: plan.command.clone(),
            env: plan.env.clone(),
            chdir: plan.chdir.clone(),
        }
    }
}

/// One jail, one program: assemble the jail `plan` describes and run its program.
pub fn run(plan: &Plan) -> Result<RunReport> {
    Jail::assemble(plan)
        .map_err(name_the_container_settings)?
        .run(&Program::of(plan))
}

/// Inside a container, a jail refused with EPERM while creating its namespaces or setting
/// itself up (the hostname) is the container's default settings at work, not the
/// kernel's: the error names the container settings that fix it, as `brig doctor` does.
pub fn name_the_container_settings(err: Error) -> Error {
    use crate::error::Stage;
    let refused = err.errno() == Some(nix::errno::Errno::EPERM)
        && matches!(err.stage(), Some(Stage::Namespaces | Stage::Isolation));
    match crate::doctor::in_container() {
        Some(runtime) if refused => err.hint(format!(
            "brig runs inside a container ({runtime}) whose settings forbid this: {}",
            crate::doctor::container_settings(&runtime)
        )),
        _ => err,
    }
}
