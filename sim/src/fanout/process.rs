//! The fanout with one rank per process (`report`, the part every transport shares:
//! the exchange, then every rank's footprints and the model's gathered to rank 0), and its
//! run over the shared-memory transport ([`shm`]: the processes of one node, met through
//! the launcher's bootstrap). MPI's run is [`super::mpi::fanout`].

use ballast_runtime::bootstrap::Bootstrap;
use ballast_runtime::fabric::FabricError;
use ballast_runtime::{Communicator, Error, Footprint, Result, RuntimeConfig};

use super::{exchange, same_model, Exchange, FanoutReport, Snapshot};

fn put_fp(out: &mut Vec<u8>, f: &Footprint) {
    for field in f.fields() {
        out.extend_from_slice(&field.value.to_le_bytes());
    }
}

fn get_u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// At least two ranks, or [`FabricError::InvalidRank`].
pub(super) fn two_or_more(n: usize) -> Result<()> {
    if n < 2 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: n,
            world_size: n,
        }));
    }
    Ok(())
}

/// The fanout on `comm`, this process' one rank of the job (collective): rank 0 sends
/// `messages` messages of `ints` 32-bit integers to every other rank, then every rank's
/// footprints before and after, and the model's for the peers it connected, are gathered.
/// Returns the report on rank 0 (its counters, the world sums; `all_ranks_match_model`
/// when every rank's footprint equals the model's before and after, locked bytes aside (a
/// lock the system refused); rank 0's memory lock
/// and notes), `None` elsewhere. The caller finishes `comm`.
pub(super) fn report(comm: &mut Communicator, messages: usize, ints: usize) -> Result<Option<FanoutReport>> {
    let (me, n) = (comm.rank(), comm.world_size());
    let t = *comm.config();
    let rpn = t.ranks_per_node;
    let Exchange {
        before,
        after,
        status_before: s0,
        status_after: s1,
    } = exchange(comm, messages, ints)?;
    let bp = t.predict(before.peers_connected as usize, n, rpn);
    let ap = t.predict(after.peers_connected as usize, n, rpn);
    let mut mine = Vec::new();
    for f in [&before, &after, &bp, &ap] {
        put_fp(&mut mine, f);
    }
    mine.extend_from_slice(&((same_model(&before, &bp) && same_model(&after, &ap)) as u64).to_le_bytes());
    let all = comm.all_gatherv(&mine)?;
    if me != 0 {
        return Ok(None);
    }
    let rows: Vec<Vec<u64>> = all.iter().map(|b| get_u64s(b)).collect();
    // Per rank: 4 footprints in Footprint::fields() order, then the match flag.
    let n_fields = Footprint::default().fields().len();
    let total =
        |r: &Vec<u64>, k: usize| Footprint::from_fields(&r[k * n_fields..(k + 1) * n_fields]).total_bytes();
    let sum = |k: usize| rows.iter().map(|r| total(r, k)).sum::<u64>();
    Ok(Some(FanoutReport {
        ranks: n,
        before: Snapshot {
            status: s0,
            footprint: before,
            world_footprint_bytes: sum(0),
            world_predicted_bytes: sum(2),
        },
        after: Snapshot {
            status: s1,
            footprint: after,
            world_footprint_bytes: sum(1),
            world_predicted_bytes: sum(3),
        },
        predicted: ap,
        all_ranks_match_model: rows.iter().all(|r| r[4 * n_fields] == 1),
        notes: comm.notes().to_vec(),
        memory_lock: comm.memory_lock(),
        messages_sent: None,
    }))
}

/// The fanout over the shared-memory transport, one rank per process of `boot`, every
/// process on this node (collective). Returns the report on rank 0, `None` elsewhere.
/// Errors: [`FabricError::InvalidRank`] with fewer than 2 processes, those of
/// [`ballast_runtime::shm::communicator`] and of the exchange.
#[cfg(target_os = "linux")]
pub fn shm(
    boot: &mut dyn Bootstrap,
    config: &RuntimeConfig,
    messages: usize,
    ints: usize,
) -> Result<Option<FanoutReport>> {
    two_or_more(boot.size())?;
    let mut comm = ballast_runtime::shm::communicator(boot, config)?;
    // A failed rank drops its communicator unfinished: the others stop waiting for it.
    let out = report(&mut comm, messages, ints)?;
    ballast_runtime::shm::finish(comm)?;
    Ok(out)
}
