//! The fanout investigation (`ballast fanout`): rank 0 sends a few integers to every
//! other rank, and the process' memory counters and the runtime's footprint are taken
//! before and after, beside what the model predicts. A job over the runtime's public API
//! (it moved out of the runtime library): [`run_local`] over the in-process transport,
//! [`mpi::fanout`] one rank per MPI process, [`process::shm`] one rank per process over
//! shared memory, [`verbs::fanout`] one rank per process over verbs with each process'
//! pinned and resident memory checked.

#[cfg(feature = "mpi")]
pub mod mpi;
pub mod process;
#[cfg(feature = "verbs")]
pub mod verbs;

use std::sync::atomic::{AtomicUsize, Ordering};

use ballast_runtime::launch::threads::run_ranks;
use ballast_runtime::{fabric::FabricError, CommError};
use ballast_runtime::{
    Communicator, Error, Footprint, MemoryLock, ProcStatus, Result, RuntimeConfig, Source, TagMatch,
};

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
    /// Setup notes of rank 0 (fallbacks), then, when the OS refused to lock memory of
    /// any rank of this process, the note of [`FanoutReport::memory_lock`].
    pub notes: Vec<String>,
    /// What became of the `mlock` requests of all ranks of this process after the fanout
    /// (the local transport; empty over verbs, which pins, and MPI, which locks nothing).
    pub memory_lock: MemoryLock,
    /// The messages all ranks sent, the fanout's and the barriers'
    /// ([`Communicator::messages_sent`] summed): known over the local transport, `None`
    /// over MPI and verbs.
    pub messages_sent: Option<u64>,
}

struct RankOut {
    before: Footprint,
    after: Footprint,
    before_pred: Footprint,
    after_pred: Footprint,
    status: Option<(ProcStatus, ProcStatus)>,
    notes: Vec<String>,
    lock: MemoryLock,
    messages_sent: u64,
}

/// What one rank observed around the fanout ([`exchange`]).
#[derive(Clone, Copy, Debug)]
pub struct Exchange {
    /// Accounted footprint after the setup barriers, before the fanout.
    pub before: Footprint,
    /// Accounted footprint after the fanout and a barrier.
    pub after: Footprint,
    /// The process' counters at `before`.
    pub status_before: ProcStatus,
    /// The process' counters at `after`.
    pub status_after: ProcStatus,
}

/// The fanout itself, on any transport (collective over `comm`): two barriers (when rank
/// 0 leaves the second, every rank has left the first, so the barrier's own endpoints all
/// exist before the "before" snapshot), the snapshot, a third barrier (no rank sends before
/// every rank has taken its snapshot: a late rank would otherwise count rank 0's fanout
/// endpoint in its "before"), then rank 0 sends `messages` messages of `ints` 32-bit
/// integers to every other rank, which checks their length, then a barrier.
/// Errors: the communicator's, and [`CommError::MessageSize`] on a message of the wrong length.
pub fn exchange(comm: &mut Communicator, messages: usize, ints: usize) -> Result<Exchange> {
    let n = comm.world_size();
    comm.barrier()?;
    comm.barrier()?;
    let before = comm.footprint();
    let status_before = ProcStatus::read_self()?;
    // Same dissemination pattern as the barriers above: it opens no endpoint.
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

fn same_model(a: &Footprint, p: &Footprint) -> bool {
    // Locks may be refused by the OS; everything else must match exactly.
    Footprint {
        locked_bytes: 0,
        ..*a
    } == Footprint {
        locked_bytes: 0,
        ..*p
    }
}

/// Runs the fanout over the in-process transport: `ranks` ranks (at least 2), rank 0 sends
/// `messages` messages of `ints` 32-bit integers to every other rank. When `progress` is
/// given, each rank adds 1 to it when its communicator is set up and 1 when it finished the
/// fanout (`2 * ranks` at the end), for a progress bar. The report's `messages_sent` is the
/// messages all ranks sent (the fanout's and the barriers'). Errors: fewer than 2 ranks
/// ([`FabricError::InvalidRank`]), the runtime's, a message of the wrong size.
pub fn run_local(
    ranks: usize,
    config: &RuntimeConfig,
    messages: usize,
    ints: usize,
    progress: Option<&AtomicUsize>,
) -> Result<FanoutReport> {
    let step = || {
        if let Some(p) = progress {
            p.fetch_add(1, Ordering::Relaxed);
        }
    };
    if ranks < 2 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: ranks,
            world_size: ranks,
        }));
    }
    let t = *config.transport();
    let rpn = t.ranks_per_node;
    let rank = |comm: &mut Communicator| -> Result<RankOut> {
        let n = comm.world_size();
        step();
        let r = exchange(comm, messages, ints)?;
        step();
        Ok(RankOut {
            before: r.before,
            after: r.after,
            before_pred: t.predict(r.before.peers_connected as usize, n, rpn),
            after_pred: t.predict(r.after.peers_connected as usize, n, rpn),
            status: (comm.rank() == 0).then_some((r.status_before, r.status_after)),
            notes: comm.notes(),
            lock: comm.memory_lock(),
            messages_sent: comm.messages_sent(),
        })
    };
    // `shm` runs its ranks as threads too, each with a segment of its own.
    #[cfg(target_os = "linux")]
    let outs = if t.kind == ballast_runtime::TransportKind::Shm {
        ballast_runtime::shm::run_ranks(ranks, config, rank)?
    } else {
        run_ranks(ranks, config, rank)?
    };
    #[cfg(not(target_os = "linux"))]
    let outs = run_ranks(ranks, config, rank)?;
    let outs: Vec<RankOut> = outs.into_iter().collect::<Result<_>>()?;
    let (st0, st1) = outs[0].status.expect("rank 0 status");
    let sum = |f: &dyn Fn(&RankOut) -> u64| outs.iter().map(f).sum::<u64>();
    let mut memory_lock = MemoryLock::default();
    outs.iter().for_each(|o| memory_lock.add(&o.lock));
    // Rank 0's own lock note gives way to the one of every rank (the limit is the process').
    let rank0_lock_note = outs[0].lock.note();
    let mut notes: Vec<String> = outs[0]
        .notes
        .iter()
        .filter(|n| Some(*n) != rank0_lock_note.as_ref())
        .cloned()
        .collect();
    notes.extend(
        memory_lock
            .note()
            .map(|n| format!("all {ranks} ranks of this process: {n}")),
    );
    let report = FanoutReport {
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
        all_ranks_match_model: outs
            .iter()
            .all(|o| same_model(&o.after, &o.after_pred) && same_model(&o.before, &o.before_pred)),
        notes,
        memory_lock,
        messages_sent: Some(sum(&|o| o.messages_sent)),
    };
    Ok(report)
}
