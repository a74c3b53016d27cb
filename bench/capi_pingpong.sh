#!/usr/bin/env bash
# 8 B and 1 MiB ping-pong through the C ABI (bench/c/pingpong.c against an installed
# libballast) beside the same loop through the Rust API (the bench crate's capi_twin), in two
# pairs: non-blocking (`c`: ballast_send, ballast_irecv + ballast_wait + ballast_request_data
# + ballast_request_free; `rust-irecv`: send, irecv, wait) and blocking (`c-recv`:
# ballast_send, ballast_recv into a buffer; `rust`: send, recv), over local and over MPI,
# alternated ROUNDS times in one run (the order rotates every round). Prints each run and,
# per transport and size, the medians and the ratios c / rust-irecv and c-recv / rust.
# `self` is one rank sending to itself (each figure one send and its receive): the calls' own
# cost, without a second rank's timing. Usage: bash bench/capi_pingpong.sh [ROUNDS]   (default 7; release builds)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash ci/install-capi.sh "$work/prefix" --features mpi >/dev/null
cargo build --release --locked -p ballast-bench --features mpi --bin capi_twin >/dev/null 2>&1
rust_bin=${CARGO_TARGET_DIR:-target}/release/capi_twin
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config's flags are words
mpicc -O2 -std=c11 bench/c/pingpong.c $(pkg-config --cflags --libs ballast) -o "$work/pingpong"
# One core per rank: both spin, and a rank moved between cores mid-run is most of the run-to-run spread.
mpirun_flags=(--oversubscribe --bind-to core)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

run() { # run c|rust|rust-irecv local|mpi SIZE ITERS BLOCKS -> the ns figure
    local who=$1 transport=$2; shift 2
    local cmd=("$work/pingpong" "$transport" "$@")
    [ "$who" = c-recv ] && cmd=("$work/pingpong" "$transport" "$@" recv)
    [ "$who" = rust ] && cmd=("$rust_bin" "$transport" "$@")
    [ "$who" = rust-irecv ] && cmd=("$rust_bin" "$transport" "$@" irecv)
    if [ "$transport" = mpi ]; then
        mpirun "${mpirun_flags[@]}" -n 2 "${cmd[@]}" 2>/dev/null | awk '{print $4}'
    else
        "${cmd[@]}" | awk '{print $4}'
    fi
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "capi_pingpong: $rounds rounds, $(date -u +%FT%TZ), $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %-8s %10s %12s %10s %10s %10s %12s\n' transport size "c (ns)" "rust-irecv" "c-recv" "rust" "c/irecv" "c-recv/rust"
for transport in self local mpi; do
    for size in 8 1048576; do
        if [ "$size" = 8 ]; then iters=20000; else iters=200; fi
        : > "$work/c" ; : > "$work/rust" ; : > "$work/rust-irecv" ; : > "$work/c-recv"
        for r in $(seq "$rounds"); do
            case $((r % 4)) in
                1) order="c rust-irecv c-recv rust" ;;
                2) order="rust-irecv c-recv rust c" ;;
                3) order="c-recv rust c rust-irecv" ;;
                *) order="rust c rust-irecv c-recv" ;;
            esac
            for who in $order; do
                run "$who" "$transport" "$size" "$iters" 5 >> "$work/$who"
            done
        done
        c=$(median < "$work/c"); ri=$(median < "$work/rust-irecv"); rs=$(median < "$work/rust")
        cr=$(median < "$work/c-recv")
        echo "  runs: c $(tr '\n' ' ' < "$work/c")| rust-irecv $(tr '\n' ' ' < "$work/rust-irecv")| c-recv $(tr '\n' ' ' < "$work/c-recv")| rust $(tr '\n' ' ' < "$work/rust")"
        printf '%-9s %-8s %10.1f %12.1f %10.1f %10.1f %10.3f %12.3f\n' "$transport" "$size" "$c" "$ri" "$cr" "$rs" \
            "$(echo "$c / $ri" | bc -l)" "$(echo "$cr / $rs" | bc -l)"
    done
done
