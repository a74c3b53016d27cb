//! Abort notices of a native world ([`AbortLine`]): a failing rank tells the others on
//! their own communicator.

use super::*;
use rsmpi::datatype::traits::*;
use rsmpi::ffi;
use rsmpi::raw::AsRaw;

/// Abort notices of one native world, shared with [`crate::fabric::mpi::Mpi::run_ranks`] so that a
/// rank that failed (even by panicking, which drops its communicator) tells the others.
pub(crate) struct AbortLine {
    comm: SimpleCommunicator,
    flag: AtomicBool,
    /// Notices in flight (buffers and requests, leaked: the other processes may be gone).
    notices: Mutex<Vec<ffi::MPI_Request>>,
}

// SAFETY: the communicator and request handles are plain values; the request list is
// behind a mutex, and the line is used by the one thread that drives the rank (and, after
// it failed, by the thread that reports it), which MPI_THREAD_SERIALIZED allows.
unsafe impl Send for AbortLine {}
// SAFETY: as above.
unsafe impl Sync for AbortLine {}

static ABORT_BYTE: [u8; 1] = [1];

impl AbortLine {
    pub(crate) fn new(comm: SimpleCommunicator) -> Arc<AbortLine> {
        Arc::new(AbortLine {
            comm,
            flag: AtomicBool::new(false),
            notices: Mutex::new(Vec::new()),
        })
    }

    /// Marks the world failed and tells every other process (best effort, never waits).
    pub(crate) fn abort(&self) {
        if self.flag.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut q = self.notices.lock();
        for p in (0..self.comm.size()).filter(|&p| p != self.comm.rank()) {
            // SAFETY: reading the null request constant.
            let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: ABORT_BYTE is a static (outlives the request); the communicator is live.
            let code = unsafe {
                ffi::MPI_Isend(
                    ABORT_BYTE.as_ptr().cast(),
                    1,
                    u8::equivalent_datatype().as_raw(),
                    p,
                    ABORT_TAG,
                    self.comm.as_raw(),
                    &mut req,
                )
            };
            if code as i64 == ffi::MPI_SUCCESS as i64 {
                q.push(req);
            }
        }
    }

    pub(super) fn poll(&self) -> bool {
        if self.flag.load(Ordering::Acquire) {
            return true;
        }
        if let Some((msg, _)) = self
            .comm
            .any_process()
            .immediate_matched_probe_with_tag(ABORT_TAG)
        {
            let mut b = [0u8; 1];
            msg.matched_receive_into(&mut b[..]);
            self.flag.store(true, Ordering::Release);
            return true;
        }
        false
    }

    pub(super) fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

impl Drop for AbortLine {
    fn drop(&mut self) {
        // Notices may never be received (their target failed): leak their requests, and
        // leak the communicator when there were any, so MPI never frees it under them.
        let q = std::mem::take(&mut *self.notices.lock());
        if !q.is_empty() || rsmpi::environment::is_finalized() {
            let comm = std::mem::replace(&mut self.comm, SimpleCommunicator::self_comm());
            std::mem::forget(comm);
        }
    }
}
