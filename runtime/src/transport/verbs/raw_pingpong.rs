//! A raw-verbs ping-pong (no Ballast engine, no fabric): one RC queue pair per side, set up
//! like perftest's `ib_send_lat` by default, with switches that move one setting at a time
//! toward what Ballast's fabric does (SRQ, one CQ for sends and receives, two SGEs, immediate
//! data, every send signalled, CQ and queue depths, a large registered pool, polling batch,
//! yielding when idle, ACK timeout). A diagnostic for the latency gap between Ballast and
//! perftest on soft-RoCE; driven by the `verbs_raw_pingpong` bench program.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use rdma_sys::*;

use super::device::{self, Context};
use crate::core::config::VerbsConfig;
use crate::core::error::{Error, Result};
use crate::core::memory::AlignedRegion;

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

struct Res {
    qp: *mut ibv_qp,
    srq: *mut ibv_srq,
    scq: *mut ibv_cq,
    rcq: *mut ibv_cq,
    mr: *mut ibv_mr,
    _mem: AlignedRegion,
    dev: Context,
}

impl Drop for Res {
    fn drop(&mut self) {
        // SAFETY: each handle was created in `setup` from `dev` and is destroyed once, users
        // first (QP, SRQ, CQs, MR), before `dev` (a later field) closes the context.
        unsafe {
            if !self.qp.is_null() {
                ibv_destroy_qp(self.qp);
            }
            if !self.srq.is_null() {
                ibv_destroy_srq(self.srq);
            }
            if self.rcq != self.scq && !self.rcq.is_null() {
                ibv_destroy_cq(self.rcq);
            }
            if !self.scq.is_null() {
                ibv_destroy_cq(self.scq);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
        }
    }
}

fn fail(what: &str) -> Error {
    Error::Verbs(format!(
        "raw ping-pong: {what}: {}",
        std::io::Error::last_os_error()
    ))
}

fn rc_fail(what: &str, rc: i32) -> Error {
    Error::Verbs(format!(
        "raw ping-pong: {what}: {}",
        std::io::Error::from_raw_os_error(rc)
    ))
}

const HDR: usize = 32;

/// Runs one side of the ping-pong over `stream` (a TCP connection to the other side, used to
/// exchange QP numbers, PSNs and GIDs). `initiator` sends first and times each round trip;
/// returns the half round trips in seconds (empty on the other side), followed by the
/// duration of each `ibv_post_send` with [`RawOptions::time_post`].
pub fn run(sel: &VerbsConfig, stream: &mut TcpStream, initiator: bool, o: &RawOptions) -> Result<Vec<f64>> {
    let dev = device::open(sel)?;
    let slots = o.rx_depth as usize;
    let need = HDR + o.size + 64 + slots * o.recv_slot;
    let mem = AlignedRegion::new(need.max(o.pool_bytes), 1, "the raw ping-pong's buffers")?;
    let mut r = Res {
        qp: std::ptr::null_mut(),
        srq: std::ptr::null_mut(),
        scq: std::ptr::null_mut(),
        rcq: std::ptr::null_mut(),
        mr: std::ptr::null_mut(),
        _mem: mem,
        dev,
    };
    let base = r._mem.as_slice().as_ptr() as u64;
    // SAFETY: the region is owned by `r` and outlives the MR (dropped before it in Res::drop's
    // order: the MR is deregistered explicitly before the fields are dropped).
    r.mr = unsafe {
        ibv_reg_mr(
            r.dev.pd,
            base as *mut _,
            r._mem.as_slice().len(),
            ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32,
        )
    };
    if r.mr.is_null() {
        return Err(fail("ibv_reg_mr"));
    }
    // SAFETY: mr is valid until drop.
    let lkey = unsafe { (*r.mr).lkey };
    // SAFETY: ctx is open; no completion channel; destroyed in Res::drop.
    r.scq = unsafe {
        ibv_create_cq(
            r.dev.ctx,
            o.cq_entries as i32,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if r.scq.is_null() {
        return Err(fail("ibv_create_cq"));
    }
    r.rcq = if o.one_cq {
        r.scq
    } else {
        // SAFETY: as above.
        let c = unsafe {
            ibv_create_cq(
                r.dev.ctx,
                o.cq_entries as i32,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if c.is_null() {
            return Err(fail("ibv_create_cq"));
        }
        c
    };
    if o.srq {
        // SAFETY: plain data; zero is valid.
        let mut sa: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        sa.attr.max_wr = o.rx_depth;
        sa.attr.max_sge = 1;
        // SAFETY: pd is live; destroyed in Res::drop.
        r.srq = unsafe { ibv_create_srq(r.dev.pd, &mut sa) };
        if r.srq.is_null() {
            return Err(fail("ibv_create_srq"));
        }
    }
    // SAFETY: plain data; zero is valid for the fields not set.
    let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = r.scq;
    init.recv_cq = r.rcq;
    init.srq = r.srq;
    init.qp_type = ibv_qp_type::IBV_QPT_RC;
    init.cap = ibv_qp_cap {
        max_send_wr: o.sq_depth,
        max_recv_wr: if o.srq { 0 } else { o.rx_depth },
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: if o.inline { 64 } else { 0 },
    };
    // SAFETY: pd and CQs are live; init is initialised.
    r.qp = unsafe { ibv_create_qp(r.dev.pd, &mut init) };
    if r.qp.is_null() {
        return Err(fail("ibv_create_qp"));
    }
    let max_inline = init.cap.max_inline_data;
    let recv_base = base + (HDR + o.size + 64) as u64;
    let post_recv = |i: usize| -> Result<()> {
        let mut sge = ibv_sge {
            addr: recv_base + (i * o.recv_slot) as u64,
            length: o.recv_slot as u32,
            lkey,
        };
        let mut wr = ibv_recv_wr {
            wr_id: i as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: wr/sge live across the call; the buffer is in the registered region.
        let rc = unsafe {
            if o.srq {
                ibv_post_srq_recv(r.srq, &mut wr, &mut bad)
            } else {
                ibv_post_recv(r.qp, &mut wr, &mut bad)
            }
        };
        if rc != 0 {
            return Err(rc_fail("ibv_post_recv", rc));
        }
        Ok(())
    };
    use ibv_qp_attr_mask as M;
    let modify = |a: &mut ibv_qp_attr, mask: u32, what: &str| -> Result<()> {
        // SAFETY: qp is live; `a` is initialised for the fields in mask.
        let rc = unsafe { ibv_modify_qp(r.qp, a, mask as i32) };
        if rc != 0 {
            return Err(rc_fail(what, rc));
        }
        Ok(())
    };
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_INIT;
    a.port_num = r.dev.caps.port;
    a.qp_access_flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    modify(
        &mut a,
        M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_ACCESS_FLAGS.0,
        "INIT",
    )?;
    for i in 0..slots {
        post_recv(i)?;
    }
    // Exchange qpn, psn, lid, gid.
    // SAFETY: qp is live.
    let qpn = unsafe { (*r.qp).qp_num };
    let psn: u32 = if initiator { 0x1234 } else { 0x4321 };
    let mut msg = [0u8; 26];
    msg[..4].copy_from_slice(&qpn.to_le_bytes());
    msg[4..8].copy_from_slice(&psn.to_le_bytes());
    msg[8..10].copy_from_slice(&r.dev.lid.to_le_bytes());
    msg[10..].copy_from_slice(&r.dev.gid);
    stream.write_all(&msg)?;
    let mut peer = [0u8; 26];
    stream.read_exact(&mut peer)?;
    let rqpn = u32::from_le_bytes(peer[..4].try_into().expect("4"));
    let rpsn = u32::from_le_bytes(peer[4..8].try_into().expect("4"));
    let rlid = u16::from_le_bytes(peer[8..10].try_into().expect("2"));
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_RTR;
    a.path_mtu = r.dev.mtu;
    a.dest_qp_num = rqpn;
    a.rq_psn = rpsn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = rlid;
    a.ah_attr.port_num = r.dev.caps.port;
    if r.dev.ethernet || rlid == 0 {
        a.ah_attr.is_global = 1;
        let mut g = [0u8; 16];
        g.copy_from_slice(&peer[10..]);
        a.ah_attr.grh.dgid.raw = g;
        a.ah_attr.grh.sgid_index = r.dev.caps.gid_index as u8;
        a.ah_attr.grh.hop_limit = 64;
    }
    modify(
        &mut a,
        M::IBV_QP_STATE.0
            | M::IBV_QP_AV.0
            | M::IBV_QP_PATH_MTU.0
            | M::IBV_QP_DEST_QPN.0
            | M::IBV_QP_RQ_PSN.0
            | M::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | M::IBV_QP_MIN_RNR_TIMER.0,
        "RTR",
    )?;
    // SAFETY: plain data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = ibv_qp_state::IBV_QPS_RTS;
    a.sq_psn = psn;
    a.timeout = o.timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    modify(
        &mut a,
        M::IBV_QP_STATE.0
            | M::IBV_QP_SQ_PSN.0
            | M::IBV_QP_TIMEOUT.0
            | M::IBV_QP_RETRY_CNT.0
            | M::IBV_QP_RNR_RETRY.0
            | M::IBV_QP_MAX_QP_RD_ATOMIC.0,
        "RTS",
    )?;
    // Both sides ready before the first send.
    stream.write_all(&[1])?;
    stream.read_exact(&mut [0u8; 1])?;

    let send_addr = base;
    let mut sent: u64 = 0;
    let mut unacked_signalled = 0usize;
    let mut wcs: Vec<ibv_wc> = (0..o.poll_batch.max(1))
        .map(|_| {
            // SAFETY: plain data.
            unsafe { std::mem::zeroed() }
        })
        .collect();
    // Receive completions seen (also while waiting for send completions on a shared CQ).
    let mut recvs_ready = 0usize;
    let mut next_recv_slot = 0usize;
    // 1 MiB read by `pre_lines` and `idle_lines` (allocated only for them).
    let junk = if o.pre_lines > 0 || o.idle_lines > 0 {
        vec![1u64; 1 << 17]
    } else {
        Vec::new()
    };
    let post_send = |sent: &mut u64, unacked: &mut usize| -> Result<()> {
        let len = o.size as u32;
        let mut sges = if o.two_sges {
            [
                ibv_sge {
                    addr: send_addr,
                    length: HDR as u32,
                    lkey,
                },
                ibv_sge {
                    addr: send_addr + HDR as u64,
                    length: len,
                    lkey,
                },
            ]
        } else {
            [
                ibv_sge {
                    addr: send_addr,
                    length: len,
                    lkey,
                },
                ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey,
                },
            ]
        };
        let total = if o.two_sges { HDR as u32 + len } else { len };
        read_lines(&junk, o.pre_lines, *sent as usize * 97);
        if o.quiet_us > 0 {
            super::cycles::spin_us(o.quiet_us);
        }
        if o.one_way && o.size >= 8 {
            let at = send_addr + if o.two_sges { HDR as u64 } else { 0 };
            // SAFETY: `at` lies in the registered region owned by `r` (HDR + size bytes at
            // its start are the send buffer); nothing else writes it during this call.
            unsafe { std::ptr::write_unaligned(at as *mut u64, super::cycles::now()) };
        }
        // SAFETY: plain data with unions of plain data; zero is valid.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = *sent;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = if o.two_sges { 2 } else { 1 };
        wr.opcode = if o.imm {
            ibv_wr_opcode::IBV_WR_SEND_WITH_IMM
        } else {
            ibv_wr_opcode::IBV_WR_SEND
        };
        wr.imm_data_invalidated_rkey_union.imm_data = 1u32.to_be();
        let mut flags = 0;
        if o.signal_every <= 1 || matches!(*sent % u64::from(o.signal_every), 0) {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
            *unacked += 1;
        }
        if o.inline && total <= max_inline {
            flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.send_flags = flags;
        let mut bad = std::ptr::null_mut();
        // SAFETY: qp is in RTS; wr/sges live across the call; buffers are registered.
        let rc = unsafe { ibv_post_send(r.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(rc_fail("ibv_post_send", rc));
        }
        *sent += 1;
        Ok(())
    };
    let mut out = Vec::with_capacity(if initiator { o.iters } else { 0 });
    let (scq, rcq) = (r.scq, r.rcq);
    let mut idle = 0u32;
    let mut since = None;
    // A listener and a connected TCP stream of this process' own that never carry data.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    let (side, _) = listener.accept()?;
    listener.set_nonblocking(true)?;
    side.set_nonblocking(true)?;
    let mut polls = 0u64;
    let mut poll = |cq: *mut ibv_cq, recvs: &mut usize, unacked: &mut usize| -> Result<()> {
        polls += 1;
        if o.mesh_every > 0 && polls % o.mesh_every == 1 {
            if o.mesh_what & 1 != 0 {
                std::hint::black_box(listener.accept().is_ok());
            }
            if o.mesh_what & 4 != 0 && super::control::readable(&listener) {
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
            post_send(&mut sent, &mut unacked_signalled)?;
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
            let at =
                recv_base + (next_recv_slot * o.recv_slot) as u64 + if o.two_sges { HDR as u64 } else { 0 };
            // SAFETY: the slot's receive completed (the CQ said so), so the device wrote it
            // and does not touch it until it is reposted below.
            let stamp = unsafe { std::ptr::read_unaligned(at as *const u64) };
            one_way.push(super::cycles::now().wrapping_sub(stamp));
        }
        // The consumed receive is reposted at once, as perftest does.
        post_recv(next_recv_slot)?;
        next_recv_slot = (next_recv_slot + 1) % slots.max(1);
        if initiator {
            out.push(t0.elapsed().as_secs_f64() / 2.0);
        } else {
            post_send(&mut sent, &mut unacked_signalled)?;
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
        let us = super::cycles::per_us();
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
fn poll_cq(cq: *mut ibv_cq, wcs: &mut [ibv_wc], yield_idle: bool) -> Result<(usize, usize)> {
    // SAFETY: cq is live; wcs has room for wcs.len() entries.
    let n = unsafe { ibv_poll_cq(cq, wcs.len() as i32, wcs.as_mut_ptr()) };
    if n < 0 {
        return Err(Error::Verbs("raw ping-pong: ibv_poll_cq failed".into()));
    }
    let (mut rv, mut sd) = (0, 0);
    for wc in &wcs[..n as usize] {
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            return Err(Error::Verbs(format!(
                "raw ping-pong: completion status {}",
                wc.status
            )));
        }
        if wc.opcode & ibv_wc_opcode::IBV_WC_RECV != 0 {
            rv += 1;
        } else {
            sd += 1;
        }
    }
    if n == 0 && yield_idle {
        std::thread::yield_now();
    }
    Ok((rv, sd))
}
