//! A connection's bytes from the jail, read by the inspector (TLS ClientHello, every HTTP request).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| brig::net::forward::fuzzing::first_bytes(data));
