//! Packets a jail writes to its TUN device (2-byte length, bytes; repeated): classified,
//! judged and fed to the relay with smoltcp behind it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| brig::net::forward::fuzzing::jail_packets(data));
