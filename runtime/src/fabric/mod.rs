//! The transport-facing interface ([`Fabric`]): what a transport (local threads, MPI,
//! verbs) must provide below the protocol. The protocol above it (eager/chunked sends,
//! credits, tag matching, ordering, endpoint lifetime, footprint accounting) lives in
//! transport-independent modules and is reused unchanged by every transport.
//!
//! The model is that of RDMA send/receive: a rank registers its buffer pool once, opens
//! endpoints (QPs) to peers, posts sends of pool-buffer slices that land in a receive
//! buffer preposted by the receiver (per endpoint, or in a shared receive queue), and
//! polls completions. Small control messages (connect/close handshakes, credit grants)
//! travel on a separate control path that consumes no receive buffer.

use std::ops::ControlFlow;

use crate::core::config::RecvSharing;
use crate::core::footprint::{MemoryLock, MemoryModel};
pub(crate) use crate::core::pool::Register;
use error::Result;
pub use error::{FabricError, FabricKind, Sender, VerbsPeer};
pub use key::PeerKey;

pub(crate) mod error;
mod key;
pub(crate) mod local;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
#[cfg(target_os = "linux")]
pub(crate) mod shm;
pub(crate) mod sizes;
#[cfg(feature = "verbs")]
pub(crate) mod verbs;
pub(crate) mod wire;

/// Envelope of one data packet (one chunk of a message). In the verbs and MPI transports it
/// is carried before the payload (32 bytes, `crate::fabric::wire`); in `local` beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    /// Sending rank.
    pub src: u32,
    /// Message tag.
    pub tag: u32,
    /// Total message length in bytes.
    pub total: u64,
    /// Offset of this chunk in the message, bytes.
    pub offset: u64,
    /// Payload length of this chunk, bytes (`<= buffer_size`).
    pub len: u32,
    /// The sender has more packets queued for this receiver after this one (used by the
    /// shared-queue credit bank to keep credits flowing to busy senders).
    pub more: bool,
}

/// Control messages between two ranks. They consume no receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Open an endpoint pair; `grant` initial credits for the receiver of this message.
    ConnectReq {
        /// Credits granted to the peer.
        grant: u32,
    },
    /// Accept a [`Control::ConnectReq`]; `grant` initial credits.
    ConnectAck {
        /// Credits granted to the peer.
        grant: u32,
    },
    /// Close the endpoint pair; `sent` = data packets this side posted on it. Also the reply.
    Close {
        /// Data packets sent on this endpoint incarnation.
        sent: u64,
    },
    /// Credits: the peer may post this many more packets to my receive buffers.
    Grant {
        /// Number of credits.
        credits: u32,
    },
    /// The sender has data for me and no credit (shared/xrc modes).
    CreditRequest,
    /// I need credits back: return the ones you are not using (shared/xrc modes).
    Revoke,
    /// Unused credits given back after a [`Control::Revoke`].
    Return {
        /// Number of credits.
        credits: u32,
    },
    /// The answer to a [`Control::ConnectReq`] from a rank at its `max_endpoints` cap with
    /// `endpoint_overflow=datagram`: no endpoint; reach me over datagrams.
    Refuse,
    /// The sender aborted the job with `code` (`Communicator::abort` on a transport
    /// without a job-wide abort of its own, [`Fabric::abort_job`]): every call of the
    /// receiver fails from now on. Sent to every other rank, never answered.
    Abort {
        /// The caller's code (an `i32`; on the wire its 32 bits, zero-extended).
        code: i32,
    },
}

impl Control {
    /// Wire form shared by the MPI and verbs transports: a one-byte code and a 64-bit value
    /// (their byte forms are in `crate::fabric::wire`).
    pub fn encode(self) -> ControlWord {
        let (code, value) = match self {
            Control::ConnectReq { grant } => (0, grant as u64),
            Control::ConnectAck { grant } => (1, grant as u64),
            Control::Close { sent } => (2, sent),
            Control::Grant { credits } => (3, credits as u64),
            Control::CreditRequest => (4, 0),
            Control::Revoke => (5, 0),
            Control::Return { credits } => (6, credits as u64),
            Control::Refuse => (7, 0),
            Control::Abort { code } => (8, u64::from(code as u32)),
        };
        ControlWord { code, value }
    }

    /// Inverse of [`Control::encode`] (the two fields of its [`ControlWord`]). Errors ([`FabricError::ControlDecode`]) on an unknown code
    /// or a value that overflows its field.
    pub fn decode(code: u8, v: u64) -> Result<Control> {
        let v32 = || {
            u32::try_from(v).map_err(|_| FabricError::ControlDecode {
                code,
                value: v,
                what: "the value overflows its 32-bit field",
            })
        };
        Ok(match code {
            0 => Control::ConnectReq { grant: v32()? },
            1 => Control::ConnectAck { grant: v32()? },
            2 => Control::Close { sent: v },
            3 => Control::Grant { credits: v32()? },
            4 => Control::CreditRequest,
            5 => Control::Revoke,
            6 => Control::Return { credits: v32()? },
            7 => Control::Refuse,
            8 => Control::Abort { code: v32()? as i32 },
            _ => {
                return Err(FabricError::ControlDecode {
                    code,
                    value: v,
                    what: "unknown control code",
                })
            }
        })
    }
}

/// A control message's wire form ([`Control::encode`]): its code and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlWord {
    /// Which control message (0 to 8).
    pub code: u8,
    /// Its field (a grant, credits, packets sent, an abort code), zero-extended.
    pub value: u64,
}

/// Something that happened on the fabric, reported by [`Fabric::poll`].
#[derive(Debug)]
pub enum Event<'a> {
    /// The send posted with this `wr_id` completed; its pool buffer is free again.
    SendComplete(u64),
    /// A data packet arrived in a posted receive buffer; `payload` is valid only during the
    /// callback, after which the buffer is reposted.
    Arrival {
        /// Its header.
        header: PacketHeader,
        /// Its payload (`header.len` bytes).
        payload: &'a [u8],
    },
    /// A control message from rank `src`.
    Control {
        /// The rank that sent it.
        src: usize,
        /// The message.
        msg: Control,
    },
    /// A whole message moved by the transport itself (the direct path, see
    /// [`Fabric::direct`]): `header.total` bytes in `data`, which becomes the
    /// received message's buffer as it is (no copy). `header.offset` and `header.len` are 0.
    Whole {
        /// Its header.
        header: PacketHeader,
        /// The message.
        data: Vec<u8>,
    },
    /// A whole message on the direct path that the receiver reads out of the sender's
    /// memory itself (shm's CMA): the protocol reads it, once, with `read`, into the
    /// caller's buffer of the receive it binds to when that buffer is lent (one copy in
    /// all), else into a buffer of its own. `header.offset` and `header.len` are 0.
    Remote {
        /// Its header.
        header: PacketHeader,
        /// Its reader.
        read: &'a mut dyn RemoteRead,
    },
    /// A datagram from rank `src` (the connectionless path, [`DatagramPath::post_datagram`]):
    /// its bytes, valid only during the callback.
    Datagram {
        /// The rank that sent it.
        src: usize,
        /// Its bytes.
        bytes: &'a [u8],
    },
}

/// What the callback of [`Fabric::poll`] answers for an event: `Continue` to go on, `Break`
/// to stop the poll at once (the protocol above failed on the event and keeps its own
/// error, so that a fabric never carries a protocol error). A stopped [`Event::Arrival`] is
/// not consumed: its receive buffer is not reposted, and the fabric gives it again, first,
/// at the next poll (local, verbs).
pub type Flow = ControlFlow<()>;

/// A fabric's poll that ended early (inside the fabrics): its callback stopped it, or the
/// fabric failed.
pub(crate) enum Halt {
    /// The callback answered [`Flow::Break`].
    Stop,
    /// The fabric's own error.
    Fail(FabricError),
}

impl From<FabricError> for Halt {
    fn from(e: FabricError) -> Halt {
        Halt::Fail(e)
    }
}

/// The callback's answer as a step a fabric's poll takes with `?`: `Break` ends the poll.
#[inline]
pub(crate) fn go(flow: Flow) -> std::result::Result<(), Halt> {
    match flow {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(Halt::Stop),
    }
}

/// The end of a fabric's poll: the events handled, `0` when the callback stopped it (its
/// owner knows why), or the fabric's error.
#[inline]
pub(crate) fn poll_result(r: std::result::Result<usize, Halt>) -> Result<usize> {
    match r {
        Ok(n) => Ok(n),
        Err(Halt::Stop) => Ok(0),
        Err(Halt::Fail(e)) => Err(e),
    }
}

/// How a peer rank ended, as far as this rank's fabric knows ([`Fabric::peer_end`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEnd {
    /// It finished: it returned from its work after everything it sent was delivered. It
    /// still takes what is sent to it until every rank finished.
    Finished,
    /// It failed: it stopped without finishing. What it had not sent is lost, and it takes
    /// nothing more.
    Failed,
}

/// How the other ranks ended, as far as this rank's fabric knows ([`Fabric::others_end`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OthersEnd {
    /// Rank `rank` failed ([`PeerEnd::Failed`]).
    Failed {
        /// The rank that failed.
        rank: usize,
    },
    /// Every other rank finished ([`PeerEnd::Finished`]).
    AllFinished,
}

/// What a transport can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Transport name.
    pub name: &'static str,
    /// Supports XRC-style node-shared send endpoints.
    pub xrc: bool,
}

/// Transport memory owned by the fabric, by kind, in bytes (what it really allocated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricBytes {
    /// Per-endpoint structures and per-endpoint receive queues (buffers + WQE slots).
    pub endpoint_bytes: u64,
    /// Shared receive queues (buffers + WQE slots).
    pub srq_bytes: u64,
    /// Receive buffers registered (subset of the two above).
    pub recv_registered_bytes: u64,
    /// Receive memory locked.
    pub recv_locked_bytes: u64,
    /// The `mlock` requests of the receive queues held now (see [`MemoryLock`]).
    pub recv_lock: MemoryLock,
    /// The transport's own state per datagram peer (verbs: address handles), added to the
    /// protocol's in [`crate::core::footprint::Footprint::datagram_bytes`].
    pub datagram_bytes: u64,
    /// The shared-memory transport's own segment, the peers' segments it mapped and their
    /// bytes ([`crate::core::footprint::Footprint::shm_segment_bytes`] and the next two).
    pub shm_segment_bytes: u64,
    /// See `shm_segment_bytes`.
    pub shm_peers_mapped: u64,
    /// See `shm_segment_bytes`.
    pub shm_mapped_bytes: u64,
}

/// The transport below the protocol. One instance per rank, driven by one thread.
///
/// Endpoints are keyed by a [`PeerKey`]: the peer rank in `per-peer`/`shared` mode, the
/// remote node in `xrc` mode.
pub trait Fabric: Register<Error = FabricError> + Send {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// What the transport supports.
    fn capabilities(&self) -> Capabilities;
    /// Creates the rank's receive resources for the effective sharing mode (the SRQ in
    /// `shared`/`xrc`), called once before any endpoint. Returns a note about the setup
    /// (e.g. a fallback); a refused lock of the receive memory is in
    /// [`FabricBytes::recv_lock`].
    fn setup_receive(&mut self, sharing: RecvSharing) -> Result<Option<String>>;
    /// Allocates the endpoint `key` (and its receive queue in `per-peer` mode).
    fn open_endpoint(&mut self, key: PeerKey) -> Result<()>;
    /// Frees the endpoint `key`; all its traffic is drained (the protocol guarantees it).
    fn close_endpoint(&mut self, key: PeerKey) -> Result<()>;
    /// Posts `payload` (a pool buffer slice) to rank `dest` through endpoint `key`.
    /// The caller holds a credit for the receive queue it lands in.
    fn post_send(
        &mut self,
        dest: usize,
        key: PeerKey,
        header: &PacketHeader,
        payload: &[u8],
        wr_id: u64,
    ) -> Result<()>;
    /// Sends a control message to rank `dest`.
    fn send_control(&mut self, dest: usize, msg: Control) -> Result<()>;
    /// Polls completions, arrivals and control messages, passing each to `on_event`; returns
    /// how many were handled. When `on_event` answers [`Flow::Break`] the poll returns at
    /// once (with `Ok`: the callback's owner holds the reason).
    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>) -> Flow) -> Result<usize>;
    /// Memory owned by the fabric, as really allocated.
    fn bytes(&self) -> FabricBytes;
    /// The per-object sizes of this fabric: its side only (`engine_endpoint_bytes` and
    /// `per_peer_control_bytes` zero, `control_fixed_bytes` its own structures); the engine
    /// adds its own structures to them.
    fn memory_model(&self) -> MemoryModel;
    /// True when another rank of the job failed and waiting is pointless.
    fn aborted(&self) -> bool;

    /// Aborts the job with `code` (`Communicator::abort`). By default (verbs) it tells
    /// every other rank with a [`Control::Abort`] on the control path and returns: best
    /// effort, a rank that cannot be reached any more (it ended) is skipped. `local` keeps
    /// one notice for its world, which every other rank's poll gives as that control
    /// message. A transport with a job-wide abort of its own (MPI: `MPI_Abort`) calls it
    /// instead and never returns.
    fn abort_job(&mut self, code: i32) -> Result<()> {
        let me = self.rank();
        for p in (0..self.world_size()).filter(|&p| p != me) {
            // A rank that cannot be reached ended: it needs no notice.
            let _ = self.send_control(p, Control::Abort { code });
        }
        Ok(())
    }
    /// Signals that this rank finished its work; returns when `true` all ranks did.
    fn mark_done(&mut self);
    /// True when every rank called [`Fabric::mark_done`].
    fn all_done(&self) -> bool;

    /// `Some` once rank `peer` ended, and how (see [`PeerEnd`]); a rank that ended is
    /// never running again. The engine reads it before its last poll: everything a
    /// finished peer sent is in this rank's queues by the time this says so. Default
    /// `None` (MPI, verbs: a peer's failure is an error of their own calls).
    fn peer_end(&self, peer: usize) -> Option<PeerEnd> {
        let _ = peer;
        None
    }

    /// For a wait any other rank could end (an any-source receive): `Some(`[`OthersEnd::Failed`]`)`
    /// naming a rank that failed, `Some(`[`OthersEnd::AllFinished`]`)` when every other
    /// rank finished, else `None`. Default `None`.
    fn others_end(&self) -> Option<OthersEnd> {
        None
    }

    /// True when [`Fabric::wait_for_arrival`] really blocks: an idle rank then sleeps in
    /// it, using no core, instead of yielding and sleeping in short steps. Default `false`
    /// (MPI and verbs: their polls are the only way to learn of an arrival).
    fn blocks_when_idle(&self) -> bool {
        false
    }

    /// Blocks the calling rank until something may have happened for it (a data packet or
    /// control message arrived, another rank failed, or the last rank called
    /// [`Fabric::mark_done`]) or `timeout` passed; it may return early (spuriously), so
    /// the caller polls again. Only called when [`Fabric::blocks_when_idle`] is true; the
    /// default returns at once.
    fn wait_for_arrival(&self, timeout: std::time::Duration) {
        let _ = timeout;
    }

    /// The credits an idle sender may keep in this rank's shared receive queue of `depth`
    /// buffers (`shared`/`xrc` modes; `protocol::credit`): 1 by default, given back at
    /// every consumed packet. A fabric whose grants are dear asks for more; the protocol
    /// then tops a sender's share up once half of it is used. At most `depth` over the
    /// peers that may send, so that all can hold their share at once.
    fn standing_credits(&self, depth: u32) -> u32 {
        let _ = depth;
        1
    }

    /// True when [`Fabric::post_send`] copies the payload before it returns (MPI): the
    /// engine then frees the pool buffer at once and the fabric reports no
    /// [`Event::SendComplete`] for it (`wr_id` is ignored); a blocking send of one packet
    /// returns without waiting for a completion, as `MPI_Send` does. Default `false`.
    fn copies_payload(&self) -> bool {
        false
    }

    /// The direct (rendezvous) path, when the transport has one (MPI): messages larger
    /// than [`DirectPath::direct_threshold`] then skip pool buffers, chunks and credits.
    /// `None` (the default): every message is chunked. The protocol reads the path's
    /// threshold once, when it starts, and uses the path only if it was offered then.
    fn direct(&mut self) -> Option<&mut dyn DirectPath> {
        None
    }

    /// The connectionless datagram path, when the transport has one. `None` (the
    /// default): no datagrams, and `endpoint_overflow=datagram` falls back to `evict`.
    /// The protocol reads the path's sizes once, when it starts, and uses the path only if
    /// it was offered then.
    fn datagrams(&mut self) -> Option<&mut dyn DatagramPath> {
        None
    }
}

/// The direct (rendezvous) path of a fabric ([`Fabric::direct`]): the transport moves a
/// message larger than [`DirectPath::direct_threshold`] bytes itself, in one transfer from
/// the sender's memory into the receiver's message buffer, instead of as pool-buffer
/// chunks paced by credits. Direct messages use no pool buffer, no receive buffer and no
/// credit (the transport does its own flow control); on the receiving side they arrive as
/// [`Event::Whole`] (MPI) or [`Event::Remote`] (shm's CMA, read by the protocol), in order
/// with the packets of the same sender.
pub trait DirectPath {
    /// Messages larger than this many bytes go direct.
    fn direct_threshold(&self) -> usize;

    /// Sends the whole message `data` to rank `dest` on the direct path, straight from
    /// `data` (no copy), and returns once the transport no longer reads it. While it waits
    /// it keeps polling like [`Fabric::poll`], passing every event to `on_event`, so that
    /// two ranks sending large messages to each other cannot deadlock. When `on_event`
    /// answers [`Flow::Break`] it stops polling, waits until the transport no longer reads
    /// `data`, and returns `Ok` (the callback's owner holds the reason).
    fn send_direct(
        &mut self,
        dest: usize,
        header: &PacketHeader,
        data: &[u8],
        on_event: &mut dyn FnMut(Event<'_>) -> Flow,
    ) -> Result<()>;

    /// Starts sending the owned message `data` to rank `dest` on the direct path; its
    /// completion is reported as [`Event::SendComplete`]`(wr_id)`.
    fn post_direct(&mut self, dest: usize, header: &PacketHeader, data: Vec<u8>, wr_id: u64) -> Result<()>;
}

/// The reader of an [`Event::Remote`] message, used at most once during the callback. A
/// read that fails leaves the fabric to settle the message: a sender that died ends the
/// job ([`FabricError::Aborted`]); memory that cannot be had ([`FabricError::MessageAlloc`],
/// [`RemoteRead::read_vec`] only) leaves the message to be given again by a later poll.
pub trait RemoteRead: std::fmt::Debug {
    /// Reads the message into `buf`, of exactly `header.total` bytes.
    fn read_into(&mut self, buf: &mut [u8]) -> Result<()>;

    /// Reads the message into a new buffer of its own (reserved without aborting).
    fn read_vec(&mut self) -> Result<Vec<u8>>;
}

/// The connectionless datagram path of a fabric ([`Fabric::datagrams`]): a datagram of at
/// most [`DatagramPath::datagram_mtu`] bytes to any rank without an endpoint; received
/// ones come from [`Fabric::poll`] as [`Event::Datagram`].
pub trait DatagramPath {
    /// The largest datagram, bytes.
    fn datagram_mtu(&self) -> usize;

    /// True when the transport may drop a datagram (no receive posted, a test drop model);
    /// the protocol's acknowledgements and retransmissions recover it. Default true.
    fn datagrams_can_drop(&self) -> bool {
        true
    }

    /// Sends datagram `bytes` (at most [`DatagramPath::datagram_mtu`]) to rank `dest`,
    /// copied before it returns; it may be dropped.
    fn post_datagram(&mut self, dest: usize, bytes: &[u8]) -> Result<()>;
}

/// The receive-sharing mode a transport runs ([`effective_sharing`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectiveSharing {
    /// The mode run.
    pub mode: RecvSharing,
    /// Why it is not the one asked for, when it is not.
    pub note: Option<String>,
}

/// Decides the effective sharing mode: `xrc` on a transport without XRC falls back to
/// `shared` with an explanatory note.
pub fn effective_sharing(requested: RecvSharing, caps: Capabilities) -> EffectiveSharing {
    if requested == RecvSharing::Xrc && !caps.xrc {
        EffectiveSharing {
            mode: RecvSharing::Shared,
            note: Some(format!(
                "transport `{}` cannot do xrc; falling back to recv_sharing=shared",
                caps.name
            )),
        }
    } else {
        EffectiveSharing {
            mode: requested,
            note: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xrc_falls_back_to_shared_when_unsupported() {
        let no = Capabilities {
            name: "mpi",
            xrc: false,
        };
        let EffectiveSharing { mode, note } = effective_sharing(RecvSharing::Xrc, no);
        assert_eq!(mode, RecvSharing::Shared);
        assert!(note.unwrap().contains("mpi"));
        let yes = Capabilities {
            name: "local",
            xrc: true,
        };
        let unchanged = |mode| EffectiveSharing { mode, note: None };
        assert_eq!(
            effective_sharing(RecvSharing::Xrc, yes),
            unchanged(RecvSharing::Xrc)
        );
        assert_eq!(
            effective_sharing(RecvSharing::PerPeer, no),
            unchanged(RecvSharing::PerPeer)
        );
    }

    #[test]
    fn control_encode_decode_round_trip() {
        for c in [
            Control::ConnectReq { grant: 5 },
            Control::ConnectAck { grant: 0 },
            Control::Close { sent: u64::MAX - 1 },
            Control::Grant { credits: u32::MAX },
            Control::CreditRequest,
            Control::Revoke,
            Control::Return { credits: 9 },
            Control::Refuse,
            Control::Abort { code: 3 },
            Control::Abort { code: -1 },
            Control::Abort { code: i32::MIN },
        ] {
            let w = c.encode();
            assert_eq!(Control::decode(w.code, w.value).unwrap(), c);
        }
        assert_eq!(
            Control::Abort { code: -1 }.encode(),
            ControlWord {
                code: 8,
                value: 0xffff_ffff
            }
        );
        assert!(Control::decode(8, 1 << 32).is_err());
        assert!(Control::decode(9, 0).is_err());
        assert!(Control::decode(0, 1 << 33).is_err());
    }
}
