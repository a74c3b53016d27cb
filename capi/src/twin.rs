//! The Rust-API twin of bench/c/pingpong.c's loop (feature `bench-twin`, not in the
//! header): [`ballast_bench_twin`] runs the same ping-pong through the Rust API on the
//! communicator behind a C handle, so that the benchmark alternates the C path and the Rust
//! path in one process, block by block, over the same connection.

use std::os::raw::{c_int, c_void};

use ballast_runtime::Communicator;

use crate::comm::{ballast_comm, bytes, with_comm};
use crate::error::Fail;
use crate::BALLAST_ENOMEM;

/// How the twin receives.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `recv`: the message's own buffer.
    Recv,
    /// `irecv` then `wait` (the calls of the C path's non-blocking loop).
    Irecv,
    /// `recv_into` a buffer of the message's size (what `ballast_recv` does).
    RecvInto,
    /// `irecv_within` then `isend` then `wait` of the send and `wait_read` of the receive,
    /// the message copied into a buffer of its size (what `ballast_irecv_into` +
    /// `ballast_isend` + `ballast_wait` do).
    IrecvWithin,
}

/// Runs `iters` round trips of the ping-pong through the Rust API, ranks in pairs (0 and
/// 1, 2 and 3, ...): the even rank (or the only rank, to itself) sends the `size` bytes at
/// `buf` with tag 1 and receives the echo; the odd one receives and sends the message
/// back. `mode` 0 receives with `recv`, 1 with `irecv` +
/// `wait`, 2 with `recv_into` a buffer of `size` bytes, 3 with `irecv_within` posted before
/// an `isend` and both waited (the receive by `wait_read`, the message copied into a
/// buffer of `size` bytes: the loop of bench/c/irecv_into.c). Errors: BALLAST_EINVAL for
/// NULL, another mode, or a rank without a partner (the last of an odd world); the
/// runtime's.
///
/// # Safety
/// `comm` must be NULL or a ballast_comm handle, not freed by another thread during the
/// call (a freed one is refused); `buf` NULL with `size` 0 or `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ballast_bench_twin(
    comm: *mut ballast_comm,
    mode: c_int,
    buf: *const c_void,
    size: usize,
    iters: u64,
) -> c_int {
    const F: &str = "ballast_bench_twin";
    with_comm(F, comm, |c| {
        // SAFETY: `size` readable bytes at `buf` (the contract).
        let data = unsafe { bytes(F, buf, size) }?;
        let comm = c.comm();
        let me = comm.rank();
        // Pairs (0, 1), (2, 3), ...: the even rank leads (rank 0 alone: to itself).
        let peer = if comm.world_size() == 1 { 0 } else { me ^ 1 };
        if peer >= comm.world_size() {
            return Err(Fail::inval(format!(
                "{F}: rank {me} has no partner: the world has {} ranks, an odd number",
                comm.world_size()
            )));
        }
        let lead = me % 2 == 0;
        let mode = match mode {
            0 => Mode::Recv,
            1 => Mode::Irecv,
            2 => Mode::RecvInto,
            3 => Mode::IrecvWithin,
            _ => return Err(Fail::inval(format!("{F}: mode {mode} is not 0, 1, 2 or 3"))),
        };
        let want = if matches!(mode, Mode::RecvInto | Mode::IrecvWithin) {
            size
        } else {
            0
        };
        let mut into = Vec::new();
        if into.try_reserve_exact(want).is_err() {
            return Err(Fail::new(
                BALLAST_ENOMEM,
                format!("{F}: no memory for the receive buffer of size {want} bytes"),
            ));
        }
        into.resize(want, 0u8);
        let rt = |e: ballast_runtime::Error| Fail::runtime(F, &e);
        let mut run = |comm: &mut Communicator| -> Result<(), Fail> {
            for _ in 0..iters {
                if mode == Mode::IrecvWithin {
                    within_round(comm, lead, peer, data, &mut into).map_err(rt)?;
                    continue;
                }
                if lead {
                    comm.send(peer, 1, data).map_err(rt)?;
                }
                match mode {
                    Mode::Recv => {
                        let m = comm.recv(peer, 1u32).map_err(rt)?;
                        if !lead {
                            comm.send(peer, 1, &m.data).map_err(rt)?;
                        }
                    }
                    Mode::Irecv => {
                        let r = comm.irecv(peer, 1u32).map_err(rt)?;
                        let m = comm
                            .wait(r)
                            .map_err(rt)?
                            .into_message()
                            .map(|m| m.data)
                            .unwrap_or_default();
                        if !lead {
                            comm.send(peer, 1, &m).map_err(rt)?;
                        }
                    }
                    Mode::IrecvWithin => unreachable!("handled above"),
                    Mode::RecvInto => {
                        let len = match comm.recv_into(peer, 1u32, &mut into).map_err(rt)? {
                            Ok(e) => e.len,
                            Err(e) => return Err(Fail::inval(format!("{F}: a message of {} bytes", e.len))),
                        };
                        if !lead {
                            comm.send(peer, 1, &into[..len]).map_err(rt)?;
                        }
                    }
                }
            }
            Ok(())
        };
        run(comm)?;
        Ok(0)
    })
}

/// One round trip of mode 3: the leading rank posts its receive, sends `data` and waits
/// for both; its partner posts its receive, waits for it and sends the message back from
/// `into`.
fn within_round(
    comm: &mut Communicator,
    lead: bool,
    peer: usize,
    data: &[u8],
    into: &mut [u8],
) -> ballast_runtime::Result<()> {
    let r = comm.irecv_within(peer, 1u32, into.len())?;
    let mut len = 0;
    let read = |data: &[u8]| {
        into[..data.len()].copy_from_slice(data);
        len = data.len();
    };
    if lead {
        let s = comm.isend(peer, 1, data)?;
        comm.wait(s)?;
        comm.wait_read(r, read)?;
    } else {
        comm.wait_read(r, read)?;
        let s = comm.isend(peer, 1, &into[..len])?;
        comm.wait(s)?;
    }
    Ok(())
}
