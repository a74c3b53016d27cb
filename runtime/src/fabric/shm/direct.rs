//! The shm fabric's bookkeeping of direct messages (`DirectPath`, driven by `fabric.rs`):
//! a message above the threshold is not chunked through the rings; its sender puts a
//! descriptor (address, length, tag, id) in the receiver's control ring, and the receiver
//! copies the bytes out of the sender's memory with one `process_vm_readv` (cross-memory
//! attach, CMA: [`super::ffi::read_remote`] into the waiting receive's buffer, or
//! [`super::ffi::read_remote_vec`]), then answers "done" (or the error) in the
//! sender's control ring. The sender's buffer must stay as it is until then: a blocking
//! send waits for the answer (one copy in all), an `isend`'s owned copy is kept until it.
//!
//! Order: the receiver matches messages in the order each sender sent them, but a
//! descriptor travels in the control ring and packets in the data ring. So, per
//! destination, while a direct message is not read yet, the sender holds back whatever
//! follows it (packets, later descriptors) and pushes it, in order, once the answer came
//! ([`Direct::release`]); and the receiver, before it reads a descriptor, takes every
//! packet already in its data ring (all of the sender's earlier packets are there).
//!
//! Whether CMA is used is decided at start ([`Direct::setup`]): `BALLAST_SHM_CMA=off`, a
//! system where `process_vm_readv` fails even on this process (seccomp), or Yama's
//! `ptrace_scope` 3 turn it off, with a note; the engine then chunks every message through
//! the rings. Each rank first allows any process to read it (`prctl(PR_SET_PTRACER_ANY)`,
//! as Open MPI's vader does), which Yama's `ptrace_scope` 1 needs.

use std::collections::VecDeque;

use super::ring::Cell;
use crate::core::intmap::IntMap;

/// Control-ring cell: a direct message's descriptor (`tag` its tag, `total` its length,
/// `offset` its address in the sender, `more` the engine's flag).
pub(crate) const KIND_DIRECT: u8 = 3;
/// Control-ring cell: the receiver read the sender's one descriptor in flight to it (`tag`:
/// 0, or the `errno` of its failed read). No id is needed: a sender has at most one
/// descriptor in flight per receiver (the others are held), and a receiver answers its
/// senders' descriptors in their order.
pub(crate) const KIND_DIRECT_DONE: u8 = 4;
/// Messages above this many bytes (and above one buffer) go direct when CMA is on: Open
/// MPI's vader switches to its single copy at 32 KiB (`btl_vader_max_send_size` default);
/// docs/BENCHMARKS.md has the shm measurements.
pub(crate) const CMA_THRESHOLD: usize = 32 * 1024;

/// A direct message sent and not read yet.
pub(crate) enum Out {
    /// A blocking send's (the caller's buffer): the answer, once it came.
    Borrowed { done: Option<u32> },
    /// An `isend`'s owned copy, freed at the answer, which completes `wr_id`.
    Owned { _data: Vec<u8>, wr_id: u64 },
}

/// What waits behind an unread direct message to the same destination.
pub(crate) enum Held {
    /// A data packet (its cell and a copy of its payload).
    Packet(Cell, Vec<u8>),
    /// A later direct message's descriptor, and its id.
    Descriptor(Cell, u32),
}

/// The direct messages of one rank.
#[derive(Default)]
pub(crate) struct Direct {
    /// `Some(threshold)` when large messages go by CMA.
    pub threshold: Option<usize>,
    /// Why CMA is off, for the communicator's notes.
    pub note: Option<String>,
    next: u32,
    /// By id: its destination and what it is.
    out: IntMap<u32, (usize, Out)>,
    /// Per destination: descriptors not answered yet (pushed or held); no entry at 0, so
    /// that the send path's check is one `is_empty` while no direct message is out.
    unread: IntMap<usize, usize>,
    /// Per destination: the id of the one descriptor pushed and not answered.
    pushed: IntMap<usize, u32>,
    /// Per destination: what waits, in order.
    held: IntMap<usize, VecDeque<Held>>,
}

impl Direct {
    /// CMA on (threshold `max(buffer_size, CMA_THRESHOLD)`) unless `cma` is false or the
    /// system does not allow it; the note says which.
    pub(crate) fn setup(cma: bool, buffer_size: usize) -> Direct {
        let off = |why: String| Direct {
            note: Some(format!(
                "shm: large messages go in chunks through the rings, not by CMA (process_vm_readv): {why}"
            )),
            ..Direct::default()
        };
        if !cma {
            return off("BALLAST_SHM_CMA=off".into());
        }
        let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok();
        match scope.as_deref().map(str::trim) {
            Some("3") => {
                return off("Yama's kernel.yama.ptrace_scope is 3 (no process may read another)".into())
            }
            // Scope 2: only with CAP_SYS_PTRACE (the probe below, on this process, would
            // pass without it).
            Some("2") if !has_cap_sys_ptrace() => {
                return off(
                    "Yama's kernel.yama.ptrace_scope is 2 and this process lacks CAP_SYS_PTRACE".into(),
                )
            }
            _ => {}
        }
        // Yama's scope 1 lets only a process' ancestors read it, unless it names a reader.
        let _ = rustix::process::set_ptracer(rustix::process::PTracer::Any);
        let probe = [0x5au8; 64];
        match super::ffi::read_remote_vec(std::process::id() as i32, probe.as_ptr() as u64, probe.len()) {
            Ok(v) if v == probe => {}
            Ok(_) => return off("process_vm_readv on this process read other bytes".into()),
            Err(e) => return off(format!("process_vm_readv on this process failed ({e})")),
        }
        Direct {
            threshold: Some(buffer_size.max(CMA_THRESHOLD)),
            ..Direct::default()
        }
    }

    /// A new direct message to `dest`: its id.
    pub(crate) fn begin(&mut self, dest: usize, out: Out) -> u32 {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.out.insert(id, (dest, out));
        *self.unread.entry(dest).or_default() += 1;
        id
    }

    /// True when what goes to `dest` must wait (a direct message to it is not read yet).
    pub(crate) fn blocked(&self, dest: usize) -> bool {
        !self.unread.is_empty() && self.unread.contains_key(&dest)
    }

    /// Records that the descriptor of message `id` went to `dest`.
    pub(crate) fn pushed(&mut self, dest: usize, id: u32) {
        self.pushed.insert(dest, id);
    }

    /// Holds `item` for `dest` until the answers before it came.
    pub(crate) fn hold(&mut self, dest: usize, item: Held) {
        self.held.entry(dest).or_default().push_back(item);
    }

    /// The answer from `src` to the descriptor in flight to it: the `wr_id` to complete (an
    /// owned message's); a blocking send's answer is kept for [`Direct::take_done`]. `None`
    /// when no descriptor is in flight to `src` (a broken peer).
    pub(crate) fn answered(&mut self, src: usize, status: u32) -> Option<Option<u64>> {
        let id = self.pushed.remove(&src)?;
        if let Some(n) = self.unread.get_mut(&src) {
            *n -= 1;
            if *n == 0 {
                self.unread.remove(&src);
            }
        }
        match self.out.get_mut(&id) {
            Some((_, Out::Borrowed { done })) => {
                *done = Some(status);
                Some(None)
            }
            // An owned message's answer completes it; a blocking send that stopped waiting
            // (abandoned) has nothing left but the release of what it held.
            _ => match self.out.remove(&id) {
                Some((_, Out::Owned { wr_id, .. })) => Some(Some(wr_id)),
                _ => Some(None),
            },
        }
    }

    /// True when blocking send `id`'s answer came (and is not taken yet).
    pub(crate) fn is_answered(&self, id: u32) -> bool {
        matches!(self.out.get(&id), Some((_, Out::Borrowed { done: Some(_) })))
    }

    /// A blocking send's answer, once it came (the entry is then gone).
    pub(crate) fn take_done(&mut self, id: u32) -> Option<u32> {
        match self.out.get(&id) {
            Some((_, Out::Borrowed { done: Some(s) })) => {
                let s = *s;
                self.out.remove(&id);
                Some(s)
            }
            _ => None,
        }
    }

    /// Forgets a blocking send that stopped waiting (its answer, when it comes, still
    /// releases what was held behind it).
    pub(crate) fn abandon(&mut self, id: u32) {
        self.out.remove(&id);
    }

    /// What may go to `dest` now that the answer to its one pushed descriptor came: the
    /// held items up to and with the next descriptor (whose message is then the unread
    /// one), or all of them.
    pub(crate) fn release(&mut self, dest: usize) -> Vec<Held> {
        let mut go = Vec::new();
        let Some(q) = self.held.get_mut(&dest) else {
            return go;
        };
        while let Some(item) = q.pop_front() {
            let last = matches!(item, Held::Descriptor(..));
            go.push(item);
            if last {
                break;
            }
        }
        go
    }
}

/// Whether this process has `CAP_SYS_PTRACE` (bit 19) in its effective set
/// (`/proc/self/status`, `CapEff`); false when it cannot be read.
fn has_cap_sys_ptrace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 19) != 0)
}
