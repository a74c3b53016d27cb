#!/usr/bin/env bash
# Installs the NEURON shims of integrations/neuron/ for the NEURON 9.0.x of the active python3:
#   1. the mpi libballast into PREFIX (as `ci/install-capi.sh PREFIX --features mpi` does);
#   2. PREFIX/lib/ballast-nrnhome/lib/libnrnmpi_ompi.so: the spike exchange over Ballast, the
#      other f_nrnmpi_* functions forwarded to the wheel's own libnrnmpi_ompi.so;
#      PREFIX/lib/ballast-nrnhome/lib/libcorenrnmpi_ompi.so: a link to the wheel's own
#      (CoreNEURON's exchange is not on Ballast yet; see integrations/neuron/README.md).
# Refuses (exit 1, nothing installed under ballast-nrnhome) a NEURON other than 9.0.x, a
# libnrnmpi_ompi.so whose `nm -D` list of f_nrnmpi_* functions differs from
# integrations/neuron/nrnmpi_functions.txt, and an MPI other than Open MPI (NEURON names its
# library after the MPI it finds: the shim is built for Open MPI's libnrnmpi_ompi.so only).
# Ends by printing the line to set: export NRNHOME=PREFIX/lib/ballast-nrnhome
# Usage: bash ci/install-neuron.sh PREFIX      (python3 on PATH must import neuron)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
die() { echo "ci/install-neuron.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || { echo "usage: bash ci/install-neuron.sh PREFIX" >&2; exit 2; }
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

# The function list: the wheel's must be the one the shim is written for.
list=integrations/neuron/nrnmpi_functions.txt
want=$(awk '!/^#/ {print $1}' "$list" | sort)
have=$(nm -D --defined-only "$wheel_mpi" | awk '$2 == "T" && $3 ~ /^f_nrnmpi_/ {print $3}' | sort)
if [ "$want" != "$have" ]; then
    diff <(echo "$want") <(echo "$have") | sed 's/^/    /' >&2 || true
    die "$wheel_mpi exports another list of f_nrnmpi_* functions than $list (< the shim's, > the wheel's): this NEURON is not one the shim supports; nothing installed"
fi
for v in p_cxx_char_alloc nrnmpi_comm; do
    nm -D --defined-only "$wheel_mpi" | awk '{print $3}' | grep -qx "$v" || die "$wheel_mpi has no $v; nothing installed"
done

# The MPI: Open MPI only.
mpicc=${MPICC:-mpicc}
command -v "$mpicc" >/dev/null 2>&1 || die "the MPI compiler wrapper $mpicc is not on PATH (apt-get install libopenmpi-dev)"
if ! "$mpicc" -showme:version >/dev/null 2>&1; then
    die "$mpicc is not Open MPI's: the shim is built for libnrnmpi_ompi.so (Open MPI) only; MPICH (libnrnmpi_mpich.so) is not supported yet"
fi

bash ci/install-capi.sh "$prefix" --features mpi
prefix=$(cd "$prefix" && pwd)
home=$prefix/lib/ballast-nrnhome
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
bash integrations/neuron/gen_forward.sh "$list" "$build" nrn
"$mpicc" -std=c11 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror -DBALLAST_HAVE_MPI \
    -I "$prefix/include" -I integrations/neuron \
    integrations/neuron/nrnmpi_shim.c integrations/neuron/shim_common.c "$build/nrn_forward.c" "$build/nrn_forward.S" \
    -L "$prefix/lib" -lballast -Wl,-rpath,'$ORIGIN/../..' -Wl,--no-undefined -ldl -o "$build/libnrnmpi_ompi.so"

# The shim must export exactly what NEURON dlsyms, and not define nrnmpi_comm.
exported=$(nm -D --defined-only "$build/libnrnmpi_ompi.so" | awk '$2 == "T" && $3 ~ /^f_nrnmpi_/ {print $3}' | sort)
[ "$exported" = "$want" ] || { diff <(echo "$want") <(echo "$exported") >&2 || true; die "the built shim does not export the 82 f_nrnmpi_* functions"; }
nm -D --defined-only "$build/libnrnmpi_ompi.so" | awk '{print $3}' | grep -qx p_cxx_char_alloc || die "the built shim lacks p_cxx_char_alloc"
if nm -D --defined-only "$build/libnrnmpi_ompi.so" | awk '{print $3}' | grep -qx nrnmpi_comm; then
    die "the built shim defines nrnmpi_comm (it would shadow the wheel's)"
fi

mkdir -p "$home/lib"
install -m 0755 "$build/libnrnmpi_ompi.so" "$home/lib/.libnrnmpi_ompi.so.new"
mv -f "$home/lib/.libnrnmpi_ompi.so.new" "$home/lib/libnrnmpi_ompi.so"
ln -sfn "$nrn_lib/libcorenrnmpi_ompi.so" "$home/lib/libcorenrnmpi_ompi.so"
echo "$nrn_version $nrn_lib" >"$home/neuron-wheel.txt"
echo "ci/install-neuron.sh: installed the NEURON $nrn_version shim (wheel $nrn_lib) under $home"
echo "export NRNHOME=$home"
