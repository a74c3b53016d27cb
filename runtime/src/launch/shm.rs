//! The shared-memory transport's ranks as threads of this process ([`run_ranks`],
//! published as `ballast_runtime::shm::run_ranks`): each rank with its own segment,
//! socket and rendezvous thread, as if it were a process of its own, so that the whole
//! fabric (rings, bells, descriptor passing, the board) runs in one test process. Ranks in
//! separate processes come with the fabric's start-up through the bootstrap (issue 36).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::threads::{spawn, ThreadOpts};
use crate::comm::error::{Error, FabricError, Result};
use crate::comm::Communicator;
use crate::core::config::RuntimeConfig;
use crate::fabric::shm::{Board, Job, ShmFabric};

/// Jobs started by this process (a part of each job's name).
static JOBS: AtomicU64 = AtomicU64::new(0);

/// Runs `f` on `n` ranks over the shared-memory transport, each a thread of this process
/// (named `ballast-rank-{r}`), and returns the results by rank; as
/// [`threads::run_ranks`](super::threads::run_ranks) does for `local`, whose rules it
/// follows (each rank finishes like `MPI_Finalize`; a rank that fails or panics stops the
/// others with [`FabricError::Aborted`], and the first real error is returned). The
/// configuration's transport settings are used, whatever its `transport`. Errors:
/// [`FabricError::InvalidRank`] for `n == 0`, the configuration's validation errors,
/// [`FabricError::Shm`] (a segment or socket that cannot be had).
pub fn run_ranks<R, F>(n: usize, config: &RuntimeConfig, f: F) -> Result<Vec<R>>
where
    F: Fn(&mut Communicator) -> R + Sync,
    R: Send,
{
    if n == 0 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: 0,
            world_size: 0,
        }));
    }
    let cfg = *config.transport();
    cfg.validate()?;
    super::check_ranks_fit(n, &cfg)?;
    let board = Board::create("ballast-shm-board", n).map_err(|e| FabricError::Shm {
        rank: 0,
        peer: None,
        what: format!("the job's board for {n} ranks: {e}"),
    })?;
    let job = Job {
        name: format!("t{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed)),
        board: Arc::new(board),
        timeout: config.bootstrap().timeout,
        stop: Arc::new(AtomicBool::new(false)),
    };
    let stop = || {
        job.stop.store(true, Ordering::Release);
        job.board.ring_all();
    };
    let opts = ThreadOpts {
        name: Some("ballast-rank"),
        inline_single: false,
    };
    let out = spawn(
        (0..n).map(|r| (r, ())).collect(),
        opts,
        &stop,
        |r, ()| {
            let fabric = ShmFabric::new(r, n, &cfg, job.clone())?;
            Communicator::new(Box::new(fabric), &cfg)
        },
        &f,
    )?;
    Ok(out.into_iter().map(|o| o.output).collect())
}
