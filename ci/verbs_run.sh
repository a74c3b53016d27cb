#!/usr/bin/env bash
# `ballast run --transport verbs` for real, on soft-RoCE inside the QEMU guest
# (../shared/rxe-vm/, see its NOTES.md; called by ci/test.sh right after ci/verbs.sh).
# On ../shared/data/sonata/allen-layer4_sample (SONATA: the guest reads the HDF5 files with
# the libhdf5 that run-in-vm.sh ships beside the binary, found by ldd), two guest boots:
#   1. the balancer's sim_verbs test (3 verbs ranks as threads on a synthetic circuit:
#      local spikes, footprint within 10%), then `ballast run --transport verbs --ranks 3`
#      (3 ranks as threads, each with its own verbs communicator on rxe0), and once with
#      `--transport auto` (must pick verbs);
#   2. 2 processes, rank 0 on rxe0 and rank 1 on rxe1 (over the veth), meeting through the
#      TCP bootstrap on loopback (BALLAST_ROOT, BALLAST_RANK/BALLAST_SIZE);
# each run with Memory and RoundRobin, p2p and allgather. Every run's out.dat must be
# identical to the host's `ballast run --transport local` of the same circuit (the guest
# prints its sha256 and line count; run-in-vm.sh returns only the command's output) and the
# run must print "verbs footprint within 10% of predicted: yes".
# Without qemu or the guest image it prints why and skips (exit 0); under CI=true a missing
# guest is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS

CIRCUIT=../shared/data/sonata/allen-layer4_sample
NAME=ci/verbs_run.sh WHAT="ballast run --transport verbs"
. ci/rxe_guest.sh
[ -f "$CIRCUIT/circuit_config.json" ] || skip "$CIRCUIT/circuit_config.json not found"

# The release `ballast` that ci/test.sh and ci/verbs_mpi.sh use (sonata, mpi, verbs; MPI is
# not initialised here: the processes meet through BALLAST_ROOT).
. ci/release_build.sh
ballast_bin=$ballast_release
features=ballast-sim/verbs,ballast-sim/sonata
sim_verbs=$(cargo test --locked -p ballast-sim --features "$features" --test sim_verbs --no-run --message-format=json \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "sim_verbs" and m.get("executable"):
        print(m["executable"])')
[ -x "$sim_verbs" ] || { echo "ci/verbs_run.sh: no sim_verbs test executable" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
circuit_abs=$(cd "$CIRCUIT" && pwd)

# The reference: the local transport on the host, 1 rank.
(cd "$work" && "$ballast_bin" run --transport local --circuit "$circuit_abs/circuit_config.json" --ranks 1 \
    --lb-mode RoundRobin --output ref >/dev/null)
ref_hash=$(sha256sum <"$work/ref/out.dat" | cut -d' ' -f1)
ref_lines=$(wc -l <"$work/ref/out.dat")
echo "ci/verbs_run.sh: host local reference: out.dat sha256=$ref_hash lines=$ref_lines"

# The guest side (busybox sh). `$1`: threads or procs.
cat >"$work/verbs_run_guest.sh" <<'EOF'
set -e
mkdir -p /tmp/w && cd /tmp/w
C=/rxe-vm/allen-layer4_sample/circuit_config.json
port=23450
report() { # label, stdout file: the check line and out.dat's hash and line count
    cat "$2"
    if grep -q '^verbs footprint within 10% of predicted: yes' "$2"; then check=yes; else check=NO; fi
    echo "VERBS_RUN $1 sha256=$(sha256sum <"$1/out.dat" | cut -d' ' -f1) lines=$(wc -l <"$1/out.dat") footprint_check=$check"
}
for mode in Memory RoundRobin; do
    for ex in p2p allgather; do
        label=$1-$mode-$ex
        echo "== ballast run --transport verbs ($1) --lb-mode $mode --exchange $ex"
        if [ "$1" = threads ]; then
            BALLAST_IB_DEVICE=$RXE_VM_DEV BALLAST_GID_INDEX=$RXE_VM_GID /rxe-vm/ballast run --transport verbs \
                --circuit $C --ranks 3 --lb-mode $mode --exchange $ex --output $label >$label.log
        else
            port=$((port + 1))
            export BALLAST_ROOT=127.0.0.1:$port BALLAST_SIZE=2 BALLAST_BOOTSTRAP_TIMEOUT=30
            BALLAST_RANK=1 BALLAST_IB_DEVICE=$RXE_VM_DEV2 BALLAST_GID_INDEX=$RXE_VM_GID2 /rxe-vm/ballast run --transport verbs \
                --circuit $C --ranks 2 --lb-mode $mode --exchange $ex --output $label >$label.r1.log 2>&1 &
            r1=$!
            BALLAST_RANK=0 BALLAST_IB_DEVICE=$RXE_VM_DEV BALLAST_GID_INDEX=$RXE_VM_GID /rxe-vm/ballast run --transport verbs \
                --circuit $C --ranks 2 --lb-mode $mode --exchange $ex --output $label >$label.log || { cat $label.r1.log; exit 1; }
            wait $r1 || { echo "rank 1 failed:"; cat $label.r1.log; exit 1; }
        fi
        report $label $label.log
    done
done
if [ "$1" = threads ]; then
    # --transport auto picks verbs where a device is usable (and says so).
    echo "== ballast run --transport auto --ranks 3"
    BALLAST_IB_DEVICE=$RXE_VM_DEV BALLAST_GID_INDEX=$RXE_VM_GID /rxe-vm/ballast run --transport auto \
        --circuit $C --ranks 3 --lb-mode RoundRobin --output threads-auto >threads-auto.log 2>auto.err
    cat auto.err
    grep -q '^ballast run: transport auto: using verbs' auto.err || { echo '--transport auto did not pick verbs'; exit 1; }
    report threads-auto threads-auto.log
fi
EOF

log=$work/guest.log
vm() { "$RXE/run-in-vm.sh" -t 400 -f "$CIRCUIT" -f "$ballast_bin" -f "$work/verbs_run_guest.sh" "$@"; }

echo "ci/verbs_run.sh: boot 1: sim_verbs test, then 3 ranks as threads on rxe0"
vm -f "$sim_verbs" -e BALLAST_TEST_REQUIRE_RDMA=1 \
    "set -e; /rxe-vm/$(basename "$sim_verbs") --nocapture --test-threads=1; sh /rxe-vm/verbs_run_guest.sh threads" | tee "$log"
grep -q '^test result: ok. 1 passed' "$log" || { echo "ci/verbs_run.sh: the sim_verbs test did not pass in the guest" >&2; exit 1; }

echo "ci/verbs_run.sh: boot 2: 2 processes, rank 0 on rxe0, rank 1 on rxe1, TCP bootstrap on loopback"
vm "sh /rxe-vm/verbs_run_guest.sh procs" | tee -a "$log"

runs=0
while read -r _ label hash lines check; do
    runs=$((runs + 1))
    if [ "$hash" != "sha256=$ref_hash" ] || [ "$lines" != "lines=$ref_lines" ]; then
        echo "ci/verbs_run.sh: $label: out.dat differs from the host's local run ($hash $lines; local sha256=$ref_hash lines=$ref_lines)" >&2
        exit 1
    fi
    if [ "$check" != "footprint_check=yes" ]; then
        echo "ci/verbs_run.sh: $label: the verbs footprint is not within 10% of the prediction" >&2
        exit 1
    fi
    echo "ci/verbs_run.sh: $label: out.dat identical to local ($ref_lines lines), footprint within 10%: ok"
done < <(grep '^VERBS_RUN ' "$log" | tr -d '\r')
if [ "$runs" != 9 ]; then
    echo "ci/verbs_run.sh: expected 9 verbs runs, the guest reported $runs" >&2
    exit 1
fi
echo "ci/verbs_run.sh: ok ($runs runs, $((SECONDS - began)) s)"
