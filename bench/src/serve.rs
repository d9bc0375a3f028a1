//! `brig serve` against bubblewrap and a one-shot brig, in one interleaved run: `true`
//! through the server with `brig run --server` as the client, and with this harness
//! speaking the protocol itself; throughput with 2 client workers; the server's memory.

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Serialize)]
pub struct ServeReport {
    pub pool: usize,
    /// The server's own count: runs, those served by a pooled jail, by a warm Python.
    pub runs: u64,
    pub pooled_runs: u64,
    pub warm_runs: u64,
    /// Median ms: `true` by bwrap, one-shot brig, `brig run --server`, the protocol
    /// direct; `python3 -c pass` bare on the host and through a warm Python.
    pub latency_ms: BTreeMap<String, f64>,
    /// `true`, 2 workers, runs per second.
    pub throughput: BTreeMap<String, f64>,
    pub server_rss_kib: u64,
    /// Proportional set size of each waiting pooled runner (its jail's init included).
    pub pooled_runner_pss_kib: Vec<u64>,
    pub ratios: BTreeMap<String, f64>,
}

/// A `brig serve` of the harness's, stopped (SIGTERM, waited for) when dropped.
pub struct Server {
    child: Child,
    pub socket: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Server {
    /// `brig serve` on a socket named after `label`, with `args` and no memory or pids
    /// limit (the peers have none); returns once it listens.
    pub fn start(brig: &str, label: &str, args: &[&str]) -> Server {
        let socket =
            std::env::temp_dir().join(format!("brig-bench-{label}-{}.sock", std::process::id()));
        let child = Command::new(brig)
            .args(["serve", "--socket"])
            .arg(&socket)
            .args(args)
            .args(["--memory", "max", "--pids", "max"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start brig serve");
        let started = Instant::now();
        while UnixStream::connect(&socket).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "brig serve did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, socket }
    }
}

fn start_server(brig: &str, pool: usize) -> Server {
    let pool = pool.to_string();
    let args = [
        "--pool",
        &pool,
        "--warm-python",
        &pool,
        "--warm-node",
        &pool,
    ];
    Server::start(brig, "serve", &args)
}

/// One run of `true` through the protocol: a request with /dev/null as the program's
/// three streams, then the reply.
fn protocol_run(socket: &Path, program: &[&str]) {
    let stream = UnixStream::connect(socket).expect("connect");
    let null = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    let request = serde_json::json!({"brig": 1, "type": "run", "options": {"command": program}, "stdio": "fds"});
    let body = serde_json::to_vec(&request).expect("JSON");
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let fds = [null.as_raw_fd(); 3];
    let iov = [std::io::IoSlice::new(&frame)];
    let control = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    nix::sys::socket::sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        &control,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )
    .expect("send the request");
    let mut reader = &stream;
    let mut length = [0u8; 4];
    reader.read_exact(&mut length).expect("read the reply");
    let mut reply = vec![0u8; u32::from_be_bytes(length) as usize];
    reader.read_exact(&mut reply).expect("read the reply");
    assert!(
        reply.starts_with(br#"{"type":"done""#),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let _ = (&stream).flush();
}

/// Waits until the server runs nothing and its pools are full.
fn settle(socket: &Path, pool: usize) {
    let started = Instant::now();
    loop {
        let status = status(socket);
        let count = |key: &str| status[key].as_u64().unwrap_or(0) as usize;
        if count("running") == 0
            && count("ready") >= pool
            && count("warm_ready") >= pool
            && count("warm_node_ready") >= pool
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pool did not fill: {status}"
        );
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn status(socket: &Path) -> serde_json::Value {
    let mut stream = UnixStream::connect(socket).expect("connect");
    let body = br#"{"brig":1,"type":"status"}"#;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    stream.write_all(&frame).expect("send");
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).expect("read the status");
    let mut reply = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut reply).expect("read the status");
    serde_json::from_slice(&reply).expect("a JSON status")
}

pub fn run_command(argv: &[String]) {
    let status = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("start");
    assert!(status.success(), "{argv:?}: {status:?}");
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn status_kib(pid: u32, file: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .collect()
}

pub fn measure(
    brig: &str,
    bwrap: Option<Vec<String>>,
    rounds: usize,
    window: Duration,
) -> ServeReport {
    let pool = 4;
    let server = start_server(brig, pool);
    std::thread::sleep(Duration::from_millis(300));
    let true_program = "/usr/bin/true".to_string();
    let mut tools: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    let bwrap = bwrap.map(|mut prefix| {
        prefix.push(true_program.clone());
        prefix
    });
    if let Some(bwrap) = bwrap.clone() {
        tools.push(("bwrap".into(), Box::new(move || run_command(&bwrap))));
    }
    let one_shot: Vec<String> = [
        brig,
        "run",
        "--memory",
        "max",
        "--pids",
        "max",
        "--",
        "/usr/bin/true",
    ]
    .map(String::from)
    .to_vec();
    tools.push(("brig".into(), Box::new(move || run_command(&one_shot))));
    let client: Vec<String> = vec![
        brig.into(),
        "run".into(),
        "--server".into(),
        server.socket.display().to_string(),
        "--".into(),
        true_program,
    ];
    let client_for_throughput = client.clone();
    tools.push((
        "brig --server".into(),
        Box::new(move || run_command(&client)),
    ));
    let socket = server.socket.clone();
    tools.push((
        "protocol".into(),
        Box::new(move || protocol_run(&socket, &["/usr/bin/true"])),
    ));
    let python = ["/usr/bin/python3", "-c", "pass"]
        .map(String::from)
        .to_vec();
    tools.push((
        "bare python3 -c pass".into(),
        Box::new(move || run_command(&python)),
    ));
    let socket = server.socket.clone();
    tools.push((
        "warm python3 -c pass (protocol)".into(),
        Box::new(move || protocol_run(&socket, &["python3", "-c", "pass"])),
    ));

    let node = ["/usr/bin/node", "-e", "0"].map(String::from).to_vec();
    tools.push((
        "bare node -e 0".into(),
        Box::new(move || run_command(&node)),
    ));
    let socket = server.socket.clone();
    tools.push((
        "warm node -e 0 (protocol)".into(),
        Box::new(move || protocol_run(&socket, &["node", "-e", "0"])),
    ));
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); tools.len()];
    for round in 0..rounds {
        for offset in 0..tools.len() {
            let index = (round + offset) % tools.len();
            // Every tool is timed on a quiet machine with a full pool: the server builds
            // the next jail after it answers, and that work is waited for, untimed (the
            // throughput below has no such pauses).
            settle(&server.socket, pool);
            let started = Instant::now();
            (tools[index].1)();
            samples[index].push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let latency_ms: BTreeMap<String, f64> = tools
        .iter()
        .zip(samples)
        .map(|((name, _), samples)| (name.clone(), median(samples)))
        .collect();

    // Throughput with 2 workers, the client through the server against bwrap, in turns.
    let mut rates: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for _ in 0..3 {
        rates.entry("brig --server".into()).or_default().push(rate(
            &client_for_throughput,
            2,
            window,
        ));
        if let Some(bwrap) = &bwrap {
            rates
                .entry("bwrap".into())
                .or_default()
                .push(rate(bwrap, 2, window));
        }
    }
    let throughput: BTreeMap<String, f64> = rates
        .into_iter()
        .map(|(name, values)| (name, median(values)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let server_pid = server.child.id();
    let status = Command::new(brig)
        .args(["serve", "--status", "--socket"])
        .arg(&server.socket)
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        .unwrap_or_default();
    let count = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (runs, pooled_runs, warm_runs) =
        (count("runs:"), count("pooled_runs:"), count("warm_runs:"));
    let server_rss_kib = status_kib(server_pid, "status", "VmRSS:");
    let pooled_runner_pss_kib = children(server_pid)
        .into_iter()
        .map(|runner| {
            status_kib(runner, "smaps_rollup", "Pss:")
                + children(runner)
                    .into_iter()
                    .map(|init| status_kib(init, "smaps_rollup", "Pss:"))
                    .sum::<u64>()
        })
        .collect();
    let mut ratios = BTreeMap::new();
    if let Some(bwrap) = latency_ms.get("bwrap") {
        ratios.insert(
            "latency brig --server/bwrap (goal <= 0.5)".to_string(),
            latency_ms["brig --server"] / bwrap,
        );
        ratios.insert(
            "latency protocol/bwrap (goal <= 0.25)".to_string(),
            latency_ms["protocol"] / bwrap,
        );
    }
    ratios.insert(
        "warm python3 -c pass / bare python3 -c pass (goal <= 0.2)".to_string(),
        latency_ms["warm python3 -c pass (protocol)"] / latency_ms["bare python3 -c pass"],
    );
    ratios.insert(
        "warm node -e 0 / bare node -e 0".to_string(),
        latency_ms["warm node -e 0 (protocol)"] / latency_ms["bare node -e 0"],
    );
    if let Some(bwrap) = throughput.get("bwrap") {
        ratios.insert(
            "throughput, 2 workers, brig --server/bwrap (goal >= 1.5)".to_string(),
            throughput["brig --server"] / bwrap,
        );
    }
    ServeReport {
        runs,
        pooled_runs,
        warm_runs,
        pool,
        latency_ms,
        throughput,
        server_rss_kib,
        pooled_runner_pss_kib,
        ratios,
    }
}

/// Runs per second of `argv` with `workers` threads back to back for `window`.
pub fn rate(argv: &[String], workers: usize, window: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (stop, done, argv) = (stop.clone(), done.clone(), argv.to_vec());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    run_command(&argv);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("worker");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

pub fn print(report: &ServeReport) {
    println!(
        "\nbrig serve (pool {} and {} warm Python and Node each; one interleaved run; {} runs, {} pooled, {} warm)",
        report.pool, report.pool, report.runs, report.pooled_runs, report.warm_runs
    );
    for (tool, ms) in &report.latency_ms {
        println!("{tool:<20} `true` median {ms:.2} ms");
    }
    for (tool, rate) in &report.throughput {
        println!("{tool:<20} `true`, 2 workers: {rate:.0} runs/s");
    }
    println!(
        "server RSS {} KiB; each waiting pooled jail (runner + init, PSS): {:?} KiB",
        report.server_rss_kib, report.pooled_runner_pss_kib
    );
    for (label, ratio) in &report.ratios {
        println!("{label:<48} {ratio:.2}");
    }
}
