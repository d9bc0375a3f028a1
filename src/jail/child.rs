//! The jail side. After clone this process is PID 1 of the new namespaces; it assembles
//! the jail, then spawns the program and stays as its init.
//! Every step runs in the order below.

use super::channel::{ChildEnd, Message};
use super::init;
use super::output::JailEnds;
use super::program::become_program;
use crate::error::{AtStage, Context, Error, Result, Stage};
use crate::exit::ExitStatus;
use crate::plan::Plan;
use crate::{cgroup, fds, identity, mount, namespaces, net, privileges, sys};
use nix::sys::signal::{SigmaskHow, Signal, sigprocmask};

/// What a jail is assembled for: it decides what its init does and what brig keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// One program, which inherits init's standard streams (`brig run`).
    OneShot,
    /// One program given its own descriptors later (a server's pooled jail): brig keeps
    /// the output pipes' jail ends to hand over with them.
    Streams,
    /// Programs one after another (`session.rs`); the jail hands brig its workspace.
    Session,
}

/// Entry point in the cloned child; never returns. A session's init ([`Shape::Session`])
/// runs programs one after another instead of one. `host_locks`: the locks of its per-jail
/// host uids (the user's; a root session's root's too), which init keeps open
/// (close-on-exec, out of every program's reach) so that the uids stay taken until the
/// last process of the jail is gone, even if brig is not.
pub fn run(
    plan: &Plan,
    channel: ChildEnd,
    output: Option<JailEnds>,
    cgroup: Option<&cgroup::Entry>,
    shape: Shape,
    host_locks: Vec<std::os::fd::RawFd>,
) -> ! {
    // This process starts as a copy of the supervisor: the secrets' values go first (the
    // supervisor keeps its own, scrubbed of every other copy before the clone; nothing
    // in the jail needs them).
    if let Some(secrets) = plan.secrets() {
        secrets.forget();
    }
    if let Err(err) = assemble_jail(plan, &channel, output, cgroup, host_locks) {
        channel.send_error(&err);
        sys::exit_now(ExitStatus::BRIG_FAILED);
    }
    if shape == Shape::Session {
        // brig reaches the workspace (the home directory) through this descriptor: its
        // files are put and got there, resolved beneath it.
        let workspace = nix::fcntl::open(
            &plan.identity.home,
            nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|errno| {
            Error::os(
                format!("open the workspace {}", plan.identity.home.display()),
                errno,
            )
        })
        .and_then(|fd| {
            channel
                .hand_over(fd)
                .context(|| "hand the workspace to brig".into())
        })
        .at(Stage::Mounts);
        if let Err(err) = workspace {
            channel.send_error(&err);
            sys::exit_now(ExitStatus::BRIG_FAILED);
        }
    }
    // Assembled: tell brig, then wait for the program (or a session's programs).
    channel.send(&Message::Ready);
    if shape == Shape::Session {
        init::run_session(plan, &channel);
    }
    let Some((program, stdio)) = channel.wait_for_program() else {
        sys::exit_now(ExitStatus::BRIG_FAILED);
    };
    // The program's process shares init's memory until its exec (vfork-like): cheaper
    // than a fork, whose copy of brig the exec would only tear down again.
    let spawned = sys::spawn_sharing_memory(&mut || {
        become_program(plan, &program, stdio.as_deref(), &channel, None, false)
    });
    // Only the program holds its streams: a client's pipe closes when the program ends.
    drop(stdio);
    match spawned {
        Ok(pid) => init::run(pid, &channel),
        Err(errno) => {
            channel.send_error(
                &Error::os("start the program's process inside the jail", errno).at(Stage::Spawn),
            );
            sys::exit_now(ExitStatus::BRIG_FAILED);
        }
    }
}

/// namespaces → identity → mounts → pivot_root, done once for the jail by its init.
fn assemble_jail(
    plan: &Plan,
    channel: &ChildEnd,
    output: Option<JailEnds>,
    cgroup: Option<&cgroup::Entry>,
    host_locks: Vec<std::os::fd::RawFd>,
) -> Result<()> {
    // Die with brig. Then wait until brig has written the id maps: until then this
    // process has no identity in its user namespace.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .context(|| "set the parent-death signal".into())
        .at(Stage::Namespaces)?;
    sys::reset_scheduling()
        .context(|| "leave the real-time scheduling brig was started with".into())
        .at(Stage::Namespaces)?;
    if !channel.wait_for_go() {
        sys::exit_now(ExitStatus::BRIG_FAILED);
    }
    // Into the jail's cgroup: v2 started this process there; on v1 it joins by itself.
    // Then root the cgroup namespace there, so the jail sees its cgroup as / and nothing
    // of the host's tree.
    if let Some(cgroup) = cgroup {
        cgroup.join().at(Stage::CgroupJoin)?;
    }
    if plan.namespaces.cgroup {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
            .context(|| "create the jail's cgroup namespace".into())
            .at(Stage::CgroupJoin)?;
    }
    // --net filtered: the jail's way out is a TUN device whose other end is brig. It is
    // created in the jail's network namespace from the host's /dev/net/tun (the jail's
    // own /dev has none), with brig's own host identity: before the jail's identity,
    // since /dev/net/tun may be open to root only (then brig must run as root).
    if plan.network.is_some() {
        let tun = net::tun::set_up().at(Stage::Isolation)?;
        channel
            .hand_over(tun)
            .context(|| "hand the jail's TUN device to brig".into())
            .at(Stage::Isolation)?;
    }
    // Identity comes first: in a user namespace a file can only be created by an owner
    // the namespace maps, and as root brig's own uid is not mapped. Capabilities stay,
    // since the jail user is not uid 0 of the namespace. Changing ids clears the
    // parent-death signal, so it is set again, then checked against a race with brig's exit.
    identity::become_jail_user(&plan.identity).at(Stage::Identity)?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .context(|| "set the parent-death signal".into())
        .at(Stage::Identity)?;
    if !channel.parent_alive() {
        sys::exit_now(ExitStatus::BRIG_FAILED);
    }
    // With --output-limit, stdout and stderr are the pipes of brig's output collector.
    if let Some(output) = output {
        nix::unistd::dup2_stdout(&output.stdout)
            .context(|| "connect stdout to brig's output collector".into())
            .at(Stage::Descriptors)?;
        nix::unistd::dup2_stderr(&output.stderr)
            .context(|| "connect stderr to brig's output collector".into())
            .at(Stage::Descriptors)?;
    }
    let mut keep = channel.raw_fds();
    keep.extend(host_locks);
    fds::close_inherited(&keep).at(Stage::Descriptors)?;
    // Namespaces: a new session without a controlling terminal, the hostname, lo.
    nix::unistd::setsid()
        .context(|| "start a new session".into())
        .at(Stage::Isolation)?;
    namespaces::set_hostname(&plan.hostname).at(Stage::Isolation)?;
    if plan.namespaces.net {
        namespaces::loopback_up().at(Stage::Isolation)?;
    }
    // The jail's own bounds on per-user counters, while this process still holds
    // CAP_SYS_RESOURCE in the jail's user namespace: through the jail's fresh /proc once
    // it is mounted, or else (`--proc host`, read-only there) through brig's, now, where
    // it is writable (not in a container that makes /proc/sys read-only: reported).
    let fresh_proc = plan
        .mounts
        .iter()
        .any(|op| matches!(op, mount::MountOp::Proc { .. }));
    if !fresh_proc {
        identity::bound_user_namespace(true).at(Stage::Isolation)?;
    }
    // Mounts, then pivot_root into the new root.
    mount::build_root(&plan.mounts).at(Stage::Mounts)?;
    if fresh_proc {
        identity::bound_user_namespace(false).at(Stage::Isolation)?;
    }
    // The jail needs no capability it does not already hold: empty the bounding set
    // here, once, for both init and the program.
    privileges::empty_bounding_set().at(Stage::Capabilities)?;
    // SIGCHLD joins the signals brig already blocked; init waits for them synchronously.
    let mut blocked = init::forwarded_signals();
    blocked.add(Signal::SIGCHLD);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None)
        .context(|| "block signals".into())
        .at(Stage::Init)?;
    Ok(())
}
