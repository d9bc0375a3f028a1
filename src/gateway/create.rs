//! What a `POST /sandboxes` makes: the jail of its template (`--templates FILE`, with
//! built-in `base` and `code-interpreter-v1`), on E2B's conventions (the user `user`, home
//! and workspace `/home/user`), with the network its `allow_internet_access` and
//! `network` (`allowOut` / `denyOut`) ask for, as brig's policy can say it exactly.

use super::Gateway;
use super::error::ApiError;
use crate::error::{Error, Result};
use crate::options::{JailOptions, NetMode};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// E2B's user, whose home is the sandbox's workspace and every command's working directory.
pub const E2B_USER: &str = "user";

/// The templates every gateway serves unless `--templates` says otherwise: both the
/// server's default session (its jail sees the host's /usr: a shell, python3, node, git,
/// curl; numpy, pandas and matplotlib where the host has them), or, with
/// `--template-roots DIR`, the hermetic root `DIR/NAME` of each.
pub const BUILT_IN: [&str; 2] = ["base", "code-interpreter-v1"];

/// The shipped rootfs manifest (`brig rootfs build MANIFEST DIR/NAME`) of each built-in
/// template, for `--template-roots`.
pub const BUILT_IN_MANIFESTS: [(&str, &str); 2] = [
    ("base", "e2b-base"),
    ("code-interpreter-v1", "e2b-code-interpreter"),
];

/// The templates, by name: the options of each one's sessions (brig-config(5)'s keys, a
/// `profile` expanded here), on top of the server's defaults.
#[derive(Debug)]
pub struct Templates {
    by_name: BTreeMap<String, JailOptions>,
}

impl Default for Templates {
    fn default() -> Templates {
        Templates {
            by_name: BUILT_IN
                .iter()
                .map(|name| (name.to_string(), JailOptions::default()))
                .collect(),
        }
    }
}

impl Templates {
    /// The gateway's templates: the built-in ones (hermetic in `roots`' roots, when
    /// given), with those of `templates` added or in their place.
    pub fn load(templates: Option<&Path>, roots: Option<&Path>) -> Result<Templates> {
        let mut built_in = Templates::default();
        if let Some(roots) = roots {
            for (name, root) in Templates::roots_in(roots)? {
                built_in.by_name.insert(
                    name.to_string(),
                    JailOptions {
                        rootfs: Some(root),
                        ..JailOptions::default()
                    },
                );
            }
        }
        match templates {
            // A template of the file is the operator's word for its name.
            Some(path) => Templates::read_over(built_in, path),
            None => Ok(built_in),
        }
    }

    /// `--template-roots DIR`: the built-in templates whose root `DIR/NAME` is there (built
    /// by `brig rootfs build`), at least one of them.
    fn roots_in(dir: &Path) -> Result<Vec<(&'static str, PathBuf)>> {
        // Absolute but not resolved: the server compares a root with its
        // `--allow-bind-under` directories as written.
        let dir = std::path::absolute(dir)
            .and_then(|dir| std::fs::metadata(&dir).map(|_| dir))
            .map_err(|err| {
                Error::input(format!(
                    "--template-roots {}: {err}; give the directory holding the roots `base` and `code-interpreter-v1`",
                    dir.display()
                ))
            })?;
        let found: Vec<_> = BUILT_IN
            .iter()
            .map(|name| (*name, dir.join(name)))
            .filter(|(_, root)| root.join(".brig-rootfs-digest").is_file())
            .collect();
        if found.is_empty() {
            let builds: Vec<String> = BUILT_IN_MANIFESTS
                .iter()
                .map(|(name, manifest)| {
                    format!(
                        "`brig rootfs build {manifest} {}`",
                        dir.join(name).display()
                    )
                })
                .collect();
            return Err(Error::input(format!(
                "--template-roots {}: holds no root of a built-in template; build them with {}",
                dir.display(),
                builds.join(" and ")
            )));
        }
        Ok(found)
    }

    /// `templates`, with those of `path` (a YAML mapping: template name to a brig
    /// config's keys) added or in their place.
    fn read_over(templates: Templates, path: &Path) -> Result<Templates> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::input(format!(
                "--templates {}: cannot read it: {err}; give a YAML file of `NAME: {{brig config keys}}`",
                path.display()
            ))
        })?;
        Templates::parse_over(templates, &text, &format!("--templates {}", path.display()))
    }

    #[cfg(test)]
    fn parse(text: &str, origin: &str) -> Result<Templates> {
        Templates::parse_over(Templates::default(), text, origin)
    }

    fn parse_over(mut templates: Templates, text: &str, origin: &str) -> Result<Templates> {
        if text.trim().is_empty() {
            return Ok(templates);
        }
        let named: BTreeMap<String, Option<JailOptions>> = serde_saphyr::from_str(text)
            .map_err(|err| Error::input(brig_rootfs::yaml_error_line(&err, text, origin)))?;
        for (name, options) in named {
            let at = format!("{origin}: template {name:?}");
            if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"-_.".contains(&byte))
            {
                return Err(Error::input(format!(
                    "{at}: name it with 1 to 64 letters, digits, '-', '_' or '.'"
                )));
            }
            let mut options = options.unwrap_or_default();
            if options.user.is_some() {
                return Err(Error::input(format!(
                    "{at}: `user` is the gateway's own (E2B's user `{E2B_USER}`, home /home/{E2B_USER}); leave it out"
                )));
            }
            if !options.command.is_empty() {
                return Err(Error::input(format!(
                    "{at}: `command`: a sandbox runs the commands its client starts; leave it out"
                )));
            }
            if let Some(profile) = options.profile.take() {
                options = crate::config::load_profile(&profile)
                    .map_err(|err| Error::input(format!("{at}: {err}")))?
                    .overlay(options);
                // A profile's program is for `brig run`; a sandbox runs its client's.
                options.command.clear();
            }
            templates.by_name.insert(name, options);
        }
        Ok(templates)
    }

    /// Template `name`'s options, or a 400 naming the templates there are.
    pub fn get(&self, name: &str) -> std::result::Result<&JailOptions, ApiError> {
        self.by_name.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            ApiError::bad_request(format!(
                "templateID: {name:?} is not a template of this gateway; use one of {}",
                known.join(", ")
            ))
        })
    }
}

/// The network a sandbox gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Egress {
    /// The template's (the server's, unless the template says otherwise): E2B's default,
    /// where everything goes out.
    Template,
    /// Nothing out (`allow_internet_access: false`, or `denyOut` of all traffic with no
    /// `allowOut`).
    Nothing,
    /// Filtered by exactly these rules: `denyOut` of all traffic, with an `allowOut` list
    /// (an allow list: `deny` empty), or `denyOut` of some blocks (a deny list, with the
    /// `allowOut` addresses that win over it).
    Only(Rules),
}

/// A filtered sandbox's rules, in brig's spelling (`--allow-net`, `--deny-net`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

/// E2B's `SandboxNetworkConfig`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Network {
    #[serde(default)]
    allow_out: Option<Vec<String>>,
    #[serde(default)]
    deny_out: Option<Vec<String>>,
    #[serde(default)]
    allow_public_traffic: Option<bool>,
    #[serde(default)]
    mask_request_host: Option<String>,
    #[serde(default)]
    egress_proxy: Option<Value>,
    #[serde(default)]
    rules: Option<Value>,
}

/// E2B's "all traffic" (`ALL_TRAFFIC` in its SDKs).
const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// E2B's words when `allowOut` names a domain without `denyOut` of all traffic.
const DOMAINS_REQUIRE_BLOCK_ALL: &str = "When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all other traffic.";

/// An E2B address entry (`8.8.8.8`, `10.0.0.0/8`, `2001:db8::/32`) as a brig rule
/// (`10.0.0.0/8`, `[2001:db8::/32]`), or None when it is no address. As E2B, a CIDR's
/// host bits are dropped (`10.0.0.1/8` is 10.0.0.0/8) and the unspecified address
/// (`0.0.0.0`, `::`, as a CIDR's base too) is none, `0.0.0.0/0` excepted.
fn address_rule(entry: &str) -> Option<String> {
    if let Ok(ip) = entry.parse::<std::net::IpAddr>() {
        return match ip {
            _ if ip.is_unspecified() => None,
            std::net::IpAddr::V6(v6) => Some(format!("[{v6}]")),
            _ => Some(ip.to_string()),
        };
    }
    let net = entry.parse::<ipnet::IpNet>().ok()?;
    if net.addr().is_unspecified() && entry != ALL_TRAFFIC {
        return None;
    }
    Some(match net.trunc() {
        ipnet::IpNet::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    })
}

/// Who reaches a sandbox's ports and as what host (`network.allowPublicTraffic`,
/// `network.maskRequestHost`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ingress {
    /// `allowPublicTraffic: false`: requests to its ports need its traffic access token.
    pub private: bool,
    /// The `Host` its ports' servers see, `${PORT}` standing for the port.
    pub mask_host: Option<String>,
}

/// E2B's stand-in for the port in `maskRequestHost`.
pub const PORT_PLACEHOLDER: &str = "${PORT}";

/// The ingress `network` asks for; a `maskRequestHost` that is no `HOST[:PORT]` (ASCII:
/// letters, digits, '-', '.', `${PORT}`) is a 400 in E2B's words.
pub fn ingress(network: Option<&Value>) -> std::result::Result<Ingress, ApiError> {
    let network: Network = match network {
        None | Some(Value::Null) => return Ok(Ingress::default()),
        // A malformed one is egress()'s to refuse, which is asked first.
        Some(value) => serde_json::from_value(value.clone()).unwrap_or_default(),
    };
    let mask_host = match network.mask_request_host {
        None => None,
        Some(mask) => {
            let plain = mask.replace(PORT_PLACEHOLDER, "1");
            let (host, port) = match plain.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (plain.as_str(), None),
            };
            let good_host = !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"-.".contains(&byte));
            let good_port = port.is_none_or(|port| port.parse::<u16>().is_ok_and(|p| p != 0));
            if !good_host || !good_port {
                return Err(ApiError::bad_request(format!(
                    "network.maskRequestHost: mask request host is not valid: {mask}; give HOST[:PORT] in ASCII (letters, digits, '-', '.'; {PORT_PLACEHOLDER} for the port)"
                )));
            }
            Some(mask)
        }
    };
    Ok(Ingress {
        private: network.allow_public_traffic == Some(false),
        mask_host,
    })
}

/// The network of `allow_internet_access` and `network`, as E2B means them: without a
/// `denyOut` everything goes out; `denyOut` of all traffic (or `allow_internet_access:
/// false`) lets out only what `allowOut` lists; `denyOut` of some blocks refuses them and
/// lets the rest out, `allowOut` winning over it. What E2B refuses is refused with its
/// status (400): a `denyOut` entry that is no IP or CIDR, an `allowOut` domain without
/// `denyOut` of all traffic.
pub fn egress(
    allow_internet_access: Option<bool>,
    network: Option<&Value>,
) -> std::result::Result<Egress, ApiError> {
    let network: Network = match network {
        None | Some(Value::Null) => Network::default(),
        Some(value) => serde_json::from_value(value.clone()).map_err(|err| {
            ApiError::bad_request(format!(
                "network: {err}; give allowOut and denyOut (lists of strings)"
            ))
        })?,
    };
    let not_served = |field: &str| {
        ApiError::bad_request(format!(
            "network.{field}: not served by brig gateway (see docs/e2b.md); leave it out"
        ))
    };
    if network
        .egress_proxy
        .as_ref()
        .is_some_and(|proxy| !proxy.is_null())
    {
        return Err(not_served("egressProxy"));
    }
    if network
        .rules
        .as_ref()
        .is_some_and(|rules| rules.as_object().is_none_or(|rules| !rules.is_empty()))
    {
        return Err(not_served("rules"));
    }
    let deny = network.deny_out.unwrap_or_default();
    let mut deny_rules = Vec::new();
    for (index, entry) in deny.iter().enumerate() {
        let rule = address_rule(entry).ok_or_else(|| {
            ApiError::bad_request(format!(
                "network.denyOut[{index}]: invalid denied CIDR {entry}; give an IP address or a CIDR block (E2B denies no domains; list what may go out in allowOut with {ALL_TRAFFIC:?} denied)"
            ))
        })?;
        deny_rules.push(rule);
    }
    let block_all = deny.iter().any(|entry| entry == ALL_TRAFFIC);
    let allow = network.allow_out.unwrap_or_default();
    let mut allow_rules = Vec::new();
    let mut domains = false;
    for (index, entry) in allow.iter().enumerate() {
        if let Some(rule) = address_rule(entry) {
            allow_rules.push(rule);
            continue;
        }
        let looks_like_an_address =
            entry.contains('/') || entry.parse::<std::net::IpAddr>().is_ok();
        if looks_like_an_address
            || entry.is_empty()
            || entry.len() > 253
            || !entry
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b".-*_".contains(&byte))
        {
            return Err(ApiError::bad_request(format!(
                "network.allowOut[{index}]: {entry:?}: invalid allowed address; give a domain (example.com, *.example.com), an IP address or a CIDR block"
            )));
        }
        domains = true;
        allow_rules.push(entry.clone());
    }
    if domains && !block_all {
        return Err(ApiError::bad_request(format!(
            "network.allowOut: {DOMAINS_REQUIRE_BLOCK_ALL}"
        )));
    }
    if block_all || allow_internet_access == Some(false) {
        return Ok(match allow_rules.is_empty() {
            true => Egress::Nothing,
            false => Egress::Only(Rules {
                allow: allow_rules,
                deny: Vec::new(),
            }),
        });
    }
    if deny_rules.is_empty() {
        // E2B: without a denyOut, everything goes out; allowOut adds nothing.
        return Ok(Egress::Template);
    }
    Ok(Egress::Only(Rules {
        allow: allow_rules,
        deny: deny_rules,
    }))
}

/// `PUT /sandboxes/{id}/network` (the SDK's `update_network`): a live sandbox's network
/// replaced, as at create (`allowOut` / `denyOut` / `allowInternetAccess`), through
/// `session_network` (open connections the new rules refuse are cut). Only a sandbox
/// whose jail filters (the server's `--net filtered`) can change; letting everything out
/// again (no `denyOut`) is refused: the gateway does not hold the rules it was made with.
pub async fn update_network(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    bytes: Bytes,
) -> std::result::Result<StatusCode, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let mut network: Value = super::rest::body(&bytes)?;
    let allow_internet_access = match network.as_object_mut() {
        Some(fields) => match fields.remove("allowInternetAccess") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(allow)) => Some(allow),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "allowInternetAccess: {other}; give true or false"
                )));
            }
        },
        None => None,
    };
    let rules = match egress(allow_internet_access, Some(&network))? {
        Egress::Nothing => Rules::default(),
        Egress::Only(rules) => rules,
        Egress::Template => {
            return Err(ApiError::bad_request(
                "network: letting everything out again is not served on a live sandbox (brig gateway does not hold the rules it was made with); deny \"0.0.0.0/0\" with allowOut listing what may go out, or create a new sandbox",
            ));
        }
    };
    super::rest::blocking(&gateway, move |gateway| {
        super::rest::owned(gateway, &tenant, &id)?;
        gateway
            .backend
            .set_rules(&id, rules)
            .map_err(|err| super::rest::gone_is_not_found(err, &id))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The jail of a new sandbox: its template's, as E2B's user, with its network.
pub fn sandbox_options(template: &JailOptions, egress: &Egress, env: Vec<String>) -> JailOptions {
    let mut options = template.clone();
    options.user = Some(E2B_USER.into());
    // E2B's envd sets USER; the template's and the create's variables come after it.
    options.env = std::iter::once(format!("USER={E2B_USER}"))
        .chain(options.env)
        .chain(env)
        .collect();
    match egress {
        Egress::Template => {}
        Egress::Nothing => {
            options.net = Some(NetMode::None);
            options.allow_net.clear();
            options.add_host.clear();
        }
        // Created filtered, then narrowed to exactly these rules (`backend.rs`).
        Egress::Only(_) => {
            options.net = Some(NetMode::Filtered);
        }
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_are_built_in_or_named_in_a_file() {
        let templates = Templates::default();
        assert!(templates.get("base").is_ok());
        assert!(templates.get("code-interpreter-v1").is_ok());
        let unknown = templates.get("desktop").unwrap_err();
        assert_eq!(unknown.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(
            unknown
                .message
                .contains("\"desktop\" is not a template of this gateway; use one of base, code-interpreter-v1"),
            "{}",
            unknown.message
        );

        let templates = Templates::parse(
            "small:\n  memory: 64M\n  env: [SIZE=small]\nbase:\n  env: [FROM=file]\npy:\n  profile: python\n",
            "t.yaml",
        )
        .unwrap();
        assert_eq!(templates.get("small").unwrap().env, ["SIZE=small"]);
        assert_eq!(templates.get("base").unwrap().env, ["FROM=file"]);
        assert!(templates.get("code-interpreter-v1").is_ok());
        let python = templates.get("py").unwrap();
        assert!(python.profile.is_none() && python.command.is_empty());
        assert_eq!(
            python.time_limit,
            crate::config::load_profile("python").unwrap().time_limit
        );
    }

    #[test]
    fn template_roots_make_the_built_in_templates_hermetic() {
        let dir = std::env::temp_dir().join(format!("brig-template-roots-{}", std::process::id()));
        let root = dir.join("code-interpreter-v1");
        std::fs::create_dir_all(&root).unwrap();
        // Not a root brig built: no built-in template's root is there.
        let err = Templates::load(None, Some(&dir)).unwrap_err().to_string();
        assert!(
            err.contains(
                "holds no root of a built-in template; build them with `brig rootfs build e2b-base"
            ) && !err.contains('\n'),
            "{err}"
        );
        std::fs::write(root.join(".brig-rootfs-digest"), "sha256:0\n").unwrap();
        let templates = Templates::load(None, Some(&dir)).unwrap();
        assert_eq!(
            templates.get("code-interpreter-v1").unwrap().rootfs,
            Some(root.clone())
        );
        // `base` has no root there: the server's default session, as without the flag.
        assert_eq!(templates.get("base").unwrap().rootfs, None);
        // A template of --templates of the same name is the operator's word.
        let file = dir.join("templates.yaml");
        std::fs::write(&file, "code-interpreter-v1:\n  memory: 64M\n").unwrap();
        let templates = Templates::load(Some(&file), Some(&dir)).unwrap();
        assert_eq!(templates.get("code-interpreter-v1").unwrap().rootfs, None);
        let missing = Templates::load(None, Some(&dir.join("absent"))).unwrap_err();
        assert!(
            missing.to_string().starts_with("--template-roots "),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_template_file_is_one_line_naming_where() {
        for (text, expected) in [
            ("a:\n  bogus: 1\n", "t.yaml:2"),
            ("a b:\n  memory: 1M\n", "template \"a b\": name it"),
            ("a:\n  user: root\n", "`user` is the gateway's own"),
            ("a:\n  command: [sh]\n", "`command`"),
            (
                "a:\n  profile: ruby\n",
                "template \"a\": --profile: unknown profile",
            ),
        ] {
            let err = Templates::parse(text, "t.yaml").unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn the_network_is_what_e2b_means_or_refused() {
        let texts = |rules: &[&str]| rules.iter().map(|r| r.to_string()).collect::<Vec<_>>();
        let only = |allow: &[&str], deny: &[&str]| {
            Egress::Only(Rules {
                allow: texts(allow),
                deny: texts(deny),
            })
        };
        for (allow_internet, network, expected) in [
            (None, None, Egress::Template),
            (Some(true), Some(json!({})), Egress::Template),
            (Some(false), None, Egress::Nothing),
            // Without denyOut, E2B lets everything out: allowOut addresses add nothing.
            (
                None,
                Some(json!({"allowOut": ["1.2.3.4"]})),
                Egress::Template,
            ),
            (
                None,
                Some(json!({"denyOut": ["0.0.0.0/0"]})),
                Egress::Nothing,
            ),
            (
                None,
                Some(
                    json!({"allowOut": ["a.test", "*.b.test", "10.1.2.3", "10.0.0.0/8"], "denyOut": ["0.0.0.0/0"]}),
                ),
                only(&["a.test", "*.b.test", "10.1.2.3", "10.0.0.0/8"], &[]),
            ),
            (
                Some(false),
                Some(json!({"allowOut": ["10.1.2.3"]})),
                only(&["10.1.2.3"], &[]),
            ),
            // Some blocks denied, the rest out; allowOut wins over them.
            (
                None,
                Some(json!({"denyOut": ["8.8.8.8", "10.0.0.1/8", "2001:db8::/32"]})),
                only(&[], &["8.8.8.8", "10.0.0.0/8", "[2001:db8::/32]"]),
            ),
            (
                None,
                Some(json!({"allowOut": ["10.1.2.3", "::1"], "denyOut": ["10.0.0.0/8"]})),
                only(&["10.1.2.3", "[::1]"], &["10.0.0.0/8"]),
            ),
            // All traffic among others: an allow list.
            (
                None,
                Some(json!({"allowOut": ["a.test"], "denyOut": ["1.1.1.1", "0.0.0.0/0"]})),
                only(&["a.test"], &[]),
            ),
        ] {
            assert_eq!(
                egress(allow_internet, network.as_ref()).unwrap(),
                expected,
                "{allow_internet:?} {network:?}"
            );
        }
        for (allow_internet, network, expected) in [
            // E2B's refusals, with its words.
            (
                None,
                json!({"denyOut": ["example.com"]}),
                "network.denyOut[0]: invalid denied CIDR example.com",
            ),
            (
                None,
                json!({"denyOut": ["8.8.8.8", "0.0.0.0"]}),
                "network.denyOut[1]: invalid denied CIDR 0.0.0.0",
            ),
            (
                None,
                json!({"allowOut": ["a.test"], "denyOut": ["8.8.8.8"]}),
                "network.allowOut: When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out",
            ),
            (
                None,
                json!({"allowOut": ["a.test"]}),
                "you must include 'ALL_TRAFFIC'",
            ),
            (
                Some(false),
                json!({"allowOut": ["a.test"]}),
                "you must include 'ALL_TRAFFIC'",
            ),
            (
                None,
                json!({"allowOut": ["a b"], "denyOut": ["0.0.0.0/0"]}),
                "network.allowOut[0]",
            ),
            (
                None,
                json!({"allowOut": ["10.0.0.0/33"], "denyOut": ["0.0.0.0/0"]}),
                "network.allowOut[0]",
            ),
            (
                None,
                json!({"allowOut": ["tcp://a"], "denyOut": ["0.0.0.0/0"]}),
                "network.allowOut[0]",
            ),
            (None, json!({"rules": {"a.test": []}}), "network.rules"),
            (None, json!({"allowOut": "a.test"}), "network: invalid type"),
            (None, json!({"bogus": 1}), "network: unknown field"),
        ] {
            let err = egress(allow_internet, Some(&network)).unwrap_err();
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(err.message.contains(expected), "{network}: {}", err.message);
            assert!(!err.message.contains('\n'), "{}", err.message);
        }
    }

    #[test]
    fn ingress_is_a_token_and_a_host_mask_or_refused() {
        assert_eq!(ingress(None).unwrap(), Ingress::default());
        assert_eq!(
            ingress(Some(&json!({"allowPublicTraffic": true}))).unwrap(),
            Ingress::default()
        );
        assert_eq!(
            ingress(Some(
                &json!({"allowPublicTraffic": false, "maskRequestHost": "app.example:${PORT}"})
            ))
            .unwrap(),
            Ingress {
                private: true,
                mask_host: Some("app.example:${PORT}".into()),
            }
        );
        for bad in [
            "",
            "a b",
            "app.example:http",
            "app.example:0",
            "ünicode.example",
            "a/b",
        ] {
            let err = ingress(Some(&json!({ "maskRequestHost": bad }))).unwrap_err();
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(
                err.message
                    .starts_with("network.maskRequestHost: mask request host is not valid"),
                "{bad}: {}",
                err.message
            );
        }
    }

    #[test]
    fn a_sandbox_is_e2b_s_user_with_its_network() {
        let template = JailOptions {
            env: vec!["T=1".into()],
            allow_net: vec!["a.test".into()],
            ..JailOptions::default()
        };
        let options = sandbox_options(&template, &Egress::Template, vec!["C=2".into()]);
        assert_eq!(options.user.as_deref(), Some("user"));
        assert_eq!(options.env, ["USER=user", "T=1", "C=2"]);
        assert_eq!(options.allow_net, ["a.test"]);
        let options = sandbox_options(&template, &Egress::Nothing, vec![]);
        assert_eq!(
            (options.net, options.allow_net.len()),
            (Some(NetMode::None), 0)
        );
        let rules = Rules {
            allow: vec!["b.test".into()],
            deny: vec![],
        };
        let options = sandbox_options(&template, &Egress::Only(rules), vec![]);
        assert_eq!(options.net, Some(NetMode::Filtered));
    }
}
