//! The jail's PID 1: forwards signals to the program, reaps zombies, and exits with the
//! program's status. Its exit ends the PID namespace, so everything else in the jail dies.

use super::channel::{ChildEnd, Message};
use crate::error::Stage;
use crate::exit::ExitStatus;
use crate::procfs::Stat;
use crate::{privileges, sys};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

/// The signals brig and the jail's init pass on to the program.
pub fn forwarded_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ] {
        set.add(signal);
    }
    set
}

pub fn run(program: Pid, channel: &ChildEnd) -> ! {
    // Init needs no privilege from here on. Undumpable, so the program cannot ptrace it
    // or read its memory or environment (brig's) through /proc/1.
    let _ = nix::sys::prctl::set_name(c"brig-init");
    sys::scrub_cmdline("brig-init");
    let hardened = privileges::drop_all_capabilities()
        .and_then(|()| privileges::set_no_new_privs())
        .and_then(|()| {
            nix::sys::prctl::set_dumpable(false)
                .map_err(|errno| crate::error::Error::os("make the jail's init undumpable", errno))
        });
    if let Err(err) = hardened {
        let _ = kill(program, Signal::SIGKILL);
        channel.send_error(&err.at(Stage::Init));
        sys::exit_now(ExitStatus::BRIG_FAILED);
    }
    let mut waited = forwarded_signals();
    waited.add(Signal::SIGCHLD);
    loop {
        match waited.wait() {
            Ok(Signal::SIGCHLD) => reap(program, channel),
            Ok(signal) => {
                let _ = kill(program, signal);
            }
            Err(_) => {}
        }
    }
}

/// Reaps every exited child; when it is the program, reports its status and exits.
fn reap(program: Pid, channel: &ChildEnd) {
    // A program killed by a signal: read its own CPU time while it is a zombie; reaped,
    // it is gone. (Per process, as RLIMIT_CPU counts it; the verdict tells a CPU-time
    // kill by it.)
    let program_signaled = waitid(
        Id::Pid(program),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
    )
    .is_ok_and(|status| matches!(status, WaitStatus::Signaled(..)));
    let cpu_before_reaping = program_signaled
        .then(|| Stat::read(program))
        .flatten()
        .map(|stat| {
            let (user, system) = stat.cpu(false);
            (user + system).as_millis() as u64
        });
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == program => {
                channel.send(&Message::Exited(code));
                sys::exit_now(code);
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == program => {
                channel.send(&Message::Signaled {
                    signal: signal as i32,
                    cpu_ms: cpu_before_reaping.unwrap_or(0),
                });
                sys::exit_now(128 + signal as i32);
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
