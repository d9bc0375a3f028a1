//! `--net filtered` against its peers, in one interleaved run: launch cost over
//! `--net none`, bulk download and connection set-up through the policy against
//! `--net host` (the same curl, the same local server), and brig's own RSS while the jail
//! holds 100 connections open.

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The name the jail uses for the bench's server (pinned to 127.0.0.1).
const NAME: &str = "bench.test";

#[derive(Serialize)]
pub struct NetReport {
    /// `true` with --net none and with --allow-net: median launch, ms.
    pub launch_none_ms: f64,
    pub launch_filtered_ms: f64,
    /// One connection, curl inside the jail: median over the rounds.
    pub download_bytes: u64,
    pub download_host_gbit_s: f64,
    pub download_filtered_gbit_s: f64,
    pub connect_host_ms: f64,
    pub connect_filtered_ms: f64,
    /// brig's own resident set (the supervisor, where the user-mode stack runs) while the
    /// jail holds CONNECTIONS connections open.
    pub connections: usize,
    pub brig_rss_with_connections_kib: u64,
    pub brig_rss_idle_kib: u64,
    /// The goals: launch +ms, Gbit/s, filtered/host, connect +ms, RSS MiB.
    pub goals: BTreeMap<String, f64>,
}

/// Serves `GET /bytes/N` (N bytes from one preallocated buffer) and holds any other
/// connection open until the client closes it.
fn start_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the bench server");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    port
}

fn serve(stream: TcpStream) {
    let chunk = vec![b'x'; 256 << 10];
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|read| read > 0) {
        let Some(length) = line
            .strip_prefix("GET /bytes/")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
        else {
            // Not a download: a held connection; echo until the client closes.
            let mut sink = [0u8; 64];
            while reader.read(&mut sink).is_ok_and(|read| read > 0) {}
            return;
        };
        let mut header = String::new();
        while reader.read_line(&mut header).is_ok_and(|read| read > 2) {
            header.clear();
        }
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n");
        if writer.write_all(head.as_bytes()).is_err() {
            return;
        }
        let mut left = length;
        while left > 0 {
            let now = left.min(chunk.len() as u64) as usize;
            if writer.write_all(&chunk[..now]).is_err() {
                return;
            }
            left -= now as u64;
        }
        line.clear();
    }
}

fn run_quiet(argv: &[String]) -> String {
    let output = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|err| panic!("start {}: {err}", argv[0]));
    assert!(
        output.status.success(),
        "{argv:?} failed: {:?}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn brig_run(brig: &str, options: &[String], program: &[&str]) -> Vec<String> {
    let mut argv = vec![brig.to_string(), "run".into(), "--quiet-limits".into()];
    argv.extend(options.iter().cloned());
    argv.push("--".into());
    argv.extend(program.iter().map(|arg| arg.to_string()));
    argv
}

pub fn measure(brig: &str, rounds: usize) -> NetReport {
    let port = start_server();
    let none = vec!["--net".to_string(), "none".into()];
    let filtered = vec![
        "--allow-net".to_string(),
        format!("{NAME}:{port}"),
        "--add-host".into(),
        format!("{NAME}:127.0.0.1"),
    ];
    let host = vec!["--net".to_string(), "host".into()];

    // Launch: `true`, interleaved.
    let mut launches: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for offset in 0..2 {
            let which = (round + offset) % 2;
            let options = if which == 0 { &none } else { &filtered };
            let argv = brig_run(brig, options, &["/usr/bin/true"]);
            let started = Instant::now();
            run_quiet(&argv);
            launches[which].push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }

    // Bulk download, one connection, through the policy and with the host's network.
    let download_bytes: u64 = 1 << 30;
    let curl = |url: &str| {
        [
            "/usr/bin/curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{speed_download} %{time_connect}",
            url,
        ]
        .map(String::from)
    };
    let filtered_url = format!("http://{NAME}:{port}/bytes/{download_bytes}");
    let host_url = format!("http://127.0.0.1:{port}/bytes/{download_bytes}");
    let (mut speeds, mut connects): ([Vec<f64>; 2], [Vec<f64>; 2]) = Default::default();
    let download_rounds = (rounds / 20).clamp(3, 9);
    for round in 0..download_rounds {
        for offset in 0..2 {
            let which = (round + offset) % 2;
            let (options, url) = if which == 0 {
                (&host, &host_url)
            } else {
                (&filtered, &filtered_url)
            };
            let program = curl(url);
            let program: Vec<&str> = program.iter().map(String::as_str).collect();
            let out = run_quiet(&brig_run(brig, options, &program));
            let mut fields = out.split_whitespace();
            let bytes_per_s: f64 = fields.next().and_then(|f| f.parse().ok()).expect("speed");
            let connect_s: f64 = fields.next().and_then(|f| f.parse().ok()).expect("connect");
            speeds[which].push(bytes_per_s * 8.0 / 1e9);
            connects[which].push(connect_s * 1000.0);
        }
    }

    // brig's RSS with the jail holding CONNECTIONS connections.
    let connections = 100;
    let hold = format!(
        "import socket, sys, time\n\
         held = [socket.create_connection(('{NAME}', {port})) for _ in range({connections})]\n\
         print('held', flush=True)\n\
         sys.stdin.read()"
    );
    let idle = rss_while(
        brig,
        &filtered,
        &[
            "/usr/bin/python3",
            "-c",
            "print('held', flush=True); import sys; sys.stdin.read()",
        ],
    );
    let busy = rss_while(brig, &filtered, &["/usr/bin/python3", "-c", &hold]);

    let launch_none_ms = median(launches[0].clone());
    let launch_filtered_ms = median(launches[1].clone());
    let [host_speed, filtered_speed] = speeds.map(median);
    let [host_connect, filtered_connect] = connects.map(median);
    let goals = BTreeMap::from([
        (
            "launch --allow-net minus --net none, ms (goal <= 1)".to_string(),
            launch_filtered_ms - launch_none_ms,
        ),
        (
            "download through the policy, Gbit/s (goal >= 1)".to_string(),
            filtered_speed,
        ),
        (
            "download filtered/host (goal >= 0.3)".to_string(),
            filtered_speed / host_speed,
        ),
        (
            "connect filtered minus host, ms (goal <= 1)".to_string(),
            filtered_connect - host_connect,
        ),
        (
            "brig RSS with 100 connections, MiB (goal <= 16)".to_string(),
            busy as f64 / 1024.0,
        ),
    ]);
    NetReport {
        launch_none_ms,
        launch_filtered_ms,
        download_bytes,
        download_host_gbit_s: host_speed,
        download_filtered_gbit_s: filtered_speed,
        connect_host_ms: host_connect,
        connect_filtered_ms: filtered_connect,
        connections,
        brig_rss_with_connections_kib: busy,
        brig_rss_idle_kib: idle,
        goals,
    }
}

/// Starts brig with `program`, waits for it to print `held`, reads brig's VmRSS, then
/// closes its stdin so that the program ends.
fn rss_while(brig: &str, options: &[String], program: &[&str]) -> u64 {
    let argv = brig_run(brig, options, program);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start brig");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("read the program's line");
    assert_eq!(
        line.trim(),
        "held",
        "the program did not hold its connections"
    );
    std::thread::sleep(Duration::from_millis(200));
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    drop(child.stdin.take());
    child.wait().expect("wait for brig");
    rss
}

pub fn print(report: &NetReport) {
    println!("\n--net filtered (one interleaved run; the bench's own HTTP server on 127.0.0.1)");
    println!(
        "launch `true`: --net none {:.2} ms, --allow-net {:.2} ms",
        report.launch_none_ms, report.launch_filtered_ms
    );
    println!(
        "download {} MiB, one connection: --net host {:.2} Gbit/s (connect {:.2} ms), --allow-net {:.2} Gbit/s (connect {:.2} ms)",
        report.download_bytes >> 20,
        report.download_host_gbit_s,
        report.connect_host_ms,
        report.download_filtered_gbit_s,
        report.connect_filtered_ms
    );
    println!(
        "brig RSS: {} KiB idle, {} KiB with {} connections open",
        report.brig_rss_idle_kib, report.brig_rss_with_connections_kib, report.connections
    );
    for (goal, value) in &report.goals {
        println!("{goal:<52} {value:.2}");
    }
}
