//! `brig run --server SOCKET` and `brig serve --status`: the command line's side of a
//! run served by a `brig serve` (`brig::serve::client`): where the verdict goes is opened
//! first, as for a one-shot run; then the server's answer is delivered and printed.

use brig::error::Result;
use brig::options::JailOptions;
use brig::serve::protocol::Reply;
use brig::verdict::{Sinks, printable};
use std::collections::BTreeMap;
use std::path::Path;

/// Runs `options` on the server at `socket`; brig's exit status for the run.
pub fn run(socket: &Path, options: JailOptions, origins: BTreeMap<String, String>) -> Result<i32> {
    let sinks = Sinks::open(
        options.report.as_deref(),
        options.report_fd,
        options.audit_log.as_deref(),
    )?;
    match brig::serve::client::run(socket, options, origins)? {
        Reply::Done {
            verdict,
            config_digest,
            ..
        } => {
            // The report's bytes are a one-shot run's: the verdict as a JSON value.
            let value = serde_json::to_value(&verdict).expect("a verdict always serializes");
            sinks.deliver_json(&value, Some(config_digest), None);
            for line in verdict.stderr_lines() {
                eprintln!("brig: {line}");
            }
            Ok(verdict.brig_exit_code)
        }
        Reply::Error {
            message, exit_code, ..
        } => {
            // A server's message may echo names from a jail.
            eprintln!("brig: {}", printable(&message));
            Ok(exit_code)
        }
        Reply::Status(_) => Err(brig::Error::setup(
            "brig serve answered a run with its status",
        )),
    }
}

/// `brig serve --status`: the status of the server on `socket`, as YAML.
pub fn status(socket: &Path) -> Result<i32> {
    let status = brig::serve::Client::new(socket).status()?;
    let yaml = serde_saphyr::to_string(&status)
        .map_err(|err| brig::Error::setup(format!("print the status: {err}")))?;
    print!("{yaml}");
    Ok(0)
}
