//! Withdrawing a receive whose wait failed ([`Matcher::cancel`]): the message bound to it,
//! whole or still arriving, is given back: to the earliest posted receive that accepts it,
//! else to the unexpected queue at its place in the order of arrival, so that a later
//! receive gets it before the messages of its source and tag that came after it.

use super::{accepts, Inbound, Matcher};
use crate::core::memory::try_buffer;
use crate::protocol::error::{ProtocolError, Result};
use crate::protocol::request::RequestId;

impl Matcher {
    /// Withdraws receive `req` (a blocking receive whose wait ended with an error): no
    /// later message binds to it, its refusal is forgotten, and a message already bound
    /// to it is given back, with the chunks still to come arriving into it:
    /// - complete (not taken yet), or still arriving into a buffer of its own: given back
    ///   as it is;
    /// - written into the caller's buffer ([`super::RecvInto`], whole or in part): `into`
    ///   must be that buffer; its bytes are copied into a buffer of the message's whole
    ///   length, reserved with `try_reserve` (the caller's buffer is the caller's again).
    ///
    /// A message given back goes to the earliest posted receive that accepts it, as at
    /// its arrival (a limited one it is too long for ends refused), else to the unexpected
    /// queue at its place in the order of arrival.
    ///
    /// Errors (the message is then dropped, and the rest of its chunks are counted and
    /// not kept; nothing else changes): [`ProtocolError::Alloc`] naming the message when the copy
    /// out of the caller's buffer cannot be reserved; [`ProtocolError::BadChunk`] when its bytes
    /// were in a caller's buffer and `into` is `None` or shorter.
    pub fn cancel(&mut self, req: RequestId, into: Option<&[u8]>) -> Result<()> {
        if let Some(i) = self.posted.iter().position(|p| p.req == req) {
            // Still posted: nothing is bound to it.
            self.posted.remove(i);
            return Ok(());
        }
        self.refused.retain(|r| r.req != req);
        if let Some((done, id)) = self.into_done.take_if(|(d, _)| d.req == req) {
            let e = done.envelope;
            let data = copy_back(req, into, e.source, e.tag, e.len, e.len)?;
            self.inbound.insert(
                id,
                Inbound {
                    source: e.source,
                    tag: e.tag,
                    total: e.len,
                    data,
                    req: None,
                    into: None,
                },
            );
            self.give_back(id);
            return Ok(());
        }
        if let Some((id, m)) = self.take_completed_entry(req) {
            self.inbound.insert(
                id,
                Inbound {
                    source: m.source,
                    tag: m.tag,
                    total: m.data.len(),
                    data: m.data,
                    req: None,
                    into: None,
                },
            );
            self.give_back(id);
            return Ok(());
        }
        // Still arriving: the message its source is sending now.
        let bound = self
            .assembling
            .values()
            .copied()
            .find(|id| self.inbound.get(id).is_some_and(|m| m.req == Some(req)));
        let Some(id) = bound else {
            return Ok(());
        };
        let m = self.inbound.get_mut(&id).expect("inbound message");
        m.req = None;
        if let Some(arrived) = m.into {
            // On error `into` stays set: the rest of its chunks are counted and not kept.
            m.data = copy_back(req, into, m.source, m.tag, m.total, arrived)?;
            m.into = None;
        }
        self.give_back(id);
        Ok(())
    }

    /// Withdraws receive `req` if it is still posted with no message bound to it (a
    /// cancel by its owner): true. False, and nothing changes, when a message has matched
    /// it (complete, still arriving, or refused as longer than its limit) or it is not a
    /// posted receive.
    pub fn withdraw_posted(&mut self, req: RequestId) -> bool {
        match self.posted.iter().position(|p| p.req == req) {
            Some(i) => {
                self.posted.remove(i);
                true
            }
            None => false,
        }
    }

    /// Gives message `id` (in `inbound`, bound to nothing, in no queue) back: bound to the
    /// earliest posted receive that accepts it (completing it when all of it is there),
    /// else queued as unexpected before every later arrival.
    fn give_back(&mut self, id: u64) {
        let m = &self.inbound[&id];
        let (src, tag, total) = (m.source, m.tag, m.total);
        let hit = self
            .posted
            .iter()
            .position(|p| accepts(p.source, p.tag, src, tag));
        if let Some(req) = self.bind(src, tag, total, hit) {
            let m = self.inbound.get_mut(&id).expect("inbound message");
            m.req = Some(req);
            if m.data.len() == m.total {
                self.finish_if_bound(id);
            }
            return;
        }
        // Ids follow the order of arrival, and so does the queue.
        let at = self.unexpected.partition_point(|&u| u < id);
        self.unexpected.insert(at, id);
    }
}

/// The first `arrived` bytes of a message of `total` bytes from `src` with tag `tag`,
/// written into the caller's buffer `into` of withdrawn receive `req`, in a buffer of the
/// message's own (reserved for `total` bytes).
fn copy_back(
    req: RequestId,
    into: Option<&[u8]>,
    src: usize,
    tag: u32,
    total: usize,
    arrived: usize,
) -> Result<Vec<u8>> {
    let Some(held) = into.and_then(|b| b.get(..arrived)) else {
        return Err(ProtocolError::BadChunk {
            peer: src,
            tag,
            total: total as u64,
            offset: arrived as u64,
            what: format!(
                "dropped: its first {arrived} bytes were in the buffer of withdrawn receive {}, which was not given back",
                req.get()
            ),
        });
    };
    let mut data = try_buffer(total, || {
        format!(
            "the message of {total} bytes from rank {src} with tag {tag} that withdrawn receive {} \
             was writing into its caller's buffer ({arrived} bytes there); the message is dropped",
            req.get()
        )
    })?;
    data.extend_from_slice(held);
    Ok(data)
}

#[cfg(test)]
mod tests;
