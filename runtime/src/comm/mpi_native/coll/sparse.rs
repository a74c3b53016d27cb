//! The sparse exchange on the native path: NBX (Hoefler, Siebert, Lumsdaine, "Scalable
//! communication protocols for dynamic sparse data exchange", PPoPP 2010). An
//! `MPI_Issend` to each destination; then, receiving whatever `MPI_Improbe` finds meanwhile
//! (`MPI_Mrecv`), once every `Issend` completed (each was matched by its receiver), an
//! `MPI_Ibarrier`; the exchange ends when that barrier completes: every rank's sends were
//! matched, so nothing more comes. Polled in the blocking calls' wait loop (their backoff
//! and housekeeping: an abort notice ends it with `Aborted`, and a retryable error keeps
//! it, in flight, for the next call). Partners: the destinations, the sources, and MPI's
//! barrier's (O(log n) in Open MPI's and MPICH's non-blocking barriers).
//!
//! Its messages carry the exchange's number modulo 2^15 as tag, on the collectives'
//! communicator (which no receive of the native path looks at): a rank can be one exchange
//! ahead of another (it left the barrier the other is still in), never two, so
//! back-to-back exchanges never mix.

use super::super::ffi::{self, CollOp};
use super::*;
use crate::core::memory::try_copy;
use crate::protocol::collective::CollectiveKind;

/// Exchanges' tags: their number modulo this (`MPI_TAG_UB` is at least 32767).
const SPARSE_TAGS: u32 = 1 << 15;

const OP: &str = "exchange_sparse";

/// One exchange under way (kept, in flight, across a retryable error).
pub(in crate::comm::mpi_native) struct Nbx {
    tag: c_int,
    /// The `Issend`s not known complete yet.
    sends: Vec<CollOp>,
    /// The barrier, once every send completed.
    barrier: Option<CollOp>,
    /// What came, by arrival.
    got: Vec<Received>,
}

impl MpiNative {
    /// One idle poll of the exchange's wait: the blocking calls' policy, their
    /// housekeeping (abort notices, unexpected messages, the sends and receives in flight)
    /// once per [`DRAIN_EVERY`] polls, the abort flag on the others.
    fn sparse_idle(&mut self, idle: &mut Idle) -> Result<()> {
        idle.snooze();
        if idle.housekeeping() {
            self.poll(true)?;
        } else if self.abort.is_set() {
            return Err(Error::Fabric(FabricError::Aborted));
        }
        Ok(())
    }

    /// `Communicator::exchange_sparse` on the native path (see the module docs).
    pub(super) fn sparse_exchange(&mut self, sends: &[(usize, &[u8])]) -> Result<Vec<Received>> {
        let x = match self.coll_begin(OP)? {
            Some(Pending::Sparse(x)) => x,
            // (This call keeps nothing else.)
            _ => self.sparse_start(sends)?,
        };
        self.nbx(x)
    }

    /// Starts an exchange: the sizes checked and the bytes copied first (an error then
    /// leaves nothing under way), then the `Issend`s.
    fn sparse_start(&mut self, sends: &[(usize, &[u8])]) -> Result<Nbx> {
        let mut copies = Vec::new();
        try_reserve_for(&mut copies, sends.len(), || {
            format!("{OP}: {} sends", sends.len())
        })?;
        for &(d, data) in sends {
            if data.len() as u64 > INT_MAX {
                return Err(self.too_big(
                    OP,
                    format!("the message of {} bytes for rank {d}", data.len()),
                    "count",
                ));
            }
        }
        for &(d, data) in sends {
            let send = try_copy(data, || {
                format!("{OP}: the message of {} bytes for rank {d}", data.len())
            })?;
            copies.push((d, send));
        }
        // With `collective_checks`, the stamp (after the copies: nothing to repeat).
        self.take_number(CollectiveKind::ExchangeSparse)?;
        let tag = (self.sparse_seq % SPARSE_TAGS) as c_int;
        self.sparse_seq = self.sparse_seq.wrapping_add(1);
        let mut x = Nbx {
            tag,
            sends: Vec::with_capacity(copies.len()),
            barrier: None,
            got: Vec::new(),
        };
        for (d, send) in copies {
            match ffi::issend(&self.coll, send, d, tag) {
                Ok(c) => x.sends.push(c),
                Err(e) => {
                    // The sends posted stay in flight (leaked): the exchange is abandoned.
                    self.coll_abandoned = true;
                    return Err(e);
                }
            }
            self.note_peer(d);
        }
        Ok(x)
    }

    /// The exchange's loop (see the module docs); what came, in increasing source order.
    fn nbx(&mut self, mut x: Nbx) -> Result<Vec<Received>> {
        let mut idle = Idle::new();
        loop {
            match self.nbx_step(&mut x) {
                Ok(Some(true)) => break,
                Ok(Some(false)) => {
                    idle.reset();
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    // A message matched and not received, or MPI's error: abandoned.
                    self.coll_abandoned = true;
                    return Err(e);
                }
            }
            if let Err(e) = self.sparse_idle(&mut idle) {
                return Err(self.coll_stop(OP, Pending::Sparse(x), e));
            }
        }
        let mut got = x.got;
        got.sort_unstable_by_key(|r| r.source);
        Ok(got)
    }

    /// One step: `Some(false)` when a message was received, `Some(true)` when the exchange
    /// ended, `None` when nothing happened.
    fn nbx_step(&mut self, x: &mut Nbx) -> Result<Option<bool>> {
        if let Some(m) = ffi::improbe(&self.coll, any_source(), x.tag)? {
            let n = m.len();
            let source = source_rank(m.status().MPI_SOURCE)?;
            let mut buf = try_buffer(n, || format!("{OP}: a message of {n} bytes from rank {source}"))?;
            m.recv_append(&mut buf)?;
            self.note_peer(source);
            try_reserve_for(&mut x.got, 1, || format!("{OP}: the messages received"))?;
            x.got.push(Received { source, data: buf });
            return Ok(Some(false));
        }
        match &mut x.barrier {
            None => {
                let mut i = 0;
                while i < x.sends.len() {
                    if x.sends[i].test()? {
                        x.sends.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
                if x.sends.is_empty() {
                    x.barrier = Some(ffi::ibarrier(&self.coll)?);
                    return Ok(Some(false));
                }
            }
            Some(b) => {
                if b.test()? {
                    return Ok(Some(true));
                }
            }
        }
        Ok(None)
    }
}
