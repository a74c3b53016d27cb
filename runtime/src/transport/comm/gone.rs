//! When a blocking call can never complete: the rank it waits for ended (finished, or
//! failed) as the fabric tells ([`Fabric::peer_end`](crate::fabric::Fabric::peer_end)).
//! A blocking call reads it after an idle round of progress and, when it says so, makes
//! one more round: everything a finished rank sent is in this rank's queues by then, so a
//! call still not complete after that idle round gets [`Error::PeerGone`].

use super::{Backend, Communicator};
use crate::core::error::Error;
use crate::fabric::PeerEnd;
use crate::protocol::engine::Engine;
use crate::protocol::matching::Source;

impl Communicator {
    /// The error of blocking call `op` waiting on `peer` (a receive from it when `recv`,
    /// else a send to it or, with [`Source::Any`], anything that needs every rank alive)
    /// if no rank that could complete it is running any more; `None` while one is. A
    /// receive from one rank ends when that rank ended; an any-source receive when some
    /// rank failed, or when every other rank finished and this rank's own sends are
    /// delivered; a send only when its rank failed (a finished rank still takes what is
    /// sent to it). Always `None` on a fabric that does not tell ends (MPI, verbs) and
    /// for a receive from this rank itself.
    pub(super) fn gone(&self, peer: Source, recv: bool, op: &'static str) -> Option<Error> {
        match &self.backend {
            Backend::Engine(e) => engine_gone(e, peer, recv, op),
            #[cfg(feature = "mpi")]
            Backend::Native(_) => None,
        }
    }
}

/// [`Communicator::gone`] on the engine.
fn engine_gone(e: &Engine, peer: Source, recv: bool, op: &'static str) -> Option<Error> {
    let f = e.fabric();
    let rank = e.rank();
    let (peer, end) = match peer {
        Source::Rank(p) if p == rank => return None,
        Source::Rank(p) => (Some(p), f.peer_end(p)?),
        Source::Any => {
            let (p, end) = f.others_end()?;
            if end == PeerEnd::Finished && !(recv && e.sends_drained()) {
                return None;
            }
            (p, end)
        }
    };
    if !recv && end == PeerEnd::Finished {
        return None;
    }
    Some(Error::PeerGone {
        rank,
        op,
        peer,
        failed: end == PeerEnd::Failed,
    })
}
