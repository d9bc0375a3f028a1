//! The network namespace: a fresh one has only `lo`, and it starts down.

use crate::error::{Context, Result};
use crate::sys;

pub fn loopback_up() -> Result<()> {
    sys::interface_up("lo").context(|| "bring up lo in the jail's network namespace".into())
}
