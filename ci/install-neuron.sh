#!/usr/bin/env bash
# Installs the NEURON shims of integrations/neuron/ for the NEURON 9.0.x of the active python3:
#   1. the mpi libballast into PREFIX (as `ci/install-capi.sh PREFIX --features mpi` does);
#   2. PREFIX/lib/ballast-nrnhome/lib/libnrnmpi_ompi.so: the spike exchange over Ballast, the
#      other f_nrnmpi_* functions forwarded to the wheel's own libnrnmpi_ompi.so;
#      PREFIX/lib/ballast-nrnhome/lib/libcorenrnmpi_ompi.so: the same for CoreNEURON (its
#      nrnmpi_*_impl functions).
# Refuses (exit 1, nothing installed under ballast-nrnhome) a NEURON other than 9.0.x, a
# libnrnmpi_ompi.so or libcorenrnmpi_ompi.so whose `nm -D` function list differs from
# integrations/neuron/{nrnmpi,corenrnmpi}_functions.txt, and an MPI other than Open MPI (NEURON names its
# library after the MPI it finds: the shim is built for Open MPI's libnrnmpi_ompi.so only).
# Ends by printing the line to set: export NRNHOME=PREFIX/lib/ballast-nrnhome
# Usage: bash ci/install-neuron.sh PREFIX [--verbs]   (python3 on PATH must import neuron)
#   --verbs: libballast with the verbs transport too (--features mpi,verbs), for
#   BALLAST_TRANSPORT=verbs (the shim then takes ballast_comm_from_env: ci/neuron-verbs.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
die() { echo "ci/install-neuron.sh: $*" >&2; exit 1; }
features=mpi
case "$#:${2:-}" in
    1:) ;;
    2:--verbs) features=mpi,verbs ;;
    *) echo "usage: bash ci/install-neuron.sh PREFIX [--verbs]" >&2; exit 2 ;;
esac
prefix=$1

# NEURON, found with the active python3 (importing it without initialising MPI).
nrn_info=$(env -u NEURON_INIT_MPI python3 -c '
import os, neuron
print(neuron.__version__)
print(os.path.join(os.path.dirname(os.path.abspath(neuron.__file__)), ".data", "lib"))
' 2>/dev/null | tail -n 2) || die "python3 ($(command -v python3)) cannot import neuron: activate the venv that has NEURON 9.0.x"
nrn_version=$(sed -n 1p <<<"$nrn_info")
nrn_lib=$(sed -n 2p <<<"$nrn_info")
case "$nrn_version" in
    9.0.*) ;;
    *) die "NEURON $nrn_version found ($(command -v python3)): the shim is for NEURON 9.0.x only (its f_nrnmpi_* functions are those of 9.0.2's src/nrnmpi/nrnmpidec.h)" ;;
esac
wheel_mpi=$nrn_lib/libnrnmpi_ompi.so
[ -f "$wheel_mpi" ] || die "NEURON $nrn_version has no $wheel_mpi (a NEURON built without dynamic MPI?)"
[ -f "$nrn_lib/libnrniv.so" ] || die "no libnrniv.so beside $wheel_mpi"
command -v nm >/dev/null 2>&1 || die "nm (binutils) is needed to check $wheel_mpi"

# The function lists: the wheel's must be the ones the shims are written for.
wheel_core=$nrn_lib/libcorenrnmpi_ompi.so
[ -f "$wheel_core" ] || die "NEURON $nrn_version has no $wheel_core"
exported_list() { # LIB PATTERN: its exported functions matching PATTERN, sorted
    nm -D --defined-only "$1" | awk -v pat="$2" '$2 == "T" && $3 ~ pat {print $3}' | sort
}
check_list() { # LIB LIST PATTERN
    local want have
    want=$(awk '!/^#/ {print $1}' "$2" | sort)
    have=$(exported_list "$1" "$3")
    if [ "$want" != "$have" ]; then
        diff <(echo "$want") <(echo "$have") | sed 's/^/    /' >&2 || true
        die "$1 exports another list of functions than $2 (< the shim's, > the wheel's): this NEURON is not one the shim supports; nothing installed"
    fi
}
list=integrations/neuron/nrnmpi_functions.txt
core_list=integrations/neuron/corenrnmpi_functions.txt
check_list "$wheel_mpi" "$list" '^f_nrnmpi_'
check_list "$wheel_core" "$core_list" '^nrnmpi_.*_impl$'
for v in p_cxx_char_alloc nrnmpi_comm; do
    nm -D --defined-only "$wheel_mpi" | awk '{print $3}' | grep -qx "$v" || die "$wheel_mpi has no $v; nothing installed"
done
nm -D --defined-only "$wheel_core" | awk '{print $3}' | grep -qx _ZN10coreneuron11nrnmpi_commE \
    || die "$wheel_core has no coreneuron::nrnmpi_comm; nothing installed"

# The MPI: Open MPI only.
mpicc=${MPICC:-mpicc}
command -v "$mpicc" >/dev/null 2>&1 || die "the MPI compiler wrapper $mpicc is not on PATH (apt-get install libopenmpi-dev)"
if ! "$mpicc" -showme:version >/dev/null 2>&1; then
    die "$mpicc is not Open MPI's: the shim is built for libnrnmpi_ompi.so (Open MPI) only; MPICH (libnrnmpi_mpich.so) is not supported yet"
fi

bash ci/install-capi.sh "$prefix" --features "$features"
prefix=$(cd "$prefix" && pwd)
home=$prefix/lib/ballast-nrnhome
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# SHIM LIST SRC PREFIX PATTERN: builds $build/SHIM and checks it exports exactly LIST's functions.
build_shim() {
    local shim=$1 lst=$2 src=$3 pre=$4 pat=$5
    bash integrations/neuron/gen_forward.sh "$lst" "$build" "$pre"
    "$mpicc" -std=c11 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror -DBALLAST_HAVE_MPI \
        -I "$prefix/include" -I integrations/neuron \
        "integrations/neuron/$src" integrations/neuron/shim_common.c integrations/neuron/shim_exchange.c \
        "$build/${pre}_forward.c" "$build/${pre}_forward.S" \
        -L "$prefix/lib" -lballast -Wl,-rpath,'$ORIGIN/../..' -Wl,--no-undefined -ldl -o "$build/$shim"
    local want have
    want=$(awk '!/^#/ {print $1}' "$lst" | sort)
    have=$(exported_list "$build/$shim" "$pat")
    [ "$have" = "$want" ] || { diff <(echo "$want") <(echo "$have") >&2 || true; die "the built $shim does not export the functions of $lst"; }
}
build_shim libnrnmpi_ompi.so "$list" nrnmpi_shim.c nrn '^f_nrnmpi_'
build_shim libcorenrnmpi_ompi.so "$core_list" corenrnmpi_shim.c core '^nrnmpi_.*_impl$'
# NEURON dlsyms p_cxx_char_alloc in the shim; nrnmpi_comm must stay the wheel's.
nm -D --defined-only "$build/libnrnmpi_ompi.so" | awk '{print $3}' | grep -qx p_cxx_char_alloc || die "the built shim lacks p_cxx_char_alloc"
for f in libnrnmpi_ompi.so libcorenrnmpi_ompi.so; do
    if nm -D --defined-only "$build/$f" | awk '{print $3}' | grep -qE '^(nrnmpi_comm|_ZN10coreneuron11nrnmpi_commE)$'; then
        die "the built $f defines nrnmpi_comm (it would shadow the wheel's)"
    fi
done

mkdir -p "$home/lib"
for f in libnrnmpi_ompi.so libcorenrnmpi_ompi.so; do
    install -m 0755 "$build/$f" "$home/lib/.$f.new"
    mv -f "$home/lib/.$f.new" "$home/lib/$f"
done
echo "$nrn_version $nrn_lib" >"$home/neuron-wheel.txt"
echo "ci/install-neuron.sh: installed the NEURON $nrn_version shims (wheel $nrn_lib) under $home"
echo "export NRNHOME=$home"
