//! MPI's own collectives on the native path ([`NativeCollectives`] for [`MpiNative`]), on
//! a duplicate of the world made for them alone (so no message of theirs is ever matched
//! by a receive of the native path, whatever its source and tag):
//! - `barrier`: `MPI_Barrier` (with `collective_checks`, the `MPI_Allgather` of its stamp
//!   alone, below);
//! - `all_gatherv`: `MPI_Allgather` of its stamp and the lengths (`u64`), then
//!   `MPI_Allgatherv`;
//! - `all_reduce`: `MPI_Allreduce` in place (`MPI_IN_PLACE`: no copy of the input;
//!   `MPI_INT32_T`, `MPI_INT64_T`, `MPI_UINT64_T`, `MPI_DOUBLE`; `MPI_SUM`, `MPI_MIN`,
//!   `MPI_MAX`), in MPI's own order of combination;
//! - `bcast`: `MPI_Bcast`;
//! - `gather`: `MPI_Gather` of the lengths to the root, then `MPI_Gatherv`;
//! - `all_to_allv`: `MPI_Alltoall` of the lengths, then `MPI_Alltoallv` (into the
//!   caller's previous parts where they hold the new ones: `all_to_allv_into`);
//! - `exchange_sparse`: NBX (`coll/sparse.rs`), polled as the blocking calls are.
//!
//! They are MPI's blocking collectives, so they cost what MPI's cost: the `v` ones receive
//! straight into the parts they return, send from the caller's parts where they are
//! (`ffi::Layout`), and the others use kept buffers (no allocation once warm). Inside MPI's
//! call nothing of Ballast's runs: a rank that fails after its peers entered one leaves
//! them there until the job ends (as in MPI; before entering, an abort notice already
//! received is [`FabricError::Aborted`](crate::comm::error::FabricError::Aborted)), and a peer
//! blocked sending this rank a large message is served only if its header arrived before
//! the collective started: a collective starts with the blocking calls' housekeeping (abort
//! notices, unexpected messages, sends and receives in flight) when none ran for
//! [`KEEP_EVERY`].
//!
//! Stamps: `all_gatherv` starts with an `MPI_Allgather` of two `u64`s per rank, a stamp
//! (the collective's kind, as in `protocol::collective`, and its number on this
//! communicator, counting every collective) and a length, so that ranks that call
//! different collectives, or the same in another order, get
//! [`ProtocolError::CollectiveMismatch`](crate::comm::error::ProtocolError::CollectiveMismatch)
//! as on the engine paths, not a hang. The others carry no stamp unless
//! `collective_checks` is on (`BALLAST_COLLECTIVE_CHECKS`, default off): each is then the
//! MPI collective a program would call, at MPI's cost (issue 35 asks for MPI's cost on
//! this path), and ranks that call different ones are an erroneous MPI program (MPI may
//! fail, or wait for ever). With `collective_checks` on, each starts with that same
//! `MPI_Allgather` of its stamp (16 B per rank; the stamp alone is the barrier), taken
//! after its own allocations, so that a retryable error never repeats it.
//!
//! After a retryable error (out of memory: in the housekeeping at the start, or for the
//! parts once the lengths are known), the collective is kept and the next call of its
//! kind resumes it (the first call's lengths stand; another collective meanwhile is
//! [`CommError::CollectiveUnfinished`]), as the engine's collectives are.
//!
//! MPI counts and displacements are `int`s: a length or a total above `i32::MAX` bytes
//! (elements, for `all_reduce`) is [`CommError::CollectiveArgument`] naming the rank, the
//! call and the size. The lengths travel first as `u64`s, so each rank finds the sizes it
//! takes part in (its own, and the parts it receives) before any data moves. A rank that
//! fails that way returns the error; its peers then wait in the collective, as for any
//! rank that fails.

use super::ffi::{self, Layout, RecvInto};
use super::*;
use crate::comm::collective::native::NativeCollectives;
use crate::comm::collective::{Received, ReduceOp, ReduceSlice};
use crate::comm::error::{CommError, ProtocolError};
use crate::core::memory::{try_buffer, try_reserve_for, try_reuse_parts};
use crate::protocol::collective::CollectiveKind;

mod sparse;

/// The largest MPI count or displacement (`int`).
const INT_MAX: u64 = c_int::MAX as u64;
/// Bits of a stamp's collective number (the kind's code above them).
const SEQ_BITS: u32 = 56;
/// Words the kept buffer of the collectives keeps between calls (8 KiB: not counted in
/// the footprint; a larger buffer of lengths is freed after its call).
const KEPT_WORDS: usize = 1024;
/// A collective starts with the housekeeping of the blocking calls when none ran for this
/// many [`ffi::ticks`] (time-stamp counter cycles: about 1 ms; once per call would cost
/// about what a small `MPI_Allreduce` does).
pub const KEEP_EVERY: u64 = 2_000_000;

/// A collective stopped by a retryable error, resumed by the next call of its kind.
pub(super) struct CollUnfinished {
    op: &'static str,
    seq: u64,
    pending: Pending,
}

enum Pending {
    /// Stopped in the housekeeping at its start (not numbered yet).
    Entry,
    /// The lengths were exchanged (as `stage_lengths` gives them), the data not yet.
    Lengths(Vec<u64>),
    /// A sparse exchange under way.
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

/// Where the parts of a `v` collective are received: each into its own buffer (`bufs`,
/// laid out by `layout`), or, when their addresses are too far apart for `int`
/// displacements, into `flat` at `displs`, copied into `bufs` afterwards.
struct Parts {
    bufs: Vec<Vec<u8>>,
    layout: Option<Layout>,
    flat: Vec<u8>,
    displs: Vec<c_int>,
}

impl Parts {
    fn recv_into(&mut self) -> RecvInto<'_> {
        match &self.layout {
            Some(l) => RecvInto::Parts(&mut self.bufs, l),
            None => RecvInto::Flat(&mut self.flat, &self.displs),
        }
    }

    /// The parts, once received (the displacements' buffer goes back to `ints`).
    fn finish(mut self, counts: &[c_int], ints: &mut IntBufs) -> Vec<Vec<u8>> {
        if let Some(l) = self.layout {
            ints.give(l.into_displs());
            return self.bufs;
        }
        // `recv_parts` made each of `bufs` hold its part: the copies allocate nothing.
        for ((b, &c), &d) in self.bufs.iter_mut().zip(counts).zip(&self.displs) {
            let (c, d) = (c as usize, d as usize);
            b.extend_from_slice(&self.flat[d..d + c]);
        }
        ints.give(self.displs);
        self.bufs
    }
}

/// Kept `int` arrays of the `v` collectives (counts, displacements), reused across calls.
#[derive(Default)]
pub(super) struct IntBufs(Vec<Vec<c_int>>);

impl IntBufs {
    fn take(&mut self) -> Vec<c_int> {
        self.0.pop().unwrap_or_default()
    }
    fn give(&mut self, mut v: Vec<c_int>) {
        // At most 4 arrays of 4,096 entries are kept (64 KiB).
        if self.0.len() < 4 && v.capacity() <= 4096 {
            v.clear();
            self.0.push(v);
        }
    }
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

    /// The counts (`int`s) of parts of `lens` bytes by rank and their total; `whose(r)`
    /// names part `r` in the error when one, or the total, is above `i32::MAX`.
    fn fit_ints(
        &mut self,
        op: &'static str,
        lens: &[u64],
        whose: impl Fn(usize) -> String,
    ) -> Result<(Vec<c_int>, usize)> {
        let mut counts = self.coll_ints.take();
        try_reserve_for(&mut counts, lens.len(), || format!("{op}: {} counts", lens.len()))?;
        let mut total = 0u64;
        for (r, &len) in lens.iter().enumerate() {
            if len > INT_MAX {
                return Err(self.too_big(op, format!("{} of {len} bytes", whose(r)), "count"));
            }
            counts.push(len as c_int);
            total += len;
            if total > INT_MAX {
                return Err(self.too_big(
                    op,
                    format!("a total of {total} bytes or more (the parts up to rank {r})"),
                    "displacement",
                ));
            }
        }
        Ok((counts, total as usize))
    }

    /// Displacements of parts laid end to end.
    fn prefix(op: &'static str, counts: &[c_int], mut d: Vec<c_int>) -> Result<Vec<c_int>> {
        d.clear();
        try_reserve_for(&mut d, counts.len(), || {
            format!("{op}: {} displacements", counts.len())
        })?;
        let mut at = 0;
        for &c in counts {
            d.push(at);
            at += c;
        }
        Ok(d)
    }

    /// The buffers to receive parts of `counts` bytes (total `total`) into: `bufs`' own
    /// (emptied) where their capacity holds the part, so that a caller that passes the
    /// previous call's parts again receives without allocating; new ones for the others.
    fn recv_parts(
        &mut self,
        op: &'static str,
        counts: &[c_int],
        total: usize,
        mut bufs: Vec<Vec<u8>>,
    ) -> Result<Parts> {
        try_reuse_parts(&mut bufs, counts.iter().map(|&c| c as usize), op)?;
        if let Some(layout) = Layout::of_spare(&bufs, counts, self.coll_ints.take()) {
            return Ok(Parts {
                bufs,
                layout: Some(layout),
                flat: Vec::new(),
                displs: Vec::new(),
            });
        }
        let mut flat = try_buffer(total, || format!("{op}: the parts received, {total} bytes"))?;
        flat.resize(total, 0);
        Ok(Parts {
            bufs,
            layout: None,
            flat,
            displs: Self::prefix(op, counts, self.coll_ints.take())?,
        })
    }

    /// Where call `op` starts: the state of its unfinished call to resume, or `None` for a
    /// new one, after the housekeeping when due ([`KEEP_EVERY`]). Errors:
    /// [`FabricError::Aborted`] when the world failed, [`CommError::CollectiveUnfinished`]
    /// when another collective is unfinished, the housekeeping's (kept for the next call
    /// of `op` when retryable).
    #[inline(always)]
    fn coll_begin(&mut self, op: &'static str) -> Result<Option<Pending>> {
        if self.coll_ready() {
            return Ok(None);
        }
        self.coll_begin_slow(op)
    }

    /// The common start of a collective, inline: nothing to resume, no abort, no
    /// housekeeping due; then [`MpiNative::coll_begin`] has nothing to do. A call that
    /// resumes nothing (barrier, all_reduce, bcast) checks this first, so that its fast
    /// path does not move a `Result<Option<Pending>>` through the stack.
    #[inline(always)]
    fn coll_ready(&self) -> bool {
        self.coll_unfinished.is_none()
            && !self.abort.is_set()
            && ffi::ticks().wrapping_sub(self.coll_kept) < KEEP_EVERY
    }

    /// [`MpiNative::coll_begin`] when something is to resume, the world aborted or the
    /// housekeeping is due.
    #[inline(never)]
    fn coll_begin_slow(&mut self, op: &'static str) -> Result<Option<Pending>> {
        if self.abort.is_set() {
            return Err(Error::Fabric(FabricError::Aborted));
        }
        let forced = match self.coll_unfinished.take() {
            None => false,
            Some(u) if u.op == op => match u.pending {
                Pending::Entry => true,
                p => return Ok(Some(p)),
            },
            Some(u) => {
                let e = CommError::CollectiveUnfinished {
                    rank: self.rank,
                    op,
                    unfinished: u.op,
                    seq: u.seq,
                };
                self.coll_unfinished = Some(u);
                return Err(e.into());
            }
        };
        let now = ffi::ticks();
        if forced || now.wrapping_sub(self.coll_kept) >= KEEP_EVERY {
            self.coll_kept = now;
            if let Err(e) = self.poll(true) {
                return Err(self.coll_stop(op, Pending::Entry, e));
            }
        }
        Ok(None)
    }

    /// Call `op` stopped with error `e`: kept for the next call of `op` when `e` is
    /// retryable. Returns `e`.
    fn coll_stop(&mut self, op: &'static str, pending: Pending, e: Error) -> Error {
        if retryable(&e) {
            let seq = match pending {
                Pending::Entry => self.coll_seq + 1,
                _ => self.coll_seq,
            };
            self.coll_unfinished = Some(Box::new(CollUnfinished { op, seq, pending }));
        } else if matches!(pending, Pending::Sparse(_)) {
            self.coll_abandoned = true;
        }
        e
    }

    /// An MPI collective's outcome: on an error, the collectives' communicator is left
    /// alone from then on (never freed).
    fn mpi_done(&mut self, r: Result<()>) -> Result<()> {
        if r.is_err() {
            self.coll_abandoned = true;
        }
        r
    }

    /// The stamped start of `kind` (see the module docs): every rank's length, by rank,
    /// when `lens`. Errors: [`ProtocolError::CollectiveMismatch`] naming the first rank
    /// whose stamp differs; MPI's.
    fn stamped_lengths(&mut self, kind: CollectiveKind, len: usize, lens: bool) -> Result<Vec<u64>> {
        let n = self.world;
        let seq = self.coll_seq + 1;
        let stamp = u64::from(kind.code()) << SEQ_BITS | (seq & ((1 << SEQ_BITS) - 1));
        self.coll_words.clear();
        try_reserve_for(&mut self.coll_words, 2 + 2 * n, || {
            format!("{}: {n} stamps", kind.name())
        })?;
        self.coll_words.extend_from_slice(&[stamp, len as u64]);
        self.coll_words.resize(2 + 2 * n, 0);
        let (send, recv) = self.coll_words.split_at_mut(2);
        let r = ffi::allgather_u64(&self.coll, send, recv);
        self.mpi_done(r)?;
        self.coll_seq = seq;
        let all = &self.coll_words[2..];
        if let Some((peer, s)) = all
            .chunks_exact(2)
            .map(|p| p[0])
            .enumerate()
            .find(|&(_, s)| s != stamp)
        {
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
        if !lens {
            return Ok(Vec::new());
        }
        let mut lens = words(n, kind.name())?;
        for (l, p) in lens.iter_mut().zip(all.chunks_exact(2)) {
            *l = p[1];
        }
        Ok(lens)
    }

    /// Takes the number of a collective without a stamp of its own, right before its MPI
    /// call (nothing fallible but MPI's call comes after, and an MPI error abandons the
    /// collectives): with `collective_checks` on, by the stamped start of `kind` (true);
    /// off, by counting it (false).
    pub(super) fn take_number(&mut self, kind: CollectiveKind) -> Result<bool> {
        if !self.cfg.collective_checks {
            self.coll_seq += 1;
            return Ok(false);
        }
        self.stamped_lengths(kind, 0, false)?;
        Ok(true)
    }

    /// `all_gatherv`'s data, once the lengths `lens` are known.
    fn gatherv_data(&mut self, lens: Vec<u64>, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        const OP: &str = "all_gatherv";
        let me = self.rank;
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
        let (counts, total) = self.fit_ints(OP, &lens, whose)?;
        let mut parts = match self.recv_parts(OP, &counts, total, Vec::new()) {
            Ok(p) => p,
            Err(e) => return Err(self.coll_stop(OP, Pending::Lengths(lens), e)),
        };
        let r = ffi::allgatherv(&self.coll, data, parts.recv_into(), &counts);
        self.mpi_done(r)?;
        let out = parts.finish(&counts, &mut self.coll_ints);
        self.coll_ints.give(counts);
        Ok(out)
    }
}

impl NativeCollectives for MpiNative {
    fn barrier(&mut self) -> Result<()> {
        if !self.coll_ready() {
            self.coll_begin_slow("barrier")?;
        }
        if self.take_number(CollectiveKind::Barrier)? {
            return Ok(());
        }
        let r = ffi::barrier(&self.coll);
        self.mpi_done(r)
    }

    fn all_gatherv(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let lens = match self.coll_begin("all_gatherv")? {
            Some(Pending::Lengths(l)) => l,
            _ => self.stamped_lengths(CollectiveKind::AllGatherv, data.len(), true)?,
        };
        self.gatherv_data(lens, data)
    }

    fn all_reduce(&mut self, data: ReduceSlice<'_>, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        if !self.coll_ready() {
            self.coll_begin_slow(OP)?;
        }
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
        self.take_number(CollectiveKind::AllReduce)?;
        let r = ffi::allreduce(&self.coll, data, op);
        self.mpi_done(r)?;
        Ok(())
    }

    fn bcast(&mut self, root: usize, buf: &mut [u8]) -> Result<()> {
        const OP: &str = "bcast";
        if !self.coll_ready() {
            self.coll_begin_slow(OP)?;
        }
        let len = buf.len();
        if len as u64 > INT_MAX {
            return Err(self.too_big(OP, format!("a buffer of {len} bytes"), "count"));
        }
        self.take_number(CollectiveKind::Bcast)?;
        let r = ffi::bcast(&self.coll, buf, root);
        self.mpi_done(r)?;
        Ok(())
    }

    fn gather(&mut self, root: usize, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        const OP: &str = "gather";
        let me = self.rank;
        // The root's lengths by rank; elsewhere this rank's.
        let lens = match self.coll_begin(OP)? {
            Some(Pending::Lengths(l)) => l,
            _ => {
                let mut lens = words(if me == root { self.world } else { 0 }, OP)?;
                self.take_number(CollectiveKind::Gather)?;
                let r = ffi::gather_u64(&self.coll, data.len() as u64, &mut lens, root);
                self.mpi_done(r)?;
                if me != root {
                    lens = vec![data.len() as u64];
                }
                lens
            }
        };
        let first = if me == root { lens[me] } else { lens[0] };
        if data.len() as u64 != first {
            return Err(self.not_as_first(OP, format!("a part of {} bytes", data.len()), first));
        }
        if first > INT_MAX {
            return Err(self.too_big(OP, format!("this rank's part of {first} bytes"), "count"));
        }
        if me != root {
            let r = ffi::gatherv(&self.coll, data, None, root);
            self.mpi_done(r)?;
            return Ok(None);
        }
        let (counts, total) = self.fit_ints(OP, &lens, |r| format!("rank {r}'s part"))?;
        let mut parts = match self.recv_parts(OP, &counts, total, Vec::new()) {
            Ok(p) => p,
            Err(e) => return Err(self.coll_stop(OP, Pending::Lengths(lens), e)),
        };
        let r = ffi::gatherv(&self.coll, data, Some((parts.recv_into(), &counts)), root);
        self.mpi_done(r)?;
        let out = parts.finish(&counts, &mut self.coll_ints);
        self.coll_ints.give(counts);
        Ok(Some(out))
    }

    fn all_to_allv_into(&mut self, parts: &[&[u8]], out: &mut Vec<Vec<u8>>) -> Result<()> {
        const OP: &str = "all_to_allv";
        let n = self.world;
        // The lengths sent (by destination), then received (by source).
        let lens = match self.coll_begin(OP)? {
            Some(Pending::Lengths(l)) => l,
            _ => {
                let mut lens = std::mem::take(&mut self.coll_words);
                lens.clear();
                try_reserve_for(&mut lens, 2 * n, || format!("{OP}: {n} lengths"))?;
                lens.extend(parts.iter().map(|p| p.len() as u64));
                lens.resize(2 * n, 0);
                self.take_number(CollectiveKind::AllToAllv)?;
                let (send, recv) = lens.split_at_mut(n);
                let r = ffi::alltoall_u64(&self.coll, send, recv);
                self.mpi_done(r)?;
                // The lean path: `out`, kept from the previous call, holds every part.
                if n <= KEPT_WORDS {
                    let got = &lens[n..];
                    if let Some(r) = ffi::alltoallv_kept(&self.coll, parts, got, out, &mut self.coll_lean) {
                        self.mpi_done(r)?;
                        if lens.capacity() <= KEPT_WORDS {
                            self.coll_words = lens;
                        }
                        return Ok(());
                    }
                }
                lens
            }
        };
        let (sent, got) = lens.split_at(n);
        if let Some((d, p)) = parts.iter().enumerate().find(|(d, p)| p.len() as u64 != sent[*d]) {
            return Err(self.not_as_first(
                OP,
                format!("the part of {} bytes for rank {d}", p.len()),
                sent[d],
            ));
        }
        let (scounts, stotal) = self.fit_ints(OP, sent, |d| format!("the part for rank {d}"))?;
        let (rcounts, rtotal) = self.fit_ints(OP, got, |s| format!("rank {s}'s part"))?;
        // The caller's parts where they are, else a copy of them end to end.
        let mut flat = Vec::new();
        let send = match Layout::of_parts(parts, &scounts, self.coll_ints.take()) {
            Some(l) => l,
            None => {
                flat = match try_buffer(stotal, || format!("{OP}: the parts sent, {stotal} bytes")) {
                    Ok(f) => f,
                    Err(e) => return Err(self.coll_stop(OP, Pending::Lengths(lens), e.into())),
                };
                parts.iter().for_each(|p| flat.extend_from_slice(p));
                Layout::contiguous(&flat, Self::prefix(OP, &scounts, self.coll_ints.take())?)
            }
        };
        let mut into = match self.recv_parts(OP, &rcounts, rtotal, std::mem::take(out)) {
            Ok(p) => p,
            Err(e) => return Err(self.coll_stop(OP, Pending::Lengths(lens), e)),
        };
        let r = ffi::alltoallv(&self.coll, &send, &scounts, into.recv_into(), &rcounts);
        drop(flat);
        self.mpi_done(r)?;
        *out = into.finish(&rcounts, &mut self.coll_ints);
        for v in [send.into_displs(), scounts, rcounts] {
            self.coll_ints.give(v);
        }
        if lens.capacity() <= KEPT_WORDS {
            self.coll_words = lens;
        }
        Ok(())
    }

    fn exchange_sparse(&mut self, sends: &[(usize, &[u8])]) -> Result<Vec<Received>> {
        self.sparse_exchange(sends)
    }
}
