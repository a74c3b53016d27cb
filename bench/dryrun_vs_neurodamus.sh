#!/usr/bin/env bash
# neurodamus' own dry-run distribution in Python beside `ballast dry-run` (docs/BENCHMARKS.md,
# "Dry run end to end"): per size, a synthetic cell_memory_usage.json (1,000 metypes, 2
# populations) is balanced into 1,024 ranks × 1 cycle by neurodamus (its utils/memory.py:
# CellMemoryUsage.from_json, DryRunStats.distribute_cells_with_validation, which writes
# allocation_r1024_c1.pkl.gz), `ballast dry-run --strategy neurodamus` and `ballast dry-run`
# (lpt), interleaved, RUNS times each. Prints one markdown table of medians: whole-process
# wall and CPU time and its ratio to neurodamus', wall and CPU time of reading, balancing and
# writing, and peak RSS.
#
# Usage: bench/dryrun_vs_neurodamus.sh [SIZES [RUNS [MEMORY_PY [BASELINE]]]], e.g.
#   bench/dryrun_vs_neurodamus.sh "100000 1000000 10000000" 5
# MEMORY_PY defaults to ../shared/data/neurodamus-tests/neurodamus/utils/memory.py. BASELINE,
# when given, is another build of `ballast` (e.g. of an older commit) run the same way in the
# same interleaving (rows baseline-neurodamus and baseline-lpt; a build without `--timings`
# gets no phase figures). FEATURES, when set, are the cargo features `ballast` is built with
# (e.g. FEATURES=sonata). Python needs numpy and psutil: a venv with them is
# made once in target/bench-venv (pip).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-"100000 1000000 10000000"}
runs=${2:-5}
memory_py=$(realpath "${3:-../shared/data/neurodamus-tests/neurodamus/utils/memory.py}")
baseline=${4:+$(realpath "$4")}
tools="neurodamus ballast-neurodamus ballast-lpt${baseline:+ baseline-neurodamus baseline-lpt}"
[ -f "$memory_py" ] || { echo "no neurodamus memory.py at $memory_py" >&2; exit 1; }
cargo build --release --locked --bin ballast ${FEATURES:+--features "$FEATURES"} >&2
# The binary cargo just built, wherever CARGO_TARGET_DIR puts it.
bin=$(realpath "${CARGO_TARGET_DIR:-target}")/release/ballast
venv=$PWD/target/bench-venv
if ! "$venv/bin/python" -c "import numpy, psutil" 2>/dev/null; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q numpy psutil >&2
fi
py=$venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv

# Runs "$@" (its stdout and stderr to $work/out, $work/err), appending to $results one line:
# size, tool, whole wall, whole CPU, max RSS KB, then the phase line's figures.
measure() {
    local size=$1 tool=$2
    shift 2
    local start=$EPOCHREALTIME
    /usr/bin/time -o "$work/time" -f "%U %S %M" "$@" >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    local end=$EPOCHREALTIME
    # Wall time to the microsecond (bash's clock; /usr/bin/time's %e has 10 ms steps, a
    # fifth of a 50 ms run); CPU time and peak RSS from /usr/bin/time.
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.6f", b - a }')
    read -r user sys rss <"$work/time"
    phases=$(grep -h -E '^(timings: )?read ' "$work/out" "$work/err" | sed 's/^timings: //' | head -1 || true)
    echo -e "$size\t$tool\t$wall\t$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')\t$rss\t$phases" >>"$results"
}

for n in $sizes; do
    json=$work/cm_$n.json
    "$bin" dry-run --synthetic "$n" --metypes 1000 --populations 2 --num-target-ranks 1024 \
        --output-dir "$work/gen" --write-memory-usage "$json" >/dev/null
    for r in $(seq "$runs"); do
        for tool in $tools; do
            out=$work/$tool
            rm -rf "$out" && mkdir -p "$out"
            case $tool in
                neurodamus) measure "$n" "$tool" "$py" bench/neurodamus/dryrun.py "$memory_py" "$json" 1024 1 "$out" ;;
                ballast-neurodamus) measure "$n" "$tool" "$bin" dry-run --memory-usage "$json" --num-target-ranks 1024 --strategy neurodamus --output-dir "$out" --timings ;;
                ballast-lpt) measure "$n" "$tool" "$bin" dry-run --memory-usage "$json" --num-target-ranks 1024 --output-dir "$out" --timings ;;
                baseline-neurodamus) measure "$n" "$tool" "$baseline" dry-run --memory-usage "$json" --num-target-ranks 1024 --strategy neurodamus --output-dir "$out" ;;
                baseline-lpt) measure "$n" "$tool" "$baseline" dry-run --memory-usage "$json" --num-target-ranks 1024 --output-dir "$out" ;;
            esac
        done
    done
    rm -f "$json"
done

python3 - "$results" "$runs" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs)
table = {}
for size, tool, wall, cpu, rss, phases in rows:
    p = phases.split()
    f = dict(zip(p[0::3], zip(map(float, p[1::3]), map(float, p[2::3])))) if p else {}
    table.setdefault((int(size), tool), []).append((float(wall), float(cpu), int(rss), f))
print(f"| cells | run | wall s | CPU s | neurodamus wall / this | read wall / CPU s | balance wall / CPU s | write wall / CPU s | peak RSS MiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for size in sorted({k[0] for k in table}):
    base = med([r[0] for r in table[(size, "neurodamus")]])
    for tool in ["neurodamus", "ballast-neurodamus", "ballast-lpt", "baseline-neurodamus", "baseline-lpt"]:
        if (size, tool) not in table:
            continue
        rs = table[(size, tool)]
        wall, cpu = med([r[0] for r in rs]), med([r[1] for r in rs])
        ph = lambda k: "%.3f / %.3f" % (med([r[3][k][0] for r in rs]), med([r[3][k][1] for r in rs])) if k in rs[0][3] else "-"
        rss = med([r[2] for r in rs]) / 1024
        print(f"| {size:,} | {tool} | {wall:.3f} | {cpu:.3f} | {base / wall:.2f} | {ph('read')} | {ph('balance')} | {ph('write')} | {rss:.0f} |")
print(f"\n(medians of {sys.argv[2]} interleaved runs)")
PY
echo "($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)${FEATURES:+, features $FEATURES})"
