//! When a blocking call can never complete: the rank it waits for ended (finished, or
//! failed) as the fabric tells ([`Fabric::peer_end`](crate::fabric::Fabric::peer_end)).
//! A blocking call reads it after an idle round of progress (during the spin of its wait
//! only every [`IDLE_STRIDE`]th, and after every [`BUSY_ROUNDS`]th busy one: a rank can stay busy, e.g. opening an endpoint to a dead
//! peer) and, when it says so, makes one more round: everything a finished rank sent is
//! in this rank's queues by then, so a call still not complete after that round (idle,
//! for a finished rank) gets [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone).

use super::backend::Backend;
use crate::comm::error::{CommError, Error, Result};
use crate::fabric::{OthersEnd, PeerEnd};
use crate::protocol::engine::Engine;
use crate::protocol::matching::Source;

/// Busy rounds of progress between two looks at the peers' ends.
const BUSY_ROUNDS: u32 = 64;

/// Idle rounds in a row during which a blocking call looks only every [`IDLE_STRIDE`]th
/// time: the spin of its wait (the first idle polls of `core::backoff`, no yield, no
/// block), where the reply usually comes within a few rounds. Looking reads the peers'
/// end words (shm: lines of the board its peers write), a tenth of an 8 B round trip when
/// done on every spin (issue 36's profile). Past the spin every idle round looks, so a
/// wait that yields or blocks still ends within its round after a peer's end.
const IDLE_SPIN_ROUNDS: u32 = crate::core::backoff::SPIN_POLLS;

/// Idle rounds between two looks during the spin.
const IDLE_STRIDE: u32 = 16;

/// When a blocking call looks at the peers' ends (see the module).
#[derive(Default)]
pub(super) struct EndCheck {
    busy: u32,
    idle: u32,
}

impl EndCheck {
    /// True when the call should look after a round that `worked` (or did not).
    pub(super) fn due(&mut self, worked: bool) -> bool {
        if !worked {
            self.idle = self.idle.saturating_add(1);
            return self.idle >= IDLE_SPIN_ROUNDS || self.idle.is_multiple_of(IDLE_STRIDE);
        }
        self.idle = 0;
        self.busy += 1;
        self.busy.is_multiple_of(BUSY_ROUNDS)
    }
}

/// A blocking call that can never complete: its error, and whether that is sure without
/// an idle round (a rank failed: nothing more comes from it, and a rank kept busy by it,
/// e.g. opening an endpoint to it, is never idle).
pub(crate) struct Gone {
    pub(crate) error: Error,
    pub(crate) sure: bool,
}

/// The end check after a round of progress of blocking call `op` waiting on `peer`
/// (as in [`Backend::gone`]) that `worked` or not: `Ok(true)` when the call should
/// snooze (nothing happened), `Ok(false)` when it should go on, the [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone)
/// when it can never complete. `done` tells whether the call completed, after the extra
/// round.
pub(super) fn after_round<B: Backend + ?Sized>(
    b: &mut B,
    worked: bool,
    check: &mut EndCheck,
    (peer, recv, op): (Source, bool, &'static str),
    done: &mut dyn FnMut(&mut B) -> Result<bool>,
) -> Result<bool> {
    if check.due(worked) {
        if let Some(g) = b.gone(peer, recv, op) {
            let again = b.progress()?;
            if (g.sure || !again) && !done(b)? {
                return Err(g.error);
            }
            return Ok(false);
        }
    }
    Ok(!worked)
}

/// The error of blocking call `op` on the engine waiting on `peer` (a receive from it
/// when `recv`, else a send to it or, with [`Source::Any`], anything that needs every rank
/// alive) if no rank that could complete it is running any more; `None` while one is. A
/// receive from one rank ends when that rank ended; an any-source receive when every
/// other rank finished and this rank's own sends are delivered; a send when its rank
/// failed (a finished rank still takes what is sent to it); and any call once some rank
/// failed (as MPI's ULFM revokes a communicator: what it waits for may depend on the
/// failed rank through others). Always `None` on a fabric that does not tell ends (MPI,
/// verbs; the local transport has no failed ranks: a rank's failure aborts the run), on
/// the MPI native path (which checks a receive from itself on its own), and for a send to
/// this rank itself while no rank failed. A receive from this rank itself fails once this
/// rank's sends are delivered (after the extra round: a message it sent itself before
/// is taken first).
pub(super) fn engine_gone(e: &Engine, peer: Source, recv: bool, op: &'static str) -> Option<Gone> {
    let f = e.fabric();
    let rank = e.rank();
    // Once a rank failed, a call that cannot progress may wait on it indirectly (a peer
    // that waits on it, an endpoint it holds): it fails too, naming the failed rank.
    let failed = || match f.others_end()? {
        OthersEnd::Failed { rank } => Some((Some(rank), PeerEnd::Failed)),
        OthersEnd::AllFinished => None,
    };
    let (peer, end) = match peer {
        // A receive from this rank itself: only this rank's thread could send it, and it
        // is blocked in this call. Once its own sends are delivered, nothing more can come
        // (`peer` is this rank: the error says so).
        Source::Rank(p) if p == rank && recv && e.sends_drained() => {
            failed().unwrap_or((Some(rank), PeerEnd::Finished))
        }
        Source::Rank(p) if p == rank => failed()?,
        Source::Rank(p) => match f.peer_end(p) {
            Some(end) => (Some(p), end),
            None => failed()?,
        },
        // Any source in a world of 1: only this rank, blocked in the call, could send it
        // (on a fabric that tells no ends too, MPI's: there is no other rank to hear of).
        Source::Any if e.world_size() == 1 && recv && e.sends_drained() => {
            failed().unwrap_or((None, PeerEnd::Finished))
        }
        Source::Any => match f.others_end()? {
            OthersEnd::Failed { rank } => (Some(rank), PeerEnd::Failed),
            OthersEnd::AllFinished if recv && e.sends_drained() => (None, PeerEnd::Finished),
            OthersEnd::AllFinished => return None,
        },
    };
    // A finished rank still takes what is sent to it, unless a failed rank holds it up (an
    // endpoint to the dead rank it cannot close, at its cap).
    let (peer, end) = if !recv && end == PeerEnd::Finished {
        failed()?
    } else {
        (peer, end)
    };
    let gone_failed = end == PeerEnd::Failed;
    // With a rank failed, a rank kept busy by it (an endpoint it keeps opening) is never
    // idle: no idle round is waited for.
    let sure = gone_failed || failed().is_some();
    Some(Gone {
        error: Error::Comm(CommError::PeerGone {
            rank,
            op,
            peer,
            failed: gone_failed,
        }),
        sure,
    })
}
