#!/usr/bin/env bash
# The 1M-cell dry run (bench/dryrun_vs_neurodamus.sh's: 1,000 metypes, 2 populations, 1,024
# ranks, the allocation written) under `ulimit -v` at many limits (issue 33): every run must
# exit 0, with the allocation byte for byte the unlimited run's (the file does not depend on
# how many threads compressed it), or exit 1 with a `ballast: error:` message; never a
# signal (an OOM abort is SIGABRT, 134) or a panic (101). At a3bcc7f gzp's threads (a stack
# and a 64 MiB malloc arena each, not counted) made runs at 243-249 and 309-313 MB end in a
# failed thread spawn (101) or an OOM abort in a compressing thread (134), on 2 cores (gzp's
# threads: one per core up to 8, so the points move with the cores).
#
#   ci/dry_run_ulimit.sh BALLAST            # the short run of ci/test.sh: every MB around
#                                           # the old failure points, 24 limits (about 20 s)
#   ci/dry_run_ulimit.sh BALLAST --full     # every 2 MB from 250 to 340 MB, then every 20 MB
#                                           # to 1.6 GB (docs/TESTING.md gives the counts)
#
# Prints a count per exit status. Exit status 1 when any run failed the rule.
set -euo pipefail

bin=$(realpath "$1")
full=0
[ "${2:-}" = "--full" ] && full=1
if [ $full = 1 ]; then
    limits="$(seq 250 2 340) $(seq 360 20 1600)"
else
    limits="$(seq 240 252) $(seq 306 316)"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(dry-run --synthetic 1000000 --metypes 1000 --populations 2 --num-target-ranks 1024)
"$bin" "${args[@]}" --output-dir "$work/ref" >/dev/null
ok=0 refused=0 bad=0
for mb in $limits; do
    out=$work/out
    rm -rf "$out"
    set +e
    (ulimit -v $((mb * 1024)); exec "$bin" "${args[@]}" --output-dir "$out") >/dev/null 2>"$work/err"
    rc=$?
    set -e
    case $rc in
        0)
            if cmp -s "$work/ref/allocation_r1024_c1.pkl.gz" "$out/allocation_r1024_c1.pkl.gz"; then
                ok=$((ok + 1))
            else
                echo "ci/dry_run_ulimit.sh: ulimit -v ${mb} MB: exit 0 but the allocation differs from the unlimited run's" >&2
                bad=$((bad + 1))
            fi
            ;;
        1)
            if grep -q "^ballast: error: " "$work/err" && ! grep -q -e panicked -e "memory allocation of" "$work/err"; then
                refused=$((refused + 1))
            else
                echo "ci/dry_run_ulimit.sh: ulimit -v ${mb} MB: exit 1 without a clean message: $(tail -c 400 "$work/err")" >&2
                bad=$((bad + 1))
            fi
            ;;
        *)
            echo "ci/dry_run_ulimit.sh: ulimit -v ${mb} MB: exit $rc: $(tail -c 400 "$work/err")" >&2
            bad=$((bad + 1))
            ;;
    esac
done
echo "ci/dry_run_ulimit.sh: 1M-cell dry run at $(echo "$limits" | wc -w) limits: $ok written (identical bytes), $refused refused with a message, $bad failed"
[ $bad = 0 ]
