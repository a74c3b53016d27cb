#!/usr/bin/env bash
# Local 8 B ping-pong of this tree beside another revision's, in one run, interleaved:
#   bash bench/compare_trees.sh REV [ROUNDS]
# Builds REV's `runtime_pingpong` bench in a worktree under target/compare-trees/ (or in
# OLD_DIR), then runs the two bench binaries alternately ROUNDS times (default 5) on
# `pingpong/local/8` and prints each run's criterion estimate and the ratio of the medians
# (this tree / REV).
set -euo pipefail
rev=${1:?usage: compare_trees.sh REV [ROUNDS]}
rounds=${2:-5}
root=$(git rev-parse --show-toplevel)
cd "$root"
# OLD_DIR: an existing checkout of REV to reuse (built with its own target/).
old=${OLD_DIR:-"$root/target/compare-trees/$rev"}
if [ ! -d "$old" ]; then
    git worktree add -q --detach "$old" "$rev"
fi
bench_bin() { # dir -> path of its runtime_pingpong bench binary
    (cd "$1" && cargo bench -q -p ballast-bench --bench runtime_pingpong --no-run --message-format=json 2>/dev/null) |
        python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="runtime_pingpong" and m.get("executable"): print(m["executable"])' | tail -1
}
new_bin=$(bench_bin "$root")
old_bin=$(bench_bin "$old")
one() { # binary -> median estimate of pingpong/local/8 in microseconds
    "$1" --bench 'pingpong/local/8$' --warm-up-time 1 --measurement-time 4 --noplot 2>&1 |
        awk '/time:/ {gsub(/\[|\]/,""); for (i=1;i<=NF;i++) if ($i=="time:") {v=$(i+3); u=$(i+4)}; if (u=="ns") v/=1000; if (u=="ms") v*=1000; print v; exit}'
}
news=(); olds=()
for i in $(seq "$rounds"); do
    o=$(one "$old_bin"); n=$(one "$new_bin")
    echo "round $i: $rev ${o} us, this tree ${n} us"
    olds+=("$o"); news+=("$n")
done
python3 - "${olds[*]}" "${news[*]}" "$rev" <<'PY'
import statistics, sys
o = [float(x) for x in sys.argv[1].split()]; n = [float(x) for x in sys.argv[2].split()]
mo, mn = statistics.median(o), statistics.median(n)
print(f"median round trip: {sys.argv[3]} {mo:.2f} us, this tree {mn:.2f} us, ratio {mn/mo:.3f}")
PY
