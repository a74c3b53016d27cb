//! [`PeerKey`]: what a fabric's endpoint leads to, a peer rank or (in `xrc` mode) a remote
//! node.

/// The key of an endpoint: the peer rank in `per-peer` and `shared` mode, the remote node
/// (rank / `ranks_per_node`) in `xrc` mode, where one endpoint serves every rank of a node.
/// Ordered by kind (ranks first), then by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerKey {
    /// The endpoint toward this rank.
    Rank(usize),
    /// The endpoint toward every rank of this node (`xrc`).
    Node(usize),
}

impl PeerKey {
    /// The rank or node number (the key's number in [`FabricError::Endpoint`](crate::fabric::error::FabricError::Endpoint)).
    #[inline]
    pub const fn index(self) -> usize {
        match self {
            PeerKey::Rank(i) | PeerKey::Node(i) => i,
        }
    }
}
