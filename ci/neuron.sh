#!/usr/bin/env bash
# NEURON sends its spikes over Ballast (issue 32; called by ci/test.sh): the unmodified
# NEURON 9.0.2 wheel with the shim of integrations/neuron/ (ci/install-neuron.sh), on the
# rings of ball-and-stick hh cells of ci/neuron/ring.py (NEURON's own mechanisms, no
# nrnivmodl):
#   - install refusals: a NEURON other than 9.0.x, a libnrnmpi_ompi.so with another function
#     list (fake wheels: nothing is built for them);
#   - a serial run, then under mpirun -n 1, 2, 3, 4, in the modes allgather, compressed and
#     multisend (xchng_meth 1, 1|4, 1|8): the wheel's own MPI run, and the shim's with
#     BALLAST_MPI_NATIVE on and off; ci/neuron/check.py compares the spikes (with the wheel's
#     run, and with the serial run where the wheel's equals it) and checks the reports;
#     its --self-test on one run of each mode (every corruption must be caught).
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
grep -q "exports another list of f_nrnmpi_\* functions" <<<"$out" && grep -q "f_nrnmpi_wtime" <<<"$out" \
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

run_ring() { # NAME RANKS MODE [ENV...]: the run's spikes in $work/NAME.txt, reports in $work/NAME.rep
    local name=$1 n=$2 mode=$3
    shift 3
    (cd "$work" && env "$@" NEURON_INIT_MPI=1 BALLAST_REPORT_DIR="$work/$name.rep" timeout 300 \
        mpirun "${mpirun_flags[@]}" -n "$n" python "$ring" "$work/$name.txt" "$mode" >"$work/$name.log" 2>&1) \
        || { tail -n 30 "$work/$name.log" >&2; die "$name (mpirun -n $n, mode $mode) failed"; }
}

runs=0
for n in 1 2 3 4; do
    for mode in "${modes[@]}"; do
        run_ring "wheel-$n-$mode" "$n" "$mode" -u NRNHOME
        [ ! -e "$work/wheel-$n-$mode.rep" ] || die "the wheel's own run wrote Ballast reports: the shim was loaded without NRNHOME"
        same_serial=no
        cmp -s "$work/serial.txt" "$work/wheel-$n-$mode.txt" && same_serial=yes
        for native in on off; do
            name=ballast-$n-$mode-$native
            run_ring "$name" "$n" "$mode" NRNHOME="$nrnhome" BALLAST_MPI_NATIVE="$native"
            python "$repo/ci/neuron/check.py" --run "$work/$name.txt" --wheel "$work/wheel-$n-$mode.txt" \
                --serial "$work/serial.txt" --reports "$work/$name.rep" --mode "$mode" --ranks "$n" --native "$native" \
                || die "$name: the checks failed (outputs in $work)"
            if [ "$n" = 3 ] && [ "$native" = off ]; then
                python "$repo/ci/neuron/check.py" --self-test --run "$work/$name.txt" --wheel "$work/wheel-$n-$mode.txt" \
                    --serial "$work/serial.txt" --reports "$work/$name.rep" --mode "$mode" --ranks "$n" --native "$native" \
                    || die "$name: check.py --self-test failed"
            fi
            runs=$((runs + 1))
        done
        say "mpirun -n $n $mode: Ballast (native on, off) = the wheel's MPI; = serial: $same_serial"
    done
done
say "NEURON over Ballast: $runs runs passed in $(($(date +%s) - step_start)) s"
