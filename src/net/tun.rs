//! The child half of `--net filtered`: inside the jail's fresh network namespace, create
//! the TUN device, address it and route everything through it. Its descriptor goes to
//! brig's supervisor, which is the other end of the jail's only way out.

use super::{
    GATEWAY, GATEWAY_V6, JAIL_ADDRESS, JAIL_ADDRESS_V6, JAIL_PREFIX, JAIL_PREFIX_V6, TUN_MTU,
    TUN_NAME,
};
use crate::error::{Context, Error, Result};
use crate::sys;
use nix::errno::Errno;
use std::os::fd::OwnedFd;

/// The jail's TUN device, up, with its address and the default route; the caller hands
/// the returned descriptor to brig and closes its own copy.
pub fn set_up() -> Result<OwnedFd> {
    let tun = sys::tun_create(TUN_NAME).map_err(|errno| {
        let fix = match errno {
            Errno::EACCES => "/dev/net/tun is not open to the jail's host uid (brig's own rootless, one of --host-uid-range as root): make it usable by everyone (`chmod 0666 /dev/net/tun`, its usual mode), or as root pass --host-uid-range off",
            Errno::ENOENT | Errno::ENODEV | Errno::ENXIO => "load the tun module (`modprobe tun`); in a container, pass the device in (`--device /dev/net/tun`)",
            _ => "see `brig doctor`",
        };
        Error::os("create the jail's TUN device through /dev/net/tun", errno)
            .hint(format!("--net filtered needs it: {fix}"))
            .host_lacks()
    })?;
    sys::interface_address_v4(TUN_NAME, JAIL_ADDRESS, JAIL_PREFIX, TUN_MTU)
        .context(|| format!("address {TUN_NAME} as {JAIL_ADDRESS}/{JAIL_PREFIX}"))?;
    sys::interface_up(TUN_NAME).context(|| format!("bring up {TUN_NAME}"))?;
    sys::default_route_v4(TUN_NAME, GATEWAY)
        .context(|| format!("route the jail's traffic through {TUN_NAME} to {GATEWAY}"))?;
    // A kernel without IPv6 leaves the jail IPv4 only, as the host is.
    match sys::interface_address_v6(TUN_NAME, JAIL_ADDRESS_V6, JAIL_PREFIX_V6) {
        Err(Errno::EAFNOSUPPORT) => return Ok(tun),
        done => {
            done.context(|| format!("address {TUN_NAME} as {JAIL_ADDRESS_V6}/{JAIL_PREFIX_V6}"))?
        }
    }
    sys::default_route_v6(TUN_NAME, GATEWAY_V6)
        .context(|| format!("route the jail's IPv6 traffic through {TUN_NAME} to {GATEWAY_V6}"))?;
    Ok(tun)
}
