//! The MPI bootstrap ([`MpiBootstrap`]): the all-gather over Ballast's own duplicate of the
//! world communicator of an MPI job (`MPI_Allgather` of the lengths, then
//! `MPI_Allgatherv` of the bytes in rounds so that no count or displacement overflows an
//! `int`, whatever the total), measuring what MPI kept of the process' memory meanwhile
//! (MPI libraries such as UCX connect to peers and register buffers at first use).

use rsmpi::collective::CommunicatorCollectives as _;
use rsmpi::datatype::PartitionMut;
use rsmpi::topology::{Communicator as _, SimpleCommunicator};
use rsmpi::Count;

use super::{Bootstrap, Kept};
use crate::bootstrap::error::{BootstrapError, Result};
use crate::core::procstatus::ProcStatus;

/// Default bytes received per all-gather round (all ranks' pieces together).
const ROUND_BYTES: usize = 1 << 30;

/// All-gather of byte strings through MPI. MPI must be initialised (`mpi::Mpi::init`, or by the host program).
pub struct MpiBootstrap {
    comm: SimpleCommunicator,
    round_bytes: usize,
    kept: Kept,
}

impl MpiBootstrap {
    /// Duplicates `MPI_COMM_WORLD` (collective). Errors: [`BootstrapError::MpiState`] when MPI is not
    /// initialised or already finalised.
    pub fn new() -> Result<MpiBootstrap> {
        if !rsmpi::environment::is_initialized() || rsmpi::environment::is_finalized() {
            return Err(BootstrapError::MpiState {
                op: "the MPI bootstrap",
                what: "needs an initialised (not finalised) MPI",
            });
        }
        Ok(MpiBootstrap {
            comm: SimpleCommunicator::world().duplicate(),
            round_bytes: ROUND_BYTES,
            kept: Kept::default(),
        })
    }

    /// Caps the bytes moved per round (all ranks together, at least one byte per rank), to
    /// exercise the split that large exchanges take. Default 1 GiB.
    pub fn with_round_bytes(mut self, bytes: usize) -> MpiBootstrap {
        self.round_bytes = bytes.clamp(1, i32::MAX as usize);
        self
    }
}

impl Bootstrap for MpiBootstrap {
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    fn size(&self) -> usize {
        self.comm.size() as usize
    }

    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let before = ProcStatus::read_self().ok();
        let out = self.gather(data);
        if let (Some(b), Ok(a)) = (before, ProcStatus::read_self()) {
            self.kept.add(&b, &a);
        }
        out
    }

    fn kept(&self) -> Kept {
        self.kept
    }
}

impl MpiBootstrap {
    fn gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.size();
        let mut lens = vec![0u64; n];
        self.comm.all_gather_into(&(data.len() as u64), &mut lens[..]);
        let per = (self.round_bytes / n).max(1) as u64;
        let rounds = lens.iter().map(|&l| l.div_ceil(per)).max().unwrap_or(0);
        let mut out: Vec<Vec<u8>> = lens.iter().map(|&l| Vec::with_capacity(l as usize)).collect();
        let mut buf = Vec::new();
        for round in 0..rounds {
            let piece = |len: u64| len.saturating_sub(round * per).min(per);
            let counts: Vec<Count> = lens.iter().map(|&l| piece(l) as Count).collect();
            let displs: Vec<Count> = counts
                .iter()
                .scan(0, |acc, &c| {
                    let d = *acc;
                    *acc += c;
                    Some(d)
                })
                .collect();
            let total: usize = counts.iter().map(|&c| c as usize).sum();
            buf.resize(total, 0);
            let from = (round * per).min(data.len() as u64) as usize;
            let mine = &data[from..from + piece(data.len() as u64) as usize];
            {
                let mut part = PartitionMut::new(&mut buf[..], counts.clone(), &displs[..]);
                self.comm.all_gather_varcount_into(mine, &mut part);
            }
            for (r, o) in out.iter_mut().enumerate() {
                let d = displs[r] as usize;
                o.extend_from_slice(&buf[d..d + counts[r] as usize]);
            }
        }
        Ok(out)
    }
}
