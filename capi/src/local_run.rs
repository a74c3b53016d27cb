//! Ranks as threads from C: [`ballast_local_run`] runs a C function on every rank, each
//! with a communicator handle of its own that is live until that function returns, and
//! reports the failure that matters (a rank's own, or a rank whose thread could not be
//! started, over the aborts they cause in the others).

use std::os::raw::{c_int, c_void};

use parking_lot::Mutex;

use ballast_runtime::{launch::threads, Communicator, Error, TransportKind};

use crate::comm::ballast_comm;
use crate::config::ballast_config;
use crate::config::config_or_default;
use crate::error::{boundary, code_of, last_error, set_last_error, Fail};
use crate::handles::{self, Kind};
use crate::{BALLAST_EINVAL, BALLAST_ENOMEM, BALLAST_EPEER};

/// The function a rank runs.
pub type ballast_rank_main =
    Option<unsafe extern "C" fn(comm: *mut ballast_comm, user: *mut c_void) -> c_int>;

/// The user pointer, shared by the ranks' threads.
pub(crate) struct UserPtr(pub(crate) *mut c_void);
// SAFETY: the pointer is only passed back to the C callback; ballast_local_run's contract
// makes the caller responsible for what its ranks do with it from their threads.
unsafe impl Sync for UserPtr {}

impl UserPtr {
    pub(crate) fn get(&self) -> *mut c_void {
        self.0
    }
}

/// Runs `rank_main(comm, user)` on `nranks` ranks as threads of this process, over the
/// local transport; the communicators belong to this call (it finishes them after
/// rank_main returns: ballast_comm_free on one is BALLAST_EINVAL, and a rank's handle is
/// refused with BALLAST_EINVAL once its rank_main returned). A NULL `config` is the
/// defaults and the BALLAST_* environment (what ballast_config_new gives). rank_main runs on
/// every rank's thread at once, with the same `user`. Requests not freed when rank_main
/// returns are cancelled, and that rank fails with BALLAST_EINVAL. A rank that fails
/// (returns non-zero) aborts the others: their blocking and waiting calls return
/// BALLAST_EPEER, so none waits forever for the failed rank. Returns 0, or the non-zero
/// result of the lowest-numbered failing rank (a rank that failed only with BALLAST_EPEER,
/// as the abort makes the others fail, counts only when no rank failed otherwise), whose
/// error message is copied to the calling thread. Errors: BALLAST_EINVAL for NULL
/// `rank_main`, `nranks` < 1 or a configuration whose transport is not local (or does not
/// validate); BALLAST_ENOMEM when the ranks do not fit (their thread stacks in the
/// address space, their pools and queues under `ulimit -v` or in the machine: checked
/// before anything is allocated) or a rank's thread cannot be started (the message names
/// that rank, `nranks` and the stack size); the runtime's.
///
/// # Safety
/// `config` must be NULL or a ballast_config handle, not freed by another thread during the
/// call (a freed one is refused); `rank_main` must be safe to call from several threads at
/// once with `user`.
#[no_mangle]
pub unsafe extern "C" fn ballast_local_run(
    nranks: c_int,
    config: *const ballast_config,
    rank_main: ballast_rank_main,
    user: *mut c_void,
) -> c_int {
    const F: &str = "ballast_local_run";
    boundary(F, || {
        let cfg = config_or_default(F, config)?;
        let main = rank_main.ok_or_else(|| Fail::null(F, "rank_main"))?;
        let n = usize::try_from(nranks)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Fail::inval(format!("{F}: nranks is {nranks}, must be at least 1")))?;
        let kind = cfg.transport().kind;
        if kind != TransportKind::Local {
            return Err(Fail::inval(format!(
                "{F}: the transport is {kind}; ballast_local_run needs local"
            )));
        }
        cfg.transport()
            .validate()
            .map_err(|e| Fail::inval(format!("{F}: {e}")))?;
        let user = UserPtr(user);
        let user = &user;
        let failures: Failures = Mutex::new(Vec::new());
        let failures_ref = &failures;
        let run = threads::run_ranks(n, &cfg, move |comm| {
            run_rank(comm, main, user.get(), failures_ref)
        });
        outcome(F, run.map(drop), failures)
    })
}

/// The result of a run of C ranks (`ballast_local_run`, `ballast_mpi_run_ranks`) from the
/// launcher's `run` and the ranks' `failures`: 0, or the code of the lowest-numbered rank
/// that failed other than by the abort (BALLAST_EPEER); then a rank whose thread could not
/// be started (the others were aborted because of it: BALLAST_ENOMEM); when every failure
/// is BALLAST_EPEER, the one that came first; else the launcher's own error. The message of
/// the failure returned becomes the calling thread's last error.
pub(crate) fn outcome(func: &str, run: Result<(), Error>, failures: Failures) -> Result<c_int, Fail> {
    let mut failures = failures.into_inner();
    failures.sort_by_key(|f| f.rank);
    let own = failures.iter().find(|f| f.code != BALLAST_EPEER);
    if own.is_none() {
        if let Err(e @ Error::ThreadStart { .. }) = &run {
            return Err(Fail::new(BALLAST_ENOMEM, format!("{func}: {e}")));
        }
    }
    let earliest = failures.iter().min_by_key(|f| f.seq);
    match own.or(earliest) {
        Some(f) => {
            set_last_error(&f.msg);
            Ok(f.code)
        }
        None => run.map(|()| 0).map_err(|e| match e {
            Error::ThreadStart { .. } => Fail::new(BALLAST_ENOMEM, format!("{func}: {e}")),
            e => Fail::new(code_of(&e), format!("{func}: {e}")),
        }),
    }
}

/// A rank's failure in `ballast_local_run` or `ballast_mpi_run_ranks`.
pub(crate) struct Failure {
    rank: usize,
    /// The order it came in.
    seq: usize,
    code: c_int,
    msg: String,
}

/// The ranks' failures, in the order they came (one entry per failed rank: nothing is
/// allocated per rank up front).
pub(crate) type Failures = Mutex<Vec<Failure>>;

/// The unwinding payload of a rank that failed: [`run_rank`] records the failure, then
/// unwinds (without the panic hook's message) so that the launcher aborts the other ranks.
struct RankFailed;

/// One rank of `ballast_local_run` (or `ballast_mpi_run_ranks`): a failure (rank_main's non-zero result, or requests
/// left live) is recorded in `failures[rank]` with its message, and then ends the rank's
/// thread by unwinding, which makes the launcher abort the other ranks.
pub(crate) fn run_rank(
    comm: &mut Communicator,
    main: unsafe extern "C" fn(*mut ballast_comm, *mut c_void) -> c_int,
    user: *mut c_void,
    failures: &Failures,
) {
    let rank = comm.rank();
    let mut h = Box::new(ballast_comm::lent(comm));
    let p: *mut ballast_comm = &mut *h;
    let rc = match handles::register(Kind::Comm, p.cast()) {
        Some(handle) => {
            let rank_thread = crate::rank_thread::RankThread::enter(p, rank);
            // SAFETY: the handle is live until after the call; `user` is the caller's, passed back.
            let rc = unsafe { main(handle as *mut ballast_comm, user) };
            drop(rank_thread);
            // From here on the handle is refused: the communicator is finished below.
            handles::unregister(handle, Kind::Comm).expect("the rank's handle is live until here");
            rc
        }
        None => {
            set_last_error(&format!(
                "rank {rank}: ballast_local_run: no handle for the communicator (out of memory)"
            ));
            BALLAST_ENOMEM
        }
    };
    let live = h.cancel_requests();
    let failure = if rc != 0 {
        let msg = last_error();
        Some(if msg.is_empty() {
            (
                rc,
                format!("rank {rank}: rank_main returned {rc} (no Ballast call had failed on its thread)"),
            )
        } else {
            (rc, format!("rank {rank}: {msg}"))
        })
    } else if live > 0 {
        Some((
            BALLAST_EINVAL,
            format!("rank {rank}: {live} request(s) not freed when rank_main returned (cancelled)"),
        ))
    } else {
        None
    };
    if let Some((rc, msg)) = failure {
        let mut all = failures.lock();
        let seq = all.len();
        all.push(Failure {
            rank,
            seq,
            code: rc,
            msg,
        });
        drop(all);
        drop(h);
        std::panic::resume_unwind(Box::new(RankFailed));
    }
}
