//! The jail side. After clone this process is PID 1 of the new namespaces; it assembles
//! the jail, then spawns the program and stays as its init.
//! Every step runs in the order below.

use crate::channel::{ChildEnd, Message};
use crate::error::{Context, Error, Result};
use crate::plan::Plan;
use crate::relay::JailEnds;
use crate::{cgroup, fds, init, landlock, mnt, net, privs, rlimits, seccomp, sys, user, uts};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::unistd::execve;
use std::ffi::CString;
use std::path::Path;

/// Entry point in the cloned child; never returns.
pub fn run(
    plan: &Plan,
    channel: ChildEnd,
    output: Option<JailEnds>,
    cgroup: Option<&cgroup::Entry>,
) -> ! {
    match assemble_jail(plan, &channel, output, cgroup) {
        Ok(()) => {}
        Err(err) => {
            channel.send(&Message::SetupError(err.to_string()));
            sys::exit_now(125);
        }
    }
    // The program's process shares init's memory until its exec (vfork-like): cheaper
    // than a fork, whose copy of brig the exec would only tear down again.
    match sys::spawn_sharing_memory(&mut || become_program(plan, &channel)) {
        Ok(program) => init::run(program, &channel),
        Err(errno) => {
            channel.send(&Message::SetupError(
                Error::os("start the program's process inside the jail", errno).to_string(),
            ));
            sys::exit_now(125);
        }
    }
}

/// namespaces → identity → mounts → pivot_root, done once for the jail by its init.
fn assemble_jail(
    plan: &Plan,
    channel: &ChildEnd,
    output: Option<JailEnds>,
    cgroup: Option<&cgroup::Entry>,
) -> Result<()> {
    // Die with brig. Then wait until brig has written the id maps: until then this
    // process has no identity in its user namespace.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .context(|| "set the parent-death signal".into())?;
    if !channel.wait_for_go() {
        sys::exit_now(125);
    }
    // Into the jail's cgroup: v2 started this process there; on v1 it joins by itself.
    // Then root the cgroup namespace there, so the jail sees its cgroup as / and nothing
    // of the host's tree.
    if let Some(cgroup) = cgroup {
        cgroup.join()?;
    }
    if plan.namespaces.cgroup {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
            .context(|| "create the jail's cgroup namespace".into())?;
    }
    // Identity comes first: in a user namespace a file can only be created by an owner
    // the namespace maps, and as root brig's own uid is not mapped. Capabilities stay,
    // since the jail user is not uid 0 of the namespace. Changing ids clears the
    // parent-death signal, so it is set again, then checked against a race with brig's exit.
    user::become_jail_user(&plan.identity)?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .context(|| "set the parent-death signal".into())?;
    if !channel.parent_alive() {
        sys::exit_now(125);
    }
    // With --output-limit, stdout and stderr are brig's relay pipes.
    if let Some(output) = output {
        nix::unistd::dup2_stdout(&output.stdout)
            .context(|| "connect stdout to brig's relay".into())?;
        nix::unistd::dup2_stderr(&output.stderr)
            .context(|| "connect stderr to brig's relay".into())?;
    }
    fds::close_inherited(&channel.raw_fds())?;
    // Namespaces: a new session without a controlling terminal, the hostname, lo.
    nix::unistd::setsid().context(|| "start a new session".into())?;
    uts::set_hostname(&plan.hostname)?;
    if plan.namespaces.net {
        net::loopback_up()?;
    }
    // Mounts, then pivot_root into the new root.
    mnt::build_root(&plan.mounts)?;
    // The jail needs no capability it does not already hold: empty the bounding set
    // here, once, for both init and the program.
    privs::empty_bounding_set()?;
    // SIGCHLD joins the signals brig already blocked; init waits for them synchronously.
    let mut blocked = init::forwarded_signals();
    blocked.add(Signal::SIGCHLD);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None).context(|| "block signals".into())?;
    Ok(())
}

/// rlimits → capabilities → no_new_privs → Landlock → seccomp → exec, in the program's
/// process (which already has the jail's identity, see `assemble_jail`). The seccomp
/// filter is installed last, so from there on only the exec loop runs: execve, and on
/// failure one write to brig's pipe and exit_group.
fn become_program(plan: &Plan, channel: &ChildEnd) -> ! {
    let fail = |err: Error| -> ! {
        channel.send(&Message::SetupError(err.to_string()));
        sys::exit_now(125);
    };
    if let Err(err) = drop_privileges(plan) {
        fail(err);
    }
    if let Err(err) = landlock::enforce(&plan.landlock) {
        fail(err);
    }
    let exec = Exec::prepare(plan);
    sys::reset_signal_dispositions();
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    if let Err(err) = seccomp::install(&plan.seccomp) {
        fail(err);
    }
    let (code, message) = exec.run();
    channel.send(&Message::ExecError { code, message });
    sys::exit_now(code as i32);
}

fn drop_privileges(plan: &Plan) -> Result<()> {
    rlimits::apply(&plan.limits.rlimits)?;
    privs::drop_all_capabilities()?;
    privs::set_no_new_privs()?;
    nix::unistd::chdir(&plan.chdir).map_err(|errno| {
        Error::os(
            format!("--chdir {} inside the jail", plan.chdir.display()),
            errno,
        )
        .hint("pick a directory that exists in the jail, e.g. /tmp or one you --bind")
    })
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
    fn prepare(plan: &Plan) -> Exec {
        let program = plan.command[0].clone();
        let path_var = plan
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
            argv: plan.command.iter().map(|arg| cstring(arg)).collect(),
            envp: plan.env.iter().map(|var| cstring(var)).collect(),
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
            filtered: plan.seccomp.mode == seccomp::Mode::Enforce,
        }
    }

    /// Returns only on failure, with the exit status to report (126 cannot execute, 127
    /// not found) and a one-line message.
    fn run(self) -> (u8, String) {
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
                126,
                format!(
                    "cannot execute {path} in the jail: its interpreter or dynamic loader is missing there; bind it in with --ro-bind"
                ),
            ),
            Some((path, errno)) => (
                126,
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
                127,
                format!(
                    "{program}: not found in the jail; bind it in with --ro-bind or check the path"
                ),
            ),
            None => (
                127,
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
