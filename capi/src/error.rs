//! Errors at the boundary: [`Fail`] (a code and a message), the mapping of the runtime's
//! errors to the fixed codes, the thread-local last error message and
//! [`ballast_last_error`], and [`boundary`], which turns a failure or a panic into a code.

use std::cell::RefCell;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ballast_runtime::Error;

use crate::{
    BALLAST_EAGAIN, BALLAST_EINTERNAL, BALLAST_EINVAL, BALLAST_ENOMEM, BALLAST_EPEER, BALLAST_EUNSUPPORTED,
};

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A failed call: its code and the message `ballast_last_error` gives. Boxed, so that a
/// call's `Result<c_int, Fail>` is two words returned in registers: a wider result goes
/// through the stack, where the 4-byte `Ok` store and the wider load that follows it stall
/// on every successful call.
#[derive(Debug)]
pub(crate) struct Fail(Box<Failure>);

/// What a [`Fail`] holds.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) msg: String,
}

impl std::ops::Deref for Fail {
    type Target = Failure;
    fn deref(&self) -> &Failure {
        &self.0
    }
}

impl Fail {
    #[cold]
    pub(crate) fn new(code: c_int, msg: impl Into<String>) -> Fail {
        Fail(Box::new(Failure {
            code,
            msg: msg.into(),
        }))
    }

    /// `BALLAST_EINVAL` with `msg`.
    pub(crate) fn inval(msg: impl Into<String>) -> Fail {
        Fail::new(BALLAST_EINVAL, msg)
    }

    /// `BALLAST_EINVAL` for a NULL `what` given to `func`.
    pub(crate) fn null(func: &str, what: &str) -> Fail {
        Fail::inval(format!("{func}: {what} is NULL"))
    }

    /// A runtime error from `func`, with its code.
    pub(crate) fn runtime(func: &str, e: &Error) -> Fail {
        Fail::new(code_of(e), format!("{func}: {e}"))
    }
}

/// The fixed code of a runtime error.
pub(crate) fn code_of(e: &Error) -> c_int {
    match e {
        Error::WouldBlock => BALLAST_EAGAIN,
        Error::Config { .. }
        | Error::Setting { .. }
        | Error::InvalidRank { .. }
        | Error::ReservedTag(_)
        | Error::UnknownRequest(_)
        | Error::BootstrapEnv { .. }
        | Error::MpiState { .. }
        | Error::BootstrapRoot { .. } => BALLAST_EINVAL,
        Error::Alloc { .. } | Error::MessageAlloc { .. } | Error::MemlockTooLow { .. } => BALLAST_ENOMEM,
        Error::Aborted | Error::PeerDied { .. } | Error::QueuePairBroken { .. } => BALLAST_EPEER,
        Error::TransportUnavailable { .. } => BALLAST_EUNSUPPORTED,
        _ => BALLAST_EINTERNAL,
    }
}

/// Records `msg` as the calling thread's last error.
pub(crate) fn set_last_error(msg: &str) {
    LAST_ERROR.with(|l| {
        let mut l = l.borrow_mut();
        l.clear();
        l.push_str(msg);
    });
}

/// The calling thread's last error message.
pub(crate) fn last_error() -> String {
    LAST_ERROR.with(|l| l.borrow().clone())
}

/// The text of a panic's payload.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

/// Runs `f` at the C boundary: its `Ok` code is returned; a [`Fail`] is recorded as the
/// thread's last error and its code returned; a panic becomes `BALLAST_EINTERNAL` with
/// its message (callers that hold a communicator poison it, see `comm::with_comm`).
pub(crate) fn boundary(func: &str, f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(fail)) => {
            set_last_error(&fail.msg);
            fail.code
        }
        Err(p) => {
            set_last_error(&format!("{func}: internal error (panic): {}", panic_text(&*p)));
            BALLAST_EINTERNAL
        }
    }
}

/// Copies the calling thread's last error message into `buf` with snprintf semantics: at
/// most `len - 1` bytes and a terminating NUL (nothing is written when `len` is 0, and
/// `buf` may then be NULL). Returns the message's full length in bytes (without the NUL),
/// so a return value >= `len` means it was cut; an empty message when no call failed on
/// this thread yet. A success does not clear the message. Errors: BALLAST_EINVAL when
/// `buf` is NULL and `len` is not 0.
///
/// # Safety
/// `buf` must be NULL (with `len` 0) or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ballast_last_error(buf: *mut c_char, len: usize) -> c_int {
    let msg = last_error();
    if len == 0 {
        return c_int::try_from(msg.len()).unwrap_or(c_int::MAX);
    }
    if buf.is_null() {
        return BALLAST_EINVAL;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller gives `len` writable bytes at `buf`; `n + 1 <= len` bytes are
    // written, from a distinct Rust allocation (no overlap).
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), buf, n);
        *buf.add(n) = 0;
    }
    c_int::try_from(msg.len()).unwrap_or(c_int::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_last(len: usize) -> (c_int, Vec<u8>) {
        let mut buf = vec![0x55u8; len + 1];
        // SAFETY: `buf` has `len + 1` writable bytes.
        let n = unsafe { ballast_last_error(buf.as_mut_ptr().cast(), len) };
        (n, buf)
    }

    #[test]
    fn last_error_has_snprintf_semantics_and_survives_success() {
        assert_eq!(boundary("f", || Err(Fail::inval("f: bad thing"))), BALLAST_EINVAL);
        assert_eq!(boundary("g", || Ok(0)), 0);
        let (n, buf) = read_last(64);
        assert_eq!(n, 12);
        assert_eq!(&buf[..13], b"f: bad thing\0");
        let (n, buf) = read_last(4);
        assert_eq!(n, 12, "full length when cut");
        assert_eq!(&buf[..5], b"f: \0\x55", "three bytes, a NUL, nothing past len");
        // SAFETY: len 0 writes nothing; NULL is allowed then.
        assert_eq!(unsafe { ballast_last_error(std::ptr::null_mut(), 0) }, 12);
        // SAFETY: NULL with len > 0 is refused before any write.
        assert_eq!(
            unsafe { ballast_last_error(std::ptr::null_mut(), 8) },
            BALLAST_EINVAL
        );
    }

    #[test]
    fn a_panic_becomes_einternal_with_its_message() {
        let code = boundary("ballast_x", || -> Result<c_int, Fail> { panic!("boom {}", 7) });
        assert_eq!(code, BALLAST_EINTERNAL);
        assert_eq!(last_error(), "ballast_x: internal error (panic): boom 7");
    }

    #[test]
    fn runtime_errors_map_to_the_fixed_codes() {
        assert_eq!(code_of(&Error::WouldBlock), BALLAST_EAGAIN);
        assert_eq!(code_of(&Error::ReservedTag(1 << 31)), BALLAST_EINVAL);
        assert_eq!(code_of(&Error::Aborted), BALLAST_EPEER);
        assert_eq!(
            code_of(&Error::TransportUnavailable {
                transport: ballast_runtime::config::TransportKind::Verbs,
                why: "x"
            }),
            BALLAST_EUNSUPPORTED
        );
        let bad_chunk = Error::BadChunk {
            peer: 1,
            tag: 2,
            total: 3,
            offset: 4,
            what: "x".into(),
        };
        assert_eq!(code_of(&bad_chunk), BALLAST_EINTERNAL);
        let panicked = Error::RankPanicked {
            rank: 1,
            message: "x".into(),
        };
        assert_eq!(code_of(&panicked), BALLAST_EINTERNAL);
        assert_eq!(
            code_of(&Error::MemlockTooLow {
                needed_kib: 2,
                limit_kib: 1
            }),
            BALLAST_ENOMEM
        );
    }
}
