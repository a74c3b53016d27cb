#!/bin/sh
# Runs inside the soft-RoCE guest (ci/verbs.sh step 3): `ballast fanout --transport verbs`
# over N processes started here as a launcher would (BALLAST_ROOT + BALLAST_RANK/SIZE, rank r
# on rxe(r mod 2)); rank 0 prints the table with each process' VmPin/VmLck/VmRSS against the
# model and fails when a check fails. Usage: verbs_guest_fanout.sh BALLAST N [fanout options]
B=$1; n=$2; shift 2
port=$((7400 + $$ % 500))
r=1
pids=
while [ "$r" -lt "$n" ]; do
    BALLAST_ROOT=127.0.0.1:$port BALLAST_RANK=$r BALLAST_SIZE=$n BALLAST_IB_DEVICE=rxe$((r % 2)) \
        BALLAST_GID_INDEX=$RXE_VM_GID "$B" fanout --transport verbs "$@" >/tmp/fanout.$r.log 2>&1 &
    pids="$pids $!"
    r=$((r + 1))
done
BALLAST_ROOT=127.0.0.1:$port BALLAST_RANK=0 BALLAST_SIZE=$n BALLAST_IB_DEVICE=rxe0 \
    BALLAST_GID_INDEX=$RXE_VM_GID "$B" fanout --transport verbs "$@"
rc=$?
failed=0
for p in $pids; do wait "$p" || failed=1; done
if [ "$failed" != 0 ]; then cat /tmp/fanout.*.log; fi
rm -f /tmp/fanout.*.log
[ "$rc" = 0 ] && [ "$failed" = 0 ]
