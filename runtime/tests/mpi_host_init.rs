//! A host program that initialises MPI itself (through rsmpi, as a simulator calling
//! `MPI_Init` would), then creates a Ballast communicator, exchanges messages, finishes and
//! drops it, and still uses MPI afterwards: Ballast reuses the host's MPI, works on its own
//! duplicate of the world communicator (and of a sub-communicator it is given:
//! `Mpi::from_communicator`), and never finalises it. `harness = false`; run under
//! `mpirun -n 2` (or more); prints `mpi host-init: ok` from rank 0, exits non-zero on failure.

use ballast_runtime::mpi::rsmpi::collective::{CommunicatorCollectives, SystemOperation};
use ballast_runtime::mpi::rsmpi::point_to_point::{Destination, Source as _};
use ballast_runtime::mpi::rsmpi::topology::Communicator as _;
use ballast_runtime::mpi::{rsmpi, Mpi};
use ballast_runtime::{RuntimeConfig, Source, TagMatch};

fn main() {
    let universe = rsmpi::initialize().expect("the host initialises MPI first");
    let world = universe.world();
    let (me, n) = (world.rank() as usize, world.size() as usize);

    // A host message in flight on MPI_COMM_WORLD with tag 0 while Ballast runs: Ballast's
    // traffic (tag 0 too, on its own communicator) must not match it.
    if n > 1 && me == 0 {
        world.process_at_rank(1).send_with_tag(&[4242u64][..], 0);
    }

    let mpi = Mpi::init().expect("reuse the host's MPI");
    assert!(
        !mpi.initialized_by_ballast(),
        "Ballast must not claim the host's MPI"
    );
    assert_eq!((mpi.rank(), mpi.size()), (me, n));
    let cfg = RuntimeConfig::builder()
        .lock_pool(false)
        .buffer_size(1024)
        .build()
        .unwrap();
    let mut comm = mpi.communicator(&cfg).unwrap();
    let right = (me + 1) % n;
    for i in 0..50u32 {
        let data: Vec<u8> = (0..(i as usize * 97) % 5000)
            .map(|k| (k as u32 ^ i ^ me as u32) as u8)
            .collect();
        let r = comm.irecv(Source::Any, TagMatch::Tag(0)).unwrap();
        comm.send(right, 0, &data).unwrap();
        let m = comm.wait(r).unwrap().into_message().unwrap();
        let left = (me + n - 1) % n;
        let want: Vec<u8> = (0..(i as usize * 97) % 5000)
            .map(|k| (k as u32 ^ i ^ left as u32) as u8)
            .collect();
        assert_eq!((m.source, m.data), (left, want), "message {i}");
    }
    let all = comm.all_gatherv(&[me as u8]).unwrap();
    assert_eq!(all, (0..n).map(|r| vec![r as u8]).collect::<Vec<_>>());
    Mpi::finish(comm).unwrap();
    drop(mpi);
    assert!(
        !rsmpi::environment::is_finalized(),
        "Ballast finalised the host's MPI"
    );

    // Over a sub-communicator of the host's (even and odd world ranks): Ballast's ranks are
    // its ranks, on Ballast's own duplicate of it.
    let half = world
        .split_by_color(rsmpi::topology::Color::with_value((me % 2) as i32))
        .expect("a color for every process");
    let sub = Mpi::from_communicator(&half).expect("Ballast over the host's sub-communicator");
    assert!(!sub.initialized_by_ballast());
    assert_eq!((sub.rank(), sub.size()), (me / 2, n / 2 + (n % 2) * (1 - me % 2)));
    let mut comm = sub.communicator(&cfg).unwrap();
    let (sr, sn) = (sub.rank(), sub.size());
    comm.send((sr + 1) % sn, 3, &[me as u8, sr as u8]).unwrap();
    let m = comm.recv(Source::Any, TagMatch::Tag(3)).unwrap();
    let left = (sr + sn - 1) % sn;
    // World rank of the half's rank `left`: the same parity, index `left`.
    assert_eq!(m.data, vec![(left * 2 + me % 2) as u8, left as u8]);
    let names = comm.all_gatherv(&[me as u8]).unwrap();
    assert_eq!(
        names,
        (0..sn).map(|r| vec![(r * 2 + me % 2) as u8]).collect::<Vec<_>>()
    );
    Mpi::finish(comm).unwrap();
    drop(sub);
    drop(half);

    // The host's own message is still there, untouched, and MPI still works.
    if n > 1 && me == 1 {
        let (v, st) = world.process_at_rank(0).receive_vec_with_tag::<u64>(0);
        assert_eq!((v, st.tag()), (vec![4242], 0));
    }
    let mut sum = 0u64;
    world.all_reduce_into(&(me as u64 + 1), &mut sum, SystemOperation::sum());
    assert_eq!(sum, (n * (n + 1) / 2) as u64);
    if me == 0 {
        println!("mpi host-init: ok ({n} processes; Ballast reused the host's MPI and left it running)");
    }
    drop(universe); // the host finalises
}
