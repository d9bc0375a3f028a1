//! The jail's synthesized /etc: just enough for user lookups and name resolution,
//! nothing copied from the host's /etc.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub struct Account<'a> {
    pub user: &'a str,
    pub uid: u32,
    pub gid: u32,
    pub home: &'a Path,
    pub hostname: &'a str,
    /// `--net filtered`: the jail's resolver and the names it may reach.
    pub network: Option<Network>,
}

pub struct Network {
    pub resolver: Ipv4Addr,
    /// Allowed and pinned names with the synthetic addresses brig maps back to them.
    pub hosts: Vec<(String, Ipv4Addr)>,
    /// `--secret`: the jail's CA bundle (the host's roots and the jail's own CA).
    pub ca_bundle: Option<String>,
}

/// (path inside the jail, contents) of every generated /etc file.
pub fn files(account: &Account) -> Vec<(PathBuf, String)> {
    let Account {
        user,
        uid,
        gid,
        home,
        hostname,
        network,
    } = account;
    let home = home.display();
    let mut passwd = format!("{user}:x:{uid}:{gid}:{user}:{home}:/bin/sh\n");
    if *uid != 65534 {
        passwd.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    }
    let mut group = format!("{user}:x:{gid}:\n");
    if *gid != 65534 {
        group.push_str("nogroup:x:65534:\n");
    }
    let mut hosts = format!(
        "127.0.0.1\tlocalhost\n127.0.1.1\t{hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    );
    let nsswitch = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n\
                    networks: files\nprotocols: files\nservices: files\n";
    let mut files = vec![];
    if let Some(network) = network {
        for (name, address) in &network.hosts {
            hosts.push_str(&format!("{address}\t{name}\n"));
        }
        let resolv_conf = format!(
            "nameserver {}\noptions attempts:2 timeout:2\n",
            network.resolver
        );
        files.push(("/etc/resolv.conf".into(), resolv_conf));
        if let Some(bundle) = &network.ca_bundle {
            files.push((crate::net::secrets::CA_BUNDLE.into(), bundle.clone()));
        }
    }
    files.extend([
        ("/etc/passwd".into(), passwd),
        ("/etc/group".into(), group),
        ("/etc/hosts".into(), hosts),
        ("/etc/hostname".into(), format!("{hostname}\n")),
        ("/etc/nsswitch.conf".into(), nsswitch.into()),
    ]);
    files
}
