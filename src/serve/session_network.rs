//! `session_network`: a `--net filtered` session's `allow-net` rules and `add-host` pins
//! replaced while it runs ("install the dependencies, then lock the network").
//!
//! The server checks the new rules as it checks a `session_create` asking for them (the
//! one policy check, `policy::check`: no rule or pin the server's own list lacks unless
//! it was started with `--client-may allow-net`). The session's runner then hands the new
//! policy to its relay (`Forwarder::replace_policy`), which judges every new connection
//! and lookup by it once the reply is sent, and judges again every connection it holds:
//! those the new policy would refuse are cut (the program sees ECONNRESET, or
//! ECONNREFUSED for one still being connected), the others go on. The caps the session
//! was created with (`--net-bytes`, `--net-connections`) stay. Each change is a line in
//! the server's `--audit-log`: who, the session, the rules and pins before and after, and
//! how many connections were cut.

use super::policy::{self, Origins};
use crate::error::{Context, Error, Result};
use crate::jail::SessionJail;
use crate::net::policy::Policy;
use crate::options::{JailOptions, NetMode};
use crate::verdict::Peer;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// The options a client asks for when it asks for this network: what the server's
/// policy judges.
pub fn asked_options(
    allow_net: &[String],
    deny_net: &[String],
    add_host: &[String],
) -> JailOptions {
    JailOptions {
        net: Some(NetMode::Filtered),
        allow_net: allow_net.to_vec(),
        deny_net: deny_net.to_vec(),
        add_host: add_host.to_vec(),
        ..JailOptions::default()
    }
}

/// The session as the server judges it after the change: the server's options with the
/// asked network on top, its deny list the asked one alone (the change replaces the
/// rules: were the server's deny rules appended, one the client dropped would go unseen).
pub fn planned(defaults: &JailOptions, client: &JailOptions) -> JailOptions {
    let mut planned = defaults.clone().overlay(client.clone());
    planned.deny_net = client.deny_net.clone();
    planned
}

/// The server's check of a new network: `planned` is [`planned`] (with a placeholder
/// command), judged exactly as a session created with it would be.
pub fn check(client: &JailOptions, server: &policy::Server, planned: JailOptions) -> Result<()> {
    policy::check(
        client,
        &Origins::new(),
        server,
        policy::Asked::Built(Box::new(planned)),
    )
    .map(|_| ())
}

/// The answer for a session created with `--net none` or `host`.
pub fn fixed(session: &str, net: NetMode) -> Error {
    let mode = match net {
        NetMode::Host => "host",
        _ => "none",
    };
    Error::input(format!(
        "session_network: session {session} was created with --net {mode}, whose network cannot change; create it with --net filtered (an empty allow-net list is allowed) to change its rules later"
    ))
}

/// A policy's rules and pins as the client wrote them.
#[derive(Serialize)]
struct Rules {
    allow_net: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deny_net: Vec<String>,
    add_host: Vec<String>,
}

impl Rules {
    fn of(policy: &Policy) -> Rules {
        Rules {
            allow_net: policy.rules.iter().map(|rule| rule.text.clone()).collect(),
            deny_net: policy.deny.iter().map(|rule| rule.text.clone()).collect(),
            add_host: policy
                .pins
                .iter()
                .map(|pin| format!("{}:{}", pin.name, pin.ip))
                .collect(),
        }
    }
}

/// The runner's half: parses the new rules (with the session's caps; `add_host` absent:
/// the pins it has), hands them to the relay, writes the audit line; the reply.
pub fn apply(
    jail: &mut SessionJail,
    session: &str,
    peer: Peer,
    allow_net: &[String],
    deny_net: &[String],
    add_host: Option<&[String]>,
    audit_log: Option<&Path>,
) -> Result<super::reply::SessionReply> {
    let Some(old) = jail.network().cloned() else {
        return Err(fixed(session, jail.plan().net));
    };
    // Without new pins, the session's own stay (the server's `--add-host` and its create's).
    let kept_pins = Rules::of(&old).add_host;
    let mut new = Policy::plan(
        allow_net,
        add_host.unwrap_or(kept_pins.as_slice()),
        old.max_bytes.map(crate::units::Size),
        Some(old.max_connections),
    )?
    .deny(deny_net)?;
    // The session's secrets stay (its jail holds their placeholders); a host no longer
    // allowed is refused before anything is decrypted.
    new.secrets = old.secrets.clone();
    let cut = jail.replace_network(new.clone())?;
    let (before, after) = (Rules::of(&old), Rules::of(&new));
    // The change is in force: a log that cannot be written is said on the server's
    // stderr (as a run's audit line is), not answered as if the change had failed.
    if let Some(path) = audit_log
        && let Err(err) = audit(path, session, peer, &before, &after, cut)
    {
        eprintln!("brig: {err}");
    }
    let reply = super::reply::SessionReply::Network {
        session: session.into(),
        allow_net: after.allow_net,
        deny_net: after.deny_net,
        add_host: after.add_host,
        cut: cut as u64,
    };
    Ok(reply)
}

/// A network change's line in the server's `--audit-log`.
#[derive(Serialize)]
struct NetworkChange<'a> {
    time: String,
    uid: u32,
    pid: i32,
    peer: Peer,
    event: &'static str,
    session: &'a str,
    old: &'a Rules,
    new: &'a Rules,
    cut: usize,
}

/// One line in the server's `--audit-log` (the same file and locking as the runs' lines).
fn audit(
    path: &Path,
    session: &str,
    peer: Peer,
    old: &Rules,
    new: &Rules,
    cut: usize,
) -> Result<()> {
    let line = NetworkChange {
        time: crate::verdict::rfc3339_now(),
        uid: peer.uid,
        pid: peer.pid,
        peer,
        event: "session_network",
        session,
        old,
        new,
        cut,
    };
    let line = serde_json::to_string(&line)
        .map_err(|err| Error::setup(format!("encode the audit line: {err}")))?;
    let what = || format!("--audit-log {}: append the network change", path.display());
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .context(what)?;
    let locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| Error::os(what(), errno))?;
    (&*locked)
        .write_all(format!("{line}\n").as_bytes())
        .context(what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;
    use crate::serve::Loosening;

    /// The server's check of a new network, as `admit_to_session` makes it, against a
    /// server of `server` YAML that lets clients loosen `may`.
    fn judged(
        server: &str,
        may: &[Loosening],
        allow_net: &[&str],
        add_host: &[&str],
    ) -> Result<()> {
        judged_with_deny(server, may, allow_net, &[], add_host)
    }

    /// [`judged`], with `deny_net` rules asked for too.
    fn judged_with_deny(
        server: &str,
        may: &[Loosening],
        allow_net: &[&str],
        deny_net: &[&str],
        add_host: &[&str],
    ) -> Result<()> {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut defaults: JailOptions = crate::config::parse(server, "test").unwrap();
        defaults.command = vec!["true".into()];
        let pool = Plan::resolve(defaults.clone()).unwrap();
        let server = policy::Server {
            options: &defaults,
            jail: policy::Jail::of(&pool),
            may,
            bind_under: &[],
            whose: "server",
        };
        let client = asked_options(&owned(allow_net), &owned(deny_net), &owned(add_host));
        check(&client, &server, planned(&defaults, &client))
    }

    /// The rules and pins asked for, the server's consents, and a refusal's words (None:
    /// allowed).
    type Case = (
        &'static [&'static str],
        &'static [&'static str],
        &'static [Loosening],
        Option<&'static str>,
    );

    #[test]
    fn a_new_network_is_no_looser_than_the_server_s() {
        let server = "net: filtered\nallow-net: [web.test:80, '*.pypi.org']\nadd-host: ['web.test:10.0.0.5']";
        const MAY: &[Loosening] = &[Loosening::AllowNet];
        let cases: [Case; 9] = [
            (&[], &[], &[], None),
            (&["web.test:80"], &["web.test:10.0.0.5"], &[], None),
            (&["*.pypi.org"], &[], &[], None),
            (
                &["example.com:443"],
                &[],
                &[],
                Some(
                    "--allow-net example.com:443: this server does not let clients ask for it (its own: web.test:80, *.pypi.org); start it with --client-may allow-net to allow it",
                ),
            ),
            // Another port of a listed name is another rule.
            (&["web.test:81"], &[], &[], Some("--allow-net web.test:81")),
            (
                &[],
                &["db.test:10.0.0.6"],
                &[],
                Some(
                    "--add-host db.test:10.0.0.6: this server does not let clients ask for it (its own: web.test:10.0.0.5)",
                ),
            ),
            // The server's own pins stay in the check: a listed name cannot move.
            (
                &[],
                &["web.test:10.0.0.6"],
                MAY,
                Some("web.test is already pinned to 10.0.0.5"),
            ),
            (&["example.com:443"], &["db.test:10.0.0.7"], MAY, None),
            (&["web.test:notaport"], &[], MAY, Some("web.test:notaport")),
        ];
        for (allow_net, add_host, may, expected) in cases {
            let got = judged(server, may, allow_net, add_host);
            match (expected, got) {
                (None, Ok(())) => {}
                (Some(needle), Err(err)) => assert!(
                    err.to_string().contains(needle),
                    "{allow_net:?} {add_host:?}: {err}"
                ),
                (expected, got) => panic!("{allow_net:?} {add_host:?}: {got:?}, not {expected:?}"),
            }
        }
        // A deny list: a server's, kept or added to; an allow list's server, a consent.
        let deny = |server: &str, deny_net: &[&str], may: &[Loosening]| {
            judged_with_deny(server, may, &[], deny_net, &[]).map_err(|err| err.to_string())
        };
        let open = "net: filtered\ndeny-net: ['10.0.0.0/8']";
        assert_eq!(deny(open, &["10.0.0.0/8"], &[]), Ok(()));
        assert_eq!(deny(open, &["10.0.0.0/8", "1.1.1.1"], &[]), Ok(()));
        let dropped = deny(open, &["1.1.1.1"], &[]).unwrap_err();
        assert!(
            dropped.contains("--deny-net without 10.0.0.0/8: this server does not let clients ask for it (its own: 10.0.0.0/8)"),
            "{dropped}"
        );
        let listed = "net: filtered\nallow-net: [web.test:80]";
        let looser = deny(listed, &["1.1.1.1"], &[]).unwrap_err();
        assert!(
            looser.contains("--deny-net 1.1.1.1: this server does not let clients ask for it (its own: an allow list"),
            "{looser}"
        );
        assert_eq!(deny(listed, &["1.1.1.1"], MAY), Ok(()));
        assert_eq!(deny("net: host", &["1.1.1.1"], &[]), Ok(()));
        // A server without a filtered network: the consent it needs.
        let refused = judged("net: none", &[], &[], &[]).unwrap_err().to_string();
        assert!(refused.contains("--net filtered"), "{refused}");
    }
}
