#!/usr/bin/env bash
# The cost of an endpoint cap: `ballast run --synthetic 20000 --ranks 16 --tstop 200
# --memory-scale 0.001 --recv-sharing shared` uncapped and with --max-endpoints 2, 4 and 8
# in both --endpoint-overflow modes (datagram: peers beyond the cap over the datagram path;
# evict: LRU eviction and reconnects), on the local transport. The configurations are
# interleaved ROUNDS times in one run (the order rotates every round); prints each run's
# wall time, then per configuration the median and its ratio to the uncapped median, and
# checks that every run gave the uncapped run's spikes (out.dat). With BASELINE=path to
# another ballast binary (e.g. a build of the tree before the datagram path), it also runs
# the uncapped configuration with that binary (`baseline`): the endpoint hot path's cost.
# Usage: [BASELINE=ballast-binary] bash bench/endpoint_overflow.sh [ROUNDS]   (default 5; a release build)
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
rounds=${1:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --locked -p ballast >/dev/null 2>&1
bin=$(realpath "${CARGO_TARGET_DIR:-target}/release/ballast")
cd "$work"

configs=(uncapped datagram-2 evict-2 datagram-4 evict-4 datagram-8 evict-8)
[ -n "${BASELINE:-}" ] && configs+=(baseline) && baseline=$(realpath "$BASELINE")
args_of() { # config -> the extra options
    case $1 in
        uncapped | baseline) ;;
        *) echo "--max-endpoints ${1#*-} --endpoint-overflow ${1%-*}" ;;
    esac
}
run() { # config round -> seconds
    local out="out-$1-$2" t0 t1
    local b=$bin
    [ "$1" = baseline ] && b=$baseline
    t0=$(date +%s.%N)
    # shellcheck disable=SC2046 # the options are words
    "$b" run --synthetic 20000 --ranks 16 --tstop 200 --memory-scale 0.001 --recv-sharing shared \
        $(args_of "$1") --output "$out" >/dev/null 2>"$out.err" || { cat "$out.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    if ! cmp -s "$out/out.dat" out-uncapped-0/out.dat; then
        echo "endpoint_overflow: $1 round $2 gave other spikes than uncapped" >&2
        exit 1
    fi
    echo "$t1 - $t0" | bc -l
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "endpoint_overflow: $rounds rounds, $(date -u +%FT%TZ), $(git -C "$OLDPWD" rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
n=${#configs[@]}
for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < n; i++)); do
        c=${configs[(i + r) % n]}
        s=$(run "$c" "$r")
        echo "$s" >>"times-$c"
        printf 'round %d %-11s %7.2f s\n' "$r" "$c" "$s"
    done
done
base=$(median <times-uncapped)
printf '%-11s %10s %12s\n' config "median (s)" "/ uncapped"
for c in "${configs[@]}"; do
    m=$(median <"times-$c")
    printf '%-11s %10.2f %12.2f\n' "$c" "$m" "$(echo "$m / $base" | bc -l)"
done
