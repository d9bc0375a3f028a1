//! A jail's life, across its three processes: brig's supervisor (`supervisor.rs`), the
//! jail's first process, which assembles the jail and stays as its PID 1 (`child.rs`,
//! then `init.rs`), and the program, which a process of the jail becomes
//! (`program.rs`). They talk over `channel.rs`; `output.rs` collects their bounded
//! output; `kill.rs` ends a jail whole and measures what it ended.
//!
//! A jail is assembled first and given its program later ([`Jail::assemble`], then
//! [`Jail::run`]): between the two, its init waits with every namespace, the id maps, the
//! cgroup and the mount tree in place. `brig run` does both at once ([`run`]).

mod channel;
mod child;
mod init;
mod kill;
pub mod outcome;
pub mod output;
mod program;
pub mod session;
mod supervisor;

use crate::error::{Error, Result};
use crate::plan::Plan;

pub use channel::Stdio;
pub use init::forwarded_signals;
pub use outcome::{Outcome, RunReport};
pub use output::{Captured, Counts as OutputCounts, Output};
pub use program::Program;
pub use session::SessionJail;
pub use supervisor::{Jail, RequestClock};

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
