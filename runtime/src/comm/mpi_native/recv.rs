//! Receiving on the native path: matching a receive against the unexpected queue, posting
//! it to MPI, and the blocking receive's latency path.

use super::*;
use crate::comm::error::{CommError, FabricError};

impl MpiNative {
    pub(super) fn wire_match(&self, src: Source, tag: TagMatch) -> Result<(usize, c_int, c_int)> {
        let s = match src {
            Source::Any => any_source(),
            Source::Rank(r) => {
                self.check_rank(r)?;
                r as c_int
            }
        };
        Ok(match tag {
            TagMatch::Any => (USER, s, any_tag()),
            TagMatch::Tag(t) => {
                let (c, m) = Self::wire_tag(t);
                (c, s, m)
            }
        })
    }

    pub(super) fn take_unexpected(&mut self, chan: usize, src: c_int, tag: c_int) -> Option<Message> {
        let i = self.unexpected_match(chan, src, tag)?;
        self.unexpected.remove(i).map(|(_, m)| m)
    }

    /// The place of the earliest queued unexpected message matching `(src, tag)` on `chan`.
    fn unexpected_match(&self, chan: usize, src: c_int, tag: c_int) -> Option<usize> {
        self.unexpected.iter().position(|(c, m)| {
            *c == chan
                && (src == any_source() || m.source as c_int == src)
                && (tag == any_tag() || Self::wire_tag(m.tag).1 == tag)
        })
    }

    /// For a receive of at most `cap` bytes: the envelope of the earliest queued match if
    /// it is longer (it stays where it is), else nothing.
    pub(super) fn queued_too_long(
        &self,
        chan: usize,
        src: c_int,
        tag: c_int,
        cap: usize,
    ) -> Option<Envelope> {
        let i = self.unexpected_match(chan, src, tag)?;
        let m = &self.unexpected.get(i)?.1;
        (m.data.len() > cap).then(|| m.envelope())
    }

    /// A message received from MPI for a blocking receive it is too long for: it joins
    /// the unexpected queue where the queue ended when it came out of MPI
    /// (`scratch_mark`), behind the messages taken out before it and ahead of those taken
    /// out after it (while its parts arrived), first for its source and tag; its envelope.
    fn put_back(&mut self, chan: usize, m: Message) -> Envelope {
        let e = m.envelope();
        let at = self
            .scratch_mark
            .take()
            .map_or(self.unexpected.len(), |k| k.min(self.unexpected.len()));
        self.unexpected.insert(at, (chan, m));
        e
    }

    #[inline(always)]
    pub(super) fn post_recv(&mut self, src: Source, tag: TagMatch, scratch: bool) -> Result<RequestId> {
        let (chan, s, t) = self.wire_match(src, tag)?;
        self.post_matched(chan, s, t, scratch)
    }

    /// [`MpiNative::post_recv`] of a receive whose source and tag are matched to `(s, t)`
    /// on `chan` already ([`MpiNative::wire_match`]).
    #[inline(always)]
    pub(super) fn post_matched(
        &mut self,
        chan: usize,
        s: c_int,
        t: c_int,
        scratch: bool,
    ) -> Result<RequestId> {
        // A deferred message may be this receive's: it goes first.
        self.retry_deferred()?;
        let id = self.new_id();
        if !self.unexpected.is_empty() {
            if let Some(m) = self.take_unexpected(chan, s, t) {
                self.done_recvs.insert(id, m);
                return Ok(id);
            }
        }
        let buf = if scratch {
            std::mem::take(&mut self.recv_scratch)
        } else {
            // The kept receive buffer while nothing else holds it (given back when the
            // receive ends, `keep_head`): no allocation in a loop of one receive at a time.
            self.lend_head()
        };
        let recv = self.post_header_recv(chan, s, t, buf)?;
        self.recvs.push(PendingRecv {
            id,
            chan,
            src: s,
            tag: t,
            state: RecvState::Header { recv, scratch },
        });
        Ok(id)
    }

    /// Posts an `MPI_Irecv` of `head_bytes` (a whole message and its kind byte, or a large
    /// message's header, whichever is longer: no message is truncated) from `(s, t)` on
    /// `chan` into `buf` (cleared and grown as needed), which the returned receive owns
    /// until it completed or was cancelled.
    #[inline(always)]
    fn post_header_recv(&self, chan: usize, s: c_int, t: c_int, buf: Vec<u8>) -> Result<HeaderRecv> {
        HeaderRecv::post(&self.chans[chan].msgs, s, t, buf, self.head_bytes)
    }

    /// Posts a receive; a matching unexpected message completes it at once.
    #[inline]
    pub fn irecv(&mut self, src: Source, tag: TagMatch) -> Result<RequestId> {
        self.post_recv(src, tag, false)
    }

    /// Receives the next matching message, progressing until it is there (into the kept
    /// receive buffer, then copied to a `Vec` of its size).
    pub fn recv(&mut self, src: Source, tag: TagMatch) -> Result<Message> {
        self.never_from_self(src, tag, "recv")?;
        let got = if self.alone() {
            self.recv_alone(src, tag, &mut ToMessage)?
        } else {
            self.recv_posted(src, tag, &mut ToMessage)?
        };
        Ok(match got {
            Got::Taken(m) | Got::Message(m) => m,
        })
    }

    /// A blocking receive through a posted receive with the kept buffer (something else is
    /// in flight).
    fn recv_posted<T: Take>(&mut self, src: Source, tag: TagMatch, take: &mut T) -> Result<Got<T::Out>> {
        let id = self.post_recv(src, tag, true)?;
        let w = self.wait_recv(id, Idle::new());
        if let Err(e) = &w {
            self.withdraw(id, e);
        }
        self.waited(w?, take)
    }

    /// What a blocking receive's wait ended with, through `take`.
    fn waited<T: Take>(&mut self, w: Waited, take: &mut T) -> Result<Got<T::Out>> {
        match w {
            Waited::Message(m) => Ok(Got::Message(m)),
            Waited::Parts(p) => take.large(self, &p)?.map(Got::Taken).ok_or_else(|| {
                Error::Fabric(FabricError::BadPacket {
                    rank: self.rank,
                    from: Sender::Rank(p.source),
                    bytes: 0,
                    what: "a large message's parts set aside for a receive that does not take them".into(),
                })
            }),
        }
    }

    /// Nothing else in flight or queued: the latency path ([`MpiNative::recv_alone`]) may
    /// be taken.
    fn alone(&self) -> bool {
        self.recvs.is_empty()
            && self.sends.is_empty()
            && self.unexpected.is_empty()
            && self.deferred.is_empty()
    }

    /// `recv` into `buf`, or, for a message longer than `buf`, its envelope with the
    /// message left queued as `recv_within` leaves it. On the latency
    /// path a whole message is copied from the kept receive buffer into `buf` directly, and
    /// a large one's parts are received into `buf`: no message `Vec` either way.
    pub fn recv_into(
        &mut self,
        src: Source,
        tag: TagMatch,
        buf: &mut [u8],
    ) -> Result<std::result::Result<Envelope, Envelope>> {
        let (chan, s, t) = self.wire_match(src, tag)?;
        if let Some(e) = self.queued_too_long(chan, s, t, buf.len()) {
            return Ok(Err(e));
        }
        self.never_from_self(src, tag, "recv")?;
        self.scratch_mark = None;
        self.into_cap = Some(buf.len());
        let mut take = IntoBuf(&mut *buf);
        let got = if self.alone() {
            self.recv_alone(src, tag, &mut take)
        } else {
            self.recv_posted(src, tag, &mut take)
        };
        self.into_cap = None;
        self.scratch_parts = None;
        let m = match got? {
            Got::Taken(Ok(e)) => return Ok(Ok(e)),
            Got::Taken(Err(m)) | Got::Message(m) => m,
        };
        match buf.get_mut(..m.data.len()) {
            Some(to) => {
                to.copy_from_slice(&m.data);
                Ok(Ok(m.envelope()))
            }
            None => Ok(Err(self.put_back(chan, m))),
        }
    }

    /// `recv`, except that a message longer than `cap` bytes is not taken, and its envelope
    /// is returned: a queued one stays where it is; one received from MPI for this
    /// receive goes back into the unexpected queue where it would have been had it been
    /// taken out of MPI unmatched: behind the messages taken out before it (from its
    /// sender, earlier ones), ahead of those taken out while its parts arrived, first for
    /// its source and tag. Its order against messages of its sender with other tags that
    /// were still in MPI when it came out is not known: a later receive of any tag takes
    /// it before them.
    pub fn recv_within(
        &mut self,
        src: Source,
        tag: TagMatch,
        cap: usize,
    ) -> Result<std::result::Result<Message, Envelope>> {
        let (chan, s, t) = self.wire_match(src, tag)?;
        if let Some(e) = self.queued_too_long(chan, s, t, cap) {
            return Ok(Err(e));
        }
        self.scratch_mark = None;
        let m = self.recv(src, tag)?;
        if m.data.len() <= cap {
            return Ok(Ok(m));
        }
        Ok(Err(self.put_back(chan, m)))
    }

    /// `recv` when nothing else is in flight (the latency path of a ping-pong): one
    /// `MPI_Irecv` into the kept buffer, tested in place. Nothing else can complete or
    /// arrive in Ballast's queues meanwhile, so the receive needs no place in the posting
    /// order until the first housekeeping (after [`DRAIN_EVERY`] idle polls) or a large
    /// header: then it joins `recvs` and the general wait takes over.
    /// A whole message found in the kept buffer is handed to `take` there, and a large
    /// message's header offered to it: `Got::Taken` with what `take` made of it; a message
    /// that completes through the general wait comes back as `Got::Message`.
    pub(super) fn recv_alone<T: Take>(
        &mut self,
        src: Source,
        tag: TagMatch,
        take: &mut T,
    ) -> Result<Got<T::Out>> {
        let (chan, s, t) = self.wire_match(src, tag)?;
        let buf = std::mem::take(&mut self.recv_scratch);
        // The receive owns `buf` until it completed; then its bytes are read in place.
        let mut recv = self.post_header_recv(chan, s, t, buf)?;
        let mut idle = Idle::new();
        loop {
            let mut status = empty_status();
            let tested = recv.test(&mut status);
            let done = matches!(tested, Ok(true));
            if done {
                self.scratch_mark = Some(self.unexpected.len());
                // The bytes MPI wrote (their count taken once, by the test).
                let buf = recv.bytes().unwrap_or_default();
                let n = buf.len();
                if (1..=self.head_bytes).contains(&n) {
                    if buf[n - 1] == KIND_WHOLE {
                        self.received += 1;
                        let source = source_rank(status.MPI_SOURCE)?;
                        self.note_peer(source);
                        let r = take.whole(source, Self::ballast_tag(chan, status.MPI_TAG), &buf[..n - 1]);
                        self.recv_scratch = recv.take_filled().unwrap_or_default();
                        return Ok(Got::Taken(r));
                    }
                    if n == LARGE_HEADER && buf[n - 1] == KIND_LARGE {
                        let source = source_rank(status.MPI_SOURCE)?;
                        let bytes = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                        let parts = Parts {
                            chan,
                            source,
                            mtag: status.MPI_TAG,
                            tag: Self::ballast_tag(chan, status.MPI_TAG),
                            bytes,
                        };
                        if let Some(r) = take.large(self, &parts)? {
                            self.received += 1;
                            self.note_peer(source);
                            self.recv_scratch = recv.take_filled().unwrap_or_default();
                            return Ok(Got::Taken(r));
                        }
                    }
                }
            }
            if done || tested.is_err() || idle.housekeeping() {
                // A large header, something to report, or housekeeping due: join `recvs`.
                let id = self.new_id();
                self.recvs.push(PendingRecv {
                    id,
                    chan,
                    src: s,
                    tag: t,
                    state: RecvState::Header { recv, scratch: true },
                });
                tested?;
                let w = if done {
                    let i = self.recvs.len() - 1;
                    self.header_done(i, status).and_then(|_| self.wait_recv(id, idle))
                } else {
                    self.wait_recv(id, idle)
                };
                if let Err(e) = &w {
                    self.withdraw(id, e);
                }
                return self.waited(w?, take);
            }
            idle.snooze();
        }
    }

    /// Waits for blocking receive `id` (posted with the kept buffer) to complete, or, for
    /// a `recv_into` whose buffer holds it, for its large message's header.
    pub(super) fn wait_recv(&mut self, id: RequestId, mut idle: Idle) -> Result<Waited> {
        loop {
            if let Some(m) = self.scratch_done.take() {
                return Ok(Waited::Message(m));
            }
            if let Some(p) = self.scratch_parts.take() {
                return Ok(Waited::Parts(p));
            }
            if !self.done_recvs.is_empty() {
                // Matched an unexpected message at once, or a large message's parts.
                if let Some(m) = self.done_recvs.remove(&id) {
                    return Ok(Waited::Message(m));
                }
            }
            if self.poll(idle.housekeeping())? {
                idle.reset();
            } else {
                idle.snooze();
            }
        }
    }

    /// Waits for receive `id` of [`MpiNative::irecv`] to complete and takes its message,
    /// polling as a blocking receive does (`MpiNative::wait_recv`: busy polls first,
    /// housekeeping only after [`DRAIN_EVERY`] idle polls), so that `irecv` then `wait`
    /// costs what `recv` does.
    pub fn wait_posted(&mut self, id: RequestId) -> Result<Message> {
        let mut idle = Idle::new();
        let mut from_self = self
            .recvs
            .iter()
            .any(|r| r.id == id && r.src == self.rank as c_int);
        if !from_self {
            self.spin_alone(id)?;
        }
        loop {
            if let Some(m) = self.done_recvs.remove(&id) {
                return Ok(m);
            }
            if from_self && !self.sends_to_self() {
                // One round first: a message this rank sent itself before completes it.
                from_self = false;
                self.poll(true)?;
                let waiting = self
                    .recvs
                    .iter()
                    .any(|r| r.id == id && matches!(r.state, RecvState::Header { .. }));
                if waiting && !self.sends_to_self() {
                    return Err(self.self_gone("wait", Some(self.rank)));
                }
                continue;
            }
            if self.poll(idle.housekeeping())? {
                idle.reset();
            } else {
                idle.snooze();
            }
        }
    }

    /// The latency path of [`MpiNative::wait_posted`]: while receive `id` is the only
    /// request in flight (nothing else to progress or to keep in order), its `MPI_Test`
    /// in place, at most [`BUSY_POLLS`] times, as the blocking `recv` does
    /// ([`MpiNative::recv_alone`]), without a round of `poll`'s bookkeeping each time; then
    /// the general wait takes over (or finds it complete). Errors: MPI's, an abort.
    fn spin_alone(&mut self, id: RequestId) -> Result<()> {
        if !self.only_request(id) {
            return Ok(());
        }
        if let Some(status) = self.poll_alone()? {
            // A whole message completes it; a large one's parts are posted.
            self.header_done(0, status)?;
        }
        Ok(())
    }

    /// Whether receive `id` is the only request in flight, with nothing deferred.
    #[inline]
    pub(super) fn only_request(&self, id: RequestId) -> bool {
        matches!(self.recvs.as_slice(), [r] if r.id == id)
            && self.sends.is_empty()
            && self.deferred.is_empty()
    }

    /// `MPI_Test` in place of the one posted receive's header receive, at most
    /// [`BUSY_POLLS`] times: its status once complete (the receive still in `recvs`, for
    /// the caller to take in), `None` when it is not complete or not a header receive.
    /// Errors: MPI's, an abort.
    #[inline]
    pub(super) fn poll_alone(&mut self) -> Result<Option<Status>> {
        for _ in 0..BUSY_POLLS {
            if self.abort.is_set() {
                return Err(Error::Fabric(FabricError::Aborted));
            }
            let Some(PendingRecv {
                state: RecvState::Header { recv, .. },
                ..
            }) = self.recvs.first_mut()
            else {
                return Ok(None);
            };
            let mut status = empty_status();
            if recv.test(&mut status)? {
                return Ok(Some(status));
            }
        }
        Ok(None)
    }

    /// A blocking receive from this rank itself (or from any source in a world of 1) can
    /// never complete when nothing from it is queued or in MPI and none of this rank's
    /// sends to itself is in flight: only this rank's thread, blocked in the receive,
    /// could send it. [`CommError::PeerGone`] naming this rank as the peer then (no peer
    /// for an any-source receive: every other rank, none, finished), as the engine's end
    /// check does, else `Ok`.
    fn never_from_self(&mut self, src: Source, tag: TagMatch, op: &'static str) -> Result<()> {
        let peer = match src {
            Source::Rank(r) if r == self.rank => Some(r),
            Source::Any if self.world_size() == 1 => None,
            _ => return Ok(()),
        };
        if self.sends_to_self() || !self.deferred.is_empty() {
            return Ok(());
        }
        // (Every message waiting in MPI on the channel is taken into the queue first.)
        if self.peek(src, tag).is_some() || !self.deferred.is_empty() {
            return Ok(());
        }
        Err(self.self_gone(op, peer))
    }

    fn self_gone(&self, op: &'static str, peer: Option<usize>) -> Error {
        CommError::PeerGone {
            rank: self.rank,
            op,
            peer,
            failed: false,
        }
        .into()
    }

    /// True when receive `id` completed.
    pub fn recv_done(&self, id: RequestId) -> bool {
        self.done_recvs.contains_key(&id)
    }

    /// Takes the message of a completed receive.
    pub fn take_recv(&mut self, id: RequestId) -> Option<Message> {
        self.taken(id);
        let m = self.done_recvs.remove(&id)?;
        Some(self.own(m))
    }

    /// The kept receive buffer for a posted receive if nothing holds it (a blocking
    /// receive, another posted receive), else an empty `Vec` (the receive allocates).
    #[inline]
    fn lend_head(&mut self) -> Vec<u8> {
        if self.recv_scratch.capacity() == self.head_bytes {
            std::mem::take(&mut self.recv_scratch)
        } else {
            Vec::new()
        }
    }

    /// Receive buffer `buf` of a receive that ended becomes the kept receive buffer again
    /// when that one is out (lent, or taken by a blocking receive, which then allocated
    /// its own); otherwise it is freed. Only a buffer of exactly `head_bytes`.
    #[inline]
    pub(super) fn keep_head(&mut self, buf: Vec<u8>) {
        if buf.capacity() == self.head_bytes && self.recv_scratch.capacity() == 0 {
            self.recv_scratch = buf;
        }
    }

    /// Message `m` with bytes of its own: one that completed a receive of `irecv_within`
    /// sits in that receive's buffer ([`MpiNative::keep_head`] takes it back after
    /// [`MpiNative::wait_read`]); when it fills at most half of it, it is copied into a
    /// `Vec` of its length and the buffer kept, as for every other receive
    /// ([`MpiNative::finish_header`]), so that a message handed out or queued holds no
    /// receive buffer.
    pub(super) fn own(&mut self, mut m: Message) -> Message {
        if m.data.capacity() == self.head_bytes && m.data.len() <= self.head_bytes / 2 {
            let head = std::mem::take(&mut m.data);
            m.data = head.to_vec();
            self.keep_head(head);
        }
        m
    }

    /// Takes a matching message that arrived without a posted receive, if any.
    pub fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        let (chan, s, t) = self.wire_match(src, tag).ok()?;
        self.retry_deferred().ok()?;
        if let Some(m) = self.take_unexpected(chan, s, t) {
            return Some(m);
        }
        match self.probe_one(chan, s, t) {
            Ok(Some(m)) => Some(m),
            _ => None,
        }
    }

    /// The envelope of the message `try_take` would take now, leaving it queued. Every
    /// message waiting in MPI on the channel is received into the unexpected queue first, so
    /// that the queue keeps MPI's order and the earliest match is the one told.
    pub fn peek(&mut self, src: Source, tag: TagMatch) -> Option<Envelope> {
        let (chan, s, t) = self.wire_match(src, tag).ok()?;
        self.retry_deferred().ok()?;
        while let Ok(Some(m)) = self.probe_one(chan, any_source(), any_tag()) {
            self.unexpected.push_back((chan, m));
        }
        self.unexpected
            .iter()
            .find(|(c, m)| {
                *c == chan
                    && (s == any_source() || m.source as c_int == s)
                    && (t == any_tag() || Self::wire_tag(m.tag).1 == t)
            })
            .map(|(_, m)| m.envelope())
    }
}

/// What [`MpiNative::recv_alone`] received: a whole message handed to its `take` in the
/// kept buffer, or a message that completed through the general wait.
pub(super) enum Got<R> {
    Taken(R),
    Message(Message),
}

/// A large message whose header [`MpiNative::recv_alone`] received: its parts follow on
/// `chan`'s parts communicator from `source` with MPI tag `mtag`.
pub(super) struct Parts {
    pub(super) chan: usize,
    pub(super) source: usize,
    pub(super) mtag: c_int,
    pub(super) tag: Tag,
    pub(super) bytes: u64,
}

/// What a blocking receive's wait ([`MpiNative::wait_recv`]) ended with: its message, or
/// the header of a large one whose parts are next ([`MpiNative::recv_into`]).
pub(super) enum Waited {
    Message(Message),
    Parts(Parts),
}

/// Receives the parts of large message `p` into `to` (exactly its length).
fn receive_parts(n: &MpiNative, p: &Parts, to: &mut [u8]) -> Result<()> {
    let total = to.len();
    let mut off = 0;
    while off < total {
        let k = recv_to_slice(&n.chans[p.chan].parts, n.rank, p.source, p.mtag, &mut to[off..])?;
        if k == 0 {
            return Err(Error::Fabric(FabricError::BadPacket {
                rank: n.rank,
                from: Sender::Rank(p.source),
                bytes: 0,
                what: format!("empty part at {off} of {total} bytes"),
            }));
        }
        off += k;
    }
    Ok(())
}

/// What [`MpiNative::recv_alone`] does with what arrives on the latency path.
pub(super) trait Take {
    type Out;
    /// A whole message, in the kept receive buffer.
    fn whole(&mut self, source: usize, tag: Tag, data: &[u8]) -> Self::Out;
    /// A large message's header: `Some` when its parts were received here; `None` leaves
    /// the message to the general wait (which assembles it in a `Vec`).
    fn large(&mut self, _n: &mut MpiNative, _parts: &Parts) -> Result<Option<Self::Out>> {
        Ok(None)
    }
}

/// `recv`'s: the message in a `Vec` of its own.
struct ToMessage;

impl Take for ToMessage {
    type Out = Message;
    fn whole(&mut self, source: usize, tag: Tag, data: &[u8]) -> Message {
        Message {
            source,
            tag,
            data: data.to_vec(),
        }
    }
}

/// `recv_into`'s: the message written into the caller's buffer if it fits (a large one
/// part by part, straight from MPI), else a `Message` to put back (a whole one; a large
/// one is left to the general wait).
struct IntoBuf<'a>(&'a mut [u8]);

impl Take for IntoBuf<'_> {
    type Out = std::result::Result<Envelope, Message>;

    fn whole(&mut self, source: usize, tag: Tag, data: &[u8]) -> Self::Out {
        match self.0.get_mut(..data.len()) {
            Some(to) => {
                to.copy_from_slice(data);
                Ok(Envelope {
                    source,
                    tag,
                    len: data.len(),
                })
            }
            None => Err(Message {
                source,
                tag,
                data: data.to_vec(),
            }),
        }
    }

    fn large(&mut self, n: &mut MpiNative, p: &Parts) -> Result<Option<Self::Out>> {
        let Some(to) = usize::try_from(p.bytes)
            .ok()
            .and_then(|len| self.0.get_mut(..len))
        else {
            return Ok(None);
        };
        receive_parts(n, p, to)?;
        Ok(Some(Ok(Envelope {
            source: p.source,
            tag: p.tag,
            len: to.len(),
        })))
    }
}
