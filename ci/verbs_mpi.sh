#!/usr/bin/env bash
# The verbs transport under mpirun, for real, on soft-RoCE inside the QEMU guest built with
# Open MPI + UCX (../shared/rxe-vm/ with RXE_VM_MPI=1, see its NOTES.md; called by
# ci/test.sh after ci/verbs_run.sh). MPI carries only the start-up exchange (a `ballast`
# built with sonata, mpi and verbs: ci/release_build.sh); the data goes over verbs. In one
# guest boot, with the mpirun flags NOTES.md gives for rxe (pml ucx over rc_verbs on rxe0):
#   1. the seed's program (bench/seed/seed_fanout.c, built with mpicc): it must run;
#   2. for recv_sharing shared and per-peer:
#      `mpirun -n 4 ballast run --transport verbs --circuit <allen-layer4_sample>`: out.dat
#      identical to the host's `ballast run --transport local` of the same circuit (the guest
#      prints its sha256 and line count: run-in-vm.sh returns only the command's output), and
#      "verbs footprint within 10% of predicted: yes";
#      `mpirun -n 4 ballast fanout --transport verbs --json`: on every rank the footprint
#      equals the model and the VmPin growth equals the registrations (in whole pages);
# every mpirun exits 0 and nothing is printed about MPI calls after MPI_Finalize.
# Without qemu, the guest image or the circuit it prints why and skips (exit 0); under
# CI=true a missing guest is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS

CIRCUIT=../shared/data/sonata/allen-layer4_sample
NAME=ci/verbs_mpi.sh WHAT="ballast run/fanout --transport verbs under mpirun"
export RXE_VM_MPI=1 # build-image.sh and run-in-vm.sh: the image with Open MPI + UCX
. ci/rxe_guest.sh
[ -f "$CIRCUIT/circuit_config.json" ] || skip "$CIRCUIT/circuit_config.json not found"
command -v mpicc >/dev/null 2>&1 || skip "mpicc not found (Debian: libopenmpi-dev)"

. ci/release_build.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -Wall -Werror -o "$work/seed_fanout" bench/seed/seed_fanout.c
circuit_abs=$(cd "$CIRCUIT" && pwd)

# The reference: the local transport on the host, 1 rank.
(cd "$work" && "$ballast_release" run --transport local --circuit "$circuit_abs/circuit_config.json" --ranks 1 \
    --lb-mode RoundRobin --output ref >/dev/null)
ref_hash=$(sha256sum <"$work/ref/out.dat" | cut -d' ' -f1)
ref_lines=$(wc -l <"$work/ref/out.dat")
echo "ci/verbs_mpi.sh: host local reference: out.dat sha256=$ref_hash lines=$ref_lines"

# The guest side (busybox sh): every command's output goes to a log that is printed, so
# that the host can look for MPI's complaints.
cat >"$work/verbs_mpi_guest.sh" <<'EOF'
set -e
mkdir -p /tmp/w && cd /tmp/w
C=/rxe-vm/allen-layer4_sample/circuit_config.json
M="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca plm isolated --mca pml ucx --mca btl self
   -x UCX_NET_DEVICES=$RXE_VM_DEV:1 -x UCX_IB_GID_INDEX=$RXE_VM_GID -x UCX_UD_ETH_DGID_CHECK=n -x UCX_TLS=rc,self
   -x BALLAST_IB_DEVICE=$RXE_VM_DEV -x BALLAST_GID_INDEX=$RXE_VM_GID -np 4"
step() { # label, command...: runs it, prints its output, fails on a non-zero exit
    label=$1; shift
    echo "== $label"
    if "$@" >$label.log 2>&1; then cat $label.log; else rc=$?; cat $label.log; echo "VERBS_MPI_FAILED $label rc=$rc"; exit 1; fi
}
step seed $M /rxe-vm/seed_fanout
for mode in shared per-peer; do
    step run-$mode $M /rxe-vm/ballast run --transport verbs --recv-sharing $mode --circuit $C --output run-$mode
    if grep -q '^verbs footprint within 10% of predicted: yes' run-$mode.log; then check=yes; else check=NO; fi
    echo "VERBS_MPI_RUN run-$mode sha256=$(sha256sum <run-$mode/out.dat | cut -d' ' -f1) lines=$(wc -l <run-$mode/out.dat) footprint_check=$check"
    $M /rxe-vm/ballast fanout --transport verbs --recv-sharing $mode --json >fanout-$mode.json 2>fanout-$mode.err \
        || { cat fanout-$mode.json fanout-$mode.err; echo "VERBS_MPI_FAILED fanout-$mode"; exit 1; }
    cat fanout-$mode.err
    echo "VERBS_MPI_FANOUT $mode $(tr -d '\n' <fanout-$mode.json)"
done
EOF

log=$work/guest.log
echo "ci/verbs_mpi.sh: one boot: the seed program, then ballast run and fanout over verbs under mpirun -n 4, shared and per-peer"
"$RXE/run-in-vm.sh" -t 600 -m 2048 -f "$CIRCUIT" -f "$ballast_release" -f "$work/seed_fanout" -f "$work/verbs_mpi_guest.sh" \
    "sh /rxe-vm/verbs_mpi_guest.sh" | tee "$log"
tr -d '\r' <"$log" >"$log.txt"

# Open MPI's complaints at exit (a communicator freed after MPI_Finalize, a process that did
# not finalise) must not appear.
if grep -n -i -E 'after MPI_FINALIZE|MPI_Finalize\(\) was (not )?called|exited without calling "?finalize|MPI_ABORT' "$log.txt"; then
    echo "ci/verbs_mpi.sh: MPI reported calls after MPI_Finalize or an abort (above)" >&2
    exit 1
fi
grep -q '^seed_fanout ranks=4 received=ok' "$log.txt" || { echo "ci/verbs_mpi.sh: the seed program did not report its integers received" >&2; exit 1; }
runs=0
while read -r _ label hash lines check; do
    runs=$((runs + 1))
    if [ "$hash" != "sha256=$ref_hash" ] || [ "$lines" != "lines=$ref_lines" ]; then
        echo "ci/verbs_mpi.sh: $label: out.dat differs from the host's local run ($hash $lines; local sha256=$ref_hash lines=$ref_lines)" >&2
        exit 1
    fi
    if [ "$check" != "footprint_check=yes" ]; then
        echo "ci/verbs_mpi.sh: $label: the verbs footprint is not within 10% of the prediction" >&2
        exit 1
    fi
    echo "ci/verbs_mpi.sh: mpirun -n 4 ballast $label: out.dat identical to local ($ref_lines lines), footprint within 10%: ok"
done < <(grep '^VERBS_MPI_RUN ' "$log.txt")
grep '^VERBS_MPI_FANOUT ' "$log.txt" | python3 -c '
import json, sys
modes = []
for line in sys.stdin:
    _, mode, text = line.split(" ", 2)
    r = json.loads(text)
    p = r["processes"]
    assert r["transport"] == "verbs" and r["ranks"] == 4 and r["peers_connected"] == 3, (mode, r)
    assert r["model_matches_accounting"], (mode, "footprint != model", r)
    assert len(p) == 4 and all(x["footprint_bytes"] == x["predicted_bytes"] for x in p), (mode, p)
    assert all(x["vm_pin_growth_bytes"] == x["pinned_expected_bytes"] > 0 and not x["problems"] for x in p), (mode, p)
    assert r["start"]["vm_pin_kb"] <= r["before"]["vm_pin_kb"] <= r["after"]["vm_pin_kb"], (mode, r)
    pinned, pin0, pin1 = p[0]["pinned_expected_bytes"] // 1024, r["start"]["vm_pin_kb"], r["after"]["vm_pin_kb"]
    print(f"ci/verbs_mpi.sh: mpirun -n 4 ballast fanout --transport verbs --recv-sharing {mode}: footprint = model on 4 ranks, "
          f"VmPin growth = registrations ({pinned} KiB per rank); rank 0 VmPin {pin0} KiB at start, {pin1} KiB after (MPI_Init included): ok")
    modes.append(mode)
assert modes == ["shared", "per-peer"], modes
'
if [ "$runs" != 2 ]; then
    echo "ci/verbs_mpi.sh: expected 2 runs under mpirun, the guest reported $runs" >&2
    exit 1
fi
echo "ci/verbs_mpi.sh: ok ($((SECONDS - began)) s)"
