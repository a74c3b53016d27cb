//! The send path of the [`Engine`]: `isend` (a pool buffer for the first chunk, or the
//! fast path posting it at once), chunking larger messages as credits and pool buffers
//! allow (`pump`), and the fabric's direct path (`send_direct`, and direct messages queued
//! in order).

use super::{Engine, InFlight, OutMsg, SendReq, DIRECT_WR, WR_INFO_BYTES};
use crate::core::pool::{BufId, BufferPool};
use crate::fabric::{PacketHeader, PeerKey};
use crate::protocol::connection::EndpointState;
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::matching::Tag;
use crate::protocol::request::RequestId;

/// The engine's own copy of (the rest of) a message of `total` bytes to `dest`, reserved
/// without aborting ([`crate::core::memory::try_copy`]); the error names the message's
/// length, not the rest's.
fn copy_of(dest: usize, total: usize, data: &[u8]) -> Result<Vec<u8>> {
    Ok(crate::core::memory::try_copy(data, || {
        if data.len() == total {
            format!("the copy of a message of {total} bytes to rank {dest}")
        } else {
            format!(
                "the copy of the last {} bytes of a message of {total} bytes to rank {dest}",
                data.len()
            )
        }
    })?)
}

impl Engine {
    /// Accepts a message for sending if a pool buffer is free for its first chunk
    /// (copied now); otherwise [`ProtocolError::WouldBlock`]. Returns the request id.
    ///
    /// While a queued message still needs pool buffers for its later chunks, a new message
    /// does not take the pool's last free buffer: it would wait in a queue behind that
    /// message holding the buffer the message needs (with one buffer, or when new small
    /// sends take every buffer a chunk frees, no chunk could ever be posted again), so it
    /// gets [`ProtocolError::WouldBlock`] until the chunked message has all its buffers.
    pub fn isend(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<RequestId> {
        self.check_rank(dest)?;
        if dest == self.rank {
            self.matcher.deliver_local(self.rank, tag, data)?;
            let req = self.new_req();
            self.sends.insert(
                req,
                SendReq {
                    outstanding: 0,
                    posted_all: true,
                },
            );
            return Ok(req);
        }
        let direct = self.goes_direct(dest, data.len());
        let (first, rest, rest_from) = if direct {
            // One copy into an owned buffer (the caller may reuse `data` at once); it waits
            // behind the messages queued before it and is handed to the fabric whole.
            (None, copy_of(dest, data.len(), data)?, 0)
        } else {
            if self.chunked_queued > 0 && self.pool.free_count() <= 1 && !self.pool.can_grow() {
                return Err(ProtocolError::WouldBlock);
            }
            let Some(id) = self.pool.acquire(self.fabric.as_mut())? else {
                return Err(ProtocolError::WouldBlock);
            };
            Self::sync_wr_info(&mut self.wr_info, &mut self.pool, id)?;
            let first_len = data.len().min(self.pool.buffer_size());
            self.pool.buf_mut(id)[..first_len].copy_from_slice(&data[..first_len]);
            if first_len == data.len() {
                if let Some(req) = self.post_now(dest, tag, id, first_len)? {
                    return Ok(req);
                }
            }
            // With the datagram path, `rest` starts where the first datagram's payload
            // ends (a datagram carries less than a pool buffer), overlapping the first
            // buffer: a message copied for an endpoint and then sent by datagram needs
            // nothing more (the first datagram's tail never goes back in front of `rest`,
            // which would reallocate all of it: an abort under a memory limit).
            let rest_from = self.dg.as_ref().map_or(first_len, |d| d.chunk.min(first_len));
            match copy_of(dest, data.len(), &data[rest_from..]) {
                Ok(rest) => (Some((id, first_len)), rest, rest_from),
                Err(e) => {
                    self.pool.release(id);
                    return Err(e);
                }
            }
        };
        let req = self.new_req();
        self.sends.insert(
            req,
            SendReq {
                outstanding: 0,
                posted_all: false,
            },
        );
        let chunked = first.is_some_and(|(_, len)| len < data.len());
        self.chunked_queued += usize::from(chunked);
        self.peers.entry(dest).or_default().queue.push_back(OutMsg {
            req,
            tag,
            total: data.len(),
            first,
            rest,
            rest_from,
            offset: 0,
            direct,
            chunked,
        });
        self.active.insert(dest);
        self.conns.note_peer(dest);
        self.pump_peer(dest)?;
        Ok(req)
    }

    /// A blocking send of a message that fits one packet, posted straight from `data`
    /// when the fabric copies the payload before it returns ([`Fabric::copies_payload`]:
    /// shm, MPI's engine path) and the packet can go now (as `isend`'s fast path: the
    /// endpoint open, nothing queued or unacknowledged for `dest`, a credit at hand): no
    /// pool buffer, request or wait, the lean eager path of an 8 B message. `Ok(false)`,
    /// with nothing changed, when it cannot go so (the caller takes `isend` and waits).
    ///
    /// [`Fabric::copies_payload`]: crate::fabric::Fabric::copies_payload
    pub fn send_now(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<bool> {
        if !self.copies
            || dest == self.rank
            || dest >= self.world
            || data.len() > self.pool.buffer_size()
            || self.goes_direct(dest, data.len())
        {
            return Ok(false);
        }
        let Some(key) = self.credit_now(dest) else {
            return Ok(false);
        };
        let hdr = PacketHeader {
            src: self.rank as u32,
            tag,
            total: data.len() as u64,
            offset: 0,
            len: data.len() as u32,
            more: false,
        };
        // `wr_id` is ignored by a fabric that copies (no completion comes).
        if let Err(e) = self.fabric.post_send(dest, key, &hdr, data, 0) {
            if let Some(p) = self.peers.get_mut(&dest) {
                p.credits += 1;
            }
            return Err(e.into());
        }
        let ep = self.conns.get_touched(key).expect("endpoint");
        ep.sent += 1;
        Ok(true)
    }

    /// The fast path of `isend` for a message that fits in pool buffer `id` (already copied,
    /// `len` bytes): when nothing is queued for `dest`, its endpoint is open and a credit is
    /// at hand, the packet is posted now, without entering the destination's queue (what
    /// `pump_peer` would do with it at once, minus the queue). Returns None, with nothing
    /// changed, when it cannot be posted now. On a failed post the buffer goes back to the
    /// pool.
    fn post_now(&mut self, dest: usize, tag: Tag, id: BufId, len: usize) -> Result<Option<RequestId>> {
        let Some(key) = self.credit_now(dest) else {
            return Ok(None);
        };
        let req = self.new_req();
        let hdr = PacketHeader {
            src: self.rank as u32,
            tag,
            total: len as u64,
            offset: 0,
            len: len as u32,
            more: false,
        };
        match self.post_chunk(dest, key, &hdr, id, req) {
            Ok(outstanding) => {
                self.sends.insert(
                    req,
                    SendReq {
                        outstanding: u32::from(outstanding),
                        posted_all: true,
                    },
                );
                Ok(Some(req))
            }
            Err(e) => {
                self.pool.release(id);
                Err(e)
            }
        }
    }

    /// When one packet to `dest` may be posted now (its endpoint open, no datagram to it
    /// unacknowledged, nothing queued for it, a credit at hand), takes the credit, notes the
    /// peer and gives the endpoint's key; `None`, with nothing changed, otherwise.
    fn credit_now(&mut self, dest: usize) -> Option<PeerKey> {
        let key = self.key_of(dest);
        if !self
            .conns
            .get(key)
            .is_some_and(|ep| ep.state == EndpointState::Open)
        {
            return None;
        }
        if self.dg.as_ref().is_some_and(|d| d.is_waiting(dest)) {
            // Datagrams to it not acknowledged yet: this packet must not overtake them.
            return None;
        }
        let p = self
            .peers
            .get_mut(&dest)
            .filter(|p| p.queue.is_empty() && p.credits > 0)?;
        p.credits -= 1;
        if !self.symmetric() {
            // (With symmetric endpoints, opening the endpoint noted the peer.)
            self.conns.note_peer(dest);
        }
        Some(key)
    }

    /// Posts pool buffer `id` (`hdr.len` bytes) of send request `req` to `dest` through
    /// endpoint `key` and accounts it: one more packet sent on the endpoint, and either the
    /// buffer freed at once (a fabric that copies) or its completion awaited (returns true:
    /// one more outstanding completion for `req`). Nothing changes when the post fails.
    fn post_chunk(
        &mut self,
        dest: usize,
        key: PeerKey,
        hdr: &PacketHeader,
        id: BufId,
        req: RequestId,
    ) -> Result<bool> {
        self.fabric
            .post_send(dest, key, hdr, &self.pool.buf(id)[..hdr.len as usize], id as u64)?;
        let ep = self.conns.get_touched(key).expect("endpoint");
        ep.sent += 1;
        if self.copies {
            // The fabric holds its own copy: the buffer is free, nothing to complete.
            self.pool.release(id);
            return Ok(false);
        }
        ep.inflight += 1;
        self.wr_info[id as usize] = Some(InFlight { req, key });
        Ok(true)
    }

    /// True when a message of `len` bytes to `dest` takes the fabric's direct path.
    pub fn goes_direct(&self, dest: usize, len: usize) -> bool {
        dest != self.rank && self.direct.is_some_and(|t| len > t)
    }

    /// Sends `data` to `dest` on the fabric's direct path, blocking, straight from `data`
    /// (zero-copy): hands the slice to the fabric, which keeps polling (events are handled
    /// as in [`Engine::progress`], datagrams acknowledged meanwhile timed from the next
    /// round) until it no longer reads `data`. Only for messages where
    /// [`Engine::goes_direct`] is true, and once every message queued earlier for `dest`
    /// is posted (order): the caller progresses until [`Engine::queued_for`] is false (the
    /// engine does not wait for its queues itself), else [`ProtocolError::QueuedBeforeDirect`].
    pub fn send_direct(&mut self, dest: usize, tag: Tag, data: &[u8]) -> Result<()> {
        self.check_rank(dest)?;
        if !self.goes_direct(dest, data.len()) {
            return Err(ProtocolError::NotDirect {
                rank: self.rank,
                dest,
                bytes: data.len(),
            });
        }
        if self.queued_for(dest) {
            return Err(ProtocolError::QueuedBeforeDirect {
                rank: self.rank,
                dest,
            });
        }
        self.conns.note_peer(dest);
        let hdr = PacketHeader {
            src: self.rank as u32,
            tag,
            total: data.len() as u64,
            offset: 0,
            len: 0,
            more: false,
        };
        let mut inbox = std::mem::take(&mut self.inbox);
        let sent = {
            let matcher = &mut self.matcher;
            let mut rx = super::DatagramRx {
                dg: self.dg.as_deref_mut(),
                pool: &mut self.pool,
                conns: &self.conns,
                rank: self.rank,
                into: None,
            };
            super::direct_path(self.fabric.as_mut()).and_then(|path| {
                Ok(path.send_direct(dest, &hdr, data, &mut |ev| inbox.take(matcher, &mut rx, ev))?)
            })
        };
        let settled = self.settle(&mut inbox);
        let stopped = inbox.failed.take();
        self.inbox = inbox;
        sent?;
        if let Some(e) = stopped {
            return Err(e);
        }
        settled
    }

    /// Grows `wr_info` to one entry per pool buffer after `id` was acquired (the pool may
    /// have grown); if that memory cannot be had, gives `id` back and fails with
    /// [`ProtocolError::Alloc`] (the caller's state is as before the acquire).
    #[inline]
    pub(super) fn sync_wr_info(
        wr_info: &mut Vec<Option<InFlight>>,
        pool: &mut BufferPool,
        id: BufId,
    ) -> Result<()> {
        let n = pool.buffers();
        if wr_info.len() < n {
            return Self::grow_wr_info(wr_info, pool, id, n);
        }
        Ok(())
    }

    /// [`Engine::sync_wr_info`] once the pool has more buffers than `wr_info` entries (`n`).
    #[cold]
    fn grow_wr_info(
        wr_info: &mut Vec<Option<InFlight>>,
        pool: &mut BufferPool,
        id: BufId,
        n: usize,
    ) -> Result<()> {
        let more = n - wr_info.len();
        if let Err(e) = crate::core::memory::try_reserve_for(wr_info, more, || {
            format!("the engine's table of sends in flight, grown with the pool ({WR_INFO_BYTES} bytes per buffer)")
        }) {
            pool.release(id);
            return Err(e.into());
        }
        wr_info.resize(n, None);
        Ok(())
    }

    pub(super) fn pump(&mut self) -> Result<bool> {
        let mut work = false;
        let mut dests = std::mem::take(&mut self.scratch_dests);
        dests.clear();
        dests.extend(self.active.iter().copied());
        let mut pumped = Ok(());
        for &d in &dests {
            match self.pump_peer(d) {
                Ok(w) => work |= w,
                Err(e) => {
                    pumped = Err(e);
                    break;
                }
            }
        }
        self.scratch_dests = dests;
        pumped.map(|()| work)
    }

    /// Posts as many chunks to `dest` as endpoint state, credits and pool buffers allow.
    fn pump_peer(&mut self, dest: usize) -> Result<bool> {
        let key = self.key_of(dest);
        let mut work = false;
        while let Some(msg) = self.peers.get_mut(&dest).and_then(|p| p.queue.front_mut()) {
            if msg.direct {
                // No endpoint, credit or pool buffer needed: hand it over whole.
                let hdr = PacketHeader {
                    src: self.rank as u32,
                    tag: msg.tag,
                    total: msg.total as u64,
                    offset: 0,
                    len: 0,
                    more: false,
                };
                let (req, data) = (msg.req, std::mem::take(&mut msg.rest));
                let p = self.peers.get_mut(&dest).expect("peer");
                p.queue.pop_front();
                if p.queue.is_empty() {
                    self.active.remove(dest);
                }
                super::direct_path(self.fabric.as_mut())?.post_direct(
                    dest,
                    &hdr,
                    data,
                    DIRECT_WR | req.get(),
                )?;
                self.direct_inflight += 1;
                let s = self.sends.get_mut(&req).expect("send request");
                s.outstanding += 1;
                s.posted_all = true;
                work = true;
                continue;
            }
            match self.conns.get(key) {
                Some(ep) if ep.state == EndpointState::Open => {
                    if self.dg.as_ref().is_some_and(|d| d.is_waiting(dest)) {
                        break; // after the datagrams to it are acknowledged
                    }
                }
                Some(_) => break,
                None => {
                    if self.datagram_route(dest) && self.post_datagram_chunk(dest)? {
                        work = true;
                        continue;
                    }
                    break;
                }
            }
            let p = self.peers.get_mut(&dest).expect("peer");
            if p.credits == 0 {
                break;
            }
            let msg = p.queue.front_mut().expect("message");
            let bs = self.pool.buffer_size();
            let (id, len) = match msg.first.take() {
                Some(f) => f,
                None => {
                    let Some(id) = self.pool.acquire(self.fabric.as_mut())? else {
                        break;
                    };
                    Self::sync_wr_info(&mut self.wr_info, &mut self.pool, id)?;
                    let len = (msg.total - msg.offset).min(bs);
                    let from = msg.offset - msg.rest_from;
                    self.pool.buf_mut(id)[..len].copy_from_slice(&msg.rest[from..from + len]);
                    (id, len)
                }
            };
            // Re-borrow after the pool was used.
            let p = self.peers.get_mut(&dest).expect("peer");
            let queued = p.queue.len();
            let msg = p.queue.front_mut().expect("message");
            let hdr = PacketHeader {
                src: self.rank as u32,
                tag: msg.tag,
                total: msg.total as u64,
                offset: msg.offset as u64,
                len: len as u32,
                more: msg.offset + len < msg.total || queued > 1,
            };
            let req = msg.req;
            msg.offset += len;
            let finished = msg.offset >= msg.total;
            let chunked = msg.chunked;
            p.credits -= 1;
            if finished {
                self.chunked_queued -= usize::from(chunked);
                p.queue.pop_front();
                if p.queue.is_empty() {
                    self.active.remove(dest);
                }
            }
            let outstanding = self.post_chunk(dest, key, &hdr, id, req)?;
            let s = self.sends.get_mut(&req).expect("send request");
            s.outstanding += u32::from(outstanding);
            if finished {
                s.posted_all = true;
            }
            work = true;
        }
        Ok(work)
    }
}
