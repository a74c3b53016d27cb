//! [`ballast_comm_notes`]: what a communicator's setup chose, as text for C (the
//! transport, the path over MPI — native or engine —, the runtime's notes on fallbacks
//! and memory locking), one per line.

use std::os::raw::{c_char, c_int};

use crate::comm::{ballast_comm, with_comm};
use crate::error::Fail;

/// The notes of `comm`, one per line (each ends with `\n`): first `transport: KIND` (the
/// effective transport: `local`, `mpi` or `verbs`), then `path: native` (MPI's own
/// messages, one per Ballast message: the MPI native path) or `path: engine` (Ballast's
/// protocol engine over the transport), then the runtime's notes (fallbacks such as
/// `xrc` to `shared`, the reason the MPI native path was not taken, memory that could
/// not be locked), as of this call. Copied into `buf` with snprintf semantics: at most
/// `len - 1` bytes and a terminating NUL (nothing is written when `len` is 0, and `buf`
/// may then be NULL); the full length in bytes (without the NUL) in *full_len when
/// `full_len` is not NULL, so *full_len >= `len` means the text was cut. Errors:
/// BALLAST_EINVAL for NULL `comm`, or NULL `buf` with `len` > 0; BALLAST_EINTERNAL for a
/// poisoned communicator; under MPI below MPI_THREAD_MULTIPLE, BALLAST_EUNSUPPORTED from
/// another thread than the one that made the communicator.
///
/// # Safety
/// `comm` must be NULL or a live ballast_comm; `buf` NULL (with `len` 0) or `len`
/// writable bytes; `full_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_comm_notes(
    comm: *const ballast_comm,
    buf: *mut c_char,
    len: usize,
    full_len: *mut usize,
) -> c_int {
    const F: &str = "ballast_comm_notes";
    with_comm(F, comm.cast_mut(), |c| {
        if buf.is_null() && len > 0 {
            return Err(Fail::null(F, "buf"));
        }
        let text = notes_text(c);
        if let Some(l) = len.checked_sub(1) {
            let n = text.len().min(l);
            // SAFETY: `buf` is non-NULL with `len` writable bytes (the contract); `n + 1 <=
            // len` bytes are written, from a distinct Rust allocation (no overlap).
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, n);
                *buf.add(n) = 0;
            }
        }
        // SAFETY: NULL or writable (the contract).
        if let Some(f) = unsafe { full_len.as_mut() } {
            *f = text.len();
        }
        Ok(0)
    })
}

/// The text of [`ballast_comm_notes`].
fn notes_text(c: &mut ballast_comm) -> String {
    let comm = c.comm();
    let path = if comm.is_mpi_native() { "native" } else { "engine" };
    let mut text = format!("transport: {}\npath: {path}\n", comm.config().kind);
    for n in comm.notes() {
        // One note per line: a note's own line breaks would split it.
        text.push_str(&n.replace('\n', " "));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ballast_config, ballast_config_free, ballast_config_new, ballast_config_set};
    use crate::{ballast_local_run, BALLAST_EINVAL};
    use std::os::raw::c_void;

    /// What one rank saw: the return codes, the full lengths, the whole text and a cut copy.
    #[derive(Default)]
    struct Seen {
        rcs: Vec<c_int>,
        full: usize,
        full2: usize,
        whole: Vec<u8>,
        cut: Vec<u8>,
    }

    unsafe extern "C" fn rank_main(comm: *mut ballast_comm, user: *mut c_void) -> c_int {
        // SAFETY: `user` is the `Seen` of the test below, used by this one rank.
        let s = unsafe { &mut *user.cast::<Seen>() };
        let p = comm.cast_const();
        // SAFETY: `p` is the live handle ballast_local_run lends; the buffers below are
        // local and their lengths are what is passed.
        unsafe {
            s.rcs
                .push(ballast_comm_notes(p, std::ptr::null_mut(), 0, &mut s.full));
            let mut whole = vec![0x55 as c_char; s.full + 1];
            s.rcs.push(ballast_comm_notes(
                p,
                whole.as_mut_ptr(),
                whole.len(),
                &mut s.full2,
            ));
            let mut cut = [0x55 as c_char; 8];
            s.rcs
                .push(ballast_comm_notes(p, cut.as_mut_ptr(), 5, std::ptr::null_mut()));
            s.rcs
                .push(ballast_comm_notes(p, std::ptr::null_mut(), 4, &mut s.full2));
            s.whole = whole.iter().map(|&b| b as u8).collect();
            s.cut = cut.iter().map(|&b| b as u8).collect();
        }
        0
    }

    #[test]
    fn notes_name_the_transport_and_path_with_snprintf_semantics() {
        let mut cfg: *mut ballast_config = std::ptr::null_mut();
        // SAFETY: `cfg` is writable; the key and value are NUL-terminated.
        unsafe {
            assert_eq!(ballast_config_new(&mut cfg), 0);
            assert_eq!(
                ballast_config_set(cfg, c"buffer_count".as_ptr(), c"4".as_ptr()),
                0
            );
        }
        let mut s = Seen::default();
        // SAFETY: a live config handle; `rank_main` touches only `s`, on one rank.
        let rc = unsafe { ballast_local_run(1, cfg, Some(rank_main), (&mut s as *mut Seen).cast()) };
        assert_eq!(rc, 0);
        // SAFETY: the live config made above, freed once.
        assert_eq!(unsafe { ballast_config_free(cfg) }, 0);
        assert_eq!(s.rcs, [0, 0, 0, BALLAST_EINVAL]);
        assert_eq!(s.full, s.full2);
        let text = String::from_utf8(s.whole[..s.full].to_vec()).unwrap();
        assert_eq!(s.whole[s.full], 0, "NUL-terminated");
        assert!(text.starts_with("transport: local\npath: engine\n"), "{text:?}");
        assert!(text.ends_with('\n'));
        assert_eq!(&s.cut[..5], b"tran\0", "len - 1 bytes and the NUL");
        assert_eq!(&s.cut[5..], &[0x55; 3], "nothing past len");
        // SAFETY: a NULL communicator is refused.
        let rc =
            unsafe { ballast_comm_notes(std::ptr::null(), std::ptr::null_mut(), 0, std::ptr::null_mut()) };
        assert_eq!(rc, BALLAST_EINVAL);
    }
}
