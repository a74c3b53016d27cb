#!/usr/bin/env bash
# Ballast's collectives over the in-process transport `local` (ranks as threads of one
# process; bench/src/bin/local_collectives.rs): the operations of bench/mpi_collectives.sh
# (allreduce of 1 and 1,000 doubles, barrier, alltoallv of 64 B and 64 KiB per pair, the
# sparse exchange with 3 destinations per rank) at 2, 4 and 8 ranks; medians of rounds
# (slowest rank per round), each beside its ratio to the same operation at the first rank
# count, and the partners per rank beside what the collectives' doc comments promise.
# Usage: bash bench/local_collectives.sh [ROUNDS] [RANKS]   (default 11 rounds, ranks 2,4,8;
# release build, about half a minute on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-11}
ranks=${2:-2,4,8}
cargo build --release --locked -p ballast-bench --bin local_collectives >/dev/null
bin=${CARGO_TARGET_DIR:-target}/release/local_collectives
echo "local_collectives: ranks $ranks, $rounds rounds, $(date -u +%FT%TZ), $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" --rounds "$rounds" --ranks "$ranks"
