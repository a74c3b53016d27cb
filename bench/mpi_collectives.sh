#!/usr/bin/env bash
# Ballast's collectives on the MPI native path beside raw MPI's in one run
# (bench/src/bin/mpi_collectives.rs): allreduce of 1 and 1,000 doubles, barrier, alltoallv of
# 64 B and 64 KiB per pair, the sparse exchange with 3 destinations per rank; medians of
# interleaved rounds, Ballast / raw as ratios. Runs at `mpirun -n 2` (the targets: <= 1.05x
# for allreduce and barrier, <= 1.10x for alltoallv), -n 4 and oversubscribed -n 8, each rank
# bound to a core where there are enough (the 2-rank run), none otherwise.
# After the table, Ballast's partners per rank for each operation (0 on the native path).
# Usage: bash bench/mpi_collectives.sh [ROUNDS] [N ...]   (default 11 rounds; -n 2 4 8;
# release build, about 1 min at 2 and 4 ranks on 2 cores).
#        ENGINE=1 bash bench/mpi_collectives.sh [ROUNDS] [N ...]   the same with Ballast on
# the engine path above MPI (`mpirun -x BALLAST_MPI_NATIVE=off`) instead of the native path.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-11}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(2 4 8)
cargo build --release --locked -p ballast-bench --features mpi --bin mpi_collectives >/dev/null
bin=${CARGO_TARGET_DIR:-target}/release/mpi_collectives
flags=(--oversubscribe)
path="MPI native path"
if [ "${ENGINE:-0}" = 1 ]; then
    flags+=(-x BALLAST_MPI_NATIVE=off)
    path="engine path (BALLAST_MPI_NATIVE=off)"
fi
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
cores=$(nproc)
for n in "${sizes[@]}"; do
    bind=(--bind-to none)
    [ "$n" -le "$cores" ] && bind=(--bind-to core)
    echo "mpi_collectives: $path, -n $n, $rounds rounds, $(date -u +%FT%TZ), $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
    mpirun "${flags[@]}" "${bind[@]}" -n "$n" "$bin" --rounds "$rounds"
done
