//! [`NativeCollectives`]: the collectives a backend runs its own way (the MPI native path:
//! MPI's own collectives on Ballast's duplicate communicator). A backend without them
//! runs the engine's algorithms over its point-to-point calls.

use super::reduce::{ReduceOp, ReduceSlice};
use super::Received;
use crate::comm::error::Result;

/// Collectives a backend provides itself. Arguments are checked by the communicator
/// before these are called (roots and destinations in range, destinations distinct and
/// not this rank, one part per rank); the results have the shapes of the
/// `Communicator` calls of the same names.
pub(crate) trait NativeCollectives {
    /// `Communicator::barrier`.
    fn barrier(&mut self) -> Result<()>;
    /// `Communicator::all_gatherv`: every rank's data, by rank.
    fn all_gatherv(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// `Communicator::all_reduce`: `data` is replaced by the reduction over the ranks.
    fn all_reduce(&mut self, data: ReduceSlice<'_>, op: ReduceOp) -> Result<()>;
    /// `Communicator::bcast`: root's `buf` into every rank's `buf` (the same length).
    fn bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<()>;
    /// `Communicator::gather`: every rank's data on `root`, by rank; `None` elsewhere.
    fn gather(&mut self, root: usize, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>>;
    /// `Communicator::all_to_allv_into`: `parts[d]` to rank `d`; `out` becomes what each
    /// rank sent here, by rank (its buffers reused where they hold their new part).
    fn all_to_allv_into(&mut self, parts: &[&[u8]], out: &mut Vec<Vec<u8>>) -> Result<()>;
    /// `Communicator::exchange_sparse`: what the ranks that sent here sent, in increasing
    /// source order.
    fn exchange_sparse(&mut self, sends: &[(usize, &[u8])]) -> Result<Vec<Received>>;
}
