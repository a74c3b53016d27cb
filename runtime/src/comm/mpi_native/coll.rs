//! MPI's own collectives on the native path ([`NativeCollectives`] for [`MpiNative`]), on
//! a duplicate of the world made for them alone (so no message of theirs is ever matched
//! by a receive of the native path, whatever its source and tag):
//! - `barrier`: `MPI_Iallgather` of its stamp (below);
//! - `all_gatherv`: `MPI_Iallgather` of its stamp and the lengths (`u64`), then
//!   `MPI_Iallgatherv`;
//! - `all_reduce`: `MPI_Iallreduce` (`MPI_INT32_T`, `MPI_INT64_T`, `MPI_UINT64_T`,
//!   `MPI_DOUBLE`; `MPI_SUM`, `MPI_MIN`, `MPI_MAX`), in MPI's own order of combination;
//! - `bcast`: `MPI_Ibcast`;
//! - `gather`: `MPI_Igather` of the lengths to the root, then `MPI_Igatherv`;
//! - `all_to_allv`: `MPI_Ialltoall` of the lengths, then `MPI_Ialltoallv`;
//! - `exchange_sparse`: NBX (`sparse.rs`).
//!
//! Stamps: `barrier` and `all_gatherv` start with the same `MPI_Iallgather` of two `u64`s per
//! rank, a stamp (the collective's kind, as in `protocol::collective`, and its number on
//! this communicator, counting every collective) and a length, so that ranks that call
//! different ones, or the same in another order, get
//! [`ProtocolError::CollectiveMismatch`](crate::error::ProtocolError::CollectiveMismatch)
//! as on the engine paths, not a hang. The others carry no stamp: each is the MPI
//! collective a program would call (at MPI's cost), and ranks that call different ones
//! are an erroneous MPI program (MPI may fail, or wait for ever).
//!
//! Each is MPI's non-blocking form, tested in the loop of the native path's blocking calls
//! (the same polls, backoff and housekeeping: an abort notice ends it with
//! [`FabricError::Aborted`](crate::error::FabricError::Aborted), unexpected messages are
//! taken out of MPI meanwhile), over buffers of its own ([`ffi::CollOp`]). After a
//! retryable error (out of memory, as the engine's collectives) the collective is kept
//! with its operation in flight and the next call of its kind resumes it (the first
//! call's lengths stand; another collective meanwhile is
//! [`CommError::CollectiveUnfinished`]); after another error it is abandoned: its buffers
//! are leaked, and so is its communicator when the rank ends.
//!
//! MPI counts and displacements are `int`s: a length or a total above `i32::MAX` bytes
//! (elements, for `all_reduce`) is [`CommError::CollectiveArgument`] naming the rank, the
//! call and the size. The lengths travel first as `u64`s, so each rank finds the sizes it
//! takes part in (its own, and the parts it receives) before any data moves or is copied.
//! A rank that fails that way returns the error; its peers wait in the collective as they
//! do for any rank that fails (until the abort protocol tells them).

use super::ffi::{CollBufs, CollOp};
use super::*;
use crate::comm::collective::native::NativeCollectives;
use crate::comm::collective::{ReduceOp, ReduceSlice};
use crate::core::memory::{try_buffer, try_copy, try_reserve_for};
use crate::error::{CommError, ProtocolError};
use crate::protocol::collective::CollectiveKind;

mod sparse;

/// The largest MPI count or displacement (`int`).
const INT_MAX: u64 = c_int::MAX as u64;
/// Bits of a stamp's collective number (the kind's code above them).
const SEQ_BITS: u32 = 56;

/// A collective stopped by a retryable error, resumed by the next call of its kind.
pub(super) struct CollUnfinished {
    op: &'static str,
    seq: u64,
    /// The stage it stopped in (0: the lengths, 1: the data) and that stage's operation,
    /// complete when it stopped after it.
    stage: u8,
    pending: Pending,
}

enum Pending {
    Op(CollOp),
    Sparse(sparse::Nbx),
}

/// True for the errors after which a collective can be resumed (as the engine's
/// collectives decide): the communicator works on.
fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Fabric(FabricError::MessageAlloc { .. })
            | Error::Alloc(_)
            | Error::Protocol(ProtocolError::WouldBlock)
    )
}

/// `n` zero words, allocated through [`try_reserve_for`].
fn words(n: usize, what: &'static str) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    try_reserve_for(&mut v, n, || format!("{what}: {n} lengths"))?;
    v.resize(n, 0);
    Ok(v)
}

/// `n` zero bytes, allocated through [`try_buffer`].
fn zeroed(n: usize, what: impl FnOnce() -> String) -> Result<Vec<u8>> {
    let mut v = try_buffer(n, what)?;
    v.resize(n, 0);
    Ok(v)
}

impl MpiNative {
    fn too_big(&self, op: &'static str, what: String, limit: &str) -> Error {
        CommError::CollectiveArgument {
            rank: self.rank,
            op,
            what,
            why: format!("is above MPI's {limit} limit of {INT_MAX} bytes (an int)"),
        }
        .into()
    }

    /// A resumed call whose arguments differ from the first call's.
    fn not_as_first(&self, op: &'static str, what: String, first: u64) -> Error {
        CommError::CollectiveArgument {
            rank: self.rank,
            op,
            what,
            why: format!("differs from the unfinished call's ({first}), which this call resumes"),
        }
        .into()
    }

    /// The counts and displacements (`int`s) of parts of `lens` bytes by rank, and their
    /// total; `whose(r)` names part `r` in the error when one, or the total, is above
    /// `i32::MAX`.
    fn fit_ints(
        &self,
        op: &'static str,
        lens: &[u64],
        whose: impl Fn(usize) -> String,
    ) -> Result<(Vec<c_int>, Vec<c_int>, usize)> {
        let mut counts = Vec::new();
        let mut displs = Vec::new();
        try_reserve_for(&mut counts, lens.len(), || format!("{op}: {} counts", lens.len()))?;
        try_reserve_for(&mut displs, lens.len(), || {
            format!("{op}: {} displacements", lens.len())
        })?;
        let mut total = 0u64;
        for (r, &len) in lens.iter().enumerate() {
            if len > INT_MAX {
                return Err(self.too_big(op, format!("{} of {len} bytes", whose(r)), "count"));
            }
            counts.push(len as c_int);
            displs.push(total as c_int);
            total += len;
            if total > INT_MAX {
                return Err(self.too_big(
                    op,
                    format!("a total of {total} bytes or more (the parts up to rank {r})"),
                    "displacement",
                ));
            }
        }
        Ok((counts, displs, total as usize))
    }

    /// Where call `op` starts: the stage and operation of its unfinished call to resume,
    /// or `None` for a new one. Errors: [`FabricError::Aborted`] when the world failed,
    /// [`CommError::CollectiveUnfinished`] when another collective is unfinished.
    fn coll_begin(&mut self, op: &'static str) -> Result<Option<(u8, Pending)>> {
        if self.abort.is_set() {
            return Err(Error::Fabric(FabricError::Aborted));
        }
        match self.coll_unfinished.take() {
            None => Ok(None),
            Some(u) if u.op == op => Ok(Some((u.stage, u.pending))),
            Some(u) => {
                let e = CommError::CollectiveUnfinished {
                    rank: self.rank,
                    op,
                    unfinished: u.op,
                    seq: u.seq,
                };
                self.coll_unfinished = Some(u);
                Err(e.into())
            }
        }
    }

    /// [`MpiNative::coll_begin`] for a call of one MPI operation per stage.
    fn coll_resume(&mut self, op: &'static str) -> Result<Option<(u8, CollOp)>> {
        Ok(match self.coll_begin(op)? {
            Some((stage, Pending::Op(c))) => Some((stage, c)),
            // (Only exchange_sparse keeps an exchange, and it resumes it itself.)
            Some((_, Pending::Sparse(_))) | None => None,
        })
    }

    /// Stage `stage` of `op` stopped with error `e`: kept for the next call of `op` when
    /// `e` is retryable, else abandoned (an operation in flight is leaked). Returns `e`.
    fn coll_stop(&mut self, op: &'static str, stage: u8, pending: Pending, e: Error) -> Error {
        if retryable(&e) {
            self.coll_unfinished = Some(Box::new(CollUnfinished {
                op,
                seq: self.coll_seq,
                stage,
                pending,
            }));
        } else if !matches!(&pending, Pending::Op(c) if c.is_done()) {
            self.coll_abandoned = true;
        }
        e
    }

    /// Waits for `c`, stage `stage` of `op`, as the blocking calls wait (see the module
    /// docs); its buffers once complete. On an error it is kept or abandoned
    /// ([`MpiNative::coll_stop`]).
    fn coll_wait(&mut self, op: &'static str, stage: u8, mut c: CollOp) -> Result<CollBufs> {
        let mut idle = Idle::new();
        loop {
            match c.test() {
                Ok(true) => return Ok(c.take_bufs().unwrap_or_default()),
                Ok(false) => {}
                Err(e) => return Err(self.coll_stop(op, stage, Pending::Op(c), e)),
            }
            if let Err(e) = self.coll_idle(&mut idle) {
                return Err(self.coll_stop(op, stage, Pending::Op(c), e));
            }
        }
    }

    /// One idle poll of a collective's wait: the blocking calls' policy, their housekeeping
    /// (abort notices, unexpected messages, the sends and receives in flight) once per
    /// [`DRAIN_EVERY`] polls, the abort flag on the others.
    fn coll_idle(&mut self, idle: &mut Idle) -> Result<()> {
        idle.snooze();
        if idle.housekeeping() {
            self.poll(true)?;
        } else if self.abort.is_set() {
            return Err(Error::Fabric(FabricError::Aborted));
        }
        Ok(())
    }

    /// Starts a stamped collective of `kind` with this rank's length `len` (see the module
    /// docs), numbering it.
    fn stamp_start(&mut self, kind: CollectiveKind, len: usize) -> Result<CollOp> {
        let seq = self.coll_seq + 1;
        let stamp = u64::from(kind.code()) << SEQ_BITS | (seq & ((1 << SEQ_BITS) - 1));
        let bufs = CollBufs {
            wsend: vec![stamp, len as u64],
            wrecv: words(2 * self.world, kind.name())?,
            ..Default::default()
        };
        let c = ffi::iallgather_u64(&self.coll, bufs)?;
        self.coll_seq = seq;
        Ok(c)
    }

    /// Every rank's length, by rank, from a stamped start's buffers. Errors:
    /// [`ProtocolError::CollectiveMismatch`] naming the first rank whose stamp differs.
    fn stamp_check(&self, kind: CollectiveKind, b: &CollBufs) -> Result<Vec<u64>> {
        let mine = b.wsend.first().copied().unwrap_or_default();
        let seq = mine & ((1 << SEQ_BITS) - 1);
        let stamps = b.wrecv.chunks_exact(2).map(|p| p[0]);
        if let Some((peer, s)) = stamps.enumerate().find(|&(_, s)| s != mine) {
            let (code, oseq) = ((s >> SEQ_BITS) as u8, s & ((1 << SEQ_BITS) - 1));
            let got = match CollectiveKind::from_code(code) {
                Some(k) => format!("a message of {} (collective #{oseq}, step 0)", k.name()),
                None => format!("a message of an unknown collective (code {code}, #{oseq}, step 0)"),
            };
            return Err(Error::Protocol(ProtocolError::CollectiveMismatch {
                rank: self.rank,
                peer,
                op: kind.name(),
                seq,
                step: 0,
                got: got.into(),
            }));
        }
        Ok(b.wrecv.chunks_exact(2).map(|p| p[1]).collect())
    }

    /// `data`'s parts at `counts` and `displs` (from [`MpiNative::fit_ints`]), each its
    /// own `Vec`.
    fn split(op: &'static str, data: &[u8], counts: &[c_int], displs: &[c_int]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        try_reserve_for(&mut out, counts.len(), || format!("{op}: {} parts", counts.len()))?;
        for (&c, &d) in counts.iter().zip(displs) {
            let (c, d) = (c as usize, d as usize);
            out.push(try_copy(&data[d..d + c], || {
                format!("{op}: a part of {c} bytes")
            })?);
        }
        Ok(out)
    }

    /// The end of a `v` collective: its parts, or the error, after which the complete
    /// stage 1 is kept (a retry splits it again).
    fn coll_split(&mut self, op: &'static str, b: CollBufs) -> Result<Vec<Vec<u8>>> {
        Self::split(op, &b.recv, &b.rcounts, &b.rdispls)
            .map_err(|e| self.coll_stop(op, 1, Pending::Op(CollOp::finished(b)), e))
    }

    /// Stage 1 of `all_gatherv` from the complete stage 0 `b0`: the checks, the buffers
    /// and the operation started, or the error (after which `b0` is kept or dropped).
    fn gatherv_start(&mut self, b0: CollBufs, data: &[u8]) -> Result<CollOp> {
        const OP: &str = "all_gatherv";
        let me = self.rank;
        let prep = (|| -> Result<CollBufs> {
            let lens = self.stamp_check(CollectiveKind::AllGatherv, &b0)?;
            if data.len() as u64 != lens[me] {
                return Err(self.not_as_first(OP, format!("a part of {} bytes", data.len()), lens[me]));
            }
            let whose = |r| {
                if r == me {
                    "this rank's part".to_string()
                } else {
                    format!("rank {r}'s part")
                }
            };
            let (rcounts, rdispls, total) = self.fit_ints(OP, &lens, whose)?;
            Ok(CollBufs {
                send: try_copy(data, || format!("{OP}: this rank's part of {} bytes", data.len()))?,
                recv: zeroed(total, || format!("{OP}: every rank's parts, {total} bytes"))?,
                rcounts,
                rdispls,
                ..Default::default()
            })
        })();
        match prep {
            Ok(bufs) => ffi::iallgatherv(&self.coll, bufs),
            Err(e) => Err(self.coll_stop(OP, 0, Pending::Op(CollOp::finished(b0)), e)),
        }
    }
}

impl NativeCollectives for MpiNative {
    fn barrier(&mut self) -> Result<()> {
        const OP: &str = "barrier";
        let c = match self.coll_resume(OP)? {
            Some((_, c)) => c,
            None => self.stamp_start(CollectiveKind::Barrier, 0)?,
        };
        let b = self.coll_wait(OP, 0, c)?;
        self.stamp_check(CollectiveKind::Barrier, &b).map(drop)
    }

    fn all_gatherv(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        const OP: &str = "all_gatherv";
        let (stage, c) = match self.coll_resume(OP)? {
            Some(sc) => sc,
            None => (0, self.stamp_start(CollectiveKind::AllGatherv, data.len())?),
        };
        let c = if stage == 0 {
            let b0 = self.coll_wait(OP, 0, c)?;
            self.gatherv_start(b0, data)?
        } else {
            c
        };
        let b = self.coll_wait(OP, 1, c)?;
        self.coll_split(OP, b)
    }

    fn all_reduce(&mut self, mut data: ReduceSlice<'_>, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        let c = match self.coll_resume(OP)? {
            Some((_, c)) => c,
            None => {
                let n = data.len();
                if n as u64 > INT_MAX {
                    return Err(CommError::CollectiveArgument {
                        rank: self.rank,
                        op: OP,
                        what: format!("a buffer of {n} elements"),
                        why: format!("is above MPI's count limit of {INT_MAX} elements (an int)"),
                    }
                    .into());
                }
                let c = ffi::iallreduce(&self.coll, &data, op)?;
                self.coll_seq += 1;
                c
            }
        };
        let b = self.coll_wait(OP, 0, c)?;
        let bytes = (data.len() * data.ty().size()) as u64;
        if bytes.div_ceil(8) != b.wrecv.len() as u64 {
            let first = b.wrecv.len() as u64 * 8;
            return Err(self.not_as_first(OP, format!("a buffer of {bytes} bytes"), first));
        }
        ffi::reduce_result(&b, &mut data);
        Ok(())
    }

    fn bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<()> {
        const OP: &str = "bcast";
        let len = buf.len();
        let c = match self.coll_resume(OP)? {
            Some((_, c)) => c,
            None => {
                if len as u64 > INT_MAX {
                    return Err(self.too_big(OP, format!("a buffer of {len} bytes"), "count"));
                }
                let data = if self.rank == root {
                    try_copy(buf, || format!("{OP}: the root's {len} bytes"))?
                } else {
                    zeroed(len, || format!("{OP}: a buffer of {len} bytes"))?
                };
                let bufs = CollBufs {
                    recv: data,
                    ..Default::default()
                };
                let c = ffi::ibcast(&self.coll, bufs, root)?;
                self.coll_seq += 1;
                c
            }
        };
        let b = self.coll_wait(OP, 0, c)?;
        if b.recv.len() != len {
            return Err(self.not_as_first(OP, format!("a buffer of {len} bytes"), b.recv.len() as u64));
        }
        if self.rank != root {
            buf.copy_from_slice(&b.recv);
        }
        Ok(())
    }

    fn gather(&mut self, root: usize, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        const OP: &str = "gather";
        let me = self.rank;
        let (stage, c) = match self.coll_resume(OP)? {
            Some(sc) => sc,
            None => {
                let bufs = CollBufs {
                    wsend: vec![data.len() as u64],
                    wrecv: if me == root {
                        words(self.world, OP)?
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                };
                let c = ffi::igather_u64(&self.coll, bufs, root)?;
                self.coll_seq += 1;
                (0, c)
            }
        };
        let c = if stage == 0 {
            let b0 = self.coll_wait(OP, 0, c)?;
            let prep = (|| -> Result<CollBufs> {
                let first = b0.wsend.first().copied().unwrap_or_default();
                if data.len() as u64 != first {
                    return Err(self.not_as_first(OP, format!("a part of {} bytes", data.len()), first));
                }
                if first > INT_MAX {
                    return Err(self.too_big(OP, format!("this rank's part of {first} bytes"), "count"));
                }
                let mut bufs = CollBufs::default();
                if me == root {
                    let (rcounts, rdispls, total) =
                        self.fit_ints(OP, &b0.wrecv, |r| format!("rank {r}'s part"))?;
                    bufs.recv = zeroed(total, || format!("{OP}: every rank's parts, {total} bytes"))?;
                    bufs.rcounts = rcounts;
                    bufs.rdispls = rdispls;
                }
                bufs.send = try_copy(data, || format!("{OP}: this rank's part of {} bytes", data.len()))?;
                Ok(bufs)
            })();
            match prep {
                Ok(bufs) => ffi::igatherv(&self.coll, bufs, root)?,
                Err(e) => return Err(self.coll_stop(OP, 0, Pending::Op(CollOp::finished(b0)), e)),
            }
        } else {
            c
        };
        let b = self.coll_wait(OP, 1, c)?;
        if me != root {
            return Ok(None);
        }
        self.coll_split(OP, b).map(Some)
    }

    fn all_to_allv(&mut self, parts: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        const OP: &str = "all_to_allv";
        let n = self.world;
        let (stage, c) = match self.coll_resume(OP)? {
            Some(sc) => sc,
            None => {
                let mut wsend = words(n, OP)?;
                for (w, p) in wsend.iter_mut().zip(parts) {
                    *w = p.len() as u64;
                }
                let bufs = CollBufs {
                    wsend,
                    wrecv: words(n, OP)?,
                    ..Default::default()
                };
                let c = ffi::ialltoall_u64(&self.coll, bufs)?;
                self.coll_seq += 1;
                (0, c)
            }
        };
        let c = if stage == 0 {
            let b0 = self.coll_wait(OP, 0, c)?;
            let prep = (|| -> Result<CollBufs> {
                if let Some((d, p)) = parts
                    .iter()
                    .enumerate()
                    .find(|(d, p)| p.len() as u64 != b0.wsend[*d])
                {
                    return Err(self.not_as_first(
                        OP,
                        format!("the part of {} bytes for rank {d}", p.len()),
                        b0.wsend[d],
                    ));
                }
                let (scounts, sdispls, stotal) =
                    self.fit_ints(OP, &b0.wsend, |d| format!("the part for rank {d}"))?;
                let (rcounts, rdispls, rtotal) =
                    self.fit_ints(OP, &b0.wrecv, |s| format!("rank {s}'s part"))?;
                let mut send = try_buffer(stotal, || format!("{OP}: the parts sent, {stotal} bytes"))?;
                for p in parts {
                    send.extend_from_slice(p);
                }
                Ok(CollBufs {
                    send,
                    recv: zeroed(rtotal, || format!("{OP}: the parts received, {rtotal} bytes"))?,
                    scounts,
                    sdispls,
                    rcounts,
                    rdispls,
                    ..Default::default()
                })
            })();
            match prep {
                Ok(bufs) => ffi::ialltoallv(&self.coll, bufs)?,
                Err(e) => return Err(self.coll_stop(OP, 0, Pending::Op(CollOp::finished(b0)), e)),
            }
        } else {
            c
        };
        let b = self.coll_wait(OP, 1, c)?;
        self.coll_split(OP, b)
    }

    fn exchange_sparse(&mut self, sends: &[(usize, &[u8])]) -> Result<Vec<(usize, Vec<u8>)>> {
        self.sparse_exchange(sends)
    }
}
