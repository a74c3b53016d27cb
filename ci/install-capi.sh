#!/usr/bin/env bash
# Builds libballast (the C ABI, crate capi/) in release and installs it under PREFIX:
#   PREFIX/lib/libballast.so, PREFIX/lib/libballast.a, PREFIX/include/ballast.h,
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
        *) echo "ci/install-capi.sh: unknown feature '$f' (mpi, verbs)" >&2; exit 2 ;;
    esac
done
case ",$features," in
    *,mpi,*)
        # The MPI declarations of the header and the flags of the MPI the library was built with.
        echo "ci/install-capi.sh: the mpi feature's C API (ballast_comm_from_mpi) is not written yet" >&2
        exit 2 ;;
esac

cargo_features=()
[ -n "$features" ] && cargo_features=(--features "$features")
# The static library's system libraries, as rustc reports them for this target.
native_libs=$(cargo rustc --release --locked -p ballast-capi --lib --crate-type staticlib "${cargo_features[@]}" \
    -- --print native-static-libs 2>&1 | sed -n 's/.*native-static-libs: //p' | tail -n 1)
cargo build --release --locked -p ballast-capi "${cargo_features[@]}"
target_dir=${CARGO_TARGET_DIR:-target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

mkdir -p "$prefix/lib/pkgconfig" "$prefix/lib/cmake/Ballast" "$prefix/include"
prefix=$(cd "$prefix" && pwd)
install -m 0755 "$target_dir/release/libballast.so" "$prefix/lib/libballast.so"
install -m 0644 "$target_dir/release/libballast.a" "$prefix/lib/libballast.a"
install -m 0644 capi/include/ballast.h "$prefix/include/ballast.h"

cat > "$prefix/lib/pkgconfig/ballast.pc" <<PC
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: ballast
Description: Ballast communication runtime for parallel neuron simulators (C ABI)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lballast
Libs.private: $native_libs
PC

cmake_libs=$(sed 's/-l//g; s/ \+/;/g' <<< "$native_libs")
cat > "$prefix/lib/cmake/Ballast/BallastConfig.cmake" <<CMAKE
# find_package(Ballast): libballast $version, the C ABI of the Ballast runtime.
# Targets: Ballast::ballast (shared library), Ballast::ballast_static (static library).
get_filename_component(_ballast_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(Ballast_VERSION "$version")
set(Ballast_INCLUDE_DIRS "\${_ballast_prefix}/include")
if(NOT TARGET Ballast::ballast)
  add_library(Ballast::ballast SHARED IMPORTED)
  set_target_properties(Ballast::ballast PROPERTIES
    IMPORTED_LOCATION "\${_ballast_prefix}/lib/libballast.so"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ballast_prefix}/include")
  add_library(Ballast::ballast_static STATIC IMPORTED)
  set_target_properties(Ballast::ballast_static PROPERTIES
    IMPORTED_LOCATION "\${_ballast_prefix}/lib/libballast.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ballast_prefix}/include"
    INTERFACE_LINK_LIBRARIES "$cmake_libs")
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
