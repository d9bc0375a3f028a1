//! `brig session exec --stream`, and the commands for a session's processes: `ps`,
//! `connect`, `stdin`, `signal`, `kill` (docs/protocol.md, "Streams and background
//! processes").

use super::{At, next_reply, request};
use crate::error::{Error, Result};
use crate::serve::protocol::{self, FrameReader};
use crate::verdict::{Sinks, printable};
use base64::Engine;
use clap::Args;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;

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
    fn into(&self, mut message: Value) -> Value {
        if let Some(pid) = self.pid {
            message["pid"] = json!(pid);
        }
        if let Some(tag) = &self.tag {
            message["tag"] = json!(tag);
        }
        message
    }
}

/// Sends `message` and prints its `output` frames as they come (the program's bytes,
/// to this command's stdout and stderr); the first other frame, which must be `end`.
pub fn stream(socket: &Path, mut message: Value, end: &str) -> Result<Value> {
    message["brig"] = json!(protocol::VERSION);
    let connection = crate::serve::client::connect(socket)?;
    protocol::write_frame(connection.as_fd(), &message, &[])?;
    let mut reader = FrameReader::replies();
    loop {
        let frame = next_reply(socket, &connection, &mut reader)?;
        if frame["type"] == "output" {
            print_output(&frame)?;
            continue;
        }
        // `connect` says which process first; its output follows.
        if frame["type"] == "process" && end != "process" {
            continue;
        }
        if frame["type"] != end {
            return Err(Error::setup(format!(
                "brig serve answered with a `{}` frame where `{end}` was due",
                printable(frame["type"].as_str().unwrap_or("?"))
            )));
        }
        return Ok(frame);
    }
}

/// An `output` frame's bytes (`data` text, or `base64`).
pub(super) fn output_bytes(frame: &Value) -> Result<Vec<u8>> {
    Ok(match (frame["data"].as_str(), frame["base64"].as_str()) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|err| {
                Error::setup(format!("brig serve sent output that is not base64: {err}"))
            })?,
        (None, None) => Vec::new(),
    })
}

/// An `output` frame's bytes to this command's stdout or stderr, at once.
fn print_output(frame: &Value) -> Result<()> {
    let bytes = output_bytes(frame)?;
    let written = match frame["stream"].as_str() {
        Some("stderr") => {
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
    let reply = request(
        &at.server,
        json!({"type": "session_ps", "session": at.session}),
    )?;
    println!("{:>6}  {:<18} {:<12} COMMAND", "PID", "STATE", "TAG");
    for process in reply["processes"].as_array().into_iter().flatten() {
        let state = match (&process["running"], &process["status"]) {
            (Value::Bool(true), _) => "running".to_string(),
            (_, status) => match (status["exit_code"].as_i64(), status["signal"].as_i64()) {
                (Some(code), _) => format!("exited {code}"),
                (None, Some(signal)) => format!("signaled {signal}"),
                _ => printable(status["status"].as_str().unwrap_or("ended")),
            },
        };
        let command: Vec<String> = process["command"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|arg| printable(arg.as_str().unwrap_or_default()))
            .collect();
        println!(
            "{:>6}  {:<18} {:<12} {}",
            process["pid"],
            state,
            printable(process["tag"].as_str().unwrap_or("-")),
            command.join(" ")
        );
    }
    Ok(0)
}

/// Prints what the process writes until it ends; its verdict's exit status.
pub fn connect(at: &At, which: &Which) -> Result<i32> {
    let message = which.into(json!({"type": "session_connect", "session": at.session}));
    let end = stream(&at.server, message, "exited")?;
    let sinks = Sinks::open(None, None, None)?;
    let dropped = end["dropped"].as_u64().unwrap_or(0);
    if dropped > 0 {
        eprintln!("brig: {dropped} bytes of its output were dropped: this client read too slowly");
    }
    Ok(super::verdict_lines(&end["verdict"], &sinks))
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
    for (index, piece) in pieces.into_iter().enumerate() {
        let message = which.into(json!({
            "type": "session_stdin",
            "session": at.session,
            "data": piece,
            "close": close && index == last,
        }));
        request(&at.server, message)?;
    }
    Ok(0)
}

/// `signal` (None: SIGKILL, `kill`).
pub fn signal(at: &At, which: &Which, signal: Option<&str>) -> Result<i32> {
    let message = match signal {
        Some(signal) => {
            let signal = signal
                .parse::<i64>()
                .map_or_else(|_| json!(signal), |number| json!(number));
            json!({"type": "session_signal", "session": at.session, "signal": signal})
        }
        None => json!({"type": "session_kill", "session": at.session}),
    };
    request(&at.server, which.into(message))?;
    Ok(0)
}
