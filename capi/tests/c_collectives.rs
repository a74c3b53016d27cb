//! Builds tests/c/collectives.c (issue 35's collectives from C, tests/c/collectives_body.h)
//! against include/ballast.h and the freshly built libballast.so under
//! `-fsanitize=address,undefined`, and runs it: worlds of 1, 2, 3, 4 and 7 ranks as threads,
//! every result against a reference computed on one rank, and the misuse cases. Skips with
//! a printed reason when no C compiler is found, except under CI=true, where that is a
//! failure. (The MPI half, tests/c/mpi_collectives.c, runs under mpirun in ci/capi.sh.)

mod common;

use common::{build, compiler, run, SANITIZE};
use std::path::Path;

#[test]
fn collectives_from_c_on_1_to_7_local_ranks_under_sanitizers() {
    let Some(cc) = compiler() else { return };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/collectives.c");
    let flags = [SANITIZE[0], SANITIZE[1], SANITIZE[2], "-O1"];
    let prog = build(&cc, &src, &flags);
    let stdout = run(&prog, &[]);
    print!("{stdout}");
    for n in [1, 2, 3, 4, 7] {
        assert!(
            stdout.contains(&format!("capi collectives: {n} ranks: ok\n")),
            "{stdout}"
        );
    }
    let line = stdout
        .lines()
        .find(|l| l.ends_with(" passed, 0 failed"))
        .expect("the summary line");
    let passed: usize = line
        .trim_start_matches("capi collectives: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count of passed checks");
    // Per rank, about 400 checks (misuse, 96 reductions, roots, parts); 17 ranks in all.
    assert!(passed >= 17 * 300, "only {passed} checks ran");
}
