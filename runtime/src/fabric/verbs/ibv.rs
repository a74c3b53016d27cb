//! The verbs fabric's view of `ballast-ibv`, the safe layer over libibverbs (a crate of its
//! own): its types under the paths the fabric uses (`ibv::Qp`, `ibv::attr`, `ibv::sys`),
//! and its errors as the runtime's, with the rank and peer added ([`at`]). The texts are
//! unchanged: [`IbvError::Call`] becomes [`FabricError::VerbsCall`], [`IbvError::RecvRange`]
//! [`FabricError::VerbsRecvRange`], [`IbvError::Alloc`] [`FabricError::Alloc`].

pub(crate) use ballast_ibv::*;

use crate::core::memory::AllocError;
use crate::fabric::error::FabricError;

impl From<IbvError> for FabricError {
    fn from(e: IbvError) -> FabricError {
        match e {
            IbvError::Call { call, object, source } => FabricError::VerbsCall {
                verb: call,
                object,
                rank: None,
                peer: None,
                source,
            },
            IbvError::RecvRange { len, offset, area } => FabricError::VerbsRecvRange { len, offset, area },
            IbvError::Alloc { what, bytes, error } => FabricError::Alloc(AllocError { what, bytes, error }),
        }
    }
}

impl<S> From<Box<Failed<S>>> for FabricError {
    fn from(f: Box<Failed<S>>) -> FabricError {
        f.error.into()
    }
}

/// `e` as the runtime's error, with the rank (and the peer, if given) filled in when it is a
/// [`FabricError::VerbsCall`]; other errors pass unchanged.
pub(crate) fn at(e: impl Into<FabricError>, r: usize, p: Option<usize>) -> FabricError {
    match e.into() {
        FabricError::VerbsCall {
            verb,
            object,
            peer,
            source,
            ..
        } => FabricError::VerbsCall {
            verb,
            object,
            rank: Some(r),
            peer: p.or(peer),
            source,
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_errors_keep_their_texts_and_gain_rank_and_peer() {
        let e = IbvError::Call {
            call: "ibv_modify_qp",
            object: "QP 17 to RTR".into(),
            source: std::io::Error::from_raw_os_error(22),
        };
        let bare = e.to_string();
        let wrapped = FabricError::from(e);
        assert_eq!(wrapped.to_string(), bare);
        assert_eq!(bare, "verbs: ibv_modify_qp(QP 17 to RTR) failed");
        let placed = at(wrapped, 3, Some(1));
        assert_eq!(
            placed.to_string(),
            "verbs: rank 3: ibv_modify_qp(QP 17 to RTR) toward rank 1 failed"
        );
        let FabricError::VerbsCall { source, .. } = &placed else {
            panic!("{placed:?}")
        };
        assert_eq!(source.raw_os_error(), Some(22));

        let range = IbvError::RecvRange {
            len: 64,
            offset: 4096,
            area: 4096,
        };
        let text = range.to_string();
        let wrapped = at(range, 0, None);
        assert!(
            matches!(wrapped, FabricError::VerbsRecvRange { len: 64, .. }),
            "{wrapped:?}"
        );
        assert_eq!(wrapped.to_string(), text);

        let alloc = IbvError::Alloc {
            what: "the raw ping-pong's buffers".into(),
            bytes: 1 << 40,
            error: std::io::Error::from_raw_os_error(12),
        };
        let text = alloc.to_string();
        let wrapped = FabricError::from(alloc);
        assert!(
            matches!(&wrapped, FabricError::Alloc(a) if a.bytes == 1 << 40),
            "{wrapped:?}"
        );
        assert_eq!(wrapped.to_string(), text);
    }
}
