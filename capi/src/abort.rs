//! [`ballast_abort`]: ending the whole job on purpose, as `MPI_Abort` does
//! (`Communicator::abort`).

use std::os::raw::c_int;

use crate::comm::{ballast_comm, with_comm};
use crate::error::Fail;

/// Aborts the job with `code`, as MPI_Abort does.
///
/// - Over MPI (a communicator of ballast_comm_from_mpi, ballast_comm_from_env with the mpi
///   transport, or ballast_mpi_run_ranks; the MPI native path and the engine path alike):
///   MPI_Abort on Ballast's communicator, which ends every process of the job and does not
///   return (Open MPI's mpirun then exits with `code`: use 1 to 255 for an exit status).
/// - Otherwise (local, verbs): every other rank is told with a control message (a rank
///   that ended already is skipped) and it returns 0. From then on every call of every
///   rank that waits or progresses (ballast_recv, ballast_wait, ballast_test,
///   ballast_barrier, ballast_allgatherv, ballast_progress, the finish of
///   ballast_comm_free or of ballast_local_run) returns BALLAST_EPEER, whose message
///   (ballast_last_error) names the rank that aborted and `code`: on this rank at once, on
///   the others as soon as the notice reaches them (a rank blocked in a call is woken by
///   it). Under ballast_local_run the run then returns non-zero: the result of the lowest
///   rank that failed (a rank_main returning `code` after the abort makes that `code`).
///
/// A second call, or one after another rank's abort arrived, does nothing and returns 0.
/// Errors: BALLAST_EINVAL for a NULL or freed `comm`; BALLAST_EINTERNAL for a poisoned
/// communicator; under MPI below MPI_THREAD_MULTIPLE, BALLAST_EUNSUPPORTED from another
/// thread than the one that made the communicator.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn ballast_abort(comm: *mut ballast_comm, code: c_int) -> c_int {
    const F: &str = "ballast_abort";
    with_comm(F, comm, |c| {
        c.comm().abort(code).map_err(|e| Fail::runtime(F, &e))?;
        Ok(0)
    })
}
