//! The in-process driver: one long-lived, single-threaded worker process that resolves a
//! plan, assembles a jail and runs it, again and again, through brig's library. Its own
//! open descriptors and resident memory are sampled at the start, after a warm-up, every
//! `checkpoint` runs and at the end: brig's own leaks show there and nowhere else.
//!
//! `brig-soak worker --cgroup 0|1 --tag TAG --schedule 0,3,1,... --checkpoint N --out FILE`

use crate::scenario::{Mode, Outcome, SCENARIOS, Tally};
use brig::jail::{Jail, Program};
use brig::{Plan, Verdict, config};
use serde::{Deserialize, Serialize};

/// Runs before the warm sample: the first jails of each kind allocate what later ones
/// reuse (buffers, the allocator's arenas).
pub const WARMUP: usize = 25;

/// The worker's own descriptors and memory at one point.
#[derive(Clone, Copy, Debug, Deserialize, Serialize)]
pub struct Sample {
    pub after_runs: usize,
    pub fds: usize,
    pub rss_kib: u64,
}

impl Sample {
    fn take(after_runs: usize) -> Sample {
        let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count());
        let rss_kib = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status.lines().find_map(|line| {
                    line.strip_prefix("VmRSS:")?
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse()
                        .ok()
                })
            })
            .unwrap_or(0);
        Sample {
            after_runs,
            fds,
            rss_kib,
        }
    }
}

/// What a worker hands back (as JSON in its `--out` file). Outcomes are tallied as they
/// come, in a fixed number of counters, so that the worker's own memory stays flat.
#[derive(Debug, Deserialize, Serialize)]
pub struct Report {
    pub pid: u32,
    pub runs: usize,
    /// One per scenario, in the order of SCENARIOS.
    pub tallies: Vec<Tally>,
    pub samples: Vec<Sample>,
}

impl Report {
    fn sample(&self, after_runs: usize) -> Option<&Sample> {
        self.samples
            .iter()
            .find(|sample| sample.after_runs == after_runs)
    }

    /// (start, warm, end) samples.
    pub fn growth_points(&self) -> Option<(Sample, Sample, Sample)> {
        let start = *self.sample(0)?;
        let end = *self.samples.last()?;
        let warm = *self.sample(WARMUP.min(end.after_runs)).unwrap_or(&start);
        Some((start, warm, end))
    }
}

fn one_run(mode: &Mode, scenario: usize, tag: &str) -> Outcome {
    let scenario = &SCENARIOS[scenario];
    let yaml = mode.yaml(scenario, tag);
    let failed = |message: String| Outcome {
        exit: 125,
        status: "setup_error".into(),
        cpu_ms: 0,
        max_rss_kib: 0,
        message,
        hung: false,
    };
    let plan = match config::parse(&yaml, "soak").and_then(Plan::resolve) {
        Ok(plan) => plan,
        Err(err) => return failed(format!("plan: {err}")),
    };
    let report = match Jail::assemble(&plan).and_then(|jail| jail.run(&Program::of(&plan))) {
        Ok(report) => report,
        Err(err) => return failed(err.to_string()),
    };
    let verdict = Verdict::of_run(&plan, &report);
    let status = serde_json::to_value(verdict.status)
        .ok()
        .and_then(|value| value.as_str().map(String::from))
        .unwrap_or_else(|| "none".into());
    Outcome {
        exit: report.outcome.exit_status().code(),
        status,
        cpu_ms: verdict.cpu_user_ms + verdict.cpu_sys_ms,
        max_rss_kib: verdict.max_rss_kib,
        message: verdict.error.unwrap_or_default(),
        hung: false,
    }
}

pub fn main(args: &[String]) -> ! {
    brig::prepare_process();
    let mut cgroup = false;
    let mut tag = String::new();
    let mut schedule = Vec::new();
    let mut checkpoint = 1000;
    let mut out = String::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let value = args.next().cloned().unwrap_or_default();
        match arg.as_str() {
            "--cgroup" => cgroup = value == "1",
            "--tag" => tag = value,
            "--schedule" => {
                schedule = value
                    .split(',')
                    .filter_map(|index| index.parse::<usize>().ok())
                    .collect()
            }
            "--checkpoint" => checkpoint = value.parse().unwrap_or(1000),
            "--out" => out = value,
            other => panic!("brig-soak worker: unknown option {other}"),
        }
    }
    let mode = Mode {
        driver: crate::scenario::Driver::Lib,
        rootless: !nix::unistd::geteuid().is_root(),
        cgroup,
        concurrency: 1,
    };
    let mut report = Report {
        pid: std::process::id(),
        runs: 0,
        tallies: vec![Tally::default(); SCENARIOS.len()],
        samples: Vec::new(),
    };
    for tally in &mut report.tallies {
        tally.examples.reserve_exact(crate::scenario::EXAMPLES);
    }
    report
        .samples
        .reserve_exact(schedule.len() / checkpoint.max(1) + 3);
    report.samples.push(Sample::take(0));
    for (done, &scenario) in schedule.iter().enumerate() {
        let outcome = one_run(&mode, scenario, &tag);
        report.tallies[scenario].add(&SCENARIOS[scenario], &outcome);
        let runs = done + 1;
        report.runs = runs;
        if runs == WARMUP || runs % checkpoint.max(1) == 0 || runs == schedule.len() {
            report.samples.push(Sample::take(runs));
        }
    }
    let json = serde_json::to_string(&report).expect("the report serializes");
    std::fs::write(&out, json).unwrap_or_else(|err| panic!("write {out}: {err}"));
    std::process::exit(0);
}
