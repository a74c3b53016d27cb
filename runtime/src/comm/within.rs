//! A receive limited to a caller's buffer, non-blocking ([`Communicator::irecv_within`]),
//! and withdrawing a posted receive that no message has matched
//! ([`Communicator::cancel`]): what C's `ballast_irecv_into` and `ballast_request_cancel`
//! are made of; and a wait that reads a received message where it lies
//! ([`Communicator::wait_read`], what `ballast_wait` of such a receive is made of).

use super::{Communicator, Request};
use crate::comm::error::Result;
use crate::protocol::matching::{Envelope, Source, TagMatch};

impl Communicator {
    /// Posts a receive from `src` with `tag` of a message of at most `cap` bytes. It
    /// completes as [`Communicator::irecv`]'s does ([`Communicator::test`],
    /// [`Communicator::wait`]), except that a longer match is not taken: it stays queued,
    /// first for the next receive that matches its source and tag (ahead of its sender's
    /// later messages still queued or unmatched), and the request ends with
    /// [`CommError::Truncated`](crate::comm::error::CommError::Truncated) (its source, tag and
    /// length) from `test` or `wait`. On the MPI native path a message longer than `cap`
    /// has been received out of MPI into memory of its own before it is refused. Receives
    /// posted before the refusal keep the messages matched to them, later ones of the same
    /// sender and tag included: those come ahead of the refused message (post one receive
    /// at a time per source and tag where that order matters). Errors:
    /// [`FabricError::InvalidRank`](crate::comm::error::FabricError::InvalidRank) for a rank
    /// outside the world; the transport's.
    pub fn irecv_within(
        &mut self,
        src: impl Into<Source>,
        tag: impl Into<TagMatch>,
        cap: usize,
    ) -> Result<Request> {
        let src = src.into();
        Ok(Request {
            id: self
                .backend
                .irecv_within(src, Self::check_match(tag.into())?, cap)?,
            recv: true,
            peer: src,
            owner: self.owner,
        })
    }

    /// Waits for `req` as [`Communicator::wait`] does; a received message is not handed
    /// out as a [`Message`](crate::protocol::matching::Message) but read in place: `read` gets its bytes
    /// (called once, before this returns, for a receive; never for a send), and the
    /// envelope (source, tag, length in bytes) is returned, `None` for a send. On the MPI
    /// native path a receive of [`Communicator::irecv_within`] is read in its receive's
    /// buffer, which is kept for the next posted receive: a loop of `irecv_within` and
    /// `wait_read` allocates nothing per message there. Errors: as `wait` (for
    /// `irecv_within`,
    /// [`CommError::Truncated`](crate::comm::error::CommError::Truncated) without calling
    /// `read`).
    pub fn wait_read(&mut self, req: Request, read: impl FnOnce(&[u8])) -> Result<Option<Envelope>> {
        let mut read = Some(read);
        self.backend.wait_read(req, "wait", &mut |data| {
            if let Some(f) = read.take() {
                f(data)
            }
        })
    }

    /// Withdraws receive `req` if no message has matched it yet: `Ok(Ok(()))`, the request
    /// is consumed (it has ended; no message will bind to it, and one on its way goes to a
    /// later receive). `Ok(Err(req))`, nothing changed and the request is given back, for a
    /// send, or a receive that a message has matched (complete, still arriving, or refused
    /// as longer than its limit): test or wait for it as before. Taking the request by
    /// value makes a wait on a cancelled receive (which nothing could ever complete)
    /// impossible. Errors:
    /// [`CommError::ForeignRequest`](crate::comm::error::CommError::ForeignRequest) at once for a
    /// request of another communicator (given back in the error, nothing changed); the
    /// transport's (on the MPI native path, `MPI_Cancel`'s); the request is then consumed.
    pub fn cancel(&mut self, req: Request) -> Result<std::result::Result<(), Request>> {
        if req.owner.comm != self.owner.comm {
            return Err(self.foreign(req.owner, "cancel", Some(req)));
        }
        if !req.recv {
            return Ok(Err(req));
        }
        Ok(if self.backend.cancel_recv(req.id)? {
            Ok(())
        } else {
            Err(req)
        })
    }
}
