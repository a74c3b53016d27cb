#!/usr/bin/env bash
# Stress runner for the datagram path (issue 33's hang): repeats
# runtime/tests/local_datagram_stress.rs (datagram_all_to_all over 16 ranks with
# max_endpoints 1 and the test drop model at 1 in 7, beside a recv_into ping-pong of 1 MiB
# messages) beside a CPU hog, one process per repetition with a timeout, each repetition
# with its own drop pattern (BALLAST_DATAGRAM_DROP_SEED). Counts hangs (timeouts) and
# failures and prints the seed of each, so that it can be run again with --seed S --reps 1.
#
#   ci/stress_datagram.sh                 # the long run: 500 repetitions
#   ci/stress_datagram.sh --reps 50 --ping-pong-kib 64   # the short run of ci/test.sh
#   ci/stress_datagram.sh --seed 1234 --reps 20 --same-seed   # replay one pattern
#
# Options: --reps N (500), --timeout S per repetition (60), --hog K spinning workers
# (stress-ng --cpu K, or `yes` loops without stress-ng; default: one per core; 0 = none),
# --seed S (first seed; default from the clock; repetition i uses S+i), --same-seed (every
# repetition uses S), --ping-pong-kib N (the ping-pong's largest message, default 1024),
# --gdb (on a hang, the threads' backtraces go to
# $TMPDIR/stress_datagram_hang_SEED.bt; the output of a hung repetition is kept in
# $TMPDIR/stress_datagram_hang_SEED.log), --bin PATH (run this build of the test instead of
# building it: e.g. a copy of the old code's to count its hangs), --filter NAME (repeatable:
# run only the tests whose names contain one of them, e.g. the same two cases of an old and
# a new local_datagram_drop binary). Exit status 1 when any repetition hung or failed.
set -euo pipefail
cd "$(dirname "$0")/.."

reps=500 per=60 hog=$(nproc) seed=$(( $(date +%s%N) % 1000000000 + 1 )) same=0 gdb=0 bin= kib=1024
filters=()
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) reps=$2; shift 2 ;;
        --timeout) per=$2; shift 2 ;;
        --hog) hog=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --same-seed) same=1; shift ;;
        --gdb) gdb=1; shift ;;
        --bin) bin=$2; shift 2 ;;
        --ping-pong-kib) kib=$2; shift 2 ;;
        --filter) filters+=("$2"); shift 2 ;;
        *) echo "ci/stress_datagram.sh: unknown option $1 (see the comment at its top)" >&2; exit 2 ;;
    esac
done

if [ -z "$bin" ]; then
    bin=$(cargo test -p ballast-runtime --locked --test local_datagram_stress --no-run --message-format=json \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
[ -x "$bin" ] || { echo "ci/stress_datagram.sh: the test binary was not built" >&2; exit 1; }

tmp=$(mktemp -d)
hog_pids=()
pid=""
cleanup() {
    # The hog with TERM (stress-ng then stops its workers), the test at once.
    for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true
    for p in "${hog_pids[@]}" $pid; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$hog" -gt 0 ]; then
    if command -v stress-ng >/dev/null; then
        stress-ng --cpu "$hog" --timeout 0 >/dev/null 2>&1 &
        hog_pids+=($!)
        hog_what="stress-ng --cpu $hog"
    else
        for _ in $(seq "$hog"); do yes >/dev/null & hog_pids+=($!); done
        hog_what="$hog spinning processes (yes)"
    fi
else
    hog_what="none"
fi

echo "ci/stress_datagram.sh: $reps repetitions of $(basename "$bin")${filters[*]:+ (tests: ${filters[*]})}, timeout ${per}s each, ping-pong up to $kib KiB, hog: $hog_what, seeds from $seed"
hangs=0 fails=0 hung_seeds="" failed_seeds=""
start=$(date +%s)
for i in $(seq 0 $((reps - 1))); do
    s=$seed
    [ "$same" = 1 ] || s=$((seed + i))
    BALLAST_DATAGRAM_DROP_SEED=$s STRESS_PING_PONG_KIB=$kib "$bin" --nocapture ${filters[@]+"${filters[@]}"} >"$tmp/out" 2>&1 &
    pid=$!
    # Poll rather than `timeout`: on a hang the process is still there for gdb.
    deadline=$(( $(date +%s) + per ))
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then
        hangs=$((hangs + 1)) hung_seeds="$hung_seeds $s"
        echo "HANG: repetition $((i + 1)), BALLAST_DATAGRAM_DROP_SEED=$s (no end after ${per}s)"
        if [ "$gdb" = 1 ] && command -v gdb >/dev/null; then
            bt="${TMPDIR:-/tmp}/stress_datagram_hang_$s.bt"
            timeout 120 gdb -p "$pid" -batch -ex "thread apply all bt" >"$bt" 2>&1 || true
            echo "  backtraces: $bt"
        fi
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        log="${TMPDIR:-/tmp}/stress_datagram_hang_$s.log"
        cp "$tmp/out" "$log"
        tail -n 5 "$tmp/out" | sed 's/^/  /'
        echo "  output: $log"
    elif ! wait "$pid"; then
        fails=$((fails + 1)) failed_seeds="$failed_seeds $s"
        echo "FAIL: repetition $((i + 1)), BALLAST_DATAGRAM_DROP_SEED=$s"
        tail -n 20 "$tmp/out" | sed 's/^/  /'
    fi
    if [ $(( (i + 1) % 50 )) = 0 ]; then
        echo "  $((i + 1))/$reps done, $hangs hung, $fails failed, $(( $(date +%s) - start )) s"
    fi
done
secs=$(( $(date +%s) - start ))
echo "ci/stress_datagram.sh: $reps repetitions, $hangs hung, $fails failed, in ${secs}s (hog: $hog_what)"
[ -z "$hung_seeds" ] || echo "  hung seeds:$hung_seeds"
[ -z "$failed_seeds" ] || echo "  failed seeds:$failed_seeds"
[ "$hangs" = 0 ] && [ "$fails" = 0 ]
