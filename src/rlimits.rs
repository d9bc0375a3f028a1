//! Resource limits (setrlimit) for the program. Memory is not limited here: RLIMIT_AS
//! breaks V8, the JVM and WASM runtimes, so `--memory` is a cgroup limit instead.

use crate::error::{Error, Result};
use crate::units::{Size, Span};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One limit; `None` is unlimited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rlimit {
    #[serde(deserialize_with = "known_name")]
    pub name: crate::verdict::known::Name,
    #[serde(serialize_with = "limit_value", deserialize_with = "limit_of")]
    pub soft: Option<u64>,
    #[serde(serialize_with = "limit_value", deserialize_with = "limit_of")]
    pub hard: Option<u64>,
}

/// A limit's name as brig writes it (one of [`KNOWN`]).
fn known_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<&'static str, D::Error> {
    let names: Vec<&'static str> = KNOWN.iter().map(|(name, _, _)| *name).collect();
    crate::verdict::known::one_of(deserializer, &names, "rlimit")
}

/// A number, or `unlimited` (None), as [`limit_value`] writes it.
fn limit_of<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Number(u64),
        Text(String),
    }
    match Written::deserialize(deserializer)? {
        Written::Number(number) => Ok(Some(number)),
        Written::Text(text) if text == "unlimited" => Ok(None),
        Written::Text(text) => Err(serde::de::Error::custom(format!(
            "rlimit value {text:?}: give a number or \"unlimited\""
        ))),
    }
}

fn limit_value<S: Serializer>(value: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(number) => serializer.serialize_u64(*number),
        None => serializer.serialize_str("unlimited"),
    }
}

/// (name, resource, counted in bytes)
const KNOWN: &[(&str, Resource, bool)] = &[
    ("as", Resource::RLIMIT_AS, true),
    ("core", Resource::RLIMIT_CORE, true),
    ("cpu", Resource::RLIMIT_CPU, false),
    ("data", Resource::RLIMIT_DATA, true),
    ("fsize", Resource::RLIMIT_FSIZE, true),
    ("locks", Resource::RLIMIT_LOCKS, false),
    ("memlock", Resource::RLIMIT_MEMLOCK, true),
    ("msgqueue", Resource::RLIMIT_MSGQUEUE, true),
    ("nice", Resource::RLIMIT_NICE, false),
    ("nofile", Resource::RLIMIT_NOFILE, false),
    ("nproc", Resource::RLIMIT_NPROC, false),
    ("rss", Resource::RLIMIT_RSS, true),
    ("rtprio", Resource::RLIMIT_RTPRIO, false),
    ("rttime", Resource::RLIMIT_RTTIME, false),
    ("sigpending", Resource::RLIMIT_SIGPENDING, false),
    ("stack", Resource::RLIMIT_STACK, true),
];

/// The defaults: no core dumps, 1024 open files, files up to 1 GiB, 1024 pending signals
/// (queued signals and POSIX timers) and 800 KiB of POSIX message queues (Linux's own
/// default), each no higher than brig's own hard limit. The kernel counts the last two
/// per user: within the jail they bound all of its processes together.
const DEFAULTS: &[(&str, u64)] = &[
    ("core", 0),
    ("nofile", 1024),
    ("fsize", 1 << 30),
    ("sigpending", 1024),
    ("msgqueue", 800 << 10),
];

/// Limits the kernel counts per user, whose defaults are lowered to brig's own hard limit
/// (which the program could not exceed anyway) rather than refused.
const CAPPED_DEFAULTS: &[&str] = &["sigpending", "msgqueue"];

/// The program's limits: the defaults, then `--rlimit` (by name, later wins), then
/// `--cpu-time` as RLIMIT_CPU (SIGXCPU at the limit, SIGKILL a second later).
pub fn resolve(specs: &[String], cpu_time: Option<Span>) -> Result<Vec<Rlimit>> {
    let mut limits: Vec<Rlimit> = DEFAULTS
        .iter()
        .map(|&(name, value)| {
            let value = match KNOWN.iter().find(|(known, _, _)| *known == name) {
                Some((_, resource, _)) if CAPPED_DEFAULTS.contains(&name) => getrlimit(*resource)
                    .map_or(value, |(_, hard)| {
                        if hard == nix::sys::resource::RLIM_INFINITY {
                            value
                        } else {
                            value.min(hard)
                        }
                    }),
                _ => value,
            };
            Rlimit {
                name,
                soft: Some(value),
                hard: Some(value),
            }
        })
        .collect();
    let mut set = |limit: Rlimit| match limits.iter_mut().find(|known| known.name == limit.name) {
        Some(slot) => *slot = limit,
        None => limits.push(limit),
    };
    for spec in specs {
        set(parse(spec)?);
    }
    if let Some(cpu_time) = cpu_time {
        let seconds = cpu_time.0.as_secs() + u64::from(cpu_time.0.subsec_nanos() > 0);
        set(Rlimit {
            name: "cpu",
            soft: Some(seconds.max(1)),
            hard: Some(seconds.max(1) + 1),
        });
    }
    Ok(limits)
}

/// `NAME=VALUE` or `NAME=SOFT:HARD`; values are numbers, sizes for byte limits, or
/// `unlimited`.
fn parse(spec: &str) -> Result<Rlimit> {
    let field = format!("--rlimit {spec}");
    let (name, values) = spec.split_once('=').ok_or_else(|| {
        Error::input(format!(
            "{field}: expected NAME=VALUE or NAME=SOFT:HARD, e.g. nofile=4096"
        ))
    })?;
    let &(name, _, in_bytes) = KNOWN
        .iter()
        .find(|(known, _, _)| *known == name)
        .ok_or_else(|| {
            let names: Vec<&str> = KNOWN.iter().map(|(known, _, _)| *known).collect();
            Error::input(format!(
                "{field}: unknown limit '{name}'; use one of {}",
                names.join(", ")
            ))
        })?;
    let value = |text: &str| -> Result<Option<u64>> {
        if matches!(text, "unlimited" | "infinity") {
            return Ok(None);
        }
        let parsed = if in_bytes {
            text.parse::<Size>().map(|size| size.0)
        } else {
            text.parse::<u64>()
                .map_err(|_| format!("'{text}' is not a number"))
        };
        parsed
            .map(Some)
            .map_err(|why| Error::input(format!("{field}: {why}; or use 'unlimited'")))
    };
    let (soft, hard) = match values.split_once(':') {
        Some((soft, hard)) => (value(soft)?, value(hard)?),
        None => {
            let both = value(values)?;
            (both, both)
        }
    };
    let soft_above_hard = match (soft, hard) {
        (Some(soft), Some(hard)) => soft > hard,
        (None, Some(_)) => true,
        _ => false,
    };
    if soft_above_hard {
        return Err(Error::input(format!(
            "{field}: the soft limit is above the hard limit; swap them"
        )));
    }
    Ok(Rlimit { name, soft, hard })
}

/// Applies the limits in the program's process. An unprivileged process may only lower
/// a hard limit, never raise it.
pub fn apply(limits: &[Rlimit]) -> Result<()> {
    for limit in limits {
        let resource = KNOWN
            .iter()
            .find(|(name, _, _)| *name == limit.name)
            .map(|(_, resource, _)| *resource)
            .expect("limits are resolved from KNOWN");
        let infinity = nix::sys::resource::RLIM_INFINITY;
        let soft = limit.soft.unwrap_or(infinity);
        let hard = limit.hard.unwrap_or(infinity);
        setrlimit(resource, soft, hard).map_err(|errno| {
            let current = getrlimit(resource)
                .map(|(_, hard)| hard)
                .unwrap_or(infinity);
            Error::os(format!("--rlimit {}={soft}:{hard}", limit.name), errno).hint(format!(
                "brig can lower limits but not raise them; the hard limit here is {}",
                if current == infinity {
                    "unlimited".to_string()
                } else {
                    current.to_string()
                }
            ))
        })?;
    }
    Ok(())
}

/// The hard limit `name` has in this process (None: unlimited, or a name brig does not
/// know): what a jail gets when no `--rlimit` sets it.
pub fn current_hard(name: &str) -> Option<u64> {
    let (_, resource, _) = KNOWN.iter().find(|(known, _, _)| *known == name)?;
    let (_, hard) = getrlimit(*resource).ok()?;
    (hard != nix::sys::resource::RLIM_INFINITY).then_some(hard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_loud_and_sane() {
        let limits = resolve(&[], None).unwrap();
        let get = |name: &str| limits.iter().find(|l| l.name == name).unwrap().clone();
        assert_eq!(get("core").hard, Some(0));
        assert_eq!(get("nofile").soft, Some(1024));
        assert!(limits.iter().all(|l| l.name != "as"));
    }

    #[test]
    fn specs_parse_and_override() {
        let limits = resolve(
            &[
                "nofile=64:128".into(),
                "stack=16M".into(),
                "core=unlimited".into(),
            ],
            None,
        )
        .unwrap();
        let get = |name: &str| limits.iter().find(|l| l.name == name).unwrap().clone();
        assert_eq!(
            (get("nofile").soft, get("nofile").hard),
            (Some(64), Some(128))
        );
        assert_eq!(get("stack").soft, Some(16 << 20));
        assert_eq!(get("core").soft, None);
    }

    #[test]
    fn cpu_time_becomes_rlimit_cpu_with_a_kill_second() {
        let limits = resolve(&[], Some("1500ms".parse().unwrap())).unwrap();
        let cpu = limits.iter().find(|l| l.name == "cpu").unwrap();
        assert_eq!((cpu.soft, cpu.hard), (Some(2), Some(3)));
    }

    #[test]
    fn bad_specs_are_explained() {
        for (spec, needle) in [
            ("nofile", "NAME=VALUE"),
            ("bogus=1", "unknown limit"),
            ("nofile=x", "not a number"),
            ("nofile=10:5", "above the hard"),
            ("nofile=unlimited:5", "above the hard"),
        ] {
            let err = resolve(&[spec.into()], None).unwrap_err();
            assert!(err.message().contains(needle), "{spec}: {}", err.message());
        }
    }
}
