//! Privileges: capabilities and no_new_privs.

use crate::error::{Context, Error, Result};
use caps::CapSet;

/// Empties every capability set: bounding and ambient first (dropping the bounding set
/// needs CAP_SETPCAP), then inheritable, effective and permitted.
pub fn drop_all_capabilities() -> Result<()> {
    let fail = |what: &str, err: caps::errors::CapsError| {
        Error::setup(format!("drop the {what} capability set: {err}"))
    };
    caps::clear(None, CapSet::Ambient).map_err(|err| fail("ambient", err))?;
    let supported = caps::runtime::procfs_all_supported(None).unwrap_or_else(|_| caps::all());
    for cap in supported {
        caps::drop(None, CapSet::Bounding, cap).map_err(|err| fail("bounding", err))?;
    }
    for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::clear(None, set).map_err(|err| fail(&format!("{set:?}").to_lowercase(), err))?;
    }
    Ok(())
}

/// Not optional: without no_new_privs a setuid binary could regain what was dropped.
pub fn set_no_new_privs() -> Result<()> {
    nix::sys::prctl::set_no_new_privs().context(|| "set no_new_privs".into())
}
