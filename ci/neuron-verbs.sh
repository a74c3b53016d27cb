#!/usr/bin/env bash
# NEURON over Ballast's verbs transport, for real, on soft-RoCE in the QEMU guest (issue 32,
# "Verbs: the seed's measurement with a real simulator"; not in CI: about 10 min under TCG).
# The unmodified NEURON 9.0.2 wheel runs ci/neuron/ring.py under mpirun -np RANKS in the
# guest built with Open MPI + UCX (../shared/rxe-vm/ with RXE_VM_MPI=1, see its NOTES.md):
#   - the wheel's own MPI with --mca pml ucx (rc_verbs on rxe0);
#   - the shim of integrations/neuron/ (ci/install-neuron.sh --verbs: libballast with mpi and
#     verbs) with BALLAST_TRANSPORT=verbs: the shim takes ballast_comm_from_env, the spikes go
#     over Ballast's verbs transport on rxe0, and MPI (--mca pml ob1) only starts the job and
#     carries the forwarded calls.
# Checks, per mode: the two runs' spikes are identical (sha256 of the sorted spike file), the
# reports say transport verbs and show the exchange (spike_exchanges > 0 in allgather modes,
# multisend sent = received > 0 in multisend modes); prints each run's spikes beside the host's
# serial run, and rank 0's VmRSS, VmHWM and VmPin at the end of psolve (kB).
# The guest is a busybox initramfs without python: python3 with its standard library, numpy
# and the wheel are copied in from the venv of ci/neuron.sh (run that first) or $NEURON_PYTHON.
# Usage: ci/neuron-verbs.sh [--modes "allgather multisend1"] [--ranks 2] [--tstop 200] [--mem MB]
# Without qemu, the guest image or a python with NEURON it prints why and skips (exit 0);
# under CI=true that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
began=$SECONDS
die() { echo "ci/neuron-verbs.sh: FAIL: $*" >&2; exit 1; }

modes="allgather multisend1" ranks=2 tstop=200 mem=4096
while [ $# -gt 0 ]; do
    case "$1" in
        --modes) modes=$2; shift 2 ;;
        --ranks) ranks=$2; shift 2 ;;
        --tstop) tstop=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        *) echo "usage: ci/neuron-verbs.sh [--modes \"allgather multisend1\"] [--ranks N] [--tstop MS] [--mem MB]" >&2; exit 2 ;;
    esac
done

NAME=ci/neuron-verbs.sh WHAT="NEURON over verbs"
export RXE_VM_MPI=1 # build-image.sh and run-in-vm.sh: the image with Open MPI + UCX
. ci/rxe_guest.sh

# A python with NEURON 9.0.2: $NEURON_PYTHON, else the newest complete venv of ci/neuron.sh.
cache=${NEURON_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ballast/neuron}
py=${NEURON_PYTHON:-}
if [ -z "$py" ]; then
    for v in $(ls -td "$cache"/venv-*/ 2>/dev/null); do
        if [ -f "$v/.complete" ]; then py=${v%/}/bin/python; break; fi
    done
fi
[ -n "$py" ] && env -u NEURON_INIT_MPI "$py" -c 'import neuron' >/dev/null 2>&1 \
    || skip "no python with NEURON (run ci/neuron.sh first, or set NEURON_PYTHON)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PATH="$(dirname "$py"):$PATH" bash ci/install-neuron.sh "$work/prefix" --verbs >"$work/install.log" 2>&1 \
    || { tail -n 30 "$work/install.log" >&2; die "ci/install-neuron.sh --verbs failed"; }

# python3 for the guest: the interpreter behind the venv, its standard library (without the
# tests, IDLE, tkinter and the interpreter's own site-packages), and from the venv neuron,
# numpy and what they import.
stdlib=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
site=$(env -u NEURON_INIT_MPI "$py" -c 'import neuron, os; print(os.path.dirname(os.path.dirname(neuron.__file__)))')
lib=$work/pyenv/lib/$(basename "$stdlib")
mkdir -p "$work/pyenv/bin" "$lib/site-packages"
cp "$(readlink -f "$py")" "$work/pyenv/bin/python3"
tar -C "$stdlib" --exclude=./test --exclude=./idlelib --exclude=./tkinter --exclude=./turtledemo \
    --exclude=./ensurepip --exclude=./lib2to3 --exclude=./site-packages --exclude=./dist-packages --exclude='./config-*' \
    -cf - . | tar -C "$lib" -xf -
for p in neuron numpy numpy.libs find_libpython packaging "$site"/{neuron,numpy,find_libpython,packaging}-*.dist-info; do
    [ ! -e "$site/${p##*/}" ] || cp -a "$site/${p##*/}" "$lib/site-packages/"
done
[ -d "$lib/site-packages/neuron" ] && [ -d "$lib/site-packages/numpy" ] || die "neuron or numpy not found in $site"
# The wheel's demo mechanisms link a libnrniv.so that ldd cannot find (run-in-vm.sh refuses that).
rm -rf "$lib/site-packages/neuron/.data/share/nrn/demo"

# The host's serial run, for reference.
for mode in $modes; do
    (cd "$work" && env -u NEURON_INIT_MPI -u NRNHOME "$py" "$repo/ci/neuron/ring.py" "$work/serial-$mode.txt" "$mode" \
        --tstop "$tstop" >"$work/serial-$mode.log" 2>&1) || { cat "$work/serial-$mode.log" >&2; die "the serial run ($mode) failed"; }
done

log=$work/guest.log
echo "ci/neuron-verbs.sh: one boot (-m $mem): modes $modes, mpirun -np $ranks, tstop $tstop ms: the wheel's MPI (pml ucx) and the shim over verbs"
"$RXE/run-in-vm.sh" -t 3000 -m "$mem" -f "$work/pyenv" -f "$work/prefix" -f ci/neuron/ring.py -f ci/neuron-guest/verbs_run.sh \
    -e "MODES=$modes" -e "RANKS=$ranks" -e "TSTOP=$tstop" "sh /rxe-vm/verbs_run.sh" | tee "$log" || die "the guest run failed (above)"
tr -d '\r' <"$log" >"$log.txt"

# The Ballast run's reports (one `rank json` line each on stdin): transport verbs, and the exchange.
cat >"$work/check_reports.py" <<'EOF_PY'
import json, sys
mode, ranks = sys.argv[1], int(sys.argv[2])
reps = {}
for line in sys.stdin:
    r, j = line.split(" ", 1)
    reps[int(r)] = json.loads(j)
assert sorted(reps) == list(range(ranks)), f"{mode}: reports of ranks {sorted(reps)}, want 0..{ranks - 1}"
for r, j in reps.items():
    assert j["transport"] == "verbs", f"{mode}: rank {r} transport {j['transport']!r}, want verbs"
if mode.startswith("multisend"):
    s = sum(j["multisend_sent"] for j in reps.values())
    g = sum(j["multisend_received"] for j in reps.values())
    assert s == g > 0, f"{mode}: multisend sent {s}, received {g}"
else:
    assert all(j["spike_exchanges"] > 0 for j in reps.values()), f"{mode}: a rank made no exchange"
j = reps[0]
print(f"rank 0 report: transport {j['transport']}, spike_exchanges {j['spike_exchanges']}, multisend sent/received "
      f"{j['multisend_sent']}/{j['multisend_received']}, spikes received {j['spikes_received']}, footprint total "
      f"{j['footprint']['total']} B, peers {j['peers_connected']}, VmPin {j['vm_pin_kb']} kB at terminate")
EOF_PY
for mode in $modes; do
    w=$(grep "^NEURON_VERBS wheel $mode " "$log.txt") || die "no wheel run for $mode"
    b=$(grep "^NEURON_VERBS ballast $mode " "$log.txt") || die "no Ballast run for $mode"
    hw=$(sed 's/.*sha256=\([0-9a-f]*\).*/\1/' <<<"$w")
    hb=$(sed 's/.*sha256=\([0-9a-f]*\).*/\1/' <<<"$b")
    [ "$hw" = "$hb" ] || die "$mode: the spikes over Ballast verbs ($hb) differ from the wheel's MPI over UCX ($hw)"
    hs=$(sha256sum <"$work/serial-$mode.txt" | cut -d' ' -f1)
    same_serial=no
    [ "$hs" = "$hw" ] && same_serial=yes
    grep "^NEURON_VERBS_REPORT $mode " "$log.txt" | cut -d' ' -f3- | python3 "$work/check_reports.py" "$mode" "$ranks" \
        | sed "s/^/ci\/neuron-verbs.sh: $mode: /" || die "$mode: the reports' checks failed"
    echo "ci/neuron-verbs.sh: $mode: spikes identical ($(sed 's/.*lines=\([0-9]*\).*/\1/' <<<"$w") lines; = the host's serial run: $same_serial)"
    echo "ci/neuron-verbs.sh: $mode: rank 0 at the end of psolve (kB): wheel MPI over UCX $(grep -o 'VmRSS=.*' <<<"$w");" \
        "shim over Ballast verbs $(grep -o 'VmRSS=.*' <<<"$b")"
done
echo "ci/neuron-verbs.sh: ok in $((SECONDS - began)) s"
