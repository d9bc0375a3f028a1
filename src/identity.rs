//! The jail's identity and the user namespace. Planning: the jail's uid/gid and the host
//! ids they map to (never host root). Parent: the single uid/gid mapping and the denial of
//! setgroups. Child: the switch to that identity.

use crate::error::{Context, Error, Result};
use crate::options::JailOptions;
use nix::unistd::{Gid, Pid, Uid, setgroups, setresgid, setresuid};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The jail's uid and gid unless `--uid`/`--gid` say otherwise.
pub const DEFAULT_ID: u32 = 1000;
/// The host uid/gid a jail maps to when root runs brig.
pub const UNPRIVILEGED_HOST_ID: u32 = 65534;
const USER_NAME: &str = "sandbox";

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    /// The host ids the jail's uid and gid map to; never 0.
    pub host_uid: u32,
    pub host_gid: u32,
    /// brig runs as an unprivileged user: the jail maps to that user.
    pub rootless: bool,
}

pub fn resolve(options: &JailOptions) -> Result<Identity> {
    let uid = options.uid.unwrap_or(DEFAULT_ID);
    let gid = options.gid.unwrap_or(DEFAULT_ID);
    for (flag, id) in [("--uid", uid), ("--gid", gid)] {
        if id == u32::MAX {
            return Err(Error::input(format!(
                "{flag} {id}: not a valid id; use e.g. 1000"
            )));
        }
    }
    let euid = nix::unistd::geteuid().as_raw();
    let egid = nix::unistd::getegid().as_raw();
    let rootless = euid != 0;
    let (host_uid, host_gid) = if rootless {
        for (flag, asked, own) in [
            ("--host-uid", options.host_uid, euid),
            ("--host-gid", options.host_gid, egid),
        ] {
            if asked.is_some_and(|id| id != own) {
                return Err(Error::input(format!(
                    "{flag}: only root can choose the host id; rootless brig maps the jail to your own id ({own}), drop the option"
                )));
            }
        }
        (euid, egid)
    } else {
        let host_uid = options.host_uid.unwrap_or(UNPRIVILEGED_HOST_ID);
        let host_gid = options.host_gid.unwrap_or(UNPRIVILEGED_HOST_ID);
        for (flag, id) in [("--host-uid", host_uid), ("--host-gid", host_gid)] {
            if id == 0 || id == u32::MAX {
                return Err(Error::input(format!(
                    "{flag} {id}: the jail must not map to host root or an invalid id; use an unprivileged id such as 65534"
                )));
            }
        }
        (host_uid, host_gid)
    };
    Ok(Identity {
        user: USER_NAME.into(),
        uid,
        gid,
        home: Path::new("/home").join(USER_NAME),
        host_uid,
        host_gid,
        rootless,
    })
}

/// As root, brig leaves its own supplementary groups behind before creating the jail:
/// afterwards `setgroups` is denied inside, so the jail could never drop them.
pub fn drop_supplementary_groups(identity: &Identity) -> Result<()> {
    if identity.rootless {
        // An unprivileged caller cannot drop groups; inside they show as the overflow gid.
        return Ok(());
    }
    setgroups(&[]).context(|| "drop brig's supplementary groups".into())
}

/// Maps exactly one uid and one gid into the child's user namespace, and denies setgroups.
pub fn write_id_maps(child: Pid, identity: &Identity) -> Result<()> {
    let proc_dir = format!("/proc/{child}");
    let files = [
        ("setgroups", "deny\n".to_string()),
        (
            "uid_map",
            format!("{} {} 1\n", identity.uid, identity.host_uid),
        ),
        (
            "gid_map",
            format!("{} {} 1\n", identity.gid, identity.host_gid),
        ),
    ];
    for (name, contents) in files {
        let path = format!("{proc_dir}/{name}");
        std::fs::write(&path, contents.as_bytes())
            .context(|| format!("write {} to {path}", contents.trim()))?;
    }
    Ok(())
}

/// Becomes the jail's user. Capabilities survive this (the process is not uid 0 of the
/// namespace), and are dropped afterwards in one place.
pub fn become_jail_user(identity: &Identity) -> Result<()> {
    let gid = Gid::from_raw(identity.gid);
    let uid = Uid::from_raw(identity.uid);
    setresgid(gid, gid, gid).context(|| format!("setresgid to {gid}"))?;
    setresuid(uid, uid, uid).context(|| format!("setresuid to {uid}"))
}
