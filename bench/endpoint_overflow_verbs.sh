#!/usr/bin/env bash
# The cost of an endpoint cap over verbs, in the soft-RoCE guest (../shared/rxe-vm/, see
# its NOTES.md): `ballast run --synthetic CELLS --tstop TSTOP --memory-scale 0.001
# --recv-sharing shared --transport verbs` as 4 processes of one rank each on rxe0 (meeting
# through the TCP bootstrap on loopback), uncapped and with --max-endpoints 2 in both
# --endpoint-overflow modes (datagram: the peer beyond the cap over the UD QP; evict: LRU
# eviction and QP reconnects). One guest boot; the configurations are interleaved ROUNDS
# times (the order rotates every round). Prints each run's simulation time (the "spikes in
# X s" of rank 0), then per configuration the median and its ratio to the uncapped median,
# and checks that every run gave the uncapped run's spikes (out.dat).
# Usage: bash bench/endpoint_overflow_verbs.sh [ROUNDS] [CELLS] [TSTOP]   (default 3 4000 100)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} cells=${2:-4000} tstop=${3:-100}
NAME=bench/endpoint_overflow_verbs.sh WHAT="the verbs endpoint-overflow benchmark"
. ci/rxe_guest.sh
cargo build --release --locked -p ballast --features verbs --bin ballast >/dev/null 2>&1
bin=${CARGO_TARGET_DIR:-target}/release/ballast
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/guest.sh" <<EOF
set -e
mkdir -p /tmp/w && cd /tmp/w
port=24500
one() { # config round: the 4 processes, rank 0's time line
    case \$1 in
        uncapped) extra= ;;
        *) extra="--max-endpoints \${1#*-} --endpoint-overflow \${1%-*}" ;;
    esac
    port=\$((port + 1))
    export BALLAST_ROOT=127.0.0.1:\$port BALLAST_SIZE=4 BALLAST_BOOTSTRAP_TIMEOUT=60
    export BALLAST_IB_DEVICE=\$RXE_VM_DEV BALLAST_GID_INDEX=\$RXE_VM_GID
    out=out-\$1-\$2
    for p in 1 2 3; do
        BALLAST_RANK=\$p /rxe-vm/ballast run --transport verbs --synthetic $cells --tstop $tstop \\
            --memory-scale 0.001 --recv-sharing shared --ranks 4 \$extra --output \$out >r\$p.log 2>&1 &
    done
    BALLAST_RANK=0 /rxe-vm/ballast run --transport verbs --synthetic $cells --tstop $tstop \\
        --memory-scale 0.001 --recv-sharing shared --ranks 4 \$extra --output \$out >r0.log 2>&1 || { cat r0.log; exit 1; }
    wait
    s=\$(sed -n 's/.* spikes in \([0-9.]*\) s .*/\1/p' r0.log)
    h=\$(sha256sum <\$out/out.dat | cut -d' ' -f1)
    echo "EPO \$1 \$2 \$s \$h"
}
configs="uncapped datagram-2 evict-2"
r=0
while [ \$r -lt $rounds ]; do
    case \$((r % 3)) in
        0) order="uncapped datagram-2 evict-2" ;;
        1) order="datagram-2 evict-2 uncapped" ;;
        2) order="evict-2 uncapped datagram-2" ;;
    esac
    for c in \$order; do one \$c \$r; done
    r=\$((r + 1))
done
EOF

echo "endpoint_overflow_verbs: $rounds rounds, --synthetic $cells --tstop $tstop, 4 processes on rxe0, $(date -u +%FT%TZ), $(git rev-parse --short HEAD)"
"$RXE/run-in-vm.sh" -t 600 -f "$bin" -f "$work/guest.sh" "sh /rxe-vm/guest.sh" | tee "$work/log"
python3 - "$work/log" <<'EOF'
import statistics as st, sys
rows = [l.split()[1:] for l in open(sys.argv[1]) if l.startswith("EPO ")]
ref = {r[3] for r in rows if r[0] == "uncapped"}
if len(ref) != 1 or any(r[3] not in ref for r in rows):
    sys.exit(f"endpoint_overflow_verbs: the runs' spikes differ: {rows}")
times = {}
for c, _, s, _ in rows:
    times.setdefault(c, []).append(float(s))
base = st.median(times["uncapped"])
print(f"{'config':<11} {'median (s)':>10} {'/ uncapped':>11}  runs (s)")
for c in ["uncapped", "datagram-2", "evict-2"]:
    m = st.median(times[c])
    print(f"{c:<11} {m:>10.2f} {m / base:>11.2f}  {times[c]}")
print("endpoint_overflow_verbs: every run gave the uncapped spikes")
EOF
