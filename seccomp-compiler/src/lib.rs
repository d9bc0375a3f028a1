//! brig's seccomp compiler, shared by brig (profiles from files and `--seccomp-log` at run
//! time) and brig's build script (the built-in profiles, precompiled): a seccompiler JSON
//! profile becomes BPF programs in install order (`compile`), each laid out again as a
//! binary search over ranges of call numbers (`dispatch`), plus the x86_64 table of call
//! names (`syscalls`). `tests/equivalence.rs` proves the compact layout changes no answer.

#![deny(unsafe_code)]

mod compile;
pub mod dispatch;
pub mod syscalls;

pub use compile::{compile, one_line};
