//! Who may touch which sandbox. The REST API's caller is the tenant of its `X-API-Key`;
//! each sandbox is a brig session whose metadata names its tenant (and its envd access
//! token when created `secure`), under keys the gateway keeps for itself. A tenant sees
//! only sessions of its own; another tenant's id is answered as one that does not exist.
//!
//! envd requests carry no API key (E2B's SDK sends only the sandbox's id, and its access
//! token for a `secure` sandbox): as in E2B, the id (128 random bits, brig's session id)
//! is what reaches a sandbox, and `secure` adds the token.
//!
//! Owners are cached by sandbox id so that an envd call costs no extra round trip to the
//! server; a miss reloads the cache from `session_list` (replacing it whole, so closed
//! and expired sandboxes leave it).

use super::backend::{Backend, Outcome};
use super::config::ApiKeys;
use super::error::ApiError;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// The metadata keys the gateway keeps for itself; a client's keys may not start so.
pub const RESERVED: &str = "brig-gateway.";
pub const TENANT_KEY: &str = "brig-gateway.tenant";
pub const TEMPLATE_KEY: &str = "brig-gateway.template";
pub const TOKEN_KEY: &str = "brig-gateway.envd-token";
/// The token a sandbox's ports need (`allowPublicTraffic: false`).
pub const TRAFFIC_KEY: &str = "brig-gateway.traffic-token";
/// The `Host` a sandbox's ports' servers see (`maskRequestHost`).
pub const MASK_KEY: &str = "brig-gateway.mask-host";

/// A sandbox's owner, its envd access token if it has one, its traffic access token and
/// host mask if it was made with them.
#[derive(Clone, Debug)]
pub struct Owner {
    pub tenant: String,
    pub token: Option<String>,
    pub traffic_token: Option<String>,
    pub mask_host: Option<String>,
}

impl Owner {
    /// The owner a session's metadata names; none for a session the gateway did not
    /// create.
    pub fn of(session: &Value) -> Option<Owner> {
        let metadata = &session["metadata"];
        Some(Owner {
            tenant: metadata[TENANT_KEY].as_str()?.to_string(),
            token: metadata[TOKEN_KEY].as_str().map(str::to_string),
            traffic_token: metadata[TRAFFIC_KEY].as_str().map(str::to_string),
            mask_host: metadata[MASK_KEY].as_str().map(str::to_string),
        })
    }
}

/// A miss reloads the owners at most this often: ids nobody owns (guessed, long gone)
/// cost the server one `session_list` per period, not one per request. Every sandbox
/// this gateway creates is cached at once, so a miss within it is an id it does not
/// serve.
const RELOAD_AT_MOST_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a sandbox this gateway created stays cached though a list did not show it:
/// a list that was asked for before the sandbox was created (and answered after) must
/// not drop it.
const CREATED_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// An owner in the cache, and when this gateway created the sandbox (None: known from a
/// list).
#[derive(Clone, Debug)]
struct Cached {
    owner: Owner,
    created: Option<std::time::Instant>,
}

/// The API keys and the owners of the sandboxes seen.
pub struct Tenants {
    keys: ApiKeys,
    owners: Mutex<HashMap<String, Cached>>,
    /// When the owners were last reloaded.
    reloaded: Mutex<Option<std::time::Instant>>,
}

impl Tenants {
    pub fn new(keys: ApiKeys) -> Tenants {
        Tenants {
            keys,
            owners: Mutex::default(),
            reloaded: Mutex::default(),
        }
    }

    /// The caller's tenant, from its `X-API-Key`; 401 without a known one.
    pub fn caller(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        let key = headers
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "no X-API-Key header; send one of this gateway's API keys",
                )
            })?;
        self.keys.tenant(key).map(str::to_string).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "X-API-Key: not a key of this gateway; ask its operator for one",
            )
        })
    }

    /// Remembers the owner of a sandbox just created.
    pub fn created(&self, id: &str, owner: Owner) {
        let created = Some(std::time::Instant::now());
        self.owners
            .lock()
            .unwrap()
            .insert(id.into(), Cached { owner, created });
    }

    /// Forgets a killed or ended sandbox (the server, which answers a `session_close`
    /// once it has forgotten the session, lists it no more either).
    pub fn forget(&self, id: &str) {
        self.owners.lock().unwrap().remove(id);
    }

    /// The sandbox's owner: from the cache, or else from the server's list (which
    /// replaces the cache). None: no such sandbox of the gateway's.
    pub fn owner(&self, backend: &Backend, id: &str) -> Outcome<Option<Owner>> {
        if let Some(owner) = self.cached(id) {
            return Ok(Some(owner));
        }
        {
            let mut reloaded = self.reloaded.lock().unwrap();
            if reloaded.is_some_and(|at| at.elapsed() < RELOAD_AT_MOST_EVERY) {
                return Ok(None);
            }
            *reloaded = Some(std::time::Instant::now());
        }
        let sessions = backend.list(BTreeMap::new())?;
        self.refresh(&sessions);
        Ok(self.cached(id))
    }

    /// The tenant of sandbox `id`, if cached (as it is once a request to it was routed;
    /// no call to the server: the quotas' and the audit log's, for requests without a key).
    pub fn tenant_of(&self, id: &str) -> Option<String> {
        self.cached(id).map(|owner| owner.tenant)
    }

    /// The cached owner of `id`.
    fn cached(&self, id: &str) -> Option<Owner> {
        let owners = self.owners.lock().unwrap();
        owners.get(id).map(|cached| cached.owner.clone())
    }

    /// Replaces the cache with the sessions of a whole `session_list` (and the sandboxes
    /// created lately, which it may not show yet).
    pub fn refresh(&self, sessions: &[Value]) {
        let mut owners: HashMap<String, Cached> = sessions
            .iter()
            .filter_map(|session| {
                let owner = Owner::of(session)?;
                let created = None;
                Some((
                    session["session"].as_str()?.to_string(),
                    Cached { owner, created },
                ))
            })
            .collect();
        let mut cache = self.owners.lock().unwrap();
        for (id, cached) in cache.drain() {
            if cached
                .created
                .is_some_and(|at| at.elapsed() < CREATED_KEPT_FOR)
            {
                owners.entry(id).or_insert(cached);
            }
        }
        *cache = owners;
    }
}

/// A fresh access token: 32 hex digits from the kernel's random source.
pub fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session(id: &str, tenant: &str) -> Value {
        json!({"session": id, "metadata": {TENANT_KEY: tenant, TOKEN_KEY: "t0ken"}})
    }

    #[test]
    fn a_list_replaces_the_owners_but_keeps_sandboxes_just_created() {
        let tenants = Tenants::new(ApiKeys::default());
        let owner = |tenant: &str| Owner {
            tenant: tenant.into(),
            token: None,
            traffic_token: None,
            mask_host: None,
        };
        tenants.created("new", owner("alice"));
        tenants.refresh(&[
            session("old", "bob"),
            json!({"session": "not-ours", "metadata": {}}),
        ]);
        // The list, asked for before "new" was created, does not drop it.
        assert_eq!(tenants.cached("new").unwrap().tenant, "alice");
        let old = tenants.cached("old").unwrap();
        assert_eq!(
            (old.tenant.as_str(), old.token.as_deref()),
            ("bob", Some("t0ken"))
        );
        assert!(
            tenants.cached("not-ours").is_none(),
            "a session the gateway did not create"
        );
        // A later list without "old" drops it; a killed sandbox is forgotten at once.
        tenants.forget("new");
        assert!(tenants.cached("new").is_none(), "a killed sandbox stayed");
        tenants.refresh(&[]);
        assert!(tenants.cached("old").is_none());
    }
}
