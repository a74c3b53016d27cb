//! The verbs transport's ranks: this process' [`Communicator`] over verbs
//! ([`communicator`], one rank per process), its [`finish`], and [`run_ranks`], several
//! ranks per process as threads.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::threads::{spawn, ThreadOpts};
use super::RankOutput;
use crate::bootstrap::Bootstrap;
use crate::comm::error::{Error, FabricError, Result};
use crate::comm::Communicator;
use crate::core::config::RuntimeConfig;
use crate::fabric::verbs::control::ControlListener;
use crate::fabric::verbs::{self, VerbsFabric};

/// Rank `rank`'s communicator of `n` over verbs: its control mesh from listener `l` and
/// every rank's control address, its fabric stopping when `abort` is set.
pub(crate) fn make_comm(
    rank: usize,
    n: usize,
    cfg: &RuntimeConfig,
    l: ControlListener,
    addrs: Vec<SocketAddr>,
    abort: Arc<AtomicBool>,
) -> Result<Communicator> {
    let mesh = verbs::control::Mesh::new(rank, l, addrs, cfg.bootstrap().timeout);
    let fabric = VerbsFabric::new(rank, n, cfg, mesh, abort, wanted(cfg.transport()))?;
    Communicator::new(Box::new(fabric), cfg.transport())
}

/// This process' [`Communicator`] over verbs, one Ballast rank per process (rank and size
/// from `boot`). Collective: every process must call it. Errors: [`FabricError::VerbsDevice`](crate::comm::error::FabricError::VerbsDevice) and [`FabricError::VerbsCall`](crate::comm::error::FabricError::VerbsCall) (device),
/// [`FabricError::MemlockTooLow`](crate::comm::error::FabricError::MemlockTooLow), [`FabricError::ControlAddresses`](crate::comm::error::FabricError::ControlAddresses).
pub fn communicator(boot: &mut dyn Bootstrap, config: &RuntimeConfig) -> Result<Communicator> {
    let cfg = verbs::verbs_config(config)?;
    let (rank, n) = (boot.rank(), boot.size());
    let (mut ls, addrs) = verbs::exchange_addresses(boot, n, &[rank], verbs::control_host(cfg.bootstrap()))?;
    make_comm(
        rank,
        n,
        &cfg,
        ls.pop().expect("one listener"),
        addrs,
        Arc::new(AtomicBool::new(false)),
    )
}

/// Delivers `comm`'s sends, waits until every rank finished, then frees it.
pub fn finish(mut comm: Communicator) -> Result<()> {
    comm.finalize()
}

/// Runs `f` on `n` Ballast ranks over verbs spread over the processes of `boot` (rank `r`
/// in process `r % size`, several per process as threads named `ballast-verbs-{r}`;
/// `ballast_runtime::verbs::run_ranks`). Collective. Returns this process' results, a
/// [`RankOutput`] per rank, in ascending rank order. If a rank fails, this process' other ranks stop
/// with [`FabricError::Aborted`](crate::comm::error::FabricError::Aborted), the others see its control connections end, and the first real
/// error is returned. Errors also: [`FabricError::InvalidRank`](crate::comm::error::FabricError::InvalidRank) for `n == 0`, those of
/// `crate::fabric::verbs::communicator`.
pub fn run_ranks<R, F>(
    boot: &mut dyn Bootstrap,
    n: usize,
    config: &RuntimeConfig,
    f: F,
) -> Result<Vec<RankOutput<R>>>
where
    F: Fn(&mut Communicator) -> R + Sync,
    R: Send,
{
    if n == 0 {
        return Err(Error::Fabric(FabricError::InvalidRank {
            rank: 0,
            world_size: 0,
        }));
    }
    let cfg = verbs::verbs_config(config)?;
    let (p, procs) = (boot.rank(), boot.size());
    let local: Vec<usize> = (p..n).step_by(procs).collect();
    let (listeners, addrs) =
        verbs::exchange_addresses(boot, n, &local, verbs::control_host(cfg.bootstrap()))?;
    let abort = Arc::new(AtomicBool::new(false));
    let opts = ThreadOpts {
        name: Some("ballast-verbs"),
        inline_single: false,
    };
    spawn(
        local.into_iter().zip(listeners).collect(),
        opts,
        &|| abort.store(true, Ordering::Relaxed),
        |r, l| make_comm(r, n, &cfg, l, addrs.clone(), abort.clone()),
        &f,
    )
}

/// Whether the verbs fabric with `cfg` makes its UD QP: when the engine will use the
/// datagram path (the same test as the model's, `protocol::datagram::chunk_for`).
fn wanted(cfg: &crate::core::config::TransportConfig) -> bool {
    let kind = crate::core::config::TransportKind::Verbs;
    matches!(
        crate::protocol::datagram::chunk_for(cfg, crate::fabric::sizes::datagram_mtu(kind)),
        Ok(Some(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_datagram_path_is_made_only_when_the_engine_uses_it() {
        use crate::core::config::{EndpointOverflow, RecvSharing, TransportConfig};
        let on = TransportConfig {
            max_endpoints: 2,
            ..Default::default()
        };
        assert_eq!(on.endpoint_overflow, EndpointOverflow::Datagram);
        assert!(wanted(&on));
        for off in [
            TransportConfig {
                max_endpoints: 0,
                ..on
            },
            TransportConfig {
                endpoint_overflow: EndpointOverflow::Evict,
                ..on
            },
            TransportConfig {
                recv_sharing: RecvSharing::Xrc,
                ..on
            },
        ] {
            assert!(!wanted(&off), "{off:?}");
        }
    }
}
