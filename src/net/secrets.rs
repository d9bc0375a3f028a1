//! Secrets that never enter the jail (`--secret NAME=env:VAR|file:PATH`,
//! `--secret-host NAME=HOST[:PORT]`, `--upstream-ca FILE`): inside the jail `NAME` holds a
//! random per-run placeholder; for a host entitled to the secret brig terminates the
//! jail's TLS with a leaf signed by a certificate authority made for this jail at start
//! (in memory only; the jail trusts it through its synthesized CA bundle), swaps the
//! placeholder in each request head for the real value (`forward::terminate`), and
//! connects upstream with rustls, verifying the real certificate against the host's roots
//! plus `--upstream-ca`. Every other connection is relayed as before, never decrypted.
//!
//! The real values live only here, in the supervisor's memory: nothing that is printed,
//! serialized (`brig check`, the verdict) or written shows them.

use crate::error::{Error, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, pem::PemObject};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Serialize, Serializer};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Where the jail finds its CA bundle (the host's roots and the jail's own CA).
pub const CA_BUNDLE: &str = "/etc/brig-ca-bundle.pem";
/// The variables that point common TLS clients at [`CA_BUNDLE`].
pub const CA_VARIABLES: [&str; 5] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    // git's libcurl (GnuTLS on Debian) reads none of the above.
    "GIT_SSL_CAINFO",
];
/// The host's bundle the jail's one starts from, when it has one.
const HOST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One secret: its name in the jail, the value that replaces the placeholder, and the
/// hosts entitled to it.
pub struct Secret {
    pub name: String,
    /// The value's one copy in this process (zeroed by [`Secrets::forget`] in the jail's
    /// init, which starts as a copy of the supervisor).
    value: Mutex<Vec<u8>>,
    pub placeholder: String,
    /// (host, port; None: any port).
    pub hosts: Vec<(String, Option<u16>)>,
    /// `--secret-body`: the placeholder is replaced in request bodies too (text, JSON
    /// and form bodies up to 1 MiB, `forward::body`).
    pub body: bool,
}

impl Secret {
    pub fn value(&self) -> Vec<u8> {
        self.value
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    pub fn entitles(&self, host: &str, port: u16) -> bool {
        self.hosts
            .iter()
            .any(|(name, only)| name == host && only.is_none_or(|only| only == port))
    }
}

/// The jail's secrets, its CA, the leaves it signed (one per host, cached) and the
/// upstream trust.
pub struct Secrets {
    pub secrets: Vec<Secret>,
    /// `--secret-strict`: a placeholder sent to a host not entitled to it ends the
    /// connection.
    pub strict: bool,
    ca: Issuer<'static, KeyPair>,
    ca_pem: String,
    upstream: Arc<ClientConfig>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.secrets.iter().map(|s| s.name.as_str()).collect();
        write!(f, "Secrets({names:?})")
    }
}

/// `brig check` and the plan show each secret by name and host, never its value.
impl Serialize for Secrets {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        struct Shown<'a>(&'a Secret);
        impl Serialize for Shown<'_> {
            fn serialize<S: Serializer>(
                &self,
                serializer: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                let hosts: Vec<String> = self
                    .0
                    .hosts
                    .iter()
                    .map(|(host, port)| match port {
                        Some(port) => format!("{host}:{port}"),
                        None => host.clone(),
                    })
                    .collect();
                let mut shown = serializer.serialize_struct("Secret", 3)?;
                shown.serialize_field("name", &self.0.name)?;
                shown.serialize_field("hosts", &hosts)?;
                if self.0.body {
                    shown.serialize_field("body", &true)?;
                }
                shown.end()
            }
        }
        let mut seq = serializer.serialize_seq(Some(self.secrets.len()))?;
        for secret in &self.secrets {
            seq.serialize_element(&Shown(secret))?;
        }
        seq.end()
    }
}

/// The policy's secrets as `brig check` shows them.
pub fn shown<S: Serializer>(
    secrets: &Option<Arc<Secrets>>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match secrets {
        Some(secrets) => secrets.as_ref().serialize(serializer),
        None => serializer.serialize_none(),
    }
}

/// What the operator asked for, before anything is read.
pub struct Asked<'a> {
    pub secret: &'a [String],
    pub secret_host: &'a [String],
    pub upstream_ca: Option<&'a Path>,
    pub strict: bool,
    /// `--secret-body NAME`: the secrets replaced in request bodies too.
    pub secret_body: &'a [String],
    /// Secrets a client of `brig serve` gave with the value (a session's `secrets`).
    pub given: &'a [Given],
}

/// A secret given with its value, as a session's creation carries it over the server's
/// socket (`secrets: [{name, value, hosts}]`; the clients read `env:`/`file:` on their
/// side). Its `Debug` never shows the value, and it is never serialized back: no reply,
/// log or error holds it.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Given {
    pub name: String,
    pub value: String,
    /// `HOST` or `HOST:PORT`, each entitled to it.
    pub hosts: Vec<String>,
    /// Replaced in request bodies too (as `--secret-body`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub body: bool,
}

impl fmt::Debug for Given {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Given({}, hosts {:?})", self.name, self.hosts)
    }
}

impl Given {
    /// `NAME=env:VAR|file:PATH` (read now, on the client's side) with its
    /// `NAME=HOST[:PORT]` entitlements: what `brig session create --secret` sends.
    pub fn read(
        secret: &[String],
        secret_host: &[String],
        secret_body: &[String],
    ) -> Result<Vec<Given>> {
        let mut given: Vec<Given> = Vec::new();
        for text in secret {
            let read = read_secret(text)?;
            given.push(Given {
                body: secret_body.contains(&read.name),
                value: String::from_utf8_lossy(&read.value()).into_owned(),
                name: read.name,
                hosts: Vec::new(),
            });
        }
        for text in secret_host {
            let (name, host) = text.split_once('=').ok_or_else(|| {
                Error::input(format!(
                    "--secret-host {text}: expected NAME=HOST[:PORT], e.g. API_KEY=api.example.com"
                ))
            })?;
            let Some(secret) = given.iter_mut().find(|secret| secret.name == name) else {
                return Err(Error::input(format!(
                    "--secret-host {text}: no --secret is named {name}; add --secret {name}=env:VAR"
                )));
            };
            parse_host(host).map_err(|why| Error::input(format!("--secret-host {text}: {why}")))?;
            secret.hosts.push(host.to_string());
        }
        check_body_names(secret_body, |name| {
            given.iter().any(|secret| secret.name == name)
        })?;
        Ok(given)
    }
}

impl Secrets {
    /// Reads each secret's value, checks every flag (one-line errors naming the flag and
    /// the fix), makes the jail's CA and the upstream trust. None: no `--secret`.
    pub fn plan(asked: &Asked) -> Result<Option<Secrets>> {
        if asked.secret.is_empty() && asked.given.is_empty() {
            if let Some(text) = asked.secret_host.first() {
                return Err(Error::input(format!(
                    "--secret-host {text}: no --secret names it; add --secret NAME=env:VAR or --secret NAME=file:PATH"
                )));
            }
            return Ok(None);
        }
        let mut secrets: Vec<Secret> = Vec::new();
        for text in asked.secret {
            let secret = read_secret(text)?;
            if secrets.iter().any(|earlier| earlier.name == secret.name) {
                return Err(Error::input(format!(
                    "--secret {text}: {} is given twice; give each secret once",
                    secret.name
                )));
            }
            secrets.push(secret);
        }
        for text in asked.secret_host {
            let (name, host) = text.split_once('=').ok_or_else(|| {
                Error::input(format!(
                    "--secret-host {text}: expected NAME=HOST[:PORT], e.g. API_KEY=api.example.com"
                ))
            })?;
            let entitled = parse_host(host)
                .map_err(|why| Error::input(format!("--secret-host {text}: {why}")))?;
            let Some(secret) = secrets.iter_mut().find(|secret| secret.name == name) else {
                return Err(Error::input(format!(
                    "--secret-host {text}: no --secret is named {name}; add --secret {name}=env:VAR"
                )));
            };
            secret.hosts.push(entitled);
        }
        check_body_names(asked.secret_body, |name| {
            secrets.iter().any(|secret| secret.name == name)
        })?;
        for secret in &mut secrets {
            secret.body = asked.secret_body.contains(&secret.name);
        }
        for (index, given) in asked.given.iter().enumerate() {
            secrets.push(check_given(index, given, &secrets)?);
        }
        if let Some(secret) = secrets.iter().find(|secret| secret.hosts.is_empty()) {
            return Err(Error::input(format!(
                "--secret {}: no host is entitled to it; add --secret-host {}=HOST",
                secret.name, secret.name
            )));
        }
        let (ca, ca_pem) =
            make_ca().map_err(|err| Error::setup(format!("making the jail's CA: {err}")))?;
        let upstream = upstream_config(asked.upstream_ca)?;
        Ok(Some(Secrets {
            secrets,
            strict: asked.strict,
            ca,
            ca_pem,
            upstream,
            leaves: Mutex::new(HashMap::new()),
        }))
    }

    /// Zeroes every copy of a value in this process's writable memory but the one each
    /// secret holds: the supervisor (or a server's runner) calls it right before it
    /// creates the jail, whose init starts as a copy of its memory — where a runner has
    /// freed copies of the request that gave a session its secrets, and an `env:VAR`
    /// value sits in the environment block.
    pub fn scrub_copies(&self) {
        let guards: Vec<_> = self
            .secrets
            .iter()
            .map(|secret| {
                secret
                    .value
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
            })
            .collect();
        let keep: Vec<std::ops::Range<usize>> = guards
            .iter()
            .map(|value| value.as_ptr() as usize..value.as_ptr() as usize + value.len())
            .collect();
        // A short value could match live bytes that are not a copy of it (a path, a
        // word): those are left alone.
        let values: Vec<&[u8]> = guards
            .iter()
            .map(|value| value.as_slice())
            .filter(|value| value.len() >= SCRUBBED_LENGTH)
            .collect();
        let _ = scrub_own_memory(&values, &keep);
    }

    /// Zeroes the value each secret holds: the jail's init calls it first thing (it
    /// starts as a copy of the supervisor, and needs no value; [`Secrets::scrub_copies`]
    /// left no other copy).
    pub fn forget(&self) {
        for secret in &self.secrets {
            let mut value = secret
                .value
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            value.fill(0);
            std::hint::black_box(&*value);
            value.clear();
        }
    }

    /// Does some secret entitle `host` on `port` (so brig terminates its TLS)?
    pub fn terminates(&self, host: &str, port: u16) -> bool {
        self.secrets
            .iter()
            .any(|secret| secret.entitles(host, port))
    }

    /// The secrets whose placeholder appears in `bytes` (a request head).
    pub fn sent_in(&self, bytes: &[u8]) -> Vec<&Secret> {
        self.secrets
            .iter()
            .filter(|secret| find(bytes, secret.placeholder.as_bytes()).is_some())
            .collect()
    }

    /// The jail's CA bundle: the host's roots (when it has a bundle) and the jail's CA.
    pub fn ca_bundle(&self) -> String {
        let mut bundle = std::fs::read_to_string(HOST_BUNDLE).unwrap_or_default();
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(&self.ca_pem);
        bundle
    }

    /// The environment the jail gets: each secret's placeholder, and the CA variables.
    pub fn environment(&self) -> Vec<String> {
        let mut env: Vec<String> = self
            .secrets
            .iter()
            .map(|secret| format!("{}={}", secret.name, secret.placeholder))
            .collect();
        env.extend(CA_VARIABLES.iter().map(|var| format!("{var}={CA_BUNDLE}")));
        env
    }

    pub fn upstream(&self) -> Arc<ClientConfig> {
        Arc::clone(&self.upstream)
    }

    /// The server side brig shows the jail for `host`: a leaf for that name signed by the
    /// jail's CA, made once per host.
    pub fn leaf(&self, host: &str) -> std::result::Result<Arc<ServerConfig>, String> {
        let mut leaves = self
            .leaves
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(Arc::clone(config));
        }
        let made = || -> std::result::Result<ServerConfig, Box<dyn std::error::Error>> {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(vec![host.to_string()])?;
            params.distinguished_name.push(DnType::CommonName, host);
            let cert = params.signed_by(&key, &self.ca)?;
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
            let config = ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(vec![cert.der().clone()], key)?;
            Ok(config)
        };
        let mut config =
            made().map_err(|err| format!("making the jail's certificate for {host}: {err}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(host.to_string(), Arc::clone(&config));
        Ok(config)
    }
}

/// Overwrites with zeros every copy of each of `values` in this process's private
/// writable mappings (heap, stack, data), read and written through /proc/self/mem, but
/// for the bytes in `keep` (the copies kept) and the scan's own window.
fn scrub_own_memory(values: &[&[u8]], keep: &[std::ops::Range<usize>]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    const WINDOW: usize = 1 << 20;
    let longest = values.iter().map(|value| value.len()).max().unwrap_or(0);
    if longest == 0 {
        return Ok(());
    }
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let memory = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    let mut window = vec![0u8; WINDOW + longest];
    let own = window.as_ptr() as usize..window.as_ptr() as usize + window.len();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with("rw") || !perms.ends_with('p') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let mut at = start;
        while at < end {
            // Each window overlaps the next by `longest` bytes: a copy across the edge
            // is whole in one of them.
            let length = (end - at).min(window.len());
            let Ok(read) = memory.read_at(&mut window[..length], at as u64) else {
                break;
            };
            for value in values {
                let mut from = 0;
                while let Some(found) = find(&window[from..read], value) {
                    let address = at + from + found;
                    let inside = |range: &std::ops::Range<usize>| range.contains(&address);
                    if !keep.iter().any(inside) && !inside(&own) {
                        memory.write_at(&vec![0u8; value.len()], address as u64)?;
                    }
                    from += found + 1;
                }
            }
            if at + length >= end {
                break;
            }
            at += length - longest;
        }
    }
    window.fill(0);
    std::hint::black_box(&window);
    Ok(())
}

/// What the verdict and stderr say when a placeholder went where its secret is not
/// entitled (it went on unchanged).
pub fn not_entitled(secret: &Secret, host: &str) -> String {
    format!(
        "secret placeholder sent to {host}, not entitled ({}); add --secret-host {}={host} if it should be",
        secret.name, secret.name
    )
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `NAME=env:VAR` or `NAME=file:PATH`, read now.
fn read_secret(text: &str) -> Result<Secret> {
    let usage = "expected NAME=env:VAR or NAME=file:PATH, e.g. API_KEY=env:API_KEY";
    let (name, source) = text
        .split_once('=')
        .ok_or_else(|| Error::input(format!("--secret {text}: {usage}")))?;
    if !valid_name(name) {
        return Err(Error::input(format!(
            "--secret {text}: {name:?} is not an environment variable name; use letters, digits and _"
        )));
    }
    let value = if let Some(var) = source.strip_prefix("env:") {
        std::env::var(var).map_err(|_| {
            Error::input(format!(
                "--secret {name}=env:{var}: {var} is not set in brig's environment; export it first"
            ))
        })?
    } else if let Some(path) = source.strip_prefix("file:") {
        let mut read = std::fs::read_to_string(path).map_err(|err| {
            Error::input(format!(
                "--secret {name}=file:{path}: cannot read it ({err}); give a readable file"
            ))
        })?;
        // Trimmed in place: no second copy of the value left behind in freed memory.
        read.truncate(read.trim_end_matches(['\n', '\r']).len());
        read
    } else {
        return Err(Error::input(format!("--secret {text}: {usage}")));
    };
    if value.is_empty() || value.contains(['\r', '\n', '\0']) {
        return Err(Error::input(format!(
            "--secret {name}: the value is empty or holds a line break or NUL; give one line"
        )));
    }
    Ok(Secret {
        name: name.to_string(),
        value: Mutex::new(value.into_bytes()),
        placeholder: placeholder(name),
        hosts: Vec::new(),
        body: false,
    })
}

/// A client's secret, checked as `--secret` is (one-line errors naming the field and the
/// fix, never the value).
fn check_given(index: usize, given: &Given, earlier: &[Secret]) -> Result<Secret> {
    let field = format!("secrets[{index}]");
    if !valid_name(&given.name) {
        return Err(Error::input(format!(
            "{field}.name {:?}: not an environment variable name; use letters, digits and _",
            given.name
        )));
    }
    let name = &given.name;
    if earlier.iter().any(|secret| &secret.name == name) {
        return Err(Error::input(format!(
            "{field}.name {name}: given twice (or also the server's own --secret); give each secret once"
        )));
    }
    if given.value.is_empty() || given.value.contains(['\r', '\n', '\0']) {
        return Err(Error::input(format!(
            "{field}.value ({name}): empty or holds a line break or NUL; give one line"
        )));
    }
    if given.value.len() > MAX_VALUE {
        return Err(Error::input(format!(
            "{field}.value ({name}): longer than {MAX_VALUE} bytes; give a shorter value"
        )));
    }
    if given.hosts.is_empty() {
        return Err(Error::input(format!(
            "{field}.hosts ({name}): no host is entitled to it; give at least one, e.g. [\"api.example.com\"]"
        )));
    }
    let hosts = given
        .hosts
        .iter()
        .map(|host| {
            parse_host(host).map_err(|why| Error::input(format!("{field}.hosts {host}: {why}")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Secret {
        name: name.clone(),
        value: Mutex::new(given.value.clone().into_bytes()),
        placeholder: placeholder(name),
        hosts,
        body: given.body,
    })
}

/// Each `--secret-body NAME` names a secret.
fn check_body_names(secret_body: &[String], named: impl Fn(&str) -> bool) -> Result<()> {
    match secret_body.iter().find(|name| !named(name)) {
        Some(name) => Err(Error::input(format!(
            "--secret-body {name}: no --secret is named {name}; add --secret {name}=env:VAR or drop it"
        ))),
        None => Ok(()),
    }
}

/// The shortest value [`Secrets::scrub_copies`] looks for (API keys are longer).
const SCRUBBED_LENGTH: usize = 12;

/// The longest value a client may give (a header's worth).
const MAX_VALUE: usize = 8 * 1024;

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A random per-run placeholder: `brig-secret-NAME-` and 32 hex digits.
fn placeholder(name: &str) -> String {
    let mut random = [0u8; 16];
    // ring's generator (the kernel's getrandom), the one the CA's key comes from.
    use rustls::crypto::ring::default_provider;
    let _ = default_provider().secure_random.fill(&mut random);
    let hex: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("brig-secret-{}-{hex}", name.to_ascii_lowercase())
}

fn parse_host(text: &str) -> std::result::Result<(String, Option<u16>), String> {
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|port| *port > 0)
                .ok_or_else(|| format!("{port:?} is not a port; give 1-65535"))?;
            (host, Some(port))
        }
        None => (text, None),
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let valid = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if !valid {
        return Err(format!(
            "{host:?} is not a host name; give a name like api.example.com"
        ));
    }
    Ok((host, port))
}

fn make_ca() -> std::result::Result<(Issuer<'static, KeyPair>, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params
        .distinguished_name
        .push(DnType::CommonName, "brig jail CA (this run only)");
    let cert = params.self_signed(&key)?;
    Ok((Issuer::new(params, key), cert.pem()))
}

/// rustls for the upstream side: the host's roots plus `--upstream-ca`.
fn upstream_config(upstream_ca: Option<&Path>) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = upstream_ca {
        let shown = path.display();
        let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect())
            .map_err(|err| {
                Error::input(format!(
                    "--upstream-ca {shown}: cannot read PEM certificates ({err}); give a PEM file of CA certificates"
                ))
            })?;
        if certs.is_empty() {
            return Err(Error::input(format!(
                "--upstream-ca {shown}: holds no certificate; give a PEM file of CA certificates"
            )));
        }
        for cert in certs {
            roots.add(cert).map_err(|err| {
                Error::input(format!(
                    "--upstream-ca {shown}: a certificate is not usable as a root ({err})"
                ))
            })?;
        }
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|err| Error::setup(format!("rustls: {err}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // brig judges HTTP/1 inside (the jail side offers only that, too).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(secret: &[&str], hosts: &[&str]) -> Result<Option<Secrets>> {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Secrets::plan(&Asked {
            secret: &owned(secret),
            secret_host: &owned(hosts),
            upstream_ca: None,
            strict: false,
            secret_body: &[],
            given: &[],
        })
    }

    fn key_file(value: &str) -> (tempfile_path::Guard, String) {
        let guard = tempfile_path::Guard::new(value);
        let spec = format!("API_KEY=file:{}", guard.0.display());
        (guard, spec)
    }

    /// A file removed on drop (the unit tests have no TempDir of their own).
    mod tempfile_path {
        pub struct Guard(pub std::path::PathBuf);
        impl Guard {
            pub fn new(contents: &str) -> Guard {
                let path = std::env::temp_dir().join(format!(
                    "bt-secret-unit-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                std::fs::write(&path, contents).unwrap();
                Guard(path)
            }
        }
        impl Drop for Guard {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    #[test]
    fn the_value_is_read_and_never_shown() {
        let (_file, spec) = key_file("sk-unit-value\n");
        let secrets = planned(&[&spec], &["API_KEY=api.example.com:443"])
            .unwrap()
            .unwrap();
        let secret = &secrets.secrets[0];
        assert_eq!(secret.value(), b"sk-unit-value");
        secrets.forget();
        assert_eq!(secrets.secrets[0].value(), b"");
        assert!(secret.placeholder.starts_with("brig-secret-api_key-"));
        assert!(secrets.terminates("api.example.com", 443));
        assert!(!secrets.terminates("api.example.com", 8443));
        assert!(!secrets.terminates("other.example.com", 443));
        let shown = serde_json::to_string(&secrets).unwrap();
        assert_eq!(
            shown,
            r#"[{"name":"API_KEY","hosts":["api.example.com:443"]}]"#
        );
        assert!(!format!("{secrets:?}").contains("sk-unit-value"));
        let env = secrets.environment().join("\n");
        assert!(!env.contains("sk-unit-value") && env.contains("SSL_CERT_FILE="));
        assert!(secrets.ca_bundle().ends_with("-----END CERTIFICATE-----\n"));
    }

    #[test]
    fn placeholders_differ_per_run() {
        let (_file, spec) = key_file("sk-unit-value");
        let hosts = ["API_KEY=api.example.com"];
        let one = planned(&[&spec], &hosts).unwrap().unwrap();
        let two = planned(&[&spec], &hosts).unwrap().unwrap();
        assert_ne!(one.secrets[0].placeholder, two.secrets[0].placeholder);
    }

    #[test]
    fn the_leaf_is_made_once_per_host() {
        let (_file, spec) = key_file("sk-unit-value");
        let secrets = planned(&[&spec], &["API_KEY=api.example.com"])
            .unwrap()
            .unwrap();
        let first = secrets.leaf("api.example.com").unwrap();
        let again = secrets.leaf("api.example.com").unwrap();
        assert!(Arc::ptr_eq(&first, &again));
    }

    #[test]
    fn hosts_are_checked() {
        assert_eq!(
            parse_host("API.Example.com."),
            Ok(("api.example.com".into(), None))
        );
        assert_eq!(parse_host("a.test:8443"), Ok(("a.test".into(), Some(8443))));
        assert!(parse_host("a.test:0").is_err());
        assert!(parse_host("a test").is_err());
        assert!(parse_host("").is_err());
    }

    #[test]
    fn no_secret_is_no_terminator() {
        assert!(planned(&[], &[]).unwrap().is_none());
        let err = planned(&[], &["API_KEY=a.test"]).unwrap_err().to_string();
        assert!(err.contains("--secret-host API_KEY=a.test"), "{err}");
    }
}
