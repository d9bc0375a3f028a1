//! The host's own addresses (every address of every interface), which an allowed name must
//! not resolve to unless an IP rule or a pin names it: a service listening on 0.0.0.0
//! answers on each of them. Read at the forwarder's start (getifaddrs) and again whenever
//! the kernel reports an address added or removed (a NETLINK_ROUTE socket subscribed to
//! the address groups, which the forwarder's poll loop watches).

use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};

/// Every address of every interface of the host, now.
pub fn addresses() -> io::Result<Vec<IpAddr>> {
    let mut addresses: Vec<IpAddr> = Vec::new();
    for interface in nix::ifaddrs::getifaddrs()? {
        let Some(address) = interface.address else {
            continue;
        };
        let ip = match (address.as_sockaddr_in(), address.as_sockaddr_in6()) {
            (Some(v4), _) => IpAddr::V4(v4.ip()),
            (_, Some(v6)) => IpAddr::V6(v6.ip()),
            _ => continue,
        };
        if !addresses.contains(&ip) {
            addresses.push(ip);
        }
    }
    Ok(addresses)
}

/// A socket the kernel writes to whenever an address of the host is added or removed.
pub struct AddressChanges {
    socket: OwnedFd,
}

impl AddressChanges {
    pub fn open() -> io::Result<AddressChanges> {
        let socket = socket::socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        let groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
        socket::bind(socket.as_raw_fd(), &NetlinkAddr::new(0, groups))?;
        Ok(AddressChanges { socket })
    }

    /// Reads every notice waiting (their content does not matter: the caller reads the
    /// addresses afresh); true if there was any, or the socket overflowed (notices lost).
    pub fn drain(&self) -> bool {
        let mut buffer = [0u8; 8192];
        let mut changed = false;
        loop {
            match socket::recv(self.socket.as_raw_fd(), &mut buffer, MsgFlags::empty()) {
                Ok(0) => return changed,
                Ok(_) => changed = true,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => return changed,
                // ENOBUFS: the kernel dropped notices; read the addresses again anyway.
                Err(_) => return true,
            }
        }
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_has_addresses_and_loopback_is_among_them() {
        let addresses = super::addresses().unwrap();
        assert!(addresses.iter().any(IpAddr::is_loopback), "{addresses:?}");
        assert!(super::AddressChanges::open().is_ok());
    }

    use std::net::IpAddr;
}
