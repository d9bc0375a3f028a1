//! Programs on a terminal in a session (E2B's `pty`): `session_exec` with `pty`
//! starts one (the jail's shell by default) on a new terminal of the jail's own devpts,
//! opened by the jail's init (`Command::SpawnTerminal`), never the host's /dev/ptmx. The
//! runner holds the master alone: it is the process's one output stream (`"pty"`, read
//! as a background process's output is, into its backlog and to connected clients) and
//! its input (`session_stdin`); `session_resize` sets its window (TIOCSWINSZ, SIGWINCH
//! to its foreground group). The program leads a session of its own with the slave as
//! its controlling terminal; signals and kills go to its process group as for any
//! background process.

use super::protocol::PtySize;
use super::session_loop::{Form, check_form};
use super::session_process::{Watch, Watched};
use super::*;
use crate::jail::Output;

/// The largest window side, in characters (a terminal's size is a u16 to the kernel; a
/// larger one is a mistake, not a screen).
pub(super) const MAX_SIDE: u16 = 1000;
/// A terminal's program without a command: the jail's bash, interactive, or its sh.
const SHELL: &str = "command -v bash >/dev/null 2>&1 && exec bash -i; exec sh -i";
/// The terminal type a program on a terminal is told, unless its request sets TERM.
const TERM: &str = "TERM=xterm-256color";

/// The one-line errors of a terminal's size.
pub(super) fn check_size(what: &str, size: PtySize) -> Result<()> {
    let fits = |side: u16| (1..=MAX_SIDE).contains(&side);
    if !fits(size.cols) || !fits(size.rows) {
        return Err(Error::input(format!(
            "{what}: a terminal of {} cols × {} rows; give each from 1 to {MAX_SIDE}",
            size.cols, size.rows
        )));
    }
    Ok(())
}

/// The one-line errors of an exec with `pty`: a command (or none: the shell) started in
/// the background, not streamed, not a cell.
pub(super) fn check_exec(size: PtySize, code: bool, stream: bool) -> Result<()> {
    if code {
        return Err(Error::input(
            "session_exec: \"pty\" starts a command (or the jail's shell) on a terminal, not a code cell; drop \"code\" or \"pty\"",
        ));
    }
    if stream {
        return Err(Error::input(
            "session_exec: \"pty\" with \"stream\"; a terminal's output streams to whoever connects (session_connect): drop \"stream\"",
        ));
    }
    check_size("pty", size)
}

/// What `session_stdin` writes: `data` (text) or `base64` (bytes), one of them.
pub(super) fn stdin_bytes(data: String, base64: Option<String>) -> Result<Vec<u8>> {
    match base64 {
        None => Ok(data.into_bytes()),
        Some(_) if !data.is_empty() => Err(Error::input(
            "session_stdin: both \"data\" and \"base64\"; give one of them",
        )),
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|err| Error::input(format!("session_stdin: \"base64\" is not base64: {err}"))),
    }
}

impl<'p> Session<'p> {
    /// Starts a program on a terminal, answered (its `process` frame) once the jail's
    /// init says its pid, as a background process is.
    pub(super) fn start_terminal(
        &mut self,
        exec: CommandExec,
        form: &Form,
        size: PtySize,
        peer: Peer,
    ) -> Result<(u32, Watched)> {
        check_form(form, false)?;
        check_size("pty", size)?;
        self.check_room(form)?;
        let command = match exec.command.is_empty() {
            true => ["/bin/sh", "-c", SHELL].map(String::from).to_vec(),
            false => exec.command,
        };
        let mut env = exec.env;
        if !env.iter().any(|var| var.starts_with("TERM=")) {
            env.insert(0, TERM.to_string());
        }
        let asked_env = env.clone();
        let as_root = self.runs_as_root(exec.user.as_deref())?;
        let program = self.program(command, env, exec.chdir, as_root)?;
        // As a background process: the limits its request asks for, and no others.
        let (time_limit, output_limit) = self.limits(exec.time_limit, exec.output_limit)?;
        let time_limit = time_limit.filter(|_| exec.time_limit.is_some());
        let output_limit = match exec.output_limit {
            Some(_) => output_limit,
            None => u64::MAX,
        };
        let oom_before = self.oom_kills();
        let (id, master) = self.jail.spawn_terminal(&program, size.cols, size.rows)?;
        let copy = |what| {
            master.try_clone().map_err(|err| {
                Error::setup(format!("copy the terminal's master for {what}: {err}"))
            })
        };
        let (output, input, spare) = (copy("its output")?, copy("its input")?, copy("a spare")?);
        nonblocking(&master);
        let watch = Watch {
            argv: program.argv,
            env: asked_env,
            cwd: program.chdir.to_string_lossy().into_owned(),
            tag: form.tag.clone(),
            peer,
            background: true,
            time_limit,
            oom_before,
        };
        // One stream: the terminal's, handed on to the watcher as any background
        // process's output is.
        let mut output = Output::of_pipes(output, spare, output_limit)
            .map_err(|errno| Error::os("watch a terminal's output", errno))?;
        output.to_caller();
        output.without(1);
        let stdin = exec.stdin.unwrap_or_default().into_bytes();
        let mut watched = Watched::new(id, watch, output, input, stdin);
        watched.as_root = as_root;
        watched.pty = Some(size);
        watched.terminal = Some(master);
        watched.feed_stdin();
        Ok((id, watched))
    }

    /// `session_resize`: the terminal of the process named gets its new size.
    pub(super) fn resize_terminal(
        &mut self,
        pid: Option<u32>,
        tag: Option<&str>,
        size: PtySize,
    ) -> Result<SessionReply> {
        check_size("session_resize", size)?;
        let id = self.find_process("session_resize", pid, tag)?;
        let process = self.processes.watched.get_mut(&id).expect("found");
        let pid = process.pid.unwrap_or_default();
        if process.pty.is_none() {
            return Err(Error::input(format!(
                "session_resize: process {pid} has no terminal (started without \"pty\"); resize a pty's"
            )));
        }
        let Some(master) = process.terminal.as_ref().filter(|_| process.running()) else {
            return Err(Error::input(format!(
                "session_resize: process {pid} has ended; see session_ps"
            )));
        };
        crate::sys::set_window_size(master.as_fd(), size.cols, size.rows)
            .map_err(|errno| Error::os("resize the process's terminal (TIOCSWINSZ)", errno))?;
        process.pty = Some(size);
        Ok(SessionReply::Resized {
            pid,
            cols: size.cols,
            rows: size.rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_s_requests_are_checked_with_one_line_errors() {
        let size = |cols, rows| PtySize { cols, rows };
        assert!(check_exec(size(80, 24), false, false).is_ok());
        for (err, needle) in [
            (
                check_exec(size(0, 24), false, false),
                "pty: a terminal of 0 cols",
            ),
            (check_exec(size(80, 1001), false, false), "from 1 to 1000"),
            (check_exec(size(80, 24), true, false), "not a code cell"),
            (check_exec(size(80, 24), false, true), "drop \"stream\""),
            (
                stdin_bytes("x".into(), Some("eA==".into())).map(drop),
                "both \"data\" and \"base64\"",
            ),
            (
                stdin_bytes(String::new(), Some("*".into())).map(drop),
                "not base64",
            ),
        ] {
            let err = err.unwrap_err();
            let message = err.to_string();
            assert!(message.contains(needle), "{message}");
            assert!(!message.contains('\n'), "{message}");
            assert_eq!(err.kind(), crate::error::ErrorKind::BadInput);
        }
        assert_eq!(
            stdin_bytes(String::new(), Some("Aw==".into())).unwrap(),
            [3]
        );
    }
}
