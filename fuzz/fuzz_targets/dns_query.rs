//! A query to the jail's resolver, answered under a fixed policy.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| brig::net::forward::fuzzing::dns_query(data));
