//! `launch::Launch` under `mpirun` (no `BALLAST_ROOT`): it initialises MPI for the start-up
//! exchange, exchanges through its own duplicate of the world, and when dropped frees that
//! communicator before it finalises MPI (the other order makes Open MPI abort every process at
//! exit with "MPI_Comm_free() ... called after MPI_FINALIZE", and mpirun exit non-zero).
//! `harness = false`; run under `mpirun -n 2` (or more); prints `mpi launch: ok` from rank 0
//! and exits 0; any failure exits non-zero.

use ballast_runtime::bootstrap::BootstrapKind;
use ballast_runtime::launch::Launch;
use ballast_runtime::mpi::rsmpi;
use ballast_runtime::RuntimeConfig;

fn main() {
    let cfg = RuntimeConfig::from_env().expect("configuration");
    assert!(cfg.bootstrap().root.is_none(), "run without BALLAST_ROOT");
    assert!(
        !rsmpi::environment::is_initialized(),
        "nothing initialised MPI yet"
    );
    let mut launch = Launch::new(&cfg).expect("launch under mpirun");
    assert_eq!(
        launch.kind(),
        BootstrapKind::Mpi,
        "mpirun's variables select the MPI bootstrap"
    );
    assert!(rsmpi::environment::is_initialized());
    let (me, n) = (launch.rank(), launch.size());
    assert_eq!(Some(me), cfg.bootstrap().rank);
    assert!(launch.at_start().vm_rss_kb > 0, "counters read before MPI_Init");
    for round in 0..2u8 {
        let mine: Vec<u8> = vec![round ^ me as u8; me + 1];
        let all = launch.bootstrap().all_gather(&mine).expect("all-gather");
        let want: Vec<Vec<u8>> = (0..n).map(|r| vec![round ^ r as u8; r + 1]).collect();
        assert_eq!(all, want, "round {round}");
    }
    let kept = launch.bootstrap().kept();
    assert!(
        kept.vm_pin_kb >= 0,
        "VmPin does not shrink inside an exchange: {kept:?}"
    );
    drop(launch);
    assert!(
        rsmpi::environment::is_finalized(),
        "the launch finalises the MPI it initialised"
    );
    if me == 0 {
        println!("mpi launch: ok ({n} processes; bootstrap communicator freed before MPI_Finalize)");
    }
}
