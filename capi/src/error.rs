//! Errors at the boundary: [`Fail`] (a code and a message), the mapping of the runtime's
//! errors to the fixed codes, the thread-local last error message and
//! [`ballast_last_error`], and [`boundary`], which turns a failure or a panic into a code.

use std::cell::RefCell;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ballast_runtime::{
    bootstrap::BootstrapError, fabric::FabricError, CommError, ConfigError, Error, ProtocolError,
};

use crate::{
    BALLAST_EAGAIN, BALLAST_ECANCELED, BALLAST_EINTERNAL, BALLAST_EINVAL, BALLAST_ENOMEM, BALLAST_EPEER,
    BALLAST_ETRUNC, BALLAST_EUNSUPPORTED,
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

/// The slot `out` of the C function `func`, cleared to NULL first (so that every later
/// failure of the call leaves NULL there): `Fail::null` when `out` is NULL.
///
/// # Safety
/// `out` must be NULL or writable, and stay so for the call (the C function's contract).
pub(crate) unsafe fn clear_out<'a, T>(func: &str, out: *mut *mut T) -> Result<&'a mut *mut T, Fail> {
    // SAFETY: NULL or writable for the call (the contract); `as_mut` refuses NULL.
    let slot = unsafe { out.as_mut() }.ok_or_else(|| Fail::null(func, "out"))?;
    *slot = std::ptr::null_mut();
    Ok(slot)
}

/// The fixed code of a runtime error, by the variant of the layer that raised it (a layer's
/// error carried by another is looked up as its own): the codes of the one flat error the
/// runtime had before its errors per layer.
pub(crate) fn code_of(e: &Error) -> c_int {
    match e {
        Error::Config(c) => config_code(c),
        Error::Bootstrap(b) => bootstrap_code(b),
        Error::Fabric(f) => fabric_code(f),
        Error::Protocol(p) => protocol_code(p),
        Error::Comm(c) => comm_code(c),
        Error::Alloc(_) | Error::ThreadStart { .. } => BALLAST_ENOMEM,
        _ => BALLAST_EINTERNAL,
    }
}

fn config_code(e: &ConfigError) -> c_int {
    match e {
        ConfigError::TransportUnavailable { .. } => BALLAST_EUNSUPPORTED,
        _ => BALLAST_EINVAL,
    }
}

fn bootstrap_code(e: &BootstrapError) -> c_int {
    match e {
        BootstrapError::InvalidRank { .. }
        | BootstrapError::Env { .. }
        | BootstrapError::Root { .. }
        | BootstrapError::MpiState { .. } => BALLAST_EINVAL,
        _ => BALLAST_EINTERNAL,
    }
}

fn fabric_code(e: &FabricError) -> c_int {
    match e {
        FabricError::InvalidRank { .. } | FabricError::MpiState { .. } => BALLAST_EINVAL,
        FabricError::Alloc(_) | FabricError::MessageAlloc { .. } | FabricError::MemlockTooLow { .. } => {
            BALLAST_ENOMEM
        }
        FabricError::Aborted | FabricError::PeerDied { .. } | FabricError::QueuePairBroken { .. } => {
            BALLAST_EPEER
        }
        FabricError::Bootstrap(b) => bootstrap_code(b),
        _ => BALLAST_EINTERNAL,
    }
}

fn protocol_code(e: &ProtocolError) -> c_int {
    match e {
        ProtocolError::WouldBlock => BALLAST_EAGAIN,
        ProtocolError::UnknownRequest(_) | ProtocolError::CollectiveMismatch { .. } => BALLAST_EINVAL,
        ProtocolError::Alloc(_) => BALLAST_ENOMEM,
        ProtocolError::Aborted { .. } => BALLAST_EPEER,
        ProtocolError::Fabric(f) => fabric_code(f),
        ProtocolError::Config(c) => config_code(c),
        _ => BALLAST_EINTERNAL,
    }
}

fn comm_code(e: &CommError) -> c_int {
    match e {
        CommError::ReservedTag(_)
        | CommError::ModelOverflow { .. }
        | CommError::CollectiveUnfinished { .. }
        | CommError::CollectiveArgument { .. }
        | CommError::CollectiveLength { .. }
        | CommError::ForeignRequest { .. } => BALLAST_EINVAL,
        CommError::Unsupported { .. } => BALLAST_EUNSUPPORTED,
        CommError::PeerGone { .. } => BALLAST_EPEER,
        CommError::Truncated { .. } => BALLAST_ETRUNC,
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
    quiet_panics();
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

/// Makes the panics the library catches quiet (once per process): the message of each is
/// `ballast_last_error`'s, and stderr is the host's. With `BALLAST_DEBUG` set (read by the
/// runtime's `config::debug`, when a panic is caught) they are printed as Rust prints them.
/// The hook is this library's own (a cdylib has its own copy of std: a Rust host's panics
/// are not affected); the crate's unit tests keep the default hook.
#[inline]
pub(crate) fn quiet_panics() {
    #[cfg(not(test))]
    {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if ballast_runtime::env::debug() {
                    previous(info);
                }
            }));
        });
    }
}

/// A panic inside the boundary of a call named `ballast_test_panic` (not in the header):
/// for the test that the panics the library catches are quiet unless `BALLAST_DEBUG` is
/// set (`capi/tests/quiet_panic.rs`). Returns BALLAST_EINTERNAL.
pub fn panic_in_boundary_for_tests() -> c_int {
    boundary("ballast_test_panic", || -> Result<c_int, Fail> {
        panic!("a panic for the test")
    })
}

/// The name and meaning of each code, NUL-terminated for C.
const CODES: [(c_int, &str); 9] = [
    (0, "BALLAST_SUCCESS: no error\0"),
    (
        BALLAST_EINVAL,
        "BALLAST_EINVAL: bad argument (NULL handle, unknown key, bad value, rank or tag out of range)\0",
    ),
    (BALLAST_ENOMEM, "BALLAST_ENOMEM: out of memory\0"),
    (
        BALLAST_EAGAIN,
        "BALLAST_EAGAIN: every pool buffer is in flight; call ballast_progress and retry\0",
    ),
    (
        BALLAST_EPEER,
        "BALLAST_EPEER: a peer rank died or the job was aborted\0",
    ),
    (
        BALLAST_EUNSUPPORTED,
        "BALLAST_EUNSUPPORTED: not supported by this build or setup\0",
    ),
    (
        BALLAST_EINTERNAL,
        "BALLAST_EINTERNAL: internal error (the communicator is poisoned)\0",
    ),
    (
        BALLAST_ETRUNC,
        "BALLAST_ETRUNC: the message is longer than the buffer (nothing was consumed)\0",
    ),
    (
        BALLAST_ECANCELED,
        "BALLAST_ECANCELED: the receive was cancelled (ballast_request_cancel)\0",
    ),
];

/// The name and meaning of return code `code` ("BALLAST_ETRUNC: the message is longer
/// than the buffer ..."; 0 is "BALLAST_SUCCESS: no error") in *out: a static,
/// NUL-terminated ASCII string. The message of one failure, with its details, is
/// ballast_last_error's. Errors: BALLAST_EINVAL for NULL `out`, or a code that is not one
/// of the library's (*out is then "unknown Ballast return code").
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_strerror(code: c_int, out: *mut *const c_char) -> c_int {
    const F: &str = "ballast_strerror";
    boundary(F, || {
        // SAFETY: NULL or writable (the contract).
        let o = unsafe { out.as_mut() }.ok_or_else(|| Fail::null(F, "out"))?;
        match CODES.iter().find(|(c, _)| *c == code) {
            Some((_, text)) => {
                *o = text.as_ptr().cast();
                Ok(0)
            }
            None => {
                *o = c"unknown Ballast return code".as_ptr();
                Err(Fail::inval(format!("{F}: {code} is not a Ballast return code")))
            }
        }
    })
}

/// The library's version in *major, *minor, *patch (each pointer may be NULL), to compare
/// with the header's BALLAST_VERSION_MAJOR/MINOR/PATCH: a program built against another
/// minor version of the header than the library it runs with should refuse to run.
/// Returns 0: it cannot fail (NULL pointers are skipped).
///
/// # Safety
/// Each pointer must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ballast_version(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) -> c_int {
    let v = [
        crate::BALLAST_VERSION_MAJOR,
        crate::BALLAST_VERSION_MINOR,
        crate::BALLAST_VERSION_PATCH,
    ];
    for (p, v) in [major, minor, patch].into_iter().zip(v) {
        // SAFETY: NULL or writable (the contract).
        if let Some(p) = unsafe { p.as_mut() } {
            *p = v;
        }
    }
    0
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
        assert_eq!(code_of(&ProtocolError::WouldBlock.into()), BALLAST_EAGAIN);
        assert_eq!(code_of(&CommError::ReservedTag(1 << 31).into()), BALLAST_EINVAL);
        assert_eq!(code_of(&FabricError::Aborted.into()), BALLAST_EPEER);
        let gone = CommError::PeerGone {
            rank: 0,
            op: "recv",
            peer: Some(1),
            failed: false,
        };
        assert_eq!(code_of(&gone.into()), BALLAST_EPEER);
        let mismatch = ProtocolError::CollectiveMismatch {
            rank: 0,
            peer: 1,
            op: "barrier",
            seq: 1,
            step: 0,
            got: "all_gatherv #1 step 0".into(),
        };
        assert_eq!(code_of(&mismatch.into()), BALLAST_EINVAL);
        assert_eq!(
            code_of(&Error::Config(ConfigError::TransportUnavailable {
                transport: ballast_runtime::TransportKind::Verbs,
                why: "x"
            })),
            BALLAST_EUNSUPPORTED
        );
        let bad_chunk = ProtocolError::BadChunk {
            peer: 1,
            tag: 2,
            total: 3,
            offset: 4,
            what: "x".into(),
        };
        assert_eq!(code_of(&bad_chunk.into()), BALLAST_EINTERNAL);
        let panicked = Error::RankPanicked {
            rank: 1,
            message: "x".into(),
        };
        assert_eq!(code_of(&panicked), BALLAST_EINTERNAL);
        assert_eq!(
            code_of(
                &FabricError::MemlockTooLow {
                    needed_kib: 2,
                    limit_kib: 1
                }
                .into()
            ),
            BALLAST_ENOMEM
        );
    }

    #[test]
    fn each_layer_maps_to_the_codes_of_the_flat_error() {
        let alloc = || ballast_runtime::memory::AllocError {
            what: "x".into(),
            bytes: 1,
            error: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        };
        let cases: Vec<(Error, c_int)> = vec![
            // The configuration.
            (
                ConfigError::Var {
                    var: "BALLAST_BUFFER_COUNT",
                    value: "0".into(),
                    reason: "x".into(),
                }
                .into(),
                BALLAST_EINVAL,
            ),
            // The bootstrap, alone and as the verbs fabric carries it.
            (BootstrapError::Env { what: "x" }.into(), BALLAST_EINVAL),
            (
                FabricError::Bootstrap(BootstrapError::Root {
                    root: "x".into(),
                    what: "x",
                    source: None,
                })
                .into(),
                BALLAST_EINVAL,
            ),
            (
                BootstrapError::Timeout {
                    root: "x".into(),
                    timeout: std::time::Duration::from_secs(1),
                    missing: vec![1],
                    size: 2,
                }
                .into(),
                BALLAST_EINTERNAL,
            ),
            // The fabrics, alone and as the protocol carries them.
            (
                FabricError::InvalidRank {
                    rank: 2,
                    world_size: 2,
                }
                .into(),
                BALLAST_EINVAL,
            ),
            (ProtocolError::Fabric(FabricError::Aborted).into(), BALLAST_EPEER),
            (
                Error::Protocol(ProtocolError::Fabric(FabricError::Aborted)),
                BALLAST_EPEER,
            ),
            (
                FabricError::QueuePairBroken {
                    rank: 0,
                    peer: ballast_runtime::fabric::VerbsPeer::Rank(1),
                }
                .into(),
                BALLAST_EPEER,
            ),
            (
                FabricError::MpiCall {
                    call: "MPI_Isend",
                    code: 1,
                }
                .into(),
                BALLAST_EINTERNAL,
            ),
            (
                FabricError::MpiState { op: "x", what: "x" }.into(),
                BALLAST_EINVAL,
            ),
            // An allocation, whoever made it.
            (alloc().into(), BALLAST_ENOMEM),
            (FabricError::Alloc(alloc()).into(), BALLAST_ENOMEM),
            (Error::Fabric(FabricError::Alloc(alloc())), BALLAST_ENOMEM),
            (Error::Protocol(ProtocolError::Alloc(alloc())), BALLAST_ENOMEM),
            // The protocol.
            (
                ProtocolError::UnknownRequest(ballast_runtime::RequestId::new(7)).into(),
                BALLAST_EINVAL,
            ),
            (
                ProtocolError::NotDirect {
                    rank: 0,
                    dest: 1,
                    bytes: 8,
                }
                .into(),
                BALLAST_EINTERNAL,
            ),
            // The communicator.
            (
                CommError::ModelOverflow { term: "x".into() }.into(),
                BALLAST_EINVAL,
            ),
            (
                CommError::MessageSize {
                    rank: 0,
                    peer: 1,
                    tag: 2,
                    bytes: 3,
                    expected: 4,
                }
                .into(),
                BALLAST_EINTERNAL,
            ),
            // The top.
            (
                Error::ThreadStart {
                    rank: 0,
                    ranks: 1,
                    stack_bytes: 1,
                    error: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
                },
                BALLAST_ENOMEM,
            ),
            (std::io::Error::other("x").into(), BALLAST_EINTERNAL),
        ];
        for (e, code) in cases {
            assert_eq!(code_of(&e), code, "{e:?}");
        }
    }
}
