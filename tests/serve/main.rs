//! `brig serve`, its sessions and its clients, for real, as root and rootless: one test
//! binary. Each module is one area of the server; its own doc says what it covers. Filter
//! by module: `cargo test --test serve sessions::`.
//!
//! The modules' tests run in parallel with each other (libtest's threads): each starts
//! its own server on its own socket and watches only its own processes.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod bounds;
mod client_api;
mod clients;
mod gateway;
mod gateway_audit;
mod gateway_create;
mod gateway_hosts;
mod gateway_interpreter;
mod gateway_lifecycle;
mod gateway_metrics;
mod gateway_node;
mod gateway_ports;
mod gateway_root;
mod gateway_stream_input;
mod gateway_templates;
mod gateway_tenant;
mod server;
mod session_cells;
mod session_engine;
mod session_files;
mod session_interpreters;
mod session_lifecycle;
mod session_network;
mod session_processes;
mod session_pty;
mod session_rich;
mod session_root;
mod session_scheduling;
mod session_secrets;
mod session_watch;
mod sessions;
mod warm;
