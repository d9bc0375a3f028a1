//! What runs in a jail and how a process of the jail becomes it: [`Program`] (checked
//! before it is handed over), [`become_program`] (the last steps, in the program's own
//! process: its streams, rlimits, capabilities, no_new_privs, chdir, Landlock, seccomp)
//! and `Exec`, the execve prepared before the seccomp filter. Both `child.rs` (a one-shot
//! jail's program) and `init.rs` (a session's programs) call it, so it sits below both.

use super::channel::{ChildEnd, Message};
use crate::error::{AtStage, Context, Error, Result, Stage};
use crate::exit::ExitStatus;
use crate::plan::Plan;
use crate::{landlock, privileges, rlimits, seccomp, sys};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, sigprocmask};
use nix::unistd::execve;
use std::ffi::CString;
use std::path::{Path, PathBuf};

/// What runs in an assembled jail: the arguments (the first one is looked up in the
/// jail's `PATH` unless it has a `/`), the whole environment and the working directory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Program {
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub chdir: PathBuf,
    /// Runs as uid/gid 0 of the jail, without capabilities: a root session's only
    /// (`Identity::root`); otherwise as the jail's user.
    #[serde(default)]
    pub as_root: bool,
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
            as_root: false,
        }
    }
}

/// rlimits → capabilities → no_new_privs → Landlock → seccomp → exec, in the program's
/// process (which already has the jail's identity, see `assemble_jail`); `session`: the
/// program's id in a session's jail. The seccomp
/// filter is installed last, so from there on only the exec loop runs: execve, and on
/// failure one write to brig's pipe and exit_group.
pub fn become_program(
    plan: &Plan,
    program: &Program,
    stdio: Option<&[std::os::fd::OwnedFd]>,
    channel: &ChildEnd,
    session: Option<u32>,
    terminal: bool,
) -> ! {
    let fail = |err: Error| -> ! {
        match session {
            Some(id) => channel.send(&Message::ProgramError {
                id,
                code: ExitStatus::BRIG_FAILED as u8,
                message: err.to_string(),
            }),
            None => channel.send_error(&err),
        }
        sys::exit_now(ExitStatus::BRIG_FAILED);
    };
    // A root session's init has real ids 0: every program takes the identity it was
    // asked for, all three ids, before anything else (see `identity::keep_root_for_programs`).
    if plan.identity.root
        && let Err(err) = crate::identity::become_program_user(&plan.identity, program.as_root)
            .at(Stage::Identity)
    {
        fail(err);
    }
    if program.as_root && !plan.identity.root {
        fail(
            Error::input("a program as root in a jail without root (a session's `root`)")
                .at(Stage::Identity),
        );
    }
    // A program on a terminal leads a session of its own (and so a process group), the
    // terminal its controlling one (given below with its stdio): its line discipline's
    // Ctrl-C and SIGWINCH reach its foreground group.
    if terminal && let Err(errno) = nix::unistd::setsid() {
        fail(Error::os("give the program a session of its own", errno).at(Stage::Spawn));
    }
    // A session's program leads a process group of its own, so that one signal reaches
    // what it started.
    if session.is_some()
        && !terminal
        && let Err(errno) =
            nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0))
    {
        fail(Error::os("give the program a process group of its own", errno).at(Stage::Spawn));
    }
    // Its pid in the jail, said at once (init's spawn returns only once it has exec'd):
    // a background process's start is answered with it. On a terminal, once the
    // terminal is its controlling one (below): a Ctrl-C typed after the answer reaches it
    // (typed before, with no session on the terminal, it would signal nobody).
    let say_started = || {
        if let Some(id) = session {
            channel.send(&Message::Started {
                id,
                pid: std::process::id(),
            });
        }
    };
    if !terminal {
        say_started();
    }
    if let Some(stdio) = stdio
        && let Err(err) = take_stdio(stdio)
    {
        fail(err);
    }
    if terminal && let Err(errno) = sys::take_controlling_terminal(0) {
        fail(
            Error::os(
                "make the jail's terminal the program's controlling terminal",
                errno,
            )
            .at(Stage::Descriptors),
        );
    }
    if terminal {
        say_started();
    }
    if let Err(err) = drop_privileges(plan, program) {
        fail(err);
    }
    if let Err(err) = landlock::enforce(&plan.landlock).at(Stage::Landlock) {
        fail(err);
    }
    let exec = Exec::prepare(program, plan.seccomp.mode == seccomp::Mode::Enforce);
    sys::reset_signal_dispositions();
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    if let Err(err) = seccomp::install(&plan.seccomp).at(Stage::Seccomp) {
        fail(err);
    }
    let (status, message) = exec.run();
    let code = status.code() as u8;
    channel.send(&match session {
        Some(id) => Message::ProgramError { id, code, message },
        None => Message::ExecError { code, message },
    });
    sys::exit_now(status.code());
}

/// The descriptors brig gave with the program become its 0, 1, 2, ... (their originals
/// are close-on-exec). Each is first copied above them all, so that placing one never
/// overwrites another still to be placed.
fn take_stdio(stdio: &[std::os::fd::OwnedFd]) -> Result<()> {
    let above = stdio.len() as std::os::fd::RawFd + 3;
    let copies = stdio
        .iter()
        .map(|fd| nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(above)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .context(|| "give the program its standard streams".into())
        .at(Stage::Descriptors)?;
    for (target, copy) in copies.iter().enumerate() {
        sys::place_fd(*copy, target as std::os::fd::RawFd)
            .context(|| format!("give the program its descriptor {target}"))
            .at(Stage::Descriptors)?;
    }
    Ok(())
}

fn drop_privileges(plan: &Plan, program: &Program) -> Result<()> {
    rlimits::apply(&plan.limits.rlimits).at(Stage::Rlimits)?;
    privileges::drop_all_capabilities().at(Stage::Capabilities)?;
    privileges::set_no_new_privs().at(Stage::NoNewPrivs)?;
    nix::unistd::chdir(&program.chdir)
        .map_err(|errno| {
            Error::os(
                format!("--chdir {} inside the jail", program.chdir.display()),
                errno,
            )
            .hint("pick a directory that exists in the jail, e.g. /tmp or one you --bind")
        })
        .at(Stage::Chdir)
}

/// execve with a PATH search in the jail's own PATH, prepared before the seccomp filter is
/// installed: afterwards only execve runs, and on failure the message is formatted from
/// what was looked up here.
struct Exec {
    program: String,
    path_var: String,
    argv: Vec<CString>,
    envp: Vec<CString>,
    /// Each candidate path and whether it exists.
    candidates: Vec<(String, CString, bool)>,
    /// A seccomp profile is enforced: EPERM from execve may be its answer.
    filtered: bool,
}

impl Exec {
    fn prepare(to_run: &Program, filtered: bool) -> Exec {
        let program = to_run.argv[0].clone();
        let path_var = to_run
            .env
            .iter()
            .find_map(|var| var.strip_prefix("PATH="))
            .unwrap_or("")
            .to_string();
        let paths: Vec<String> = if program.contains('/') {
            vec![program.clone()]
        } else {
            path_var
                .split(':')
                .filter(|dir| !dir.is_empty())
                .map(|dir| Path::new(dir).join(&program).display().to_string())
                .collect()
        };
        Exec {
            argv: to_run.argv.iter().map(|arg| cstring(arg)).collect(),
            envp: to_run.env.iter().map(|var| cstring(var)).collect(),
            candidates: paths
                .into_iter()
                .map(|path| {
                    let exists = Path::new(&path).exists();
                    let c_path = cstring(&path);
                    (path, c_path, exists)
                })
                .collect(),
            program,
            path_var,
            filtered,
        }
    }

    /// Returns only on failure, with the exit status to report (cannot execute, not
    /// found) and a one-line message.
    fn run(self) -> (ExitStatus, String) {
        let mut first_error = None;
        for (path, c_path, exists) in &self.candidates {
            let Err(errno) = execve(c_path, &self.argv, &self.envp);
            if *exists || (errno != Errno::ENOENT && errno != Errno::ENOTDIR) {
                first_error.get_or_insert((path, errno));
            }
        }
        let program = &self.program;
        match first_error {
            Some((path, Errno::ENOENT)) => (
                ExitStatus::CannotExecute,
                format!(
                    "cannot execute {path} in the jail: its interpreter or dynamic loader is missing there; bind it in with --ro-bind"
                ),
            ),
            Some((path, errno)) => (
                ExitStatus::CannotExecute,
                format!(
                    "cannot execute {path} in the jail: {} ({errno:?}){}",
                    errno.desc(),
                    if errno == Errno::EPERM && self.filtered {
                        "; a seccomp profile must allow execve"
                    } else {
                        ""
                    }
                ),
            ),
            None if program.contains('/') => (
                ExitStatus::NotFound,
                format!(
                    "{program}: not found in the jail; bind it in with --ro-bind or check the path"
                ),
            ),
            None => (
                ExitStatus::NotFound,
                format!(
                    "{program}: not found in the jail's PATH ({}); use an absolute path or bind it in with --ro-bind",
                    self.path_var
                ),
            ),
        }
    }
}

fn cstring(text: &str) -> CString {
    // The plan rejected NUL bytes.
    CString::new(text).unwrap_or_default()
}
