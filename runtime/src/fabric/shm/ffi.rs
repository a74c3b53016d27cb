//! The shared-memory fabric's one unsafe view: a segment (a sealed `memfd` mapped
//! `MAP_SHARED`, so that every process that maps it sees the same bytes), read and written
//! only through bounds-checked offsets: words as atomics, bytes copied in, bytes read in
//! place. Everything above (the receive rings, the rendezvous) is safe code over it. Also
//! the one other unsafe call of the fabric: `process_vm_readv(2)` (Linux's
//! cross-memory attach, CMA: [`read_remote`], [`read_remote_vec`]), which copies a large message out of its
//! sender's memory.
//!
//! Sealing (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`, Linux's `memfd_create(2)`) is what
//! makes a peer's segment safe to map: its owner can no longer shrink it, so an access
//! within the size checked at mapping time never faults (SIGBUS), whatever the owner does.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{fcntl_add_seals, fcntl_get_seals, fstat, ftruncate, memfd_create, MemfdFlags, SealFlags};

/// The seals every segment carries before it is mapped by anyone but its owner.
const SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW).union(SealFlags::SEAL);

/// Why a segment could not be made or mapped: the call and the OS error, or what is wrong
/// with a peer's segment.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SegmentError {
    /// A system call failed.
    #[error("{call}: {source}")]
    Os {
        /// The call (`memfd_create`, `ftruncate`, `mmap`, ...).
        call: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A peer's segment is not one this fabric can map safely.
    #[error("the segment is refused: {0}")]
    Refused(String),
}

fn os(call: &'static str) -> impl FnOnce(rustix::io::Errno) -> SegmentError {
    move |e| SegmentError::Os {
        call,
        source: e.into(),
    }
}

/// A shared segment: its mapping of `len` bytes (page-aligned, so every 8-byte-aligned
/// offset is 8-byte-aligned in memory) and, for a segment this process made, its file
/// descriptor until it is taken to be passed on (a peer's is closed once mapped: the
/// mapping keeps the memory, and a rank with many peers keeps no descriptor for each).
pub(crate) struct Segment {
    map: MmapRaw,
    fd: Option<OwnedFd>,
}

impl Segment {
    /// A new zeroed segment of `len` bytes named `name` (the name shows in
    /// `/proc/PID/maps` only: a `memfd` has no path, so nothing is left behind), sealed
    /// against resizing and mapped. Errors: the failing call's (`ENOMEM` when the memory
    /// cannot be had, `EMFILE` when out of descriptors).
    pub(crate) fn create(name: &str, len: usize) -> Result<Segment, SegmentError> {
        let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(os("memfd_create"))?;
        ftruncate(&fd, len as u64).map_err(os("ftruncate"))?;
        fcntl_add_seals(&fd, SEALS).map_err(os("fcntl(F_ADD_SEALS)"))?;
        let map = Segment::map(&fd, len)?;
        Ok(Segment { map, fd: Some(fd) })
    }

    /// Maps a peer's segment from its descriptor, after checking that it is sealed
    /// against shrinking and holds at least `min_len` bytes. The whole segment is mapped.
    /// Errors: [`SegmentError::Refused`] (not sealed, too small, too large for this
    /// address space), the failing call's.
    pub(crate) fn open(fd: OwnedFd, min_len: usize) -> Result<Segment, SegmentError> {
        let seals = fcntl_get_seals(&fd).map_err(os("fcntl(F_GET_SEALS)"))?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err(SegmentError::Refused(
                "it is not sealed against shrinking (F_SEAL_SHRINK)".into(),
            ));
        }
        let size = fstat(&fd).map_err(os("fstat"))?.st_size;
        let len = usize::try_from(size)
            .map_err(|_| SegmentError::Refused(format!("its size {size} does not fit this address space")))?;
        if len < min_len {
            return Err(SegmentError::Refused(format!(
                "it holds {len} bytes, fewer than the {min_len} needed"
            )));
        }
        let map = Segment::map(&fd, len)?;
        Ok(Segment { map, fd: None })
    }

    fn map(fd: &OwnedFd, len: usize) -> Result<MmapRaw, SegmentError> {
        MmapOptions::new()
            .len(len)
            .map_raw(fd)
            .map_err(|e| SegmentError::Os {
                call: "mmap",
                source: e,
            })
    }

    /// The descriptor of a segment this process made, while it has it (to pass to a peer).
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Takes the descriptor of a segment this process made (for the thread that passes it
    /// to peers).
    pub(crate) fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
    }

    /// Its length, bytes.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether `[off, off + len)` lies in the segment and `off` is a multiple of `align`.
    #[inline]
    fn fits(&self, off: usize, len: usize, align: usize) -> bool {
        off.is_multiple_of(align) && off.checked_add(len).is_some_and(|end| end <= self.map.len())
    }

    /// The 8-byte word at `off` as an atomic; `None` when it is out of the segment or not
    /// aligned.
    #[inline]
    pub(crate) fn u64_at(&self, off: usize) -> Option<&AtomicU64> {
        if !self.fits(off, 8, 8) {
            return None;
        }
        // SAFETY: `off..off + 8` lies in the mapping (checked above), which lives as long as
        // `self` and is 8-byte aligned there (the mapping is page-aligned, `off` a multiple
        // of 8). Every access to shared words goes through atomics, in this process and, by
        // the protocol, in its peers.
        Some(unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast()) })
    }

    /// The 4-byte word at `off` as an atomic (a futex word); `None` as for [`Segment::u64_at`].
    #[inline]
    pub(crate) fn u32_at(&self, off: usize) -> Option<&AtomicU32> {
        if !self.fits(off, 4, 4) {
            return None;
        }
        // SAFETY: as in `u64_at`, for 4 bytes at a multiple of 4.
        Some(unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(off).cast()) })
    }

    /// Copies `src` to offset `off`; `None`, nothing written, when it does not fit.
    #[inline]
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> Option<()> {
        if !self.fits(off, src.len(), 1) {
            return None;
        }
        // SAFETY: the destination lies in the mapping (checked above); `ptr::copy` allows
        // `src` to overlap it (a slice of this segment from `bytes`).
        unsafe { std::ptr::copy(src.as_ptr(), self.map.as_mut_ptr().add(off), src.len()) };
        Some(())
    }

    /// The `len` bytes at `off`, read in place; `None` when they do not fit. The caller
    /// owns them by the rings' protocol (a published cell, not written again until the
    /// caller gives it back).
    #[inline]
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        if !self.fits(off, len, 1) {
            return None;
        }
        // SAFETY: the bytes lie in the mapping (checked above), which outlives the borrow of
        // `self`. They are plain bytes (any value is valid); by the rings' protocol no
        // process writes them while the caller reads (a peer that breaks it can only garble
        // bytes that are treated as untrusted data).
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off), len) })
    }
}

/// Copies `len` bytes at address `remote` of process `pid` to `dst` with
/// `process_vm_readv(2)` (CMA: one copy, from the sender's memory into this process'),
/// looping over partial reads. Errors: the OS error (`EPERM`: the other process may not be
/// read, Yama's `ptrace_scope` or a container's seccomp; `ESRCH`: it is gone; `EFAULT`:
/// the range is not mapped there), `UnexpectedEof` when a read returns 0.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes (initialised or not) during the call.
unsafe fn read_remote_raw(pid: i32, remote: u64, dst: *mut u8, len: usize) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let left = len - done;
        let local = libc::iovec {
            // SAFETY: `done < len`: inside the caller's `len` bytes.
            iov_base: unsafe { dst.add(done) }.cast(),
            iov_len: left,
        };
        let at = remote.checked_add(done as u64).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "the remote range wraps around")
        })?;
        let far = libc::iovec {
            iov_base: at as usize as *mut libc::c_void,
            iov_len: left,
        };
        // SAFETY: `local` describes `left` writable bytes of the caller's (the contract);
        // `far` is only an address in the other process, which the kernel checks (it
        // fails with EFAULT or EPERM, it never touches this process' memory through it).
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &far, 1, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("process_vm_readv read 0 of {left} bytes"),
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// `buf.len()` bytes at address `remote` of process `pid`, read by `process_vm_readv`
/// into `buf` (the caller's receive buffer: one copy, sender to receiver).
pub(crate) fn read_remote(pid: i32, remote: u64, buf: &mut [u8]) -> std::io::Result<()> {
    // SAFETY: `buf` is `buf.len()` writable bytes (initialised; the read only writes them).
    unsafe { read_remote_raw(pid, remote, buf.as_mut_ptr(), buf.len()) }
}

/// `len` bytes at address `remote` of process `pid`, read by `process_vm_readv` into a new
/// vector (allocated with `try_reserve_exact`: `OutOfMemory` when it cannot be had, never
/// an abort; not zeroed first).
pub(crate) fn read_remote_vec(pid: i32, remote: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, format!("{len} bytes: {e}")))?;
    // SAFETY: the vector reserved `len` bytes at its pointer, writable (not initialised:
    // raw writes only, no reference to them is made).
    unsafe { read_remote_raw(pid, remote, v.as_mut_ptr(), len) }?;
    // SAFETY: the read returned Ok: every one of the `len` reserved bytes is written.
    unsafe { v.set_len(len) };
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_remote_copies_from_this_process_and_names_a_bad_range() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let me = std::process::id() as i32;
        let e = read_remote_vec(me, 8, 16).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{e}");
        assert!(read_remote_vec(me, u64::MAX - 4, 16).is_err());
        let v = read_remote_vec(std::process::id() as i32, src.as_ptr() as u64, src.len()).unwrap();
        assert_eq!(v, src);
        let e = read_remote_vec(std::process::id() as i32, 0, usize::MAX / 2).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}");
    }
}
