//! Which communicator a [`Request`] belongs to ([`Owner`]): a request is `Send`, so one
//! rank's request can reach another rank's communicator, whose `wait` would wait for an id
//! of another engine for ever. Each communicator takes an id of its own from a global
//! counter when it is made; every call that takes a request compares the request's with
//! its own (one `u64` compare) and refuses a foreign one
//! ([`CommError::ForeignRequest`](crate::comm::error::CommError::ForeignRequest)).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Communicator, Request};
use crate::comm::error::{CommError, Error};

/// The next communicator's id (0 is [`Owner::INTERNAL`]'s).
static NEXT_COMM: AtomicU64 = AtomicU64::new(1);

/// The communicator a request belongs to: its id, unique in the process, and its rank
/// (for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The communicator's id, from 1 (`NEXT_COMM`).
    pub(crate) comm: u64,
    /// Its rank.
    pub(crate) rank: usize,
}

impl Owner {
    /// The owner of a backend's own requests (a blocking call's), which never reach a
    /// communicator's checks.
    pub(crate) const INTERNAL: Owner = Owner {
        comm: 0,
        rank: usize::MAX,
    };

    /// A new communicator's: the next id, and `rank`.
    pub(crate) fn next(rank: usize) -> Owner {
        Owner {
            comm: NEXT_COMM.fetch_add(1, Ordering::Relaxed),
            rank,
        }
    }
}

impl Communicator {
    /// `req` for call `op`: `Ok` when it is this communicator's, else
    /// [`CommError::ForeignRequest`] (without the request: `op` borrows it).
    #[inline(always)]
    pub(super) fn check_owner(&self, req: &Request, op: &'static str) -> Result<(), Error> {
        if req.owner.comm != self.owner.comm {
            return Err(self.foreign(req.owner, op, None));
        }
        Ok(())
    }

    /// [`CommError::ForeignRequest`] for call `op` on a request of `owner`, giving back
    /// `request` when `op` took it by value.
    #[cold]
    #[inline(never)]
    pub(super) fn foreign(&self, owner: Owner, op: &'static str, request: Option<Request>) -> Error {
        CommError::ForeignRequest {
            op,
            rank: self.owner.rank,
            comm: self.owner.comm,
            owner_rank: owner.rank,
            owner_comm: owner.comm,
            request: request.map(Box::new),
        }
        .into()
    }
}
