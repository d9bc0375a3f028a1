//! A session from Rust, through `brig::serve::Client`: create one on a running
//! `brig serve`, run a command, write a file into its workspace and read it back, stream
//! a command's output as it is produced, and close it (its jail, processes and workspace
//! go with it).
//!
//! ```sh
//! brig serve --socket /tmp/brig.sock &
//! cargo run --example session -- /tmp/brig.sock
//! ```

use brig::serve::{Client, Create, Exec, Session};
use std::io::Write;

fn main() {
    if let Err(err) = run() {
        eprintln!("session example: {err}");
        std::process::exit(brig::ExitStatus::BRIG_FAILED);
    }
}

fn run() -> brig::Result<()> {
    let socket = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("BRIG_SERVER").ok())
        .ok_or_else(|| {
            brig::Error::input(
                "give the server's socket: cargo run --example session -- SOCKET (or set BRIG_SERVER)",
            )
        })?;
    let client = Client::new(socket);
    let session = client.create(&Create::default())?;
    println!("session {}", session.id());
    // Closed whatever happened in between.
    let used = use_session(&session);
    session.close()?;
    println!("closed");
    used
}

fn use_session(session: &Session) -> brig::Result<()> {
    // A command, waited for: its verdict and what it wrote.
    let done = session.exec(&Exec::command(["sh", "-c", "echo hello from $(id -un)"]))?;
    print!("{}", done.stdout.unwrap_or_default());
    println!(
        "exit code {:?}, {} ms",
        done.verdict.exit_code, done.verdict.wall_ms
    );

    // A file, streamed into the workspace (parents made) and read back.
    let text = b"written by the example\n";
    session.write("notes/hello.txt", text.len() as u64, &mut &text[..])?;
    let mut back = Vec::new();
    session.read("notes/hello.txt", 0, None, &mut back)?;
    print!("read back: {}", String::from_utf8_lossy(&back));
    for entry in session.ls("notes", None)?.0 {
        println!("ls: {} {} bytes", entry.name, entry.size);
    }

    // A command whose output arrives as it is produced, chunk by chunk.
    let streamed = session.exec_stream(
        &Exec::command(["sh", "-c", "cat notes/hello.txt; echo done >&2"]),
        |output| {
            let mut stdout = std::io::stdout();
            let _ = write!(stdout, "[{:?}] ", output.stream);
            let _ = stdout.write_all(&output.bytes()?);
            Ok(())
        },
    )?;
    println!("streamed: {:?}", streamed.verdict.status);
    Ok(())
}
