//! The MPI fabric's datagram path ([`DatagramPath`]): a datagram is an MPI message of
//! kind `datagram` on the destination's normal tag (see the parent module), never dropped.

use std::sync::atomic::Ordering;

use super::MpiFabric;
use crate::fabric::error::Result;
use crate::fabric::sizes::MPI_DATAGRAM_MTU;
use crate::fabric::wire::KIND_DATAGRAM;
use crate::fabric::{DatagramPath, PacketHeader};

impl DatagramPath for MpiFabric {
    fn datagram_mtu(&self) -> usize {
        self.buffer_size.min(MPI_DATAGRAM_MTU)
    }

    fn datagrams_can_drop(&self) -> bool {
        false
    }

    fn post_datagram(&mut self, dest: usize, bytes: &[u8]) -> Result<()> {
        let (proc_, tag) = self.proc_and_tag(dest)?;
        let h = PacketHeader {
            src: self.rank as u32,
            tag: 0,
            total: bytes.len() as u64,
            offset: 0,
            len: bytes.len() as u32,
            more: false,
        };
        let b = self.packet(dest, &h, KIND_DATAGRAM, 0, bytes);
        self.sends.post(&self.shared.comm, proc_, tag, b, u64::MAX)?;
        self.shared.sent[dest].fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}
