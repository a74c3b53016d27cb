//! A rank's rendezvous thread: it hands this rank's segment (and, on the job's first rank,
//! the board) to each peer that connects, and watches the connections it keeps for their
//! end. A connection that ends while its rank is still running on the board means that rank
//! died (SIGKILL, a crash: nothing of it ran to say so): the board marks it failed, which
//! rings every bell, and the waiting ranks stop at once (`EPEER`), within milliseconds.
//!
//! Every rank of a job of processes fetches the board from the first rank and keeps that
//! connection: the first rank's thread watches every other rank, and each other rank's
//! thread watches the first. The thread blocks in `poll(2)` and uses no core; it ends when
//! its [`Watch`] is dropped (one end of a socket pair closes, the other reads its end).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use rustix::event::{poll, PollFd, PollFlags};

use super::board::{Board, RUNNING};
use super::rendezvous::Listener;

/// A listening socket and the descriptor it hands out.
pub(crate) struct Serve {
    /// The socket.
    pub listener: Listener,
    /// What it hands out.
    pub fd: OwnedFd,
    /// Keep (and watch) the connections it accepts: the board's, on the first rank.
    pub keep: bool,
}

/// The running thread; dropping it stops it.
pub(crate) struct Watch {
    stop: Option<UnixStream>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// Starts rank `rank`'s thread: it serves `serves` and watches `watched` (connections
    /// and the rank at their other end). Errors: the socket pair's or the thread's.
    pub(crate) fn start(
        rank: usize,
        board: Arc<Board>,
        serves: Vec<Serve>,
        watched: Vec<(UnixStream, u64)>,
    ) -> std::io::Result<Watch> {
        let (stop, stopped) = UnixStream::pair()?;
        let thread = std::thread::Builder::new()
            .name(format!("ballast-shm-{rank}"))
            .stack_size(64 << 10)
            .spawn(move || run(rank, &board, &stopped, &serves, watched))?;
        Ok(Watch {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    rank: usize,
    board: &Board,
    stopped: &UnixStream,
    serves: &[Serve],
    mut conns: Vec<(UnixStream, u64)>,
) {
    let info = (rank as u64).to_le_bytes();
    loop {
        let ready: Vec<bool> = {
            let mut fds = Vec::with_capacity(1 + serves.len() + conns.len());
            fds.push(PollFd::new(stopped, PollFlags::IN));
            fds.extend(
                serves
                    .iter()
                    .map(|s| PollFd::from_borrowed_fd(s.listener.as_fd(), PollFlags::IN)),
            );
            fds.extend(conns.iter().map(|(c, _)| PollFd::new(c, PollFlags::IN)));
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                // Nothing to wait on any more (EINVAL, ENOMEM): the thread ends; the ranks
                // go on, without its serving and watching.
                Err(_) => return,
            }
            fds.iter().map(|f| !f.revents().is_empty()).collect()
        };
        if ready[0] {
            return;
        }
        let first = 1 + serves.len();
        let mut i = 0;
        conns.retain(|(c, peer)| {
            let this = first + i;
            i += 1;
            if !ready[this] {
                return true;
            }
            // Readable: its end (a peer sends nothing on it after its rank).
            let mut byte = [0u8; 1];
            let ended = match rustix::net::recv(c, &mut byte, rustix::net::RecvFlags::DONTWAIT) {
                Ok((_, n)) => n == 0,
                Err(e) => e != rustix::io::Errno::AGAIN && e != rustix::io::Errno::INTR,
            };
            let peer = *peer as usize;
            if ended && board.state(peer) == RUNNING {
                board.fail(peer);
            }
            !ended
        });
        // New connections after the watched ones were checked (`ready` is theirs).
        for (s, _) in serves.iter().zip(&ready[1..]).filter(|(_, &r)| r) {
            // A peer that connected and did not say who it is, or left, is dropped.
            match s.listener.serve(s.fd.as_fd(), &info) {
                // Watched: one connection per other rank (a claim of this rank, of a rank
                // off the board or of one already watched is not).
                Ok((conn, peer)) => {
                    let p = peer as usize;
                    if s.keep && p != rank && p < board.ranks() && !conns.iter().any(|(_, q)| *q == peer) {
                        conns.push((conn, peer));
                    }
                }
                // Out of descriptors (EMFILE) leaves the socket readable: not a busy loop.
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::shm::board::{FAILED, FINISHED};
    use crate::fabric::shm::rendezvous::{fetch, socket_name};
    use std::time::{Duration, Instant};

    /// Waits (at most 10 s) until `done` holds.
    fn until(done: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while !done() {
            if t.elapsed() > Duration::from_secs(10) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn a_kept_connection_that_ends_while_its_rank_runs_marks_it_failed() {
        let job = format!("test-{}-watch", std::process::id());
        let board = Arc::new(Board::create("ballast-test-board", 3).unwrap());
        let name = socket_name(&job, 0).unwrap();
        let serve = Serve {
            listener: Listener::bind(&name).unwrap(),
            fd: board.segment().fd().unwrap().try_clone_to_owned().unwrap(),
            keep: true,
        };
        let watch = Watch::start(0, board.clone(), vec![serve], Vec::new()).unwrap();
        let (one, fd, info) = fetch(&name, Duration::from_secs(10), 1, &|| false).unwrap();
        assert_eq!(info, 0u64.to_le_bytes(), "served by rank 0");
        let mapped = Board::open(fd, 3).unwrap();
        let (two, _, _) = fetch(&name, Duration::from_secs(10), 2, &|| false).unwrap();
        // A second connection claiming rank 2, and one claiming rank 0 (the server's own),
        // are not watched: their end marks nothing.
        drop(fetch(&name, Duration::from_secs(10), 2, &|| false).unwrap());
        drop(fetch(&name, Duration::from_secs(10), 0, &|| false).unwrap());
        // Rank 2 finishes, then its connection ends: no failure.
        mapped.finish(2);
        drop(two);
        // Rank 1's connection ends while it runs: it died.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(board.failed(), None);
        drop(one);
        assert!(until(|| board.failed() == Some(1)), "rank 1's end was not seen");
        assert_eq!((board.state(1), board.state(2)), (FAILED, FINISHED));
        // Dropping the watch ends its thread (the join returns).
        drop(watch);
    }
}
