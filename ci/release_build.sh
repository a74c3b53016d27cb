# Sourced by ci/test.sh, ci/verbs_run.sh and ci/verbs_mpi.sh: the one release build they
# share (the same command everywhere, so that only the first caller compiles): `ballast`
# with sonata, mpi and verbs, and the MPI ping-pong. Defines ballast_release (absolute path).
cargo build --release --locked -p ballast -p ballast-bench \
    --features ballast/sonata,ballast/mpi,ballast/verbs,ballast-bench/mpi \
    --bin ballast --bin mpi_pingpong
ballast_release=$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/ballast
