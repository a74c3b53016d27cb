//! The public calls of the collectives beyond `barrier` and `all_gatherv`: their argument
//! checks, then MPI's own collective where the backend has it ([`NativeCollectives`]),
//! else the engine's algorithm.
//!
//! [`NativeCollectives`]: super::native::NativeCollectives

use super::reduce::{ReduceOp, Reducible};
use crate::comm::Communicator;
use crate::error::{CommError, Error, Result};

impl Communicator {
    /// An error naming argument `what` of collective `op`.
    pub(super) fn coll_argument(&self, op: &'static str, what: String, why: String) -> Error {
        CommError::CollectiveArgument {
            rank: self.rank(),
            op,
            what,
            why,
        }
        .into()
    }

    /// `root` in range, or the error naming it.
    fn check_root(&self, op: &'static str, root: usize) -> Result<()> {
        let n = self.world_size();
        if root >= n {
            return Err(self.coll_argument(
                op,
                format!("root {root}"),
                format!("is out of range: the world has {n} ranks (0 to {})", n - 1),
            ));
        }
        Ok(())
    }

    /// Replaces every rank's `data` by the element-wise reduction `op` over all ranks'
    /// (the same length on every rank). Errors: the transport's; a length that differs
    /// between ranks is [`ProtocolError::CollectiveMismatch`](crate::error::ProtocolError::CollectiveMismatch) on the engine paths.
    pub fn all_reduce<T: Reducible>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let slice = T::slice(data);
        if let Some(n) = self.backend.native_collectives() {
            return n.all_reduce(slice, op);
        }
        self.engine_all_reduce(slice, op)
    }

    /// Copies rank `root`'s `buf` into every other rank's `buf` (the same length on every
    /// rank). Errors: a `root` out of range, the transport's.
    pub fn bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<()> {
        self.check_root("bcast", root)?;
        if let Some(n) = self.backend.native_collectives() {
            return n.bcast(root, buf);
        }
        self.engine_bcast(root, buf)
    }

    /// Gathers every rank's `data` (any length) on `root`, by rank: `Some` on the root,
    /// `None` on the others. Errors: a `root` out of range, the transport's.
    pub fn gather(&mut self, root: usize, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        self.check_root("gather", root)?;
        if let Some(n) = self.backend.native_collectives() {
            return n.gather(root, data);
        }
        self.engine_gather(root, data)
    }

    /// Sends `parts[d]` (any length) to every rank `d` and returns what each rank sent
    /// here, by rank. Errors: `parts` not of world-size length, the transport's.
    pub fn all_to_allv(&mut self, parts: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let n = self.world_size();
        if parts.len() != n {
            return Err(self.coll_argument(
                "all_to_allv",
                format!("{} parts", parts.len()),
                format!("do not match the world: it has {n} ranks, one part each"),
            ));
        }
        if let Some(nc) = self.backend.native_collectives() {
            return nc.all_to_allv(parts);
        }
        self.engine_all_to_allv(parts)
    }

    /// Sends each `(dest, bytes)` of `sends` (distinct destinations, not this rank) and
    /// returns what the ranks that sent here sent, in increasing source order: no rank
    /// knows its sources in advance (the dynamic sparse data exchange). Errors: a
    /// destination out of range, named twice or this rank; the transport's.
    pub fn exchange_sparse(&mut self, sends: &[(usize, &[u8])]) -> Result<Vec<(usize, Vec<u8>)>> {
        let n = self.world_size();
        let me = self.rank();
        let mut seen = std::collections::BTreeSet::new();
        for &(d, _) in sends {
            let why = if d >= n {
                Some(format!(
                    "is out of range: the world has {n} ranks (0 to {})",
                    n - 1
                ))
            } else if d == me {
                Some("is this rank (a rank does not send to itself)".to_string())
            } else if !seen.insert(d) {
                Some("is named twice".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                return Err(self.coll_argument("exchange_sparse", format!("destination {d}"), why));
            }
        }
        if let Some(nc) = self.backend.native_collectives() {
            return nc.exchange_sparse(sends);
        }
        self.engine_exchange_sparse(sends)
    }
}
