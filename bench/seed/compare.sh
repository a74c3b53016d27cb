#!/usr/bin/env bash
# The seed comparison (docs/BENCHMARKS.md, "Beside Open MPI + UCX"): in one boot of the
# soft-RoCE guest with Open MPI + UCX (../shared/rxe-vm/, RXE_VM_MPI=1), for N = 4, 8 and 16
# processes, rank 0's VmPin, VmRSS and VmData before MPI_Init, after the start-up and after
# sending 10 integers to each of the N-1 other ranks:
#   - the seed's program (seed_fanout.c, MPI_Send) under Open MPI + UCX over rc_verbs on rxe0
#     with UCX's default queues, with UCX_TLS=ud,self, and with small receive queues
#     (UCX_RC_RX_QUEUE_LEN=256 UCX_UD_RX_QUEUE_LEN=256 instead of 4095 / 4096);
#   - `ballast fanout --transport verbs` (MPI carries the start-up exchange only) in
#     recv_sharing shared, per-peer, and shared with --max-endpoints 4, under the same
#     mpirun (pml ucx: MPI_Init sets UCX up as for the seed), and under mpirun with
#     `--mca pml ob1 --mca btl self,vader` (MPI without UCX: what Ballast needs of it).
# "after the start-up" is after MPI_Init for the seed, after MPI_Init and the Ballast
# communicator's setup for Ballast. Prints the Markdown table (MB = 1024 KiB).
# Usage: [COMPARE_LOG=file] bench/seed/compare.sh [N ...]   (default 4 8 16; run from anywhere)
# Needs: mpicc (libopenmpi-dev), the rxe-vm scripts, and builds `ballast` in release with
# ci/release_build.sh. Takes about 15 min on 2 cores (TCG); guest memory -m 4096.
set -euo pipefail
cd "$(dirname "$0")/../.."
ns=("$@")
[ ${#ns[@]} -gt 0 ] || ns=(4 8 16)
RXE=../shared/rxe-vm
[ -x "$RXE/run-in-vm.sh" ] || { echo "bench/seed/compare.sh: $RXE/run-in-vm.sh not found" >&2; exit 1; }
export RXE_VM_MPI=1
"$RXE/build-image.sh" >/dev/null
. ci/release_build.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -Wall -Werror -o "$work/seed_fanout" bench/seed/seed_fanout.c

cat >"$work/compare_guest.sh" <<'EOF'
set -e
cd /tmp
L="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca plm isolated"
UCX="--mca pml ucx --mca btl self -x UCX_NET_DEVICES=$RXE_VM_DEV:1 -x UCX_IB_GID_INDEX=$RXE_VM_GID -x UCX_UD_ETH_DGID_CHECK=n"
OB1="--mca pml ob1 --mca btl self,vader"
BV="-x BALLAST_IB_DEVICE=$RXE_VM_DEV -x BALLAST_GID_INDEX=$RXE_VM_GID"
B="/rxe-vm/ballast fanout --transport verbs --json"
run() { # label n command...: one line "COMPARE label n <output on one line>"
    label=$1; n=$2; shift 2
    out=$("$@" -np $n $CMD 2>&1) || { echo "$out"; echo "COMPARE_FAILED $label $n"; exit 1; }
    echo "COMPARE|$label|$n|$(echo "$out" | tr '\n' ' ')"
}
for n in $(echo "$NS" | tr , " "); do
    CMD=/rxe-vm/seed_fanout
    run "seed, UCX rc (defaults)" $n $L $UCX -x UCX_TLS=rc,self
    run "seed, UCX_TLS=ud,self" $n $L $UCX -x UCX_TLS=ud,self
    run "seed, UCX rc, small queues" $n $L $UCX -x UCX_TLS=rc,self -x UCX_RC_RX_QUEUE_LEN=256 -x UCX_UD_RX_QUEUE_LEN=256
    for mpi in ucx ob1; do
        if [ $mpi = ucx ]; then M="$L $UCX -x UCX_TLS=rc,self $BV"; else M="$L $OB1 $BV"; fi
        CMD="$B --recv-sharing shared"; run "ballast shared, pml $mpi" $n $M
        CMD="$B --recv-sharing per-peer"; run "ballast per-peer, pml $mpi" $n $M
        CMD="$B --recv-sharing shared --max-endpoints 4"; run "ballast shared + max-endpoints 4, pml $mpi" $n $M
    done
done
EOF

log=${COMPARE_LOG:-$work/guest.log} # COMPARE_LOG=file keeps the guest's raw output
set +e # the guest's exit code is read from PIPESTATUS (grep -v may select no line)
"$RXE/run-in-vm.sh" -t 2400 -m 4096 -e "NS=$(IFS=,; echo "${ns[*]}")" -f "$ballast_release" -f "$work/seed_fanout" -f "$work/compare_guest.sh" \
    "sh /rxe-vm/compare_guest.sh" | tr -d '\r' | tee "$log" | grep -v '^COMPARE|'
vm_rc=${PIPESTATUS[0]}
set -e
if [ "$vm_rc" != 0 ] || grep -q '^COMPARE_FAILED' "$log"; then
    echo "bench/seed/compare.sh: a run failed (above; run-in-vm.sh exit code $vm_rc)" >&2
    exit 1
fi
echo
echo "guest: $(grep -c '^COMPARE|' "$log") runs, -m 4096, 2 vCPUs (TCG), Open MPI 4.1.4, UCX 1.13.1, rxe0"
python3 - "$log" <<'EOF'
import json, re, sys
rows = []
for line in open(sys.argv[1]):
    if not line.startswith("COMPARE|"):
        continue
    _, label, n, out = line.rstrip("\n").split("|", 3)
    n = int(n)
    if label.startswith("seed"):
        st = {}
        for s in re.finditer(r"seed_fanout stage=(\w+) ranks=\d+ vm_pin_kb=(-?\d+) vm_lck_kb=-?\d+ vm_rss_kb=(-?\d+) vm_data_kb=(-?\d+)", out):
            st[s.group(1)] = tuple(int(x) for x in s.group(2, 3, 4))
        assert "received=ok" in out, (label, n, out)
        pts = [st["before_init"], st["after_init"], st["after_sends"]]
    else:
        r = json.loads(out[out.index("{"):out.rindex("}") + 1])
        # The memory checks of every process (with --max-endpoints the model is a bound).
        assert all(not p["problems"] for p in r["processes"]), (label, n, r["processes"])
        pts = [(s["vm_pin_kb"], s["vm_rss_kb"], s["vm_data_kb"]) for s in (r["start"], r["before"], r["after"])]
    rows.append((label, n, pts))
mb = lambda kb: f"{kb / 1024:.1f}"
print("| program, MPI | N | VmPin MB: before init / after init / after sends | VmRSS MB | VmData MB |")
print("| --- | --- | --- | --- | --- |")
for label, n, pts in rows:
    cols = [" / ".join(mb(p[i]) for p in pts) for i in range(3)]
    print(f"| {label} | {n} | {cols[0]} | {cols[1]} | {cols[2]} |")
EOF
