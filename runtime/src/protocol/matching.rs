//! Tag matching and reassembly on the receive side: posted receives, unexpected
//! messages, any-source / any-tag wildcards, and reassembly of chunked messages.
//!
//! MPI matching rules: an arriving message (at its first chunk) matches the earliest
//! posted receive that accepts it; a new receive matches the earliest unexpected message
//! that it accepts. Packets from one source arrive in the order they were sent and the
//! chunks of one message are contiguous, so order per (source, tag) is preserved.
//!
//! A receive may be posted with a size limit (the blocking receive into a caller's
//! buffer): a message it would match that is longer is refused, left unexpected in its
//! place in the order, and its envelope recorded for the receive. While that receive
//! waits, the caller's buffer is lent to each call that feeds chunks ([`RecvInto`]): a
//! message bound to it is written there as it arrives, with no `Vec` of its own.
//!
//! A receive withdrawn after its wait failed ([`Matcher::cancel`], in `matching/cancel.rs`)
//! gives its message, whole or in part, back to the unexpected queue at its place in the
//! order of arrival.

use std::collections::VecDeque;

use crate::core::intmap::IntMap;
use crate::fabric::PacketHeader;
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::request::RequestId;

/// A message tag. User tags are `< RESERVED_TAG_BASE`.
pub type Tag = u32;

/// Tags at or above this value are reserved for the runtime's collectives.
pub const RESERVED_TAG_BASE: Tag = 1 << 31;

/// Which sender a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Any rank.
    Any,
    /// This rank only.
    Rank(usize),
}

/// Which tag a receive accepts. [`TagMatch::Any`] accepts user tags only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagMatch {
    /// Any user tag (`< RESERVED_TAG_BASE`).
    Any,
    /// This tag only.
    Tag(Tag),
}

impl From<Tag> for TagMatch {
    fn from(t: Tag) -> Self {
        TagMatch::Tag(t)
    }
}

impl From<usize> for Source {
    fn from(r: usize) -> Self {
        Source::Rank(r)
    }
}

fn accepts(src: Source, tag: TagMatch, m_src: usize, m_tag: Tag) -> bool {
    let s = match src {
        Source::Any => true,
        Source::Rank(r) => r == m_src,
    };
    let t = match tag {
        TagMatch::Any => m_tag < RESERVED_TAG_BASE,
        TagMatch::Tag(t) => t == m_tag,
    };
    s && t
}

/// A message longer than this machine's address space.
fn too_large(peer: usize, tag: Tag, total: u64) -> ProtocolError {
    ProtocolError::BadChunk {
        peer,
        tag,
        total,
        offset: 0,
        what: "longer than this machine can address".into(),
    }
}

/// What a probe tells about the next matching message without taking it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Sending rank.
    pub source: usize,
    /// Tag.
    pub tag: Tag,
    /// Payload length in bytes.
    pub len: usize,
}

/// A received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Sending rank.
    pub source: usize,
    /// Tag.
    pub tag: Tag,
    /// Payload.
    pub data: Vec<u8>,
}

impl Message {
    /// Its source, tag and length.
    pub fn envelope(&self) -> Envelope {
        Envelope {
            source: self.source,
            tag: self.tag,
            len: self.data.len(),
        }
    }
}

struct Inbound {
    source: usize,
    tag: Tag,
    total: usize,
    data: Vec<u8>,
    req: Option<RequestId>,
    /// Bound to a [`RecvInto`] receive: its bytes go to the caller's buffer (`data` stays
    /// empty), and this counts them.
    into: Option<usize>,
}

impl Inbound {
    /// Bytes arrived so far.
    fn arrived(&self) -> usize {
        self.into.unwrap_or(self.data.len())
    }

    /// Its source, tag and whole length.
    fn envelope(&self) -> Envelope {
        Envelope {
            source: self.source,
            tag: self.tag,
            len: self.total,
        }
    }
}

/// The caller's buffer of blocking receive `req` (posted with [`Matcher::post_within`] and
/// its length as the limit), lent to the calls that feed chunks while it waits: the
/// message bound to `req` is written into `buf` as its chunks arrive, and the receive ends
/// with [`Matcher::take_into_done`]. When the receive is withdrawn instead (its wait failed),
/// [`Matcher::cancel`] copies what `buf` holds back into a buffer of the message's own. The
/// chunks of such a message fed without `buf` while it is still bound are counted and not
/// kept. A `buf` shorter than the message is not used (the message gets a `Vec` of its own,
/// as without one).
pub struct RecvInto<'a> {
    /// The receive (of [`Matcher::post_within`], limited to `buf.len()` bytes).
    pub req: RequestId,
    /// Its buffer.
    pub buf: &'a mut [u8],
}

/// A posted receive: what it accepts, and the longest message it takes (`usize::MAX`
/// unless posted with [`Matcher::post_within`]).
#[derive(Clone, Copy)]
struct Posted {
    req: RequestId,
    source: Source,
    tag: TagMatch,
    cap: usize,
}

/// A receive that ended without a `Message`: refused a longer message, or wrote it into
/// its [`RecvInto`] buffer; the message's envelope.
#[derive(Clone, Copy)]
struct Ended {
    req: RequestId,
    envelope: Envelope,
}

/// A completed receive, its message and the message's id (its place in arrival order).
struct Completed {
    req: RequestId,
    id: u64,
    message: Message,
}

/// Matching state of one rank.
#[derive(Default)]
pub struct Matcher {
    inbound: IntMap<u64, Inbound>,
    unexpected: VecDeque<u64>,
    /// Posted receives in posting order.
    posted: VecDeque<Posted>,
    /// Receives posted with a limit that refused a longer message (one at a time in
    /// practice: a blocking receive posts them and takes its own at once).
    refused: Vec<Ended>,
    /// A [`RecvInto`] receive whose message is all in the caller's buffer, and the
    /// message's id.
    into_done: Option<(Ended, u64)>,
    assembling: IntMap<usize, u64>,
    /// The latest completed receive not taken yet, then the others: a blocking receive
    /// (one completion at a time) never hashes.
    last_completed: Option<Completed>,
    completed: IntMap<RequestId, (u64, Message)>,
    /// The id of the next message to start: ids follow the order of arrival (of first
    /// chunks), which `unexpected` keeps.
    next_msg: u64,
}

impl Matcher {
    /// Starts a message from `src` whose first bytes are `data`: binds it to the earliest
    /// matching posted receive, else queues it as unexpected. A message that is complete
    /// and bound completes at once (`None`); otherwise returns its id.
    fn start(&mut self, src: usize, tag: Tag, total: u64, data: Vec<u8>) -> Result<Option<u64>> {
        let (total, hit) = self.lookup(src, tag, total)?;
        let req = self.bind(src, tag, total, hit);
        Ok(self.start_bound(src, tag, total, req, data))
    }

    /// The start of a message from `src` of `total` bytes, changing nothing: its length as
    /// a `usize` and the place in `posted` of the receive it would bind to ([`Matcher::bind`]).
    #[inline]
    fn lookup(&self, src: usize, tag: Tag, total: u64) -> Result<(usize, Option<usize>)> {
        if !self.assembling.is_empty() && self.assembling.contains_key(&src) {
            return Err(ProtocolError::BadChunk {
                peer: src,
                tag,
                total,
                offset: 0,
                what: "a new message before the previous one completed".into(),
            });
        }
        let total = usize::try_from(total).map_err(|_| too_large(src, tag, total))?;
        let hit = self
            .posted
            .iter()
            .position(|p| accepts(p.source, p.tag, src, tag));
        Ok((total, hit))
    }

    /// True when a message of `total` bytes that binds to the receive at `hit` in `posted`
    /// goes into `into`'s buffer: that receive is `into`'s, and the message fits it.
    #[inline]
    fn lands_in(&self, hit: Option<usize>, into: Option<&RecvInto<'_>>, total: usize) -> bool {
        hit.zip(into).is_some_and(|(i, into)| {
            let p = self.posted[i];
            total <= p.cap && into.req == p.req && into.buf.len() >= total
        })
    }

    /// Takes the receive at `hit` in `posted` out; the message binds to it if it holds
    /// it (a limited receive that does not ends refused and the message stays unbound).
    #[inline]
    fn bind(&mut self, src: usize, tag: Tag, total: usize, hit: Option<usize>) -> Option<RequestId> {
        let mut req = None;
        if let Some(i) = hit {
            // Most often the earliest posted receive: `pop_front` moves nothing.
            let p = if i == 0 {
                self.posted.pop_front()
            } else {
                self.posted.remove(i)
            }
            .expect("index in range");
            if total <= p.cap {
                req = Some(p.req);
            } else {
                // Too long for the limited receive that would take it: it stays unexpected,
                // in its place, and the receive ends refused.
                self.refused.push(Ended {
                    req: p.req,
                    envelope: Envelope {
                        source: src,
                        tag,
                        len: total,
                    },
                });
            }
        }
        req
    }

    /// A started message whose first bytes are `data`, bound to `req` or unexpected:
    /// completes at once when bound and whole (`None`), else is kept (its id).
    fn start_bound(
        &mut self,
        src: usize,
        tag: Tag,
        total: usize,
        req: Option<RequestId>,
        data: Vec<u8>,
    ) -> Option<u64> {
        let id = self.next_msg;
        self.next_msg += 1;
        if let Some(req) = req {
            if data.len() == total {
                self.complete(
                    req,
                    id,
                    Message {
                        source: src,
                        tag,
                        data,
                    },
                );
                return None;
            }
        }
        self.inbound.insert(
            id,
            Inbound {
                source: src,
                tag,
                total,
                data,
                req,
                into: None,
            },
        );
        if req.is_none() {
            self.unexpected.push_back(id);
        }
        Some(id)
    }

    /// Completes message `id` if all of it arrived and a receive is bound to it.
    fn finish_if_bound(&mut self, id: u64) {
        let m = self.inbound.get(&id).expect("inbound message");
        if let Some(req) = m.req {
            let m = self.inbound.remove(&id).expect("inbound message");
            self.complete(
                req,
                id,
                Message {
                    source: m.source,
                    tag: m.tag,
                    data: m.data,
                },
            );
        }
    }

    /// Feeds one arrived chunk.
    pub fn on_chunk(&mut self, h: &PacketHeader, payload: &[u8]) -> Result<()> {
        self.on_chunk_into(h, payload, None)
    }

    /// [`Matcher::on_chunk`] while blocking receive `into.req` waits with its buffer: a
    /// message bound to it is written there.
    pub fn on_chunk_into(
        &mut self,
        h: &PacketHeader,
        payload: &[u8],
        into: Option<&mut RecvInto<'_>>,
    ) -> Result<()> {
        let src = h.src as usize;
        if h.offset == 0 {
            // The first chunk (often the whole message): no reassembly state unless more
            // chunks follow.
            let cap = usize::try_from(h.total).map_err(|_| too_large(src, h.tag, h.total))?;
            if payload.len() > cap {
                return Err(ProtocolError::BadChunk {
                    peer: src,
                    tag: h.tag,
                    total: h.total,
                    offset: 0,
                    what: format!("{} bytes: out of order (beyond the message)", payload.len()),
                });
            }
            // Nothing changes before the message's memory is reserved: when that fails
            // (out of memory), the receive stays posted (a failed wait withdraws it) and the
            // fabric keeps the chunk to deliver again ([`crate::fabric::Fabric::poll`]).
            let (total, hit) = self.lookup(src, h.tag, h.total)?;
            let into_ok = self.lands_in(hit, into.as_deref(), total);
            if let (true, Some(into)) = (into_ok, into) {
                if let Some(req) = self.bind(src, h.tag, total, hit) {
                    // Bound to the waiting receive, whose buffer holds it (its limit).
                    into.buf[..payload.len()].copy_from_slice(payload);
                    let env = Envelope {
                        source: src,
                        tag: h.tag,
                        len: total,
                    };
                    let id = self.next_msg;
                    self.next_msg += 1;
                    if payload.len() == total {
                        self.into_done = Some((Ended { req, envelope: env }, id));
                        return Ok(());
                    }
                    self.inbound.insert(
                        id,
                        Inbound {
                            source: src,
                            tag: h.tag,
                            total,
                            data: Vec::new(),
                            req: Some(req),
                            into: Some(payload.len()),
                        },
                    );
                    self.assembling.insert(src, id);
                    return Ok(());
                }
            }
            // The length comes from the peer: reserved without aborting.
            let mut data = crate::core::memory::try_buffer(cap, || {
                format!("a message of {cap} bytes from rank {src} with tag {}", h.tag)
            })?;
            let req = self.bind(src, h.tag, total, hit);
            data.extend_from_slice(payload);
            if let Some(id) = self.start_bound(src, h.tag, total, req, data) {
                if payload.len() < cap {
                    self.assembling.insert(src, id);
                }
            }
            return Ok(());
        }
        let id = *self.assembling.get(&src).ok_or_else(|| ProtocolError::BadChunk {
            peer: src,
            tag: h.tag,
            total: h.total,
            offset: h.offset,
            what: "without a message start".into(),
        })?;
        let m = self.inbound.get_mut(&id).expect("inbound message");
        let arrived = m.arrived();
        if h.offset as usize != arrived || arrived + payload.len() > m.total {
            return Err(ProtocolError::BadChunk {
                peer: src,
                tag: h.tag,
                total: h.total,
                offset: h.offset,
                what: format!(
                    "{} bytes: out of order ({} of {} bytes received)",
                    payload.len(),
                    arrived,
                    m.total
                ),
            });
        }
        if let Some(filled) = &mut m.into {
            *filled += payload.len();
            let done = *filled == m.total;
            let mine = into
                .filter(|i| Some(i.req) == m.req)
                .and_then(|i| i.buf.get_mut(arrived..arrived + payload.len()));
            let written = mine.map(|to| to.copy_from_slice(payload)).is_some();
            if done {
                if let (true, Some(req)) = (written, m.req) {
                    let envelope = m.envelope();
                    self.into_done = Some((Ended { req, envelope }, id));
                }
                self.assembling.remove(&src);
                self.inbound.remove(&id);
            }
            return Ok(());
        }
        m.data.extend_from_slice(payload);
        if m.data.len() == m.total {
            self.assembling.remove(&src);
            self.finish_if_bound(id);
        }
        Ok(())
    }

    /// Feeds a whole message that the transport lets this rank read itself (a direct path
    /// by CMA, [`crate::fabric::Event::Remote`]): read with `read` straight into the
    /// buffer of the blocking receive `into.req` when the message binds to it and fits
    /// (one copy, sender to caller), else into a buffer of its own and fed as
    /// [`Matcher::on_whole`]. A failed read changes nothing here (the fabric's error is
    /// returned; the caller's buffer may hold part of the message).
    pub fn on_remote(
        &mut self,
        h: &PacketHeader,
        read: &mut dyn crate::fabric::RemoteRead,
        into: Option<&mut RecvInto<'_>>,
    ) -> Result<()> {
        let src = h.src as usize;
        let (total, hit) = self.lookup(src, h.tag, h.total)?;
        let into_ok = self.lands_in(hit, into.as_deref(), total);
        if let (true, Some(into)) = (into_ok, into) {
            read.read_into(&mut into.buf[..total])?;
            // It fits the receive (`into_ok`): it binds.
            let req = self
                .bind(src, h.tag, total, hit)
                .ok_or_else(|| ProtocolError::BadChunk {
                    peer: src,
                    tag: h.tag,
                    total: h.total,
                    offset: 0,
                    what: "a direct message that did not bind to the receive it fits".into(),
                })?;
            let envelope = Envelope {
                source: src,
                tag: h.tag,
                len: total,
            };
            let id = self.next_msg;
            self.next_msg += 1;
            self.into_done = Some((Ended { req, envelope }, id));
            return Ok(());
        }
        let data = read.read_vec()?;
        self.on_whole(h, data)
    }

    /// Feeds a whole message that arrived at once in its own buffer (a transport's direct
    /// path): `data` becomes the message's buffer without a copy. It takes its place in
    /// the order of its source's messages and matches exactly as a chunked one would.
    pub fn on_whole(&mut self, h: &PacketHeader, data: Vec<u8>) -> Result<()> {
        if data.len() as u64 != h.total {
            return Err(ProtocolError::BadChunk {
                peer: h.src as usize,
                tag: h.tag,
                total: h.total,
                offset: 0,
                what: format!("a whole message of {} bytes", data.len()),
            });
        }
        self.start(h.src as usize, h.tag, h.total, data)?;
        Ok(())
    }

    /// Posts receive `req`; binds it to the earliest matching unexpected message if any.
    pub fn post(&mut self, req: RequestId, src: Source, tag: TagMatch) {
        self.post_within(req, src, tag, usize::MAX);
    }

    /// [`Matcher::post`] for a message of at most `cap` bytes: the earliest matching
    /// message, unexpected now or arriving later, is taken if it fits; a longer one stays
    /// queued where it is, and the receive ends refused with its envelope
    /// ([`Matcher::take_refused`]).
    pub fn post_within(&mut self, req: RequestId, src: Source, tag: TagMatch, cap: usize) {
        let posted = Posted {
            req,
            source: src,
            tag,
            cap,
        };
        if self.unexpected.is_empty() {
            self.posted.push_back(posted);
            return;
        }
        let hit = self.unexpected.iter().position(|id| {
            let m = &self.inbound[id];
            accepts(src, tag, m.source, m.tag)
        });
        match hit {
            Some(i) if self.inbound[&self.unexpected[i]].total > cap => {
                let e = self.inbound[&self.unexpected[i]].envelope();
                self.refused.push(Ended { req, envelope: e });
            }
            Some(i) => {
                let id = self.unexpected.remove(i).expect("index in range");
                let m = self.inbound.get_mut(&id).expect("inbound message");
                if m.data.len() == m.total {
                    let m = self.inbound.remove(&id).expect("inbound message");
                    self.complete(
                        req,
                        id,
                        Message {
                            source: m.source,
                            tag: m.tag,
                            data: m.data,
                        },
                    );
                } else {
                    m.req = Some(req);
                }
            }
            None => self.posted.push_back(posted),
        }
    }

    /// Takes the earliest matching unexpected message if it is complete. An incomplete
    /// earlier match blocks later ones (order is preserved).
    pub fn try_take(&mut self, src: Source, tag: TagMatch) -> Option<Message> {
        let i = self.unexpected.iter().position(|id| {
            let m = &self.inbound[id];
            accepts(src, tag, m.source, m.tag)
        })?;
        let id = self.unexpected[i];
        let m = &self.inbound[&id];
        if m.data.len() != m.total {
            return None;
        }
        self.unexpected.remove(i);
        let m = self.inbound.remove(&id).expect("inbound message");
        Some(Message {
            source: m.source,
            tag: m.tag,
            data: m.data,
        })
    }

    /// The envelope of the message [`Matcher::try_take`] would take now, leaving it queued.
    pub fn peek(&self, src: Source, tag: TagMatch) -> Option<Envelope> {
        let id = self.unexpected.iter().find(|id| {
            let m = &self.inbound[id];
            accepts(src, tag, m.source, m.tag)
        })?;
        let m = &self.inbound[id];
        (m.data.len() == m.total).then_some(m.envelope())
    }

    /// Delivers a whole message at once (sends to self).
    pub fn deliver_local(&mut self, src: usize, tag: Tag, data: &[u8]) -> Result<()> {
        let h = PacketHeader {
            src: src as u32,
            tag,
            total: data.len() as u64,
            offset: 0,
            len: data.len() as u32,
            more: false,
        };
        self.on_chunk(&h, data)
    }

    /// Records message `id`, `m`, of completed receive `req`.
    #[inline]
    fn complete(&mut self, req: RequestId, id: u64, m: Message) {
        if let Some(older) = self.last_completed.replace(Completed { req, id, message: m }) {
            self.completed.insert(older.req, (older.id, older.message));
        }
    }

    /// True if receive `req` has completed.
    pub fn is_complete(&self, req: RequestId) -> bool {
        // Polled by every idle iteration of a blocking wait: no hashing while nothing completed.
        self.last_completed.as_ref().is_some_and(|c| c.req == req)
            || (!self.completed.is_empty() && self.completed.contains_key(&req))
    }

    /// The envelope of the message receive `req` wrote into its [`RecvInto`] buffer, once
    /// all of it is there: the receive has then ended.
    pub fn take_into_done(&mut self, req: RequestId) -> Option<Envelope> {
        match self.into_done {
            Some((d, _)) if d.req == req => {
                self.into_done = None;
                Some(d.envelope)
            }
            _ => None,
        }
    }

    /// The envelope of the message that receive `req` (posted with a limit) refused, once:
    /// the receive has then ended.
    pub fn take_refused(&mut self, req: RequestId) -> Option<Envelope> {
        if self.refused.is_empty() {
            return None;
        }
        let i = self.refused.iter().position(|r| r.req == req)?;
        Some(self.refused.swap_remove(i).envelope)
    }

    /// Takes the message of completed receive `req`.
    pub fn take_completed(&mut self, req: RequestId) -> Option<Message> {
        self.take_completed_entry(req).map(|(_, m)| m)
    }

    /// [`Matcher::take_completed`] with the message's id.
    fn take_completed_entry(&mut self, req: RequestId) -> Option<(u64, Message)> {
        if self.last_completed.as_ref().is_some_and(|c| c.req == req) {
            return self.last_completed.take().map(|c| (c.id, c.message));
        }
        if self.completed.is_empty() {
            return None;
        }
        self.completed.remove(&req)
    }

    /// Bytes held in unexpected (not yet received) messages.
    pub fn unexpected_bytes(&self) -> usize {
        self.unexpected
            .iter()
            .map(|id| self.inbound[id].data.capacity())
            .sum()
    }
}

mod cancel;
#[cfg(test)]
mod tests;
