//! Bringing every rank's [`RankOutcome`] to every process after the run (under MPI each
//! process holds one rank): a flat little-endian encoding gathered with
//! `Communicator::all_gatherv`. Called after the footprint was measured, so the
//! collective's endpoints are not counted in it.
use ballast_runtime::{Communicator, Footprint, MemoryLock, ProcStatus};

use crate::exchange::{ExchangeStats, Spike};
use crate::run::RankOutcome;
use crate::SimError;

fn put(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// Fixed u64 words before the spikes.
const WORDS: usize = 48;

/// The encoding of `o`: `WORDS` u64 words, then the spikes as (step, cell) u32 pairs.
pub fn encode(o: &RankOutcome) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 * WORDS + 8 * o.spikes.len());
    let f = &o.footprint;
    let e = &o.exchange;
    let p = &o.process;
    let p0 = &o.process_start;
    let l = &o.memory_lock;
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
        l.asked_bytes,
        l.locked_bytes,
        l.requests,
        l.refused,
        l.limit_bytes.is_some() as u64,
        l.limit_bytes.unwrap_or(0),
        l.errno.is_some() as u64,
        l.errno.unwrap_or(0) as u32 as u64,
        p.vm_rss_kb,
        p.vm_hwm_kb,
        p.vm_lck_kb,
        p.vm_pin_kb,
        p.vm_data_kb,
        p.vm_size_kb,
        p0.vm_rss_kb,
        p0.vm_hwm_kb,
        p0.vm_lck_kb,
        p0.vm_pin_kb,
        p0.vm_data_kb,
        p0.vm_size_kb,
        o.proc_index as u64,
        o.windows,
        f.datagram_peers,
        f.datagram_bytes,
        f.shm_segment_bytes,
        f.shm_peers_mapped,
        f.shm_mapped_bytes,
        o.spikes.len() as u64,
    ] {
        put(&mut b, v);
    }
    for s in &o.spikes {
        b.extend_from_slice(&s.step.to_le_bytes());
        b.extend_from_slice(&s.source.to_le_bytes());
    }
    b
}

/// Decodes [`encode`]'s bytes, rank `from`'s outcome; errors ([`SimError::TornOutcome`]) on a
/// torn or inconsistent buffer.
pub fn decode(b: &[u8], from: usize) -> Result<RankOutcome, SimError> {
    let torn = || SimError::TornOutcome { from, bytes: b.len() };
    if b.len() < 8 * WORDS {
        return Err(torn());
    }
    let w: Vec<u64> = b[..8 * WORDS]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let n = w[WORDS - 1] as usize;
    if n.checked_mul(8).and_then(|s| s.checked_add(8 * WORDS)) != Some(b.len()) {
        return Err(torn());
    }
    let spikes = b[8 * WORDS..]
        .chunks_exact(8)
        .map(|c| Spike {
            step: u32::from_le_bytes(c[..4].try_into().expect("4")),
            source: u32::from_le_bytes(c[4..].try_into().expect("4")),
        })
        .collect();
    Ok(RankOutcome {
        rank: w[0] as usize,
        cells: w[1] as usize,
        estimated_kb: f64::from_bits(w[2]),
        state_bytes: w[3],
        exchange: ExchangeStats {
            spikes_sent: w[4],
            spikes_received: w[5],
            messages_sent: w[6],
            bytes_sent: w[7],
        },
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
            datagram_peers: w[42],
            datagram_bytes: w[43],
            shm_segment_bytes: w[44],
            shm_peers_mapped: w[45],
            shm_mapped_bytes: w[46],
        },
        memory_lock: MemoryLock {
            asked_bytes: w[20],
            locked_bytes: w[21],
            requests: w[22],
            refused: w[23],
            limit_bytes: (w[24] != 0).then_some(w[25]),
            errno: (w[26] != 0).then_some(w[27] as u32 as i32),
        },
        process: ProcStatus {
            vm_rss_kb: w[28],
            vm_hwm_kb: w[29],
            vm_lck_kb: w[30],
            vm_pin_kb: w[31],
            vm_data_kb: w[32],
            vm_size_kb: w[33],
        },
        process_start: ProcStatus {
            vm_rss_kb: w[34],
            vm_hwm_kb: w[35],
            vm_lck_kb: w[36],
            vm_pin_kb: w[37],
            vm_data_kb: w[38],
            vm_size_kb: w[39],
        },
        proc_index: w[40] as usize,
        windows: w[41],
        spikes,
    })
}

/// Gathers every rank's outcome on every rank (collective), ordered by rank.
pub fn gather(comm: &mut Communicator, mine: &RankOutcome) -> Result<Vec<RankOutcome>, SimError> {
    comm.all_gatherv(&encode(mine))?
        .iter()
        .enumerate()
        .map(|(r, b)| decode(b, r))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_and_torn_buffers_are_refused() {
        let o = RankOutcome {
            rank: 2,
            cells: 7,
            estimated_kb: 1234.5,
            state_bytes: 99,
            spikes: vec![
                Spike {
                    step: 3,
                    source: 70_000,
                },
                Spike { step: 9, source: 1 },
            ],
            exchange: ExchangeStats {
                spikes_sent: 4,
                spikes_received: 5,
                messages_sent: 6,
                bytes_sent: 48,
            },
            out_peers: 1,
            in_peers: 2,
            footprint: Footprint {
                pool_bytes: 10,
                registered_bytes: 11,
                locked_bytes: 12,
                endpoint_bytes: 13,
                srq_bytes: 14,
                control_bytes: 15,
                endpoints_live: 1,
                endpoints_peak: 2,
                endpoints_opened: 3,
                peers_connected: 2,
                datagram_peers: 1,
                datagram_bytes: 100,
                shm_segment_bytes: 4096,
                shm_peers_mapped: 2,
                shm_mapped_bytes: 8192,
            },
            memory_lock: MemoryLock {
                asked_bytes: 20,
                locked_bytes: 8,
                requests: 3,
                refused: 1,
                limit_bytes: Some(u64::MAX),
                errno: Some(12),
            },
            process: ProcStatus {
                vm_rss_kb: 100,
                vm_hwm_kb: 101,
                vm_lck_kb: 102,
                vm_pin_kb: 103,
                vm_data_kb: 104,
                vm_size_kb: 105,
            },
            process_start: ProcStatus {
                vm_rss_kb: 50,
                vm_hwm_kb: 51,
                vm_lck_kb: 52,
                vm_pin_kb: 53,
                vm_data_kb: 54,
                vm_size_kb: 55,
            },
            proc_index: 2,
            windows: 25,
        };
        let b = encode(&o);
        assert_eq!(b.len(), 8 * WORDS + 8 * 2);
        let d = decode(&b, 0).unwrap();
        assert_eq!(
            (d.rank, d.cells, d.estimated_kb, d.state_bytes, d.spikes.clone()),
            (2, 7, 1234.5, 99, o.spikes.clone())
        );
        assert_eq!(
            (d.exchange, d.out_peers, d.in_peers, d.footprint, d.memory_lock),
            (o.exchange, 1, 2, o.footprint, o.memory_lock)
        );
        let none = decode(
            &encode(&RankOutcome {
                memory_lock: MemoryLock::default(),
                ..o.clone()
            }),
            0,
        )
        .unwrap();
        assert_eq!(
            (none.memory_lock.limit_bytes, none.memory_lock.errno),
            (None, None)
        );
        assert_eq!(
            (d.process, d.process_start, d.proc_index, d.windows),
            (o.process, o.process_start, 2, 25)
        );
        assert_eq!(
            decode(&b[..b.len() - 4], 3).unwrap_err().to_string(),
            format!(
                "gathering the rank outcomes: the outcome of rank 3 ({} bytes) is torn",
                b.len() - 4
            )
        );
        assert!(decode(&b[..8 * WORDS - 8], 3).is_err());
    }
}
