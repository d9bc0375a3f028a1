//! The jail's mount tree, in one place: planned from the options (`plan.rs`) on top of a
//! default layout (`layout.rs`, with the synthesized /etc of `etc.rs`) as an ordered list of
//! operations (`MountOp`), and applied by the child (`apply.rs`), ending in pivot_root.

mod apply;
mod etc;
mod layout;
mod plan;

pub use apply::build_root;
pub use layout::MountOp;
pub use plan::{
    DEFAULT_TMPFS_SIZE, Rootfs, WORKDIR, check_tmpfs_size, jail_path, plan, rootfs_warning,
    unwritable_binds,
};
