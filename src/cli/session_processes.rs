//! `brig session exec --stream`, and the commands for a session's processes: `ps`,
//! `connect`, `stdin`, `signal`, `kill` (docs/protocol.md, "Streams and background
//! processes").

use super::At;
use brig::error::{Error, Result};
use brig::serve::ProcessRef;
use brig::serve::protocol;
use brig::serve::reply::{Output, OutputStream};
use brig::verdict::{Sinks, printable};
use clap::Args;
use std::io::{Read, Write};

/// Which process: by pid or by tag.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// The process's pid (as `exec --background` or `ps` printed it).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// The process's tag (`exec --background --tag`).
    #[arg(long, value_name = "TAG")]
    pub tag: Option<String>,
}

impl Which {
    /// The process, as the library names it.
    pub fn target(&self) -> ProcessRef {
        match (&self.tag, self.pid) {
            (Some(tag), _) => ProcessRef::Tag(tag.clone()),
            (None, pid) => ProcessRef::Pid(pid.unwrap_or_default()),
        }
    }
}

/// An `output` frame's bytes to this command's stdout or stderr, at once.
pub fn print_output(output: &Output) -> Result<()> {
    let bytes = output.bytes()?;
    let written = match output.stream {
        OutputStream::Stderr => {
            let mut stderr = std::io::stderr();
            stderr.write_all(&bytes).and_then(|()| stderr.flush())
        }
        _ => {
            let mut stdout = std::io::stdout();
            stdout.write_all(&bytes).and_then(|()| stdout.flush())
        }
    };
    written.map_err(|err| Error::setup(format!("write the program's output: {err}")))
}

pub fn ps(at: &At) -> Result<i32> {
    let processes = at.session().ps()?;
    println!("{:>6}  {:<18} {:<12} COMMAND", "PID", "STATE", "TAG");
    for process in processes {
        let state = match (process.running, &process.status) {
            (true, _) => "running".to_string(),
            (false, Some(status)) => match (status.exit_code, status.signal) {
                (Some(code), _) => format!("exited {code}"),
                (None, Some(signal)) => format!("signaled {signal}"),
                _ => printable(
                    status
                        .status
                        .and_then(|status| serde_json::to_value(status).ok())
                        .as_ref()
                        .and_then(|status| status.as_str())
                        .unwrap_or("ended"),
                ),
            },
            (false, None) => "ended".to_string(),
        };
        let command: Vec<String> = process.command.iter().map(|arg| printable(arg)).collect();
        println!(
            "{:>6}  {:<18} {:<12} {}",
            super::pid_text(process.pid),
            state,
            printable(process.tag.as_deref().unwrap_or("-")),
            command.join(" ")
        );
    }
    Ok(0)
}

/// Prints what the process writes until it ends; its verdict's exit status.
pub fn connect(at: &At, which: &Which) -> Result<i32> {
    let end = at.session().attach(&which.target(), print_output)?;
    let sinks = Sinks::open(None, None, None)?;
    if end.dropped > 0 {
        eprintln!(
            "brig: {} bytes of its output were dropped: this client read too slowly",
            end.dropped
        );
    }
    Ok(super::verdict_lines(end.verdict.as_deref(), &sinks))
}

pub fn stdin(at: &At, which: &Which, data: Option<String>, close: bool) -> Result<i32> {
    let data = match data {
        Some(data) => data,
        None => {
            let mut input = Vec::new();
            std::io::stdin()
                .read_to_end(&mut input)
                .map_err(|err| Error::input(format!("read standard input: {err}")))?;
            String::from_utf8(input)
                .map_err(|_| Error::input("brig session stdin: standard input is not UTF-8 text"))?
        }
    };
    // At most what one request carries at a time.
    let limit = protocol::MAX_FRAME / 2;
    let mut pieces: Vec<&str> = Vec::new();
    let mut rest = data.as_str();
    while rest.len() > limit {
        let mut cut = limit;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, after) = rest.split_at(cut);
        pieces.push(piece);
        rest = after;
    }
    pieces.push(rest);
    let last = pieces.len() - 1;
    let session = at.session();
    let target = which.target();
    for (index, piece) in pieces.into_iter().enumerate() {
        session.stdin(&target, piece.as_bytes(), close && index == last)?;
    }
    Ok(0)
}
