//! brig-soak: thousands of mixed runs, then a count of everything left behind.
//!
//! Each mode (the `brig run` command or the library in-process; root or rootless; with
//! or without a cgroup; one jail at a time or eight) runs its share of the runs, drawn
//! from the scenarios in scenario.rs: a program that exits 0 or 3, sleeps past a time
//! limit, outgrows a memory limit, forks past a pids limit, floods past an output limit,
//! spins past a CPU limit, or leaves a daemon behind. Every run's exit status and verdict
//! are checked against what the scenario must give. Then brig is SIGKILLed mid-run, and
//! finally the host is compared with how it was before: processes, cgroups, mounts, temp
//! files, and the library workers' descriptors and memory. Exits 0 only when every count
//! is 0. Runs as root (the rootless modes go through setpriv).

mod leftovers;
mod runner;
mod scenario;
mod sigkill;
mod worker;

use leftovers::{Leftovers, Snapshot};
use runner::{Done, Job, Orphan};
use scenario::{Driver, LIGHT_CPU_MS, LIGHT_RSS_KIB, Mode, Outcome, SCENARIOS, Tally};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A library worker's RSS may grow this much after its warm-up before it counts as a
/// leak (the allocator's heap is not returned page for page). Descriptors may not grow.
const RSS_NOISE_KIB: u64 = 1024;

const SETPRIV: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

struct Options {
    brig: String,
    runs: usize,
    concurrency: usize,
    seed: u64,
    checkpoint: usize,
    /// Only modes whose label contains every one of these words.
    modes: Vec<String>,
    json: Option<String>,
    sigkill: bool,
    watchdog: Duration,
}

fn parse_options() -> Options {
    let mut options = Options {
        brig: "target/x86_64-unknown-linux-gnu/release/brig".into(),
        runs: 10_000,
        concurrency: 8,
        seed: 1,
        checkpoint: 1000,
        modes: Vec::new(),
        json: None,
        sigkill: true,
        watchdog: Duration::from_secs(120),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        let number = |text: String, what: &str| -> usize {
            text.parse().unwrap_or_else(|_| usage(&format!("{what} N")))
        };
        match arg.as_str() {
            "--brig" => options.brig = value(),
            "--runs" => options.runs = number(value(), "--runs"),
            "--concurrency" => options.concurrency = number(value(), "--concurrency").max(1),
            "--seed" => options.seed = number(value(), "--seed") as u64,
            "--checkpoint" => options.checkpoint = number(value(), "--checkpoint").max(1),
            "--modes" => options.modes = value().split_whitespace().map(String::from).collect(),
            "--json" => options.json = Some(value()),
            "--no-sigkill" => options.sigkill = false,
            "--watchdog" => {
                options.watchdog = Duration::from_secs(number(value(), "--watchdog") as u64)
            }
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown option {other}")),
        }
    }
    options
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("brig-soak: {problem}");
    }
    eprintln!(
        "usage: brig-soak [--brig PATH] [--runs N] [--concurrency N] [--seed N] [--checkpoint N] [--modes 'WORDS'] [--no-sigkill] [--watchdog SECONDS] [--json FILE]\n\
         (as root; --modes 'lib rootless' keeps the modes whose label has every word)"
    );
    std::process::exit(2);
}

/// One library worker's descriptors and memory.
#[derive(Debug, Serialize)]
struct WorkerGrowth {
    pid: u32,
    runs: usize,
    samples: Vec<worker::Sample>,
    /// Descriptors: from the first sample to the last.
    fd_growth: i64,
    /// RSS: from the warm sample to the last.
    rss_growth_kib: i64,
    /// From the very first sample to the last.
    rss_growth_from_start_kib: i64,
}

#[derive(Debug, Serialize)]
struct ModeResult {
    mode: String,
    #[serde(flatten)]
    config: Mode,
    runs: usize,
    seconds: f64,
    scenarios: BTreeMap<&'static str, Tally>,
    workers: Vec<WorkerGrowth>,
    /// Library workers that failed or were killed.
    worker_failures: Vec<String>,
    /// Processes re-parented to the soak and reaped by it: they outlived their brig.
    escaped: Vec<Orphan>,
}

impl ModeResult {
    fn wrong(&self) -> usize {
        self.scenarios
            .values()
            .map(|tally| tally.wrong_exit + tally.wrong_status + tally.wrong_accounting)
            .sum::<usize>()
            + self.worker_failures.len()
    }
}

#[derive(Serialize)]
struct Report {
    kernel: String,
    cpus: usize,
    runs: usize,
    concurrency: usize,
    seed: u64,
    seconds: f64,
    modes: Vec<ModeResult>,
    /// Modes this host cannot offer, and why.
    not_run: Vec<String>,
    sigkill: Vec<sigkill::Round>,
    leftovers: Leftovers,
    fd_growth_max: i64,
    rss_growth_max_kib: i64,
    rss_noise_kib: u64,
    /// Every count that must be 0, by name.
    counts: BTreeMap<String, usize>,
    clean: bool,
}

/// The soak's own directory in /tmp, open to the rootless runs: copies of brig and of
/// this binary (a rootless run cannot reach a root-only build directory), reports, stderr.
struct SoakDir(PathBuf);

impl SoakDir {
    fn create(brig: &Path) -> SoakDir {
        let dir = PathBuf::from(format!("/tmp/soak-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the soak directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
            .expect("open the soak directory");
        let me = std::env::current_exe().expect("this binary's path");
        for (from, name) in [(brig, "brig"), (me.as_path(), "brig-soak")] {
            let to = dir.join(name);
            std::fs::copy(from, &to)
                .unwrap_or_else(|err| panic!("copy {} to {}: {err}", from.display(), to.display()));
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
                .expect("make the copy executable");
        }
        SoakDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for SoakDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command, through setpriv when the mode is rootless.
fn command(mode: &Mode, program: &Path) -> Command {
    let mut command = if mode.rootless {
        let mut command = Command::new(SETPRIV[0]);
        command.args(&SETPRIV[1..]).arg(program);
        command
    } else {
        Command::new(program)
    };
    command.stdin(Stdio::null()).stdout(Stdio::null());
    command
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    line.chars().take(300).collect()
}

struct Soak<'a> {
    options: &'a Options,
    dir: &'a SoakDir,
    tag: String,
    /// Every brig process and library worker started: jail cgroups are named after them.
    ours: HashSet<u32>,
}

impl Soak<'_> {
    fn cli(&mut self, mode: &Mode, schedule: &[usize], result: &mut ModeResult) {
        let brig = self.dir.path("brig");
        let jobs = schedule.iter().enumerate().map(|(index, &scenario)| {
            let report = self.dir.path(&format!("r-{index}.json"));
            let stderr = self.dir.path(&format!("e-{index}.txt"));
            let _ = std::fs::remove_file(&report);
            let mut command = command(mode, &brig);
            command
                .arg("run")
                .args(mode.cli_args(
                    &SCENARIOS[scenario],
                    &self.tag,
                    &report.display().to_string(),
                ))
                .env("SOAK_TAG", &self.tag)
                .current_dir(&self.dir.0)
                .stderr(std::fs::File::create(&stderr).expect("create a stderr file"));
            Job {
                command,
                tag: (scenario, report, stderr),
            }
        });
        let total = schedule.len();
        let mut finished = 0;
        let label = mode.label();
        let ours = &mut self.ours;
        let scenarios = &mut result.scenarios;
        let started = Instant::now();
        let orphans = runner::run_all(
            jobs,
            mode.concurrency,
            self.options.watchdog,
            |pid| {
                ours.insert(pid as u32);
            },
            |done: Done<(usize, PathBuf, PathBuf)>| {
                let (scenario, report, stderr) = done.tag;
                let verdict: Option<serde_json::Value> = std::fs::read_to_string(&report)
                    .ok()
                    .and_then(|text| serde_json::from_str(&text).ok());
                let field = |key: &str| {
                    verdict
                        .as_ref()
                        .and_then(|verdict| verdict[key].as_u64())
                        .unwrap_or(0)
                };
                let outcome = Outcome {
                    exit: done.ended.code(),
                    status: verdict
                        .as_ref()
                        .and_then(|verdict| verdict["status"].as_str().map(String::from))
                        .unwrap_or_else(|| "none".into()),
                    cpu_ms: field("cpu_user_ms") + field("cpu_sys_ms"),
                    max_rss_kib: field("max_rss_kib"),
                    message: first_line(&std::fs::read_to_string(&stderr).unwrap_or_default()),
                    hung: done.hung,
                };
                scenarios
                    .entry(SCENARIOS[scenario].name)
                    .or_default()
                    .add(&SCENARIOS[scenario], &outcome);
                let _ = std::fs::remove_file(&report);
                let _ = std::fs::remove_file(&stderr);
                finished += 1;
                if finished % (total / 4).max(1) == 0 && finished < total {
                    println!(
                        "  {label}: {finished}/{total} runs, {:.0} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            },
        );
        result.escaped.extend(orphans);
    }

    fn lib(&mut self, mode: &Mode, schedule: &[usize], result: &mut ModeResult) {
        let me = self.dir.path("brig-soak");
        let workers = mode.concurrency.min(schedule.len()).max(1);
        let chunks: Vec<Vec<usize>> = (0..workers)
            .map(|worker| {
                schedule
                    .iter()
                    .skip(worker)
                    .step_by(workers)
                    .copied()
                    .collect()
            })
            .collect();
        let jobs = chunks.iter().enumerate().map(|(index, chunk)| {
            let out = self.dir.path(&format!("w-{index}.json"));
            let stderr = self.dir.path(&format!("w-{index}.txt"));
            let _ = std::fs::remove_file(&out);
            let list: Vec<String> = chunk.iter().map(usize::to_string).collect();
            let mut command = command(mode, &me);
            command
                .arg("worker")
                .args(["--cgroup", if mode.cgroup { "1" } else { "0" }])
                .args(["--tag", &self.tag])
                .args(["--schedule", &list.join(",")])
                .args(["--checkpoint", &self.options.checkpoint.to_string()])
                .arg("--out")
                .arg(&out)
                .env("SOAK_TAG", &self.tag)
                .current_dir(&self.dir.0)
                .stderr(std::fs::File::create(&stderr).expect("create a stderr file"));
            Job {
                command,
                tag: (index, out, stderr),
            }
        });
        // A worker runs its whole share: allow the watchdog's time per jail, in total.
        let limit = self.options.watchdog
            + Duration::from_secs(10) * chunks.iter().map(Vec::len).max().unwrap_or(0) as u32;
        let ours = &mut self.ours;
        let mut reports = Vec::new();
        let mut failures = Vec::new();
        let orphans = runner::run_all(
            jobs,
            workers,
            limit,
            |pid| {
                ours.insert(pid as u32);
            },
            |done: Done<(usize, PathBuf, PathBuf)>| {
                let (index, out, stderr) = done.tag;
                let report: Option<worker::Report> = std::fs::read_to_string(&out)
                    .ok()
                    .and_then(|text| serde_json::from_str(&text).ok());
                match report {
                    Some(report) if done.ended.code() == 0 => reports.push((index, report)),
                    _ => {
                        let errors = std::fs::read_to_string(&stderr).unwrap_or_default();
                        let tail: Vec<&str> = errors.lines().rev().take(3).collect();
                        failures.push(format!(
                            "worker {} ({} runs) ended with {}{}: {}",
                            done.pid,
                            chunks[index].len(),
                            done.ended.code(),
                            if done.hung { " (hung)" } else { "" },
                            tail.join(" | ")
                        ));
                    }
                }
                let _ = std::fs::remove_file(&out);
                let _ = std::fs::remove_file(&stderr);
            },
        );
        result.escaped.extend(orphans);
        result.worker_failures = failures;
        for (_, report) in reports {
            for (scenario, tally) in SCENARIOS.iter().zip(&report.tallies) {
                if tally.runs > 0 {
                    result
                        .scenarios
                        .entry(scenario.name)
                        .or_default()
                        .merge(tally);
                }
            }
            if let Some((start, warm, end)) = report.growth_points() {
                result.workers.push(WorkerGrowth {
                    pid: report.pid,
                    runs: report.runs,
                    fd_growth: end.fds as i64 - start.fds as i64,
                    rss_growth_kib: end.rss_kib as i64 - warm.rss_kib as i64,
                    rss_growth_from_start_kib: end.rss_kib as i64 - start.rss_kib as i64,
                    samples: report.samples.clone(),
                });
            }
        }
    }

    fn mode(&mut self, mode: &Mode, runs: usize, seed: u64) -> ModeResult {
        let schedule = mode.schedule(runs, seed);
        let mut result = ModeResult {
            mode: mode.label(),
            config: *mode,
            runs,
            seconds: 0.0,
            scenarios: BTreeMap::new(),
            workers: Vec::new(),
            worker_failures: Vec::new(),
            escaped: Vec::new(),
        };
        println!("{}: {runs} runs", mode.label());
        let started = Instant::now();
        match mode.driver {
            Driver::Cli => self.cli(mode, &schedule, &mut result),
            Driver::Lib => self.lib(mode, &schedule, &mut result),
        }
        result.seconds = started.elapsed().as_secs_f64();
        println!(
            "  {} done in {:.0} s, {} wrong",
            mode.label(),
            result.seconds,
            result.wrong()
        );
        result
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        worker::main(&args[2..]);
    }
    let options = parse_options();
    if !nix::unistd::geteuid().is_root() {
        eprintln!("brig-soak: run as root (the rootless modes go through setpriv)");
        std::process::exit(2);
    }
    if !Path::new(&options.brig).is_file() {
        usage(&format!("no brig at {}", options.brig));
    }
    runner::become_reaper();
    let started = Instant::now();
    let before = Snapshot::take();
    let dir = SoakDir::create(Path::new(&options.brig));
    let mut soak = Soak {
        options: &options,
        dir: &dir,
        tag: format!("brig-soak-{}", std::process::id()),
        ours: HashSet::new(),
    };

    let modes: Vec<Mode> = Mode::all(options.concurrency)
        .into_iter()
        .filter(|mode| {
            let label = mode.label();
            options
                .modes
                .iter()
                .all(|word| label.contains(word.as_str()))
        })
        .collect();
    let not_run = vec![
        "rootless with a cgroup: this host has no delegated cgroup v2 for uid 65534 (hybrid hierarchy), so rootless brig has no cgroup; the oom and pids scenarios run as root only".to_string(),
    ];
    // The runs are shared out by weight: a sequential library worker gets twice the
    // share, so that its descriptors and memory are sampled over more than 1,000 jails.
    let weight = |mode: &Mode| {
        if mode.driver == Driver::Lib && mode.concurrency == 1 {
            2
        } else {
            1
        }
    };
    let total_weight: usize = modes.iter().map(weight).sum();
    let mut shares: Vec<usize> = modes
        .iter()
        .map(|mode| options.runs * weight(mode) / total_weight.max(1))
        .collect();
    let shared: usize = shares.iter().sum();
    for share in shares.iter_mut().take(options.runs - shared) {
        *share += 1;
    }
    let mut results = Vec::new();
    for (index, (mode, runs)) in modes.iter().zip(shares).enumerate() {
        if runs > 0 {
            results.push(soak.mode(mode, runs, options.seed + index as u64));
        }
    }

    let mut sigkill = Vec::new();
    if options.sigkill {
        println!("SIGKILL: brig killed mid-run, then one ordinary run");
        let brig = dir.path("brig");
        for wait in [true, false] {
            sigkill.push(sigkill::round(&brig, &soak.tag, 3, wait, &mut soak.ours));
        }
    }

    // The kernel tears namespaces down in workers of its own: give it a moment.
    std::thread::sleep(Duration::from_secs(1));
    let mut leftovers = Leftovers::find(&before, &soak.ours, &soak.tag);
    leftovers.escaped = results
        .iter()
        .flat_map(|result| &result.escaped)
        .chain(&runner::reap_orphans())
        .map(|orphan| format!("{} {}", orphan.pid, orphan.status))
        .collect();
    let ours = soak.ours.len();
    drop(dir);

    let fd_growth_max = results
        .iter()
        .flat_map(|result| &result.workers)
        .map(|worker| worker.fd_growth)
        .max()
        .unwrap_or(0);
    let rss_growth_max_kib = results
        .iter()
        .flat_map(|result| &result.workers)
        .map(|worker| worker.rss_growth_kib)
        .max()
        .unwrap_or(0);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let sum = |f: &dyn Fn(&Tally) -> usize| -> usize {
        results
            .iter()
            .flat_map(|result| result.scenarios.values())
            .map(f)
            .sum()
    };
    counts.insert("wrong exit codes".into(), sum(&|tally| tally.wrong_exit));
    counts.insert("wrong statuses".into(), sum(&|tally| tally.wrong_status));
    counts.insert(
        "wrong accounting".into(),
        sum(&|tally| tally.wrong_accounting),
    );
    counts.insert(
        "failed workers".into(),
        results.iter().map(|r| r.worker_failures.len()).sum(),
    );
    for (name, count) in leftovers::counts(&leftovers) {
        counts.insert(format!("left: {name}"), count);
    }
    counts.insert(
        "workers with fd growth".into(),
        results
            .iter()
            .flat_map(|result| &result.workers)
            .filter(|worker| worker.fd_growth > 0)
            .count(),
    );
    counts.insert(
        format!("workers with RSS growth > {RSS_NOISE_KIB} KiB"),
        results
            .iter()
            .flat_map(|result| &result.workers)
            .filter(|worker| worker.rss_growth_kib > RSS_NOISE_KIB as i64)
            .count(),
    );
    counts.insert(
        "SIGKILL failures".into(),
        sigkill.iter().map(sigkill::Round::failures).sum(),
    );
    let clean = counts.values().all(|count| *count == 0);
    let report = Report {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .into(),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        runs: results.iter().map(|result| result.runs).sum(),
        concurrency: options.concurrency,
        seed: options.seed,
        seconds: started.elapsed().as_secs_f64(),
        modes: results,
        not_run,
        sigkill,
        leftovers,
        fd_growth_max,
        rss_growth_max_kib,
        rss_noise_kib: RSS_NOISE_KIB,
        counts,
        clean,
    };
    print_report(&report, ours);
    if let Some(path) = &options.json {
        let json = serde_json::to_string_pretty(&report).expect("report serializes");
        std::fs::write(path, json + "\n").unwrap_or_else(|err| panic!("write {path}: {err}"));
        println!("\nwrote {path}");
    }
    std::process::exit(if clean { 0 } else { 1 });
}

fn print_report(report: &Report, ours: usize) {
    println!(
        "\nkernel {}, {} CPUs, {} runs in {:.0} s (seed {}); cells: runs/wrong exit/wrong status\n",
        report.kernel, report.cpus, report.runs, report.seconds, report.seed
    );
    print!("{:<24}", "mode");
    for scenario in SCENARIOS {
        print!("{:>12}", scenario.name);
    }
    println!("{:>14}", "total");
    for result in &report.modes {
        print!("{:<24}", result.mode);
        let mut total = (0, 0, 0);
        for scenario in SCENARIOS {
            match result.scenarios.get(scenario.name) {
                Some(tally) => {
                    print!(
                        "{:>12}",
                        format!("{}/{}/{}", tally.runs, tally.wrong_exit, tally.wrong_status)
                    );
                    total.0 += tally.runs;
                    total.1 += tally.wrong_exit;
                    total.2 += tally.wrong_status;
                }
                None => print!("{:>12}", "-"),
            }
        }
        println!("{:>14}", format!("{}/{}/{}", total.0, total.1, total.2));
    }
    print!("{:<24}", "all modes");
    let mut total = (0, 0, 0);
    for scenario in SCENARIOS {
        let tallies: Vec<&Tally> = report
            .modes
            .iter()
            .filter_map(|result| result.scenarios.get(scenario.name))
            .collect();
        let runs: usize = tallies.iter().map(|tally| tally.runs).sum();
        let exit: usize = tallies.iter().map(|tally| tally.wrong_exit).sum();
        let status: usize = tallies.iter().map(|tally| tally.wrong_status).sum();
        print!("{:>12}", format!("{runs}/{exit}/{status}"));
        total = (total.0 + runs, total.1 + exit, total.2 + status);
    }
    println!("{:>14}", format!("{}/{}/{}", total.0, total.1, total.2));
    let accounting: Vec<String> = report
        .modes
        .iter()
        .flat_map(|result| {
            result
                .scenarios
                .iter()
                .filter(|(_, tally)| tally.wrong_accounting > 0)
                .map(move |(name, tally)| {
                    format!(
                        "{} {name}: {}/{}",
                        result.mode, tally.wrong_accounting, tally.runs
                    )
                })
        })
        .collect();
    if !accounting.is_empty() {
        println!(
            "wrong accounting (a light program's verdict with cpu > {LIGHT_CPU_MS} ms or max_rss > {LIGHT_RSS_KIB} KiB): {}",
            accounting.join(", ")
        );
    }
    for note in &report.not_run {
        println!("not run: {note}");
    }

    // The JSON keeps up to EXAMPLES per scenario and mode; the console two.
    let mut problems = Vec::new();
    for result in &report.modes {
        for (name, tally) in &result.scenarios {
            for example in tally.examples.iter().take(2) {
                problems.push(format!("{} {name}: {example}", result.mode));
            }
        }
        for failure in &result.worker_failures {
            problems.push(format!("{}: {failure}", result.mode));
        }
    }
    if !problems.is_empty() {
        println!("\nexamples of wrong runs (more in the JSON):");
        for problem in problems {
            println!("  {problem}");
        }
    }

    println!("\nlibrary workers' own descriptors and RSS (KiB) at VALUE@RUNS:");
    for result in report
        .modes
        .iter()
        .filter(|r| r.config.driver == Driver::Lib)
    {
        match result.workers.as_slice() {
            [worker] => {
                let series = |pick: fn(&worker::Sample) -> u64| {
                    worker
                        .samples
                        .iter()
                        .map(|sample| format!("{}@{}", pick(sample), sample.after_runs))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!(
                    "  {:<22} 1 worker, {} runs: fds {}; RSS {} (growth after warm-up {} KiB)",
                    result.mode,
                    worker.runs,
                    series(|s| s.fds as u64),
                    series(|s| s.rss_kib),
                    worker.rss_growth_kib
                );
            }
            workers => {
                let runs: Vec<usize> = workers.iter().map(|worker| worker.runs).collect();
                println!(
                    "  {:<22} {} workers, {}-{} runs each: fd growth max {}; RSS growth after warm-up max {} KiB, from start max {} KiB",
                    result.mode,
                    workers.len(),
                    runs.iter().min().unwrap_or(&0),
                    runs.iter().max().unwrap_or(&0),
                    workers.iter().map(|w| w.fd_growth).max().unwrap_or(0),
                    workers.iter().map(|w| w.rss_growth_kib).max().unwrap_or(0),
                    workers
                        .iter()
                        .map(|w| w.rss_growth_from_start_kib)
                        .max()
                        .unwrap_or(0)
                );
            }
        }
    }

    if !report.sigkill.is_empty() {
        println!(
            "\nSIGKILL of brig mid-run (`--memory 64M -- sleep 30`), then `brig run --memory 64M -- true`:"
        );
        for round in &report.sigkill {
            println!(
                "  {}: {} killed; stale cgroup dirs {} ({} still there after the kill); jail processes alive after 5 s: {}; next run exit {}; stale dirs left after it: {}{}",
                if round.waited_for_jails {
                    "next run after the jails died"
                } else {
                    "next run at once"
                },
                round.killed,
                round.stale_dirs,
                round.stale_present_after_kill,
                round.survivors.len(),
                round.next_run_exit,
                round.stale_after_next_run.len(),
                if round.stale_after_next_run.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (after one more run a second later: {})",
                        round.stale_after_second_run.len()
                    )
                }
            );
            for problem in &round.problems {
                println!("    problem: {problem}");
            }
        }
    }

    let left = &report.leftovers;
    println!(
        "\nleft behind ({ours} brig processes and workers started):\n  processes {} (alive {}, outlived their brig {}), cgroups {}, mounts {} (mountinfo {} -> {} lines), temp files {}\n  library workers: fd growth max {}, RSS growth after warm-up max {} KiB (noise bound {} KiB)",
        left.processes.len() + left.escaped.len(),
        left.processes.len(),
        left.escaped.len(),
        left.cgroups.len(),
        left.mounts.len(),
        left.mounts_before,
        left.mounts_after,
        left.temp_files.len(),
        report.fd_growth_max,
        report.rss_growth_max_kib,
        report.rss_noise_kib
    );
    for item in left
        .processes
        .iter()
        .chain(&left.escaped)
        .chain(&left.cgroups)
        .chain(&left.mounts)
        .chain(&left.temp_files)
    {
        println!("    {item}");
    }
    if !left.others.is_empty() {
        println!(
            "  not ours (other users of brig on this host): {}",
            left.others.len()
        );
    }
    println!();
    for (name, count) in &report.counts {
        println!("{name:<40} {count}");
    }
    println!(
        "\n{}",
        if report.clean {
            "clean: every count is 0"
        } else {
            "NOT CLEAN"
        }
    );
}
