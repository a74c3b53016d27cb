//! The embedding API for simulator code: [`Communicator`], a rank's handle with blocking
//! and non-blocking tagged point-to-point, `barrier`, `all_gatherv` and `progress`.
//! Everything runs on the caller's thread: a simulator drives the runtime from one
//! thread and calls [`Communicator::progress`] between compute steps.

use crate::core::backoff::Backoff;
use crate::core::config::TransportConfig;
use crate::core::error::{Error, Result};
use crate::core::footprint::{Footprint, MemoryLock};
use crate::core::pool::PoolStats;
use crate::fabric::Fabric;
use crate::protocol::collective::CollectiveSeq;
use crate::protocol::connection::EndpointStats;
use crate::protocol::engine::Engine;
use crate::protocol::matching::{Envelope, Message, RecvInto, Source, Tag, TagMatch, RESERVED_TAG_BASE};

mod collectives;
mod gone;

use gone::EndCheck;

/// Handle of a non-blocking operation.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a request must be waited for or tested to completion"]
pub struct Request {
    id: u64,
    recv: bool,
    /// The rank a send goes to, or the ranks a receive takes from.
    peer: Source,
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

/// What carries a communicator's messages: the progress engine over a [`Fabric`] (every
/// transport), or MPI itself (the MPI native path, one MPI message per Ballast message).
/// One per communicator, never in a collection: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Engine(Engine),
    #[cfg(feature = "mpi")]
    Native(Box<crate::transport::mpi::native::MpiNative>),
}

/// Calls the same method on either backend.
macro_rules! on_backend {
    ($self:expr, $b:ident => $e:expr) => {
        match $self {
            Backend::Engine($b) => $e,
            #[cfg(feature = "mpi")]
            Backend::Native($b) => $e,
        }
    };
}

/// The engine of a communicator known to run on it (the limited receives' wait, after
/// the native backend returned).
fn engine_of(backend: &mut Backend) -> &mut Engine {
    match backend {
        Backend::Engine(e) => e,
        #[cfg(feature = "mpi")]
        Backend::Native(_) => unreachable!("called on the engine only"),
    }
}

/// How a limited blocking receive on the engine ended ([`Communicator::recv_within`],
/// [`Communicator::recv_into`]).
enum Limited {
    /// The message, in a buffer of its own.
    Message(Message),
    /// The message, written into the lent buffer.
    Into(Envelope),
    /// A longer message, left queued.
    Refused(Envelope),
}

/// A rank's communicator.
pub struct Communicator {
    backend: Backend,
    /// The backend's setup notes plus the creator's (e.g. why the MPI native path was not
    /// taken); fixed at creation.
    notes: Vec<String>,
    /// Messages this rank sent so far (see [`Communicator::messages_sent`]).
    messages_sent: u64,
    /// The collectives this rank started (their sequence stamps).
    collectives: CollectiveSeq,
}

impl Communicator {
    /// Builds a communicator over `fabric` (registers the pool, sets up receive queues,
    /// connects all peers when `lazy_connect` is off).
    pub fn new(fabric: Box<dyn Fabric>, config: &TransportConfig) -> Result<Communicator> {
        let e = Engine::new(fabric, config)?;
        Ok(Communicator {
            notes: e.notes().to_vec(),
            backend: Backend::Engine(e),
            messages_sent: 0,
            collectives: CollectiveSeq::default(),
        })
    }

    #[cfg(feature = "mpi")]
    pub(crate) fn native(n: crate::transport::mpi::native::MpiNative) -> Communicator {
        Communicator {
            notes: n.notes().to_vec(),
            backend: Backend::Native(Box::new(n)),
            messages_sent: 0,
            collectives: CollectiveSeq::default(),
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
        on_backend!(&self.backend, b => b.rank())
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        on_backend!(&self.backend, b => b.world_size())
    }

    /// Effective transport configuration (after fallbacks such as xrc -> shared).
    pub fn config(&self) -> &TransportConfig {
        on_backend!(&self.backend, b => b.config())
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
        match &self.backend {
            Backend::Engine(e) => e.memory_lock(),
            #[cfg(feature = "mpi")]
            Backend::Native(_) => MemoryLock::default(),
        }
    }

    /// True when this communicator runs on the MPI native path (one MPI message per
    /// Ballast message; no pool, endpoints or credits of Ballast's own).
    pub fn is_mpi_native(&self) -> bool {
        !matches!(self.backend, Backend::Engine(_))
    }

    /// One idle step of a blocking call (see [`Backoff`]): blocks until an arrival on a
    /// fabric that can.
    fn snooze(&self, b: &mut Backoff) {
        match &self.backend {
            Backend::Engine(e) => {
                let f = e.fabric();
                let limit = e.wait_limit();
                b.snooze_on(f.blocks_when_idle(), |d| {
                    f.wait_for_arrival(limit.map_or(d, |l| d.min(l)))
                })
            }
            #[cfg(feature = "mpi")]
            Backend::Native(_) => b.snooze(),
        }
    }

    fn check_tag(tag: Tag) -> Result<()> {
        if tag >= RESERVED_TAG_BASE {
            return Err(Error::ReservedTag(tag));
        }
        Ok(())
    }

    fn isend_raw(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<u64> {
        let id = on_backend!(&mut self.backend, b => b.isend(dest, tag, data))?;
        self.messages_sent += 1;
        Ok(id)
    }

    /// Messages this rank sent so far, whole messages (not packets), its own to itself and
    /// those of collectives (`barrier`, `all_gatherv`) included.
    pub fn messages_sent(&self) -> u64 {
        self.messages_sent
    }

    fn irecv_raw(&mut self, src: Source, tag: TagMatch) -> Result<u64> {
        on_backend!(&mut self.backend, b => b.irecv(src, tag))
    }

    /// Starts sending `data` to `dest` with `tag`. The first `buffer_size` bytes are copied
    /// into a pool buffer now (the rest into a private copy), so `data` may be reused at
    /// once. On a transport with a direct path (MPI) a message larger than its threshold is
    /// copied once, whole, into a private buffer instead and takes no pool buffer; on the
    /// MPI native path every message is copied once into a private buffer. Errors:
    /// [`Error::WouldBlock`] when no pool buffer is free (call [`Communicator::progress`]
    /// and retry), [`Error::InvalidRank`], [`Error::ReservedTag`].
    pub fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<Request> {
        Self::check_tag(tag)?;
        Ok(Request {
            id: self.isend_raw(dest, tag, data)?,
            recv: false,
            peer: Source::Rank(dest),
        })
    }

    /// [`Communicator::isend`] that, while no pool buffer is free, progresses and waits
    /// (blocking on the local transport, see [`Communicator::wait`]) instead of returning
    /// [`Error::WouldBlock`]. Errors: [`Error::InvalidRank`], [`Error::ReservedTag`], the
    /// transport's.
    pub fn isend_waiting(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<Request> {
        Self::check_tag(tag)?;
        Ok(Request {
            id: self.isend_retry(dest, tag, data)?,
            recv: false,
            peer: Source::Rank(dest),
        })
    }

    /// `isend` that progresses and retries while the pool is exhausted.
    fn isend_retry(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<u64> {
        let mut b = Backoff::new();
        let mut check = EndCheck::default();
        loop {
            match self.isend_raw(dest, tag, data) {
                Ok(id) => return Ok(id),
                Err(Error::WouldBlock) => {
                    // A failed rank holds pool buffers for ever (its credits never
                    // come): the pool may never free.
                    let worked = self.progress()?;
                    if worked {
                        b.reset();
                    }
                    let on = (Source::Any, false, "send");
                    if self.after_round(worked, &mut check, on, &mut |_| Ok(false))? {
                        self.snooze(&mut b);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn send_internal(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        let id = self.isend_retry(dest, tag, data)?;
        let req = Request {
            id,
            recv: false,
            peer: Source::Rank(dest),
        };
        self.wait_as(req, "send").map(|_| ())
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
        match &mut self.backend {
            Backend::Engine(e) => {
                if e.goes_direct(dest, data.len()) {
                    e.send_direct(dest, tag, data)?;
                    self.messages_sent += 1;
                    return Ok(());
                }
            }
            #[cfg(feature = "mpi")]
            Backend::Native(n) => {
                n.send(dest, tag, data)?;
                self.messages_sent += 1;
                return Ok(());
            }
        }
        self.send_internal(dest, tag, data)
    }

    /// Posts a receive from `src` (a rank or any) with `tag` (a tag or any user tag).
    pub fn irecv(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Request> {
        let src = src.into();
        Ok(Request {
            id: self.irecv_raw(src, tag.into())?,
            recv: true,
            peer: src,
        })
    }

    /// Receives the next message matching `src` and `tag`, progressing until it arrives.
    pub fn recv(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Message> {
        #[cfg(feature = "mpi")]
        if let Backend::Native(n) = &mut self.backend {
            return n.recv(src.into(), tag.into());
        }
        let r = self.irecv(src, tag)?;
        Ok(self.wait_as(r, "recv")?.into_message().expect("receive request"))
    }

    /// Progresses once, then returns the next matching message if it has fully arrived.
    pub fn try_recv(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Option<Message>> {
        self.progress()?;
        let (src, tag) = (src.into(), tag.into());
        Ok(on_backend!(&mut self.backend, b => b.try_take(src, tag)))
    }

    /// Receives the next message matching `src` and `tag` if it is at most `cap` bytes
    /// long, progressing until one arrives: `Ok(message)`; a longer one is left queued,
    /// first for the next receive that matches its source and tag, and its envelope
    /// returned as `Err`. Waits as `recv` does (on the engine, a receive posted with `cap`
    /// as its limit). The refused message keeps its place in its sender's order on the
    /// engine; on the MPI native path it has been taken out of MPI, so a later receive of
    /// any tag takes it before an earlier message of that sender with another tag that is
    /// still in MPI (one already queued, e.g. after `probe`, keeps its place). Errors:
    /// [`Error::InvalidRank`] for a rank outside the world; the transport's.
    pub fn recv_within(
        &mut self,
        src: impl Into<Source>,
        tag: impl Into<TagMatch>,
        cap: usize,
    ) -> Result<std::result::Result<Message, Envelope>> {
        let (src, tag) = (src.into(), tag.into());
        #[cfg(feature = "mpi")]
        if let Backend::Native(n) = &mut self.backend {
            return n.recv_within(src, tag, cap);
        }
        Ok(match self.engine_recv_limited(src, tag, cap, None)? {
            Limited::Message(m) => Ok(m),
            Limited::Refused(e) => Err(e),
            Limited::Into(_) => unreachable!("no buffer was lent"),
        })
    }

    /// Receives the next message matching `src` and `tag` into `buf`, progressing until
    /// one arrives, if it is at most `buf.len()` bytes long: `Ok(envelope)`, its bytes in
    /// `buf[..envelope.len]`, nothing past them written. A longer one is left queued, as
    /// [`Communicator::recv_within`] leaves it, and its envelope returned as `Err` (`buf`
    /// untouched). This is MPI's receive into a caller's buffer, without a message `Vec`
    /// between where it can be: on the engine a message that arrives while it waits is
    /// written into `buf` chunk by chunk (one already queued is copied); on the MPI native
    /// path a whole message is copied from MPI's receive buffer and a large one's parts are
    /// received into `buf`. Errors: [`Error::InvalidRank`] for a rank outside the world;
    /// the transport's. After an error, the rest of a message already being written into
    /// `buf` is dropped (the message is lost, as a failed `MPI_Recv`'s).
    pub fn recv_into(
        &mut self,
        src: impl Into<Source>,
        tag: impl Into<TagMatch>,
        buf: &mut [u8],
    ) -> Result<std::result::Result<Envelope, Envelope>> {
        let (src, tag) = (src.into(), tag.into());
        #[cfg(feature = "mpi")]
        if let Backend::Native(n) = &mut self.backend {
            return n.recv_into(src, tag, buf);
        }
        Ok(
            match self.engine_recv_limited(src, tag, buf.len(), Some(&mut *buf))? {
                Limited::Into(e) => Ok(e),
                Limited::Message(m) => {
                    buf[..m.data.len()].copy_from_slice(&m.data);
                    Ok(m.envelope())
                }
                Limited::Refused(e) => Err(e),
            },
        )
    }

    /// `recv_within` on the engine: a receive posted with the limit, so that a message
    /// arriving during the wait binds to it as to `recv`'s, waited for as `wait` does.
    /// With `into` (of `cap` bytes) lent to every progress of the wait, a message that
    /// binds as it arrives is written there (`Limited::Into`); one that was already
    /// queued, or arrived whole in a buffer of its own, comes as `Limited::Message`.
    fn engine_recv_limited(
        &mut self,
        src: Source,
        tag: TagMatch,
        cap: usize,
        into: Option<&mut [u8]>,
    ) -> Result<Limited> {
        let id = engine_of(&mut self.backend).irecv_within(src, tag, cap)?;
        let r = self.engine_wait_limited(id, src, into);
        if r.is_err() {
            engine_of(&mut self.backend).cancel_recv(id);
        }
        r
    }

    /// The wait of [`Communicator::engine_recv_limited`] for its receive `id`.
    fn engine_wait_limited(&mut self, id: u64, src: Source, mut into: Option<&mut [u8]>) -> Result<Limited> {
        let mut b = Backoff::new();
        // The end seen of the sender, and whether a round of progress came after it.
        let mut gone: Option<(gone::Gone, bool)> = None;
        let mut check = EndCheck::default();
        let mut worked = true;
        loop {
            let e = engine_of(&mut self.backend);
            if into.is_some() {
                if let Some(env) = e.take_into_done(id) {
                    return Ok(Limited::Into(env));
                }
            }
            if e.recv_done(id) {
                return e
                    .take_recv(id)
                    .map(Limited::Message)
                    .ok_or(Error::UnknownRequest(id));
            }
            if let Some(refused) = e.take_refused(id) {
                return Ok(Limited::Refused(refused));
            }
            // The round after the sender was seen ended (idle, if it finished) brought no
            // outcome (the checks above): nothing can.
            if let Some((g, true)) = gone.take_if(|(_, after)| *after) {
                if !worked || g.sure {
                    return Err(g.error);
                }
            }
            let lent = into.as_deref_mut().map(|buf| RecvInto { req: id, buf });
            worked = e.progress_into(lent)?;
            if worked {
                b.reset();
            }
            if let Some((g, false)) = gone.take() {
                gone = Some((g, true));
            } else if check.due(worked) {
                // One more round takes what an ended rank sent, or nothing will.
                gone = self.gone(src, true, "recv").map(|g| (g, false));
            }
            if gone.is_none() && !worked {
                self.snooze(&mut b);
            }
        }
    }

    /// Progresses once, then tells the source, tag and length of the message that
    /// [`Communicator::try_recv`] (or a `recv` with the same `src` and `tag`) would take
    /// next, if it has fully arrived; the message stays queued. Errors: the transport's.
    pub fn iprobe(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Option<Envelope>> {
        self.progress()?;
        let (src, tag) = (src.into(), tag.into());
        Ok(on_backend!(&mut self.backend, b => b.peek(src, tag)))
    }

    /// Progresses (waiting as [`Communicator::wait`] does) until a message matching `src`
    /// and `tag` has fully arrived, and returns its envelope; the message stays queued for
    /// the next [`Communicator::try_recv`] or `recv` with the same `src` and `tag`.
    pub fn probe(&mut self, src: impl Into<Source>, tag: impl Into<TagMatch>) -> Result<Envelope> {
        let (src, tag) = (src.into(), tag.into());
        let mut b = Backoff::new();
        let mut check = EndCheck::default();
        loop {
            let active = self.progress()?;
            if let Some(e) = on_backend!(&mut self.backend, b => b.peek(src, tag)) {
                return Ok(e);
            }
            if active {
                b.reset();
            }
            let seen = &mut |c: &mut Self| Ok(on_backend!(&mut c.backend, b => b.peek(src, tag)).is_some());
            if self.after_round(active, &mut check, (src, true, "probe"), seen)? {
                self.snooze(&mut b);
            }
        }
    }

    /// Progresses once and tells whether `req` has completed (it stays valid for `wait`).
    pub fn test(&mut self, req: &Request) -> Result<bool> {
        self.progress()?;
        self.is_done(req)
    }

    fn is_done(&self, req: &Request) -> Result<bool> {
        if req.recv {
            Ok(on_backend!(&self.backend, b => b.recv_done(req.id)))
        } else {
            on_backend!(&self.backend, b => b.send_done(req.id))
        }
    }

    /// Progresses until `req` completes. While nothing happens it polls briefly, then
    /// yields; on the local transport it then blocks until an arrival wakes it (using no
    /// core), on MPI and verbs it sleeps in short steps. `recv`, `send`, `barrier` and
    /// `all_gatherv` wait the same way.
    pub fn wait(&mut self, req: Request) -> Result<Completion> {
        self.wait_as(req, "wait")
    }

    /// [`Communicator::wait`] for the blocking call `op`: once every rank that could
    /// complete `req` ended ([`Error::PeerGone`], see `gone`), an error naming `op`.
    fn wait_as(&mut self, req: Request, op: &'static str) -> Result<Completion> {
        #[cfg(feature = "mpi")]
        if let (true, Backend::Native(n)) = (req.recv, &mut self.backend) {
            return n.wait_posted(req.id).map(Completion::Received);
        }
        let (id, recv) = (req.id, req.recv);
        let r = self.wait_engine(req, op);
        if r.is_err() && recv {
            // Withdrawn: a message still on its way (or one refused for memory, kept by the
            // fabric) is left for a later receive.
            engine_of(&mut self.backend).cancel_recv(id);
        }
        r
    }

    /// The loop of [`Communicator::wait_as`] on the engine.
    fn wait_engine(&mut self, req: Request, op: &'static str) -> Result<Completion> {
        let mut b = Backoff::new();
        let mut check = EndCheck::default();
        while !self.is_done(&req)? {
            let worked = self.progress()?;
            if worked {
                b.reset();
            }
            let on = (req.peer, req.recv, op);
            if self.after_round(worked, &mut check, on, &mut |c| c.is_done(&req))? {
                self.snooze(&mut b);
            }
        }
        if req.recv {
            let m = on_backend!(&mut self.backend, b => b.take_recv(req.id))
                .ok_or(Error::UnknownRequest(req.id))?;
            Ok(Completion::Received(m))
        } else {
            on_backend!(&mut self.backend, b => b.finish_send(req.id));
            Ok(Completion::Sent)
        }
    }

    /// Waits for all requests, in order.
    pub fn wait_all(&mut self, reqs: Vec<Request>) -> Result<Vec<Completion>> {
        reqs.into_iter().map(|r| self.wait(r)).collect()
    }

    /// Advances the runtime: polls arrivals and completions, answers handshakes and credit
    /// requests, posts queued chunks. Returns true if anything happened.
    pub fn progress(&mut self) -> Result<bool> {
        on_backend!(&mut self.backend, b => b.progress())
    }

    /// Transport memory of this rank by kind, as accounted now.
    pub fn footprint(&self) -> Footprint {
        on_backend!(&self.backend, b => b.footprint())
    }

    /// Pool occupancy counters.
    pub fn pool_stats(&self) -> PoolStats {
        on_backend!(&self.backend, b => b.pool_stats())
    }

    /// Endpoint counters (live, peak, opened, evicted, peers connected).
    pub fn endpoint_stats(&self) -> EndpointStats {
        on_backend!(&self.backend, b => b.endpoint_stats())
    }

    /// Counters of the datagram path (`endpoint_overflow=datagram` past `max_endpoints`):
    /// datagrams sent, sent again, acknowledgements, dropped on arrival, promotions.
    /// `None` when it does not run (no cap, `evict`, a transport without datagrams, the
    /// MPI native path).
    pub fn datagram_stats(&self) -> Option<crate::protocol::engine::DatagramStats> {
        match &self.backend {
            Backend::Engine(e) => e.datagram_stats(),
            #[cfg(feature = "mpi")]
            Backend::Native(_) => None,
        }
    }

    /// True if the shared-queue credit accounting balances (diagnostics for tests).
    pub fn credits_consistent(&self) -> bool {
        match &self.backend {
            Backend::Engine(e) => e.credits_consistent(),
            #[cfg(feature = "mpi")]
            Backend::Native(_) => true, // no credits: MPI does its own flow control
        }
    }

    /// Delivers all own sends, then keeps serving other ranks until every rank is done.
    pub(crate) fn finalize(&mut self) -> Result<()> {
        let mut b = Backoff::new();
        let mut check = EndCheck::default();
        while !on_backend!(&self.backend, e => e.sends_drained()) {
            let worked = self.progress()?;
            if worked {
                b.reset();
            }
            // A send to a failed rank is never delivered.
            let drained = &mut |c: &mut Self| Ok(on_backend!(&c.backend, e => e.sends_drained()));
            if self.after_round(worked, &mut check, (Source::Any, false, "finish"), drained)? {
                self.snooze(&mut b);
            }
        }
        match &mut self.backend {
            Backend::Engine(e) => e.fabric_mut().mark_done(),
            #[cfg(feature = "mpi")]
            Backend::Native(n) => n.mark_done(),
        }
        loop {
            let done = match &mut self.backend {
                Backend::Engine(e) => e.fabric_mut().all_done(),
                #[cfg(feature = "mpi")]
                Backend::Native(n) => n.all_done(),
            };
            if done {
                return Ok(());
            }
            if self.progress()? {
                b.reset();
            } else {
                self.snooze(&mut b);
            }
        }
    }
}
