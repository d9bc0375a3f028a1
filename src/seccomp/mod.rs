//! seccomp: a system-call allowlist. A profile is a seccompiler JSON file; the built-in ones
//! (`seccomp-profiles/ARCH/`) are compiled into brig. The parent chooses and compiles the
//! profile while it resolves the plan; the program's process installs it as the very last
//! step before execve, so profiles never need to allow brig's own setup calls. What runs
//! under the filter before the program is the exec loop: execve, and on failure a `write`
//! to brig's pipe and `exit_group`.
//!
//! A profile file may hold several named filters; brig installs all of them, in name order.
//! The kernel runs every filter on every call and applies the strictest answer, so a filter
//! that only answers `clone3` with ENOSYS can sit beside the allowlist.
//!
//! Every program is laid out again compactly (`dispatch`): a binary search over ranges of
//! numbers in place of seccompiler's linear chain. build.rs compiles the built-in profiles
//! with it, so that enforcing one costs no JSON work; files and log mode are compiled at run
//! time, the same way.

mod audit;

mod precompiled {
    include!(concat!(env!("OUT_DIR"), "/seccomp_profiles.rs"));
}

use crate::error::{Error, Result};
pub use audit::{AuditLog, Logged, report_log};
use brig_seccomp::syscalls;
use brig_seccomp::{compile, one_line};
use seccompiler::{TargetArch, sock_filter};
use serde::Serialize;
use std::borrow::Cow;

#[cfg(target_arch = "x86_64")]
macro_rules! profile_dir {
    () => {
        "../../seccomp-profiles/x86_64/"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! profile_dir {
    () => {
        "../../seccomp-profiles/aarch64/"
    };
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

pub struct Profile {
    pub name: &'static str,
    pub about: &'static str,
    pub json: &'static str,
}

/// The shipped profiles, for this architecture.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "default",
        about: "what python, node and sh need: files, processes, threads, pipes, unix and \
                IP sockets; no namespaces, mounts, tracing, kernel keyrings, BPF, perf, \
                io_uring, modules or clock setting. Other calls fail with EPERM",
        json: include_str!(concat!(profile_dir!(), "default.json")),
    },
    Profile {
        name: "strict",
        about: "compute-only programs (compiled C, C++, Rust): read-only file access, \
                memory, threads, clocks, stdin and stdout. Any other call kills the program",
        json: include_str!(concat!(profile_dir!(), "strict.json")),
    },
];

pub const DEFAULT_PROFILE: &str = "default";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Calls outside the profile get the profile's answer (EPERM, or death).
    Enforce,
    /// `--seccomp-log`: calls outside the profile are allowed and logged by the kernel.
    Log,
    /// `--seccomp none`: no filter.
    Off,
}

/// The filter as the plan carries it: `profile` and `mode` are printed by `brig check`,
/// the compiled programs travel to the child in memory.
#[derive(Debug, Serialize)]
pub struct SeccompPlan {
    /// A built-in profile's name, a file's path, or `none`.
    pub profile: String,
    pub mode: Mode,
    /// Compiled BPF, in install order: a built-in profile's precompiled programs, or
    /// programs compiled at run time.
    #[serde(skip)]
    pub filters: Vec<Cow<'static, [sock_filter]>>,
}

/// `--seccomp NAME|FILE|none` and `--seccomp-log`, resolved and compiled.
pub fn resolve(choice: Option<&str>, log: bool) -> Result<SeccompPlan> {
    let choice = choice.unwrap_or(DEFAULT_PROFILE);
    let field = format!("--seccomp {choice}");
    if choice == "none" {
        if log {
            return Err(Error::input(
                "--seccomp-log: there is no profile to log with --seccomp none; drop one of the two",
            ));
        }
        return Ok(SeccompPlan {
            profile: "none".into(),
            mode: Mode::Off,
            filters: Vec::new(),
        });
    }
    let mode = if log { Mode::Log } else { Mode::Enforce };
    let (text, is_file) = match builtin(choice) {
        // Enforcing a built-in profile: build.rs compiled it.
        Some(profile) if !log => {
            return Ok(SeccompPlan {
                profile: choice.into(),
                mode,
                filters: precompiled(profile.name).map(Cow::Borrowed).collect(),
            });
        }
        Some(profile) => (profile.json.to_string(), false),
        None if choice.contains('/') || choice.ends_with(".json") => {
            let text = std::fs::read_to_string(choice).map_err(|err| {
                Error::input(format!(
                    "{field}: cannot read it: {err}; give the path of a readable seccompiler JSON profile"
                ))
            })?;
            (text, true)
        }
        None => {
            return Err(Error::input(format!(
                "{field}: unknown profile; choose {}, none, or give a path to a seccompiler JSON file (`brig seccomp list`)",
                names().join(", ")
            )));
        }
    };
    let filters = if log {
        // A file may not compile: say so of the file rather than of its log-mode copy.
        // (Built-in profiles compile: build.rs saw to it.)
        if is_file {
            validate(&text, &field)?;
        }
        let logged = to_log_mode(&text)
            .map_err(|why| Error::input(format!("--seccomp-log with {field}: {why}")))?;
        compile(&logged, ARCH)
            .map_err(|why| Error::input(format!("--seccomp-log with {field}: {why}")))?
    } else {
        validate(&text, &field)?
    };
    Ok(SeccompPlan {
        profile: choice.into(),
        mode,
        filters: filters.into_iter().map(Cow::Owned).collect(),
    })
}

/// Compiles a profile given by the user; the error says it is not a valid profile.
fn validate(text: &str, field: &str) -> Result<Vec<Vec<sock_filter>>> {
    compile(text, ARCH).map_err(|why| {
        Error::input(format!(
            "{field}: not a valid seccompiler profile: {why}; see `brig seccomp show default` for the format"
        ))
    })
}

/// The programs build.rs compiled for the built-in profile `name`, in install order.
fn precompiled(name: &str) -> impl Iterator<Item = &'static [sock_filter]> {
    precompiled::PRECOMPILED
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, filters)| *filters)
        .unwrap_or_else(|| panic!("build.rs precompiled no profile {name}"))
        .iter()
        .copied()
}

pub fn builtin(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|profile| profile.name == name)
}

pub fn names() -> Vec<&'static str> {
    PROFILES.iter().map(|profile| profile.name).collect()
}

/// Log mode: every answer that denies a call (an errno, a kill, a trap) becomes `log`,
/// which lets the call through and has the kernel log it. ENOSYS stays: it is how a
/// profile makes libc fall back to an older call it can inspect (clone3 → clone), not a
/// denial the program notices.
fn to_log_mode(text: &str) -> std::result::Result<String, String> {
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|err| one_line(&err.to_string()))?;
    let filters = value
        .as_object_mut()
        .ok_or("the profile is not a JSON object of filters")?;
    for filter in filters.values_mut() {
        let Some(filter) = filter.as_object_mut() else {
            continue;
        };
        for key in [
            "mismatch_action",
            "default_action",
            "match_action",
            "filter_action",
        ] {
            if let Some(action) = filter.get_mut(key)
                && denies(action)
            {
                *action = serde_json::Value::String("log".into());
            }
        }
    }
    Ok(value.to_string())
}

fn denies(action: &serde_json::Value) -> bool {
    match action {
        serde_json::Value::String(name) => {
            matches!(name.as_str(), "kill_process" | "kill_thread" | "trap")
        }
        serde_json::Value::Object(map) => match map.get("errno") {
            Some(errno) => errno.as_u64() != Some(libc::ENOSYS as u64),
            None => map.contains_key("trace"),
        },
        _ => false,
    }
}

/// Installs the plan's filters on the calling thread. The last step before execve.
pub fn install(plan: &SeccompPlan) -> Result<()> {
    for filter in &plan.filters {
        seccompiler::apply_filter(filter).map_err(|err| {
            Error::setup(format!(
                "install the seccomp profile {}: {}",
                plan.profile,
                one_line(&err.to_string())
            ))
        })?;
    }
    Ok(())
}

/// The name of system call `number` on this architecture, if brig knows it.
pub fn syscall_name(number: u32) -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    let table = syscalls::X86_64;
    #[cfg(not(target_arch = "x86_64"))]
    let table: &[(u32, &str)] = &[];
    table
        .binary_search_by_key(&number, |(nr, _)| *nr)
        .ok()
        .map(|index| table[index].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aarch64_text(name: &str) -> &'static str {
        match name {
            "default" => include_str!("../../seccomp-profiles/aarch64/default.json"),
            "strict" => include_str!("../../seccomp-profiles/aarch64/strict.json"),
            _ => unreachable!(),
        }
    }

    #[test]
    fn shipped_profiles_compile_for_x86_64_and_aarch64() {
        for profile in PROFILES {
            let x86 = include_str_x86_64(profile.name);
            assert!(compile(x86, TargetArch::x86_64).is_ok(), "{}", profile.name);
            let arm = aarch64_text(profile.name);
            if let Err(why) = compile(arm, TargetArch::aarch64) {
                panic!("aarch64 {}: {why}", profile.name);
            }
            assert!(compile(&to_log_mode(x86).unwrap(), TargetArch::x86_64).is_ok());
        }
    }

    fn include_str_x86_64(name: &str) -> &'static str {
        match name {
            "default" => include_str!("../../seccomp-profiles/x86_64/default.json"),
            "strict" => include_str!("../../seccomp-profiles/x86_64/strict.json"),
            _ => unreachable!(),
        }
    }

    /// Whether aarch64 has a system call of this name (seccompiler knows it there).
    fn on_aarch64(name: &str) -> bool {
        let probe = format!(
            r#"{{"f":{{"mismatch_action":"allow","match_action":{{"errno":1}},"filter":[{{"syscall":"{name}"}}]}}}}"#
        );
        seccompiler::compile_from_json(probe.as_bytes(), TargetArch::aarch64).is_ok()
    }

    /// The aarch64 profiles are the x86_64 ones without the calls aarch64 does not have
    /// (open, stat, fork, pipe, ...: it only has the *at and newer forms). The files hold
    /// one rule per line; regenerate with `BRIG_UPDATE_PROFILES=1 cargo test aarch64_profiles`.
    #[test]
    fn aarch64_profiles_follow_x86_64() {
        for profile in PROFILES {
            let x86 = include_str_x86_64(profile.name);
            let mut lines: Vec<String> = Vec::new();
            for line in x86.lines() {
                let rule: Option<serde_json::Value> =
                    serde_json::from_str(line.trim().trim_end_matches(',')).ok();
                let syscall = rule.as_ref().and_then(|rule| rule.get("syscall"));
                if let Some(name) = syscall.and_then(|name| name.as_str()) {
                    if !on_aarch64(name) {
                        continue;
                    }
                    lines.push(format!("{},", line.trim_end_matches(',')));
                } else {
                    // The line closing a rule list: the rule before it takes no comma.
                    if line.trim() == "]"
                        && let Some(last) = lines.last_mut()
                    {
                        last.pop();
                    }
                    lines.push(line.to_string());
                }
            }
            let expected = lines.join("\n") + "\n";
            let path = format!(
                "{}/seccomp-profiles/aarch64/{}.json",
                env!("CARGO_MANIFEST_DIR"),
                profile.name
            );
            if std::env::var_os("BRIG_UPDATE_PROFILES").is_some() {
                std::fs::write(&path, &expected).unwrap();
            }
            let actual = std::fs::read_to_string(&path).unwrap();
            assert!(
                actual == expected,
                "{path} is stale: run `BRIG_UPDATE_PROFILES=1 cargo test aarch64_profiles`"
            );
        }
    }

    /// build.rs compiled the built-in profiles as brig would at run time.
    #[test]
    fn precompiled_profiles_are_the_compiled_ones() {
        let mut names: Vec<&str> = precompiled::PRECOMPILED
            .iter()
            .map(|(name, _)| *name)
            .collect();
        names.sort();
        let mut builtins = super::names();
        builtins.sort();
        assert_eq!(names, builtins);
        for profile in PROFILES {
            let compiled = compile(profile.json, ARCH).unwrap();
            let built: Vec<&[sock_filter]> = precompiled(profile.name).collect();
            assert_eq!(built.len(), compiled.len(), "{}", profile.name);
            for (built, compiled) in built.iter().zip(&compiled) {
                assert_eq!(*built, &compiled[..], "{}", profile.name);
            }
            let plan = resolve(Some(profile.name), false).unwrap();
            assert!(matches!(plan.filters[0], Cow::Borrowed(_)));
            // The allowlist (installed last) is laid out compactly.
            let map = seccompiler::compile_from_json(profile.json.as_bytes(), ARCH).unwrap();
            let original = map["allowlist"].len();
            assert!(
                plan.filters.last().unwrap().len() * 3 < original,
                "{}",
                profile.name
            );
        }
    }

    #[test]
    fn names_match_seccompiler() {
        for (number, name) in syscalls::X86_64 {
            let probe = format!(
                r#"{{"f":{{"mismatch_action":"allow","match_action":{{"errno":1}},"filter":[{{"syscall":"{name}"}}]}}}}"#
            );
            let map = seccompiler::compile_from_json(probe.as_bytes(), TargetArch::x86_64)
                .unwrap_or_else(|err| panic!("{name}: {err}"));
            let program = &map["f"];
            assert!(
                program
                    .iter()
                    .any(|insn| insn.k == *number && insn.code == 0x15),
                "{name} is not {number}"
            );
        }
        assert!(
            syscalls::X86_64
                .windows(2)
                .all(|pair| pair[0].0 < pair[1].0)
        );
        assert_eq!(syscall_name(0), Some("read"));
    }

    #[test]
    fn log_mode_keeps_enosys_and_allows_the_rest() {
        let text = to_log_mode(include_str_x86_64("default")).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["allowlist"]["mismatch_action"], "log");
        assert_eq!(value["enosys"]["match_action"]["errno"], 38);
        let text = to_log_mode(include_str_x86_64("strict")).unwrap();
        assert!(text.contains(r#""mismatch_action":"log""#));
    }

    #[test]
    fn bad_choices_name_the_field_and_fix() {
        let err = resolve(Some("nope"), false).unwrap_err();
        assert!(err.message().starts_with("--seccomp nope: unknown profile"));
        let dir = std::env::temp_dir().join(format!("brig-seccomp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"f\": {\"mismatch_action\": \"allow\"").unwrap();
        let err = resolve(Some(bad.to_str().unwrap()), false).unwrap_err();
        assert!(
            err.message().contains("not a valid seccompiler profile"),
            "{}",
            err.message()
        );
        assert!(!err.message().contains('\n'));
        std::fs::write(&bad, r#"{"f": {"mismatch_action": {"errno": 1}, "match_action": "allow", "filter": [{"syscall": "no_such_call"}]}}"#).unwrap();
        let err = resolve(Some(bad.to_str().unwrap()), false).unwrap_err();
        assert!(err.message().contains("no_such_call"), "{}", err.message());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(resolve(Some("none"), true).is_err());
        assert_eq!(resolve(Some("none"), false).unwrap().mode, Mode::Off);
        assert_eq!(resolve(None, true).unwrap().mode, Mode::Log);
    }
}
