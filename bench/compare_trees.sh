#!/usr/bin/env bash
# This tree beside another revision's, on the benchmarks of issue 34's performance rule, in
# one run, interleaved:
#   bash bench/compare_trees.sh REV [ROUNDS]
# Builds both trees in release (REV in a worktree under target/compare-trees/REV, or in
# OLD_DIR, with its own target/; OLD_DIR=. run from the top of this tree compares it with
# itself), then runs ROUNDS rounds (default 11); in each round every benchmark runs once on
# each tree, the tree that goes first alternating from round to round:
#   local-8B      criterion's estimate of `pingpong/local/8` (benches/runtime_pingpong.rs:
#                 2 ranks as threads), µs per round trip
#   mpi-8B        `mpirun -n 2 mpi_pingpong --size 8 --rounds 3`: Ballast over MPI (the
#                 MPI native path), µs per half round trip (the median of its 3 rounds)
#   mpi-engine-8B the same run's engine column (Ballast's engine above MPI)
#   c-local-8B    bench/c/pingpong.c against the tree's libballast, `pingpong local 8 2000
#                 51` (ballast_local_run), ns per half round trip (the median block)
#   c-mpi-8B      the same under `mpirun -n 2`, `pingpong mpi 8 2000 51`
#                 (ballast_comm_from_mpi: the MPI native path)
#   dryrun-1M     wall seconds of `ballast dry-run --memory-usage J --num-target-ranks 1024`
#                 on a synthetic cell_memory_usage.json of 1,000,000 cells (1,000 metypes,
#                 2 populations), the command bench/dryrun_vs_neurodamus.sh times as
#                 `ballast-lpt` (that script with BASELINE set to REV's binary gives the same
#                 comparison beside neurodamus' Python)
# Prints every measurement, then a table: per benchmark the median over the rounds of each
# tree and their ratio (this tree / REV; above 1 is slower), and whether it is within
# 1.05. A benchmark REV cannot build (an older tree without it) is left out, with a note.
# The MPI runs bind each rank to a core (--bind-to core), as bench/capi_pingpong.sh.
# SAME_PROFILE=1 builds REV with this tree's release profile (see below).
# LOCAL_WARMUP and LOCAL_MEASURE (seconds, default 1 and 4) set criterion's warm-up and
# measurement time for local-8B, LOCAL_RESAMPLES its bootstrap resamples (default 100000;
# they set its confidence interval only, not the estimate used here): smaller values give
# more rounds in the same time. Rounds vary by the launch (the cores a run lands on), so
# more launches narrow a median more than longer ones.
set -euo pipefail
rev=${1:?usage: compare_trees.sh REV [ROUNDS]}
rounds=${2:-11}
root=$(git rev-parse --show-toplevel)
# OLD_DIR relative to where the script is run from.
[ -z "${OLD_DIR:-}" ] || OLD_DIR=$(realpath -m "$OLD_DIR")
cd "$root"
# SAME_PROFILE=1: REV is built with this tree's [profile.release] (CARGO_PROFILE_RELEASE_*
# for both trees' builds; this tree's own build is then unchanged), in its own worktree
# target/compare-trees/REV-same-profile: the code of the two trees compared, not their
# profiles.
suffix=
if [ -n "${SAME_PROFILE:-}" ]; then
    suffix=-same-profile
    while IFS= read -r kv; do
        # shellcheck disable=SC2163 # the names come from the profile's keys
        export "$kv"
        echo "note: $kv for both trees" >&2
    done < <(python3 - "$root/Cargo.toml" <<'PY'
import sys, tomllib
release = tomllib.load(open(sys.argv[1], "rb")).get("profile", {}).get("release", {})
for k, v in release.items():
    v = str(v).lower() if isinstance(v, bool) else v
    print(f"CARGO_PROFILE_RELEASE_{k.upper().replace('-', '_')}={v}")
PY
    )
fi
old=${OLD_DIR:-"$root/target/compare-trees/$rev$suffix"}
if [ ! -d "$old" ]; then
    git worktree add -q --detach "$old" "$rev"
fi
old=$(cd "$old" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun_flags=(--oversubscribe --bind-to core)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

# build DIR OUT: DIR's binaries in release (its own target directory), copied to OUT (so a
# later build cannot replace them): runtime_pingpong, mpi_pingpong, ballast, libballast.so
# and c_pingpong. A piece that does not build is left out, with a note on stderr.
build() {
    local dir=$1 out=$2 target
    mkdir -p "$out"
    if [ "$dir" = "$root" ]; then target=${CARGO_TARGET_DIR:-$root/target}; else target=$dir/target; fi
    (
        cd "$dir"
        export CARGO_TARGET_DIR=$target
        cargo bench -q --locked -p ballast-bench --features mpi --bench runtime_pingpong --no-run \
            --message-format=json 2>"$out/build.err" |
            python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="runtime_pingpong" and m.get("executable"): print(m["executable"])' |
            tail -1 | xargs -r -I{} cp {} "$out/runtime_pingpong" || true
        cargo build -q --release --locked -p ballast-bench --features mpi --bin mpi_pingpong 2>>"$out/build.err" &&
            cp "$target/release/mpi_pingpong" "$out/" || echo "note: $dir: no mpi_pingpong" >&2
        cargo build -q --release --locked -p ballast --features mpi --bin ballast 2>>"$out/build.err" &&
            cp "$target/release/ballast" "$out/" || echo "note: $dir: no ballast" >&2
        if cargo build -q --release --locked -p ballast-capi --features mpi 2>>"$out/build.err"; then
            cp "$target/release/libballast.so" "$out/"
            # The program finds the library by its SONAME, in OUT.
            soname=$(objdump -p "$out/libballast.so" | awk '/SONAME/ {print $2}')
            [ -z "$soname" ] || ln -sf libballast.so "$out/$soname"
            # shellcheck disable=SC2046 # mpicc's flags are words
            mpicc -O2 -std=c11 -DBALLAST_HAVE_MPI -I capi/include bench/c/pingpong.c -L "$out" -lballast \
                -Wl,-rpath,"$out" -o "$out/c_pingpong" 2>>"$out/build.err" || echo "note: $dir: no C ping-pong" >&2
        else
            echo "note: $dir: no libballast" >&2
        fi
    )
    [ -x "$out/runtime_pingpong" ] || echo "note: $dir: no runtime_pingpong bench" >&2
}

# mpi_pingpong's table printed µs with 2 decimals before this tree: 10 ns steps, 5% of the
# 8 B half round trip, so a ratio of medians moved by whole steps. REV's copy (in its own
# worktree, never in this tree or OLD_DIR's) gets the 3-decimal table of this tree's: a
# change of its output format only, applied here and reported.
if [ "$old" != "$root" ] && [ -z "${OLD_DIR:-}" ]; then
    pp=$old/bench/src/bin/mpi_pingpong.rs
    two='"| {s} | {n} | {:.2} | {:.2} | {:.2} | {:.2} |'
    if [ -f "$pp" ] && grep -qF "$two" "$pp"; then
        sed -i 's/"| {s} | {n} | {:.2} | {:.2} | {:.2} | {:.2} |/"| {s} | {n} | {:.3} | {:.3} | {:.3} | {:.3} |/' "$pp"
        echo "note: $rev: mpi_pingpong's table set to 3 decimals in its worktree (output format only)" >&2
    fi
fi

echo "building $root and $old in release" >&2
build "$root" "$work/new"
if [ "$old" = "$root" ]; then
    cp -r "$work/new" "$work/old"
else
    build "$old" "$work/old"
fi
if [ -x "$work/new/ballast" ]; then
    "$work/new/ballast" dry-run --synthetic 1000000 --metypes 1000 --populations 2 --num-target-ranks 1024 \
        --output-dir "$work/gen" --write-memory-usage "$work/cm_1M.json" >/dev/null
fi

# measure BENCH TREE: one measurement of BENCH with TREE's binaries (run in TREE's
# directory), printed; empty when the binary is absent or its output has no figure.
measure() {
    local b=$1 d=$work/$2
    case $b in
        local-8B)
            [ -x "$d/runtime_pingpong" ] || return 0
            (cd "$d" && ./runtime_pingpong --bench 'pingpong/local/8$' --warm-up-time "${LOCAL_WARMUP:-1}" --measurement-time "${LOCAL_MEASURE:-4}" --nresamples "${LOCAL_RESAMPLES:-100000}" --noplot 2>&1) |
                awk '/time:/ {gsub(/\[|\]/,""); for (i=1;i<=NF;i++) if ($i=="time:") {v=$(i+3); u=$(i+4)}; if (u=="ns") v/=1000; if (u=="ms") v*=1000; print v; exit}' ;;
        mpi-8B | mpi-engine-8B)
            [ -x "$d/mpi_pingpong" ] || return 0
            # The row of size 8: | 8 | iterations | raw | polled | Ballast | engine | ...
            local col=6
            [ "$b" = mpi-engine-8B ] && col=7
            (cd "$d" && mpirun "${mpirun_flags[@]}" -n 2 ./mpi_pingpong --size 8 --rounds 3 2>/dev/null) |
                awk -F'|' -v c="$col" '$2 ~ /^ *8 B *$/ {gsub(/ /, "", $c); print $c; exit}' ;;
        c-local-8B)
            [ -x "$d/c_pingpong" ] || return 0
            (cd "$d" && ./c_pingpong local 8 2000 51) | awk '$1 == "c" {print $4}' ;;
        c-mpi-8B)
            [ -x "$d/c_pingpong" ] || return 0
            (cd "$d" && mpirun "${mpirun_flags[@]}" -n 2 ./c_pingpong mpi 8 2000 51 2>/dev/null) | awk '$1 == "c" {print $4}' ;;
        dryrun-1M)
            [ -x "$d/ballast" ] && [ -f "$work/cm_1M.json" ] || return 0
            rm -rf "$d/dry" && mkdir -p "$d/dry"
            local start=$EPOCHREALTIME
            "$d/ballast" dry-run --memory-usage "$work/cm_1M.json" --num-target-ranks 1024 --output-dir "$d/dry" >/dev/null
            awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.6f\n", b - a }' ;;
    esac
}

benches="local-8B mpi-8B mpi-engine-8B c-local-8B c-mpi-8B dryrun-1M"
: >"$work/results"
for i in $(seq "$rounds"); do
    if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for b in $benches; do
        for t in $order; do
            v=$(measure "$b" "$t" || true)
            [ -z "$v" ] || echo "$b $t $v $i" >>"$work/results"
            echo "round $i $b $([ "$t" = old ] && echo "$rev" || echo "this-tree") ${v:-absent}"
        done
    done
done
python3 - "$work/results" "$rev" "$rounds" <<'PY'
import statistics, sys
units = {"local-8B": "µs/round trip", "mpi-8B": "µs/half rt", "mpi-engine-8B": "µs/half rt",
         "c-local-8B": "ns/half rt", "c-mpi-8B": "ns/half rt", "dryrun-1M": "s wall"}
got = {}
for line in open(sys.argv[1]):
    b, t, v, i = line.split()
    got.setdefault(b, {}).setdefault(t, {})[int(i)] = float(v)
rev, rounds = sys.argv[2], sys.argv[3]
print(f"\n| benchmark | unit | {rev} median | this tree median | ratio this / {rev} | within 1.05 | paired median | rounds this tree slower |")
print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
for b, unit in units.items():
    t = got.get(b, {})
    if "old" not in t or "new" not in t:
        print(f"| {b} | {unit} | - | - | - | not measured on both trees | - | - |")
        continue
    mo, mn = statistics.median(t["old"].values()), statistics.median(t["new"].values())
    r = mn / mo
    pairs = [t["new"][i] / t["old"][i] for i in t["old"] if i in t["new"] and t["old"][i] > 0]
    pm = f"{statistics.median(pairs):.3f}" if pairs else "-"
    slower = f"{sum(x > 1 for x in pairs)} of {len(pairs)}" if pairs else "-"
    print(f"| {b} | {unit} | {mo:.4g} | {mn:.4g} | {r:.3f} | {'yes' if r <= 1.05 else 'NO'} | {pm} | {slower} |")
print(f"\n(medians of {rounds} interleaved rounds; the rule is the ratio of medians; the paired")
print("median is the median over rounds of the two trees' ratio in the same round, which a")
print("bimodal machine moves less)")
PY
echo "(local-8B: criterion warm-up ${LOCAL_WARMUP:-1} s, measurement ${LOCAL_MEASURE:-4} s, ${LOCAL_RESAMPLES:-100000} resamples)"
echo "($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(date -u '+%Y-%m-%d %H:%M UTC'), this tree $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes'), $rev $(git -C "$old" rev-parse --short HEAD))"
