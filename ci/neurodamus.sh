#!/usr/bin/env bash
# The neurodamus round trip against the real neurodamus (called by ci/test.sh):
#   neurodamus dry run (mpirun -n 2, --num-target-ranks=3, memray heap tracker)
#   -> `ballast dry-run` on its cell_memory_usage.json
#   -> three `neurodamus --lb-mode` runs under mpirun -n 3: --lb-mode=Memory with Ballast's
#      allocation_r3_c1.pkl.gz, --lb-mode=Memory with neurodamus' own, and RoundRobin
#   -> the whole loop: the same --lb-mode=Memory run with Ballast's allocation and NEURON's
#      spike exchange over Ballast (NRNHOME: the shim of ci/install-neuron.sh), with
#      BALLAST_MPI_NATIVE on and off, each beside `ballast dry-run --transport-model ballast
#      --exchange allgather --transport mpi` (ci/neurodamus/exchange.py: the reports show the
#      exchange on Ballast; the charge beside the measured footprint, rank by rank); and the
#      same in multisend mode (pc.spike_compress(0, 0, 1)) beside `ballast dry-run --circuit
#      ... --exchange multisend`, whose allocation it runs with (same spikes and traces)
#   -> ci/neurodamus/check.py: neurodamus loaded Ballast's file, each rank instantiated exactly
#      Ballast's gids, spikes and soma traces identical in the five runs, Ballast's largest
#      rank <= neurodamus', and `ballast dry-run --strategy neurodamus` wrote neurodamus' own
#      allocation; then the same checks on corrupted inputs, which must all fail.
# Usage: ci/neurodamus.sh BALLAST_BINARY
#
# Python side: a venv with the pinned neurodamus, NEURON, mpi4py and memray, on a 60-cell,
# two-population ring built with neurodamus' own tests/simulations/utils.py from
# ../shared/data/neurodamus-tests (referred to by path, never copied).
#
# Cache: NEURODAMUS_CI_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/ballast/neurodamus,
# holds a wheelhouse of the downloaded wheels (and pip's cache), the venv (keyed by the pins
# and the Python interpreter) and the compiled mechanisms (neurodamus-compile-mods' own cache,
# keyed by the mod files' hashes, the flags, the toolchain and the NEURON version). It lives
# outside the clone so that it survives between CI runs on one machine (CI runs in a fresh
# clone, whose target/ starts empty); without a home directory it falls back to the target
# directory.
#
# NEURODAMUS_CI_KEEP=1 keeps the outputs (circuit, logs, allocations, results) after a
# success too; they are always kept after a failure (the path is printed).
#
# Skips (exit 0, with a printed reason) only when pip cannot reach the packages; under
# CI=true the skip is printed as a warning block. Any other failure fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
step_start=$(date +%s)
say() { echo "ci/neurodamus.sh: $*"; }
die() { echo "ci/neurodamus.sh: FAIL: $*" >&2; exit 1; }

ballast_bin=${1:?usage: ci/neurodamus.sh BALLAST_BINARY}
[ -x "$ballast_bin" ] || die "$ballast_bin is not an executable"
ballast_bin=$(cd "$(dirname "$ballast_bin")" && pwd)/$(basename "$ballast_bin")

nd_tests=$(cd .. && pwd)/shared/data/neurodamus-tests
if [ ! -f "$nd_tests/tests/simulations/utils.py" ]; then
    if [ "${CI:-}" = "true" ]; then
        die "CI=true but $nd_tests (neurodamus' test circuit and mechanisms) is missing"
    fi
    say "SKIP: $nd_tests is missing (see ../shared/README.md)"
    exit 0
fi

pins=(neurodamus==4.2.9 neuron==9.0.2 mpi4py memray)
ranks_dry=2
ranks_run=3

# System packages: a venv-capable Python, a C/C++ toolchain for nrnivmodl (and for mpi4py,
# should pip have to build it), Open MPI's mpirun and headers (ci/test.sh installs those).
need_pkgs=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need_pkgs+=(python3-dev)
{ command -v g++ && command -v make; } >/dev/null 2>&1 || need_pkgs+=(build-essential)
command -v mpirun >/dev/null 2>&1 || need_pkgs+=(openmpi-bin)
dpkg -s libopenmpi-dev >/dev/null 2>&1 || need_pkgs+=(libopenmpi-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    say "installing ${need_pkgs[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need_pkgs[@]}"
fi

if [ -n "${NEURODAMUS_CI_CACHE:-}" ]; then
    cache=$NEURODAMUS_CI_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ] || [ -n "${HOME:-}" ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/ballast/neurodamus
else # no home: the target directory, which a fresh clone starts without
    cache=${CARGO_TARGET_DIR:-$repo/target}/neurodamus-cache
fi
mkdir -p "$cache"
export PIP_CACHE_DIR=$cache/pip
mkdir -p "$cache/wheels"
py_id=$(python3 -c 'import sys, platform; print(sys.version.split()[0], platform.machine(), sys.base_prefix)')
venv_key=$(printf '%s\n' "${pins[@]}" "$py_id" | sha256sum | cut -c1-16)
venv=$cache/venv-$venv_key
say "cache $cache (wheels, venv-$venv_key, compiled mods)"

skip_unreachable() {
    local msg="SKIP: pip cannot reach the packages (${pins[*]}): the neurodamus round trip did not run"
    if [ "${CI:-}" = "true" ]; then
        echo "ci/neurodamus.sh: ################################################################" >&2
        echo "ci/neurodamus.sh: WARNING (CI=true): $msg" >&2
        echo "ci/neurodamus.sh: ################################################################" >&2
    else
        say "$msg"
    fi
    exit 0
}

# The venv: built in place (a venv cannot be moved), marked complete by a stamp written
# last; an unstamped leftover (an interrupted install) is rebuilt. flock keeps two runs on
# one machine from building it at once.
exec 9>"$cache/lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    pip_log=$cache/pip-install.log
    say "creating the venv (${pins[*]})"
    venv_start=$(date +%s)
    python3 -m venv "$venv"
    # pip download into a wheelhouse kept in the cache (reused file by file; pip's own HTTP
    # cache keeps nothing when the index answers no-store), then an offline install from it.
    if ! { timeout 1800 "$venv/bin/pip" download --progress-bar off -d "$cache/wheels" "${pins[@]}" \
        && "$venv/bin/pip" install --no-index --find-links "$cache/wheels" "${pins[@]}"; } >"$pip_log" 2>&1; then
        tail -n 30 "$pip_log" >&2
        # Unreachable, or a real failure? Ask for one small wheel with a short timeout.
        probe=$(mktemp -d)
        probe_ok=1
        probe_out=$("$venv/bin/pip" download --no-deps --no-cache-dir --timeout 20 --retries 1 \
            -d "$probe" neurodamus==4.2.9 2>&1) || probe_ok=0
        rm -rf "$venv" "$probe"
        if [ "$probe_ok" = 0 ]; then
            if grep -qiE 'NewConnectionError|ConnectTimeout|Max retries exceeded|Temporary failure in name resolution|Name or service not known|Network is unreachable|ProxyError|Connection refused|timed out' <<<"$probe_out"; then
                echo "$probe_out" | tail -n 5 >&2
                skip_unreachable
            fi
        fi
        die "pip install ${pins[*]} failed (log: $pip_log)"
    fi
    "$venv/bin/pip" freeze >"$venv/.complete"
    say "venv created in $(($(date +%s) - venv_start)) s"
else
    say "venv-$venv_key is ready (cached)"
fi
flock -u 9
say "venv: $(grep -iE '^(neurodamus|neuron|mpi4py|memray)==' "$venv/.complete" | tr '\n' ' ')"

export PATH=$venv/bin:$PATH
nd_pkg=$("$venv/bin/python" -c 'import os, neurodamus; print(os.path.dirname(neurodamus.__file__))')
export HOC_LIBRARY_PATH=$nd_pkg/data/hoc
# neurodamus sets it before importing NEURON; any NEURON imported without it has no MPI,
# and each rank silently runs the whole model.
export NEURON_INIT_MPI=1

work=$(mktemp -d)
cleanup() {
    local rc=$?
    if [ "$rc" -eq 0 ] && [ -z "${NEURODAMUS_CI_KEEP:-}" ]; then
        rm -rf "$work"
    else
        echo "ci/neurodamus.sh: outputs kept in $work" >&2
    fi
}
trap cleanup EXIT

# The mechanisms: neurodamus' internal mods and its tests' common mods, without
# libsonatareport (DISABLE_REPORTINGLIB: neurodamus then writes no out.h5).
mods_start=$(date +%s)
mods_json=$(neurodamus-compile-mods --with-internal-mods --input-dir "$nd_tests/tests/mechanisms/common" \
    --incflags=-DDISABLE_REPORTINGLIB --output-dir "$work/mods" --cache-dir "$cache/mods" 2>"$work/mods.log") \
    || { tail -n 30 "$work/mods.log" >&2; die "neurodamus-compile-mods failed"; }
NRNMECH_LIB_PATH=$("$venv/bin/python" -c 'import json, sys; print(json.loads(sys.argv[1])["NRNMECH_LIB_PATH"])' "$mods_json")
export NRNMECH_LIB_PATH
if grep -q 'Cache hit' "$work/mods.log"; then mods_how="cached"; else mods_how="compiled"; fi
say "mechanisms $mods_how in $(($(date +%s) - mods_start)) s: $NRNMECH_LIB_PATH"

mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
nd_py=("$venv/bin/python" "$repo/ci/neurodamus/nd_run.py")

"$venv/bin/python" "$repo/ci/neurodamus/make_circuit.py" "$nd_tests" "$work/circuit"
config=$work/circuit/simulation_config.json

# 1. neurodamus' dry run.
mkdir "$work/dry"
(cd "$work/dry" && timeout 600 mpirun "${mpirun_flags[@]}" -n "$ranks_dry" "${nd_py[@]}" cli "$config" \
    --dry-run --num-target-ranks="$ranks_run" --memory-tracker=heap --use-color=OFF >dry.log 2>&1) \
    || { tail -n 40 "$work/dry/dry.log" >&2; die "neurodamus dry run failed (mpirun -n $ranks_dry)"; }
for f in cell_memory_usage.json "allocation_r${ranks_run}_c1.pkl.gz"; do
    [ -s "$work/dry/$f" ] || die "neurodamus' dry run wrote no $f"
done
say "neurodamus --dry-run --num-target-ranks=$ranks_run --memory-tracker=heap (mpirun -n $ranks_dry): ok"

# 2. Ballast's balance of neurodamus' dry run.
"$ballast_bin" dry-run --memory-usage "$work/dry/cell_memory_usage.json" --num-target-ranks "$ranks_run" \
    --output-dir "$work/ballast" --json >"$work/ballast-dry-run.json"
# and its reproduction of neurodamus' balancer, to compare with the real one.
"$ballast_bin" dry-run --memory-usage "$work/dry/cell_memory_usage.json" --num-target-ranks "$ranks_run" \
    --strategy neurodamus --output-dir "$work/ballast-strategy-neurodamus" --json >/dev/null
say "ballast dry-run --memory-usage cell_memory_usage.json --num-target-ranks $ranks_run [--strategy neurodamus]: ok"

# 3. The three simulations, each in its own directory (neurodamus reads
# allocation_r{R}_c{C}.pkl.gz from the working directory).
alloc=allocation_r${ranks_run}_c1.pkl.gz
mkdir "$work/run-ballast" "$work/run-neurodamus" "$work/run-roundrobin"
cp "$work/ballast/$alloc" "$work/run-ballast/"
cp "$work/dry/$alloc" "$work/run-neurodamus/"
for run in ballast:Memory neurodamus:Memory roundrobin:RoundRobin; do
    name=${run%%:*}
    mode=${run#*:}
    (cd "$work/run-$name" && timeout 600 mpirun "${mpirun_flags[@]}" -n "$ranks_run" "${nd_py[@]}" simulate "$config" \
        "$mode" result.json >run.log 2>&1) \
        || { tail -n 40 "$work/run-$name/run.log" >&2; die "neurodamus --lb-mode=$mode ($name) failed (mpirun -n $ranks_run)"; }
    say "neurodamus --lb-mode=$mode with the $name allocation (mpirun -n $ranks_run): ok"
done

# 4. The whole loop: the Ballast allocation again, with the spike exchange on Ballast too
# (NRNHOME: the shim of integrations/neuron/, installed by ci/install-neuron.sh for this
# venv's NEURON; libballast's cargo build is the one ci/neuron.sh made, reused). neurodamus
# 4.2.9 turns spike compression off under --lb-mode=Memory (node.py, _finalize_model), so
# NEURON runs its plain all-gather exchange: `ballast dry-run --exchange allgather`, over
# the run's transport (--transport mpi), on each path of the run (BALLAST_MPI_NATIVE on,
# then off: --mpi-native).
loop_start=$(date +%s)
bash "$repo/ci/install-neuron.sh" "$work/nrn-prefix" >"$work/install-neuron.log" 2>&1 \
    || { tail -n 30 "$work/install-neuron.log" >&2; die "ci/install-neuron.sh failed"; }
nrnhome=$work/nrn-prefix/lib/ballast-nrnhome
for native in on off; do
    mpi_native=$([ "$native" = on ] && echo true || echo false)
    "$ballast_bin" dry-run --memory-usage "$work/dry/cell_memory_usage.json" --num-target-ranks "$ranks_run" \
        --transport-model ballast --exchange allgather --transport mpi --mpi-native "$mpi_native" \
        --output-dir "$work/ballast-charged-$native" --json >"$work/ballast-charged-$native.json"
    # The all-gather's charge does not depend on the placement: the allocation is the plain one.
    cmp -s "$work/ballast/$alloc" "$work/ballast-charged-$native/$alloc" \
        || die "ballast dry-run --exchange allgather wrote another allocation than the plain dry run"
    mkdir "$work/run-shim-$native"
    cp "$work/ballast-charged-$native/$alloc" "$work/run-shim-$native/"
    (cd "$work/run-shim-$native" && NRNHOME=$nrnhome BALLAST_MPI_NATIVE=$native BALLAST_REPORT_DIR=$work/run-shim-$native/reports \
        timeout 600 mpirun "${mpirun_flags[@]}" -n "$ranks_run" "${nd_py[@]}" simulate "$config" Memory result.json >run.log 2>&1) \
        || { tail -n 40 "$work/run-shim-$native/run.log" >&2; die "neurodamus --lb-mode=Memory over the shim (BALLAST_MPI_NATIVE=$native) failed"; }
    say "neurodamus --lb-mode=Memory with the ballast allocation, spikes over Ballast (BALLAST_MPI_NATIVE=$native, mpirun -n $ranks_run): ok"
done
# The same in multisend mode (pc.spike_compress(0, 0, 1), given to neurodamus' own
# _finalize_model between setup_transfer and stdinit: nd_run.py's 5th argument): `ballast
# dry-run --exchange multisend` needs the connectivity, so it balances the circuit
# (--circuit, with the dry run's memory per metype); the run takes that allocation.
for native in on off; do
    mpi_native=$([ "$native" = on ] && echo true || echo false)
    "$ballast_bin" dry-run --memory-usage "$work/dry/cell_memory_usage.json" --circuit "$work/circuit/circuit_config.json" \
        --num-target-ranks "$ranks_run" --transport-model ballast --exchange multisend --transport mpi --mpi-native "$mpi_native" \
        --output-dir "$work/ballast-multisend-$native" --json >"$work/ballast-multisend-$native.json"
    mkdir "$work/run-multisend-$native"
    cp "$work/ballast-multisend-$native/$alloc" "$work/run-multisend-$native/"
    (cd "$work/run-multisend-$native" && NRNHOME=$nrnhome BALLAST_MPI_NATIVE=$native BALLAST_REPORT_DIR=$work/run-multisend-$native/reports \
        timeout 600 mpirun "${mpirun_flags[@]}" -n "$ranks_run" "${nd_py[@]}" simulate "$config" Memory result.json 0,0,1 >run.log 2>&1) \
        || { tail -n 40 "$work/run-multisend-$native/run.log" >&2; die "neurodamus in multisend mode over the shim (BALLAST_MPI_NATIVE=$native) failed"; }
    say "neurodamus --lb-mode=Memory, multisend over Ballast (BALLAST_MPI_NATIVE=$native, mpirun -n $ranks_run): ok"
done
say "the whole loop (install, 4 dry runs, 4 runs) in $(($(date +%s) - loop_start)) s"

# 5. The checks (and that each check fails on wrong input).
"$venv/bin/python" "$repo/ci/neurodamus/check.py" \
    --ballast-allocation "$work/ballast/$alloc" --neurodamus-allocation "$work/dry/$alloc" \
    --reproduced-allocation "$work/ballast-strategy-neurodamus/$alloc" \
    --memory-usage "$work/dry/cell_memory_usage.json" --ballast-dry-run "$work/ballast-dry-run.json" \
    --ballast-run "$work/run-ballast" --neurodamus-run "$work/run-neurodamus" --roundrobin-run "$work/run-roundrobin" \
    --shim-run "$work/run-shim-on" --shim-run "$work/run-shim-off"
# The exchange went over Ballast, and its measured footprint beside the dry run's charge.
"$venv/bin/python" "$repo/ci/neurodamus/exchange.py" --wheel-run "$work/run-ballast" \
    --shim-run "$work/run-shim-on" --charge "$work/ballast-charged-on.json" --mpi-native true --exchange allgather \
    --shim-run "$work/run-shim-off" --charge "$work/ballast-charged-off.json" --mpi-native false --exchange allgather \
    --shim-run "$work/run-multisend-on" --charge "$work/ballast-multisend-on.json" --mpi-native true --exchange multisend \
    --shim-run "$work/run-multisend-off" --charge "$work/ballast-multisend-off.json" --mpi-native false --exchange multisend

say "neurodamus round trip passed in $(($(date +%s) - step_start)) s"
