//! Fair shares per tenant: what one tenant may hold of this gateway's host, so that no
//! tenant can take it all.
//!
//! - **Quotas** on what a tenant's sandboxes hold: how many (`--max-sandboxes-per-tenant`)
//!   and the memory of their jails (`--max-memory-per-tenant`: the sum of their cgroup
//!   memory limits, paused sandboxes too, whose memory is held), each overridable per
//!   tenant in the API-key file (`max-sandboxes=N`, `max-memory=SIZE`). A create past
//!   either is refused with 429 (the SDK's `RateLimitException`). One tenant's creates
//!   are checked one at a time (a lock per tenant, held across the check and the
//!   create), so two concurrent creates cannot both pass on the same room; the memory
//!   check is made again after the create on the server's own list (exact, whatever the
//!   server's default `--memory`), and a sandbox that does not fit goes at once. Other
//!   tenants' creates are not held up. The quotas are this host's: a router spreading a
//!   tenant over many hosts gives it each host's quota.
//! - **Shares** of the gateway's process-wide caps on streams (`--max-streams`: envd's
//!   process and watch streams, the interpreter's cells) and relayed upgraded
//!   connections (`--max-tunnels`: WebSockets to a sandbox's port): a tenant holds at
//!   most its share of each (`--max-streams-per-tenant`, `--max-tunnels-per-tenant`; by
//!   default the cap divided among the key file's tenants, at most four ways: a lone
//!   tenant has the whole cap, one of many a quarter), so that others still find room. A
//!   share is given back when its stream or connection ends.

use super::Gateway;
use super::backend::NewSession;
use super::error::ApiError;
use axum::http::StatusCode;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// A cap, and how to name it in a refusal (the flag or the key file's setting that set
/// it, which is what the operator changes to raise it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cap {
    pub most: u64,
    pub named: String,
}

/// What one tenant may hold (None: no cap of the gateway's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    pub sandboxes: Option<Cap>,
    /// Bytes of memory limits, summed over the tenant's sandboxes.
    pub memory: Option<Cap>,
}

/// One tenant's settings in the API-key file (`max-sandboxes=N`, `max-memory=SIZE`),
/// in place of the flags' defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub sandboxes: Option<usize>,
    pub memory: Option<crate::units::Size>,
}

/// The quotas of every tenant: the flags' defaults and the key file's overrides.
#[derive(Debug, Default)]
pub struct Quotas {
    /// `--max-sandboxes-per-tenant` (0: none).
    max_sandboxes: usize,
    /// `--max-memory-per-tenant`.
    max_memory: Option<crate::units::Size>,
    overrides: HashMap<String, Overrides>,
    /// A lock per tenant with a quota, held across a create's check and the create.
    creating: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The memory limit the server gives a sandbox whose template names none (its
    /// `--memory`), as the last such create showed it: what the check before a create
    /// counts for one (`Some(None)`: no limit).
    server_memory: Mutex<Option<Option<u64>>>,
}

impl Quotas {
    pub fn new(
        max_sandboxes: usize,
        max_memory: Option<crate::units::Size>,
        overrides: HashMap<String, Overrides>,
    ) -> Quotas {
        Quotas {
            max_sandboxes,
            max_memory,
            overrides,
            creating: Mutex::default(),
            server_memory: Mutex::default(),
        }
    }

    /// `tenant`'s quota.
    pub fn of(&self, tenant: &str) -> Quota {
        let own = self.overrides.get(tenant).copied().unwrap_or_default();
        let sandboxes = match own.sandboxes {
            Some(most) => Some((
                most,
                format!("max-sandboxes={most} of {tenant} in --api-keys"),
            )),
            None => Some((
                self.max_sandboxes,
                format!("--max-sandboxes-per-tenant {}", self.max_sandboxes),
            )),
        };
        let memory = match own.memory {
            Some(size) => Some((
                size.0,
                format!("max-memory={size} of {tenant} in --api-keys"),
            )),
            None => self
                .max_memory
                .map(|size| (size.0, format!("--max-memory-per-tenant {size}"))),
        };
        let cap = |(most, named): (u64, String)| (most != 0).then_some(Cap { most, named });
        Quota {
            sandboxes: sandboxes.and_then(|(most, named)| cap((most as u64, named))),
            memory: memory.and_then(cap),
        }
    }

    /// `tenant`'s create lock.
    fn lock_of(&self, tenant: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut creating = self.creating.lock().unwrap();
        creating.entry(tenant.to_string()).or_default().clone()
    }
}

/// What a tenant's sandboxes hold: how many, and the sum of their memory limits (None:
/// one of them has none, so their memory is not bounded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub sandboxes: u64,
    pub memory: Option<u64>,
}

impl Held {
    /// What `sessions` (a tenant's `session_list` entries) hold.
    pub fn of(sessions: &[Value]) -> Held {
        Held {
            sandboxes: sessions.len() as u64,
            memory: sessions
                .iter()
                .map(|session| session["limits"]["memory"].as_u64())
                .sum(),
        }
    }
}

/// Whether one more sandbox of `tenant`, whose jail's memory limit is `memory` (None: no
/// limit; `Some(0)`: not known yet, checked after the create), fits its `quota` beside
/// what it `held`: the refusal's message says which quota, the use and the fix.
pub fn fits(tenant: &str, quota: &Quota, held: Held, memory: Option<u64>) -> Result<(), String> {
    if let Some(cap) = &quota.sandboxes
        && held.sandboxes + 1 > cap.most
    {
        return Err(format!(
            "tenant {tenant:?} has {} (paused ones count), its most ({}); kill one first, or ask the operator to raise it",
            sandboxes(held.sandboxes),
            cap.named
        ));
    }
    let Some(cap) = &quota.memory else {
        return Ok(());
    };
    let (Some(used), Some(asked)) = (held.memory, memory) else {
        return Err(format!(
            "tenant {tenant:?} has a memory quota ({}) and {} has no memory limit; give the template a `memory` (or the server --memory), on a host where brig writes cgroups",
            cap.named,
            match memory {
                None => "this template's sandbox",
                Some(_) => "one of its sandboxes",
            }
        ));
    };
    if used.saturating_add(asked) > cap.most {
        return Err(format!(
            "tenant {tenant:?} holds {} of memory in {} (paused ones count) and this one asks {}, past its quota ({}); kill one first, or ask the operator to raise it",
            size(used),
            sandboxes(held.sandboxes),
            size(asked),
            cap.named
        ));
    }
    Ok(())
}

/// "1 sandbox", "2 sandboxes".
fn sandboxes(count: u64) -> String {
    match count {
        1 => "1 sandbox".into(),
        _ => format!("{count} sandboxes"),
    }
}

/// Bytes as a size the flags take (`512M`), or a byte count.
fn size(bytes: u64) -> String {
    crate::units::Size(bytes).to_string()
}

/// The template's own memory limit, when it names one (None: the server's default, not
/// known before a create; `Some(None)`: `memory: max`, no limit).
pub fn template_memory(template: &crate::options::JailOptions) -> Option<Option<u64>> {
    template
        .memory
        .map(|limit| limit.value().map(|size| size.0))
}

/// Creates `tenant`'s sandbox if its quota leaves room (else 429 naming the quota, the
/// use and the fix): the sandbox's id. `memory` is the template's (see
/// [`template_memory`]). Without a quota, the create goes straight on.
pub async fn create_within(
    gateway: &Arc<Gateway>,
    tenant: &str,
    memory: Option<Option<u64>>,
    new: NewSession,
) -> Result<String, ApiError> {
    let quota = gateway.quotas.of(tenant);
    if quota == Quota::default() {
        return super::rest::blocking(gateway, move |gateway| Ok(gateway.backend.create(new)?))
            .await;
    }
    // Held by the blocking work itself: a client that hangs up drops this future, not
    // the create under way.
    let one_at_a_time = gateway.quotas.lock_of(tenant).lock_owned().await;
    let tenant = tenant.to_string();
    super::rest::blocking(gateway, move |gateway| {
        let _one_at_a_time = one_at_a_time;
        let over = |message: String| ApiError::new(StatusCode::TOO_MANY_REQUESTS, message);
        let held = Held::of(&super::rest::sandboxes_of(
            gateway,
            &tenant,
            BTreeMap::new(),
        )?);
        // Not known before the first create: checked after it, on what the server made.
        let known = *gateway.quotas.server_memory.lock().unwrap();
        let asked = memory.or(known).unwrap_or(Some(0));
        fits(&tenant, &quota, held, asked).map_err(over)?;
        let id = gateway.backend.create(new)?;
        if quota.memory.is_some() {
            let sessions = super::rest::sandboxes_of(gateway, &tenant, BTreeMap::new())
                .inspect_err(|_| {
                    // Not counted, it may not stay.
                    let _ = gateway.backend.close(&id);
                })?;
            let (own, others): (Vec<Value>, Vec<Value>) = sessions
                .into_iter()
                .partition(|session| session["session"] == id.as_str());
            let asked = own
                .first()
                .map_or(Some(0), |session| session["limits"]["memory"].as_u64());
            if memory.is_none() && !own.is_empty() {
                *gateway.quotas.server_memory.lock().unwrap() = Some(asked);
            }
            let without_quota_of_count = Quota {
                sandboxes: None,
                ..quota.clone()
            };
            if let Err(message) = fits(&tenant, &without_quota_of_count, Held::of(&others), asked) {
                // Nothing has run in it yet: it goes, and the create is refused.
                let _ = gateway.backend.close(&id);
                return Err(over(message));
            }
        }
        Ok(id)
    })
    .await
}

/// One of the gateway's capped resources (streams, tunnels), shared by the tenants: at
/// most `total` held at once, and at most `per_tenant` of them by one tenant.
#[derive(Debug)]
pub struct Shares {
    /// What is shared, for refusals ("streams", "upgraded connections").
    what: &'static str,
    total: Cap,
    per_tenant: Cap,
    held: Mutex<Holders>,
}

#[derive(Debug, Default)]
struct Holders {
    total: usize,
    by_tenant: HashMap<String, usize>,
}

/// Why a share was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The tenant holds its whole share: its own doing (429).
    Tenant(String),
    /// All tenants together hold the whole cap: the gateway is busy (503).
    Everyone(String),
}

impl Refused {
    pub fn message(&self) -> &str {
        match self {
            Refused::Tenant(message) | Refused::Everyone(message) => message,
        }
    }

    /// Its HTTP status where no protocol of its own says one: 429 for the tenant's
    /// share, 503 for the gateway's whole cap.
    pub fn status(&self) -> StatusCode {
        match self {
            Refused::Tenant(_) => StatusCode::TOO_MANY_REQUESTS,
            Refused::Everyone(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Whether one more fits beside `total_held` (of `total`) and `tenant_held` (of
/// `per_tenant`): the decision [`Shares::take`] makes, under its lock.
pub fn share_fits(
    what: &str,
    tenant: &str,
    (total_held, total): (usize, &Cap),
    (tenant_held, per_tenant): (usize, &Cap),
) -> Result<(), Refused> {
    if tenant_held as u64 >= per_tenant.most {
        return Err(Refused::Tenant(format!(
            "tenant {tenant:?} has {tenant_held} {what} open, its share ({}); retry when one ends, or ask the operator to raise it",
            per_tenant.named
        )));
    }
    if total_held as u64 >= total.most {
        return Err(Refused::Everyone(format!(
            "brig gateway has {total_held} {what} open, its most ({}); retry when one ends",
            total.named
        )));
    }
    Ok(())
}

impl Shares {
    /// `total` of `what` (named by its flag `total_flag`), `per_tenant` of them for one
    /// tenant (by `per_tenant_flag`; None: `total` divided among the `tenants`, at most
    /// four ways, at least 1).
    pub fn new(
        what: &'static str,
        (total, total_flag): (usize, &str),
        (per_tenant, per_tenant_flag): (Option<usize>, &str),
        tenants: usize,
    ) -> crate::error::Result<Shares> {
        let bad = |message: String| Err(crate::error::Error::input(message));
        if total == 0 {
            return bad(format!(
                "{total_flag} 0: nothing could be served; give at least 1"
            ));
        }
        let (share, named) = match per_tenant {
            Some(0) => {
                return bad(format!(
                    "{per_tenant_flag} 0: no tenant could open any; give 1 to {total_flag} ({total})"
                ));
            }
            Some(share) if share > total => {
                return bad(format!(
                    "{per_tenant_flag} {share}: more than {total_flag} ({total}); give at most that"
                ));
            }
            Some(share) => (share, format!("{per_tenant_flag} {share}")),
            None => {
                let ways = tenants.clamp(1, 4);
                let share = (total / ways).max(1);
                let named = match ways {
                    1 => format!("{per_tenant_flag}, by default all of {total_flag}: {share}"),
                    ways => format!(
                        "{per_tenant_flag}, by default {total_flag} shared {ways} ways: {share}"
                    ),
                };
                (share, named)
            }
        };
        Ok(Shares {
            what,
            total: Cap {
                most: total as u64,
                named: format!("{total_flag} {total}"),
            },
            per_tenant: Cap {
                most: share as u64,
                named,
            },
            held: Mutex::default(),
        })
    }

    /// One of them for `tenant`, given back when the returned share is dropped.
    pub fn take(self: &Arc<Self>, tenant: &str) -> Result<Share, Refused> {
        let mut held = self.held.lock().unwrap();
        let tenant_held = held.by_tenant.get(tenant).copied().unwrap_or(0);
        share_fits(
            self.what,
            tenant,
            (held.total, &self.total),
            (tenant_held, &self.per_tenant),
        )?;
        held.total += 1;
        *held.by_tenant.entry(tenant.to_string()).or_default() += 1;
        Ok(Share {
            shares: self.clone(),
            tenant: tenant.to_string(),
        })
    }

    /// How many are held now, in all and by `tenant`.
    #[cfg(test)]
    fn held(&self, tenant: &str) -> (usize, usize) {
        let held = self.held.lock().unwrap();
        let by = held.by_tenant.get(tenant).copied().unwrap_or(0);
        (held.total, by)
    }
}

/// A stream or connection held by a tenant, given back when dropped.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    tenant: String,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap();
        held.total -= 1;
        if let Some(count) = held.by_tenant.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                held.by_tenant.remove(&self.tenant);
            }
        }
    }
}

/// A share of `shares` for the tenant owning `sandbox` (the owner the request's routing
/// has just looked up; a sandbox killed since counts as its own tenant's, "").
pub fn share_for(gateway: &Gateway, shares: &Arc<Shares>, sandbox: &str) -> Result<Share, Refused> {
    let tenant = gateway.tenants.tenant_of(sandbox).unwrap_or_default();
    shares.take(&tenant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const M: u64 = 1 << 20;

    fn cap(most: u64, named: &str) -> Option<Cap> {
        Some(Cap {
            most,
            named: named.into(),
        })
    }

    #[test]
    fn the_quota_arithmetic_counts_every_sandbox_and_its_memory() {
        let memory = Quota {
            sandboxes: None,
            memory: cap(1024 * M, "--max-memory-per-tenant 1G"),
        };
        let both = Quota {
            sandboxes: cap(2, "--max-sandboxes-per-tenant 2"),
            ..memory.clone()
        };
        let held = |sandboxes, memory| Held { sandboxes, memory };
        // (quota, held, the new one's memory, refused with these words or fits)
        type Row<'a> = (&'a Quota, Held, Option<u64>, Option<&'a [&'a str]>);
        let table: [Row; 9] = [
            (&Quota::default(), held(100, None), None, None),
            (&memory, held(1, Some(512 * M)), Some(512 * M), None),
            (
                &memory,
                held(2, Some(768 * M)),
                Some(512 * M),
                Some(&[
                    "holds 768M",
                    "in 2 sandboxes",
                    "asks 512M",
                    "--max-memory-per-tenant 1G",
                    "kill one",
                ]),
            ),
            // Not known before the create: fits unless the quota is used up already.
            (&memory, held(2, Some(1024 * M)), Some(0), None),
            (
                &memory,
                held(3, Some(1024 * M + 1)),
                Some(0),
                Some(&["past its quota"]),
            ),
            (
                &memory,
                held(0, Some(0)),
                None,
                Some(&["this template's sandbox has no memory limit", "`memory`"]),
            ),
            (
                &memory,
                held(1, None),
                Some(M),
                Some(&["one of its sandboxes has no memory limit"]),
            ),
            (
                &both,
                held(2, Some(0)),
                Some(M),
                Some(&["has 2 sandboxes", "--max-sandboxes-per-tenant 2"]),
            ),
            (
                &both,
                held(1, Some(512 * M)),
                Some(513 * M),
                Some(&["asks 513M"]),
            ),
        ];
        for (quota, held, asked, refused) in table {
            let verdict = fits("alice", quota, held, asked);
            match refused {
                None => assert_eq!(verdict, Ok(()), "{quota:?} {held:?} {asked:?}"),
                Some(words) => {
                    let message = verdict.expect_err("fitted past its quota");
                    for word in words {
                        assert!(message.contains(word), "{message}: no {word:?}");
                    }
                    assert!(
                        message.contains("\"alice\"") && !message.contains('\n'),
                        "{message}"
                    );
                }
            }
        }
    }

    #[test]
    fn held_sums_the_memory_limits_of_running_and_paused_sandboxes() {
        let entry =
            |memory: Value, state: &str| json!({"limits": {"memory": memory}, "state": state});
        let sessions = [
            entry(json!(256 * M), "running"),
            entry(json!(512 * M), "paused"),
        ];
        assert_eq!(
            Held::of(&sessions),
            Held {
                sandboxes: 2,
                memory: Some(768 * M)
            }
        );
        let unbounded = [
            entry(json!(256 * M), "running"),
            entry(Value::Null, "running"),
        ];
        assert_eq!(Held::of(&unbounded).memory, None);
        assert_eq!(
            Held::of(&[]),
            Held {
                sandboxes: 0,
                memory: Some(0)
            }
        );
    }

    #[test]
    fn a_key_files_setting_overrides_the_flags_for_its_tenant() {
        let overrides = HashMap::from([(
            "bob".to_string(),
            Overrides {
                sandboxes: Some(5),
                memory: Some(crate::units::Size(2 << 30)),
            },
        )]);
        let quotas = Quotas::new(3, Some(crate::units::Size(1 << 30)), overrides);
        let alice = quotas.of("alice");
        assert_eq!(
            alice.sandboxes.unwrap().named,
            "--max-sandboxes-per-tenant 3"
        );
        let memory = alice.memory.unwrap();
        assert_eq!(
            (memory.most, memory.named.as_str()),
            (1 << 30, "--max-memory-per-tenant 1G")
        );
        let bob = quotas.of("bob");
        assert_eq!(
            bob.sandboxes.unwrap().named,
            "max-sandboxes=5 of bob in --api-keys"
        );
        assert_eq!(
            bob.memory.unwrap().named,
            "max-memory=2G of bob in --api-keys"
        );
        assert_eq!(Quotas::default().of("anyone"), Quota::default());
    }

    #[test]
    fn a_share_is_refused_past_the_tenants_part_or_the_whole() {
        let total = Cap {
            most: 4,
            named: "--max-streams 4".into(),
        };
        let part = Cap {
            most: 2,
            named: "--max-streams-per-tenant 2".into(),
        };
        // (held in all, held by the tenant, refused by)
        let table = [
            (0, 0, None),
            (3, 1, None),
            (2, 2, Some("tenant")),
            (4, 2, Some("tenant")),
            (4, 1, Some("everyone")),
            (4, 0, Some("everyone")),
        ];
        for (all, own, refused) in table {
            let verdict = share_fits("streams", "alice", (all, &total), (own, &part));
            match (refused, verdict) {
                (None, Ok(())) => {}
                (Some("tenant"), Err(Refused::Tenant(message))) => {
                    assert!(
                        message.contains("\"alice\" has 2 streams open"),
                        "{message}"
                    );
                    assert!(message.contains("--max-streams-per-tenant 2"), "{message}");
                }
                (Some("everyone"), Err(Refused::Everyone(message))) => {
                    assert!(message.contains("has 4 streams open"), "{message}");
                    assert!(message.contains("--max-streams 4"), "{message}");
                }
                (expected, verdict) => panic!("{all}/{own}: {verdict:?}, not {expected:?}"),
            }
        }
    }

    #[test]
    fn shares_are_given_back_when_dropped() {
        let shares = Arc::new(
            Shares::new(
                "streams",
                (3, "--max-streams"),
                (None, "--max-streams-per-tenant"),
                5,
            )
            .unwrap(),
        );
        // Shared four ways (five tenants), 3 is under 1 each: one each.
        let first = shares.take("alice").unwrap();
        let refused = shares.take("alice").unwrap_err();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused
                .message()
                .contains("by default --max-streams shared 4 ways: 1"),
            "{refused:?}"
        );
        let bobs = shares.take("bob").unwrap();
        let carols = shares.take("carol").unwrap();
        let refused = shares.take("dave").unwrap_err();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(shares.held("alice"), (3, 1));
        drop((first, bobs, carols));
        assert_eq!(shares.held("alice"), (0, 0));
        assert!(
            shares.held.lock().unwrap().by_tenant.is_empty(),
            "a tenant's count stayed"
        );
        let _again = shares.take("alice").unwrap();
    }

    #[test]
    fn a_default_share_divides_the_cap_among_the_tenants_at_most_four_ways() {
        for (tenants, share) in [(0, 256), (1, 256), (2, 128), (3, 85), (4, 64), (40, 64)] {
            let shares = Shares::new(
                "streams",
                (256, "--max-streams"),
                (None, "--max-streams-per-tenant"),
                tenants,
            )
            .unwrap();
            assert_eq!(shares.per_tenant.most, share, "{tenants} tenants");
        }
    }

    #[test]
    fn bad_caps_are_named_with_their_fix() {
        for (total, share, expected) in [
            (
                0,
                None,
                "--max-streams 0: nothing could be served; give at least 1",
            ),
            (
                4,
                Some(0),
                "--max-streams-per-tenant 0: no tenant could open any; give 1 to --max-streams (4)",
            ),
            (
                4,
                Some(5),
                "--max-streams-per-tenant 5: more than --max-streams (4); give at most that",
            ),
        ] {
            let err = Shares::new(
                "streams",
                (total, "--max-streams"),
                (share, "--max-streams-per-tenant"),
                1,
            )
            .unwrap_err();
            assert_eq!(err.to_string(), expected);
        }
    }
}
