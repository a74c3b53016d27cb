//! The verbs fabric's registrations: the pool (as it is handed over, [`Register`]), the
//! send-header area (with the pool's first region), the shared receive queue and its slots
//! (plain or XRC, [`VerbsFabric::setup_shared_receive`]), and the locked-memory check in
//! front of each.

use super::{SharedRecv, VerbsFabric, HEADER_BYTES, RECV_BIT};
use crate::core::config::RecvSharing;
use crate::core::pool::{Register, Registration};
use crate::fabric::error::{FabricError, Result};
use crate::fabric::verbs::ffi::register_pool_region;
use crate::fabric::verbs::ibv::{self, Slots};
use crate::fabric::verbs::xrc;

impl VerbsFabric {
    /// Fails unless `more` bytes can be pinned on top of what is pinned already. The limit
    /// is per process: with several ranks as threads of one process their registrations
    /// add up, so the process' VmPin counts (this rank's own count if /proc is unreadable).
    pub(super) fn check_memlock(&self, more: u64) -> Result<()> {
        let process = crate::core::procstatus::ProcStatus::read_self()
            .map(|s| s.vm_pin_kb * 1024)
            .unwrap_or(0);
        let need = self.pinned.max(process) + more;
        match self.memlock_limit {
            Some(limit) if limit != u64::MAX && need > limit => Err(FabricError::MemlockTooLow {
                needed_kib: need.div_ceil(1024),
                limit_kib: limit / 1024,
            }),
            _ => Ok(()),
        }
    }

    /// The engine's receive sharing (`setup_receive`): `per-peer` needs nothing now; `shared`
    /// and `xrc` create the SRQ (in `xrc`, an XRC SRQ in the node's domain) and post all its
    /// slots. Returns the note of an `xrc` that fell back to `shared`.
    pub(super) fn setup_shared_receive(&mut self, sharing: RecvSharing) -> Result<Option<String>> {
        self.sharing = sharing;
        let name = &self.dev.caps.name;
        let note = (self.requested == RecvSharing::Xrc && sharing != RecvSharing::Xrc).then(|| {
            format!("device {name} does not support XRC (IBV_DEVICE_XRC not in device_cap_flags): recv_sharing=xrc falls back to shared")
        });
        if sharing == RecvSharing::PerPeer {
            return Ok(note);
        }
        if !self.dev.caps.srq {
            return Err(FabricError::VerbsDevice {
                device: Some(name.clone()),
                reason: format!(
                    "device {name} has no shared receive queues (max_srq 0): use BALLAST_RECV_SHARING=per-peer"
                ),
            });
        }
        let depth = self.cfg.srq_depth;
        if depth as u32 > self.dev.caps.max_srq_wr {
            return Err(FabricError::VerbsDevice {
                device: Some(name.clone()),
                reason: format!(
                    "BALLAST_SRQ_DEPTH={depth} exceeds the device's max_srq_wr {} ({name})",
                    self.dev.caps.max_srq_wr
                ),
            });
        }
        let bytes = (depth * self.slot_bytes()) as u64;
        self.check_memlock(bytes)?;
        let at = |e: FabricError| ibv::at(e, self.rank, None);
        let srq = if sharing == RecvSharing::Xrc {
            // One domain per node, through a file named after the job and the node.
            let node = self.rank / self.cfg.ranks_per_node;
            let path = xrc::domain_path(&self.mesh.job_tag(), node);
            let xrcd = xrc::open_domain(&self.dev.ctx, &path).map_err(at)?;
            let x = ibv::Srq::create_xrc(&self.dev.ctx, &self.dev.pd, &xrcd, &self.cq, depth as u32)
                .map_err(|e| at(e.into()))?;
            self.xrcd = Some(xrcd);
            self.my_srqn = x.number;
            x.srq
        } else {
            ibv::Srq::create(&self.dev.pd, depth as u32).map_err(|e| at(e.into()))?
        };
        let slots = Slots::new(
            &self.dev.pd,
            depth,
            self.slot_bytes(),
            "the shared receive queue's slots",
        )
        .map_err(|e| at(e.into()))?;
        for i in 0..depth {
            srq.post_recv(&slots, i * slots.slot(), slots.slot(), RECV_BIT | i as u64)
                .map_err(|e| at(e.into()))?;
        }
        self.srq = Some(SharedRecv { srq, slots });
        self.pinned += bytes;
        let b = self.cfg.buffer_size as u64;
        self.bytes.srq_bytes += self.model.srq_fixed_bytes + depth as u64 * (b + self.model.srq_wqe_bytes);
        self.bytes.recv_registered_bytes += depth as u64 * b;
        self.bytes.recv_locked_bytes += depth as u64 * b;
        Ok(note)
    }
}

impl Register for VerbsFabric {
    type Error = FabricError;

    fn register(&mut self, region: &[u8], _lock: bool) -> Result<Registration> {
        let first = self.headers.is_none();
        let mut more = region.len() as u64;
        if first {
            more += (self.header_slots * HEADER_BYTES) as u64;
            if self.requested != RecvSharing::PerPeer {
                more += (self.cfg.srq_depth * self.slot_bytes()) as u64;
            }
        }
        self.check_memlock(more)?;
        // The pool owns `region` and keeps it in place until the fabric (which owns this Mr)
        // is dropped: the Register contract of the pool.
        let mr = register_pool_region(&self.dev.pd, region).map_err(|e| ibv::at(e, self.rank, None))?;
        self.pinned += region.len() as u64;
        self.pool_mrs.push(mr);
        if first {
            let h = Slots::new(
                &self.dev.pd,
                self.header_slots,
                HEADER_BYTES,
                "verbs send-header slots",
            )
            .map_err(|e| ibv::at(e, self.rank, None))?;
            self.pinned += h.len() as u64;
            self.headers = Some(h);
        }
        // Registration pins the pages: they are locked whatever `lock_pool` says.
        Ok(Registration {
            bytes: region.len() as u64,
            locked_bytes: region.len() as u64,
            note: None,
            lock: Default::default(),
        })
    }
}
