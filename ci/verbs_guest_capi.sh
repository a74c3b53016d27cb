#!/bin/sh
# Runs inside the soft-RoCE guest (ci/verbs.sh step 2b): the C program PROG
# (capi/tests/c/verbs_collectives.c) over N processes started here as a launcher would
# (BALLAST_ROOT + BALLAST_RANK/SIZE, rank r on rxe(r mod 2)); fails unless every process
# exits 0 and prints "... passed, 0 failed". Prints rank 0's summary line and the time.
# Usage: verbs_guest_capi.sh PROG N [PROG's options]
prog=$1; n=$2; shift 2
opts=
[ $# -gt 0 ] && opts=" $*"
port=$((7900 + $$ % 500))
t0=$(date +%s)
r=0
pids=
while [ "$r" -lt "$n" ]; do
    BALLAST_ROOT=127.0.0.1:$port BALLAST_RANK=$r BALLAST_SIZE=$n BALLAST_IB_DEVICE=rxe$((r % 2)) \
        BALLAST_GID_INDEX=$RXE_VM_GID BALLAST_BOOTSTRAP_TIMEOUT=120 "$prog" "$@" >/tmp/capi.$r.log 2>&1 &
    pids="$pids $!"
    r=$((r + 1))
done
failed=0
for p in $pids; do wait "$p" || failed=1; done
good=$(cat /tmp/capi.*.log | grep -c ' passed, 0 failed$')
if [ "$failed" != 0 ] || [ "$good" != "$n" ]; then
    for r in $(seq 0 $((n - 1))); do echo "--- process $r"; cat /tmp/capi.$r.log; done
    echo "verbs_guest_capi.sh: $n processes: FAILED ($good of $n reported all passed)"
    rm -f /tmp/capi.*.log
    exit 1
fi
echo "verbs_guest_capi.sh: $n processes$opts: $(grep -m1 ' passed, 0 failed$' /tmp/capi.0.log) in $(($(date +%s) - t0)) s"
rm -f /tmp/capi.*.log
