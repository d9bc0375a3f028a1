//! `brig session dial`: a connection to a server a program of the session runs on the
//! jail's own loopback (`session_dial`), joined to this process's standard streams, as
//! `nc` does: standard input goes to the server (its end shuts the connection's sending
//! half), what the server sends goes to standard output, until the server closes.

use super::At;
use brig::error::{Error, Result};
use std::io::Write;
use std::net::Shutdown;

/// Copies both ways; exit 0 once the server has closed its side. A port nothing listens
/// on (connection refused) is an error, exit 125.
pub fn dial(at: &At, port: u16) -> Result<i32> {
    let connection = at.session().dial(port)?;
    let sending = connection
        .try_clone()
        .map_err(|err| Error::setup(format!("duplicate the connection to port {port}: {err}")))?;
    // Standard input on a thread of its own: the server may answer before (or without)
    // reading it all. The thread is left to the process's exit once the server closed.
    let _ = std::thread::Builder::new()
        .name("dial-stdin".into())
        .spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut &sending);
            let _ = sending.shutdown(Shutdown::Write);
        });
    let mut stdout = std::io::stdout().lock();
    std::io::copy(&mut &connection, &mut stdout)
        .and_then(|_| stdout.flush())
        .map_err(|err| Error::setup(format!("copy from port {port} to standard output: {err}")))?;
    Ok(0)
}
