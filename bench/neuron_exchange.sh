#!/usr/bin/env bash
# NEURON's spike exchange over Ballast beside the wheel's own MPI (docs/BENCHMARKS.md,
# "NEURON's spike exchange"): the network of bench/neuron/net.py (NCELL hh ball-and-stick
# cells, each driven by its own NetStim and reaching FANOUT others) under
# `mpirun -n RANKS python net.py`, in each MODE, on three paths:
#   mpi          the unmodified NEURON 9.0.2 wheel (NRNHOME unset);
#   ballast      NRNHOME = the shims of ci/install-neuron.sh, BALLAST_MPI_NATIVE=on;
#   ballast-eng  the same with BALLAST_MPI_NATIVE=off (Ballast's engine over MPI), at the
#                rank counts of ENGINE_RANKS only.
# The runs are interleaved: REPS rounds, each running every (ranks, mode, path) once, the
# paths' order reversed every other round. Each Ballast run's reports must show the exchange
# on Ballast (BALLAST_REPORT_DIR: mpi_native as asked; spike_exchanges > 0 in allgather,
# multisend_sent > 0 in multisend), and every run's spikes must equal the MPI runs' (sha256).
# Prints bench/neuron/table.py's table (medians; ratios Ballast / MPI) and the load.
#
# Usage: bench/neuron_exchange.sh        (python3 on PATH must import neuron 9.0.x and mpi4py:
#        activate a venv, e.g. the one ci/neuron.sh caches)
# Variables: REPS (7), RANKS ("2 4 8"), MODES ("allgather multisend1"), ENGINE_RANKS ("2"; "" for none),
#   NCELL (2000), TSTOP (100 ms), FANOUT (10); KEEP=1 keeps the work directory (else only
#   the runs' JSON lines are kept, path printed).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
say() { echo "bench/neuron_exchange.sh: $*" >&2; }
die() { say "FAIL: $*"; exit 1; }

reps=${REPS:-7}
ranks=${RANKS:-"2 4 8"}
modes=${MODES:-"allgather multisend1"}
engine_ranks=${ENGINE_RANKS-2} # set and empty: no engine-path runs
ncell=${NCELL:-2000}
tstop=${TSTOP:-100}
fanout=${FANOUT:-10}

python3 -c 'import neuron' 2>/dev/null || die "python3 ($(command -v python3)) cannot import neuron: activate a venv with neuron==9.0.2"
work=$(mktemp -d)
cleanup() { [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
runs=$(mktemp --suffix=.jsonl /tmp/neuron_exchange.XXXXXX)

bash ci/install-neuron.sh "$work/prefix" >"$work/install.log" 2>&1 || { tail -n 30 "$work/install.log" >&2; die "ci/install-neuron.sh failed"; }
nrnhome=$work/prefix/lib/ballast-nrnhome
mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

run() { # PATH RANKS MODE ROUND
    local path=$1 n=$2 mode=$3 round=$4 env_args=(-u NRNHOME) rep=$work/rep-$1-$2-$3-$4
    case "$path" in
        ballast) env_args=(NRNHOME="$nrnhome" BALLAST_MPI_NATIVE=on BALLAST_REPORT_DIR="$rep") ;;
        ballast-eng) env_args=(NRNHOME="$nrnhome" BALLAST_MPI_NATIVE=off BALLAST_REPORT_DIR="$rep") ;;
    esac
    (cd "$work" && env "${env_args[@]}" NEURON_INIT_MPI=1 timeout 900 mpirun "${mpirun_flags[@]}" -n "$n" \
        python3 "$repo/bench/neuron/net.py" "$runs" "$mode" --ncell "$ncell" --tstop "$tstop" --fanout "$fanout" \
        --label "$path" >"$work/last.log" 2>&1) || { tail -n 30 "$work/last.log" >&2; die "$path, mpirun -n $n, $mode failed"; }
    [ "$path" = mpi ] && return 0
    python3 - "$rep" "$n" "$mode" "$path" <<'EOF' || die "$path, mpirun -n $n, $mode: the reports do not show the exchange on Ballast"
import json, sys
d, n, mode, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
for r in range(n):
    rep = json.load(open("%s/neuron_rank%d.json" % (d, r)))
    assert rep["mpi_native"] is (path == "ballast"), rep["mpi_native"]
    key = "multisend_sent" if mode.startswith("multisend") else "spike_exchanges"
    assert rep[key] > 0, (r, key, rep[key])
EOF
    rm -rf "$rep"
}

say "$reps rounds of: ranks $ranks x modes $modes x paths mpi, ballast (+ ballast-eng at $engine_ranks ranks); $ncell cells, $tstop ms"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
for round in $(seq 1 "$reps"); do
    for n in $ranks; do
        paths=(mpi ballast)
        [[ " $engine_ranks " == *" $n "* ]] && paths+=(ballast-eng)
        if [ $((round % 2)) = 0 ]; then # reverse the order every other round
            paths=($(printf '%s\n' "${paths[@]}" | tac))
        fi
        for mode in $modes; do
            for path in "${paths[@]}"; do
                run "$path" "$n" "$mode" "$round"
            done
        done
    done
    say "round $round done ($(($(date +%s) - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
done
python3 "$repo/bench/neuron/table.py" "$runs" --min-runs "$reps"
echo
echo "($(nproc) cores, load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end;" \
    "$(($(date +%s) - t0)) s; $(date -u '+%Y-%m-%d %H:%M UTC'); runs: $runs)"
