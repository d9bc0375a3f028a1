//! `brig gateway`'s command line, and its API-key file.

use super::quota::Overrides;
use crate::error::{Error, Result};
use clap::Args;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Args, Clone, Debug)]
pub struct GatewayArgs {
    /// The address to serve E2B's API on, e.g. 127.0.0.1:3000 (port 0: any free port,
    /// printed): HTTP/1.1 and h2c (keep it on loopback or behind a TLS ingress), or TLS
    /// with --tls-cert and --tls-key.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: SocketAddr,

    /// The socket of the `brig serve` whose sessions are the sandboxes. Without it the
    /// gateway is a router: it holds no sandboxes, and sends each request to a host
    /// (--peers, --peer-url, --create-url; docs/kubernetes.md).
    #[arg(long, value_name = "SOCKET")]
    pub server: Option<PathBuf>,

    /// The API keys: one `KEY TENANT` a line (`#` starts a comment), optionally
    /// followed by the tenant's own quotas, `max-sandboxes=N` and `max-memory=SIZE` (in
    /// place of --max-sandboxes-per-tenant and --max-memory-per-tenant). Each key is a
    /// tenant's (E2B's `X-API-Key`, so `e2b_` and hex digits for the SDK); a tenant sees
    /// and touches only its own sandboxes. Needed with --server; a router given them
    /// refuses unknown keys itself (without, it lets any well-formed key on to the
    /// host, which checks it).
    #[arg(long, value_name = "FILE")]
    pub api_keys: Option<PathBuf>,

    /// This host's name (e.g. its StatefulSet pod's, brig-host-2; 1 to 24 lowercase
    /// letters, digits and inner '-'): every sandbox id it makes is `{NAME}-{session}`,
    /// so that any gateway can tell whose a sandbox is.
    #[arg(long, value_name = "NAME")]
    pub host_id: Option<String>,

    /// Where another host's gateway is, `{host}` standing for its name, e.g.
    /// `http://{host}.brig-hosts:3000`: a request for a sandbox whose id names another
    /// host goes there (streaming both ways); a host that does not answer within 1s is
    /// taken as gone (the SDK's NotFound).
    #[arg(long, value_name = "TEMPLATE")]
    pub peer_url: Option<String>,

    /// The hosts, `NAME` or `NAME=URL` (its own URL, instead of --peer-url's), comma
    /// separated: a router asks every one for lists, and sends creates to them in turn
    /// unless --create-url is given.
    #[arg(long, value_name = "NAME[=URL],...")]
    pub peers: Option<String>,

    /// A router's creates go here (e.g. the hosts' Service, whose balancing spreads
    /// them), asked up to 3 times while it answers 503 (a host draining) or not at all.
    #[arg(long, value_name = "URL")]
    pub create_url: Option<String>,

    /// On SIGTERM: not ready and no creates at once; running sandboxes go on for this
    /// long (or until none is left), then are ended, and the gateway exits 0. Match
    /// Kubernetes' terminationGracePeriodSeconds (less a few seconds).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub drain_grace: crate::units::Span,

    /// Sandboxes one tenant may have at once (paused ones count); more creates are
    /// refused (429, the SDK's RateLimitException) until one ends. 0: no cap of the
    /// gateway's own (the server's --max-sessions still holds for all tenants together).
    /// A tenant's `max-sandboxes=N` in --api-keys overrides it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_sandboxes_per_tenant: usize,

    /// Memory one tenant's sandboxes may hold at once: the sum of their jails' memory
    /// limits (the server's --memory, or the template's `memory`), paused sandboxes
    /// too. A create past it is refused (429, the SDK's RateLimitException) until one is
    /// killed; a template without a memory limit cannot be created under it. A tenant's
    /// `max-memory=SIZE` in --api-keys overrides it. Default: none.
    #[arg(long, value_name = "SIZE")]
    pub max_memory_per_tenant: Option<crate::units::Size>,

    /// Streams open at once, all tenants together (envd's process and watch streams,
    /// the interpreter's cells; each holds a thread and a connection to the server);
    /// more are refused (Connect's resource_exhausted, the SDK's RateLimitException)
    /// until one ends.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_streams: usize,

    /// Streams one tenant may have open at once, so that others still find room
    /// [default: --max-streams divided among the --api-keys file's tenants, at most four
    /// ways].
    #[arg(long, value_name = "N")]
    pub max_streams_per_tenant: Option<usize>,

    /// Upgraded connections (WebSockets to a sandbox's port) relayed at once, all
    /// tenants together; more are answered 503 until one closes.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_tunnels: usize,

    /// Upgraded connections one tenant may have relayed at once; more are answered 429
    /// [default: --max-tunnels divided among the --api-keys file's tenants, at most four
    /// ways].
    #[arg(long, value_name = "N")]
    pub max_tunnels_per_tenant: Option<usize>,

    /// E2B templates, a YAML mapping: each template's name to the options of its
    /// sandboxes (brig-config(5)'s keys: `profile`, `rootfs`, `memory`, `env`, `net`,
    /// `allow-net`, ...), on top of the server's defaults and held to its policy. Built
    /// in: `base` and `code-interpreter-v1` (the server's default session, or the roots
    /// of --template-roots), which the file may redefine. An unknown templateID is
    /// refused (400) naming the known ones.
    #[arg(long, value_name = "FILE")]
    pub templates: Option<PathBuf>,

    /// Make the built-in templates hermetic: `base` runs in the root DIR/base and
    /// `code-interpreter-v1` in DIR/code-interpreter-v1, each if that root is there
    /// (built by `brig rootfs build e2b-base DIR/base` and `brig rootfs build
    /// e2b-code-interpreter DIR/code-interpreter-v1`), seeing nothing of the host's /usr.
    /// The server must let clients bind there (`brig serve --allow-bind-under DIR`). A
    /// template of --templates of the same name wins.
    #[arg(long, value_name = "DIR")]
    pub template_roots: Option<PathBuf>,

    /// Serve TLS (HTTP/1.1 and HTTP/2 by ALPN) with this certificate chain (PEM, the
    /// server's first; for the code-interpreter SDK's host form, one for `*.DOMAIN`).
    /// Needs --tls-key.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, RSA or EC).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The operator's API keys each tenant's sandboxes use without seeing them: one
    /// `TENANT NAME=env:VAR|file:PATH HOST[:PORT][,HOST...] [body]` a line (values read at start;
    /// the server's network must allow the hosts). See README "Secrets".
    #[arg(long, value_name = "FILE")]
    pub tenant_secrets: Option<PathBuf>,

    /// Append one JSON line per request to FILE (created 0600): time, request id, tenant
    /// (never the key), method, path, sandbox and port, status, bytes in and out, duration,
    /// and what a create or kill did. Written by a thread of its own behind a bounded
    /// queue: lines a slow disk leaves no room for are dropped, counted on /metrics and
    /// in the log (docs/e2b.md, "Audit log").
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
}

/// The tenants, by API key, and the quotas the file gives some of them.
#[derive(Clone, Debug, Default)]
pub struct ApiKeys {
    tenants: HashMap<String, String>,
    overrides: HashMap<String, Overrides>,
}

impl ApiKeys {
    /// Reads `path`: one `KEY TENANT [max-sandboxes=N] [max-memory=SIZE]` a line; blank
    /// lines and `#` comments are skipped.
    pub fn read(path: &Path) -> Result<ApiKeys> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::input(format!(
                "--api-keys {}: cannot read it: {err}; give a file of `KEY TENANT` lines",
                path.display()
            ))
        })?;
        ApiKeys::parse(&text, &path.display().to_string())
    }

    /// The keys of `text`, read from `origin` (for errors: `origin:line`).
    pub fn parse(text: &str, origin: &str) -> Result<ApiKeys> {
        let mut keys = ApiKeys::default();
        for (index, line) in text.lines().enumerate() {
            let at = format!("--api-keys {origin}:{}", index + 1);
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let [key, tenant, ref settings @ ..] = words[..] else {
                return Err(Error::input(format!(
                    "{at}: {} words; write one `KEY TENANT` a line (e.g. `e2b_0123abcd alice`)",
                    words.len()
                )));
            };
            if key.len() < 16 || !key.bytes().all(|byte| byte.is_ascii_graphic()) {
                return Err(Error::input(format!(
                    "{at}: the key is {} characters; give at least 16 printable characters (the SDK wants `e2b_` and hex digits)",
                    key.len()
                )));
            }
            if tenant.len() > 64
                || !tenant
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"-_.@".contains(&byte))
            {
                return Err(Error::input(format!(
                    "{at}: tenant {tenant:?}: use 1 to 64 letters, digits, '-', '_', '.' or '@'"
                )));
            }
            let own = settings_of(settings, &at)?;
            if let Some(first) = keys.overrides.get(tenant)
                && *first != own
                && own != Overrides::default()
            {
                return Err(Error::input(format!(
                    "{at}: tenant {tenant:?}'s quotas differ from those of its earlier line; give them once (or the same on each line)"
                )));
            }
            if own != Overrides::default() {
                keys.overrides.insert(tenant.into(), own);
            }
            if keys.tenants.insert(key.into(), tenant.into()).is_some() {
                return Err(Error::input(format!(
                    "{at}: this key is listed twice; give each key one tenant"
                )));
            }
        }
        if keys.tenants.is_empty() {
            return Err(Error::input(format!(
                "--api-keys {origin}: no keys; write one `KEY TENANT` a line"
            )));
        }
        Ok(keys)
    }

    /// The quotas the file gives tenants, by tenant.
    /// How many tenants the keys name (a tenant may have several keys).
    pub fn tenant_count(&self) -> usize {
        self.tenants
            .values()
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    pub fn overrides(&self) -> HashMap<String, Overrides> {
        self.overrides.clone()
    }

    /// The tenant whose key this is.
    pub fn tenant(&self, key: &str) -> Option<&str> {
        self.tenants.get(key).map(String::as_str)
    }
}

/// A key line's settings after its tenant: `max-sandboxes=N`, `max-memory=SIZE`.
fn settings_of(settings: &[&str], at: &str) -> Result<Overrides> {
    let mut own = Overrides::default();
    for setting in settings {
        let bad = |why: String| {
            Error::input(format!(
                "{at}: {setting:?}: {why}; after `KEY TENANT` write `max-sandboxes=N` or `max-memory=SIZE` (e.g. 4G)"
            ))
        };
        let (name, value) = setting
            .split_once('=')
            .ok_or_else(|| bad("not a setting".into()))?;
        match name {
            "max-sandboxes" => {
                let most: usize = value
                    .parse()
                    .ok()
                    .filter(|most| *most > 0)
                    .ok_or_else(|| bad("not a number of sandboxes from 1".into()))?;
                own.sandboxes = Some(most);
            }
            "max-memory" => {
                let size: crate::units::Size = value.parse().map_err(bad)?;
                if size.0 == 0 {
                    return Err(bad("no memory at all".into()));
                }
                own.memory = Some(size);
            }
            _ => return Err(bad("no such setting".into())),
        }
    }
    Ok(own)
}

#[cfg(test)]
mod tests {
    use super::ApiKeys;

    #[test]
    fn a_key_file_names_a_tenant_per_key() {
        let keys = ApiKeys::parse(
            "# the team\ne2b_0123456789abcdef alice\n\n  e2b_fedcba9876543210   bob  # ops\n",
            "keys",
        )
        .unwrap();
        assert_eq!(keys.tenant("e2b_0123456789abcdef"), Some("alice"));
        assert_eq!(keys.tenant("e2b_fedcba9876543210"), Some("bob"));
        assert_eq!(keys.tenant("e2b_0000000000000000"), None);
        assert!(keys.overrides().is_empty());
    }

    #[test]
    fn a_key_line_may_give_its_tenants_quotas() {
        let keys = ApiKeys::parse(
            "e2b_0123456789abcdef alice max-memory=4G max-sandboxes=3\n\
             e2b_0123456789abcde0 alice\n\
             e2b_fedcba9876543210 bob max-sandboxes=1\n",
            "keys",
        )
        .unwrap();
        assert_eq!(keys.tenant("e2b_0123456789abcde0"), Some("alice"));
        let overrides = keys.overrides();
        let alice = overrides["alice"];
        assert_eq!(
            (alice.sandboxes, alice.memory),
            (Some(3), Some(crate::units::Size(4 << 30)))
        );
        assert_eq!(
            (overrides["bob"].sandboxes, overrides["bob"].memory),
            (Some(1), None)
        );
    }

    #[test]
    fn a_bad_line_is_named_with_its_fix() {
        for (text, expected) in [
            (
                "e2b_0123456789abcdef\n",
                "keys:1: 1 words; write one `KEY TENANT`",
            ),
            (
                "\ne2b_0123456789abcdef a b\n",
                "keys:2: \"b\": not a setting; after `KEY TENANT` write `max-sandboxes=N`",
            ),
            (
                "e2b_0123456789abcdef a max-memory=12Q\n",
                "keys:1: \"max-memory=12Q\": '12Q' is not a size",
            ),
            (
                "e2b_0123456789abcdef a max-sandboxes=0\n",
                "keys:1: \"max-sandboxes=0\": not a number of sandboxes from 1",
            ),
            (
                "e2b_0123456789abcdef a max-cpus=2\n",
                "keys:1: \"max-cpus=2\": no such setting",
            ),
            (
                "e2b_0123456789abcdef a max-memory=1G\ne2b_fedcba9876543210 a max-memory=2G\n",
                "keys:2: tenant \"a\"'s quotas differ",
            ),
            (
                "short alice\n",
                "keys:1: the key is 5 characters; give at least 16",
            ),
            (
                "e2b_0123456789abcdef a/b\n",
                "keys:1: tenant \"a/b\": use 1 to 64",
            ),
            (
                "e2b_0123456789abcdef a\ne2b_0123456789abcdef b\n",
                "keys:2: this key is listed twice",
            ),
            ("# nothing\n", "keys: no keys"),
        ] {
            let err = ApiKeys::parse(text, "keys").unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
