//! brig-bench: brig against bubblewrap and a bare exec, measured in one interleaved run.
//!
//! Every round launches each tool once, in a rotating order, so that drift in the
//! machine's load hits all of them alike; throughput is likewise measured in short windows
//! taken in turns. Reported: launch latency (median, min, max), throughput in jails per
//! second with 1 and 2 workers (median window), and brig's peak RSS. The ratios
//! brig/bwrap are the numbers the performance goals are stated in. With `--baseline PATH`
//! another brig binary (the previous build) runs as the tool `brig-baseline`, interleaved
//! the same way, for an A/B ratio brig/brig-baseline.

mod files;
mod net;
mod serve;
mod sessions;

use serde::Serialize;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Options {
    brig: String,
    /// Another brig binary to compare with (A/B), as the tool `brig-baseline`.
    baseline: Option<String>,
    rounds: usize,
    throughput_for: Duration,
    json: Option<String>,
    /// Extra `brig run` options for a second brig variant, e.g. cgroup limits.
    limits: Vec<String>,
    /// Only these tools (e.g. inside a VM without bwrap).
    only: Option<Vec<String>>,
    /// The `--net filtered` section: measured unless `--no-net`; alone with `--net-only`.
    net: bool,
    net_only: bool,
    /// The `brig serve` section: measured unless `--no-serve`; alone with `--serve-only`.
    serve: bool,
    serve_only: bool,
    /// The sessions section: measured unless `--no-sessions`; alone with `--sessions-only`.
    sessions: bool,
    sessions_only: bool,
    /// The session files section: measured unless `--no-files`; alone with `--files-only`.
    files: bool,
    files_only: bool,
}

fn parse_options() -> Options {
    let mut options = Options {
        brig: "target/x86_64-unknown-linux-gnu/release/brig".into(),
        baseline: None,
        rounds: 200,
        throughput_for: Duration::from_secs(3),
        json: None,
        limits: vec![
            "--memory".into(),
            "256M".into(),
            "--pids".into(),
            "64".into(),
        ],
        only: None,
        net: true,
        net_only: false,
        serve: true,
        serve_only: false,
        sessions: true,
        sessions_only: false,
        files: true,
        files_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--brig" => options.brig = value(),
            "--baseline" => options.baseline = Some(value()),
            "--rounds" => options.rounds = value().parse().unwrap_or_else(|_| usage("--rounds N")),
            "--seconds" => {
                let seconds: f64 = value().parse().unwrap_or_else(|_| usage("--seconds S"));
                options.throughput_for = Duration::from_secs_f64(seconds);
            }
            "--json" => options.json = Some(value()),
            "--limits" => options.limits = value().split_whitespace().map(String::from).collect(),
            "--tools" => options.only = Some(value().split(',').map(String::from).collect()),
            "--no-net" => options.net = false,
            "--net-only" => options.net_only = true,
            "--no-serve" => options.serve = false,
            "--serve-only" => options.serve_only = true,
            "--no-sessions" => options.sessions = false,
            "--sessions-only" => options.sessions_only = true,
            "--no-files" => options.files = false,
            "--files-only" => options.files_only = true,
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown option {other}")),
        }
    }
    options
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("brig-bench: {problem}");
    }
    eprintln!(
        "usage: brig-bench [--brig PATH] [--baseline PATH] [--rounds N] [--seconds S] [--limits 'OPTS'] [--tools bare,unshare,bwrap,brig,brig+limits,brig-baseline] [--no-net | --net-only] [--no-serve | --serve-only] [--no-sessions | --sessions-only] [--no-files | --files-only] [--json FILE]"
    );
    std::process::exit(2);
}

/// One way of launching a program.
struct Tool {
    name: &'static str,
    prefix: Vec<String>,
}

fn tools(options: &Options) -> Vec<Tool> {
    let words = |text: &str| {
        text.split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let mut brig_limits = vec![options.brig.clone(), "run".into()];
    brig_limits.extend(options.limits.iter().cloned());
    brig_limits.push("--".into());
    let mut tools = vec![
        Tool {
            name: "bare",
            prefix: Vec::new(),
        },
        Tool {
            // The floor: user, mount, pid, ipc, net and uts namespaces and a fork, nothing
            // else (no root filesystem, no policy).
            name: "unshare",
            prefix: words("unshare -Urmpin --fork --"),
        },
        Tool {
            // All namespaces, read-only /usr, /proc, /dev, tmpfs /tmp; no seccomp, no limits.
            name: "bwrap",
            prefix: words(
                "bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr \
                 --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
                 --symlink usr/sbin /sbin --proc /proc --dev /dev --tmpfs /tmp --",
            ),
        },
        Tool {
            // Full isolation: all namespaces, default rootfs, seccomp, Landlock, no caps;
            // no cgroup limits (those are the next variant).
            name: "brig",
            prefix: words(&format!("{} run --memory max --pids max --", options.brig)),
        },
        Tool {
            name: "brig+limits",
            prefix: brig_limits,
        },
    ];
    if let Some(baseline) = &options.baseline {
        tools.push(Tool {
            name: "brig-baseline",
            prefix: words(&format!("{baseline} run --memory max --pids max --")),
        });
    }
    tools
}

const PROGRAMS: &[(&str, &[&str])] = &[
    ("true", &["/usr/bin/true"]),
    ("sh -c true", &["/bin/sh", "-c", "true"]),
    ("python3 -c pass", &["/usr/bin/python3", "-c", "pass"]),
];

/// Launches once and waits; returns the wall time and the peak RSS (KiB) of the launched
/// process tree (for brig: brig, its init and the program).
// The child is reaped with wait4 (for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn launch(tool: &Tool, program: &[&str]) -> (Duration, u64) {
    let mut argv: Vec<&str> = tool.prefix.iter().map(String::as_str).collect();
    argv.extend_from_slice(program);
    let mut command = Command::new(argv[0]);
    command
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // The jail must not inherit the harness's signal mask or process group quirks.
    command.process_group(0);
    let started = Instant::now();
    let child = command
        .spawn()
        .unwrap_or_else(|err| panic!("start {}: {err}", argv[0]));
    let mut status = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: wait4 on our own child with valid pointers to a status and a rusage.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = started.elapsed();
    assert_eq!(waited, pid, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{} {:?} failed with status {status:#x}",
        tool.name,
        program
    );
    (elapsed, usage.ru_maxrss.max(0) as u64)
}

#[derive(Serialize)]
struct Latency {
    median_ms: f64,
    /// The 90th percentile: nine runs in ten took at most this.
    p90_ms: f64,
    min_ms: f64,
    max_ms: f64,
    runs: usize,
}

fn latency(samples: &mut [Duration]) -> Latency {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Latency {
        median_ms: ms(samples[samples.len() / 2]),
        p90_ms: ms(samples[samples.len() * 9 / 10]),
        min_ms: ms(samples[0]),
        max_ms: ms(samples[samples.len() - 1]),
        runs: samples.len(),
    }
}

/// How many turns the throughput of each tool is measured in.
const THROUGHPUT_WINDOWS: u32 = 5;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Jails per second with `workers` threads launching back to back.
fn throughput(tool: &Tool, program: &[&str], workers: usize, for_how_long: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tool = Arc::new(Tool {
        name: tool.name,
        prefix: tool.prefix.clone(),
    });
    let program: Arc<Vec<String>> = Arc::new(program.iter().map(|s| s.to_string()).collect());
    let started = Instant::now();
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (stop, done, tool, program) =
                (stop.clone(), done.clone(), tool.clone(), program.clone());
            std::thread::spawn(move || {
                let program: Vec<&str> = program.iter().map(String::as_str).collect();
                while !stop.load(Ordering::Relaxed) {
                    launch(&tool, &program);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(for_how_long);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("worker");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

#[derive(Serialize)]
struct Report {
    kernel: String,
    cpus: usize,
    rounds: usize,
    /// program → tool → latency
    latency: BTreeMap<String, BTreeMap<String, Latency>>,
    /// "true, N workers" → tool → jails per second
    throughput: BTreeMap<String, BTreeMap<String, f64>>,
    brig_peak_rss_kib: u64,
    brig_binary_bytes: u64,
    /// brig's number divided by bwrap's: latency (lower is better), throughput (higher).
    ratios: BTreeMap<String, f64>,
    /// `--net filtered` against `--net none` and `--net host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<net::NetReport>,
    /// `brig serve` against bwrap and a one-shot brig.
    #[serde(skip_serializing_if = "Option::is_none")]
    serve: Option<serve::ServeReport>,
    /// Sessions of `brig serve` against bwrap and a bare Python.
    #[serde(skip_serializing_if = "Option::is_none")]
    sessions: Option<sessions::SessionsReport>,
    /// A session's streamed files against base64 put/get and a host `cat`.
    #[serde(skip_serializing_if = "Option::is_none")]
    files: Option<files::FilesReport>,
}

fn main() {
    let options = parse_options();
    let tools: Vec<Tool> = tools(&options)
        .into_iter()
        .filter(|tool| {
            options
                .only
                .as_ref()
                .is_none_or(|only| only.iter().any(|name| name == tool.name))
        })
        .collect();
    // A program this machine lacks (no python3 in a minimal VM) is left out.
    let programs: Vec<&(&str, &[&str])> = PROGRAMS
        .iter()
        .filter(|(_, argv)| std::path::Path::new(argv[0]).exists())
        .collect();
    let mut report = Report {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .into(),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        rounds: options.rounds,
        latency: BTreeMap::new(),
        throughput: BTreeMap::new(),
        brig_peak_rss_kib: 0,
        brig_binary_bytes: std::fs::metadata(&options.brig).map_or(0, |meta| meta.len()),
        ratios: BTreeMap::new(),
        network: None,
        serve: None,
        sessions: None,
        files: None,
    };
    let bwrap = tools
        .iter()
        .find(|tool| tool.name == "bwrap")
        .map(|tool| tool.prefix.clone());
    if options.files_only {
        let measured = files::measure(&options.brig, options.rounds);
        files::print(&measured);
        report.files = Some(measured);
        return write_json(&options, &report);
    }
    if options.sessions_only {
        let measured = sessions::measure(&options.brig, bwrap, options.rounds);
        sessions::print(&measured);
        report.sessions = Some(measured);
        return write_json(&options, &report);
    }
    if options.serve_only {
        let served = serve::measure(&options.brig, bwrap, options.rounds, options.throughput_for);
        serve::print(&served);
        report.serve = Some(served);
        return write_json(&options, &report);
    }
    if options.net_only {
        let network = net::measure(&options.brig, options.rounds);
        net::print(&network);
        report.network = Some(network);
        return write_json(&options, &report);
    }

    for (label, program) in &programs {
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); tools.len()];
        // Warm the page cache and the dentry cache first.
        for tool in &tools {
            launch(tool, program);
        }
        for round in 0..options.rounds {
            for offset in 0..tools.len() {
                let index = (round + offset) % tools.len();
                let (elapsed, rss) = launch(&tools[index], program);
                samples[index].push(elapsed);
                if tools[index].name == "brig" && *label == "true" {
                    report.brig_peak_rss_kib = report.brig_peak_rss_kib.max(rss);
                }
            }
        }
        // A/B: each round ran both builds back to back, so a round's ratio has the same
        // load in its two samples; their median is steadier than the medians' ratio on a
        // shared machine.
        let index_of = |name: &str| tools.iter().position(|tool| tool.name == name);
        if let (Some(new), Some(old)) = (index_of("brig"), index_of("brig-baseline")) {
            let ratios = samples[new]
                .iter()
                .zip(&samples[old])
                .map(|(new, old)| new.as_secs_f64() / old.as_secs_f64())
                .collect();
            report.ratios.insert(
                format!("latency {label}: brig/brig-baseline, median of the rounds' ratios"),
                median(ratios),
            );
        }
        let per_tool = tools
            .iter()
            .zip(samples.iter_mut())
            .map(|(tool, samples)| (tool.name.to_string(), latency(samples)))
            .collect();
        report.latency.insert(label.to_string(), per_tool);
    }
    // The machine's speed drifts (other tenants, kernel workers): each tool gets
    // THROUGHPUT_WINDOWS short windows, taken in turns, and reports their median.
    for workers in [1, 2] {
        let window = options.throughput_for.div_f64(THROUGHPUT_WINDOWS as f64);
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); tools.len()];
        for _ in 0..THROUGHPUT_WINDOWS {
            for (tool, rates) in tools.iter().zip(&mut rates) {
                rates.push(throughput(tool, programs[0].1, workers, window));
            }
        }
        let per_tool = tools
            .iter()
            .zip(rates)
            .map(|(tool, rates)| (tool.name.to_string(), median(rates)))
            .collect();
        report
            .throughput
            .insert(format!("true, {workers} worker(s)"), per_tool);
    }
    for (label, per_tool) in &report.latency {
        if !has_brig_and_bwrap(per_tool) {
            continue;
        }
        report.ratios.insert(
            format!("latency {label}: brig/bwrap"),
            per_tool["brig"].median_ms / per_tool["bwrap"].median_ms,
        );
    }
    for (label, per_tool) in &report.latency {
        if let (Some(brig), Some(baseline)) = (per_tool.get("brig"), per_tool.get("brig-baseline"))
        {
            report.ratios.insert(
                format!("latency {label}: brig/brig-baseline, medians"),
                brig.median_ms / baseline.median_ms,
            );
        }
    }
    for (label, per_tool) in &report.throughput {
        if !has_brig_and_bwrap(per_tool) {
            continue;
        }
        report.ratios.insert(
            format!("throughput {label}: brig/bwrap"),
            per_tool["brig"] / per_tool["bwrap"],
        );
    }
    print_table(&report, &tools);
    if options.serve {
        let served = serve::measure(
            &options.brig,
            bwrap.clone(),
            options.rounds,
            options.throughput_for,
        );
        serve::print(&served);
        report.serve = Some(served);
    }
    if options.sessions {
        let measured = sessions::measure(&options.brig, bwrap.clone(), options.rounds);
        sessions::print(&measured);
        report.sessions = Some(measured);
    }
    if options.files {
        let measured = files::measure(&options.brig, options.rounds);
        files::print(&measured);
        report.files = Some(measured);
    }
    if options.net {
        let network = net::measure(&options.brig, options.rounds);
        net::print(&network);
        report.network = Some(network);
    }
    write_json(&options, &report);
}

fn write_json(options: &Options, report: &Report) {
    if let Some(path) = &options.json {
        let json = serde_json::to_string_pretty(report).expect("report serializes");
        std::fs::write(path, json + "\n").unwrap_or_else(|err| panic!("write {path}: {err}"));
        println!("\nwrote {path}");
    }
}

fn has_brig_and_bwrap<V>(per_tool: &BTreeMap<String, V>) -> bool {
    per_tool.contains_key("brig") && per_tool.contains_key("bwrap")
}

fn print_table(report: &Report, tools: &[Tool]) {
    println!(
        "kernel {}, {} CPUs, {} interleaved rounds\n",
        report.kernel, report.cpus, report.rounds
    );
    print!("{:<32}", "launch, median/p90 (min-max) ms");
    for tool in tools {
        print!("{:>28}", tool.name);
    }
    println!();
    for (label, per_tool) in &report.latency {
        print!("{label:<32}");
        for tool in tools {
            let l = &per_tool[tool.name];
            print!(
                "{:>28}",
                format!(
                    "{:.2}/{:.2} ({:.2}-{:.1})",
                    l.median_ms, l.p90_ms, l.min_ms, l.max_ms
                )
            );
        }
        println!();
    }
    println!();
    print!("{:<32}", "throughput, jails/s");
    for tool in tools {
        print!("{:>28}", tool.name);
    }
    println!();
    for (label, per_tool) in &report.throughput {
        print!("{label:<32}");
        for tool in tools {
            print!("{:>28.0}", per_tool[tool.name]);
        }
        println!();
    }
    println!(
        "\nbrig peak RSS (brig + init + /usr/bin/true): {} KiB; binary: {} bytes\n",
        report.brig_peak_rss_kib, report.brig_binary_bytes
    );
    for (label, ratio) in &report.ratios {
        println!("{label:<72} {ratio:.3}");
    }
}
