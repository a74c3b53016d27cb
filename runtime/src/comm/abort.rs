//! [`Communicator::abort`]: ending the whole job on purpose, as `MPI_Abort` does: under MPI
//! with `MPI_Abort` itself, elsewhere (local, verbs) with a control message to every other
//! rank, after which every rank's calls fail.

use crate::comm::error::Result;
use crate::comm::Communicator;

impl Communicator {
    /// Aborts the job with `code`, as `MPI_Abort` does.
    ///
    /// - Over MPI (the native path and the engine path alike): `MPI_Abort` on Ballast's
    ///   communicator, which ends every process of the job (`mpirun` exits with `code`,
    ///   Open MPI's behaviour) and never returns.
    /// - Elsewhere (local, verbs): every other rank is told on the fabric's control path
    ///   (one [`Control::Abort`](crate::fabric::Control::Abort) each; a rank that ended
    ///   already is skipped), and the call returns `Ok(())`. From then on every call of
    ///   any rank that progresses (`recv`, `wait`, `test`, `barrier`, a collective, the
    ///   finish) fails with [`ProtocolError::Aborted`](crate::comm::error::ProtocolError::Aborted)
    ///   naming the rank that aborted and `code` (C: `BALLAST_EPEER`): on this rank at
    ///   once, on another as soon as the notice reaches it (on `local` a blocked rank is
    ///   woken by it; on verbs at its next poll of the control channel). The job is over:
    ///   the finish of every communicator fails the same way.
    ///
    /// Errors: none of its own (a second call, or one after a peer's abort arrived, does
    /// nothing).
    pub fn abort(&mut self, code: i32) -> Result<()> {
        self.backend.abort(code)
    }
}
