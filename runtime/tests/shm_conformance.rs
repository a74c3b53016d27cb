//! The conformance suite instantiated for the shared-memory transport, its ranks as threads
//! of this process (`ballast_runtime::shm::run_ranks`), each with its own segment and
//! socket: the rings, bells, descriptor passing and board of the real fabric.

mod conformance;

use ballast_runtime::{shm, Communicator, RecvSharing, Result, RuntimeConfig};
use conformance::*;

struct Shm;

impl Launcher for Shm {
    fn name(&self) -> &'static str {
        "shm"
    }
    fn run<R: Send + Exchange, F: Fn(&mut Communicator) -> R + Sync>(
        &self,
        n: usize,
        cfg: &RuntimeConfig,
        f: F,
    ) -> Result<Vec<R>> {
        shm::run_ranks(n, cfg, f)
    }
}

const MODES: [RecvSharing; 3] = [RecvSharing::PerPeer, RecvSharing::Shared, RecvSharing::Xrc];

threaded_cases!(Shm);

/// The footprint of every rank equals `predict` for shm (the segment charged whole, the
/// endpoints the engine opened), in each mode, lazy or not, and nothing is locked whatever
/// `lock_pool` says (shm never locks: pages never written cost the node nothing).
#[test]
fn footprint_equals_the_shm_model() {
    use ballast_runtime::{Source, TagMatch, TransportKind};
    for (sharing, lock) in MODES.into_iter().zip([true, false, true]) {
        for lazy in [true, false] {
            let c = RuntimeConfig::builder()
                .recv_sharing(sharing)
                .lock_pool(lock)
                .lazy_connect(lazy)
                .buffer_size(1024)
                .buffer_count(8)
                .recv_depth(3)
                .srq_depth(8)
                .build()
                .unwrap();
            let res = shm::run_ranks(6, &c, |comm| -> Result<_> {
                let me = comm.rank();
                if me == 0 {
                    for p in 1..comm.world_size() {
                        comm.send(p, 1, &[0u8; 10])?;
                    }
                } else {
                    comm.recv(0, 1u32)?;
                }
                comm.send((me + 1) % comm.world_size(), 2, &[1u8; 10])?;
                comm.recv(Source::Any, TagMatch::Tag(2))?;
                comm.barrier()?;
                let t = *comm.config();
                assert_eq!(t.kind, TransportKind::Shm);
                let f = comm.footprint();
                Ok((
                    f,
                    t.predict(f.peers_connected as usize, comm.world_size(), t.ranks_per_node),
                ))
            })
            .unwrap();
            for (rank, r) in res.into_iter().enumerate() {
                let (f, p) = r.unwrap();
                assert_eq!(f, p, "rank {rank} mode {sharing} lazy {lazy}");
                assert_eq!(f.locked_bytes, 0, "rank {rank} lock_pool {lock}");
            }
        }
    }
}

/// The whole threaded suite again with `BALLAST_SHM_CMA=off`: large messages in chunks
/// through the rings (the fallback where the system refuses `process_vm_readv`).
mod without_cma {
    use super::*;
    use ballast_runtime::ShmConfig;

    struct ShmChunked;

    impl Launcher for ShmChunked {
        fn name(&self) -> &'static str {
            "shm (BALLAST_SHM_CMA=off)"
        }
        fn run<R: Send + Exchange, F: Fn(&mut Communicator) -> R + Sync>(
            &self,
            n: usize,
            cfg: &RuntimeConfig,
            f: F,
        ) -> Result<Vec<R>> {
            let cfg = cfg.clone().with_shm(ShmConfig { cma: false });
            shm::run_ranks(n, &cfg, f)
        }
    }

    threaded_cases!(ShmChunked);
}

/// Large messages go by CMA unless `BALLAST_SHM_CMA` is off, which the notes say; both ways
/// carry a 1 MiB message intact, and a message at the threshold.
#[test]
fn the_notes_say_when_large_messages_do_not_go_by_cma() {
    use ballast_runtime::ShmConfig;
    for cma in [true, false] {
        let c = RuntimeConfig::from_vars(|k| {
            (k == "BALLAST_SHM_CMA").then(|| if cma { "on" } else { "off" }.to_string())
        })
        .unwrap();
        assert_eq!(c.shm(), &ShmConfig { cma });
        let res = shm::run_ranks(2, &c, |comm| -> Result<_> {
            let notes = comm.notes().join("\n");
            for len in [32 << 10, (32 << 10) + 1, 1 << 20] {
                let msg: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                if comm.rank() == 0 {
                    comm.send(1, 3, &msg)?;
                } else {
                    let m = comm.recv(0, 3u32)?;
                    assert!(m.data == msg, "{len} bytes intact");
                }
            }
            Ok(notes)
        })
        .unwrap();
        for notes in res {
            let notes = notes.unwrap();
            assert_eq!(
                notes.contains("shm: large messages go in chunks through the rings, not by CMA (process_vm_readv): BALLAST_SHM_CMA=off"),
                !cma,
                "{notes}"
            );
        }
    }
    let e = RuntimeConfig::from_vars(|k| (k == "BALLAST_SHM_CMA").then(|| "maybe".to_string())).unwrap_err();
    assert!(e.to_string().contains("BALLAST_SHM_CMA"), "{e}");
}

/// Direct (CMA) and ring messages from several senders at once keep each sender's order:
/// three ranks send 300 messages each to rank 0 with one tag, alternating 8 B (rings) and
/// 40 KiB (CMA), each carrying its sequence number; rank 0 takes them from any source and
/// checks every sender's numbers in order and every byte.
#[test]
fn direct_and_ring_messages_keep_each_senders_order() {
    use ballast_runtime::{Source, TagMatch};
    const N: u32 = 300;
    let body = |src: usize, k: u32| -> Vec<u8> {
        let len = if k.is_multiple_of(2) { 8 } else { 40 << 10 };
        let mut v: Vec<u8> = (0..len).map(|i| (i as u32 ^ k ^ src as u32) as u8).collect();
        v[..4].copy_from_slice(&k.to_le_bytes());
        v
    };
    let res = shm::run_ranks(4, &RuntimeConfig::default(), |comm| -> Result<u32> {
        if comm.rank() > 0 {
            for k in 0..N {
                comm.send(0, 1, &body(comm.rank(), k))?;
            }
            return Ok(0);
        }
        let mut next = [0u32; 4];
        for _ in 0..3 * N {
            let m = comm.recv(Source::Any, TagMatch::Tag(1))?;
            let src = m.source;
            let k = u32::from_le_bytes(m.data[..4].try_into().unwrap());
            assert_eq!(k, next[src], "rank {src}'s messages in order");
            assert!(m.data == body(src, k), "rank {src}'s message {k} intact");
            next[src] += 1;
        }
        Ok(next[1..].iter().sum())
    })
    .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 3 * N);
}

/// A large message read by CMA straight into the buffer of a receive already waiting (one
/// copy), and into a buffer of its own when it came first; both ping-ponged both ways as a
/// blocking sender turns receiver (its send's wait leaves the reply for its receive):
/// every byte right, nothing written past the message, order kept with the 8 B messages
/// around it.
#[test]
fn large_messages_land_in_the_waiting_receives_buffer() {
    const BIG: usize = (1 << 20) + 5;
    let body = |k: u8| -> Vec<u8> { (0..BIG).map(|i| (i as u8).wrapping_mul(7) ^ k).collect() };
    let res = shm::run_ranks(2, &RuntimeConfig::default(), |comm| -> Result<usize> {
        let (me, peer) = (comm.rank(), 1 - comm.rank());
        let mut buf = vec![0xAAu8; BIG + 64];
        let mut checked = 0;
        for round in 0..20u8 {
            if (round as usize + me).is_multiple_of(2) {
                comm.send(peer, 2, &[round; 8])?;
                comm.send(peer, 3, &body(round))?;
            } else {
                // Waiting first (the 8 B message is taken after the large one is posted
                // for: a receive of tag 3 waits while tag 2's message sits queued).
                let e = comm.recv_into(peer, 3u32, &mut buf)?.expect("fits");
                assert_eq!((e.source, e.tag, e.len), (peer, 3, BIG));
                assert!(buf[..BIG] == body(round)[..], "round {round}: the message intact");
                assert!(buf[BIG..].iter().all(|&b| b == 0xAA), "nothing past it");
                assert_eq!(comm.recv(peer, 2u32)?.data, vec![round; 8]);
                buf.fill(0xAA);
                checked += 1;
            }
        }
        Ok(checked)
    })
    .unwrap();
    for r in res {
        assert_eq!(r.unwrap(), 10);
    }
}
