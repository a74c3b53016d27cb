//! Which rank a thread runs (ranks as threads: `ballast_local_run`,
//! `ballast_mpi_run_ranks`), so that a call with another rank's request or communicator is
//! refused with BALLAST_EINVAL naming that rank ([`foreign`]), where it would otherwise run
//! on the other rank's communicator or get the two-threads message of `crate::comm`.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use crate::comm::ballast_comm;
use crate::error::Fail;

thread_local! {
    /// The communicator handle of the rank this thread runs (`ballast_local_run`,
    /// `ballast_mpi_run_ranks`) and its rank, while its rank_main runs. Read only on the
    /// cold paths of [`foreign`] (a `thread_local!` read costs a call in a shared library).
    static RANK_THREAD: Cell<Option<(*const ballast_comm, usize)>> = const { Cell::new(None) };
}

/// This thread runs the rank of communicator `comm` (`rank`) until the guard drops.
pub(crate) struct RankThread(());

impl RankThread {
    pub(crate) fn enter(comm: *const ballast_comm, rank: usize) -> RankThread {
        RANK_THREAD.with(|t| t.set(Some((comm, rank))));
        RankThread(())
    }
}

impl Drop for RankThread {
    fn drop(&mut self) {
        RANK_THREAD.with(|t| t.set(None));
    }
}

/// BALLAST_EINVAL when the calling thread runs another rank than communicator `comm`'s
/// (`what`: the handle passed, a request or the communicator itself): a rank's request or
/// communicator reached another rank's thread (ranks as threads share an address space).
/// `None` for any other thread (one thread at a time may use a communicator).
#[cold]
#[inline(never)]
pub(crate) fn foreign(func: &str, what: &str, comm: *mut ballast_comm) -> Option<Fail> {
    let (mine, my_rank) = RANK_THREAD.with(Cell::get)?;
    if std::ptr::eq(mine, comm) {
        return None;
    }
    // SAFETY: a live communicator (its handle resolved): its `rank` field alone, an
    // atomic, from the raw pointer (as `enter` reads `owner`).
    let rank = unsafe { (*std::ptr::addr_of!((*comm).rank)).load(Ordering::Relaxed) };
    let whose = if what == "request" {
        "the request belongs to another communicator"
    } else {
        "the communicator belongs to another rank"
    };
    Some(Fail::inval(format!(
        "{func}: {whose} (rank {rank}), not to this thread's (rank {my_rank}): each rank's \
         requests and communicator are used only by that rank's thread"
    )))
}
