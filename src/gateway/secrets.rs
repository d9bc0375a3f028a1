//! `--tenant-secrets FILE`: the operator's API keys a tenant's sandboxes use without
//! seeing them. E2B's create API has no field for a secret (its `network.rules` inject
//! headers whose values the client sends in the clear, and `envVars` hand the value to
//! the sandbox), so the gateway's operator owns the mapping: each of a tenant's sandboxes
//! is created with the tenant's secrets (`session_create`'s `secrets`), which the jail
//! holds as placeholders (README "Secrets").
//!
//! The file: one `TENANT NAME=env:VAR|file:PATH HOST[:PORT][,HOST[:PORT]...] [body]` a
//! line (`body`: replaced in request bodies too, as `--secret-body`; blank lines and `#`
//! comments skipped); the values are read once, at start, from the
//! gateway's environment or files, and are never shown (errors name the line).

use crate::error::{Error, Result};
use crate::net::secrets::Given;
use std::collections::HashMap;
use std::path::Path;

/// Each tenant's secrets, with their values.
#[derive(Debug, Default)]
pub struct TenantSecrets {
    tenants: HashMap<String, Vec<Given>>,
}

impl TenantSecrets {
    /// Reads `path` (None: no tenant has secrets).
    pub fn read(path: Option<&Path>) -> Result<TenantSecrets> {
        let Some(path) = path else {
            return Ok(TenantSecrets::default());
        };
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::input(format!(
                "--tenant-secrets {}: cannot read it: {err}; give a file of `TENANT NAME=env:VAR HOST` lines",
                path.display()
            ))
        })?;
        TenantSecrets::parse(&text, &path.display().to_string())
    }

    /// The secrets of `text`, read from `origin` (for errors: `origin:line`).
    pub fn parse(text: &str, origin: &str) -> Result<TenantSecrets> {
        let mut secrets = TenantSecrets::default();
        for (index, line) in text.lines().enumerate() {
            let at = format!("--tenant-secrets {origin}:{}", index + 1);
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let (tenant, spec, hosts, body) = match words[..] {
                [tenant, spec, hosts] => (tenant, spec, hosts, false),
                [tenant, spec, hosts, "body"] => (tenant, spec, hosts, true),
                _ => {
                    return Err(Error::input(format!(
                        "{at}: {} words; write one `TENANT NAME=env:VAR|file:PATH HOST[,HOST] [body]` a line (e.g. `alice OPENAI_API_KEY=env:ALICE_OPENAI api.openai.com`)",
                        words.len()
                    )));
                }
            };
            let name = spec.split('=').next().unwrap_or_default();
            let entitled: Vec<String> = hosts
                .split(',')
                .map(|host| format!("{name}={host}"))
                .collect();
            let body: Vec<String> = body.then(|| name.to_string()).into_iter().collect();
            let mut read = Given::read(&[spec.to_string()], &entitled, &body)
                .map_err(|err| Error::input(format!("{at}: {err}")))?;
            let mine = secrets.tenants.entry(tenant.to_string()).or_default();
            if mine.iter().any(|earlier| earlier.name == name) {
                return Err(Error::input(format!(
                    "{at}: tenant {tenant} has {name} twice; give each of its secrets one line"
                )));
            }
            mine.append(&mut read);
        }
        Ok(secrets)
    }

    /// The secrets `tenant`'s sandboxes get.
    pub fn of(&self, tenant: &str) -> Vec<Given> {
        self.tenants.get(tenant).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::TenantSecrets;

    #[test]
    fn each_tenant_gets_its_own_and_nothing_is_shown() {
        let dir = std::env::temp_dir().join(format!("bt-tenant-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, "sk-unit-tenant\n").unwrap();
        let text = format!(
            "# keys\nalice API_KEY=file:{} api.example.com,other.example.com:8443 body\n\n",
            file.display()
        );
        let secrets = TenantSecrets::parse(&text, "f").unwrap();
        let alice = secrets.of("alice");
        assert_eq!(alice.len(), 1);
        assert_eq!(alice[0].name, "API_KEY");
        assert_eq!(alice[0].value, "sk-unit-tenant");
        assert_eq!(
            alice[0].hosts,
            ["api.example.com", "other.example.com:8443"]
        );
        assert!(alice[0].body);
        assert!(secrets.of("bob").is_empty());
        assert!(!format!("{secrets:?}").contains("sk-unit-tenant"));
        let twice = format!("{text}alice API_KEY=file:{} a.test\n", file.display());
        let err = TenantSecrets::parse(&twice, "f").unwrap_err().to_string();
        assert!(err.contains("f:4") && err.contains("twice"), "{err}");
        let err = TenantSecrets::parse("alice API_KEY=env:BT_UNSET_VARIABLE a.test", "f")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--tenant-secrets f:1: --secret API_KEY=env:BT_UNSET_VARIABLE"),
            "{err}"
        );
        let err = TenantSecrets::parse("alice API_KEY", "f")
            .unwrap_err()
            .to_string();
        assert!(err.contains("f:1: 2 words"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
