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

use std::collections::VecDeque;

use crate::core::error::{Error, Result};
use crate::core::intmap::IntMap;
use crate::fabric::PacketHeader;

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
fn too_large(peer: usize, tag: Tag, total: u64) -> Error {
    Error::BadChunk {
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
    req: Option<u64>,
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
/// with [`Matcher::take_into_done`]. Chunks of such a message that arrive without it (the
/// receive ended with an error) are dropped. A `buf` shorter than the message is not used
/// (the message gets a `Vec` of its own, as without one).
pub struct RecvInto<'a> {
    /// The receive (of [`Matcher::post_within`], limited to `buf.len()` bytes).
    pub req: u64,
    /// Its buffer.
    pub buf: &'a mut [u8],
}

/// Matching state of one rank.
#[derive(Default)]
pub struct Matcher {
    inbound: IntMap<u64, Inbound>,
    unexpected: VecDeque<u64>,
    /// Posted receives in posting order: (request, source, tag, the longest message it
    /// takes: `usize::MAX` unless posted with [`Matcher::post_within`]).
    posted: VecDeque<(u64, Source, TagMatch, usize)>,
    /// Receives posted with a limit that refused a longer message, and its envelope (one
    /// at a time in practice: a blocking receive posts them and takes its own at once).
    refused: Vec<(u64, Envelope)>,
    /// A [`RecvInto`] receive whose message is all in the caller's buffer.
    into_done: Option<(u64, Envelope)>,
    assembling: IntMap<usize, u64>,
    /// The latest completed receive not taken yet, then the others: a blocking receive
    /// (one completion at a time) never hashes.
    last_completed: Option<(u64, Message)>,
    completed: IntMap<u64, Message>,
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
    fn lookup(&self, src: usize, tag: Tag, total: u64) -> Result<(usize, Option<usize>)> {
        if !self.assembling.is_empty() && self.assembling.contains_key(&src) {
            return Err(Error::BadChunk {
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
            .position(|&(_, s, t, _)| accepts(s, t, src, tag));
        Ok((total, hit))
    }

    /// Takes the receive at `hit` in `posted` out; the message binds to it if it holds
    /// it (a limited receive that does not ends refused and the message stays unbound).
    fn bind(&mut self, src: usize, tag: Tag, total: usize, hit: Option<usize>) -> Option<u64> {
        let mut req = None;
        if let Some(i) = hit {
            let (r, _, _, cap) = self.posted.remove(i).expect("index in range");
            if total <= cap {
                req = Some(r);
            } else {
                // Too long for the limited receive that would take it: it stays unexpected,
                // in its place, and the receive ends refused.
                self.refused.push((
                    r,
                    Envelope {
                        source: src,
                        tag,
                        len: total,
                    },
                ));
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
        req: Option<u64>,
        data: Vec<u8>,
    ) -> Option<u64> {
        let id = self.next_msg;
        self.next_msg += 1;
        if let Some(req) = req {
            if data.len() == total {
                self.complete(
                    req,
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
                return Err(Error::BadChunk {
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
            let into_ok = hit.zip(into.as_ref()).is_some_and(|(i, into)| {
                let (r, _, _, limit) = self.posted[i];
                total <= limit && into.req == r && into.buf.len() >= total
            });
            if let (true, Some(into)) = (into_ok, into) {
                if let Some(req) = self.bind(src, h.tag, total, hit) {
                    // Bound to the waiting receive, whose buffer holds it (its limit).
                    into.buf[..payload.len()].copy_from_slice(payload);
                    let env = Envelope {
                        source: src,
                        tag: h.tag,
                        len: total,
                    };
                    if payload.len() == total {
                        self.into_done = Some((req, env));
                        return Ok(());
                    }
                    let id = self.next_msg;
                    self.next_msg += 1;
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
        let id = *self.assembling.get(&src).ok_or_else(|| Error::BadChunk {
            peer: src,
            tag: h.tag,
            total: h.total,
            offset: h.offset,
            what: "without a message start".into(),
        })?;
        let m = self.inbound.get_mut(&id).expect("inbound message");
        let arrived = m.arrived();
        if h.offset as usize != arrived || arrived + payload.len() > m.total {
            return Err(Error::BadChunk {
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
                    self.into_done = Some((req, m.envelope()));
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

    /// Feeds a whole message that arrived at once in its own buffer (a transport's direct
    /// path): `data` becomes the message's buffer without a copy. It takes its place in
    /// the order of its source's messages and matches exactly as a chunked one would.
    pub fn on_whole(&mut self, h: &PacketHeader, data: Vec<u8>) -> Result<()> {
        if data.len() as u64 != h.total {
            return Err(Error::BadChunk {
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
    pub fn post(&mut self, req: u64, src: Source, tag: TagMatch) {
        self.post_within(req, src, tag, usize::MAX);
    }

    /// [`Matcher::post`] for a message of at most `cap` bytes: the earliest matching
    /// message, unexpected now or arriving later, is taken if it fits; a longer one stays
    /// queued where it is, and the receive ends refused with its envelope
    /// ([`Matcher::take_refused`]).
    pub fn post_within(&mut self, req: u64, src: Source, tag: TagMatch, cap: usize) {
        if self.unexpected.is_empty() {
            self.posted.push_back((req, src, tag, cap));
            return;
        }
        let hit = self.unexpected.iter().position(|id| {
            let m = &self.inbound[id];
            accepts(src, tag, m.source, m.tag)
        });
        match hit {
            Some(i) if self.inbound[&self.unexpected[i]].total > cap => {
                let e = self.inbound[&self.unexpected[i]].envelope();
                self.refused.push((req, e));
            }
            Some(i) => {
                let id = self.unexpected.remove(i).expect("index in range");
                let m = self.inbound.get_mut(&id).expect("inbound message");
                if m.data.len() == m.total {
                    let m = self.inbound.remove(&id).expect("inbound message");
                    self.complete(
                        req,
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
            None => self.posted.push_back((req, src, tag, cap)),
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

    /// Records the message of completed receive `req`.
    fn complete(&mut self, req: u64, m: Message) {
        if let Some((r, older)) = self.last_completed.replace((req, m)) {
            self.completed.insert(r, older);
        }
    }

    /// True if receive `req` has completed.
    pub fn is_complete(&self, req: u64) -> bool {
        // Polled by every idle iteration of a blocking wait: no hashing while nothing completed.
        self.last_completed.as_ref().is_some_and(|(r, _)| *r == req)
            || (!self.completed.is_empty() && self.completed.contains_key(&req))
    }

    /// The envelope of the message receive `req` wrote into its [`RecvInto`] buffer, once
    /// all of it is there: the receive has then ended.
    pub fn take_into_done(&mut self, req: u64) -> Option<Envelope> {
        match self.into_done {
            Some((r, e)) if r == req => {
                self.into_done = None;
                Some(e)
            }
            _ => None,
        }
    }

    /// The envelope of the message that receive `req` (posted with a limit) refused, once:
    /// the receive has then ended.
    pub fn take_refused(&mut self, req: u64) -> Option<Envelope> {
        if self.refused.is_empty() {
            return None;
        }
        let i = self.refused.iter().position(|&(r, _)| r == req)?;
        Some(self.refused.swap_remove(i).1)
    }

    /// Withdraws receive `req` if it is still posted (a blocking receive that ended with an
    /// error), so that no later message binds to it, and forgets its refusal. A message
    /// already bound to it stays with it (lost, as a failed receive's).
    pub fn cancel(&mut self, req: u64) {
        if let Some(i) = self.posted.iter().position(|&(r, ..)| r == req) {
            self.posted.remove(i);
        }
        self.refused.retain(|&(r, _)| r != req);
        if self.into_done.is_some_and(|(r, _)| r == req) {
            self.into_done = None;
        }
    }
    /// Takes the message of completed receive `req`.
    pub fn take_completed(&mut self, req: u64) -> Option<Message> {
        if self.last_completed.as_ref().is_some_and(|(r, _)| *r == req) {
            return self.last_completed.take().map(|(_, m)| m);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(src: u32, tag: Tag, total: u64, offset: u64, len: u32) -> PacketHeader {
        PacketHeader {
            src,
            tag,
            total,
            offset,
            len,
            more: false,
        }
    }

    #[test]
    fn peek_tells_what_try_take_takes_and_leaves_it() {
        let mut m = Matcher::default();
        m.on_chunk(&hdr(1, 4, 4, 0, 2), &[1, 2]).unwrap();
        m.on_chunk(&hdr(2, 5, 3, 0, 3), &[7, 8, 9]).unwrap();
        assert_eq!(
            m.peek(Source::Any, TagMatch::Any),
            None,
            "incomplete earliest match"
        );
        let e = Envelope {
            source: 2,
            tag: 5,
            len: 3,
        };
        assert_eq!(m.peek(Source::Rank(2), TagMatch::Any), Some(e));
        assert_eq!(m.peek(Source::Any, TagMatch::Tag(5)), Some(e), "peeking twice");
        assert_eq!(m.peek(Source::Rank(3), TagMatch::Any), None);
        assert_eq!(
            m.try_take(Source::Any, TagMatch::Tag(5)).unwrap().data,
            vec![7, 8, 9]
        );
        assert_eq!(m.peek(Source::Any, TagMatch::Tag(5)), None, "taken");
        m.on_chunk(&hdr(1, 4, 4, 2, 2), &[3, 4]).unwrap();
        let e = m.peek(Source::Any, TagMatch::Any).unwrap();
        assert_eq!((e.source, e.tag, e.len), (1, 4, 4));
        assert_eq!(m.try_take(Source::Any, TagMatch::Any).unwrap().data.len(), e.len);
    }

    #[test]
    fn a_limited_receive_refuses_a_longer_message_and_leaves_it_in_place() {
        let env = |source, tag, len| Envelope { source, tag, len };
        let mut m = Matcher::default();
        // Posted first, then a longer message arrives (in two chunks): refused at its
        // first chunk; it is assembled as unexpected.
        m.post_within(1, Source::Any, TagMatch::Any, 3);
        m.on_chunk(&hdr(2, 5, 4, 0, 2), &[1, 2]).unwrap();
        assert!(!m.is_complete(1));
        assert_eq!(m.take_refused(1), Some(env(2, 5, 4)));
        assert_eq!(m.take_refused(1), None, "told once");
        m.on_chunk(&hdr(2, 5, 4, 2, 2), &[3, 4]).unwrap();
        // A later message of the same source that would fit does not overtake it.
        m.on_chunk(&hdr(2, 6, 1, 0, 1), &[9]).unwrap();
        m.post_within(2, Source::Rank(2), TagMatch::Any, 3);
        assert_eq!(
            m.take_refused(2),
            Some(env(2, 5, 4)),
            "refused while unexpected too"
        );
        assert_eq!(
            m.peek(Source::Any, TagMatch::Any),
            Some(env(2, 5, 4)),
            "still first"
        );
        // Exactly the limit fits; then the refused message goes to a receive without one.
        m.post_within(3, Source::Any, TagMatch::Tag(6), 1);
        assert_eq!(m.take_completed(3).unwrap().data, vec![9]);
        m.post(4, Source::Any, TagMatch::Any);
        assert_eq!(m.take_completed(4).unwrap().data, vec![1, 2, 3, 4]);
        // An earlier receive without a limit takes a long message before a limited one.
        m.post(5, Source::Rank(2), TagMatch::Tag(7));
        m.post_within(6, Source::Any, TagMatch::Any, 0);
        m.on_chunk(&hdr(2, 7, 2, 0, 2), &[5, 6]).unwrap();
        assert_eq!(m.take_completed(5).unwrap().data, vec![5, 6]);
        assert_eq!(m.take_refused(6), None);
        m.on_chunk(&hdr(3, 1, 0, 0, 0), &[]).unwrap();
        assert_eq!(
            m.take_completed(6).unwrap().data,
            Vec::<u8>::new(),
            "0 bytes into 0"
        );
        // A withdrawn receive (its wait failed) binds nothing more: the message stays
        // unexpected for the next receive.
        m.post_within(7, Source::Any, TagMatch::Any, 8);
        m.cancel(7);
        m.on_chunk(&hdr(4, 2, 1, 0, 1), &[3]).unwrap();
        assert!(!m.is_complete(7));
        assert_eq!(m.peek(Source::Any, TagMatch::Any), Some(env(4, 2, 1)));
    }

    #[test]
    fn a_lent_buffer_takes_its_message_chunk_by_chunk() {
        let mut m = Matcher::default();
        let mut buf = [0xAAu8; 8];
        // Posted with the buffer's length; an unrelated message first stays unexpected.
        m.post_within(1, Source::Rank(2), TagMatch::Tag(5), buf.len());
        let lend = |m: &mut Matcher, h: &PacketHeader, p: &[u8], buf: &mut [u8]| {
            m.on_chunk_into(h, p, Some(&mut RecvInto { req: 1, buf }))
                .unwrap()
        };
        lend(&mut m, &hdr(3, 5, 2, 0, 2), &[8, 8], &mut buf);
        lend(&mut m, &hdr(2, 5, 5, 0, 2), &[1, 2], &mut buf);
        assert_eq!(m.take_into_done(1), None, "2 of 5 bytes");
        lend(&mut m, &hdr(2, 5, 5, 2, 3), &[3, 4, 5], &mut buf);
        let e = m.take_into_done(1).expect("all 5 bytes in the buffer");
        assert_eq!((e.source, e.tag, e.len), (2, 5, 5));
        assert_eq!(buf, [1, 2, 3, 4, 5, 0xAA, 0xAA, 0xAA]);
        assert!(!m.is_complete(1), "no message of its own");
        assert_eq!(m.take_completed(1), None);
        assert_eq!(m.peek(Source::Any, TagMatch::Any).map(|e| e.source), Some(3));
        // A receive that ended (an error) while its message was half written: the rest of
        // that message is dropped, and the next one of the same source is whole.
        m.post_within(2, Source::Rank(2), TagMatch::Any, buf.len());
        lend(&mut m, &hdr(2, 6, 4, 0, 2), &[1, 1], &mut buf);
        m.on_chunk(&hdr(2, 6, 4, 2, 2), &[1, 1]).unwrap();
        assert_eq!(m.take_into_done(2), None);
        m.post(3, Source::Rank(2), TagMatch::Any);
        m.on_chunk(&hdr(2, 7, 1, 0, 1), &[9]).unwrap();
        assert_eq!(m.take_completed(3).unwrap().data, vec![9]);
    }

    #[test]
    fn posted_receive_matches_in_post_order_with_wildcards() {
        let mut m = Matcher::default();
        m.post(1, Source::Rank(2), TagMatch::Tag(5));
        m.post(2, Source::Any, TagMatch::Any);
        m.on_chunk(&hdr(3, 5, 1, 0, 1), &[9]).unwrap();
        assert!(!m.is_complete(1));
        assert_eq!(
            m.take_completed(2).unwrap(),
            Message {
                source: 3,
                tag: 5,
                data: vec![9]
            }
        );
        m.on_chunk(&hdr(2, 5, 1, 0, 1), &[7]).unwrap();
        assert_eq!(m.take_completed(1).unwrap().data, vec![7]);
    }

    #[test]
    fn chunks_reassemble_and_any_tag_skips_reserved_tags() {
        let mut m = Matcher::default();
        m.on_chunk(&hdr(1, RESERVED_TAG_BASE + 1, 2, 0, 2), &[1, 2])
            .unwrap();
        m.on_chunk(&hdr(1, 4, 4, 0, 2), &[1, 2]).unwrap();
        assert_eq!(
            m.try_take(Source::Any, TagMatch::Any),
            None,
            "incomplete message is not taken"
        );
        m.on_chunk(&hdr(1, 4, 4, 2, 2), &[3, 4]).unwrap();
        assert_eq!(
            m.try_take(Source::Any, TagMatch::Any).unwrap().data,
            vec![1, 2, 3, 4]
        );
        assert_eq!(m.try_take(Source::Any, TagMatch::Any), None);
        assert!(m
            .try_take(Source::Rank(1), TagMatch::Tag(RESERVED_TAG_BASE + 1))
            .is_some());
    }

    #[test]
    fn out_of_order_chunk_is_a_protocol_error() {
        let mut m = Matcher::default();
        m.on_chunk(&hdr(1, 4, 4, 0, 2), &[1, 2]).unwrap();
        assert!(m.on_chunk(&hdr(1, 4, 4, 3, 1), &[3]).is_err());
        assert!(m.on_chunk(&hdr(2, 4, 4, 2, 2), &[3, 4]).is_err());
        assert!(
            m.on_whole(&hdr(1, 4, 2, 0, 0), vec![5, 6]).is_err(),
            "whole message inside a chunked one"
        );
    }

    #[test]
    fn whole_messages_keep_order_and_wildcards_with_chunked_ones() {
        let mut m = Matcher::default();
        let any = Source::Any;
        m.post(1, any, TagMatch::Tag(7));
        // A whole message for the posted receive, then unexpected ones in order.
        m.on_whole(&hdr(2, 7, 3, 0, 0), vec![1, 2, 3]).unwrap();
        assert_eq!(
            m.take_completed(1).unwrap(),
            Message {
                source: 2,
                tag: 7,
                data: vec![1, 2, 3]
            }
        );
        m.on_chunk(&hdr(2, 8, 1, 0, 1), &[4]).unwrap();
        m.on_whole(&hdr(3, 8, 2, 0, 0), vec![5, 6]).unwrap();
        m.on_whole(&hdr(2, 8, 2, 0, 0), vec![7, 8]).unwrap();
        assert_eq!(m.try_take(any, TagMatch::Tag(8)).unwrap().data, vec![4]);
        assert_eq!(
            m.try_take(Source::Rank(2), TagMatch::Any).unwrap().data,
            vec![7, 8]
        );
        m.post(2, any, TagMatch::Any);
        assert_eq!(
            m.take_completed(2).unwrap(),
            Message {
                source: 3,
                tag: 8,
                data: vec![5, 6]
            }
        );
        assert!(
            m.on_whole(&hdr(3, 8, 5, 0, 0), vec![1]).is_err(),
            "length differs from the header"
        );
    }
}
