//! A connection's first bytes, sniffed for a TLS ClientHello's SNI or an HTTP Host.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| brig::net::forward::fuzzing::first_bytes(data));
