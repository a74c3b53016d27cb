//! The errors of the layer: a failing libibverbs call, a receive outside its area, memory
//! that could not be mapped. Their texts are the ones the runtime shows for the same failure
//! (the runtime adds the rank and the peer when it wraps them).

/// What went wrong in a call of this crate. Not `#[non_exhaustive]`: the runtime maps every
/// kind to its own error with the same text, and a new kind must make it say how.
#[derive(Debug, thiserror::Error)]
pub enum IbvError {
    /// A libibverbs call failed (`call`, e.g. `ibv_modify_qp`), on `object` (what it was
    /// called on or for, with the sizes asked, e.g. `QP 17 to RTR`); `source` is the errno
    /// the call reported.
    #[error("verbs: {call}({object}) failed")]
    Call {
        /// The libibverbs function.
        call: &'static str,
        /// What it was called on or for, with the sizes asked.
        object: Box<str>,
        /// The error the call reported (errno).
        #[source]
        source: std::io::Error,
    },
    /// A receive work request would reach outside its registered area (nothing posted).
    #[error("verbs: receive of {len} bytes at offset {offset} outside a registered area of {area} bytes")]
    RecvRange {
        /// Bytes asked for.
        len: usize,
        /// Offset in the area, bytes.
        offset: usize,
        /// The area's size, bytes.
        area: usize,
    },
    /// The memory of a [`crate::Slots`] area could not be mapped (`bytes` is `u64::MAX` when
    /// its size overflows).
    #[error("cannot allocate {bytes} bytes for {what}: {error}")]
    Alloc {
        /// What the area was for, with the settings that size it.
        what: String,
        /// Bytes asked for.
        bytes: u64,
        /// The kernel's answer (shown in the message, not chained as a source).
        error: std::io::Error,
    },
}

impl IbvError {
    /// The [`IbvError::Call`] of `call` on `object`, with the errno of the last failing call.
    pub(crate) fn last(call: &'static str, object: impl Into<String>) -> IbvError {
        IbvError::call(call, object, std::io::Error::last_os_error())
    }

    /// The [`IbvError::Call`] of `call` on `object` from a returned error code (an errno,
    /// positive or negative).
    pub(crate) fn rc(call: &'static str, object: impl Into<String>, rc: i32) -> IbvError {
        IbvError::call(
            call,
            object,
            std::io::Error::from_raw_os_error(rc.saturating_abs()),
        )
    }

    pub(crate) fn call(call: &'static str, object: impl Into<String>, source: std::io::Error) -> IbvError {
        IbvError::Call {
            call,
            object: object.into().into_boxed_str(),
            source,
        }
    }
}

/// The result of this crate's calls.
pub type Result<T> = std::result::Result<T, IbvError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_name_the_call_object_and_sizes() {
        let e = IbvError::rc("ibv_modify_qp", "QP 17 to RTR", -22);
        assert_eq!(e.to_string(), "verbs: ibv_modify_qp(QP 17 to RTR) failed");
        let IbvError::Call { source, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(source.raw_os_error(), Some(22));
        let r = IbvError::RecvRange {
            len: 64,
            offset: 4096,
            area: 4096,
        };
        assert_eq!(
            r.to_string(),
            "verbs: receive of 64 bytes at offset 4096 outside a registered area of 4096 bytes"
        );
    }
}
