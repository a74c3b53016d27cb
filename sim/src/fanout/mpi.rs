//! `ballast fanout` over MPI ([`fanout`]): one Ballast rank per MPI process, rank 0
//! sends a few integers to every other rank; rank 0 reports its process counters and
//! footprint before and after, with the world sums gathered over MPI.

use ballast_runtime::fabric::FabricError;
use ballast_runtime::mpi::{Mpi, MPI_MEMORY_NOTE};
use ballast_runtime::{Error, Footprint, Result, RuntimeConfig};

use super::{exchange, Exchange, FanoutReport, Snapshot};

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

/// Runs the fanout on the MPI job of `mpi` (collective): rank 0 sends `messages` messages of
/// `ints` 32-bit integers to every other rank. Returns the report on rank 0, `None`
/// elsewhere. `all_ranks_match_model` is true when every rank's accounted footprint
/// equals the model's before and after (on the native path it does; on the engine path
/// the model is a bound); MPI's own memory is in the VmRSS/VmLck rows. Errors: [`FabricError::InvalidRank`] with fewer than 2
/// processes, and the communicator's errors.
pub fn fanout(
    mpi: &Mpi,
    config: &RuntimeConfig,
    messages: usize,
    ints: usize,
) -> Result<Option<FanoutReport>> {
    let n = mpi.size();
    if n < 2 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: n,
            world_size: n,
        }));
    }
    let me = mpi.rank();
    let mut comm = mpi.communicator(config)?;
    let t = *comm.config();
    let rpn = t.ranks_per_node;
    let Exchange {
        before,
        after,
        status_before: s0,
        status_after: s1,
    } = exchange(&mut comm, messages, ints)?;
    let bp = t.predict(before.peers_connected as usize, n, rpn);
    let ap = t.predict(after.peers_connected as usize, n, rpn);
    // The whole footprint: on the native path it equals the model whenever nothing is
    // in flight; on the engine path the model is a bound (every send buffer kept).
    let matches = |a: &Footprint, p: &Footprint| a == p;
    let mut mine = Vec::new();
    for f in [&before, &after, &bp, &ap] {
        put_fp(&mut mine, f);
    }
    mine.extend_from_slice(&((matches(&before, &bp) && matches(&after, &ap)) as u64).to_le_bytes());
    let all = comm.all_gatherv(&mine)?;
    let notes = comm.notes().to_vec();
    Mpi::finish(comm)?;
    if me != 0 {
        return Ok(None);
    }
    let rows: Vec<Vec<u64>> = all.iter().map(|b| get_u64s(b)).collect();
    // Per rank: 4 footprints in Footprint::fields() order, then the match flag.
    let n_fields = Footprint::default().fields().len();
    let total =
        |r: &Vec<u64>, k: usize| Footprint::from_fields(&r[k * n_fields..(k + 1) * n_fields]).total_bytes();
    let sum = |k: usize| rows.iter().map(|r| total(r, k)).sum::<u64>();
    let mut notes = notes;
    notes.push(MPI_MEMORY_NOTE.to_string());
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
        notes,
        // MPI registers memory itself: Ballast makes no mlock request.
        memory_lock: Default::default(),
        messages_sent: None,
    }))
}
