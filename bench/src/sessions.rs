//! Sessions of `brig serve` against bubblewrap and a bare Python, in one interleaved run:
//! a session created from the warm pool (the protocol spoken directly; closing it is not
//! timed), a trivial Python cell in a live session, the first stdout byte of a streamed
//! `print(1)` cell, a background process's start (its `process` reply), bwrap's `true`,
//! and a bare `python3 -c pass` for scale; with matplotlib, a cell that draws a figure
//! (which comes back as a PNG) against the same cell in a bare python3 that has matplotlib
//! imported too, driven over a pipe, its figure saved as a PNG and base64-encoded as the
//! session does.

use super::serve::{Server, median, run_command};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Serialize)]
pub struct SessionsReport {
    pub session_pool: usize,
    /// Median ms of each.
    pub latency_ms: BTreeMap<String, f64>,
    /// The 90th percentile (ms) of each: nine samples in ten took at most this.
    pub p90_ms: BTreeMap<String, f64>,
    pub ratios: BTreeMap<String, f64>,
}

fn ask(socket: &Path, message: Value) -> Value {
    first_frame(socket, message).1
}

/// Sends `message` and waits for its first frame; the open connection, and that frame.
fn first_frame(socket: &Path, mut message: Value) -> (UnixStream, Value) {
    message["brig"] = json!(1);
    let mut stream = UnixStream::connect(socket).expect("connect");
    let body = serde_json::to_vec(&message).expect("JSON");
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).expect("send");
    let reply = next_frame(&mut stream);
    (stream, reply)
}

fn next_frame(stream: &mut UnixStream) -> Value {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).expect("read a frame");
    let mut reply = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut reply).expect("read a frame");
    serde_json::from_slice(&reply).expect("a JSON frame")
}

fn ready(socket: &Path) -> u64 {
    ask(socket, json!({"type": "status"}))["session_ready"]
        .as_u64()
        .unwrap_or(0)
}

/// Rounds that sample the matplotlib cell and its bare peer (the others take `--rounds`).
const PLOT_ROUNDS: usize = 100;
const PLOT_SAMPLES: [&str; 2] = [
    "matplotlib png cell in a live session",
    "the same cell in a warm bare python3",
];

/// The matplotlib cell of the benchmark.
const PLOT: &str = "plt.figure(figsize=(6.4, 4.8))\nplt.plot(range(200), [i * i % 97 for i in range(200)])\nplt.title('bench')\nNone";

/// A bare python3 with matplotlib imported that runs PLOT for each line on its stdin and
/// answers with the length of the PNG's base64 (the session's work: savefig, encode, close).
const BARE_PLOT_LOOP: &str = r#"
import base64, io, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
cell = sys.argv[1]
for line in sys.stdin:
    exec(cell)
    out = []
    for number in plt.get_fignums():
        buffer = io.BytesIO()
        plt.figure(number).savefig(buffer, format="png")
        out.append(base64.b64encode(buffer.getvalue()).decode())
    plt.close("all")
    print(sum(map(len, out)), flush=True)
"#;

struct BarePlot {
    child: std::process::Child,
    answers: std::io::BufReader<std::process::ChildStdout>,
}

impl BarePlot {
    fn start() -> Option<BarePlot> {
        let mut child = std::process::Command::new("/usr/bin/python3")
            .args(["-c", BARE_PLOT_LOOP, PLOT])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let answers = std::io::BufReader::new(child.stdout.take()?);
        let mut bare = BarePlot { child, answers };
        bare.cell().then_some(bare)
    }

    /// Runs the cell once; whether it drew a PNG.
    fn cell(&mut self) -> bool {
        let mut line = String::new();
        let sent = self
            .child
            .stdin
            .as_mut()
            .is_some_and(|stdin| stdin.write_all(b"\n").and_then(|()| stdin.flush()).is_ok());
        sent && self.answers.read_line(&mut line).is_ok()
            && line.trim().parse::<u64>().is_ok_and(|size| size > 0)
    }
}

impl Drop for BarePlot {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

pub fn measure(brig: &str, bwrap: Option<Vec<String>>, rounds: usize) -> SessionsReport {
    let session_pool = 2;
    let pool = session_pool.to_string();
    let server = Server::start(brig, "sessions", &["--pool", "0", "--session-pool", &pool]);
    let started = Instant::now();
    while UnixStream::connect(&server.socket).is_err()
        || ready(&server.socket) < session_pool as u64
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "brig serve's session pool did not fill"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let live = ask(&server.socket, json!({"type": "session_create"}))["session"]
        .as_str()
        .expect("a session")
        .to_string();
    let warm_up = ask(
        &server.socket,
        json!({"type": "session_exec", "session": live, "code": "1 + 1"}),
    );
    assert_eq!(warm_up["result"], "2", "{warm_up}");

    let mut names: Vec<&str> = vec![
        "session create (pooled)",
        "python cell in a live session",
        "first byte of a streamed print(1)",
        "background process start",
        "bare python3 -c pass",
    ];
    if bwrap.is_some() {
        names.push("bwrap true");
    }
    // matplotlib imported in both before the first sample.
    let mut bare_plot = BarePlot::start();
    if bare_plot.is_some() {
        let imported = ask(
            &server.socket,
            json!({"type": "session_exec", "session": live, "code": format!("import matplotlib.pyplot as plt\n{PLOT}")}),
        );
        if imported["results"][0]["image/png"].is_string() {
            names.extend(PLOT_SAMPLES);
        } else {
            eprintln!("no matplotlib in the session ({imported}): its benchmark left out");
            bare_plot = None;
        }
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let python = ["/usr/bin/python3", "-c", "pass"]
        .map(String::from)
        .to_vec();
    let bwrap_true = bwrap.map(|mut prefix| {
        prefix.push("/usr/bin/true".into());
        prefix
    });
    for round in 0..rounds {
        for offset in 0..names.len() {
            let index = (round + offset) % names.len();
            // A figure takes a tenth of a second each way: its pair has enough samples
            // after PLOT_ROUNDS rounds, and the others go on without it.
            if round >= PLOT_ROUNDS && PLOT_SAMPLES.contains(&names[index]) {
                continue;
            }
            // Every sample starts with a full pool on a quiet machine: the refill of the
            // last session taken (a jail and a Python start) is waited for, untimed.
            let settling = Instant::now();
            while ready(&server.socket) < session_pool as u64 {
                assert!(
                    settling.elapsed() < Duration::from_secs(30),
                    "the session pool did not refill"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            match names[index] {
                "session create (pooled)" => {
                    let begun = Instant::now();
                    let reply = ask(&server.socket, json!({"type": "session_create"}));
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                    let id = reply["session"].as_str().expect("a session");
                    ask(
                        &server.socket,
                        json!({"type": "session_close", "session": id}),
                    );
                }
                "python cell in a live session" => {
                    let begun = Instant::now();
                    let reply = ask(
                        &server.socket,
                        json!({"type": "session_exec", "session": live, "code": "x = 6 * 7\nx"}),
                    );
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                    assert_eq!(reply["result"], "42", "{reply}");
                }
                "first byte of a streamed print(1)" => {
                    let begun = Instant::now();
                    let (mut stream, first) = first_frame(
                        &server.socket,
                        json!({"type": "session_exec", "session": live, "code": "print(1)", "stream": true}),
                    );
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                    assert_eq!(first["data"], "1\n", "{first}");
                    // The verdict, untimed.
                    assert_eq!(next_frame(&mut stream)["type"], "exec");
                }
                "background process start" => {
                    let begun = Instant::now();
                    let reply = ask(
                        &server.socket,
                        json!({"type": "session_exec", "session": live, "command": ["/bin/sleep", "300"], "background": true}),
                    );
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                    assert_eq!(reply["type"], "process", "{reply}");
                    ask(
                        &server.socket,
                        json!({"type": "session_kill", "session": live, "pid": reply["pid"]}),
                    );
                }
                "bare python3 -c pass" => {
                    let begun = Instant::now();
                    run_command(&python);
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                }
                "matplotlib png cell in a live session" => {
                    let begun = Instant::now();
                    let reply = ask(
                        &server.socket,
                        json!({"type": "session_exec", "session": live, "code": PLOT}),
                    );
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                    assert!(reply["results"][0]["image/png"].is_string(), "{reply}");
                }
                "the same cell in a warm bare python3" => {
                    let bare = bare_plot.as_mut().expect("a bare python3");
                    let begun = Instant::now();
                    let drew = bare.cell();
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                    assert!(drew, "the bare python3 did not draw");
                }
                _ => {
                    let begun = Instant::now();
                    run_command(bwrap_true.as_ref().expect("bwrap"));
                    samples[index].push(begun.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
    }
    ask(
        &server.socket,
        json!({"type": "session_close", "session": live}),
    );
    let p90_ms: BTreeMap<String, f64> = names
        .iter()
        .zip(&samples)
        .map(|(name, samples)| (name.to_string(), percentile(samples, 90)))
        .collect();
    let latency_ms: BTreeMap<String, f64> = names
        .iter()
        .zip(samples)
        .map(|(name, samples)| (name.to_string(), median(samples)))
        .collect();
    let mut ratios = BTreeMap::new();
    if let Some(bwrap) = latency_ms.get("bwrap true") {
        ratios.insert(
            "session create / bwrap true (goal <= 0.5)".to_string(),
            latency_ms["session create (pooled)"] / bwrap,
        );
        ratios.insert(
            "background process start / bwrap true".to_string(),
            latency_ms["background process start"] / bwrap,
        );
    }
    ratios.insert(
        "first streamed byte / whole python cell".to_string(),
        latency_ms["first byte of a streamed print(1)"]
            / latency_ms["python cell in a live session"],
    );
    ratios.insert(
        "python cell / bare python3 -c pass".to_string(),
        latency_ms["python cell in a live session"] / latency_ms["bare python3 -c pass"],
    );
    if let (Some(session), Some(bare)) = (
        latency_ms.get("matplotlib png cell in a live session"),
        latency_ms.get("the same cell in a warm bare python3"),
    ) {
        ratios.insert(
            "matplotlib png cell / bare python3 (goal <= 1.2)".to_string(),
            session / bare,
        );
    }
    SessionsReport {
        session_pool,
        latency_ms,
        p90_ms,
        ratios,
    }
}

/// The `percent`th percentile of `samples`.
fn percentile(samples: &[f64], percent: usize) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[(sorted.len() * percent / 100).min(sorted.len() - 1)]
}

pub fn print(report: &SessionsReport) {
    println!(
        "\nbrig serve sessions (session pool {}; one interleaved run)",
        report.session_pool
    );
    for (name, ms) in &report.latency_ms {
        println!(
            "{name:<40} median {ms:.3} ms, p90 {:.3} ms",
            report.p90_ms[name]
        );
    }
    println!(
        "{:<48} {:.3} ms",
        "python cell in a live session (goal <= 1 ms)",
        report.latency_ms["python cell in a live session"]
    );
    println!(
        "{:<48} {:.3} ms",
        "first byte of a streamed print(1) (goal <= 0.5 ms)",
        report.latency_ms["first byte of a streamed print(1)"]
    );
    println!(
        "{:<48} {:.3} ms",
        "background process start (goal <= 1 ms)", report.latency_ms["background process start"]
    );
    for (label, ratio) in &report.ratios {
        println!("{label:<48} {ratio:.2}");
    }
}
