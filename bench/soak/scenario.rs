//! What the soak runs: the scenarios (a program, brig's options, and the exit status and
//! verdict brig must give), and the modes they run in (the command or the library, root or
//! rootless, with or without a cgroup, one at a time or eight at a time).

use serde::{Deserialize, Serialize};

/// One kind of run and what brig must say about it.
pub struct Scenario {
    pub name: &'static str,
    /// brig's options as (long option, value): `--key value` on the command line and
    /// `key: value` in the library's YAML.
    pub options: &'static [(&'static str, &'static str)],
    pub program: &'static [&'static str],
    /// brig's exit status.
    pub exit: i32,
    /// The verdict's `status`.
    pub status: &'static str,
    /// How often it is drawn, relative to the others.
    pub weight: u32,
    /// Only where the jail has a cgroup (memory and pids limits are cgroup limits).
    pub needs_cgroup: bool,
    /// A trivial program: the verdict's CPU time and peak RSS must be small.
    pub light: bool,
}

/// The time-limit and CPU scenarios are kept short, and the CPU one rare: the default
/// soak (10,000 runs) should end in about ten minutes on two shared cores.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "ok",
        options: &[],
        program: &["true"],
        exit: 0,
        status: "ok",
        weight: 15,
        needs_cgroup: false,
        light: true,
    },
    Scenario {
        name: "nonzero",
        options: &[],
        program: &["sh", "-c", "exit 3"],
        exit: 3,
        status: "nonzero_exit",
        weight: 10,
        needs_cgroup: false,
        light: true,
    },
    Scenario {
        name: "timeout",
        options: &[("time-limit", "300ms")],
        program: &["sleep", "10"],
        exit: 124,
        status: "timeout",
        weight: 6,
        needs_cgroup: false,
        light: false,
    },
    Scenario {
        // dd's 64 MiB buffer is filled from /dev/zero: every page is touched.
        name: "oom",
        options: &[("memory", "32M")],
        program: &["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"],
        exit: 137,
        status: "oom",
        weight: 8,
        needs_cgroup: true,
        light: false,
    },
    Scenario {
        // Forty sleeping children against a limit of 16: a fork fails, dash exits 2
        // ("Cannot fork"), and the sleepers are left for brig to kill.
        name: "pids",
        options: &[("pids", "16")],
        program: &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 40 ]; do sleep 1000 & i=$((i+1)); done; exit 0",
        ],
        exit: 2,
        status: "nonzero_exit",
        weight: 8,
        needs_cgroup: true,
        light: false,
    },
    Scenario {
        // 4 MiB against a limit of 64 KiB (finite, so that a missed limit shows as `ok`).
        name: "output",
        options: &[("output-limit", "64K")],
        program: &["dd", "if=/dev/zero", "bs=64K", "count=64"],
        exit: 124,
        status: "output_limit",
        weight: 10,
        needs_cgroup: false,
        light: false,
    },
    Scenario {
        name: "cpu",
        options: &[("cpu-time", "1s")],
        program: &["sh", "-c", "while :; do :; done"],
        exit: 152,
        status: "cpu_time",
        weight: 1,
        needs_cgroup: false,
        light: false,
    },
    Scenario {
        // A daemon in a session of its own, left running when the program exits.
        name: "daemon",
        options: &[],
        program: &["sh", "-c", "setsid sh -c 'sleep 1000' & exit 0"],
        exit: 0,
        status: "ok",
        weight: 10,
        needs_cgroup: false,
        light: true,
    },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    /// `brig run`, one process per jail: the real user path.
    Cli,
    /// `Jail::assemble` + `run` in a loop in long-lived single-threaded workers, so that
    /// brig's own descriptors and memory can be watched for growth.
    Lib,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Mode {
    pub driver: Driver,
    pub rootless: bool,
    /// With the default cgroup (as root); without: `--memory max --pids max`.
    pub cgroup: bool,
    /// Jails at a time (the library: this many worker processes).
    pub concurrency: usize,
}

impl Mode {
    pub fn label(&self) -> String {
        format!(
            "{} {} {} x{}",
            match self.driver {
                Driver::Cli => "cli",
                Driver::Lib => "lib",
            },
            if self.rootless { "rootless" } else { "root" },
            if self.cgroup { "cgroup" } else { "no-cg" },
            self.concurrency
        )
    }

    /// Every mode this host offers: rootless brig has no cgroup here (hybrid hierarchy,
    /// no delegated cgroup v2), so it runs only without one.
    pub fn all(concurrency: usize) -> Vec<Mode> {
        let mut modes = Vec::new();
        for driver in [Driver::Cli, Driver::Lib] {
            for (rootless, cgroup) in [(false, true), (false, false), (true, false)] {
                for workers in [1, concurrency] {
                    modes.push(Mode {
                        driver,
                        rootless,
                        cgroup,
                        concurrency: workers,
                    });
                }
            }
        }
        modes
    }

    pub fn applies(&self, scenario: &Scenario) -> bool {
        self.cgroup || !scenario.needs_cgroup
    }

    /// brig's options for `scenario` in this mode, as (key, value) pairs.
    fn options(&self, scenario: &Scenario) -> Vec<(&'static str, &'static str)> {
        let mut options = Vec::new();
        if !self.cgroup {
            options.extend([("memory", "max"), ("pids", "max")]);
        }
        options.extend_from_slice(scenario.options);
        options
    }

    /// `brig run` arguments after `run`, ending with the program.
    pub fn cli_args(&self, scenario: &Scenario, tag: &str, report: &str) -> Vec<String> {
        let mut args = vec!["--report".to_string(), report.to_string()];
        for (key, value) in self.options(scenario) {
            args.push(format!("--{key}"));
            args.push(value.to_string());
        }
        args.push("--env".into());
        args.push(format!("SOAK_TAG={tag}"));
        args.push("--".into());
        args.extend(scenario.program.iter().map(|word| word.to_string()));
        args
    }

    /// The same run as a brig config (YAML) for the library.
    pub fn yaml(&self, scenario: &Scenario, tag: &str) -> String {
        let mut yaml = String::new();
        for (key, value) in self.options(scenario) {
            yaml.push_str(&format!("{key}: {value}\n"));
        }
        let quote = |text: &str| serde_json::to_string(text).expect("a string serializes");
        yaml.push_str(&format!("env: [{}]\n", quote(&format!("SOAK_TAG={tag}"))));
        let words: Vec<String> = scenario.program.iter().map(|word| quote(word)).collect();
        yaml.push_str(&format!("command: [{}]\n", words.join(", ")));
        yaml
    }

    /// `runs` scenario indices: each applicable scenario once, then weighted draws from a
    /// generator seeded per mode, so that a run can be repeated.
    pub fn schedule(&self, runs: usize, seed: u64) -> Vec<usize> {
        let applicable: Vec<usize> = (0..SCENARIOS.len())
            .filter(|&index| self.applies(&SCENARIOS[index]))
            .collect();
        let total: u32 = applicable
            .iter()
            .map(|&index| SCENARIOS[index].weight)
            .sum();
        let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            // xorshift64*
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        let mut schedule: Vec<usize> = applicable.iter().copied().take(runs).collect();
        while schedule.len() < runs {
            let mut pick = (next() % u64::from(total)) as u32;
            for &index in &applicable {
                if pick < SCENARIOS[index].weight {
                    schedule.push(index);
                    break;
                }
                pick -= SCENARIOS[index].weight;
            }
        }
        schedule
    }
}

/// What one run ended as, from either driver.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// brig's exit status; for the command, 128+N when brig itself was killed by signal N.
    pub exit: i32,
    /// The verdict's status, or `none` when there was no verdict to read.
    pub status: String,
    /// CPU time and peak RSS the verdict reports.
    pub cpu_ms: u64,
    pub max_rss_kib: u64,
    /// brig's stderr or error, for a run that went wrong.
    pub message: String,
    /// The soak's watchdog killed it.
    pub hung: bool,
}

/// A light scenario (`true`, `exit 3`, a daemon) whose verdict claims more CPU or memory
/// than this is misreported.
pub const LIGHT_CPU_MS: u64 = 500;
pub const LIGHT_RSS_KIB: u64 = 32 * 1024;

/// Examples kept per scenario and mode of a run that went wrong.
pub const EXAMPLES: usize = 5;

/// Wrong answers of one scenario in one mode.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Tally {
    pub runs: usize,
    pub wrong_exit: usize,
    pub wrong_status: usize,
    /// Killed by the soak's watchdog (also counted as wrong exit and status).
    pub hung: usize,
    /// A light program's verdict with implausible CPU time or peak RSS.
    pub wrong_accounting: usize,
    pub max_cpu_ms: u64,
    pub max_rss_kib: u64,
    pub examples: Vec<String>,
}

impl Tally {
    pub fn add(&mut self, expected: &Scenario, outcome: &Outcome) {
        self.runs += 1;
        let wrong_exit = outcome.exit != expected.exit;
        let wrong_status = outcome.status != expected.status;
        self.wrong_exit += usize::from(wrong_exit);
        self.wrong_status += usize::from(wrong_status);
        self.hung += usize::from(outcome.hung);
        self.max_cpu_ms = self.max_cpu_ms.max(outcome.cpu_ms);
        self.max_rss_kib = self.max_rss_kib.max(outcome.max_rss_kib);
        let wrong_accounting = expected.light
            && (outcome.cpu_ms > LIGHT_CPU_MS || outcome.max_rss_kib > LIGHT_RSS_KIB);
        self.wrong_accounting += usize::from(wrong_accounting);
        if (wrong_exit || wrong_status || wrong_accounting) && self.examples.len() < EXAMPLES {
            self.examples.push(format!(
                "exit {} status {}{}{}{}",
                outcome.exit,
                outcome.status,
                if outcome.hung { " (hung)" } else { "" },
                if wrong_accounting {
                    format!(
                        " cpu {} ms, max_rss {} KiB",
                        outcome.cpu_ms, outcome.max_rss_kib
                    )
                } else {
                    String::new()
                },
                if outcome.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", outcome.message)
                }
            ));
        }
    }

    /// Adds another tally of the same scenario (a library worker's).
    pub fn merge(&mut self, other: &Tally) {
        self.runs += other.runs;
        self.wrong_exit += other.wrong_exit;
        self.wrong_status += other.wrong_status;
        self.hung += other.hung;
        self.wrong_accounting += other.wrong_accounting;
        self.max_cpu_ms = self.max_cpu_ms.max(other.max_cpu_ms);
        self.max_rss_kib = self.max_rss_kib.max(other.max_rss_kib);
        let room = EXAMPLES.saturating_sub(self.examples.len());
        self.examples
            .extend(other.examples.iter().take(room).cloned());
    }
}
