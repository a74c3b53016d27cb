#!/usr/bin/env bash
# NEURON sends its spikes over Ballast (issue 32; called by ci/test.sh): the unmodified
# NEURON 9.0.2 wheel with the shim of integrations/neuron/ (ci/install-neuron.sh), on the
# rings of ball-and-stick hh cells of ci/neuron/ring.py (NEURON's own mechanisms, no
# nrnivmodl):
#   - install refusals: a NEURON other than 9.0.x, a libnrnmpi_ompi.so with another function
#     list (fake wheels: nothing is built for them);
#   - a serial run, then on NEURON and on CoreNEURON (coreneuron.enable), under
#     mpirun -n 2, 3, 4, in the modes allgather, compressed and multisend (xchng_meth 1,
#     1|4, 1|8), -n 1 in allgather and multisend 1, -n 5 in multisend 1 and 1|8 (phase 2
#     relays there):
#     the wheel's own MPI run, and the shims' with
#     BALLAST_MPI_NATIVE on and off; ci/neuron/check.py compares the spikes (with the wheel's
#     run, and with the serial run where the wheel's equals it) and checks the reports;
#     its --self-test on one run of each mode (every corruption must be caught);
#   - pc.nthread(2): on NEURON, refused under MPI_THREAD_SERIALIZED, the wheel's spikes with
#     mpi4py; on CoreNEURON, the wheel's spikes both ways, with and without thread_busywait;
#   - a rank SIGKILLed in psolve ends the job within 30 s;
#   - a FIFO in place of a report is refused and left as it is.
# Usage: ci/neuron.sh
# Cache: NEURON_CI_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/ballast/neuron: a wheelhouse
# (and pip's cache) and the venv keyed by the pins and the interpreter, outside the clone (as
# ci/neurodamus.sh). NEURON_CI_KEEP=1 keeps the outputs after a success.
# Skips (exit 0, printed) only when pip cannot reach the packages; under CI=true the skip is
# printed as a warning block.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
step_start=$(date +%s)
say() { echo "ci/neuron.sh: $*"; }
die() { echo "ci/neuron.sh: FAIL: $*" >&2; exit 1; }

pins=(neuron==9.0.2 mpi4py)

need_pkgs=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
{ command -v gcc && command -v nm; } >/dev/null 2>&1 || need_pkgs+=(build-essential)
command -v mpirun >/dev/null 2>&1 || need_pkgs+=(openmpi-bin)
dpkg -s libopenmpi-dev >/dev/null 2>&1 || need_pkgs+=(libopenmpi-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    say "installing ${need_pkgs[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need_pkgs[@]}"
fi

if [ -n "${NEURON_CI_CACHE:-}" ]; then
    cache=$NEURON_CI_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ] || [ -n "${HOME:-}" ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/ballast/neuron
else
    cache=${CARGO_TARGET_DIR:-$repo/target}/neuron-cache
fi
mkdir -p "$cache/wheels"
export PIP_CACHE_DIR=$cache/pip
py_id=$(python3 -c 'import sys, platform; print(sys.version.split()[0], platform.machine(), sys.base_prefix)')
venv_key=$(printf '%s\n' "${pins[@]}" "$py_id" | sha256sum | cut -c1-16)
venv=$cache/venv-$venv_key

skip_unreachable() {
    local msg="SKIP: pip cannot reach the packages (${pins[*]}): NEURON over Ballast did not run"
    if [ "${CI:-}" = "true" ]; then
        echo "ci/neuron.sh: ################################################################" >&2
        echo "ci/neuron.sh: WARNING (CI=true): $msg" >&2
        echo "ci/neuron.sh: ################################################################" >&2
    else
        say "$msg"
    fi
    exit 0
}

exec 9>"$cache/lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    pip_log=$cache/pip-install.log
    say "creating the venv (${pins[*]})"
    python3 -m venv "$venv"
    if ! { timeout 1800 "$venv/bin/pip" download --progress-bar off -d "$cache/wheels" "${pins[@]}" \
        && "$venv/bin/pip" install --no-index --find-links "$cache/wheels" "${pins[@]}"; } >"$pip_log" 2>&1; then
        tail -n 30 "$pip_log" >&2
        probe=$(mktemp -d)
        probe_ok=1
        probe_out=$("$venv/bin/pip" download --no-deps --no-cache-dir --timeout 20 --retries 1 -d "$probe" mpi4py 2>&1) \
            || probe_ok=0
        rm -rf "$venv" "$probe"
        if [ "$probe_ok" = 0 ] && grep -qiE 'NewConnectionError|ConnectTimeout|Max retries exceeded|Temporary failure in name resolution|Name or service not known|Network is unreachable|ProxyError|Connection refused|timed out' <<<"$probe_out"; then
            echo "$probe_out" | tail -n 5 >&2
            skip_unreachable
        fi
        die "pip install ${pins[*]} failed (log: $pip_log)"
    fi
    "$venv/bin/pip" freeze >"$venv/.complete"
else
    say "venv-$venv_key is ready (cached)"
fi
flock -u 9
export PATH=$venv/bin:$PATH

work=$(mktemp -d)
cleanup() {
    local rc=$?
    if [ "$rc" -eq 0 ] && [ -z "${NEURON_CI_KEEP:-}" ]; then
        rm -rf "$work"
    else
        echo "ci/neuron.sh: outputs kept in $work" >&2
    fi
}
trap cleanup EXIT

# 1. The install's refusals, on fake wheels (a `neuron` package first on PYTHONPATH).
fake_install() { # VERSION LIBSRC -> the install's output; its exit status must be 1
    local d=$work/fake-$1
    mkdir -p "$d/neuron/.data/lib"
    echo "__version__ = '$1'" >"$d/neuron/__init__.py"
    printf '%s\n' "$2" | gcc -shared -fPIC -x c - -o "$d/neuron/.data/lib/libnrnmpi_ompi.so"
    awk '!/^#/ {printf "void %s(void) {}\n", $1} END {print "void *_ZN10coreneuron11nrnmpi_commE;"}' \
        integrations/neuron/corenrnmpi_functions.txt | gcc -shared -fPIC -x c - -o "$d/neuron/.data/lib/libcorenrnmpi_ompi.so"
    : >"$d/neuron/.data/lib/libnrniv.so"
    local out rc=0
    out=$(PYTHONPATH=$d bash ci/install-neuron.sh "$work/fake-prefix" 2>&1) || rc=$?
    [ "$rc" = 1 ] || die "ci/install-neuron.sh on a fake NEURON $1 exited $rc (want 1): $out"
    echo "$out"
}
out=$(fake_install 9.1.0 'void f_nrnmpi_barrier(void) {}')
grep -q "NEURON 9.1.0 found .*9.0.x only" <<<"$out" || die "no clear refusal of NEURON 9.1.0: $out"
all_but_one=$(awk '!/^#/ && $1 != "f_nrnmpi_wtime" {printf "void %s(void) {}\n", $1} END {print "void *p_cxx_char_alloc; void *nrnmpi_comm;"}' \
    integrations/neuron/nrnmpi_functions.txt)
out=$(fake_install 9.0.2 "$all_but_one")
grep -q "libnrnmpi_ompi.so exports another list of functions than" <<<"$out" && grep -q "f_nrnmpi_wtime" <<<"$out" \
    || die "no clear refusal of a libnrnmpi_ompi.so without f_nrnmpi_wtime: $out"
[ ! -e "$work/fake-prefix/lib/ballast-nrnhome" ] || die "a refused install left $work/fake-prefix/lib/ballast-nrnhome"
say "install refusals (NEURON 9.1.0; a libnrnmpi_ompi.so lacking f_nrnmpi_wtime): ok"

# 2. The install.
install_start=$(date +%s)
bash ci/install-neuron.sh "$work/prefix" >"$work/install.log" 2>&1 || { tail -n 30 "$work/install.log" >&2; die "ci/install-neuron.sh failed"; }
nrnhome_line=$(tail -n 1 "$work/install.log")
[ "$nrnhome_line" = "export NRNHOME=$work/prefix/lib/ballast-nrnhome" ] || die "the install's last line is '$nrnhome_line'"
nrnhome=$work/prefix/lib/ballast-nrnhome
say "ci/install-neuron.sh in $(($(date +%s) - install_start)) s"

mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
ring=$repo/ci/neuron/ring.py
modes=(allgather compressed multisend1 multisend5 multisend9)

# 3. The serial reference (no MPI).
(cd "$work" && timeout 300 python "$ring" "$work/serial.txt" allgather >"$work/serial.log" 2>&1) \
    || { cat "$work/serial.log" >&2; die "the serial run failed"; }
say "serial: $(wc -l <"$work/serial.txt") spikes"

run_ring() { # NAME RANKS MODE SIM [ENV...]: the run's spikes in $work/NAME.txt, reports in $work/NAME.rep
    local name=$1 n=$2 mode=$3 sim=$4
    shift 4
    local extra=()
    [ "$sim" = coreneuron ] && extra=(--coreneuron)
    (cd "$work" && env "$@" NEURON_INIT_MPI=1 BALLAST_REPORT_DIR="$work/$name.rep" timeout 300 \
        mpirun "${mpirun_flags[@]}" -n "$n" python "$ring" "$work/$name.txt" "$mode" "${extra[@]}" >"$work/$name.log" 2>&1) \
        || { tail -n 30 "$work/$name.log" >&2; die "$name (mpirun -n $n, mode $mode, $sim) failed"; }
}

runs=0
for sim in neuron coreneuron; do
    for n in 1 2 3 4 5; do
        these=("${modes[@]}")
        # 1 rank: no exchange between ranks, so one allgather and one multisend mode;
        # 5 ranks: multisend's phase 2 relays (a spike with targets on 4 other ranks).
        [ "$n" = 1 ] && these=(allgather multisend1)
        [ "$n" = 5 ] && these=(multisend1 multisend9)
        for mode in "${these[@]}"; do
            run_ring "wheel-$sim-$n-$mode" "$n" "$mode" "$sim" -u NRNHOME
            [ ! -e "$work/wheel-$sim-$n-$mode.rep" ] || die "the wheel's own run wrote Ballast reports: the shim was loaded without NRNHOME"
            same_serial=no
            cmp -s "$work/serial.txt" "$work/wheel-$sim-$n-$mode.txt" && same_serial=yes
            for native in on off; do
                name=ballast-$sim-$n-$mode-$native
                run_ring "$name" "$n" "$mode" "$sim" NRNHOME="$nrnhome" BALLAST_MPI_NATIVE="$native"
                args=(--simulator "$sim" --run "$work/$name.txt" --wheel "$work/wheel-$sim-$n-$mode.txt" --serial "$work/serial.txt"
                    --reports "$work/$name.rep" --mode "$mode" --ranks "$n" --native "$native")
                python "$repo/ci/neuron/check.py" "${args[@]}" || die "$name: the checks failed (outputs in $work)"
                if [ "$n" = 3 ] && [ "$native" = off ]; then
                    python "$repo/ci/neuron/check.py" --self-test "${args[@]}" || die "$name: check.py --self-test failed"
                fi
                runs=$((runs + 1))
            done
            say "$sim, mpirun -n $n $mode: Ballast (native on, off) = the wheel's MPI; = serial: $same_serial"
        done
    done
done
# 3b. NEURON's and CoreNEURON's spikes over Ballast's shared-memory transport (issue 36):
# BALLAST_TRANSPORT=shm makes the shim take ballast_comm_from_env; NEURON's MPI only starts
# the job (the start-up exchange) and carries the calls the shim forwards, and the spike
# exchange goes through the segments. The spikes must be the wheel's own MPI run's, and the
# reports must say transport shm.
for sim in neuron coreneuron; do
    for n in 2 3 4; do
        for mode in allgather compressed multisend1; do
            name=shm-$sim-$n-$mode
            run_ring "$name" "$n" "$mode" "$sim" NRNHOME="$nrnhome" BALLAST_TRANSPORT=shm
            python "$repo/ci/neuron/check.py" --simulator "$sim" --transport shm --run "$work/$name.txt" \
                --wheel "$work/wheel-$sim-$n-$mode.txt" --serial "$work/serial.txt" --reports "$work/$name.rep" \
                --mode "$mode" --ranks "$n" --native off || die "$name: the checks failed (outputs in $work)"
            runs=$((runs + 1))
        done
        say "$sim over shm, mpirun -n $n allgather, compressed, multisend1: Ballast shm = the wheel's MPI"
    done
done

# 4. Threads (pc.nthread(2): NEURON runs the exchange on a worker thread). NEURON alone
# initialises MPI at MPI_THREAD_SERIALIZED, and libballast accepts a communicator's calls only
# from the thread that made it: the shim must refuse at the first exchange, naming the rank,
# the reason and the fix, within the timeout. With mpi4py imported first (MPI_THREAD_MULTIPLE)
# the spikes must be the wheel's and the serial run's. (Not covered: pc.thread_busywait, with
# which the wheel itself asserts, serially too, in src/nrnoc/multicore.cpp:146; multisend with
# threads, where it asserts in src/nrniv/multisend.cpp:471.)
rc=0
(cd "$work" && NRNHOME=$nrnhome NEURON_INIT_MPI=1 timeout 120 mpirun "${mpirun_flags[@]}" -n 2 python "$ring" \
    "$work/threads-serialized.txt" allgather --nthread 2 >"$work/threads-serialized.log" 2>&1) || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || die "pc.nthread(2) under MPI_THREAD_SERIALIZED: exit $rc (want a refusal, not success or a hang)"
grep -q "ballast libnrnmpi_ompi.so shim: rank [01]: nrnmpi_spike_exchange failed .*another thread.*MPI_THREAD_MULTIPLE" \
    "$work/threads-serialized.log" || { cat "$work/threads-serialized.log" >&2; die "pc.nthread(2) under MPI_THREAD_SERIALIZED: no clear refusal"; }
say "pc.nthread(2), MPI_THREAD_SERIALIZED: refused at the first exchange, naming the reason and the fix"
for mode in allgather compressed; do
    for who in wheel ballast; do
        (cd "$work" && env $([ "$who" = ballast ] && echo "NRNHOME=$nrnhome" || echo "-u NRNHOME") NEURON_INIT_MPI=1 \
            BALLAST_REPORT_DIR="$work/threads-$who-$mode.rep" timeout 120 mpirun "${mpirun_flags[@]}" -n 2 python "$ring" \
            "$work/threads-$who-$mode.txt" "$mode" --nthread 2 --mpi4py >"$work/threads-$who-$mode.log" 2>&1) \
            || { tail -n 30 "$work/threads-$who-$mode.log" >&2; die "pc.nthread(2) with mpi4py, $who, $mode failed"; }
    done
    python "$repo/ci/neuron/check.py" --run "$work/threads-ballast-$mode.txt" --wheel "$work/threads-wheel-$mode.txt" \
        --serial "$work/serial.txt" --reports "$work/threads-ballast-$mode.rep" --mode "$mode" --ranks 2 --native on \
        || die "pc.nthread(2) with mpi4py, $mode: the checks failed"
    cmp -s "$work/serial.txt" "$work/threads-ballast-$mode.txt" || die "pc.nthread(2) with mpi4py, $mode: spikes differ from serial"
done
say "pc.nthread(2), mpi4py first (MPI_THREAD_MULTIPLE): allgather and compressed = the wheel's MPI = serial"
# CoreNEURON with pc.nthread(2): its OpenMP threads integrate, and its exchange runs on the
# thread that made the communicator, so both ways of initialising MPI (NEURON alone:
# MPI_THREAD_SERIALIZED; mpi4py first: MPI_THREAD_MULTIPLE) give the wheel's spikes, with and
# without pc.thread_busywait (which the wheel accepts with CoreNEURON). Not covered:
# multisend with threads, where the wheel's CoreNEURON asserts on its own
# (src/coreneuron/network/multisend.cpp:139).
core_threads=(allgather:serialized: compressed:serialized:--busywait allgather:mpi4py:--busywait compressed:mpi4py:)
for mode in allgather compressed; do
    (cd "$work" && env -u NRNHOME NEURON_INIT_MPI=1 timeout 120 mpirun "${mpirun_flags[@]}" -n 2 python "$ring" \
        "$work/cthreads-wheel-$mode.txt" "$mode" --coreneuron --nthread 2 >"$work/cthreads-wheel-$mode.log" 2>&1) \
        || { tail -n 30 "$work/cthreads-wheel-$mode.log" >&2; die "CoreNEURON, pc.nthread(2), the wheel's MPI, $mode failed"; }
done
for case in "${core_threads[@]}"; do
    IFS=: read -r mode init flag <<<"$case"
    name=cthreads-ballast-$mode-$init
    extra=(--coreneuron --nthread 2)
    [ "$init" = mpi4py ] && extra+=(--mpi4py)
    [ -n "$flag" ] && extra+=("$flag")
    (cd "$work" && NRNHOME=$nrnhome NEURON_INIT_MPI=1 BALLAST_REPORT_DIR="$work/$name.rep" timeout 120 \
        mpirun "${mpirun_flags[@]}" -n 2 python "$ring" "$work/$name.txt" "$mode" "${extra[@]}" >"$work/$name.log" 2>&1) \
        || { tail -n 30 "$work/$name.log" >&2; die "CoreNEURON, pc.nthread(2), $init ${flag:-}, $mode: failed or hung"; }
    python "$repo/ci/neuron/check.py" --simulator coreneuron --run "$work/$name.txt" --wheel "$work/cthreads-wheel-$mode.txt" \
        --serial "$work/serial.txt" --reports "$work/$name.rep" --mode "$mode" --ranks 2 --native on \
        || die "CoreNEURON, pc.nthread(2), $init ${flag:-}, $mode: the checks failed"
    cmp -s "$work/serial.txt" "$work/$name.txt" || die "CoreNEURON, pc.nthread(2), $init ${flag:-}, $mode: spikes differ from serial"
done
say "CoreNEURON pc.nthread(2), MPI_THREAD_SERIALIZED and mpi4py first, with and without pc.thread_busywait: allgather and compressed = the wheel's MPI = serial"

# 5. A rank killed (SIGKILL, by itself at t = 50 ms of a 100 s psolve) ends the job within 30 s
# with mpirun's message, on both paths, in an allgather and a multisend mode.
for mode in allgather multisend1; do
    for native in on off; do
        name=kill-$mode-$native
        t0=$(date +%s)
        rc=0
        (cd "$work" && NRNHOME=$nrnhome BALLAST_MPI_NATIVE=$native NEURON_INIT_MPI=1 timeout 60 mpirun "${mpirun_flags[@]}" \
            -n 3 python "$ring" "$work/$name.txt" "$mode" --tstop 100000 --kill-at 50 >"$work/$name.log" 2>&1) || rc=$?
        took=$(($(date +%s) - t0))
        [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$took" -le 30 ] \
            || { tail -n 20 "$work/$name.log" >&2; die "$name: exit $rc after $took s (want a failure within 30 s)"; }
        grep -q "ring.py: rank 1 kills itself" "$work/$name.log" && grep -q "rank 1 .*exited on signal 9" "$work/$name.log" \
            || { tail -n 20 "$work/$name.log" >&2; die "$name: no message naming the killed rank"; }
        say "rank 1 SIGKILLed in psolve ($mode, BALLAST_MPI_NATIVE=$native): the job ended in $took s with mpirun's message"
    done
done

# 6. A report path that exists and is not a regular file (a FIFO in a private directory) is
# refused with a message naming the rank and the path, and left as it is; the job ends.
mkdir "$work/fifo.rep"
mkfifo "$work/fifo.rep/neuron_rank0.json"
rc=0
(cd "$work" && NRNHOME=$nrnhome BALLAST_REPORT_DIR="$work/fifo.rep" NEURON_INIT_MPI=1 timeout 120 mpirun "${mpirun_flags[@]}" \
    -n 2 python "$ring" "$work/fifo.txt" allgather >"$work/fifo.log" 2>&1) || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || die "a FIFO as rank 0's report: exit $rc (want a refusal, not success or a hang)"
grep -q "ballast libnrnmpi_ompi.so shim: rank 0: BALLAST_REPORT_DIR: $work/fifo.rep/neuron_rank0.json exists and is not a regular file" \
    "$work/fifo.log" || { tail -n 20 "$work/fifo.log" >&2; die "a FIFO as rank 0's report: no clear refusal"; }
[ -p "$work/fifo.rep/neuron_rank0.json" ] || die "a FIFO as rank 0's report was replaced"
say "a FIFO in place of rank 0's report: refused, left as it is"

say "NEURON over Ballast: $runs runs passed in $(($(date +%s) - step_start)) s"
