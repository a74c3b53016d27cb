//! Abort notices of a native world ([`AbortLine`]): the MPI abort protocol
//! ([`crate::fabric::mpi::abort`]) on a communicator of its own.

use super::*;
use crate::fabric::mpi::abort::AbortNotices;
use crate::fabric::mpi::ffi::SharedComm;

/// Abort notices of one native world, shared with [`crate::fabric::mpi::Mpi::run_ranks`] so that a
/// rank that failed (even by panicking, which drops its communicator) tells the others.
pub(crate) struct AbortLine {
    /// Used by the one thread that drives the rank (and, after it failed, by the thread
    /// that reports it), in turn.
    comm: SharedComm,
    notices: AbortNotices,
}

impl AbortLine {
    pub(crate) fn new(comm: SimpleCommunicator) -> Arc<AbortLine> {
        Arc::new(AbortLine {
            comm: SharedComm::serialized(comm),
            notices: AbortNotices::new(),
        })
    }

    /// Marks the world failed and tells every other process (best effort, never waits).
    pub(crate) fn abort(&self) {
        self.notices.abort(&self.comm, ABORT_TAG);
    }

    /// Ends the job with `code` (`MPI_Abort`): never returns.
    pub(super) fn abort_job(&self, code: i32) -> ! {
        self.notices.abort_job(&self.comm, code)
    }

    pub(super) fn poll(&self) -> bool {
        self.notices.poll(&self.comm, ABORT_TAG)
    }

    pub(super) fn is_set(&self) -> bool {
        self.notices.is_set()
    }
}

impl Drop for AbortLine {
    fn drop(&mut self) {
        // Notices may never be received (their target failed): they are leaked, and so is
        // the communicator when there were any, so MPI never frees it under them.
        if !self.notices.sent() {
            self.comm.free_on_drop();
        }
    }
}
