//! The public calls of the collectives beyond `barrier` and `all_gatherv`: their argument
//! checks, then MPI's own collective where the backend has it ([`NativeCollectives`]),
//! else the engine's algorithm.
//!
//! [`NativeCollectives`]: super::native::NativeCollectives

use super::reduce::{ReduceOp, Reducible};
use super::Received;
use crate::comm::error::{CommError, Error, Result};
use crate::comm::Communicator;

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
    /// (the same length on every rank; `i32`, `i64`, `u64` or `f64` elements).
    ///
    /// On the engine paths (local, verbs, MPI's engine path) the algorithm is recursive
    /// doubling: with `p` the largest power of two not above the world size `n` and `rem
    /// = n - p`, rank `2i` (`i < rem`) first folds its data into rank `2i + 1` and gets the
    /// result back at the end; the `p` others exchange whole vectors in `log2 p` rounds.
    /// Partners per rank: `log2 p`, plus 1 for a rank below `2 * rem`. Every combination
    /// is `lower-rank operand ⊕ higher-rank operand`, so the result is one fixed expression
    /// tree over the ranks' inputs in rank order (for `n = 4`: `(d0 ⊕ d1) ⊕ (d2 ⊕ d3)`;
    /// for `n = 3`: `(d0 ⊕ d1) ⊕ d2`), and doubles are the same bits on every rank and from
    /// run to run. Doubles' `min`/`max` give NaN when an operand is NaN (the lower rank's
    /// when both are). On the MPI native path MPI's own `MPI_Allreduce` runs, in MPI's order.
    ///
    /// After a retryable error (see the module) the next `all_reduce` resumes this one.
    /// Errors: [`CommError::CollectiveLength`] on every rank when two partners' lengths
    /// differ (on the engine paths; it names both ranks and lengths, as the rank that
    /// found it saw them), else as [`Communicator::barrier`].
    pub fn all_reduce<T: Reducible>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let slice = T::slice(data);
        if let Some(n) = self.backend.native_collectives() {
            return n.all_reduce(slice, op);
        }
        self.engine_all_reduce(slice, op)
    }

    /// Copies rank `root`'s `buf` into every other rank's `buf` (the same length and root
    /// on every rank). On the engine paths: a binomial tree (`ceil(log2 n)` rounds;
    /// partners per rank at most `ceil(log2 n)`: the root's children, a rank's parent and
    /// children). After a retryable error the next `bcast` resumes this one (pass the same
    /// arguments: the root's `buf` is read again). Errors:
    /// [`CommError::CollectiveArgument`] for a `root` out of range,
    /// [`CommError::CollectiveLength`] when this rank's length differs from the root's, or
    /// a rank's above it in the tree did (on the engine paths), else as
    /// [`Communicator::barrier`].
    pub fn bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<()> {
        self.check_root("bcast", root)?;
        if let Some(n) = self.backend.native_collectives() {
            return n.bcast(root, buf);
        }
        self.engine_bcast(root, buf)
    }

    /// Gathers every rank's `data` (any length) on `root`, by rank: `Some` (world size
    /// parts, part `i` rank `i`'s) on the root, `None` on the others (the same root on
    /// every rank). On the engine paths: a binomial tree (`ceil(log2 n)` rounds; partners
    /// per rank at most `ceil(log2 n)`), each part travelling with its length. After a
    /// retryable error the next `gather` resumes this one (on the engine paths the retry's
    /// `data` is not read; on the MPI native path it must be the same length as the first
    /// call's, and it is what is sent). Errors: [`CommError::CollectiveArgument`] for a `root` out of range, else as
    /// [`Communicator::barrier`].
    pub fn gather(&mut self, root: usize, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        self.check_root("gather", root)?;
        if let Some(n) = self.backend.native_collectives() {
            return n.gather(root, data);
        }
        self.engine_gather(root, data)
    }

    /// Sends `parts[d]` (any length, `parts[rank]` to this rank itself) to every rank `d`
    /// and returns what each rank sent here, by rank (world size parts). The lengths
    /// travel with the data: nobody exchanges counts first. On the engine paths: Bruck's
    /// algorithm (`ceil(log2 n)` rounds, each sending the parts whose slot has the round's
    /// bit set to rank `r + 2^k`; partners per rank `2 * ceil(log2 n)`; a part travels up
    /// to `ceil(log2 n)` times, so it suits small parts). After a retryable error the next
    /// `all_to_allv` (or [`Communicator::all_to_allv_into`]) resumes this one (on the engine
    /// paths the retry's `parts` are not read; on the MPI native path they must have the
    /// first call's lengths, and they are what is sent). Errors: [`CommError::CollectiveArgument`] for `parts` not of
    /// world-size length, else as [`Communicator::barrier`].
    pub fn all_to_allv(&mut self, parts: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.all_to_allv_into(parts, &mut out)?;
        Ok(out)
    }

    /// [`Communicator::all_to_allv`] into `out`, which becomes what each rank sent here,
    /// by rank (world size parts), reusing the buffers it holds: a part goes into `out[s]`
    /// when that buffer's capacity holds it (no allocation), so a loop that passes the same
    /// `out` every time allocates no parts once they stop growing, as an MPI program reuses
    /// its receive buffer. On the MPI native path MPI receives straight into them; on the
    /// engine paths the parts arrive in the step messages and are copied in. Buffers are
    /// never shrunk (a part smaller than its buffer keeps the capacity); drop or
    /// `shrink_to_fit` them to give memory back. After an error `out` holds unspecified
    /// parts (possibly none). Errors: as `all_to_allv`.
    pub fn all_to_allv_into(&mut self, parts: &[&[u8]], out: &mut Vec<Vec<u8>>) -> Result<()> {
        let n = self.world_size();
        if parts.len() != n {
            return Err(self.coll_argument(
                "all_to_allv",
                format!("{} parts", parts.len()),
                format!("do not match the world: it has {n} ranks, one part each"),
            ));
        }
        if let Some(nc) = self.backend.native_collectives() {
            return nc.all_to_allv_into(parts, out);
        }
        self.engine_all_to_allv(parts, out)
    }

    /// Sends each `(dest, bytes)` of `sends` (distinct destinations, not this rank) and
    /// returns what the ranks that sent here sent, a [`Received`] each, in increasing
    /// source order: no rank knows its sources in advance (the dynamic sparse data exchange).
    /// On the engine paths: NBX (Hoefler et al. 2010): the data goes to each destination,
    /// which acknowledges it; once all of its sends are acknowledged a rank enters a
    /// non-blocking dissemination barrier and receives (and acknowledges) until it
    /// completes. Partners per rank: its destinations and sources, plus the barrier's `2 *
    /// ceil(log2 n)`. After a retryable error the next `exchange_sparse` resumes this one:
    /// what was sent, received and acknowledged is kept, and the sends not yet posted are
    /// read from the retry's `sends`, which must be the same. Errors:
    /// [`CommError::CollectiveArgument`] for a destination out of range, named twice or
    /// this rank, else as [`Communicator::barrier`].
    pub fn exchange_sparse(&mut self, sends: &[(usize, &[u8])]) -> Result<Vec<Received>> {
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
