//! What operators and new users meet: the documentation's examples, the deploy/ files,
//! `brig doctor` and the completions, the first minutes, brig in containers, and the
//! limits on a pure cgroup v2 kernel in a VM. One test binary; each module's own doc says
//! what it covers. Filter by module: `cargo test --test operators docs::`.
//!
//! Three tests boot a qemu VM (cgroup_v2, deploy's systemd units, doctor); libtest may run
//! two at once. tests/vm/run-in-vm.sh fills its cache under a lock, and each VM's time
//! limit leaves room for a boot twice as slow as alone.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod cgroup_v2;
mod containers;
mod deploy;
mod docs;
mod doctor;
mod first_minutes;
mod kubernetes;
mod kubernetes_hosts;
