//! The user namespace: the jail's single uid/gid mapping, written by the parent, and the
//! switch to that identity in the child.

use crate::error::{Context, Result};
use crate::plan::Identity;
use nix::unistd::{Gid, Pid, Uid, setgroups, setresgid, setresuid};

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
