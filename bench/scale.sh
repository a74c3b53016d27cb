#!/usr/bin/env bash
# Cost against rank count over the local transport (docs/BENCHMARKS.md, "Rank count"):
# `ballast run` on one synthetic circuit at 16, 64, 256 and 1,024 ranks and `ballast fanout`
# at 256, 1,024 and 4,096 ranks. Prints one markdown table: wall time and CPU time of the
# whole command, messages sent by all ranks (report.json's / fanout --json's
# `messages_sent`) and wall time per message.
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

# The top-level "messages_sent" of a pretty-printed JSON file.
messages() {
    grep -E '^  "messages_sent"' "$1" | grep -oE '[0-9]+'
}

row() { # command, ranks, messages
    awk -v c="$1" -v r="$2" -v w="$wall" -v cpu="$cpu" -v m="$3" \
        'BEGIN { printf "| %s | %d | %.2f | %.2f | %d | %.2f |\n", c, r, w, cpu, m, w / m * 1e6 }'
}

echo "| command | ranks | wall s | CPU s | messages_sent | wall µs per message |"
echo "| --- | --- | --- | --- | --- | --- |"
for n in $run_ranks; do
    timed "$bin" run --synthetic 4000 --tstop 20 --lb-mode RoundRobin --ranks "$n" --output "$work/run$n" --json
    row "run --synthetic 4000 --tstop 20" "$n" "$(messages "$work/run$n/report.json")"
done
for n in $fanout_ranks; do
    timed "$bin" fanout --ranks "$n" --json
    row "fanout" "$n" "$(messages "$work/out")"
done
echo "($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u '+%Y-%m-%d %H:%M UTC'))"
