//! The node-local bootstrap ([`NodeBootstrap`]): the TCP bootstrap's exchange over a
//! Unix-domain socket in the abstract namespace (`unix(7)`: no file, nothing left behind
//! even after SIGKILL), named by this user and the launcher's job step
//! (`BootstrapConfig::job`: `SLURM_JOB_ID`.`SLURM_STEP_ID`, Open MPI's job id), for jobs
//! whose ranks are all on this node (the `shm` transport) started without `BALLAST_ROOT`.
//! Both ends check that the other is this user's process (`SO_PEERCRED`): an abstract
//! socket has no file permissions.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::tcp::{Meet, TcpBootstrap};
use super::Bootstrap;
use crate::bootstrap::error::{BootstrapError, Result};
use crate::core::config::BootstrapConfig;

/// The longest abstract socket name, bytes (`sun_path` less its leading NUL).
const NAME_MAX: usize = 107;

/// All-gather of byte strings through rank 0's abstract socket on this node.
#[derive(Debug)]
pub struct NodeBootstrap(TcpBootstrap);

impl NodeBootstrap {
    /// Meets the other ranks of job step `job` (any text of `A-Z a-z 0-9 . _ -`, at most 64
    /// bytes) on this node, waiting at most `timeout` for them. Errors: those of
    /// [`super::TcpBootstrap::new`], with the socket's name in place of the address
    /// ([`BootstrapError::Unreachable`] when rank 0 never listened: it may be on another
    /// node).
    pub fn new(job: &str, rank: usize, size: usize, timeout: Duration) -> Result<NodeBootstrap> {
        let name = socket_name(job);
        if name.len() > NAME_MAX {
            return Err(BootstrapError::Env {
                what: "the launcher's job id is too long for a socket name",
            });
        }
        let label = format!("the node socket `@{name}` (no BALLAST_ROOT: every rank on this node)");
        Ok(NodeBootstrap(TcpBootstrap::meet(
            &label,
            &Meet::Node(name),
            rank,
            size,
            timeout,
        )?))
    }

    /// Meets from the launcher's environment (job id, rank and size, timeout). Errors:
    /// [`BootstrapError::Env`] when any is missing, and those of [`NodeBootstrap::new`].
    pub fn connect(cfg: &BootstrapConfig) -> Result<NodeBootstrap> {
        let job = cfg.job.as_deref().ok_or(BootstrapError::Env {
            what: "no job id from the launcher (SLURM_JOB_ID and SLURM_STEP_ID, PMIX_NAMESPACE or \
                   OMPI_MCA_ess_base_jobid) to name the node's rendezvous socket: set BALLAST_ROOT=host:port",
        })?;
        let (Some(rank), Some(size)) = (cfg.rank, cfg.size) else {
            return Err(BootstrapError::Env {
                what: "no rank/size in the environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS or BALLAST_RANK/SIZE)",
            });
        };
        Self::new(job, rank, size, cfg.timeout)
    }
}

/// The abstract socket name of job step `job` of this user.
fn socket_name(job: &str) -> String {
    format!("ballast-boot/{}/{job}", rustix::process::geteuid().as_raw())
}

impl Bootstrap for NodeBootstrap {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.0.all_gather(data)
    }
}

/// The pid at the other end of `s` when it is a process of this user (`SO_PEERCRED`);
/// `PermissionDenied` naming its pid and uid otherwise. Also the shm fabric's check of the
/// peers that fetch its segments.
pub(crate) fn same_user(s: &UnixStream) -> std::io::Result<i32> {
    let peer = rustix::net::sockopt::socket_peercred(s)?;
    let me = rustix::process::geteuid();
    let pid = peer.pid.as_raw_nonzero().get();
    if peer.uid != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "the other end is process {pid} of uid {}, not this user's ({})",
                peer.uid.as_raw(),
                me.as_raw()
            ),
        ));
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(what: &str) -> String {
        format!("test-{}-{what}", std::process::id())
    }

    /// What each rank gathered in its two rounds.
    type TwoRounds = (Vec<Vec<u8>>, Vec<Vec<u8>>);

    #[test]
    fn three_ranks_gather_over_the_node_socket_twice() {
        let j = job("three");
        let got: Vec<Result<TwoRounds>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3usize)
                .map(|r| {
                    let j = j.clone();
                    s.spawn(move || {
                        let mut b = NodeBootstrap::new(&j, r, 3, Duration::from_secs(20))?;
                        Ok((b.all_gather(&[r as u8; 3])?, b.all_gather(&vec![7; r])?))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            let (a, b) = g.unwrap();
            assert_eq!(a, vec![vec![0; 3], vec![1; 3], vec![2; 3]]);
            assert_eq!(b, vec![vec![], vec![7], vec![7, 7]]);
        }
        // The name is free again once the exchange met: a second job step of the same id.
        let again: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2usize)
                .map(|r| {
                    let j = j.clone();
                    s.spawn(move || {
                        NodeBootstrap::new(&j, r, 2, Duration::from_secs(20))
                            .unwrap()
                            .size()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(again, vec![2, 2]);
    }

    #[test]
    fn a_missing_rank_0_is_named_with_the_socket() {
        let e = NodeBootstrap::new(&job("alone"), 1, 2, Duration::from_millis(200)).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("rank 1 could not reach rank 0 at the node socket `@ballast-boot/")
                && e.contains("every rank on this node"),
            "{e}"
        );
        let cfg = BootstrapConfig {
            rank: Some(0),
            size: Some(2),
            ..Default::default()
        };
        let e = NodeBootstrap::connect(&cfg).unwrap_err().to_string();
        assert!(e.contains("SLURM_JOB_ID") && e.contains("BALLAST_ROOT"), "{e}");
    }
}
