#!/usr/bin/env bash
# 8 B and 1 MiB ping-pong through the C ABI (bench/c/pingpong.c against an installed
# libballast) beside the same loop through the Rust API, in one process: the library is
# installed with the `bench-twin` feature, whose ballast_bench_twin runs the loop through the
# Rust API on the communicator behind the C handle, and `pingpong ... pair` alternates five
# loops block by block (the order rotating), over the same connection:
#   c          ballast_send, then ballast_irecv + ballast_wait + ballast_request_data + ballast_request_free
#   rust-irecv send, then irecv + wait (the message's own buffer)
#   c-recv     ballast_send, then ballast_recv into a buffer of SIZE bytes
#   rust       send, then recv (the message's own buffer: no copy)
#   rust-into  send, then recv_into a buffer of SIZE bytes (what ballast_recv does)
# Setups: `self` (one rank sending to itself: the calls' own cost), `local` (2 ranks as
# threads, ballast_local_run) and `mpi` (mpirun -n 2, ballast_comm_from_mpi on
# MPI_COMM_WORLD: the MPI native path, each rank bound to a core). Each run prints every
# loop's median block (ns per half round trip) and the medians of the per-block ratios; the
# summary line per setup and size is the median over ROUNDS runs.
# Usage: bash bench/capi_pingpong.sh [ROUNDS]   (default 5; release builds)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash ci/install-capi.sh "$work/prefix" --features mpi,bench-twin >/dev/null
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config's flags are words
mpicc -O2 -std=c11 -DBALLAST_BENCH_TWIN bench/c/pingpong.c $(pkg-config --cflags --libs ballast) -o "$work/pingpong"
# One core per rank: both spin, and a rank moved between cores mid-run is most of the run-to-run spread.
mpirun_flags=(--oversubscribe --bind-to core)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "capi_pingpong: $rounds rounds, $(date -u +%FT%TZ), $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-8s %9s %10s %9s %9s %9s %8s %11s %16s\n' setup size "c (ns)" "rust-irecv" "c-recv" rust rust-into \
    "c/irecv" "c-recv/rust" "c-recv/rust-into"
for transport in self local mpi; do
    for size in 8 1048576; do
        if [ "$size" = 8 ]; then args=(2000 51); else args=(50 21); fi
        : > "$work/runs"
        for _ in $(seq "$rounds"); do
            if [ "$transport" = mpi ]; then
                mpirun "${mpirun_flags[@]}" -n 2 "$work/pingpong" mpi "$size" "${args[@]}" pair 2>/dev/null >> "$work/runs"
            else
                "$work/pingpong" "$transport" "$size" "${args[@]}" pair >> "$work/runs"
            fi
        done
        sed 's/^/  run: /' "$work/runs"
        cols=()
        for k in 4 5 6 7 8 9 10 11; do cols+=("$(awk -v k="$k" '{print $k}' "$work/runs" | median)"); done
        printf '%-6s %-8s %9.1f %10.1f %9.1f %9.1f %9.1f %8.3f %11.3f %16.3f\n' "$transport" "$size" "${cols[@]}"
    done
done
