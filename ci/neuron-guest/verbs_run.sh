# The guest half of ci/neuron-verbs.sh (busybox sh in the soft-RoCE guest, the image with
# Open MPI + UCX). For each mode of $MODES, ci/neuron/ring.py under mpirun -np $RANKS:
#   wheel:   the wheel's own MPI over UCX (--mca pml ucx, rc_verbs on rxe0), as NOTES.md gives;
#   ballast: the shim (NRNHOME) with BALLAST_TRANSPORT=verbs: the spikes over Ballast's verbs
#            transport on rxe0, MPI (--mca pml ob1, shared memory) only starting the job and
#            carrying the forwarded calls.
# Prints, per run, one `NEURON_VERBS who mode sha256=.. lines=.. seconds=.. VmRSS=.. VmHWM=..
# VmPin=..` line (rank 0's /proc/self/status at the end of psolve, kB) and the Ballast run's
# rank reports (`NEURON_VERBS_REPORT mode rank json`); a failed run prints its log and
# `NEURON_VERBS_FAILED`.
set -e
mkdir -p /tmp/w && cd /tmp/w
export PYTHONHOME=/rxe-vm/pyenv PYTHONPATH=/rxe-vm/pyenv/lib/python3.11/site-packages
PY=/rxe-vm/pyenv/bin/python3
# NEURON finds libmpi.so by that name, and the image has only the versioned library.
libmpi=$(ls /usr/lib/x86_64-linux-gnu/libmpi.so.40 /lib/x86_64-linux-gnu/libmpi.so.40 2>/dev/null | head -n 1)
[ -n "$libmpi" ] || { echo "NEURON_VERBS_FAILED no libmpi.so.40 in the guest"; exit 1; }
base="--allow-run-as-root --oversubscribe --bind-to none --mca plm isolated -np $RANKS
    -x PYTHONHOME -x PYTHONPATH -x NEURON_INIT_MPI=1 -x MPI_LIB_NRN_PATH=$libmpi"
ucx="--mca pml ucx --mca btl self -x UCX_NET_DEVICES=$RXE_VM_DEV:1 -x UCX_IB_GID_INDEX=$RXE_VM_GID
    -x UCX_UD_ETH_DGID_CHECK=n -x UCX_TLS=rc,self"
ob1="--mca pml ob1 --mca btl self,vader -x NRNHOME=/rxe-vm/prefix/lib/ballast-nrnhome -x BALLAST_TRANSPORT=verbs
    -x BALLAST_IB_DEVICE=$RXE_VM_DEV -x BALLAST_GID_INDEX=$RXE_VM_GID"
field() { sed -n "s/^$1:[[:space:]]*\([0-9]*\) kB/\1/p" "$2"; }
for mode in $MODES; do
    for who in wheel ballast; do
        name=$who-$mode
        if [ $who = wheel ]; then flags=$ucx; else flags="$ob1 -x BALLAST_REPORT_DIR=/tmp/w/$name.rep"; fi
        t0=$(date +%s)
        # shellcheck disable=SC2086
        if ! mpirun $base $flags $PY /rxe-vm/ring.py $name.txt $mode --tstop $TSTOP --status $name.status >$name.log 2>&1; then
            cat $name.log
            echo "NEURON_VERBS_FAILED $name"
            exit 1
        fi
        echo "NEURON_VERBS $who $mode sha256=$(sha256sum <$name.txt | cut -d' ' -f1) lines=$(wc -l <$name.txt)" \
            "seconds=$(($(date +%s) - t0)) VmRSS=$(field VmRSS $name.status) VmHWM=$(field VmHWM $name.status)" \
            "VmPin=$(field VmPin $name.status)"
        if [ $who = ballast ]; then
            for r in $(seq 0 $((RANKS - 1))); do
                echo "NEURON_VERBS_REPORT $mode $r $(tr -d '\n' <$name.rep/neuron_rank$r.json)"
            done
        fi
    done
done
