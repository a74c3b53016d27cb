//! The abort protocol of an MPI world ([`AbortNotices`]), the one both MPI paths use (the
//! engine's fabric on its world communicator, the native path on a communicator of its
//! own): a process whose rank failed marks the world failed and sends every other process
//! a one-byte notice on an abort tag (`MPI_Isend`, never waited for: the others may be
//! gone); the others find it by probing that tag (`MPI_Improbe`, then receive it), and
//! fail with [`crate::fabric::error::FabricError::Aborted`]. The notices' buffers are leaked, never freed under
//! a send that may never complete. A job aborted on purpose (`Communicator::abort`) ends
//! with `MPI_Abort` ([`AbortNotices::abort_job`]), on the same communicator, without
//! notices.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use rsmpi::point_to_point::Source as _;
use rsmpi::topology::{Communicator as _, SimpleCommunicator};

use super::ffi::SendQueue;

/// The abort flag of one world and the notices this process sent.
pub(crate) struct AbortNotices {
    flag: AtomicBool,
    /// Notices in flight (leaked on drop: the other processes may be gone).
    notices: Mutex<Option<SendQueue>>,
}

impl AbortNotices {
    pub(crate) fn new() -> AbortNotices {
        AbortNotices {
            flag: AtomicBool::new(false),
            notices: Mutex::new(None),
        }
    }

    /// Marks the world failed and tells every other process of `comm` with a notice on
    /// `tag` (best effort, never waits). Only the first call sends.
    pub(crate) fn abort(&self, comm: &SimpleCommunicator, tag: i32) {
        if self.flag.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut q = SendQueue::new(0, 0);
        let me = comm.rank() as usize;
        for p in (0..comm.size() as usize).filter(|&p| p != me) {
            let _ = q.post(comm, p, tag, vec![1], 0);
        }
        *self.notices.lock() = Some(q);
    }

    /// Ends the job with `code`: `MPI_Abort(comm, code)`, which ends every process of the
    /// job and never returns. No notice is sent and the world is not marked failed first:
    /// a rank that saw one would return from its call with an error, and its process
    /// might exit with a status of its own before MPI ends the job with `code`.
    pub(crate) fn abort_job(&self, comm: &SimpleCommunicator, code: i32) -> ! {
        comm.abort(code)
    }

    /// True when the world failed: marked here, or a notice arrived on `tag` of `comm`
    /// (received, and the world marked failed).
    pub(crate) fn poll(&self, comm: &SimpleCommunicator, tag: i32) -> bool {
        if self.flag.load(Ordering::Acquire) {
            return true;
        }
        if let Some((msg, _)) = comm.any_process().immediate_matched_probe_with_tag(tag) {
            let mut b = [0u8; 1];
            msg.matched_receive_into(&mut b[..]);
            self.flag.store(true, Ordering::Release);
            return true;
        }
        false
    }

    /// True when the world is known to have failed (no probe).
    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// True when this process sent notices (which may still be in flight on the
    /// communicator: it must then never be freed).
    pub(crate) fn sent(&self) -> bool {
        self.notices.lock().is_some()
    }
}

impl Drop for AbortNotices {
    fn drop(&mut self) {
        // A notice may never be received (its target failed): leak it rather than wait.
        std::mem::forget(self.notices.lock().take());
    }
}
