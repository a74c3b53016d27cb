//! The spike exchange of one rank at the end of every min-delay window, over a
//! [`Communicator`]: `p2p` (each spike only to the ranks holding one of its source's
//! targets, one message per window to every such rank, empty or not, so a receiver knows
//! when the window is complete) or `allgather` ([`Communicator::all_gatherv`] of every
//! rank's spikes).
//!
//! p2p uses no collective at all: each rank sends to its *out-peers* (ranks holding a
//! target of one of its cells) and receives one message per window from each *in-peer*
//! (rank holding a source of one of its cells). Endpoints open lazily on the first
//! message, so the peers a rank connects to are exactly out-peers ∪ in-peers, the peer set
//! of [`ballast_balancer::network::Network::peers`]. The window number is the tag, so a rank running
//! ahead of a receiver never mixes windows.
//!
//! Wire format: a message is a sequence of spikes, 8 bytes each: the step (u32, little
//! endian) and the source's global cell index (u32, little endian).
use std::fmt;
use std::str::FromStr;

use ballast_runtime::{Communicator, Source, TagMatch, RESERVED_TAG_BASE};

use crate::SimError;

/// How spikes travel between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeKind {
    /// Point to point, only to the ranks that need each spike.
    P2p,
    /// `all_gatherv` of all spikes of the window.
    Allgather,
}

impl fmt::Display for ExchangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExchangeKind::P2p => "p2p",
            ExchangeKind::Allgather => "allgather",
        })
    }
}

impl FromStr for ExchangeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "p2p" => Ok(ExchangeKind::P2p),
            "allgather" => Ok(ExchangeKind::Allgather),
            _ => Err(format!("`{s}` is not an exchange: p2p or allgather")),
        }
    }
}

/// A spike: the step it fired in and the global cell index of the cell that fired. Ordered
/// by step, then by cell (the order of a window's spikes and of `out.dat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Spike {
    /// The time step it fired in.
    pub step: u32,
    /// The global index of the cell that fired.
    pub source: u32,
}

/// Bytes per spike on the wire.
pub const SPIKE_BYTES: usize = 8;

/// Appends `spike` in wire format.
pub fn encode(buf: &mut Vec<u8>, spike: Spike) {
    buf.extend_from_slice(&spike.step.to_le_bytes());
    buf.extend_from_slice(&spike.source.to_le_bytes());
}

/// Decodes a message; errors when its length is not a multiple of [`SPIKE_BYTES`].
pub fn decode(data: &[u8], from: usize) -> Result<Vec<Spike>, SimError> {
    if !data.len().is_multiple_of(SPIKE_BYTES) {
        return Err(SimError::SpikeMessage {
            from,
            bytes: data.len(),
        });
    }
    Ok(data
        .chunks_exact(SPIKE_BYTES)
        .map(|c| Spike {
            step: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            source: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// Counters of one rank's exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeStats {
    /// Spikes sent to other ranks (a spike sent to 3 ranks counts 3).
    pub spikes_sent: u64,
    /// Spikes received from other ranks (all of them with `allgather`).
    pub spikes_received: u64,
    /// Messages sent (p2p: one per out-peer per window).
    pub messages_sent: u64,
    /// Payload bytes sent.
    pub bytes_sent: u64,
}

/// One rank's exchange: the mode, its peers and per-peer send buffers.
pub struct Exchanger {
    kind: ExchangeKind,
    out_peers: Vec<usize>,
    /// Index in `out_peers` of each rank (`u32::MAX` when not an out-peer).
    out_index: Vec<u32>,
    in_peers: Vec<usize>,
    bufs: Vec<Vec<u8>>,
    /// Counters so far.
    pub stats: ExchangeStats,
}

impl Exchanger {
    /// An exchange for a world of `world` ranks with these (ascending) out- and in-peers
    /// (ignored by `allgather`).
    pub fn new(kind: ExchangeKind, world: usize, out_peers: Vec<usize>, in_peers: Vec<usize>) -> Exchanger {
        let mut out_index = vec![u32::MAX; world];
        for (i, &r) in out_peers.iter().enumerate() {
            out_index[r] = i as u32;
        }
        let bufs = vec![Vec::new(); out_peers.len()];
        Exchanger {
            kind,
            out_peers,
            out_index,
            in_peers,
            bufs,
            stats: ExchangeStats::default(),
        }
    }

    /// Ranks this rank sends to (p2p).
    pub fn out_peers(&self) -> &[usize] {
        &self.out_peers
    }

    /// Ranks this rank receives from (p2p).
    pub fn in_peers(&self) -> &[usize] {
        &self.in_peers
    }

    /// Exchanges the spikes of window `window`: `local` are this rank's spikes,
    /// `dest_ranks(source)` the other ranks holding a target of `source`. Returns the
    /// spikes received from other ranks (unordered).
    pub fn exchange<'a>(
        &mut self,
        comm: &mut Communicator,
        window: u32,
        local: &[Spike],
        dest_ranks: impl Fn(u32) -> &'a [u32],
    ) -> Result<Vec<Spike>, SimError> {
        match self.kind {
            ExchangeKind::P2p => self.p2p(comm, window, local, dest_ranks),
            ExchangeKind::Allgather => self.allgather(comm, local),
        }
    }

    fn p2p<'a>(
        &mut self,
        comm: &mut Communicator,
        window: u32,
        local: &[Spike],
        dest_ranks: impl Fn(u32) -> &'a [u32],
    ) -> Result<Vec<Spike>, SimError> {
        if window >= RESERVED_TAG_BASE - 1 {
            return Err(SimError::WindowTag { window });
        }
        let tag = window + 1;
        for b in &mut self.bufs {
            b.clear();
        }
        for &s in local {
            for &r in dest_ranks(s.source) {
                let i = self.out_index[r as usize];
                if i == u32::MAX {
                    return Err(SimError::NotOutPeer {
                        rank: comm.rank(),
                        dest: r,
                    });
                }
                encode(&mut self.bufs[i as usize], s);
                self.stats.spikes_sent += 1;
            }
        }
        let mut sends = Vec::with_capacity(self.out_peers.len());
        for (i, &r) in self.out_peers.iter().enumerate() {
            // isend copies the data, so the buffer can be reused; while the pool is full it
            // progresses and waits (blocking on the local transport) for a free buffer.
            let req = comm.isend_waiting(r, tag, &self.bufs[i])?;
            self.stats.messages_sent += 1;
            self.stats.bytes_sent += self.bufs[i].len() as u64;
            sends.push(req);
        }
        let mut got = Vec::new();
        for &r in &self.in_peers {
            let m = comm.recv(Source::Rank(r), TagMatch::Tag(tag))?;
            let spikes = decode(&m.data, r)?;
            self.stats.spikes_received += spikes.len() as u64;
            got.extend(spikes);
        }
        comm.wait_all(sends)?;
        Ok(got)
    }

    fn allgather(&mut self, comm: &mut Communicator, local: &[Spike]) -> Result<Vec<Spike>, SimError> {
        let mut buf = Vec::with_capacity(local.len() * SPIKE_BYTES);
        for &s in local {
            encode(&mut buf, s);
        }
        let me = comm.rank();
        let blocks = comm.all_gatherv(&buf)?;
        let world = comm.world_size() as u64;
        self.stats.spikes_sent += local.len() as u64 * world.saturating_sub(1);
        self.stats.bytes_sent += buf.len() as u64 * world.saturating_sub(1);
        self.stats.messages_sent += world.saturating_sub(1);
        let mut got = Vec::new();
        for (r, b) in blocks.iter().enumerate() {
            if r != me {
                let spikes = decode(b, r)?;
                self.stats.spikes_received += spikes.len() as u64;
                got.extend(spikes);
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_round_trips_and_rejects_torn_messages() {
        let mut b = Vec::new();
        let spike = |step, source| Spike { step, source };
        encode(&mut b, spike(3, 70_000));
        encode(&mut b, spike(u32::MAX, 0));
        assert_eq!(b.len(), 16);
        assert_eq!(
            b[..8],
            [3, 0, 0, 0, 0x70, 0x11, 1, 0],
            "step then source, little-endian"
        );
        assert_eq!(decode(&b, 0).unwrap(), vec![spike(3, 70_000), spike(u32::MAX, 0)]);
        assert_eq!(
            decode(&b[..7], 2).unwrap_err().to_string(),
            "spike exchange: spike message of 7 bytes from rank 2 (not a multiple of 8)"
        );
        assert_eq!("AllGather".parse::<ExchangeKind>(), Ok(ExchangeKind::Allgather));
        assert!("ring".parse::<ExchangeKind>().is_err());
    }
}
