//! The footprint: transport memory of one rank by kind, as accounted by a running
//! communicator (`Communicator::footprint`, in the comm layer above) and as predicted from the
//! configuration alone ([`TransportConfig::predict`]), the formula the balancer charges
//! per rank.
//!
//! The formula of [`TransportConfig::predict`] and the sizes it uses are documented with
//! it, in the `model` module of the communicator layer (`comm`).

use crate::core::config::{RecvSharing, TransportConfig};

/// Per-object sizes of one transport, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryModel {
    /// Per endpoint, transport side (the QP: send ring, context).
    pub endpoint_fixed_bytes: u64,
    /// Per endpoint, protocol side (the endpoint table entry).
    pub engine_endpoint_bytes: u64,
    /// Per per-peer receive queue, excluding its buffers and WQEs.
    pub rq_fixed_bytes: u64,
    /// Per receive WQE of a per-peer receive queue, beyond the buffer itself.
    pub rq_wqe_bytes: u64,
    /// Per shared receive queue, excluding its buffers and WQEs.
    pub srq_fixed_bytes: u64,
    /// Per receive WQE of a shared receive queue, beyond the buffer itself.
    pub srq_wqe_bytes: u64,
    /// Per rank: protocol engine, transport object, completion queue.
    pub control_fixed_bytes: u64,
    /// Per connected peer: sender state and credit-bank entry.
    pub per_peer_control_bytes: u64,
}

/// Transport memory of one rank by kind (bytes) and endpoint counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Registered buffer pool.
    pub pool_bytes: u64,
    /// Registered memory: pool plus receive buffers (a view, not added to the total).
    pub registered_bytes: u64,
    /// Locked memory (a view, not added to the total; predicted as what would be locked).
    pub locked_bytes: u64,
    /// Per-endpoint structures and per-endpoint receive queues.
    pub endpoint_bytes: u64,
    /// Shared receive queues.
    pub srq_bytes: u64,
    /// Control state (engine, per-peer protocol state).
    pub control_bytes: u64,
    /// Endpoints live now.
    pub endpoints_live: u64,
    /// Most endpoints live at once.
    pub endpoints_peak: u64,
    /// Endpoints ever opened.
    pub endpoints_opened: u64,
    /// Distinct peers communicated with.
    pub peers_connected: u64,
    /// Peers with datagram state (reached without an endpoint past `max_endpoints` with
    /// `endpoint_overflow=datagram`, either way).
    pub datagram_peers: u64,
    /// Their fixed state (`datagram_peers` x `protocol::datagram::PEER_STATE_BYTES`);
    /// their unacknowledged and out-of-order datagrams are in pool buffers.
    pub datagram_bytes: u64,
    /// The shared-memory transport: this rank's own segment, which its node's other
    /// processes map (a view, not added to the total: it is the `srq_bytes`); 0 elsewhere.
    pub shm_segment_bytes: u64,
    /// Node-local peers whose segments this rank has mapped (at its first endpoint to each:
    /// the mapping stays for the communicator's life); 0 off shm.
    pub shm_peers_mapped: u64,
    /// Their segments' bytes (a view, not added to the total: each is charged to its owner's
    /// `shm_segment_bytes`; resident pages are shared, so per-node memory is the sum of the
    /// segments, not of the mappings); 0 off shm.
    pub shm_mapped_bytes: u64,
}

impl Footprint {
    /// Pool + endpoints + shared receive queues + control + datagram state, bytes.
    pub fn total_bytes(&self) -> u64 {
        // Saturating: a prediction that overflows holds u64::MAX (`TransportConfig::predict`).
        [
            self.endpoint_bytes,
            self.srq_bytes,
            self.control_bytes,
            self.datagram_bytes,
        ]
        .into_iter()
        .fold(self.pool_bytes, u64::saturating_add)
    }

    /// The inverse of [`Footprint::fields`] (values in its order; missing ones are 0).
    pub fn from_fields(v: &[u64]) -> Footprint {
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        Footprint {
            pool_bytes: at(0),
            registered_bytes: at(1),
            locked_bytes: at(2),
            endpoint_bytes: at(3),
            srq_bytes: at(4),
            control_bytes: at(5),
            endpoints_live: at(6),
            endpoints_peak: at(7),
            endpoints_opened: at(8),
            peers_connected: at(9),
            datagram_peers: at(10),
            datagram_bytes: at(11),
            shm_segment_bytes: at(12),
            shm_peers_mapped: at(13),
            shm_mapped_bytes: at(14),
        }
    }

    /// Field names and values, for tables and JSON.
    pub fn fields(&self) -> [FootprintField; 15] {
        [
            FootprintField {
                name: "pool_bytes",
                value: self.pool_bytes,
            },
            FootprintField {
                name: "registered_bytes",
                value: self.registered_bytes,
            },
            FootprintField {
                name: "locked_bytes",
                value: self.locked_bytes,
            },
            FootprintField {
                name: "endpoint_bytes",
                value: self.endpoint_bytes,
            },
            FootprintField {
                name: "srq_bytes",
                value: self.srq_bytes,
            },
            FootprintField {
                name: "control_bytes",
                value: self.control_bytes,
            },
            FootprintField {
                name: "endpoints_live",
                value: self.endpoints_live,
            },
            FootprintField {
                name: "endpoints_peak",
                value: self.endpoints_peak,
            },
            FootprintField {
                name: "endpoints_opened",
                value: self.endpoints_opened,
            },
            FootprintField {
                name: "peers_connected",
                value: self.peers_connected,
            },
            FootprintField {
                name: "datagram_peers",
                value: self.datagram_peers,
            },
            FootprintField {
                name: "datagram_bytes",
                value: self.datagram_bytes,
            },
            FootprintField {
                name: "shm_segment_bytes",
                value: self.shm_segment_bytes,
            },
            FootprintField {
                name: "shm_peers_mapped",
                value: self.shm_peers_mapped,
            },
            FootprintField {
                name: "shm_mapped_bytes",
                value: self.shm_mapped_bytes,
            },
        ]
    }
}

/// One field of a [`Footprint`] ([`Footprint::fields`]): its name and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FootprintField {
    /// The field's name (`pool_bytes`, ...).
    pub name: &'static str,
    /// Its value: bytes, or a count (`endpoints_live`, `peers_connected`, ...).
    pub value: u64,
}

/// What became of the memory Ballast asked the OS to lock: with `lock_pool` on, the `local`
/// transport locks every registered region (pool chunks, receive queues) with `mlock`, and
/// the OS may refuse (the soft `RLIMIT_MEMLOCK`, `ulimit -l`, of a user without
/// `CAP_IPC_LOCK`). A refusal is not fatal: the region stays registered but unlocked, and
/// is counted here. Verbs registrations pin instead (a refusal there is an error) and the
/// MPI transport locks nothing of Ballast's: both leave this empty. Bytes are of regions
/// held now (a closed endpoint's queue leaves); the request counts are since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryLock {
    /// Bytes held now that Ballast asked to lock.
    pub asked_bytes: u64,
    /// Of `asked_bytes`, the bytes the OS locked.
    pub locked_bytes: u64,
    /// Lock requests made (one per region), since the start.
    pub requests: u64,
    /// Lock requests the OS refused, since the start.
    pub refused: u64,
    /// The soft `RLIMIT_MEMLOCK` in bytes read at the first refusal (`u64::MAX`:
    /// unlimited); `None` without a refusal or when it could not be read.
    pub limit_bytes: Option<u64>,
    /// The OS error number (errno) of the first refusal.
    pub errno: Option<i32>,
}

/// The state of a [`MemoryLock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockStatus {
    /// Nothing was asked to be locked (`lock_pool` off, or a transport that does not mlock).
    NotAsked,
    /// Everything asked is locked.
    Locked,
    /// Some of what was asked is locked, the rest was refused.
    Partial,
    /// Locking was asked and refused for all of it.
    NotLocked,
}

impl LockStatus {
    /// `not asked`, `locked`, `partially locked`, `not locked`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockStatus::NotAsked => "not asked",
            LockStatus::Locked => "locked",
            LockStatus::Partial => "partially locked",
            LockStatus::NotLocked => "not locked",
        }
    }
}

impl std::fmt::Display for LockStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `1 peer`, `2 peers`.
fn count(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// `N B (x.y MiB)`.
fn bytes_text(b: u64) -> String {
    format!("{b} B ({:.1} MiB)", b as f64 / (1024.0 * 1024.0))
}

impl MemoryLock {
    /// Records a lock request of `bytes` that the OS granted.
    pub fn record_locked(&mut self, bytes: u64) {
        self.requests += 1;
        self.asked_bytes += bytes;
        self.locked_bytes += bytes;
    }

    /// Records a lock request of `bytes` that the OS refused with the error `errno` while
    /// the soft limit was `limit` bytes (`u64::MAX` = unlimited).
    pub fn record_refused(&mut self, bytes: u64, errno: Option<i32>, limit: Option<u64>) {
        if self.refused == 0 {
            self.errno = errno;
            self.limit_bytes = limit;
        }
        self.requests += 1;
        self.refused += 1;
        self.asked_bytes += bytes;
    }

    /// Forgets a region of `bytes` that is freed (`locked`: it had been locked).
    pub fn release(&mut self, bytes: u64, locked: bool) {
        self.asked_bytes = self.asked_bytes.saturating_sub(bytes);
        if locked {
            self.locked_bytes = self.locked_bytes.saturating_sub(bytes);
        }
    }

    /// Adds `other` (another rank's, or another part's): bytes and counts summed, the
    /// first refusal's limit and error kept.
    pub fn add(&mut self, other: &MemoryLock) {
        if self.refused == 0 && other.refused > 0 {
            self.errno = other.errno;
            self.limit_bytes = other.limit_bytes;
        }
        self.asked_bytes += other.asked_bytes;
        self.locked_bytes += other.locked_bytes;
        self.requests += other.requests;
        self.refused += other.refused;
    }

    /// What the bytes held now say.
    pub fn status(&self) -> LockStatus {
        if self.asked_bytes == 0 {
            LockStatus::NotAsked
        } else if self.locked_bytes >= self.asked_bytes {
            LockStatus::Locked
        } else if self.locked_bytes == 0 {
            LockStatus::NotLocked
        } else {
            LockStatus::Partial
        }
    }

    /// The OS error of the first refusal, as text (`Cannot allocate memory (os error 12)`).
    pub fn error_text(&self) -> Option<String> {
        (self.refused > 0).then(|| match self.errno {
            Some(e) => std::io::Error::from_raw_os_error(e).to_string(),
            None => "unknown error".to_string(),
        })
    }

    /// The limit as text: `8388608 B (8.0 MiB)`, `unlimited` or `unknown`.
    pub fn limit_text(&self) -> String {
        match self.limit_bytes {
            Some(u64::MAX) => "unlimited".to_string(),
            Some(b) => bytes_text(b),
            None => "unknown".to_string(),
        }
    }

    /// A sentence for a refused or partial lock, naming the bytes asked and locked and the
    /// limit; `None` when no request was refused.
    pub fn note(&self) -> Option<String> {
        if self.refused == 0 {
            return None;
        }
        let what = match self.status() {
            LockStatus::Partial => "memory partially locked",
            LockStatus::NotLocked => "memory not locked",
            // The refused regions are freed since (closed endpoints).
            LockStatus::Locked | LockStatus::NotAsked => "memory lock refused earlier",
        };
        Some(format!(
            "{what}: asked to lock {}, locked {}; RLIMIT_MEMLOCK (soft) {}; {} of {} mlock requests refused ({}): that memory is registered but not locked (raise `ulimit -l`, or set BALLAST_LOCK_POOL=off)",
            bytes_text(self.asked_bytes),
            bytes_text(self.locked_bytes),
            self.limit_text(),
            self.refused,
            self.requests,
            self.error_text().unwrap_or_default()
        ))
    }
}

impl Footprint {
    /// Why this (accounted) footprint differs from `predicted` for `cfg`, cause first: the
    /// counts that differ (peers connected, endpoints live, with what makes them differ),
    /// then the byte kinds that differ. Empty when the totals are equal.
    pub fn differences(&self, predicted: &Footprint, cfg: &TransportConfig) -> Vec<String> {
        let (m, p) = (self, predicted);
        let mut why = Vec::new();
        // Equal bytes with another split of endpoints and datagram peers (they may weigh
        // the same: 88 B each on local with shared receives) still differ from the model.
        let same_counts = (m.peers_connected, m.endpoints_live, m.datagram_peers)
            == (p.peers_connected, p.endpoints_live, p.datagram_peers);
        if m.total_bytes() == p.total_bytes() && same_counts {
            return why;
        }
        if m.peers_connected != p.peers_connected {
            why.push(format!(
                "{} connected, {} predicted",
                count(m.peers_connected, "peer"),
                p.peers_connected
            ));
        }
        if m.endpoints_live != p.endpoints_live {
            let closed = m.endpoints_opened.saturating_sub(m.endpoints_live);
            // The datagram path ran (it never evicts) when either side has datagram peers.
            let datagram = cfg.max_endpoints > 0 && (m.datagram_peers > 0 || p.datagram_peers > 0);
            let cause = if datagram && m.endpoints_live < p.endpoints_live {
                format!(
                    " (endpoint_overflow=datagram, max_endpoints={}: {} endpoints opened, {closed} closed: connects refused by full peers and endpoints given up to promoted datagram peers, so this rank holds fewer than the cap; the model counts the cap)",
                    cfg.max_endpoints, m.endpoints_opened
                )
            } else if cfg.max_endpoints > 0 && closed > 0 {
                format!(
                    " (max_endpoints={} evicts: {} endpoints opened, {closed} closed, so fewer than the cap are live when measured; the model counts the cap)",
                    cfg.max_endpoints, m.endpoints_opened
                )
            } else if cfg.recv_sharing == RecvSharing::Xrc {
                " (xrc: the model charges one send endpoint per peer node, a rank that only receives opens none)".to_string()
            } else {
                String::new()
            };
            why.push(format!(
                "{} live, {} predicted{cause}",
                count(m.endpoints_live, "endpoint"),
                p.endpoints_live
            ));
        }
        if m.datagram_peers != p.datagram_peers {
            why.push(format!(
                "{} with datagram state, {} predicted (endpoint_overflow=datagram: a peer that was full when this rank connected, that reached this rank by datagram, or that was promoted to an endpoint keeps its datagram state; the model gives the peers beyond the cap)",
                count(m.datagram_peers, "peer"),
                p.datagram_peers
            ));
        }
        if m.pool_bytes != p.pool_bytes {
            let cause = if cfg.pool_growth && m.pool_bytes > p.pool_bytes {
                " (pool_growth added chunks; the model counts the initial pool)"
            } else {
                ""
            };
            why.push(format!(
                "pool {} B, predicted {} B{cause}",
                m.pool_bytes, p.pool_bytes
            ));
        }
        for (name, a, b) in [
            ("endpoint", m.endpoint_bytes, p.endpoint_bytes),
            ("shared receive queue", m.srq_bytes, p.srq_bytes),
            ("control", m.control_bytes, p.control_bytes),
            ("datagram state", m.datagram_bytes, p.datagram_bytes),
        ] {
            if a != b {
                why.push(format!("{name} {a} B, predicted {b} B"));
            }
        }
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_lock_counts_refusals_and_says_asked_locked_and_limit() {
        let mut l = MemoryLock::default();
        assert_eq!((l.status(), l.note()), (LockStatus::NotAsked, None));
        l.record_locked(4 << 20);
        assert_eq!((l.status(), l.note()), (LockStatus::Locked, None));
        l.record_refused(1 << 20, Some(12), Some(8 << 20));
        l.record_refused(1 << 20, Some(1), Some(1));
        assert_eq!(
            (l.asked_bytes, l.locked_bytes, l.requests, l.refused),
            (6 << 20, 4 << 20, 3, 2)
        );
        assert_eq!(
            (l.status(), l.errno, l.limit_bytes),
            (LockStatus::Partial, Some(12), Some(8 << 20)),
            "first refusal kept"
        );
        let n = l.note().unwrap();
        assert!(n.starts_with("memory partially locked: asked to lock 6291456 B (6.0 MiB), locked 4194304 B (4.0 MiB); RLIMIT_MEMLOCK (soft) 8388608 B (8.0 MiB); 2 of 3 mlock requests refused (Cannot allocate memory (os error 12))"), "{n}");
        // Summing ranks: the first refusal's limit and error are kept.
        let mut none = MemoryLock::default();
        none.record_refused(100, Some(12), Some(u64::MAX));
        assert_eq!(none.status(), LockStatus::NotLocked);
        assert!(
            none.note()
                .unwrap()
                .contains("memory not locked: asked to lock 100 B")
                && none.limit_text() == "unlimited"
        );
        let mut sum = MemoryLock::default();
        sum.add(&MemoryLock {
            asked_bytes: 5,
            locked_bytes: 5,
            requests: 1,
            ..Default::default()
        });
        sum.add(&none);
        sum.add(&l);
        assert_eq!(
            (
                sum.asked_bytes,
                sum.locked_bytes,
                sum.requests,
                sum.refused,
                sum.limit_bytes
            ),
            (105 + (6 << 20), 5 + (4 << 20), 5, 3, Some(u64::MAX))
        );
        // A refused region freed since: locked again, the refusal still told.
        none.release(100, false);
        assert_eq!(none.status(), LockStatus::NotAsked);
        assert!(none
            .note()
            .unwrap()
            .starts_with("memory lock refused earlier: asked to lock 0 B"));
    }
}
