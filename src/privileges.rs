//! Privileges: capabilities and no_new_privs.

use crate::error::{Context, Error, Result};
use crate::sys;
use caps::CapSet;

/// Empties every capability set: bounding and ambient first (dropping the bounding set
/// needs CAP_SETPCAP), then inheritable, effective and permitted.
pub fn drop_all_capabilities() -> Result<()> {
    let fail = |what: &str, err: caps::errors::CapsError| {
        Error::setup(format!("drop the {what} capability set: {err}"))
    };
    caps::clear(None, CapSet::Ambient).map_err(|err| fail("ambient", err))?;
    empty_bounding_set()?;
    for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::clear(None, set).map_err(|err| fail(&format!("{set:?}").to_lowercase(), err))?;
    }
    Ok(())
}

/// Drops every capability the kernel knows from the bounding set, which children inherit:
/// done once before the jail's init and program part, it leaves them nothing to drop
/// (each drop replaces the process's credentials, 41 times on Linux 6.x).
pub fn empty_bounding_set() -> Result<()> {
    sys::drop_bounding_set().context(|| "drop the bounding capability set".into())
}

/// Not optional: without no_new_privs a setuid binary could regain what was dropped.
pub fn set_no_new_privs() -> Result<()> {
    nix::sys::prctl::set_no_new_privs().context(|| "set no_new_privs".into())
}
