//! What a client of `brig serve` may ask for: one rule for every option a client can send
//! ([`RULES`]), checked in one place ([`check`]) for a run (pooled, warm or built for it),
//! a session's creation and each of its execs. A rule is one of
//!
//! - **tighten**: the jail the client gets is compared with the server's, value by value
//!   (numbers, sizes, durations, each rlimit, each tmpfs, the network allow list, the
//!   seccomp and Landlock modes), and refused when looser; a few loosenings of isolation
//!   the operator may allow with `--client-may`;
//! - **server**: the server's alone (its host ids, cgroups, environment): refused unless
//!   the client's value is the server's;
//! - **host paths**: binds and roots, only under `--allow-bind-under`;
//! - **free**: the client's choice (its program, its environment, where its verdict goes),
//!   each with why it gives nothing of the server's away.

use crate::error::{Error, Result};
use crate::mount::MountOp;
use crate::options::{JailOptions, LandlockMode, NetMode, ProcMode};
use crate::plan::Plan;
use crate::seccomp;
use crate::units::{Size, Span};
use clap::ValueEnum;
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Loosening {
    /// `--net host`.
    NetHost,
    /// `--seccomp none`.
    SeccompNone,
    /// `--landlock off`.
    LandlockOff,
    /// `--seccomp-log` (calls outside the profile allowed, and logged).
    SeccompLog,
    /// `--allow-net` and `--add-host` (a network the server's default does not give).
    AllowNet,
    /// `--proc host`.
    ProcHost,
}

impl Loosening {
    fn flag(self) -> &'static str {
        match self {
            Loosening::NetHost => "net-host",
            Loosening::SeccompNone => "seccomp-none",
            Loosening::LandlockOff => "landlock-off",
            Loosening::SeccompLog => "seccomp-log",
            Loosening::AllowNet => "allow-net",
            Loosening::ProcHost => "proc-host",
        }
    }
}

/// Where a client's options came from, when not from its command line or call: option
/// name (`time-limit`) to `profile node`, `config FILE`, `workspace_size`.
pub type Origins = std::collections::BTreeMap<String, String>;

/// A jail as the rules see it: its plan, with the time and output limits a run or an
/// exec sets on a jail built before it (the pool's, a session's).
#[derive(Clone, Copy)]
pub struct Jail<'a> {
    pub plan: &'a Plan,
    pub time_limit: Option<Span>,
    pub output_limit: Option<Size>,
}

impl<'a> Jail<'a> {
    pub fn of(plan: &'a Plan) -> Jail<'a> {
        Jail {
            plan,
            time_limit: plan.time_limit,
            output_limit: plan.limits.output_limit,
        }
    }
}

/// The side a client is held to: the server's defaults and jail, or a session's.
pub struct Server<'a> {
    /// Its options, as its operator gave them (for the rules of the server's options).
    pub options: &'a JailOptions,
    pub jail: Jail<'a>,
    pub may: &'a [Loosening],
    pub bind_under: &'a [PathBuf],
    /// `server` or `session`, as messages name it.
    pub whose: &'static str,
}

/// The jail a client's request gets.
pub enum Asked<'a> {
    /// One built for the request from these options (the server's with the client's
    /// on top), planned once the request's own rules hold.
    Built(Box<JailOptions>),
    /// One built before the request (a pooled jail, a session's) with the request's
    /// time and output limits.
    Prepared(Jail<'a>),
}

/// One option's rule.
#[derive(Clone, Copy)]
pub enum Rule {
    /// The client's free choice: why it gives nothing of the server's away.
    Free(&'static str),
    /// The server's alone: refused unless the client's value is the server's. The fix.
    Server(&'static str),
    /// A host path: only under one of the server's `--allow-bind-under` directories.
    HostPaths,
    /// No looser than the server's jail: `looser` compares the client's jail with the
    /// server's; `asked` checks the request's value before anything is planned with it.
    Tighten {
        looser: fn(&Jail, &Jail) -> Option<Looser>,
        asked: Option<fn(&JailOptions) -> Result<()>>,
    },
}

/// A value of the client's jail looser than the server's.
#[derive(Debug, PartialEq, Eq)]
pub struct Looser {
    /// The option, as typed: `--memory`, `--rlimit cpu`, `--tmpfs /scratch`.
    pub flag: String,
    pub theirs: String,
    pub ours: String,
    /// The `--client-may` that lets clients have it, for a loosening of isolation an
    /// operator may allow; limits have none.
    pub consent: Option<Loosening>,
}

fn looser(flag: &str, theirs: impl ToString, ours: impl ToString) -> Option<Looser> {
    Some(Looser {
        flag: flag.into(),
        theirs: theirs.to_string(),
        ours: ours.to_string(),
        consent: None,
    })
}

fn loosening(flag: &str, theirs: &str, ours: &str, consent: Loosening) -> Option<Looser> {
    Some(Looser {
        consent: Some(consent),
        ..looser(flag, theirs, ours)?
    })
}

const FROM_THE_SERVER: &str = "it belongs to the server's own configuration";

/// Every option a client can send (the keys of [`JailOptions`], as on the command line
/// and in YAML) and its rule. The limits come first: a looser jail is named by the
/// first limit that differs.
pub const RULES: &[(&str, Rule)] = &[
    (
        "time-limit",
        Rule::Tighten {
            looser: |jail, server| {
                let millis = |span: Option<Span>| span.map(|span| span.0.as_millis() as u64);
                exceeds(millis(jail.time_limit), millis(server.time_limit)).then(|| {
                    looser(
                        "--time-limit",
                        shown(jail.time_limit),
                        shown(server.time_limit),
                    )
                })?
            },
            asked: None,
        },
    ),
    (
        "memory",
        Rule::Tighten {
            looser: |jail, server| {
                let (mine, ours) = (
                    jail.plan.limits.cgroup.memory,
                    server.plan.limits.cgroup.memory,
                );
                exceeds(mine.map(|size| size.0), ours.map(|size| size.0))
                    .then(|| looser("--memory", shown(mine), shown(ours)))?
            },
            asked: None,
        },
    ),
    (
        "pids",
        Rule::Tighten {
            looser: |jail, server| {
                let (mine, ours) = (jail.plan.limits.cgroup.pids, server.plan.limits.cgroup.pids);
                exceeds(mine, ours).then(|| looser("--pids", shown(mine), shown(ours)))?
            },
            asked: None,
        },
    ),
    (
        "cpus",
        Rule::Tighten {
            looser: |jail, server| {
                let (mine, ours) = (jail.plan.limits.cgroup.cpus, server.plan.limits.cgroup.cpus);
                let more = match (mine, ours) {
                    (_, None) => false,
                    (None, Some(_)) => true,
                    (Some(mine), Some(ours)) => mine > ours,
                };
                more.then(|| looser("--cpus", shown(mine), shown(ours)))?
            },
            asked: None,
        },
    ),
    (
        "cpu-time",
        Rule::Tighten {
            looser: |jail, server| {
                let millis = |span: Option<Span>| span.map(|span| span.0.as_millis() as u64);
                let (mine, ours) = (jail.plan.limits.cpu_time, server.plan.limits.cpu_time);
                exceeds(millis(mine), millis(ours))
                    .then(|| looser("--cpu-time", shown(mine), shown(ours)))?
            },
            asked: None,
        },
    ),
    (
        "output-limit",
        Rule::Tighten {
            looser: |jail, server| {
                let (mine, ours) = (jail.output_limit, server.output_limit);
                exceeds(mine.map(|size| size.0), ours.map(|size| size.0))
                    .then(|| looser("--output-limit", shown(mine), shown(ours)))?
            },
            asked: None,
        },
    ),
    (
        "tmpfs-size",
        Rule::Tighten {
            looser: |jail, server| {
                let (mine, ours) = (jail.plan.limits.tmpfs_size, server.plan.limits.tmpfs_size);
                (mine.0 > ours.0).then(|| looser("--tmpfs-size", mine, ours))?
            },
            asked: None,
        },
    ),
    (
        "home-size",
        Rule::Tighten {
            looser: |jail, server| {
                let (mine, ours) = (jail.plan.limits.home_size, server.plan.limits.home_size);
                (mine.0 > ours.0).then(|| looser("--home-size", mine, ours))?
            },
            asked: None,
        },
    ),
    (
        "tmpfs",
        Rule::Tighten {
            looser: tmpfs_looser,
            asked: None,
        },
    ),
    (
        "rlimit",
        Rule::Tighten {
            looser: rlimit_looser,
            asked: None,
        },
    ),
    (
        "net-bytes",
        Rule::Tighten {
            looser: |jail, server| {
                let (Some(mine), Some(ours)) = (&jail.plan.network, &server.plan.network) else {
                    return None;
                };
                exceeds(mine.max_bytes, ours.max_bytes).then(|| {
                    looser(
                        "--net-bytes",
                        shown(mine.max_bytes.map(Size)),
                        shown(ours.max_bytes.map(Size)),
                    )
                })?
            },
            asked: None,
        },
    ),
    (
        "net-connections",
        Rule::Tighten {
            looser: |jail, server| {
                let (Some(mine), Some(ours)) = (&jail.plan.network, &server.plan.network) else {
                    return None;
                };
                (mine.max_connections > ours.max_connections).then(|| {
                    looser(
                        "--net-connections",
                        mine.max_connections,
                        ours.max_connections,
                    )
                })?
            },
            asked: None,
        },
    ),
    (
        "proc",
        Rule::Tighten {
            looser: |jail, server| {
                // A fresh /proc is mounted; brig's own is bound.
                let proc = |jail: &Jail| match jail
                    .plan
                    .mounts
                    .iter()
                    .any(|op| matches!(op, MountOp::Proc { .. }))
                {
                    true => ProcMode::Fresh,
                    false => ProcMode::Host,
                };
                (proc(jail) == ProcMode::Host && proc(server) != ProcMode::Host)
                    .then(|| loosening("--proc", "host", "fresh", Loosening::ProcHost))?
            },
            asked: None,
        },
    ),
    (
        "net",
        Rule::Tighten {
            looser: |jail, server| {
                let rank = |net: NetMode| match net {
                    NetMode::None => 0,
                    NetMode::Filtered => 1,
                    NetMode::Host => 2,
                };
                let (mine, ours) = (jail.plan.net, server.plan.net);
                let name = |net: NetMode| match net {
                    NetMode::None => "none",
                    NetMode::Filtered => "filtered",
                    NetMode::Host => "host",
                };
                let consent = match mine {
                    NetMode::Host => Loosening::NetHost,
                    _ => Loosening::AllowNet,
                };
                (rank(mine) > rank(ours))
                    .then(|| loosening("--net", name(mine), name(ours), consent))?
            },
            asked: None,
        },
    ),
    (
        "allow-net",
        Rule::Tighten {
            looser: |jail, server| {
                let mine = jail.plan.network.as_ref()?;
                // The host's network lets everything through: any list is tighter.
                if server.plan.net == NetMode::Host {
                    return None;
                }
                let ours = server.plan.network.as_ref();
                let rule = mine.rules.iter().find(|rule| {
                    !ours.is_some_and(|ours| {
                        // A tcp:// or ech:// rule lets more through than a plain one.
                        ours.rules.iter().any(|theirs| {
                            theirs.host == rule.host
                                && theirs.port == rule.port
                                && (theirs.raw || !rule.raw)
                                && (theirs.ech || !rule.ech)
                        })
                    })
                })?;
                let listed = |policy: Option<&crate::net::policy::Policy>| -> String {
                    let rules: Vec<&str> = policy
                        .map(|policy| policy.rules.iter().map(|rule| rule.text.as_str()).collect())
                        .unwrap_or_default();
                    if rules.is_empty() {
                        "no rule".into()
                    } else {
                        rules.join(", ")
                    }
                };
                loosening(
                    "--allow-net",
                    &rule.text,
                    &listed(ours),
                    Loosening::AllowNet,
                )
            },
            asked: None,
        },
    ),
    (
        "deny-net",
        Rule::Tighten {
            looser: |jail, server| {
                let mine = jail.plan.network.as_ref()?;
                if server.plan.net == NetMode::Host || !mine.lets_the_rest_out() {
                    return None;
                }
                // A deny list lets out what it does not name: looser than an allow list,
                // and than a deny list naming something it leaves out.
                let Some(ours) = server
                    .plan
                    .network
                    .as_ref()
                    .filter(|ours| ours.lets_the_rest_out())
                else {
                    return loosening(
                        "--deny-net",
                        &mine.deny[0].text,
                        "an allow list, which lets out only what it names",
                        Loosening::AllowNet,
                    );
                };
                let kept = |rule: &crate::net::policy::Rule| {
                    mine.deny
                        .iter()
                        .any(|theirs| theirs.host == rule.host && theirs.port == rule.port)
                };
                let dropped = ours.deny.iter().find(|rule| !kept(rule))?;
                let denied: Vec<&str> = ours.deny.iter().map(|rule| rule.text.as_str()).collect();
                loosening(
                    "--deny-net",
                    &format!("without {}", dropped.text),
                    &denied.join(", "),
                    Loosening::AllowNet,
                )
            },
            asked: None,
        },
    ),
    (
        "add-host",
        Rule::Tighten {
            looser: |jail, server| {
                let mine = jail.plan.network.as_ref()?;
                if server.plan.net == NetMode::Host {
                    return None;
                }
                let ours = server.plan.network.as_ref();
                let pin = mine
                    .pins
                    .iter()
                    .find(|pin| !ours.is_some_and(|ours| ours.pins.contains(pin)))?;
                let pins: Vec<String> = ours
                    .map(|ours| {
                        ours.pins
                            .iter()
                            .map(|pin| format!("{}:{}", pin.name, pin.ip))
                            .collect()
                    })
                    .unwrap_or_default();
                let ours = if pins.is_empty() {
                    "no pin".to_string()
                } else {
                    pins.join(", ")
                };
                loosening(
                    "--add-host",
                    &format!("{}:{}", pin.name, pin.ip),
                    &ours,
                    Loosening::AllowNet,
                )
            },
            asked: None,
        },
    ),
    (
        "seccomp",
        Rule::Tighten {
            looser: |jail, server| {
                let (mine, ours) = (&jail.plan.seccomp, &server.plan.seccomp);
                if mine.mode == seccomp::Mode::Off {
                    return (ours.mode != seccomp::Mode::Off).then(|| {
                        loosening("--seccomp", "none", &ours.profile, Loosening::SeccompNone)
                    })?;
                }
                // The same profile, or strict, the tightest: in log mode the next rule's.
                let tighter = mine.profile == ours.profile || mine.profile == "strict";
                let weaker_than_none = ours.mode == seccomp::Mode::Off;
                (!tighter && !weaker_than_none)
                    .then(|| looser("--seccomp", &mine.profile, &ours.profile))?
            },
            asked: Some(|client| match client.seccomp.as_deref() {
                Some(name) if name != "none" && seccomp::builtin(name).is_none() => {
                    Err(Error::input(format!(
                        "--seccomp {name}: this server does not let clients ask for it; name a built-in profile (`brig seccomp list`); a profile file is the server's to choose"
                    )))
                }
                _ => Ok(()),
            }),
        },
    ),
    (
        "seccomp-log",
        Rule::Tighten {
            looser: |jail, server| {
                let logs = |jail: &Jail| jail.plan.seccomp.mode == seccomp::Mode::Log;
                (logs(jail) && !logs(server) && server.plan.seccomp.mode != seccomp::Mode::Off)
                    .then(|| loosening("--seccomp-log", "on", "off", Loosening::SeccompLog))?
            },
            asked: None,
        },
    ),
    (
        "landlock",
        Rule::Tighten {
            looser: |jail, server| {
                let strength = |mode: LandlockMode| match mode {
                    LandlockMode::Off => 0,
                    LandlockMode::BestEffort => 1,
                    LandlockMode::Require(_) => 2,
                };
                let (mine, ours) = (jail.plan.landlock.mode, server.plan.landlock.mode);
                if strength(mine) >= strength(ours) {
                    return None;
                }
                let (theirs, ours) = (mine.to_string(), ours.to_string());
                match mine {
                    LandlockMode::Off => {
                        loosening("--landlock", &theirs, &ours, Loosening::LandlockOff)
                    }
                    _ => looser("--landlock", theirs, ours),
                }
            },
            asked: None,
        },
    ),
    ("ro-bind", Rule::HostPaths),
    ("bind", Rule::HostPaths),
    ("workdir", Rule::HostPaths),
    ("rootfs", Rule::HostPaths),
    ("cgroup-parent", Rule::Server(FROM_THE_SERVER)),
    ("host-uid", Rule::Server(FROM_THE_SERVER)),
    ("host-uid-range", Rule::Server(FROM_THE_SERVER)),
    ("host-gid", Rule::Server(FROM_THE_SERVER)),
    (
        "secret",
        Rule::Server(
            "it reads the server's environment or files; secrets are the operator's, given on `brig serve`",
        ),
    ),
    (
        "secret-host",
        Rule::Server("it says which hosts get the operator's secrets"),
    ),
    (
        "secret-body",
        Rule::Server(
            "it goes with the operator's secrets; a session's own say `body` in `secrets`",
        ),
    ),
    (
        "secret-strict",
        Rule::Server("it goes with the operator's secrets"),
    ),
    (
        "upstream-ca",
        Rule::Server("it reads a file of the server's and decides whom brig trusts"),
    ),
    (
        "env-pass",
        Rule::Server("it reads the server's own environment; send the variables with --env"),
    ),
    (
        "profile",
        Rule::Server("expand it on the client (brig run --server and brig session do)"),
    ),
    (
        "command",
        Rule::Free("the program the client runs, in the jail, under every limit"),
    ),
    (
        "env",
        Rule::Free("the program's environment, inside the jail; brig reads none of it"),
    ),
    (
        "chdir",
        Rule::Free("a directory inside the jail, which the jail's user can reach anyway"),
    ),
    (
        "user",
        Rule::Free(
            "a name in the jail's own /etc/passwd and its home's mount point, under every limit of the workspace",
        ),
    ),
    (
        "uid",
        Rule::Free(
            "an id inside the jail's user namespace, mapped to the server's one host id, with every capability dropped",
        ),
    ),
    (
        "gid",
        Rule::Free(
            "an id inside the jail's user namespace, mapped to the server's one host id, with every capability dropped",
        ),
    ),
    (
        "hostname",
        Rule::Free("the jail's own UTS namespace; the host's name is untouched"),
    ),
    (
        "quiet-limits",
        Rule::Free("only a notice on the client's stderr; the verdict still says it"),
    ),
    (
        "report",
        Rule::Free("where the client writes its own verdict; the server ignores it"),
    ),
    (
        "report-fd",
        Rule::Free("where the client writes its own verdict; the server ignores it"),
    ),
    (
        "audit-log",
        Rule::Free(
            "the client's own log, written by the client; the server writes its --audit-log",
        ),
    ),
];

/// The rule of option `name` (a key of [`JailOptions`], `time-limit`).
pub fn rule(name: &str) -> Option<Rule> {
    RULES
        .iter()
        .find(|(option, _)| *option == name)
        .map(|(_, rule)| *rule)
}

/// The one check of what a client asks for against `server`: each option the client
/// set by its rule (before anything is planned with it: a host path or a profile file is
/// refused without being looked at), then the jail it gets, planned here when built for
/// the request, limit by limit against the server's. The plan of a jail built for it.
pub fn check(
    client: &JailOptions,
    origins: &Origins,
    server: &Server,
    asked: Asked,
) -> Result<Option<Plan>> {
    let sent = serde_json::to_value(client).expect("options always serialize");
    let ours = serde_json::to_value(server.options).expect("options always serialize");
    let keys = sent
        .as_object()
        .map(|object| object.keys())
        .into_iter()
        .flatten();
    for key in keys {
        let Some(rule) = rule(key) else {
            return Err(Error::input(format!(
                "--{key}: this server has no policy rule for it and refuses it; leave it out (brig's own bug: its rule belongs in RULES in src/serve/policy.rs)"
            )));
        };
        match rule {
            Rule::Free(_) => {}
            Rule::Server(fix) => {
                if sent[key] != ours[key] {
                    return Err(Error::input(format!(
                        "--{key}: this {} does not let clients set it; {fix}",
                        server.whose
                    )));
                }
            }
            Rule::HostPaths => host_paths(client, key, server.bind_under)?,
            Rule::Tighten { asked, .. } => {
                if let Some(asked) = asked {
                    asked(client)?;
                }
            }
        }
    }
    let (plan, jail) = match asked {
        Asked::Built(options) => {
            let plan = Plan::resolve(*options)?;
            (Some(plan), None)
        }
        Asked::Prepared(jail) => (None, Some(jail)),
    };
    let jail = jail.unwrap_or_else(|| Jail::of(plan.as_ref().expect("planned")));
    for (_, rule) in RULES {
        let Rule::Tighten { looser, .. } = rule else {
            continue;
        };
        let Some(found) = looser(&jail, &server.jail) else {
            continue;
        };
        match found.consent {
            Some(consent) if server.may.contains(&consent) => {}
            Some(consent) => {
                let option = found.flag.split(' ').next().unwrap_or_default();
                let from = match origins.get(option.trim_start_matches("--")) {
                    Some(origin) => format!(" (from {origin})"),
                    None => String::new(),
                };
                return Err(Error::input(format!(
                    "{} {}{from}: this {} does not let clients ask for it (its own: {}); start it with --client-may {} to allow it",
                    found.flag,
                    found.theirs,
                    server.whose,
                    found.ours,
                    consent.flag()
                )));
            }
            None => {
                return Err(looser_than_server(
                    &found.flag,
                    &found.theirs,
                    &found.ours,
                    origins,
                    server.whose,
                ));
            }
        }
    }
    Ok(plan)
}

/// The sources of `key` (`ro-bind`, `bind`, `workdir`, `rootfs`) lie under one of
/// `bind_under`.
fn host_paths(client: &JailOptions, key: &str, bind_under: &[PathBuf]) -> Result<()> {
    let specs = |specs: &[String]| -> Vec<String> {
        specs
            .iter()
            .map(|spec| spec.split(':').next().unwrap_or_default().to_string())
            .collect()
    };
    let sources: Vec<String> = match key {
        "ro-bind" => specs(&client.ro_bind),
        "bind" => specs(&client.bind),
        "workdir" => client
            .workdir
            .iter()
            .map(|dir| dir.display().to_string())
            .collect(),
        "rootfs" => client
            .rootfs
            .iter()
            .map(|dir| dir.display().to_string())
            .collect(),
        _ => Vec::new(),
    };
    for source in sources {
        if !under_any(Path::new(&source), bind_under) {
            let allowed = if bind_under.is_empty() {
                "none is allowed; start the server with --allow-bind-under DIR".to_string()
            } else {
                let dirs: Vec<String> = bind_under
                    .iter()
                    .map(|dir| dir.display().to_string())
                    .collect();
                format!("bind only under {}", dirs.join(", "))
            };
            return Err(Error::input(format!(
                "--{key} {source}: outside what this server lets clients bind; {allowed}"
            )));
        }
    }
    Ok(())
}

/// Each tmpfs of the jail no larger than the server's at the same place (or its
/// `--tmpfs-size`, for a place it has none), and all of them together no larger than
/// the server's together: a client's `--tmpfs /scratch:1G` is 1G of memory.
fn tmpfs_looser(jail: &Jail, server: &Jail) -> Option<Looser> {
    // The home directory is compared with the server's home wherever each is (a
    // client's `user` names its own, /home/NAME), as `home-size` is: it is the
    // workspace, not a tmpfs of the client's.
    let tmpfs = |plan: &Plan| -> Vec<(PathBuf, Size, Option<String>)> {
        plan.mounts
            .iter()
            .filter_map(|op| match op {
                MountOp::Tmpfs {
                    dst, size, from, ..
                } if *dst == plan.identity.home => Some((PathBuf::from("~"), *size, from.clone())),
                MountOp::Tmpfs {
                    dst, size, from, ..
                } => Some((dst.clone(), *size, from.clone())),
                _ => None,
            })
            .collect()
    };
    let (mine, ours) = (tmpfs(jail.plan), tmpfs(server.plan));
    for (dst, size, _) in &mine {
        let bound = ours
            .iter()
            .find(|(theirs, _, _)| theirs == dst)
            .map_or(server.plan.limits.tmpfs_size, |(_, size, _)| *size);
        if size.0 > bound.0 {
            return looser(&format!("--tmpfs {}", dst.display()), size, bound);
        }
    }
    // /dev, brig's own 64K in every jail, is left out of the sums.
    let total = |mounts: &[(PathBuf, Size, Option<String>)]| -> u64 {
        mounts
            .iter()
            .filter(|(dst, _, _)| dst != Path::new("/dev"))
            .map(|(_, size, _)| size.0)
            .sum()
    };
    (total(&mine) > total(&ours)).then(|| {
        looser(
            "--tmpfs",
            format!("{} in all", Size(total(&mine))),
            format!("{} in all", Size(total(&ours))),
        )
    })?
}

/// Each rlimit of the jail, soft and hard, no higher than the server's hard one: its
/// `--rlimit` (or `--cpu-time`), else the one the server runs under, which its jails
/// inherit.
fn rlimit_looser(jail: &Jail, server: &Jail) -> Option<Looser> {
    let unlimited = |value: Option<u64>| value.map_or("unlimited".to_string(), |n| n.to_string());
    for rlimit in &jail.plan.limits.rlimits {
        let ours = match server
            .plan
            .limits
            .rlimits
            .iter()
            .find(|ours| ours.name == rlimit.name)
        {
            Some(ours) => ours.hard,
            None => crate::rlimits::current_hard(rlimit.name),
        };
        if exceeds(rlimit.hard, ours) || exceeds(rlimit.soft, ours) {
            let theirs = match rlimit.soft == rlimit.hard {
                true => unlimited(rlimit.hard),
                false => format!("{}:{}", unlimited(rlimit.soft), unlimited(rlimit.hard)),
            };
            return looser(
                &format!("--rlimit {}", rlimit.name),
                theirs,
                unlimited(ours),
            );
        }
    }
    None
}

fn shown(limit: Option<impl ToString>) -> String {
    limit.map_or_else(|| "max".into(), |limit| limit.to_string())
}

/// The refusal of a limit looser than the server's (or the session's): where the
/// client's value came from, and what each side can change (the client asks for less,
/// the operator raises the server's option).
pub fn looser_than_server(
    flag: &str,
    theirs: &str,
    ours: &str,
    origins: &Origins,
    whose: &str,
) -> Error {
    let option = flag.split(' ').next().unwrap_or(flag);
    // As the client would type it: `--rlimit cpu=10`, `--tmpfs /scratch:64M`.
    let typed = |value: &str| match flag.split_once(' ') {
        Some(("--rlimit", name)) => format!("--rlimit {name}={value}"),
        Some(("--tmpfs", dst)) => format!("--tmpfs {dst}:{value}"),
        _ => format!("{flag} {value}"),
    };
    let (what, client_fix) = match origins.get(option.trim_start_matches("--")) {
        // All tmpfs mounts together.
        Some(origin) if ours.ends_with(" in all") => (
            format!("{} (from {origin})", typed(theirs)),
            format!("keep its tmpfs mounts to {ours}"),
        ),
        // A profile or a config file the client used.
        Some(origin) if origin.contains(' ') => (
            format!("{} (from {origin})", typed(theirs)),
            format!("pass {} or less to override it", typed(ours)),
        ),
        // A field of the request that sets the option.
        Some(field) => (
            format!("{field} {theirs} (the jail's {flag})"),
            format!("ask for a {field} of at most {ours}"),
        ),
        None => (typed(theirs), format!("ask for at most {ours}")),
    };
    let operator = match whose {
        "session" => format!("a session be created with a higher {option}"),
        _ => format!("the server's operator raise its {option}"),
    };
    Error::input(format!(
        "{what}: looser than this {whose}'s {ours}; the client may {client_fix}, or {operator}"
    ))
}

/// `mine` asks for more than `ours` (None: no limit).
fn exceeds(mine: Option<u64>, ours: Option<u64>) -> bool {
    match (mine, ours) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(mine), Some(ours)) => mine > ours,
    }
}

/// `path` is absolute, has no `..`, and lies under one of `dirs` (lexically; the jail's
/// own mount checks then refuse symlinks on the way).
fn under_any(path: &Path, dirs: &[PathBuf]) -> bool {
    path.is_absolute()
        && !path.components().any(|part| part == Component::ParentDir)
        && dirs.iter().any(|dir| path.starts_with(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Args;

    fn options(yaml: &str) -> JailOptions {
        crate::config::parse(yaml, "test").unwrap()
    }

    fn with_command(mut options: JailOptions) -> JailOptions {
        options.command = vec!["true".into()];
        options
    }

    /// The policy check of a client's `client` YAML against a server of `server` YAML,
    /// the client's options all from `config client.yaml`.
    fn verdict(server: &str, client: &str, may: &[Loosening], under: &[PathBuf]) -> Result<()> {
        let defaults = options(server);
        let pool = Plan::resolve(with_command(defaults.clone())).unwrap();
        let client = options(client);
        let origins: Origins = serde_json::to_value(&client)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .map(|key| (key.clone(), "config client.yaml".to_string()))
            .collect();
        let server = Server {
            options: &defaults,
            jail: Jail::of(&pool),
            may,
            bind_under: under,
            whose: "server",
        };
        let jail = with_command(defaults.clone().overlay(client.clone()));
        check(&client, &origins, &server, Asked::Built(Box::new(jail))).map(|_| ())
    }

    /// Every option of the command line and YAML (clap's definition of `JailOptions`)
    /// has a rule, and every rule an option.
    #[test]
    fn every_option_has_a_rule() {
        let command = JailOptions::augment_args(clap::Command::new("brig"));
        let names: Vec<String> = command
            .get_arguments()
            .map(|arg| {
                arg.get_long()
                    .map_or_else(|| arg.get_id().to_string(), str::to_string)
            })
            .collect();
        for name in &names {
            assert!(
                rule(name).is_some(),
                "the option `{name}` has no rule of what a client of `brig serve` may ask for: add (\"{name}\", Rule::...) to RULES in src/serve/policy.rs (Tighten with a comparison, Server, HostPaths, or Free with why), and a case for it to tighten_only_rules_hold below if it is Tighten"
            );
        }
        for (option, _) in RULES {
            assert!(
                names.iter().any(|name| name == option),
                "RULES in src/serve/policy.rs names `{option}`, which is no option of JailOptions: remove it"
            );
        }
    }

    /// Each tighten-only rule: a tighter value and an equal one are served; a looser one
    /// is refused, the line naming the option, where the client's value came from, the
    /// server's value and the fix.
    #[test]
    fn tighten_only_rules_hold() {
        struct Case {
            option: &'static str,
            server: &'static str,
            tighter: Option<&'static str>,
            equal: &'static str,
            looser: &'static str,
            /// The option and value as named, and the server's value.
            named: &'static str,
            ours: &'static str,
            /// The `--client-may` that would allow it, for a loosening of isolation.
            consent: Option<Loosening>,
        }
        let case = |option, server, tighter, equal, looser, named, ours| Case {
            option,
            server,
            tighter,
            equal,
            looser,
            named,
            ours,
            consent: None,
        };
        let web = "allow-net: [example.com:443]";
        let cases = vec![
            case(
                "time-limit",
                "time-limit: 10s",
                Some("time-limit: 5s"),
                "time-limit: 10s",
                "time-limit: 1m",
                "--time-limit 60s",
                "10s",
            ),
            case(
                "memory",
                "memory: 256M",
                Some("memory: 128M"),
                "memory: 256M",
                "memory: max",
                "--memory max",
                "256M",
            ),
            case(
                "pids",
                "pids: 64",
                Some("pids: 32"),
                "pids: 64",
                "pids: 100",
                "--pids 100",
                "64",
            ),
            case(
                "cpus",
                "cpus: 1",
                Some("cpus: 0.5"),
                "cpus: 1",
                "cpus: 2",
                "--cpus 2",
                "1",
            ),
            case(
                "cpu-time",
                "cpu-time: 10s",
                Some("cpu-time: 5s"),
                "cpu-time: 10s",
                "cpu-time: 1m",
                "--cpu-time 60s",
                "10s",
            ),
            case(
                "output-limit",
                "output-limit: 1M",
                Some("output-limit: 512K"),
                "output-limit: 1M",
                "output-limit: 2M",
                "--output-limit 2M",
                "1M",
            ),
            case(
                "tmpfs-size",
                "tmpfs-size: 64M",
                Some("tmpfs-size: 32M"),
                "tmpfs-size: 64M",
                "tmpfs-size: 1G",
                "--tmpfs-size 1G",
                "64M",
            ),
            case(
                "home-size",
                "home-size: 64M",
                Some("home-size: 32M"),
                "home-size: 64M",
                "home-size: 1G",
                "--home-size 1G",
                "64M",
            ),
            case(
                "tmpfs",
                "tmpfs-size: 64M",
                Some("tmpfs: ['/scratch:8M']\ntmpfs-size: 32M"),
                "tmpfs: ['/tmp:64M']",
                "tmpfs: ['/scratch:1G']",
                "--tmpfs /scratch:1G",
                "64M",
            ),
            case(
                "tmpfs",
                "tmpfs-size: 64M",
                None,
                "tmpfs: ['/dev/shm']",
                "tmpfs: ['/tmp:1G']",
                "--tmpfs /tmp:1G",
                "64M",
            ),
            case(
                "tmpfs",
                "tmpfs-size: 64M",
                None,
                "tmpfs: ['/tmp:64M']",
                "tmpfs: ['/scratch:64M']",
                "--tmpfs 256M in all",
                "192M in all",
            ),
            case(
                "rlimit",
                "rlimit: [nofile=512]",
                Some("rlimit: [nofile=256]"),
                "rlimit: [nofile=512]",
                "rlimit: [nofile=4096]",
                "--rlimit nofile=4096",
                "512",
            ),
            case(
                "rlimit",
                "rlimit: [cpu=10]",
                Some("rlimit: ['cpu=5:10']"),
                "rlimit: [cpu=10]",
                "rlimit: [cpu=unlimited]",
                "--rlimit cpu=unlimited",
                "10",
            ),
            case(
                "rlimit",
                "rlimit: [cpu=10]",
                None,
                "rlimit: ['cpu=10:10']",
                "rlimit: ['cpu=5:unlimited']",
                "--rlimit cpu=5:unlimited",
                "10",
            ),
            case(
                "net-bytes",
                "allow-net: [example.com:443]\nnet-bytes: 1M",
                Some("net-bytes: 512K"),
                "net-bytes: 1M",
                "net-bytes: 1G",
                "--net-bytes 1G",
                "1M",
            ),
            case(
                "net-connections",
                "allow-net: [example.com:443]\nnet-connections: 16",
                Some("net-connections: 8"),
                "net-connections: 16",
                "net-connections: 1000",
                "--net-connections 1000",
                "16",
            ),
            Case {
                consent: Some(Loosening::ProcHost),
                ..case(
                    "proc",
                    "",
                    None,
                    "proc: fresh",
                    "proc: host",
                    "--proc host",
                    "fresh",
                )
            },
            Case {
                consent: Some(Loosening::NetHost),
                ..case(
                    "net",
                    "",
                    None,
                    "net: none",
                    "net: host",
                    "--net host",
                    "none",
                )
            },
            Case {
                consent: Some(Loosening::AllowNet),
                ..case(
                    "net",
                    "",
                    None,
                    "net: none",
                    "net: filtered",
                    "--net filtered",
                    "none",
                )
            },
            // Any list is tighter than the host's network.
            Case {
                consent: Some(Loosening::SeccompNone),
                ..case(
                    "allow-net",
                    "net: host",
                    Some(
                        "net: filtered\nallow-net: [evil.example:443]\nadd-host: ['db.internal:10.0.0.5']",
                    ),
                    "net: host",
                    "seccomp: none",
                    "--seccomp none",
                    "default",
                )
            },
            Case {
                consent: Some(Loosening::AllowNet),
                ..case(
                    "allow-net",
                    web,
                    None,
                    web,
                    "allow-net: [evil.example:443]",
                    "--allow-net evil.example:443",
                    "example.com:443",
                )
            },
            // Raw TCP to an allowed host and port is more than judged HTTP/TLS to it.
            Case {
                consent: Some(Loosening::AllowNet),
                ..case(
                    "allow-net",
                    web,
                    None,
                    web,
                    "allow-net: ['tcp://example.com:443']",
                    "--allow-net tcp://example.com:443",
                    "example.com:443",
                )
            },
            // A deny list lets out what it does not name: looser than an allow list.
            Case {
                consent: Some(Loosening::AllowNet),
                ..case(
                    "deny-net",
                    web,
                    None,
                    web,
                    "deny-net: ['1.1.1.1']",
                    "--deny-net 1.1.1.1",
                    "an allow list, which lets out only what it names",
                )
            },
            Case {
                consent: Some(Loosening::AllowNet),
                ..case(
                    "add-host",
                    "allow-net: [db.internal:5432]\nadd-host: ['db.internal:10.0.0.5']",
                    None,
                    "add-host: ['db.internal:10.0.0.5']",
                    "add-host: ['cache.internal:10.0.0.6']",
                    "--add-host cache.internal:10.0.0.6",
                    "db.internal:10.0.0.5",
                )
            },
            Case {
                consent: Some(Loosening::SeccompNone),
                ..case(
                    "seccomp",
                    "seccomp: default",
                    Some("seccomp: strict"),
                    "seccomp: default",
                    "seccomp: none",
                    "--seccomp none",
                    "default",
                )
            },
            case(
                "seccomp",
                "seccomp: strict",
                None,
                "seccomp: strict",
                "seccomp: default",
                "--seccomp default",
                "strict",
            ),
            Case {
                consent: Some(Loosening::SeccompLog),
                ..case(
                    "seccomp-log",
                    "",
                    None,
                    "seccomp-log: false",
                    "seccomp-log: true",
                    "--seccomp-log on",
                    "off",
                )
            },
            case(
                "landlock",
                "landlock: require",
                None,
                "landlock: require",
                "landlock: best-effort",
                "--landlock best-effort",
                "require",
            ),
            Case {
                consent: Some(Loosening::LandlockOff),
                ..case(
                    "landlock",
                    "",
                    Some("landlock: require"),
                    "landlock: best-effort",
                    "landlock: 'off'",
                    "--landlock off",
                    "best-effort",
                )
            },
        ];
        for case in &cases {
            let served = |client: &str| {
                verdict(case.server, client, &[], &[]).unwrap_or_else(|err| {
                    panic!(
                        "{}: `{client}` against `{}`: {err}",
                        case.option, case.server
                    )
                })
            };
            if let Some(tighter) = case.tighter {
                served(tighter);
            }
            served(case.equal);
            let err = verdict(case.server, case.looser, &[], &[])
                .expect_err(case.looser)
                .to_string();
            assert_eq!(err.lines().count(), 1, "{err}");
            let mut needles = vec![format!("{} (from config client.yaml)", case.named)];
            match case.consent {
                None => needles.extend([
                    format!("looser than this server's {}", case.ours),
                    "the client may ".to_string(),
                    "or the server's operator raise its".to_string(),
                ]),
                Some(consent) => {
                    needles.extend([
                        format!("(its own: {})", case.ours),
                        format!("start it with --client-may {}", consent.flag()),
                    ]);
                    verdict(case.server, case.looser, &[consent], &[]).unwrap_or_else(|err| {
                        panic!(
                            "{} with --client-may {}: {err}",
                            case.looser,
                            consent.flag()
                        )
                    });
                }
            }
            for needle in &needles {
                assert!(
                    err.contains(needle.as_str()),
                    "{}: {err}\nlacks: {needle}",
                    case.option
                );
            }
        }
        // Every tighten-only rule has its case here.
        for (option, rule) in RULES {
            if matches!(rule, Rule::Tighten { .. }) {
                assert!(
                    cases.iter().any(|case| case.option == *option),
                    "the tighten-only rule of `{option}` has no case in tighten_only_rules_hold"
                );
            }
        }
    }

    /// The server's own options are refused unless the client's value is the server's;
    /// host paths only under --allow-bind-under; the client's free choices pass.
    #[test]
    fn server_options_host_paths_and_free_choices() {
        for (server, client, needle) in [
            (
                "",
                "cgroup-parent: /x",
                "--cgroup-parent: this server does not let clients set it; it belongs to the server's own configuration",
            ),
            ("", "host-uid: 0", "--host-uid: this server"),
            ("", "host-uid-range: 'off'", "--host-uid-range: this server"),
            (
                "host-uid: 4000",
                "host-uid: 4001",
                "--host-uid: this server",
            ),
            ("", "host-gid: 0", "--host-gid: this server"),
            (
                "",
                "env-pass: [SECRET]",
                "--env-pass: this server does not let clients set it; it reads the server's own environment",
            ),
            (
                "",
                "profile: node",
                "--profile: this server does not let clients set it; expand it on the client",
            ),
            (
                "",
                "seccomp: /etc/mine.json",
                "a profile file is the server's to choose",
            ),
            (
                "",
                "ro-bind: [/etc]",
                "--ro-bind /etc: outside what this server lets clients bind; none is allowed; start the server with --allow-bind-under DIR",
            ),
        ] {
            let err = verdict(server, client, &[], &[]).unwrap_err().to_string();
            assert!(err.contains(needle), "{client}: {err}");
        }
        verdict("host-uid: 4000", "host-uid: 4000", &[], &[]).unwrap();
        let under = [PathBuf::from("/srv/tasks")];
        for client in [
            "ro-bind: ['/srv/tasks/../secrets:/x']",
            "bind: ['/srv/tasksx:/x']",
            "workdir: /etc",
            "rootfs: /",
        ] {
            let err = verdict("", client, &[], &under).unwrap_err().to_string();
            assert!(
                err.contains("bind only under /srv/tasks"),
                "{client}: {err}"
            );
        }
        verdict(
            "",
            "ro-bind: ['/usr/share:/task']",
            &[],
            &[PathBuf::from("/usr")],
        )
        .unwrap();
        verdict(
            "",
            "env: [A=1]\nchdir: /tmp\nuid: 1234\ngid: 1234\nhostname: judge\nquiet-limits: true\nreport: /x\naudit-log: /y",
            &[],
            &[],
        )
        .unwrap();
    }

    /// A client's `user` moves the home (the workspace, /home/NAME): it is held to the
    /// server's home size, not to a tmpfs's (a pod's `home-size: 256M` with `tmpfs-size:
    /// 64M` refused every E2B sandbox, whose user is `user`).
    #[test]
    fn a_clients_user_keeps_the_servers_home_size() {
        let server = "home-size: 256M\ntmpfs-size: 64M";
        verdict(server, "user: user", &[], &[]).unwrap();
        let err = verdict(server, "user: user\nhome-size: 512M", &[], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--home-size"), "{err}");
    }

    /// A session's exec (a prepared jail with the exec's limits) is held to the session's.
    #[test]
    fn a_prepared_jail_s_limits_are_held_to_the_session_s() {
        let options = options("time-limit: 5s\noutput-limit: 1M");
        let plan = Plan::resolve(with_command(options.clone())).unwrap();
        let session = Server {
            options: &options,
            jail: Jail::of(&plan),
            may: &[],
            bind_under: &[],
            whose: "session",
        };
        let origins: Origins = [("time-limit".to_string(), "time_limit".to_string())].into();
        let exec = |time: &str, output: &str| {
            let client = JailOptions {
                time_limit: Some(time.parse().unwrap()),
                output_limit: Some(output.parse().unwrap()),
                ..JailOptions::default()
            };
            let jail = Jail {
                time_limit: client.time_limit,
                output_limit: client.output_limit,
                ..Jail::of(&plan)
            };
            check(&client, &origins, &session, Asked::Prepared(jail)).map(|_| ())
        };
        exec("5s", "1M").unwrap();
        exec("1s", "1K").unwrap();
        let err = exec("6s", "1M").unwrap_err().to_string();
        assert_eq!(
            err,
            "time_limit 6s (the jail's --time-limit): looser than this session's 5s; the client may ask for a time_limit of at most 5s, or a session be created with a higher --time-limit"
        );
        let err = exec("5s", "2M").unwrap_err().to_string();
        assert!(
            err.starts_with("--output-limit 2M: looser than this session's 1M"),
            "{err}"
        );
    }
}
