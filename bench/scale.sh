#!/usr/bin/env bash
# Cost against rank count over the local transport (docs/BENCHMARKS.md, "Rank count"):
# `ballast run` on one synthetic circuit at 16, 64, 256 and 1,024 ranks and `ballast fanout`
# at 256, 1,024 and 4,096 ranks. Prints one markdown table: wall time and CPU time of the
# whole command, messages sent by all ranks (report.json's / fanout --json's
# `messages_sent`), wall time per message, and for `run` the ranks' own time (report.json's
# `seconds`: the simulation, without generating the circuit and the placement) per message.
#
# Usage: bench/scale.sh [RUN_RANKS [FANOUT_RANKS]], e.g. bench/scale.sh "16 64" "256".
set -euo pipefail
cd "$(dirname "$0")/.."
run_ranks=${1:-"16 64 256 1024"}
fanout_ranks=${2:-"256 1024 4096"}
cargo build --release --locked --bin ballast >&2
bin=$PWD/target/release/ballast
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs "$@" in $work, its stdout to $work/out; sets wall, cpu (user + sys), seconds.
timed() {
    local t
    t=$( { TIMEFORMAT='%R %U %S'; time "$@" >"$work/out" 2>"$work/err"; } 2>&1 ) || { cat "$work/err" >&2; exit 1; }
    read -r wall user sys <<<"$t"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
}

# A top-level number ("messages_sent", "seconds") of a pretty-printed JSON file.
field() {
    grep -E "^  \"$2\"" "$1" | sed -E 's/.*: ([^,]*),?$/\1/'
}

row() { # command, ranks, messages, ranks' seconds (or -)
    awk -v c="$1" -v r="$2" -v w="$wall" -v cpu="$cpu" -v m="$3" -v s="$4" \
        'BEGIN { printf "| %s | %d | %.2f | %.2f | %d | %.2f | %s |\n", c, r, w, cpu, m, w / m * 1e6, s == "-" ? "-" : sprintf("%.2f s, %.2f µs", s, s / m * 1e6) }'
}

echo "| command | ranks | wall s | CPU s | messages_sent | wall µs per message | ranks' time (report), per message |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in $run_ranks; do
    timed "$bin" run --synthetic 4000 --tstop 20 --lb-mode RoundRobin --ranks "$n" --output "$work/run$n" --json
    r=$work/run$n/report.json
    row "run --synthetic 4000 --tstop 20" "$n" "$(field "$r" messages_sent)" "$(field "$r" seconds)"
done
for n in $fanout_ranks; do
    timed "$bin" fanout --ranks "$n" --json
    row "fanout" "$n" "$(field "$work/out" messages_sent)" -
done
echo "($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u '+%Y-%m-%d %H:%M UTC'))"
