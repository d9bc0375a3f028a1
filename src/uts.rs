//! The UTS namespace: the jail's own hostname.

use crate::error::{Context, Result};

pub fn set_hostname(name: &str) -> Result<()> {
    nix::unistd::sethostname(name).context(|| format!("set the jail's hostname to {name}"))
}
