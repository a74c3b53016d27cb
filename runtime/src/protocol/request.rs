//! Request ids: the handle by which a rank's engine (or MPI's native path) knows one of its
//! send or receive requests.

/// The id of one send or receive request of a rank: unique on that rank while the request
/// lives (ids count up from 1). It is the rank's own: it never goes on the wire and means
/// nothing on another rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct RequestId(u64);

impl RequestId {
    /// The id numbered `n` (made by the engine or the MPI native path that owns it).
    #[inline]
    pub const fn new(n: u64) -> RequestId {
        RequestId(n)
    }

    /// Its number (in [`ProtocolError::UnknownRequest`](crate::protocol::error::ProtocolError::UnknownRequest) and
    /// diagnostics).
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
