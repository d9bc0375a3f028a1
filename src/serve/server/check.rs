//! A run request checked: its streams, its options layered on the server's defaults and
//! held to the server's policy, and whether a pooled jail has its shape.

use super::Server;
use crate::error::{Error, Result};
use crate::jail::Program;
use crate::options::JailOptions;
use crate::serve::policy;
use crate::serve::protocol::{self, StdioMode};
use crate::serve::wire::Job;
use crate::verdict::Peer;
use std::os::fd::{AsRawFd, OwnedFd};

/// Options a run gives its program; any other a client sets changes the jail's shape,
/// and the run gets a jail built for it instead of a pooled one.
const PER_RUN_OPTIONS: [&str; 5] = ["command", "env", "chdir", "time-limit", "quiet-limits"];

pub(super) fn has_pool_shape(client: &JailOptions) -> bool {
    let value = serde_json::to_value(client).unwrap_or_default();
    value.as_object().is_some_and(|options| {
        options
            .keys()
            .all(|key| PER_RUN_OPTIONS.contains(&key.as_str()))
    })
}

impl Server {
    /// The request's options checked and layered on the server's defaults, and whether
    /// a pooled jail has its shape.
    pub(super) fn check_run(
        &self,
        mut client: JailOptions,
        (stdio, stdin, origins): (StdioMode, Option<&str>, &policy::Origins),
        fds: &[OwnedFd],
        peer: Peer,
    ) -> Result<(Job, bool)> {
        match (stdio, fds.len()) {
            (StdioMode::Fds, 3) | (StdioMode::Capture, 0) => {}
            (StdioMode::Fds, count) => {
                return Err(Error::input(format!(
                    "brig serve: stdio \"fds\" needs 3 descriptors (stdin, stdout, stderr) with the request; it came with {count}"
                )));
            }
            (StdioMode::Capture, count) => {
                return Err(Error::input(format!(
                    "brig serve: stdio \"capture\" takes no descriptors; the request came with {count}"
                )));
            }
        }
        if stdin.is_some() && stdio == StdioMode::Fds {
            return Err(Error::input(
                "brig serve: \"stdin\" goes with stdio \"capture\"; with \"fds\" send the descriptor",
            ));
        }
        if stdio == StdioMode::Fds && !fds.iter().all(is_stream_or_file) {
            return Err(Error::input(
                "brig serve: the descriptors must be files, pipes, sockets or terminals",
            ));
        }
        if stdio == StdioMode::Capture
            && let Some(size) = client.output_limit
            && size.0 > protocol::MAX_CAPTURE
        {
            let most = crate::units::Size(protocol::MAX_CAPTURE);
            return Err(Error::input(format!(
                "output-limit {size}: captured output is at most {most} (stdio \"capture\"); ask for at most {most}, or send the program's streams (stdio \"fds\")"
            )));
        }
        // Where the verdict goes is the client's business.
        client.report = None;
        client.report_fd = None;
        client.audit_log = None;
        let pooled = has_pool_shape(&client);
        let options = self.defaults.clone().overlay(client.clone());
        // A pooled run is the pool's jail with its time limit; another is planned whole
        // here, so that a bad option is the client's one-line error before anything is
        // built. Either is held to the server's by the one policy check.
        let asked = if pooled {
            policy::Asked::Prepared(policy::Jail {
                time_limit: options.time_limit,
                ..policy::Jail::of(&self.pool_plan)
            })
        } else {
            policy::Asked::Built(Box::new(options.clone()))
        };
        let planned = policy::check(&client, origins, &self.policy(), asked)?;
        let (program, time_limit, config_digest) = match planned {
            None => (
                self.pooled_program(&options)?,
                options.time_limit,
                self.pool_digest.clone(),
            ),
            Some(plan) => (
                Program::of(&plan),
                plan.time_limit,
                crate::verdict::config_digest(&plan),
            ),
        };
        let job = Job {
            options,
            program,
            time_limit,
            config_digest,
            stdio,
            stdin: stdin.map(String::from),
            peer,
        };
        Ok((job, pooled))
    }

    /// What the server holds its clients to.
    pub(super) fn policy(&self) -> policy::Server<'_> {
        policy::Server {
            options: &self.defaults,
            jail: policy::Jail::of(&self.pool_plan),
            may: &self.args.client_may,
            bind_under: &self.args.allow_bind_under,
            whose: "server",
        }
    }

    /// The program of a run in a pooled jail: as `Plan::resolve` would give it.
    fn pooled_program(&self, options: &JailOptions) -> Result<Program> {
        if options.command.is_empty() {
            return Err(Error::input(
                "no program to run: give one after the options, e.g. `brig run --server S -- python3 main.py`",
            ));
        }
        if options.time_limit.is_some_and(|limit| limit.0.is_zero()) {
            return Err(Error::input("--time-limit: must be longer than 0; e.g. 5s"));
        }
        let chdir = match &options.chdir {
            Some(dir) => crate::mount::jail_path("--chdir", &dir.to_string_lossy())?,
            None => self.pool_plan.chdir.clone(),
        };
        let program = Program {
            argv: options.command.clone(),
            env: crate::plan::with_secrets(
                crate::environment::resolve(options, &self.pool_plan.identity)?,
                self.pool_plan.network.as_ref(),
            ),
            chdir,
            as_root: false,
        };
        program.check()?;
        Ok(program)
    }
}
/// Files, pipes, sockets and terminals may become a program's streams; not directories,
/// epoll or event descriptors, or other exotica a client might send.
fn is_stream_or_file(fd: &OwnedFd) -> bool {
    use nix::sys::stat::SFlag;
    let Ok(stat) = nix::sys::stat::fstat(fd) else {
        return false;
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFDIR {
        return false;
    }
    // Anonymous inodes (epoll, eventfd, signalfd, pidfd) have no file type bits we want.
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
    !link.to_string_lossy().starts_with("anon_inode:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_has_the_pools_shape_when_it_sets_only_what_a_run_gives_its_program() {
        // The client's options, as the protocol carries them -> a pooled jail may run it
        for (options, expected) in [
            (serde_json::json!({}), true),
            (serde_json::json!({"command": ["sh", "-c", "true"]}), true),
            (
                serde_json::json!({
                    "command": ["python3", "-c", "1"],
                    "env": ["A=1"],
                    "chdir": "/tmp",
                    "time-limit": "5s",
                    "quiet-limits": true,
                }),
                true,
            ),
            // Any other option changes the jail's shape.
            (
                serde_json::json!({"command": ["true"], "memory": "64M"}),
                false,
            ),
            (serde_json::json!({"allow-net": ["example.com"]}), false),
            (serde_json::json!({"home-size": "10M"}), false),
            (serde_json::json!({"cpus": 1.0}), false),
            (serde_json::json!({"env-pass": ["HOME"]}), false),
            // Set to what it is by default, an option still says nothing of its shape.
            (serde_json::json!({"quiet-limits": false}), true),
        ] {
            let client: JailOptions =
                serde_json::from_value(options.clone()).expect("valid options");
            assert_eq!(has_pool_shape(&client), expected, "{options}");
        }
    }
}
