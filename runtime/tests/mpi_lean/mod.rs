//! The MPI native path's posted receives without allocation (issue 35, point 3): a loop of
//! `irecv_within`, `isend` and the waits allocates nothing per message once warm (counted by this
//! binary's global allocator, per thread), more receives posted at once than the native
//! path keeps buffers for (one: the others allocate theirs, and free them, the footprint
//! back at the prediction), and messages longer than the kept buffer. The counts and the
//! footprint are asserted where the case's ranks run on the native path (one rank per
//! process: `mpirun -n 2`); the messages everywhere.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ballast_runtime::CommError;
use ballast_runtime::{Error, Result, RuntimeConfig};

use crate::conformance::{fnv, payload, Launcher};
use crate::MpiLauncher;

/// The system allocator, counting the allocations of each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to `System` unchanged; the count is a thread-local
// `Cell` with a const initialiser (no allocation, no lazy set-up).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` (that is, `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: as for `dealloc`, and `new_size` as `GlobalAlloc::realloc` requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|a| a.get())
}

/// `buffer_size` of the case: a posted receive's buffer is 1,025 bytes.
const B: usize = 1024;
/// Receives posted at once, beyond the native path's kept receive buffer (1).
const POSTED: usize = 20;
const ROUNDS: usize = 100;

/// Rank 1 sends [`POSTED`] messages of 8 B (tag 5) for as many receives posted at once by
/// rank 0, read with `wait_read` in order; then one of `2 B + 3` bytes (tag 6), refused by a
/// receive of `B + 1` (truncated, left queued) and read by one of `4 B`; then
/// [`ROUNDS`] round trips of 8 B (tag 7) where rank 0 posts with `irecv_within`, sends with
/// `isend` and `wait`, and reads with `wait_read` (the loop of `ballast_irecv_into`),
/// counting its allocations. Rank 0's result: the
/// checksums of what it read, its allocations in the loop, and its footprint's receive
/// bytes after the posted receives, with the path taken.
pub fn posted_receives_without_allocation() {
    let cfg = RuntimeConfig::builder()
        .lock_pool(false)
        .buffer_size(B)
        .build()
        .unwrap();
    let big = payload(2 * B + 3, 6);
    let res = MpiLauncher
        .run(2, &cfg, |comm| -> Result<Vec<u64>> {
            if comm.rank() == 1 {
                comm.barrier()?; // rank 0's receives are posted
                for i in 0..POSTED {
                    comm.send(0, 5, &(i as u64).to_le_bytes())?;
                }
                comm.send(0, 6, &big)?;
                let mut m = [0u8; 8];
                for _ in 0..ROUNDS + 5 {
                    let e = comm.recv_into(0, 7u32, &mut m)?.expect("8 bytes fit");
                    comm.send(0, 7, &m[..e.len])?;
                }
                return Ok(Vec::new());
            }
            let mut out = Vec::new();
            let reqs = (0..POSTED)
                .map(|_| comm.irecv_within(1, 5u32, 64))
                .collect::<Result<Vec<_>>>()?;
            comm.barrier()?;
            for r in reqs {
                let mut got = Vec::new();
                let e = comm
                    .wait_read(r, |d| got.extend_from_slice(d))?
                    .expect("a receive");
                assert_eq!(e.len, got.len());
                out.push(u64::from_le_bytes(got.try_into().expect("8 bytes")));
            }
            out.push(comm.footprint().srq_bytes);
            // Longer than a kept buffer: refused by a receive of B + 1, left queued.
            let r = comm.irecv_within(1, 6u32, B + 1)?;
            match comm.wait_read(r, |_| panic!("a refused message is not read")) {
                Err(Error::Comm(CommError::Truncated { len, .. })) => out.push(len as u64),
                other => panic!("expected Truncated, got {other:?}"),
            }
            let r = comm.irecv_within(1, 6u32, 4 * B)?;
            let mut into = vec![0u8; 4 * B];
            let mut n = 0;
            comm.wait_read(r, |d| {
                into[..d.len()].copy_from_slice(d);
                n = d.len();
            })?;
            out.push(fnv(&into[..n]));
            // The steady loop: 5 round trips to warm up, then ROUNDS counted.
            let mut buf = [0u8; 8];
            let mut before = 0;
            for i in 0..ROUNDS + 5 {
                if i == 5 {
                    before = allocations();
                }
                let r = comm.irecv_within(1, 7u32, 8)?;
                let s = comm.isend(1, 7, &(i as u64).to_le_bytes())?;
                comm.wait(s)?;
                comm.wait_read(r, |d| buf[..d.len()].copy_from_slice(d))?;
                assert_eq!(u64::from_le_bytes(buf), i as u64, "round trip {i}");
            }
            out.push(allocations() - before);
            out.push(u64::from(comm.is_mpi_native()));
            Ok(out)
        })
        .unwrap();
    let v = res.into_iter().next().expect("rank 0").unwrap();
    assert_eq!(
        &v[..POSTED],
        &(0..POSTED as u64).collect::<Vec<_>>()[..],
        "posting order"
    );
    let [srq, refused, sum, allocs, native] = v[POSTED..] else {
        panic!("results {v:?}")
    };
    assert_eq!(refused, 2 * B as u64 + 3, "the refused message's length");
    assert_eq!(sum, fnv(&big), "the message longer than a kept buffer");
    if native == 1 {
        // The two kept buffers only: the kept receive buffer is back, the 19 receives'
        // own buffers are freed (as predicted with nothing in flight).
        assert_eq!(srq, 2 * (B as u64 + 1), "kept receive buffers");
        assert_eq!(allocs, 0, "allocations in {ROUNDS} round trips");
    }
}
