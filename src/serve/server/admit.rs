//! Admission: who may connect (peer credentials, --socket-group), and the per-uid caps
//! and shares of connections, jails and sessions.

use super::{Incoming, Server, refuse};
use crate::error::{Error, Result};
use crate::serve::protocol::FrameReader;
use crate::verdict::Peer;
use std::time::Instant;

/// A uid's share of `global` slots: as asked (0: no cap of its own), else half of them,
/// rounded up; never more than all.
pub(super) fn share(asked: Option<usize>, global: usize) -> usize {
    match asked {
        Some(0) => global,
        Some(asked) => asked.min(global),
        None => global.div_ceil(2),
    }
}

/// Which cap a request meets: all slots taken, or its uid's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Full {
    All,
    Uid,
}

/// Whether one more slot (a running jail, an open session) may be taken: `in_use` of
/// `max` in all, `of_uid` of `per_uid` by the asking uid.
pub(super) fn full(in_use: usize, of_uid: usize, max: usize, per_uid: usize) -> Option<Full> {
    if in_use >= max {
        Some(Full::All)
    } else if of_uid >= per_uid {
        Some(Full::Uid)
    } else {
        None
    }
}

/// Whether a uid holding `open` connections may open one more (`cap` 0: no cap).
fn may_connect(open: usize, cap: usize) -> bool {
    cap == 0 || open < cap
}

/// A group name (from /etc/group: brig is static, without NSS) or number.
pub(super) fn resolve_group(name: &str) -> Result<nix::unistd::Gid> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(nix::unistd::Gid::from_raw(gid));
    }
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    groups
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.len() >= 3 && fields[0] == name)
        .and_then(|fields| fields[2].parse().ok())
        .map(nix::unistd::Gid::from_raw)
        .ok_or_else(|| {
            Error::input(format!(
                "--socket-group {name}: no such group in /etc/group; give a group name or number"
            ))
        })
}

impl Server {
    pub(super) fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        while let Ok((stream, _)) = listener.accept() {
            let credentials =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials);
            let Ok(credentials) = credentials else {
                continue;
            };
            let peer = Peer {
                uid: credentials.uid(),
                gid: credentials.gid(),
                pid: credentials.pid(),
            };
            let admitted = self.admit(&peer).and_then(|()| {
                let open = self.connections_of(peer.uid);
                let cap = self.args.max_connections_per_uid;
                match may_connect(open, cap) {
                    true => Ok(()),
                    false => Err(Error::busy(format!(
                        "brig serve: uid {} has {open} connections waiting already (--max-connections-per-uid {cap}); close some or retry later",
                        peer.uid
                    ))),
                }
            });
            if let Err(err) = admitted {
                self.status.refused += 1;
                let _ = stream.set_nonblocking(false);
                refuse(&stream, &err);
                continue;
            }
            if stream.set_nonblocking(true).is_ok() {
                self.incoming.push(Incoming {
                    stream,
                    reader: FrameReader::default(),
                    peer,
                    since: Instant::now(),
                });
            }
        }
    }

    /// Root, the server's own uid, and with --socket-group that group's members.
    pub(super) fn admit(&self, peer: &Peer) -> Result<()> {
        let own = nix::unistd::geteuid().as_raw();
        let in_group = self.group.is_some_and(|group| {
            peer.gid == group.as_raw() || supplementary_groups(peer.pid).contains(&group.as_raw())
        });
        if peer.uid == 0 || peer.uid == own || in_group {
            return Ok(());
        }
        Err(Error::input(format!(
            "brig serve: uid {} may not use this server (it runs as uid {own}); start it with --socket-group GROUP for a group of users",
            peer.uid
        )))
    }

    /// Whether a run of `uid` meets a cap now.
    pub(super) fn full_for(&self, uid: u32) -> Option<Full> {
        let of_uid = self
            .runners
            .iter()
            .filter(|runner| runner.runs_for(uid))
            .count();
        full(
            self.status.running,
            of_uid,
            self.args.max_jails,
            self.jails_per_uid,
        )
    }

    /// The connections of `uid` the server holds: requests being sent or waiting.
    fn connections_of(&self, uid: u32) -> usize {
        let incoming = self
            .incoming
            .iter()
            .filter(|incoming| incoming.peer.uid == uid)
            .count();
        let queued = self
            .queue
            .iter()
            .filter(|pending| pending.job.peer.uid == uid)
            .count();
        incoming + queued
    }
}
/// The supplementary groups of process `pid`, from /proc.
fn supplementary_groups(pid: i32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|gid| gid.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_gets_its_share_of_the_slots() {
        // (asked, global) -> share
        for (asked, global, expected) in [
            (None, 64, 32),
            (None, 32, 16),
            (None, 1, 1),
            (None, 3, 2),
            (Some(0), 64, 64),
            (Some(5), 64, 5),
            (Some(100), 64, 64),
            (Some(64), 64, 64),
        ] {
            assert_eq!(share(asked, global), expected, "{asked:?} of {global}");
        }
    }

    #[test]
    fn a_slot_is_taken_within_the_global_cap_and_the_uids_share() {
        // (in use, of the uid, max, per uid) -> which cap is met
        for (in_use, of_uid, max, per_uid, expected) in [
            (0, 0, 64, 32, None),
            (31, 31, 64, 32, None),
            (32, 32, 64, 32, Some(Full::Uid)),
            (40, 2, 64, 32, None),
            (64, 2, 64, 32, Some(Full::All)),
            (64, 32, 64, 32, Some(Full::All)),
            (0, 0, 1, 1, None),
            (1, 1, 1, 1, Some(Full::All)),
            (1, 0, 2, 1, None),
            (1, 1, 2, 1, Some(Full::Uid)),
        ] {
            assert_eq!(
                full(in_use, of_uid, max, per_uid),
                expected,
                "{in_use} in use, {of_uid} of the uid, max {max}, {per_uid} per uid"
            );
        }
    }

    #[test]
    fn connections_are_capped_per_uid() {
        for (open, cap, expected) in [
            (0, 64, true),
            (63, 64, true),
            (64, 64, false),
            (1000, 64, false),
            (1000, 0, true),
        ] {
            assert_eq!(may_connect(open, cap), expected, "{open} open, cap {cap}");
        }
    }
}
