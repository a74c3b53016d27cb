//! Bringing every rank's [`RankOutcome`] to every process after the run (under MPI each
//! process holds one rank): a flat little-endian encoding gathered with
//! `Communicator::all_gatherv`. Called after the footprint was measured, so the
//! collective's endpoints are not counted in it.
use ballast_runtime::{Communicator, Footprint, ProcStatus};

use super::exchange::ExchangeStats;
use super::run::RankOutcome;
use super::SimError;

fn put(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// The encoding of `o`: 28 u64 words, then the spikes as (step, cell) u32 pairs.
pub fn encode(o: &RankOutcome) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 * 28 + 8 * o.spikes.len());
    let f = &o.footprint;
    let e = &o.exchange;
    let p = &o.process;
    for v in [
        o.rank as u64,
        o.cells as u64,
        o.estimated_kb.to_bits(),
        o.state_bytes,
        e.spikes_sent,
        e.spikes_received,
        e.messages_sent,
        e.bytes_sent,
        o.out_peers as u64,
        o.in_peers as u64,
        f.pool_bytes,
        f.registered_bytes,
        f.locked_bytes,
        f.endpoint_bytes,
        f.srq_bytes,
        f.control_bytes,
        f.endpoints_live,
        f.endpoints_peak,
        f.endpoints_opened,
        f.peers_connected,
        p.vm_rss_kb,
        p.vm_hwm_kb,
        p.vm_lck_kb,
        p.vm_pin_kb,
        p.vm_data_kb,
        p.vm_size_kb,
        o.windows,
        o.spikes.len() as u64,
    ] {
        put(&mut b, v);
    }
    for &(k, c) in &o.spikes {
        b.extend_from_slice(&k.to_le_bytes());
        b.extend_from_slice(&c.to_le_bytes());
    }
    b
}

/// Decodes [`encode`]'s bytes; errors on a torn or inconsistent buffer.
pub fn decode(b: &[u8]) -> Result<RankOutcome, SimError> {
    let torn = || SimError::Protocol(format!("rank outcome of {} bytes is torn", b.len()));
    if b.len() < 8 * 28 {
        return Err(torn());
    }
    let w: Vec<u64> = b[..8 * 28].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let n = w[27] as usize;
    if b.len() != 8 * 28 + 8 * n {
        return Err(torn());
    }
    let spikes = b[8 * 28..]
        .chunks_exact(8)
        .map(|c| (u32::from_le_bytes(c[..4].try_into().expect("4")), u32::from_le_bytes(c[4..].try_into().expect("4"))))
        .collect();
    Ok(RankOutcome {
        rank: w[0] as usize,
        cells: w[1] as usize,
        estimated_kb: f64::from_bits(w[2]),
        state_bytes: w[3],
        exchange: ExchangeStats { spikes_sent: w[4], spikes_received: w[5], messages_sent: w[6], bytes_sent: w[7] },
        out_peers: w[8] as usize,
        in_peers: w[9] as usize,
        footprint: Footprint {
            pool_bytes: w[10],
            registered_bytes: w[11],
            locked_bytes: w[12],
            endpoint_bytes: w[13],
            srq_bytes: w[14],
            control_bytes: w[15],
            endpoints_live: w[16],
            endpoints_peak: w[17],
            endpoints_opened: w[18],
            peers_connected: w[19],
        },
        process: ProcStatus { vm_rss_kb: w[20], vm_hwm_kb: w[21], vm_lck_kb: w[22], vm_pin_kb: w[23], vm_data_kb: w[24], vm_size_kb: w[25] },
        windows: w[26],
        spikes,
    })
}

/// Gathers every rank's outcome on every rank (collective), ordered by rank.
pub fn gather(comm: &mut Communicator, mine: &RankOutcome) -> Result<Vec<RankOutcome>, SimError> {
    comm.all_gatherv(&encode(mine))?.iter().map(|b| decode(b)).collect()
}
