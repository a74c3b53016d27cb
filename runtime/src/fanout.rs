//! The fanout investigation (`ballast fanout`): rank 0 sends a few integers to every
//! other rank, and the process' memory counters and the runtime's footprint are taken
//! before and after, beside what the model predicts.

use crate::config::RuntimeConfig;
use crate::error::{Error, Result};
use crate::footprint::Footprint;
use crate::local;
use crate::matching::{Source, TagMatch};
use crate::procstatus::ProcStatus;

/// Tag used by the fanout messages.
pub const FANOUT_TAG: u32 = 77;

/// One observation point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The process' counters (all ranks share the process).
    pub status: ProcStatus,
    /// Rank 0's accounted footprint.
    pub footprint: Footprint,
    /// Sum of all ranks' accounted footprints.
    pub world_footprint_bytes: u64,
    /// Sum of all ranks' predicted footprints (each from its own peers connected).
    pub world_predicted_bytes: u64,
}

/// Result of [`run_local`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FanoutReport {
    /// Ranks.
    pub ranks: usize,
    /// After the setup and a barrier, before the fanout.
    pub before: Snapshot,
    /// After the fanout and a barrier.
    pub after: Snapshot,
    /// Rank 0's footprint predicted from the configuration for its peers after the fanout.
    pub predicted: Footprint,
    /// Per-rank accounted == predicted after the fanout, for every rank.
    pub all_ranks_match_model: bool,
    /// Setup notes of rank 0 (fallbacks, refused locks).
    pub notes: Vec<String>,
}

struct RankOut {
    before: Footprint,
    after: Footprint,
    before_pred: Footprint,
    after_pred: Footprint,
    status: Option<(ProcStatus, ProcStatus)>,
    notes: Vec<String>,
}

fn same_model(a: &Footprint, p: &Footprint) -> bool {
    // Locks may be refused by the OS; everything else must match exactly.
    Footprint { locked_bytes: 0, ..*a } == Footprint { locked_bytes: 0, ..*p }
}

/// Runs the fanout over the in-process transport: `ranks` ranks, rank 0 sends `messages`
/// messages of `ints` 32-bit integers to every other rank.
pub fn run_local(ranks: usize, config: &RuntimeConfig, messages: usize, ints: usize) -> Result<FanoutReport> {
    if ranks < 2 {
        return Err(Error::InvalidRank { rank: ranks, world_size: ranks });
    }
    let t = *config.transport();
    let rpn = t.ranks_per_node;
    let outs = local::run(ranks, config, |comm| -> Result<RankOut> {
        let n = comm.world_size();
        // Two barriers: when rank 0 leaves the second, every rank has left the first, so
        // the barrier's own endpoints all exist before the "before" snapshot.
        comm.barrier()?;
        comm.barrier()?;
        let before = comm.footprint();
        let s0 = if comm.rank() == 0 { Some(ProcStatus::read_self()?) } else { None };
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
                    return Err(Error::Protocol(format!("fanout message of {} bytes", m.data.len())));
                }
            }
        }
        comm.barrier()?;
        let after = comm.footprint();
        let s1 = if comm.rank() == 0 { Some(ProcStatus::read_self()?) } else { None };
        Ok(RankOut {
            before,
            after,
            before_pred: t.predict(before.peers_connected as usize, n, rpn),
            after_pred: t.predict(after.peers_connected as usize, n, rpn),
            status: s0.zip(s1),
            notes: comm.notes().to_vec(),
        })
    })?;
    let outs: Vec<RankOut> = outs.into_iter().collect::<Result<_>>()?;
    let (st0, st1) = outs[0].status.expect("rank 0 status");
    let sum = |f: &dyn Fn(&RankOut) -> u64| outs.iter().map(f).sum::<u64>();
    Ok(FanoutReport {
        ranks,
        before: Snapshot {
            status: st0,
            footprint: outs[0].before,
            world_footprint_bytes: sum(&|o| o.before.total_bytes()),
            world_predicted_bytes: sum(&|o| o.before_pred.total_bytes()),
        },
        after: Snapshot {
            status: st1,
            footprint: outs[0].after,
            world_footprint_bytes: sum(&|o| o.after.total_bytes()),
            world_predicted_bytes: sum(&|o| o.after_pred.total_bytes()),
        },
        predicted: outs[0].after_pred,
        all_ranks_match_model: outs.iter().all(|o| same_model(&o.after, &o.after_pred) && same_model(&o.before, &o.before_pred)),
        notes: outs[0].notes.clone(),
    })
}
