//! The TCP bootstrap ([`TcpBootstrap`]): rank 0 listens at `BALLAST_ROOT` (`host:port`),
//! every other rank connects to it (retrying until the timeout, since rank 0 may start
//! later), and each all-gather round sends every rank's bytes to rank 0, which answers
//! with the whole table. Rank and size come from the launcher's environment
//! ([`crate::core::config::BootstrapConfig`]). The same exchange runs over a Unix-domain
//! socket in the abstract namespace for the ranks of one node (`super::node::NodeBootstrap`:
//! [`Meet::Node`], both ends checked to be this user's processes).
//!
//! Wire (little-endian): hello = magic `b"BLST"`, rank u32, size u32; contribution = len
//! u64 + bytes; table = per rank, len u64 + bytes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use super::Bootstrap;
use crate::bootstrap::error::{BootstrapError, Result};
use crate::core::config::BootstrapConfig;

const MAGIC: &[u8; 4] = b"BLST";
/// Largest contribution accepted from one rank, bytes.
const MAX_CONTRIBUTION: u64 = 1 << 32;

enum Links {
    /// Rank 0: the stream of every other rank (index = rank; 0 unused).
    Root(Vec<Option<Link>>),
    /// Other ranks: the stream to rank 0.
    Leaf(Link),
}

/// Where the ranks meet: rank 0's TCP addresses, or a node-local abstract socket name.
pub(crate) enum Meet {
    /// `BALLAST_ROOT`, resolved.
    Tcp(Vec<SocketAddr>),
    /// An abstract Unix socket name (no leading NUL), on this node only.
    Node(String),
}

/// One connection of the exchange.
enum Link {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Link {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Link::Tcp(s) => s.set_read_timeout(t),
            Link::Unix(s) => s.set_read_timeout(t),
        }
    }
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Link::Tcp(s) => s.read(buf),
            Link::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Link::Tcp(s) => s.write(buf),
            Link::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Link::Tcp(s) => s.flush(),
            Link::Unix(s) => s.flush(),
        }
    }
}

/// Rank 0's listening socket.
enum Listen {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listen {
    fn bind(meet: &Meet) -> std::io::Result<Listen> {
        let l = match meet {
            Meet::Tcp(addrs) => Listen::Tcp(TcpListener::bind(&addrs[..])?),
            Meet::Node(name) => Listen::Unix(UnixListener::bind_addr(
                &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?,
            )?),
        };
        match &l {
            Listen::Tcp(t) => t.set_nonblocking(true)?,
            Listen::Unix(u) => u.set_nonblocking(true)?,
        }
        Ok(l)
    }

    /// A connection, blocking, and who is at its other end (for messages); `Ok(None)` for
    /// a connection of another user's process on the node socket (dropped).
    fn accept(&self) -> std::io::Result<Option<(Link, String)>> {
        Ok(match self {
            Listen::Tcp(t) => {
                let (s, peer) = t.accept()?;
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                Some((Link::Tcp(s), peer.to_string()))
            }
            Listen::Unix(u) => {
                let (s, _) = u.accept()?;
                s.set_nonblocking(false)?;
                match super::node::same_user(&s) {
                    Ok(pid) => Some((Link::Unix(s), format!("process {pid}"))),
                    Err(_) => None,
                }
            }
        })
    }
}

/// All-gather of byte strings through a TCP rendezvous at rank 0.
pub struct TcpBootstrap {
    rank: usize,
    size: usize,
    root: String,
    timeout: Duration,
    links: Links,
}

impl std::fmt::Debug for TcpBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpBootstrap")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// An i/o step of `rank` toward `peer` that failed.
fn io_err(
    rank: usize,
    peer: Option<usize>,
    root: &str,
    what: String,
    source: std::io::Error,
) -> BootstrapError {
    BootstrapError::Io {
        rank,
        peer,
        root: root.into(),
        what,
        source,
    }
}

fn resolve(root: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = root
        .to_socket_addrs()
        .map_err(|e| BootstrapError::Root {
            root: root.to_string(),
            what: "is not host:port",
            source: Some(e),
        })?
        .collect();
    if addrs.is_empty() {
        return Err(BootstrapError::Root {
            root: root.to_string(),
            what: "resolves to no address",
            source: None,
        });
    }
    Ok(addrs)
}

fn read_exact_or(
    s: &mut Link,
    buf: &mut [u8],
    what: impl Fn(std::io::Error) -> BootstrapError,
) -> Result<()> {
    s.read_exact(buf).map_err(what)
}

fn read_u64(s: &mut Link, what: &dyn Fn(std::io::Error) -> BootstrapError) -> Result<u64> {
    let mut b = [0u8; 8];
    read_exact_or(s, &mut b, what)?;
    Ok(u64::from_le_bytes(b))
}

fn io_kind(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timed out",
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => "connection closed",
        _ => "i/o error",
    }
}

impl TcpBootstrap {
    /// Connects from the launcher's environment (`BALLAST_ROOT`, rank and size, timeout).
    /// Errors: [`BootstrapError::Env`] when any of them is missing, and those of [`TcpBootstrap::new`].
    pub fn connect(cfg: &BootstrapConfig) -> Result<TcpBootstrap> {
        let root = cfg.root.as_deref().ok_or(BootstrapError::Env {
            what: "BALLAST_ROOT (host:port of rank 0) is not set",
        })?;
        let (Some(rank), Some(size)) = (cfg.rank, cfg.size) else {
            return Err(BootstrapError::Env {
                what: "no rank/size in the environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS or BALLAST_RANK/SIZE)",
            });
        };
        Self::new(root, rank, size, cfg.timeout)
    }

    /// Rank `rank` of `size` meets the others at `root` (`host:port`; rank 0 binds it),
    /// waiting at most `timeout` for all of them. Errors: [`BootstrapError::Timeout`] saying
    /// which ranks did not show up (at rank 0), [`BootstrapError::Unreachable`] (elsewhere),
    /// [`BootstrapError::Root`], [`BootstrapError::Peer`], [`BootstrapError::Io`].
    pub fn new(root: &str, rank: usize, size: usize, timeout: Duration) -> Result<TcpBootstrap> {
        let meet = Meet::Tcp(resolve(root)?);
        Self::meet(root, &meet, rank, size, timeout)
    }

    /// Rank `rank` of `size` meets the others at `meet` (`label` names it in messages).
    /// Errors as [`TcpBootstrap::new`].
    pub(crate) fn meet(
        label: &str,
        meet: &Meet,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<TcpBootstrap> {
        if size == 0 || rank >= size || size > u32::MAX as usize {
            return Err(BootstrapError::InvalidRank {
                rank,
                world_size: size,
            });
        }
        let root = label;
        let deadline = Instant::now() + timeout;
        let links = if size == 1 {
            Links::Root(vec![None])
        } else if rank == 0 {
            Links::Root(Self::accept_all(root, meet, size, timeout, deadline)?)
        } else {
            Links::Leaf(Self::reach_root(root, meet, rank, size, timeout, deadline)?)
        };
        Ok(TcpBootstrap {
            rank,
            size,
            root: root.to_string(),
            timeout,
            links,
        })
    }

    fn accept_all(
        root: &str,
        meet: &Meet,
        size: usize,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<Vec<Option<Link>>> {
        let listener = Listen::bind(meet).map_err(|e| io_err(0, None, root, "cannot listen".into(), e))?;
        let mut links: Vec<Option<Link>> = (0..size).map(|_| None).collect();
        let mut present = 1;
        while present < size {
            match listener.accept() {
                // Another user's process on the node socket: not one of ours.
                Ok(None) => continue,
                Ok(Some((mut s, peer))) => {
                    s.set_read_timeout(Some(
                        deadline
                            .saturating_duration_since(Instant::now())
                            .max(Duration::from_millis(10)),
                    ))?;
                    let mut hello = [0u8; 12];
                    if s.read_exact(&mut hello).is_err() || &hello[..4] != MAGIC {
                        continue; // not one of ours (a port scanner, a stale client): ignore it
                    }
                    let r = u32::from_le_bytes(hello[4..8].try_into().expect("4")) as usize;
                    let n = u32::from_le_bytes(hello[8..12].try_into().expect("4")) as usize;
                    if n != size {
                        return Err(BootstrapError::Peer {
                            rank: 0,
                            peer: Some(r),
                            root: root.to_string(),
                            what: format!(
                                "rank {r} (from {peer}) says the job has {n} ranks, rank 0 says {size}"
                            ),
                        });
                    }
                    if r == 0 || r >= size || links[r].is_some() {
                        return Err(BootstrapError::Peer {
                            rank: 0,
                            peer: None,
                            root: root.to_string(),
                            what: format!(
                                "a process at {peer} claims rank {r}, which is invalid or already present"
                            ),
                        });
                    }
                    links[r] = Some(s);
                    present += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing: Vec<usize> = (1..size).filter(|&r| links[r].is_none()).collect();
                        return Err(BootstrapError::Timeout {
                            root: root.to_string(),
                            timeout,
                            missing,
                            size,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(io_err(0, None, root, "accepting a connection".into(), e)),
            }
        }
        Ok(links)
    }

    fn reach_root(
        root: &str,
        meet: &Meet,
        rank: usize,
        size: usize,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<Link> {
        loop {
            let mut last = None;
            for link in connect(meet, deadline) {
                match link {
                    Ok(mut s) => {
                        let mut hello = MAGIC.to_vec();
                        hello.extend_from_slice(&(rank as u32).to_le_bytes());
                        hello.extend_from_slice(&(size as u32).to_le_bytes());
                        s.write_all(&hello)
                            .map_err(|e| io_err(rank, Some(0), root, "sending hello to rank 0".into(), e))?;
                        return Ok(s);
                    }
                    Err(e) => last = Some(e),
                }
            }
            if Instant::now() >= deadline {
                return Err(BootstrapError::Unreachable {
                    rank,
                    root: root.to_string(),
                    timeout,
                    source: last,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn read_blob(&self, s: &mut Link, from: usize) -> Result<Vec<u8>> {
        let (me, root, t) = (self.rank, &self.root, self.timeout);
        let what = move |e: std::io::Error| {
            let step = if me == 0 {
                format!("rank {from} sent nothing within {t:?} ({})", io_kind(&e))
            } else {
                format!("no table from rank 0 within {t:?} ({})", io_kind(&e))
            };
            io_err(me, Some(from), root, step, e)
        };
        let len = read_u64(s, &what)?;
        if len > MAX_CONTRIBUTION {
            return Err(BootstrapError::Peer {
                rank: me,
                peer: Some(from),
                root: root.clone(),
                what: format!("rank {from} announced {len} bytes (limit {MAX_CONTRIBUTION})"),
            });
        }
        let mut v = vec![0u8; len as usize];
        read_exact_or(s, &mut v, what)?;
        Ok(v)
    }
}

/// The connections to try toward rank 0 at `meet`, one per address: the node socket's
/// other end must be this user's process (`PermissionDenied` otherwise).
fn connect(meet: &Meet, deadline: Instant) -> Vec<std::io::Result<Link>> {
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10))
    };
    match meet {
        Meet::Tcp(addrs) => addrs
            .iter()
            .map(|a| {
                let s = TcpStream::connect_timeout(a, left())?;
                s.set_nodelay(true)?;
                Ok(Link::Tcp(s))
            })
            .collect(),
        Meet::Node(name) => vec![(|| {
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            let s = UnixStream::connect_addr(&addr)?;
            super::node::same_user(&s)?;
            Ok(Link::Unix(s))
        })()],
    }
}

fn write_blob(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
}

impl Bootstrap for TcpBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let timeout = self.timeout;
        let mut links = std::mem::replace(&mut self.links, Links::Root(Vec::new()));
        let out = (|| match &mut links {
            Links::Root(streams) => {
                let mut all = vec![data.to_vec()];
                for (r, s) in streams.iter_mut().enumerate().skip(1) {
                    let s = s.as_mut().expect("connected rank");
                    s.set_read_timeout(Some(timeout))?;
                    all.push(self.read_blob(s, r)?);
                }
                let mut table = Vec::with_capacity(all.iter().map(|a| a.len() + 8).sum());
                for a in &all {
                    write_blob(&mut table, a);
                }
                for (r, s) in streams.iter_mut().enumerate().skip(1) {
                    s.as_mut()
                        .expect("connected rank")
                        .write_all(&table)
                        .map_err(|e| {
                            io_err(
                                0,
                                Some(r),
                                &self.root,
                                format!("sending the table to rank {r}"),
                                e,
                            )
                        })?;
                }
                Ok(all)
            }
            Links::Leaf(s) => {
                let mut msg = Vec::with_capacity(data.len() + 8);
                write_blob(&mut msg, data);
                s.write_all(&msg)
                    .map_err(|e| io_err(self.rank, Some(0), &self.root, "sending to rank 0".into(), e))?;
                s.set_read_timeout(Some(timeout))?;
                (0..self.size).map(|_| self.read_blob(s, 0)).collect()
            }
        })();
        self.links = links;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// What each rank gathered in its two rounds.
    type TwoRounds = (Vec<Vec<u8>>, Vec<Vec<u8>>);

    #[test]
    fn four_threads_gather_twice_on_loopback() {
        let root = format!("127.0.0.1:{}", free_port());
        let got: Vec<Result<TwoRounds>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4usize)
                .map(|r| {
                    let root = root.clone();
                    s.spawn(move || {
                        let mut b = TcpBootstrap::new(&root, r, 4, Duration::from_secs(20))?;
                        let a = b.all_gather(&vec![r as u8; r * 1000])?;
                        let c = b.all_gather(format!("rank{r}").as_bytes())?;
                        Ok((a, c))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            let (a, c) = g.unwrap();
            assert_eq!(
                a,
                (0..4usize).map(|r| vec![r as u8; r * 1000]).collect::<Vec<_>>()
            );
            assert_eq!(
                c,
                (0..4)
                    .map(|r| format!("rank{r}").into_bytes())
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn missing_rank_is_named_at_rank_0_and_unreachable_root_elsewhere() {
        let root = format!("127.0.0.1:{}", free_port());
        let res: Vec<Result<TcpBootstrap>> = std::thread::scope(|s| {
            let hs: Vec<_> = [0usize, 1, 3]
                .into_iter()
                .map(|r| {
                    let root = root.clone();
                    s.spawn(move || TcpBootstrap::new(&root, r, 4, Duration::from_millis(800)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let e = res[0].as_ref().expect_err("rank 0 must time out").to_string();
        assert!(
            e.contains("rank(s) [2] did not show up") && e.contains("3 of 4 present"),
            "{e}"
        );
        let lone = TcpBootstrap::new(
            &format!("127.0.0.1:{}", free_port()),
            2,
            4,
            Duration::from_millis(300),
        );
        let e = lone.expect_err("nobody listens").to_string();
        assert!(e.contains("rank 2 could not reach rank 0 at 127.0.0.1:"), "{e}");
        assert!(TcpBootstrap::new("nonsense", 0, 2, Duration::from_millis(10)).is_err());
        assert!(matches!(
            TcpBootstrap::new(&root, 4, 4, Duration::from_millis(10)),
            Err(BootstrapError::InvalidRank { .. })
        ));
    }
}
