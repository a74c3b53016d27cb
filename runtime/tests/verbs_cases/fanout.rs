//! The fanout scenario of `verbs_conformance --fanout N`: rank 0 sends to every other
//! rank; the footprint is checked against the model and the pinned memory (VmPin, VmLck)
//! against the registrations. The scenario is written here over the public API (the
//! `ballast fanout` job itself is `ballast_sim::fanout`, above the runtime).

use crate::*;

/// What a rank saw around the fanout: the footprint and the process' counters before and
/// after it.
struct Exchange {
    before: ballast_runtime::Footprint,
    after: ballast_runtime::Footprint,
    status_before: ProcStatus,
    status_after: ProcStatus,
}

/// Tag of the fanout's messages (that of `ballast_sim::fanout`).
const FANOUT_TAG: u32 = 77;

/// The exchange of `ballast_sim::fanout::exchange`: two barriers (every rank has left the
/// first, so the barrier's endpoints exist before the snapshot), the snapshot, a third
/// barrier (no rank sends before every rank took its snapshot), rank 0 sends `messages`
/// messages of `ints` 32-bit integers to every other rank, which checks their length
/// ([`CommError::MessageSize`]), and a last barrier before the second snapshot.
fn exchange(comm: &mut Communicator, messages: usize, ints: usize) -> Result<Exchange> {
    let n = comm.world_size();
    comm.barrier()?;
    comm.barrier()?;
    let before = comm.footprint();
    let status_before = ProcStatus::read_self()?;
    comm.barrier()?;
    if comm.rank() == 0 {
        let payload: Vec<u8> = (0..ints as u32).flat_map(|i| i.to_le_bytes()).collect();
        for _ in 0..messages {
            for p in 1..n {
                comm.send(p, FANOUT_TAG, &payload)?;
            }
        }
    } else {
        for _ in 0..messages {
            let m = comm.recv(Source::Rank(0), TagMatch::Tag(FANOUT_TAG))?;
            if m.data.len() != ints * 4 {
                return Err(Error::Comm(CommError::MessageSize {
                    rank: comm.rank(),
                    peer: m.source,
                    tag: FANOUT_TAG,
                    bytes: m.data.len(),
                    expected: ints * 4,
                }));
            }
        }
    }
    comm.barrier()?;
    let after = comm.footprint();
    let status_after = ProcStatus::read_self()?;
    Ok(Exchange {
        before,
        after,
        status_before,
        status_after,
    })
}

/// Rank 0 sends `messages` messages of `ints` integers to every other rank; returns the
/// report lines and whether every check held (printed by rank 0).
pub(crate) fn child_fanout(messages: usize, ints: usize) -> i32 {
    let s_start = ProcStatus::read_self().unwrap();
    let cfg = RuntimeConfig::from_env().expect("environment");
    let mut boot = TcpBootstrap::connect(cfg.bootstrap()).expect("bootstrap");
    let n = boot.size();
    let res = (|| -> Result<Option<Vec<String>>> {
        let mut comm = verbs::communicator(&mut boot, &cfg)?;
        let me = comm.rank();
        let t = ballast_runtime::TransportConfig {
            kind: TransportKind::Verbs,
            ..*comm.config()
        };
        let s_reg = ProcStatus::read_self()?;
        let Exchange {
            before,
            after,
            status_before: s0,
            status_after: s1,
        } = exchange(&mut comm, messages, ints)?;
        let pb = t.predict(before.peers_connected as usize, n, 1);
        let pa = t.predict(after.peers_connected as usize, n, 1);
        // Pinned growth during the fanout: per-peer QPs' receive buffers (whole pages).
        let page = 4096u64;
        let slot = (verbs::HEADER_BYTES + t.buffer_size) as u64;
        let per_qp_pin = if t.recv_sharing == RecvSharing::PerPeer {
            (t.recv_depth as u64 * slot).div_ceil(page) * page
        } else {
            0
        };
        let new_qps = after.endpoints_live - before.endpoints_live;
        let pin_growth_kb = (s1.vm_pin_kb as i64 - s0.vm_pin_kb as i64) as u64;
        let expect_growth_kb = new_qps * per_qp_pin / 1024;
        let reg_kb = s_reg.vm_pin_kb as i64 - s_start.vm_pin_kb as i64;
        let pages = |b: u64| b.div_ceil(page) * page;
        let b = t.buffer_size as u64;
        let expect_reg = pages(t.buffer_count as u64 * b)
            + pages(t.buffer_count as u64 * verbs::HEADER_BYTES as u64)
            + if t.recv_sharing == RecvSharing::PerPeer {
                0
            } else {
                pages(t.srq_depth as u64 * slot)
            };
        let mut row = Vec::new();
        for v in [
            before.total_bytes(),
            pb.total_bytes(),
            after.total_bytes(),
            pa.total_bytes(),
            (before == pb && after == pa) as u64,
            pin_growth_kb,
            expect_growth_kb,
            reg_kb.max(0) as u64,
            s1.vm_lck_kb - s_reg.vm_lck_kb.min(s1.vm_lck_kb),
            (s1.vm_rss_kb as i64 - s_start.vm_rss_kb as i64).max(0) as u64,
            after.registered_bytes,
            after.endpoints_live,
            expect_reg,
        ] {
            row.extend_from_slice(&v.to_le_bytes());
        }
        let notes = comm.notes().to_vec();
        let all = comm.all_gatherv(&row)?;
        verbs::finish(comm)?;
        if me != 0 {
            return Ok(None);
        }
        let rows: Vec<Vec<u64>> = all
            .iter()
            .map(|b| {
                b.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .collect()
            })
            .collect();
        let sum = |k: usize| rows.iter().map(|r| r[k]).sum::<u64>();
        let mut out = vec![
            format!("fanout over verbs: {n} processes, recv_sharing {}, {messages} x {ints} ints from rank 0; notes {notes:?}", t.recv_sharing),
            format!("world footprint before: {} B accounted, {} B predicted", sum(0), sum(1)),
            format!("world footprint after:  {} B accounted, {} B predicted", sum(2), sum(3)),
            format!("rank 0 after: {} endpoints, registered {} B (model), VmPin from registration {} KiB", rows[0][11], rows[0][10], rows[0][7]),
        ];
        let mut ok = rows.iter().all(|r| r[4] == 1);
        out.push(format!("every rank's footprint == model before and after: {ok}"));
        for (r, row) in rows.iter().enumerate() {
            // Pinned at registration: pool, send headers, and the SRQ's slots, in whole pages.
            let reg_ok = row[7] * 1024 == row[12];
            let growth_ok = row[5] == row[6];
            let lck_ok = row[8] == 0;
            if r == 0 || !(reg_ok && growth_ok && lck_ok) {
                out.push(format!(
                    "rank {r}: VmPin at registration {} KiB, expected {} KiB ({}), VmPin growth during fanout {} KiB, expected {} KiB ({}), VmLck change after registration {} KiB ({}), VmRSS growth {} KiB",
                    row[7], row[12] / 1024, if reg_ok { "ok" } else { "MISMATCH" }, row[5], row[6], if growth_ok { "ok" } else { "MISMATCH" }, row[8], if lck_ok { "constant" } else { "CHANGED" }, row[9]
                ));
            }
            ok &= reg_ok && growth_ok && lck_ok;
        }
        out.push(format!("fanout checks: {}", if ok { "ok" } else { "FAILED" }));
        Ok(Some(out))
    })();
    match res {
        Ok(Some(lines)) => {
            for l in &lines {
                println!("{l}");
            }
            i32::from(!lines.last().unwrap().ends_with("ok"))
        }
        Ok(None) => 0,
        Err(e) => {
            eprintln!("fanout rank {}: {e}", boot.rank());
            1
        }
    }
}
