//! How a rank's segment reaches its node-local peers: a Unix-domain stream socket in the
//! abstract namespace (Linux's `unix(7)`: no file, so nothing is left behind, even after
//! SIGKILL), named by the job and the rank ([`socket_name`]). A peer connects and receives
//! the segment's descriptor (`SCM_RIGHTS`) with a short description of it; the connection
//! then stays open, and its end tells either side that the other is gone.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The longest description sent with a descriptor, bytes.
pub(crate) const INFO_MAX: usize = 256;
/// The longest abstract socket name, bytes (`sun_path` less its leading NUL).
const NAME_MAX: usize = 107;

/// The socket name of `rank` in job `job` (the job's identity: its launcher's job and step,
/// or the rendezvous address). Errors (`InvalidInput`) when it is longer than an abstract
/// name may be.
pub(crate) fn socket_name(job: &str, rank: usize) -> std::io::Result<String> {
    checked(format!("ballast-shm/{job}/{rank}"))
}

/// The socket name of job `job`'s board (served by its first rank).
pub(crate) fn board_name(job: &str) -> std::io::Result<String> {
    checked(format!("ballast-shm/{job}/board"))
}

fn checked(name: String) -> std::io::Result<String> {
    if name.len() > NAME_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the socket name `{name}` is above the {NAME_MAX} bytes of an abstract name"),
        ));
    }
    Ok(name)
}

fn address(name: &str) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// A rank's listening socket. Errors of `bind`: `AddrInUse` when a process of the same
/// job already holds the name (two ranks with one rank number, or a stale job id).
pub(crate) struct Listener(UnixListener);

impl Listener {
    pub(crate) fn bind(name: &str) -> std::io::Result<Listener> {
        Ok(Listener(UnixListener::bind_addr(&address(name)?)?))
    }

    /// Accepts one peer, reads the rank it says it is (8 bytes, waiting at most 1 s) and
    /// sends it `fd` with `info` (at most [`INFO_MAX`] bytes); the connection and the rank.
    pub(crate) fn serve(&self, fd: BorrowedFd<'_>, info: &[u8]) -> std::io::Result<(UnixStream, u64)> {
        let (mut s, _) = self.0.accept()?;
        same_user(&s)?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        let mut rank = [0u8; 8];
        std::io::Read::read_exact(&mut s, &mut rank)?;
        s.set_read_timeout(None)?;
        send_fd(&s, fd, info)?;
        Ok((s, u64::from_le_bytes(rank)))
    }

    /// The listening socket (to wait on it with `poll`).
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.0)
    }
}

/// Refuses a connection whose other end is another user's process (`SO_PEERCRED`): an
/// abstract socket has no file permissions, so anyone on the host could connect.
fn same_user(s: &UnixStream) -> std::io::Result<()> {
    crate::bootstrap::node::same_user(s).map(|_| ())
}

fn send_fd(s: &UnixStream, fd: BorrowedFd<'_>, info: &[u8]) -> std::io::Result<()> {
    if info.is_empty() || info.len() > INFO_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a description of {} bytes (1 to {INFO_MAX})", info.len()),
        ));
    }
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    cmsg.push(SendAncillaryMessage::ScmRights(&fds));
    let sent = sendmsg(s, &[IoSlice::new(info)], &mut cmsg, SendFlags::NOSIGNAL)?;
    if sent != info.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("sent {sent} of the description's {} bytes", info.len()),
        ));
    }
    Ok(())
}

/// Connects to `name`, retrying while nobody listens there yet (a peer still starting)
/// until `timeout`, and receives its descriptor and description. Errors: the last
/// connection error at the deadline (`ConnectionRefused` when nobody listens),
/// `InvalidData` when the peer sent no descriptor, or more than one; `Interrupted` when
/// `give_up()` says the wait is pointless (the job failed). `me` is this rank, told to the
/// peer first.
pub(crate) fn fetch(
    name: &str,
    timeout: Duration,
    me: u64,
    give_up: &dyn Fn() -> bool,
) -> std::io::Result<(UnixStream, OwnedFd, Vec<u8>)> {
    let addr = address(name)?;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(100);
    let s = loop {
        match UnixStream::connect_addr(&addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) if give_up() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "given up: the job failed",
                ))
            }
            Err(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
    };
    same_user(&s)?;
    std::io::Write::write_all(&mut &s, &me.to_le_bytes())?;
    s.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))?;
    let mut info = vec![0u8; INFO_MAX];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        &s,
        &mut [IoSliceMut::new(&mut info)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if fds.len() != 1 || got.bytes == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "`{name}` sent {} descriptors and {} bytes (one and a description expected)",
                fds.len(),
                got.bytes
            ),
        ));
    }
    s.set_read_timeout(None)?;
    info.truncate(got.bytes);
    Ok((s, fds.pop().expect("one descriptor"), info))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::shm::ffi::Segment;
    use crate::fabric::shm::ring::{Cell, Reader, Ring};
    use std::io::Read;

    /// A name no other test process uses.
    fn unique(what: &str) -> String {
        socket_name(&format!("test-{}-{what}", std::process::id()), 0).unwrap()
    }

    #[test]
    fn names_longer_than_an_abstract_name_are_refused() {
        assert_eq!(socket_name("slurm-42.0", 3).unwrap(), "ballast-shm/slurm-42.0/3");
        let e = socket_name(&"j".repeat(100), 0).unwrap_err();
        assert!(e.to_string().contains("107 bytes"), "{e}");
    }

    #[test]
    fn a_second_listener_on_one_name_is_refused() {
        let name = unique("twice");
        let _l = Listener::bind(&name).unwrap();
        assert_eq!(
            Listener::bind(&name).err().map(|e| e.kind()),
            Some(std::io::ErrorKind::AddrInUse)
        );
    }

    #[test]
    fn nobody_listening_is_an_error_at_the_deadline() {
        let t = Instant::now();
        let e = fetch(&unique("nobody"), Duration::from_millis(50), 0, &|| false).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(t.elapsed() >= Duration::from_millis(50));
    }

    /// The child's side of the cross-process test below (run by it, ignored otherwise):
    /// maps the segment it fetched and pushes 1,000 cells into its ring.
    #[test]
    #[ignore = "run by a_segment_passed_to_another_process_carries_its_cells"]
    fn child_pushes_into_the_fetched_segment() {
        let Ok(name) = std::env::var("SHM_RENDEZVOUS_CHILD") else {
            return;
        };
        let (_s, fd, info) = fetch(&name, Duration::from_secs(10), 1, &|| false).unwrap();
        let info: [u8; 16] = info.try_into().unwrap();
        let (depth, payload) = (
            u64::from_le_bytes(info[..8].try_into().unwrap()) as usize,
            u64::from_le_bytes(info[8..].try_into().unwrap()) as usize,
        );
        let seg = Segment::open(fd, Ring::bytes(depth, payload).unwrap()).unwrap();
        let ring = Ring::new(&seg, 0, depth, payload).unwrap();
        for i in 0..1000u64 {
            let c = Cell {
                src: 1,
                total: i,
                ..Cell::default()
            };
            while ring.push(&seg, c, &i.to_le_bytes()).is_err() {
                std::thread::yield_now();
            }
        }
    }

    #[test]
    fn a_segment_passed_to_another_process_carries_its_cells() {
        let name = unique("cross");
        let (depth, payload) = (8, 64);
        let seg = Segment::create("ballast-test", Ring::bytes(depth, payload).unwrap()).unwrap();
        let ring = Ring::new(&seg, 0, depth, payload).unwrap();
        ring.init(&seg).unwrap();
        let l = Listener::bind(&name).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "fabric::shm::rendezvous::tests::child_pushes_into_the_fetched_segment",
                "--ignored",
                "--quiet",
            ])
            .env("SHM_RENDEZVOUS_CHILD", &name)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let info = [(depth as u64).to_le_bytes(), (payload as u64).to_le_bytes()].concat();
        let (mut conn, who) = l.serve(seg.fd().unwrap(), &info).unwrap();
        assert_eq!(who, 1, "the child says it is rank 1");
        let mut rd = Reader::new(ring);
        for i in 0..1000u64 {
            let (c, p) = loop {
                if let Some(got) = rd.peek(&seg).unwrap() {
                    break got;
                }
                std::thread::yield_now();
            };
            assert_eq!((c.src, c.total, p), (1, i, &i.to_le_bytes()[..]));
            rd.advance(&seg).unwrap();
        }
        assert!(child.wait().unwrap().success());
        // The child is gone: its end of the connection reads as end of file.
        assert_eq!(conn.read(&mut [0u8; 1]).unwrap(), 0);
        assert!(rd.peek(&seg).unwrap().is_none());
    }

    #[test]
    fn an_unsealed_descriptor_is_refused() {
        let fd = rustix::fs::memfd_create("ballast-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let e = Segment::open(fd, 64).err().unwrap();
        assert!(e.to_string().contains("F_SEAL_SHRINK"), "{e}");
        let small = Segment::create("ballast-test", 4096).unwrap();
        let fd = small.fd().unwrap().try_clone_to_owned().unwrap();
        let e = Segment::open(fd, 8192).err().unwrap();
        assert!(e.to_string().contains("4096 bytes, fewer than the 8192"), "{e}");
    }
}
