//! `ballast fanout` over MPI ([`fanout`]): one Ballast rank per MPI process, rank 0
//! sends a few integers to every other rank; rank 0 reports its process counters and
//! footprint before and after, with the world sums gathered over MPI.

use ballast_runtime::mpi::{Mpi, MPI_MEMORY_NOTE};
use ballast_runtime::{Result, RuntimeConfig};

use super::process::{report, two_or_more};
use super::FanoutReport;

/// Runs the fanout on the MPI job of `mpi` (collective): rank 0 sends `messages` messages of
/// `ints` 32-bit integers to every other rank. Returns the report on rank 0, `None`
/// elsewhere. `all_ranks_match_model` is true when every rank's accounted footprint
/// equals the model's before and after (on the native path it does; on the engine path
/// the model is a bound); MPI's own memory is in the VmRSS/VmLck rows. Errors: [`FabricError::InvalidRank`](ballast_runtime::fabric::FabricError::InvalidRank) with fewer than 2
/// processes, and the communicator's errors.
pub fn fanout(
    mpi: &Mpi,
    config: &RuntimeConfig,
    messages: usize,
    ints: usize,
) -> Result<Option<FanoutReport>> {
    two_or_more(mpi.size())?;
    let mut comm = mpi.communicator(config)?;
    let out = report(&mut comm, messages, ints)?;
    Mpi::finish(comm)?;
    Ok(out.map(|mut r| {
        r.notes.push(MPI_MEMORY_NOTE.to_string());
        // MPI registers memory itself: Ballast makes no mlock request.
        r.memory_lock = Default::default();
        r
    }))
}
