//! The embedding API for simulator code: [`Communicator`], a rank's handle with blocking
//! and non-blocking tagged point-to-point, the collectives (`collective/`: `barrier`,
//! `all_gatherv`, `all_reduce`, `bcast`, `gather`, `all_to_allv`, `exchange_sparse`) and
//! `progress`.
//! Everything runs on the caller's thread: a simulator drives the runtime from one
//! thread and calls [`Communicator::progress`] between compute steps.

use crate::comm::error::{CommError, Error, Result};
use crate::core::config::TransportConfig;
use crate::core::footprint::{Footprint, MemoryLock};
use crate::core::pool::PoolStats;
use crate::fabric::Fabric;
use crate::protocol::collective::CollectiveSeq;
use crate::protocol::connection::EndpointStats;
use crate::protocol::matching::{Envelope, Message, Source, Tag, TagMatch, RESERVED_TAG_BASE};
use crate::protocol::request::RequestId;

mod abort;
mod backend;
pub mod collective;
mod engine;
pub mod error;
mod gone;
pub mod model;
#[cfg(feature = "mpi")]
pub mod mpi_native;
mod owner;
mod within;

use backend::Backend;
pub(crate) use owner::Owner;

/// Handle of a non-blocking operation. It belongs to the communicator that made it: only
/// that one can test, wait for or cancel it (another refuses it with
/// [`CommError::ForeignRequest`]).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a request must be waited for or tested to completion"]
pub struct Request {
    id: RequestId,
    recv: bool,
    /// The rank a send goes to, or the ranks a receive takes from.
    peer: Source,
    /// The communicator it belongs to.
    owner: Owner,
}

/// Result of a completed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    /// A send completed: its data is delivered to the receiver's buffers.
    Sent,
    /// A receive completed with this message.
    Received(Message),
}

impl Completion {
    /// The message of a receive (None for a send).
    pub fn into_message(self) -> Option<Message> {
        match self {
            Completion::Received(m) => Some(m),
            Completion::Sent => None,
        }
    }
}

/// A rank's communicator.
pub struct Communicator {
    /// What carries the messages: the engine over a fabric, or MPI's native path.
    backend: Box<dyn Backend>,
    /// The backend's setup notes plus the creator's (e.g. why the MPI native path was not
    /// taken); fixed at creation.
    notes: Vec<String>,
    /// Messages this rank sent so far (see [`Communicator::messages_sent`]).
    messages_sent: u64,
    /// The collectives this rank started (their sequence stamps).
    collectives: CollectiveSeq,
    /// A collective that failed with a retryable error, resumed by the next call of its
    /// kind (`collectives`).
    unfinished: Option<collective::Unfinished>,
    /// Collective messages of a later collective that a sparse exchange took from any
    /// source (a peer finished the exchange and started the next), with their sources, by
    /// arrival: each source's come before what is still queued from it.
    early: Vec<(usize, Vec<u8>)>,
    /// This communicator's id and rank, stamped on its requests.
    owner: Owner,
}

impl Communicator {
    /// Builds a communicator over `fabric` (registers the pool, sets up receive queues,
    /// connects all peers when `lazy_connect` is off).
    pub fn new(fabric: Box<dyn Fabric>, config: &TransportConfig) -> Result<Communicator> {
        Ok(Self::over(Box::new(engine::EngineBackend::new(fabric, config)?)))
    }

    /// A communicator over `backend`.
    pub(crate) fn over(backend: Box<dyn Backend>) -> Communicator {
        Communicator {
            owner: Owner::next(backend.rank()),
            notes: backend.notes().to_vec(),
            backend,
            messages_sent: 0,
            collectives: CollectiveSeq::default(),
            unfinished: None,
            early: Vec::new(),
        }
    }

    /// Adds a note about the setup (shown by [`Communicator::notes`]).
    #[cfg(feature = "mpi")]
    pub(crate) fn with_note(mut self, note: Option<String>) -> Communicator {
        self.notes.extend(note);
        self
    }

    /// This rank, `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.backend.rank()
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.backend.world_size()
    }

    /// Effective transport configuration (after fallbacks such as xrc -> shared).
    pub fn config(&self) -> &TransportConfig {
        self.backend.config()
    }

    /// Notes about the setup (fallbacks, the MPI native path), then, when the OS refused
    /// to lock some of the memory held now or before, [`MemoryLock::note`]: the bytes asked
    /// and locked and the limit, as of this call.
    pub fn notes(&self) -> Vec<String> {
        let mut n = self.notes.clone();
        n.extend(self.memory_lock().note());
        n
    }

    /// What became of the `mlock` requests of the memory held now (pool and receive
    /// queues; see [`MemoryLock`]). Empty on the MPI native path (nothing is locked).
    pub fn memory_lock(&self) -> MemoryLock {
        self.backend.memory_lock()
    }

    /// True when this communicator runs on the MPI native path (one MPI message per
    /// Ballast message; no pool, endpoints or credits of Ballast's own).
    pub fn is_mpi_native(&self) -> bool {
        self.backend.is_mpi_native()
    }

    #[inline]
    fn check_tag(tag: Tag) -> Result<()> {
        if tag >= RESERVED_TAG_BASE {
            return Err(Error::Comm(CommError::ReservedTag(tag)));
        }
        Ok(())
    }

    /// A receive's tag: a reserved one would take the runtime's own messages (a
    /// collective's), so it is refused as a send's is.
    #[inline]
    pub(super) fn check_match(tag: TagMatch) -> Result<TagMatch> {
        if let TagMatch::Tag(t) = tag {
            Self::check_tag(t)?;
        }
        Ok(tag)
    }

    #[inline]
    fn isend_raw(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId> {
        let id = self.backend.isend(dest, tag, data)?;
        self.messages_sent += 1;
        Ok(id)
    }

    /// Messages this rank sent so far, whole messages (not packets), its own to itself and
    /// those of every collective included; a blocking `send` that returned an error is not
    /// counted.
    pub fn messages_sent(&self) -> u64 {
        self.messages_sent
    }

    #[inline]
    fn irecv_raw(&mut self, src: Source, tag: TagMatch) -> Result<RequestId> {
        self.backend.irecv(src, tag)
    }

    /// Starts sending `data` to `dest` with `tag`. The first `buffer_size` bytes are copied
    /// into a pool buffer now (the rest into a private copy), so `data` may be reused at
    /// once. On a transport with a direct path (MPI) a message larger than its threshold is
    /// copied once, whole, into a private buffer instead and takes no pool buffer; on the
    /// MPI native path every message is copied once into a private buffer. Errors:
    /// [`ProtocolError::WouldBlock`](crate::comm::error::ProtocolError::WouldBlock) when no pool buffer is free (call [`Communicator::progress`]
    /// and retry), [`FabricError::InvalidRank`](crate::comm::error::FabricError::InvalidRank), [`CommError::ReservedTag`](crate::comm::error::CommError::ReservedTag).
    pub fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<Request> {
        Self::check_tag(tag)?;
        Ok(Request {
            id: self.isend_raw(dest, tag, data)?,
            recv: false,
            peer: Source::Rank(dest),
            owner: self.owner,
        })
    }

    /// [`Communicator::isend`] that, while no pool buffer is free, progresses and waits
    /// (blocking on the local transport, see [`Communicator::wait`]) instead of returning
    /// [`ProtocolError::WouldBlock`](crate::comm::error::ProtocolError::WouldBlock). Errors: [`FabricError::InvalidRank`](crate::comm::error::FabricError::InvalidRank), [`CommError::ReservedTag`](crate::comm::error::CommError::ReservedTag), the
    /// transport's.
    pub fn isend_waiting(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<Request> {
        Self::check_tag(tag)?;
        Ok(Request {
            id: self.isend_retry(dest, tag, data)?,
            recv: false,
            peer: Source::Rank(dest),
            owner: self.owner,
        })
    }

    /// `isend` that progresses and retries while the pool is exhausted.
    fn isend_retry(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId> {
        let id = backend::isend_retry(&mut *self.backend, dest, tag, data)?;
        self.messages_sent += 1;
        Ok(id)
    }

    /// Sends `data` to `dest` with `tag`, progressing and waiting while the pool is
    /// exhausted (back-pressure); returns when all of it is delivered to the receiver's
    /// receive buffers, or, on a transport that copies each packet when posting it (MPI), as
    /// soon as the transport holds the copy (as `MPI_Send` returns). On a transport with a
    /// direct path (MPI) a message larger than its threshold is sent straight from `data`,
    /// without a copy, and the call returns when the transport no longer reads `data`; it
    /// keeps progressing meanwhile.
    pub fn send(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        Self::check_tag(tag)?;
        self.backend.send(dest, tag, data)?;
        self.messages_sent += 1;
        Ok(())
    }

    /// Posts a receive from `src` (a rank or any) with `tag` (a tag or any user tag).
    pub fn irecv(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Request> {
        let src = src.into();
        Ok(Request {
            id: self.irecv_raw(src, Self::check_match(tag.into())?)?,
            recv: true,
            peer: src,
            owner: self.owner,
        })
    }

    /// Receives the next message matching `src` and `tag`, progressing until it arrives.
    pub fn recv(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Message> {
        self.backend.recv(src.into(), Self::check_match(tag.into())?)
    }

    /// Progresses once, then returns the next matching message if it has fully arrived.
    pub fn try_recv(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Option<Message>> {
        let tag = Self::check_match(tag.into())?;
        self.progress()?;
        Ok(self.backend.try_take(src.into(), tag))
    }

    /// Receives the next message matching `src` and `tag` if it is at most `cap` bytes
    /// long, progressing until one arrives: `Ok(message)`; a longer one is left queued,
    /// first for the next receive that matches its source and tag, and its envelope
    /// returned as `Err`. Waits as `recv` does (on the engine, a receive posted with `cap`
    /// as its limit). The refused message keeps its place in its sender's order on the
    /// engine; on the MPI native path it has been taken out of MPI, so a later receive of
    /// any tag takes it before an earlier message of that sender with another tag that is
    /// still in MPI (one already queued, e.g. after `probe`, keeps its place). Errors:
    /// [`FabricError::InvalidRank`](crate::comm::error::FabricError::InvalidRank) for a rank outside the world; the transport's.
    pub fn recv_within(
        &mut self,
        src: impl Into<Source>,
        tag: impl Into<TagMatch>,
        cap: usize,
    ) -> Result<std::result::Result<Message, Envelope>> {
        self.backend
            .recv_within(src.into(), Self::check_match(tag.into())?, cap)
    }

    /// Receives the next message matching `src` and `tag` into `buf`, progressing until
    /// one arrives, if it is at most `buf.len()` bytes long: `Ok(envelope)`, its bytes in
    /// `buf[..envelope.len]`, nothing past them written. A longer one is left queued, as
    /// [`Communicator::recv_within`] leaves it, and its envelope returned as `Err` (`buf`
    /// untouched). This is MPI's receive into a caller's buffer, without a message `Vec`
    /// between where it can be: on the engine a message that arrives while it waits is
    /// written into `buf` chunk by chunk (one already queued is copied); on the MPI native
    /// path a whole message is copied from MPI's receive buffer and a large one's parts are
    /// received into `buf`. Errors: [`FabricError::InvalidRank`](crate::comm::error::FabricError::InvalidRank) for a rank outside the world;
    /// the transport's. After an error, the rest of a message already being written into
    /// `buf` is dropped (the message is lost, as a failed `MPI_Recv`'s).
    pub fn recv_into(
        &mut self,
        src: impl Into<Source>,
        tag: impl Into<TagMatch>,
        buf: &mut [u8],
    ) -> Result<std::result::Result<Envelope, Envelope>> {
        self.backend
            .recv_into(src.into(), Self::check_match(tag.into())?, buf)
    }

    /// Progresses once, then tells the source, tag and length of the message that
    /// [`Communicator::try_recv`] (or a `recv` with the same `src` and `tag`) would take
    /// next, if it has fully arrived; the message stays queued. Errors: [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone)
    /// when none is queued and none can come any more: rank `src` ended, told on the engine
    /// over a fabric that reports ends (local), as [`Communicator::probe`] would return
    /// (not for [`Source::Any`] while no rank failed: this rank may still send to itself);
    /// the transport's.
    pub fn iprobe(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Option<Envelope>> {
        backend::iprobe(&mut *self.backend, src.into(), Self::check_match(tag.into())?)
    }

    /// Progresses (waiting as [`Communicator::wait`] does) until a message matching `src`
    /// and `tag` has fully arrived, and returns its envelope; the message stays queued for
    /// the next [`Communicator::try_recv`] or `recv` with the same `src` and `tag`.
    pub fn probe(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Envelope> {
        backend::probe(&mut *self.backend, src.into(), Self::check_match(tag.into())?)
    }

    /// Progresses once and tells whether `req` has completed (it stays valid for `wait`).
    /// Errors: [`CommError::PeerGone`](crate::comm::error::CommError::PeerGone) when it can never complete, as [`Communicator::wait`]
    /// would return (the rank it receives from ended, or the rank it sends to failed; told
    /// on the engine over a fabric that reports ends, i.e. local), so that a polling loop
    /// ends; not for an any-source receive while no rank failed (this rank may still send
    /// to itself); [`CommError::ForeignRequest`]
    /// at once for a request of another communicator; the transport's.
    pub fn test(&mut self, req: &Request) -> Result<bool> {
        self.check_owner(req, "test")?;
        backend::test(&mut *self.backend, req)
    }

    /// Progresses until `req` completes. While nothing happens it polls briefly, then
    /// yields; on the local transport it then blocks until an arrival wakes it (using no
    /// core), on MPI and verbs it sleeps in short steps. `recv`, `send`, `barrier` and
    /// `all_gatherv` wait the same way. Errors:
    /// [`CommError::ForeignRequest`] at once for a
    /// request of another communicator (given back in the error); the transport's.
    pub fn wait(&mut self, req: Request) -> Result<Completion> {
        if req.owner.comm != self.owner.comm {
            return Err(self.foreign(req.owner, "wait", Some(req)));
        }
        self.wait_as(req, "wait")
    }

    /// [`Communicator::wait`] for the blocking call `op`: once every rank that could
    /// complete `req` ended ([`CommError::PeerGone`](crate::comm::error::CommError::PeerGone), see `gone`), an error naming `op`.
    #[inline]
    fn wait_as(&mut self, req: Request, op: &'static str) -> Result<Completion> {
        self.backend.wait(req, op)
    }

    /// Waits for all requests, in order. Errors: the first error of a wait (the requests
    /// after it are dropped unwaited);
    /// [`CommError::ForeignRequest`] before any
    /// wait when one of them belongs to another communicator (the first such is given back
    /// in the error, the others dropped).
    pub fn wait_all(&mut self, mut reqs: Vec<Request>) -> Result<Vec<Completion>> {
        if let Some(i) = reqs.iter().position(|r| r.owner.comm != self.owner.comm) {
            let r = reqs.swap_remove(i);
            return Err(self.foreign(r.owner, "wait_all", Some(r)));
        }
        reqs.into_iter().map(|r| self.wait_as(r, "wait")).collect()
    }

    /// Advances the runtime: polls arrivals and completions, answers handshakes and credit
    /// requests, posts queued chunks. Returns true if anything happened.
    pub fn progress(&mut self) -> Result<bool> {
        self.backend.progress()
    }

    /// Transport memory of this rank by kind, as accounted now.
    pub fn footprint(&self) -> Footprint {
        self.backend.footprint()
    }

    /// Pool occupancy counters.
    pub fn pool_stats(&self) -> PoolStats {
        self.backend.pool_stats()
    }

    /// Endpoint counters (live, peak, opened, evicted, peers connected).
    pub fn endpoint_stats(&self) -> EndpointStats {
        self.backend.endpoint_stats()
    }

    /// Counters of the datagram path (`endpoint_overflow=datagram` past `max_endpoints`):
    /// datagrams sent, sent again, acknowledgements, dropped on arrival, promotions.
    /// `None` when it does not run (no cap, `evict`, a transport without datagrams, the
    /// MPI native path).
    pub fn datagram_stats(&self) -> Option<crate::protocol::engine::DatagramStats> {
        self.backend.datagram_stats()
    }

    /// True if the shared-queue credit accounting balances (diagnostics for tests).
    pub fn credits_consistent(&self) -> bool {
        self.backend.credits_consistent()
    }

    /// Delivers all own sends, then keeps serving other ranks until every rank is done.
    pub(crate) fn finalize(&mut self) -> Result<()> {
        backend::finalize(&mut *self.backend)
    }
}
