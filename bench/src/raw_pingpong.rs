//! A raw-verbs ping-pong (no Ballast engine, no fabric): one RC queue pair per side, set up
//! like perftest's `ib_send_lat` by default, with switches that move one setting at a time
//! toward what Ballast's fabric does (SRQ, one CQ for sends and receives, two SGEs, immediate
//! data, every send signalled, CQ and queue depths, a large registered pool, polling batch,
//! yielding when idle, ACK timeout). A diagnostic for the latency gap between Ballast and
//! perftest on soft-RoCE; driven by the `verbs_raw_pingpong` bench program (and
//! `verbs_pingpong --raw-inside`). Built on `ballast-ibv` directly; from the runtime it takes
//! only the device choice ([`verbs::device::open`]), the cycle counter ([`verbs::cycles`]),
//! the control channel's readiness check ([`verbs::control::readable`]) and its errors (the
//! layer's errors convert into them with the same texts).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use std::mem::MaybeUninit;

use ballast_ibv::{attr, attr::Remote, attr::Retry};
use ballast_ibv::{sys::ibv_wc, sys::ibv_wc_opcode, sys::ibv_wc_status};
use ballast_ibv::{Cq, Qp, QpCaps, SendWr, Sge, Slots, Srq};
use ballast_ibv::{QpKind, Receiving};
use ballast_runtime::fabric::FabricError;
use ballast_runtime::verbs::{self, device};
use ballast_runtime::VerbsConfig;
use ballast_runtime::{Error, Result};

/// The settings of one run. [`RawOptions::default`] is perftest's `ib_send_lat` on RC.
#[derive(Clone, Debug)]
pub struct RawOptions {
    /// Payload bytes per message.
    pub size: usize,
    /// Round trips.
    pub iters: usize,
    /// Receives go to a shared receive queue instead of the QP's own.
    pub srq: bool,
    /// The send gathers a 32-byte header and the payload (two SGEs) instead of one piece.
    pub two_sges: bool,
    /// `SEND_WITH_IMM` instead of `SEND`.
    pub imm: bool,
    /// Every `n`-th send is signalled (1 = all, as Ballast).
    pub signal_every: u32,
    /// One CQ for sends and receives (as Ballast) instead of one each.
    pub one_cq: bool,
    /// Entries per CQ.
    pub cq_entries: u32,
    /// Send queue depth.
    pub sq_depth: u32,
    /// Receives posted ahead (and the receive queue depth).
    pub rx_depth: u32,
    /// Inline sends (when they fit).
    pub inline: bool,
    /// Completions asked per `ibv_poll_cq`.
    pub poll_batch: usize,
    /// Bytes of the registered region the buffers are carved from (at least what is needed).
    pub pool_bytes: usize,
    /// Receive buffer bytes per slot.
    pub recv_slot: usize,
    /// `sched_yield` after an empty poll.
    pub yield_idle: bool,
    /// After 64 empty polls in a row, every empty poll also reads the clock and yields (what
    /// the runtime's blocking calls do while they wait: `comm.rs` `Backoff`).
    pub clock_idle: bool,
    /// Every this many polls (0 = never), also try a non-blocking `accept` on a TCP listener
    /// and a non-blocking `read` of an idle TCP stream (what Ballast's control channel
    /// costs: `control::BUSY_EVERY`).
    pub mesh_every: u64,
    /// What those reads are, bits: 1 = `accept`, 2 = `read`, 4 = poll(2) the listener and
    /// `accept` only when it is readable (what the control channel does since the fix).
    pub mesh_what: u8,
    /// The initiator also times each `ibv_post_send` (two more clock reads per round trip);
    /// [`run`] then returns those durations after the half round trips.
    pub time_post: bool,
    /// RC ACK timeout exponent.
    pub timeout: u8,
    /// The initiator waits for its send's completion before waiting for the reply.
    pub wait_send: bool,
    /// Each side writes the cycle counter into the payload's first 8 bytes just before its
    /// `ibv_post_send`, and on each receive prints nothing but keeps `now - stamp` (the
    /// one-way time from the sender's post to the receiver's poll that saw it); each side
    /// prints its median at the end (needs `size` >= 8 and one counter for both processes,
    /// as the TSC of one machine).
    pub one_way: bool,
    /// Each side spins this many microseconds (cycle counter) before each send.
    pub quiet_us: u64,
    /// After each empty poll, read this many cache lines of a private 1 MiB buffer (a
    /// heavier idle loop, as a runtime's progress call).
    pub idle_lines: usize,
    /// Before each send, read this many cache lines of a private 1 MiB buffer.
    pub pre_lines: usize,
}

impl Default for RawOptions {
    fn default() -> Self {
        RawOptions {
            size: 8,
            iters: 2000,
            srq: false,
            two_sges: false,
            imm: false,
            signal_every: 1,
            one_cq: false,
            cq_entries: 128,
            sq_depth: 128,
            rx_depth: 1,
            inline: true,
            poll_batch: 1,
            pool_bytes: 0,
            recv_slot: 4096,
            yield_idle: false,
            clock_idle: false,
            mesh_every: 0,
            mesh_what: 3,
            time_post: false,
            timeout: 14,
            wait_send: false,
            one_way: false,
            quiet_us: 0,
            idle_lines: 0,
            pre_lines: 0,
        }
    }
}

const HDR: usize = 32;

/// Posts receive `i` (slot `i` of the receive area at `recv_off` of `mem`) to the QP's own
/// receive queue or to `srq`.
fn post_recv<S: Receiving>(
    qp: &Qp<S>,
    srq: Option<&Srq>,
    mem: &Slots,
    o: &RawOptions,
    recv_off: usize,
    i: usize,
) -> Result<()> {
    let off = recv_off + i * o.recv_slot;
    match srq {
        Some(s) => s.post_recv(mem, off, o.recv_slot, i as u64),
        None => qp.post_recv(mem, off, o.recv_slot, i as u64),
    }
    .map_err(Error::from)
}

/// Runs one side of the ping-pong over `stream` (a TCP connection to the other side, used to
/// exchange QP numbers, PSNs and GIDs). `initiator` sends first and times each round trip;
/// returns the half round trips in seconds (empty on the other side), followed by the
/// duration of each `ibv_post_send` with [`RawOptions::time_post`].
pub fn run(sel: &VerbsConfig, stream: &mut TcpStream, initiator: bool, o: &RawOptions) -> Result<Vec<f64>> {
    let dev = device::open(sel)?;
    let slots = o.rx_depth as usize;
    // The send buffer (header + payload), then the receive slots, in one registered region.
    let recv_off = HDR + o.size + 64;
    let need = recv_off + slots * o.recv_slot;
    let mut mem = Slots::new(&dev.pd, 1, need.max(o.pool_bytes), "the raw ping-pong's buffers")?;
    let base = mem.addr(0);
    let lkey = mem.lkey();
    let scq = dev.ctx.create_cq(o.cq_entries)?;
    let rcq = if o.one_cq {
        scq.clone()
    } else {
        dev.ctx.create_cq(o.cq_entries)?
    };
    let srq = if o.srq {
        Some(Srq::create(&dev.pd, o.rx_depth)?)
    } else {
        None
    };
    let caps = QpCaps {
        max_send_wr: o.sq_depth,
        max_recv_wr: if o.srq { 0 } else { o.rx_depth },
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline: if o.inline { 64 } else { 0 },
    };
    let qp = Qp::create_rc(&dev.ctx, &dev.pd, &scq, &rcq, srq.as_ref(), caps)?;
    let max_inline = qp.max_inline();
    let qp = qp.init(&attr::init(dev.caps.port)).map_err(FabricError::from)?;
    for i in 0..slots {
        post_recv(&qp, srq.as_ref(), &mem, o, recv_off, i)?;
    }
    // Exchange qpn, psn, lid, gid.
    let qpn = qp.qpn();
    let psn: u32 = if initiator { 0x1234 } else { 0x4321 };
    let mut msg = [0u8; 26];
    msg[..4].copy_from_slice(&qpn.to_le_bytes());
    msg[4..8].copy_from_slice(&psn.to_le_bytes());
    msg[8..10].copy_from_slice(&dev.lid.to_le_bytes());
    msg[10..].copy_from_slice(&dev.gid);
    stream.write_all(&msg)?;
    let mut peer = [0u8; 26];
    stream.read_exact(&mut peer)?;
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&peer[10..]);
    let remote = Remote {
        qpn: u32::from_le_bytes(peer[..4].try_into().expect("4")),
        psn: u32::from_le_bytes(peer[4..8].try_into().expect("4")),
        lid: u16::from_le_bytes(peer[8..10].try_into().expect("2")),
        gid,
    };
    let qp = qp
        .rtr(&attr::rtr(&dev.local(), &remote, QpKind::Rc))
        .map_err(FabricError::from)?;
    let retry = Retry {
        timeout: o.timeout,
        ..Retry::FABRIC
    };
    let qp = qp.rts(&attr::rts(psn, retry)).map_err(FabricError::from)?;
    // Both sides ready before the first send.
    stream.write_all(&[1])?;
    stream.read_exact(&mut [0u8; 1])?;

    let send_addr = base;
    let mut sent: u64 = 0;
    let mut unacked_signalled = 0usize;
    let mut wcs: Vec<MaybeUninit<ibv_wc>> = (0..o.poll_batch.max(1)).map(|_| MaybeUninit::uninit()).collect();
    // Receive completions seen (also while waiting for send completions on a shared CQ).
    let mut recvs_ready = 0usize;
    let mut next_recv_slot = 0usize;
    // 1 MiB read by `pre_lines` and `idle_lines` (allocated only for them).
    let junk = if o.pre_lines > 0 || o.idle_lines > 0 {
        vec![1u64; 1 << 17]
    } else {
        Vec::new()
    };
    let post_send = |sent: &mut u64, unacked: &mut usize, mem: &mut Slots| -> Result<()> {
        let len = o.size as u32;
        let sges = if o.two_sges {
            [
                Sge {
                    addr: send_addr,
                    len: HDR as u32,
                    lkey,
                },
                Sge {
                    addr: send_addr + HDR as u64,
                    len,
                    lkey,
                },
            ]
        } else {
            [
                Sge {
                    addr: send_addr,
                    len,
                    lkey,
                },
                Sge {
                    addr: 0,
                    len: 0,
                    lkey,
                },
            ]
        };
        let total = if o.two_sges { HDR as u32 + len } else { len };
        read_lines(&junk, o.pre_lines, *sent as usize * 97);
        if o.quiet_us > 0 {
            verbs::cycles::spin_us(o.quiet_us);
        }
        if o.one_way && o.size >= 8 {
            // The send buffer (HDR + size bytes at the region's start) carries the stamp.
            let at = if o.two_sges { HDR } else { 0 };
            mem.bytes_mut()[at..at + 8].copy_from_slice(&verbs::cycles::now().to_ne_bytes());
        }
        let signaled = o.signal_every <= 1 || matches!(*sent % u64::from(o.signal_every), 0);
        if signaled {
            *unacked += 1;
        }
        let wr = SendWr {
            wr_id: *sent,
            sges,
            num_sge: if o.two_sges { 2 } else { 1 },
            imm: o.imm.then_some(1),
            signaled,
            inline: o.inline && total <= max_inline,
            remote_srqn: None,
        };
        qp.post_send(&wr)?;
        *sent += 1;
        Ok(())
    };
    let mut out = Vec::with_capacity(if initiator { o.iters } else { 0 });
    let (scq, rcq) = (&scq, &rcq);
    let mut idle = 0u32;
    let mut since = None;
    // A listener and a connected TCP stream of this process' own that never carry data.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    let (side, _) = listener.accept()?;
    listener.set_nonblocking(true)?;
    side.set_nonblocking(true)?;
    let mut polls = 0u64;
    let mut poll = |cq: &Cq, recvs: &mut usize, unacked: &mut usize| -> Result<()> {
        polls += 1;
        if o.mesh_every > 0 && polls % o.mesh_every == 1 {
            if o.mesh_what & 1 != 0 {
                std::hint::black_box(listener.accept().is_ok());
            }
            if o.mesh_what & 4 != 0 && verbs::control::readable(&listener) {
                std::hint::black_box(listener.accept().is_ok());
            }
            if o.mesh_what & 2 != 0 {
                let mut b = [0u8; 64];
                std::hint::black_box((&side).read(&mut b).is_ok());
            }
        }
        let (rv, sd) = poll_cq(cq, &mut wcs, o.yield_idle)?;
        if rv + sd == 0 {
            read_lines(&junk, o.idle_lines, polls as usize);
        }
        if rv + sd > 0 {
            idle = 0;
            since = None;
        } else if o.clock_idle {
            idle += 1;
            if idle >= 64 {
                let t = *since.get_or_insert_with(Instant::now);
                std::hint::black_box(t.elapsed());
                std::thread::yield_now();
            }
        }
        *recvs += rv;
        *unacked -= sd.min(*unacked);
        Ok(())
    };
    let mut posts = Vec::new();
    let mut one_way: Vec<u64> = Vec::with_capacity(if o.one_way { o.iters } else { 0 });
    for _ in 0..o.iters {
        let t0 = Instant::now();
        if initiator {
            post_send(&mut sent, &mut unacked_signalled, &mut mem)?;
            if o.time_post {
                posts.push(t0.elapsed().as_secs_f64());
            }
            while o.wait_send && unacked_signalled > 0 {
                poll(scq, &mut recvs_ready, &mut unacked_signalled)?;
            }
        }
        while recvs_ready == 0 {
            poll(rcq, &mut recvs_ready, &mut unacked_signalled)?;
        }
        recvs_ready -= 1;
        if o.one_way && o.size >= 8 {
            // The slot's receive completed (the CQ said so), so the device wrote it and does
            // not touch it until it is reposted below.
            let at = recv_off + next_recv_slot * o.recv_slot + if o.two_sges { HDR } else { 0 };
            let stamp = u64::from_ne_bytes(mem.bytes()[at..at + 8].try_into().expect("8 bytes"));
            one_way.push(verbs::cycles::now().wrapping_sub(stamp));
        }
        // The consumed receive is reposted at once, as perftest does.
        post_recv(&qp, srq.as_ref(), &mem, o, recv_off, next_recv_slot)?;
        next_recv_slot = (next_recv_slot + 1) % slots.max(1);
        if initiator {
            out.push(t0.elapsed().as_secs_f64() / 2.0);
        } else {
            post_send(&mut sent, &mut unacked_signalled, &mut mem)?;
        }
        if !o.one_cq && unacked_signalled > 0 {
            // Separate send CQ: collect what is there without waiting.
            poll(scq, &mut recvs_ready, &mut unacked_signalled)?;
        }
        // Keep at most half the send queue outstanding.
        while unacked_signalled as u32 * 2 >= o.sq_depth {
            poll(scq, &mut recvs_ready, &mut unacked_signalled)?;
        }
    }
    while unacked_signalled > 0 {
        poll(scq, &mut recvs_ready, &mut unacked_signalled)?;
    }
    out.extend(posts);
    if !one_way.is_empty() {
        one_way.sort_unstable();
        let (med, p10) = (one_way[one_way.len() / 2], one_way[one_way.len() / 10]);
        let us = verbs::cycles::per_us();
        println!(
            "raw {}: one-way post -> poll seen, median {:.2} us, p10 {:.2} us",
            if initiator { "initiator" } else { "responder" },
            med as f64 / us,
            p10 as f64 / us
        );
    }
    stream.write_all(&[2])?;
    stream.read_exact(&mut [0u8; 1])?;
    Ok(out)
}

/// Reads `lines` cache lines (8 words apart) of `junk`, starting at line `at` (wrapping):
/// memory traffic for the `pre_lines`/`idle_lines` diagnostics.
fn read_lines(junk: &[u64], lines: usize, at: usize) {
    if lines == 0 || junk.is_empty() {
        return;
    }
    let mut acc = 0u64;
    for i in 0..lines {
        acc = acc.wrapping_add(junk[((at + i) * 8) % junk.len()]);
    }
    std::hint::black_box(acc);
}

/// One `ibv_poll_cq` of up to `wcs.len()` entries: (receive completions, send completions).
fn poll_cq(cq: &Cq, wcs: &mut [MaybeUninit<ibv_wc>], yield_idle: bool) -> Result<(usize, usize)> {
    let done = cq.poll(wcs)?;
    let (mut rv, mut sd) = (0, 0);
    for wc in done {
        let recv = wc.opcode & ibv_wc_opcode::IBV_WC_RECV != 0;
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            return Err(FabricError::WorkCompletion {
                op: if recv { "receive" } else { "send" },
                status: wc.status,
                status_text: ballast_ibv::status_text(wc.status).into(),
                rank: None,
                peer: None,
            }
            .into());
        }
        if recv {
            rv += 1;
        } else {
            sd += 1;
        }
    }
    if done.is_empty() && yield_idle {
        std::thread::yield_now();
    }
    Ok((rv, sd))
}
