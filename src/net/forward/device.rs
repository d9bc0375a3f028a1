//! The smoltcp side of the TUN device: packets brig read from the jail wait in `rx`,
//! packets smoltcp emits wait in `tx` until brig writes them to the jail. brig looks at
//! each packet before smoltcp does (see `forward::Stack::classify`).

use super::super::TUN_MTU;
use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use std::collections::VecDeque;

#[derive(Default)]
pub struct Queues {
    pub rx: VecDeque<Vec<u8>>,
    pub tx: VecDeque<Vec<u8>>,
}

impl phy::Device for Queues {
    type RxToken<'a> = Received;
    type TxToken<'a> = Transmit<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(Received, Transmit<'_>)> {
        let packet = self.rx.pop_front()?;
        Some((Received(packet), Transmit(&mut self.tx)))
    }

    fn transmit(&mut self, _now: Instant) -> Option<Transmit<'_>> {
        Some(Transmit(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut capabilities = DeviceCapabilities::default();
        capabilities.medium = Medium::Ip;
        capabilities.max_transmission_unit = TUN_MTU as usize;
        // The jail's kernel computed the checksums of what it sent, and checks those of
        // what it receives: only brig's own packets need them.
        let mut checksum = ChecksumCapabilities::default();
        checksum.ipv4 = Checksum::Tx;
        checksum.tcp = Checksum::Tx;
        checksum.udp = Checksum::Tx;
        checksum.icmpv4 = Checksum::Tx;
        capabilities.checksum = checksum;
        capabilities
    }
}

pub struct Received(Vec<u8>);

impl phy::RxToken for Received {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

pub struct Transmit<'a>(&'a mut VecDeque<Vec<u8>>);

impl phy::TxToken for Transmit<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut packet = vec![0; len];
        let result = f(&mut packet);
        self.0.push_back(packet);
        result
    }
}
