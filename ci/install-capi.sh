#!/usr/bin/env bash
# Builds libballast (the C ABI, crate capi/) in release and installs it under PREFIX:
#   PREFIX/lib/libballast.so.MAJOR.MINOR (the SONAME) and libballast.so linking to it,
#   PREFIX/lib/libballast.a, PREFIX/include/ballast.h,
#   PREFIX/lib/pkgconfig/ballast.pc (relocatable: paths from the .pc file's own place),
#   PREFIX/lib/cmake/Ballast/BallastConfig.cmake (find_package(Ballast): the imported
#   targets Ballast::ballast, shared, and Ballast::ballast_static).
# Usage: bash ci/install-capi.sh PREFIX [--features mpi,verbs]
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: bash ci/install-capi.sh PREFIX [--features mpi,verbs]" >&2; exit 2; }
[ $# -ge 1 ] || usage
prefix=$1
shift
features=""
while [ $# -gt 0 ]; do
    case "$1" in
        --features) [ $# -ge 2 ] || usage; features=$2; shift 2 ;;
        --features=*) features=${1#--features=}; shift ;;
        *) usage ;;
    esac
done
for f in ${features//,/ }; do
    case "$f" in
        mpi | verbs) ;;
        bench-twin) ;; # bench/capi_pingpong.sh's Rust-API twin (one extra symbol, not in the header)
        *) echo "ci/install-capi.sh: unknown feature '$f' (mpi, verbs)" >&2; exit 2 ;;
    esac
done
# With mpi: the header's MPI declarations are enabled by -DBALLAST_HAVE_MPI, which the .pc file
# and the CMake config add together with the flags of the MPI the library is built with
# (the mpicc that rsmpi's build finds: $MPICC, else mpicc), and OMPI_SKIP_MPICXX and
# MPICH_SKIP_MPICXX (no MPI C++ bindings).
mpi_cflags=""
mpi_libs=""
case ",$features," in
    *,mpi,*)
        mpicc=${MPICC:-mpicc}
        if out=$("$mpicc" -showme:compile 2>/dev/null); then # Open MPI
            mpi_cflags=$out
            mpi_libs=$("$mpicc" -showme:link)
        elif out=$("$mpicc" -compile-info 2>/dev/null); then # MPICH and its derivatives
            mpi_cflags=$(tr ' ' '\n' <<< "$out" | grep -E '^-(I|D|pthread)' | tr '\n' ' ')
            mpi_libs=$("$mpicc" -link-info | tr ' ' '\n' | grep -E '^-(L|l|Wl|pthread)' | tr '\n' ' ')
        else
            echo "ci/install-capi.sh: --features mpi needs the MPI compiler wrapper ($mpicc) on PATH (or MPICC)" >&2
            exit 2
        fi
        # The deprecated MPI C++ bindings are skipped: <mpi.h>, which ballast.h includes, then
        # declares no MPI:: classes, so a C++ program links without libmpi_cxx (Open MPI) or
        # libmpicxx (MPICH), e.g. `c++ app.cpp $(pkg-config --cflags --libs ballast)`.
        mpi_cflags="-DBALLAST_HAVE_MPI -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX $mpi_cflags" ;;
esac

cargo_features=()
target_dir=${CARGO_TARGET_DIR:-target}
if [ -n "$features" ]; then
    cargo_features=(--features "$features")
    # cargo writes libballast.so and .a under the same names for every feature set and may
    # leave another set's copy in place, so a featured build gets a target directory of its own.
    target_dir="$target_dir/capi-${features//,/-}"
fi
export CARGO_TARGET_DIR=$target_dir
# The static library's system libraries, as rustc reports them for this target.
native_libs=$(cargo rustc --release --locked -p ballast-capi --lib --crate-type staticlib "${cargo_features[@]}" \
    -- --print native-static-libs 2>&1 | sed -n 's/.*native-static-libs: //p' | tail -n 1)
cargo build --release --locked -p ballast-capi "${cargo_features[@]}"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

mkdir -p "$prefix/lib/pkgconfig" "$prefix/lib/cmake/Ballast" "$prefix/include"
prefix=$(cd "$prefix" && pwd)
# The SONAME (capi/build.rs) is libballast.so.MAJOR.MINOR: that file, libballast.so linking to
# it (for -lballast), without debug information.
soname="libballast.so.$(cut -d. -f1-2 <<< "$version")"
if command -v objdump >/dev/null 2>&1 && ! objdump -p "$target_dir/release/libballast.so" | grep -q "SONAME *$soname\$"; then
    echo "ci/install-capi.sh: $target_dir/release/libballast.so does not have the SONAME $soname" >&2
    exit 1
fi
install -m 0755 "$target_dir/release/libballast.so" "$prefix/lib/$soname"
if command -v strip >/dev/null 2>&1; then strip --strip-debug "$prefix/lib/$soname"; fi
ln -sf "$soname" "$prefix/lib/libballast.so"
install -m 0644 "$target_dir/release/libballast.a" "$prefix/lib/libballast.a"
install -m 0644 capi/include/ballast.h "$prefix/include/ballast.h"

cat > "$prefix/lib/pkgconfig/ballast.pc" <<PC
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: ballast
Description: Ballast communication runtime for parallel neuron simulators (C ABI)
Version: $version
Cflags: -I\${includedir}${mpi_cflags:+ $mpi_cflags}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lballast${mpi_libs:+ $mpi_libs}
Libs.private: $native_libs
PC

cmake_libs=$(sed 's/-l//g; s/ \+/;/g' <<< "$native_libs")
cmake_mpi=""
if [ -n "$mpi_cflags" ]; then
    # An mpi build: MPI found the CMake way (FindMPI), and BALLAST_HAVE_MPI defined for users.
    # FindMPI is pointed at the wrappers of the MPI the library was built with (a machine
    # may have several; the default one may be another).
    mpicc_path=$(command -v "$mpicc")
    mpicxx_path=$(command -v "${mpicc/mpicc/mpicxx}" || true)
    cmake_mpi="if(NOT MPI_C_COMPILER)
  set(MPI_C_COMPILER \"$mpicc_path\")
endif()
if(NOT MPI_CXX_COMPILER AND EXISTS \"$mpicxx_path\")
  set(MPI_CXX_COMPILER \"$mpicxx_path\")
endif()
"
    cmake_mpi+='# Ballast needs only the C API of MPI (not the deprecated C++ bindings).
if(NOT DEFINED MPI_CXX_SKIP_MPICXX)
  set(MPI_CXX_SKIP_MPICXX TRUE)
endif()
include(CMakeFindDependencyMacro)
find_dependency(MPI)
if(TARGET MPI::MPI_C)
  set(_ballast_mpi MPI::MPI_C)
else()
  set(_ballast_mpi MPI::MPI_CXX)
endif()
set(Ballast_HAVE_MPI TRUE)'
fi
cat > "$prefix/lib/cmake/Ballast/BallastConfig.cmake" <<CMAKE
# find_package(Ballast): libballast $version, the C ABI of the Ballast runtime${features:+ (features $features)}.
# Targets: Ballast::ballast (shared library), Ballast::ballast_static (static library).
# Ballast_HAVE_MPI is TRUE for an mpi build: the targets then define BALLAST_HAVE_MPI (the
# header declares ballast_comm_from_mpi), OMPI_SKIP_MPICXX and MPICH_SKIP_MPICXX (no MPI C++
# bindings: C++ programs link without them) and carry MPI's flags.
get_filename_component(_ballast_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(Ballast_VERSION "$version")
set(Ballast_INCLUDE_DIRS "\${_ballast_prefix}/include")
set(Ballast_HAVE_MPI FALSE)
$cmake_mpi
if(NOT TARGET Ballast::ballast)
  add_library(Ballast::ballast SHARED IMPORTED)
  set_target_properties(Ballast::ballast PROPERTIES
    IMPORTED_LOCATION "\${_ballast_prefix}/lib/$soname"
    IMPORTED_SONAME "$soname"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ballast_prefix}/include")
  add_library(Ballast::ballast_static STATIC IMPORTED)
  set_target_properties(Ballast::ballast_static PROPERTIES
    IMPORTED_LOCATION "\${_ballast_prefix}/lib/libballast.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ballast_prefix}/include"
    INTERFACE_LINK_LIBRARIES "$cmake_libs")
  if(Ballast_HAVE_MPI)
    foreach(_t Ballast::ballast Ballast::ballast_static)
      set_property(TARGET \${_t} APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS
        BALLAST_HAVE_MPI OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
      set_property(TARGET \${_t} APPEND PROPERTY INTERFACE_LINK_LIBRARIES \${_ballast_mpi})
    endforeach()
  endif()
endif()
set(Ballast_FOUND TRUE)
CMAKE
cat > "$prefix/lib/cmake/Ballast/BallastConfigVersion.cmake" <<CMAKE
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
CMAKE
echo "ci/install-capi.sh: installed libballast $version${features:+ (features $features)} under $prefix"
