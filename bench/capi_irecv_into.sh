#!/usr/bin/env bash
# 8 B ping-pong with ballast_irecv_into + ballast_isend + ballast_wait over the MPI native
# path (issue 35, point 3) beside its Rust twin (irecv_within + isend + wait) and raw
# MPI_Irecv + MPI_Isend + MPI_Wait, in one run by the method of bench/capi_pingpong.sh:
# bench/c/irecv_into.c against an install with --features mpi,bench-twin, mpirun -n 2 with
# each rank bound to a core, the three loops alternating block by block (the order
# rotating); per run the median block of each (ns per half round trip) and the medians of
# the per-block ratios; the summary line is the median over ROUNDS runs. With NP (an even
# number, default 2) the ranks run in pairs (0-1, 2-3, ...), all at once, and rank 0's pair
# is reported; above 2 the ranks are not bound (issue 35 records -n 4 and oversubscribed
# -n 8 beside the -n 2 targets).
# Usage: bash bench/capi_irecv_into.sh [ROUNDS] [SIZE] [NP]   (default 5 rounds of 8 B at
# -n 2; release builds)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
size=${2:-8}
np=${3:-2}
if ! [[ $np =~ ^[1-9][0-9]*$ ]] || [ "$np" -lt 2 ] || [ $((np % 2)) -ne 0 ]; then
    echo "capi_irecv_into.sh: NP must be an even number of processes, at least 2 (got '$np')" >&2
    exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash ci/install-capi.sh "$work/prefix" --features mpi,bench-twin >/dev/null
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config's flags are words
mpicc -O2 -std=c11 -DBALLAST_BENCH_TWIN bench/c/irecv_into.c $(pkg-config --cflags --libs ballast) -o "$work/irecv_into"
mpirun_flags=(--oversubscribe)
# Above 2 processes on a small machine every wait may sleep (oversubscribed): fewer blocks.
if [ "$np" -eq 2 ]; then
    mpirun_flags+=(--bind-to core)
    iters=2000 blocks=51
else
    mpirun_flags+=(--bind-to none)
    iters=2000 blocks=21
fi
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "capi_irecv_into: $rounds rounds of $size B at -n $np ($iters round trips x $blocks blocks), $(date -u +%FT%TZ), $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$work/runs"
for _ in $(seq "$rounds"); do
    mpirun "${mpirun_flags[@]}" -n "$np" "$work/irecv_into" "$size" "$iters" "$blocks" 2>/dev/null >> "$work/runs"
done
sed 's/^/  run: /' "$work/runs"
cols=()
for k in 3 4 5 6 7; do cols+=("$(awk -v k="$k" '{print $k}' "$work/runs" | median)"); done
printf '%-8s %9s %9s %9s %8s %8s\n' size "c (ns)" "rust" "mpi" "c/rust" "c/mpi"
printf '%-8s %9.1f %9.1f %9.1f %8.3f %8.3f\n' "$size" "${cols[@]}"
