#!/usr/bin/env bash
# The C ABI (crate capi/): the checked-in header is what cbindgen generates; the crate's
# tests (hello.c, and the C conformance program under -fsanitize=address,undefined); then
# an install with ci/install-capi.sh into a temporary prefix, and examples/c/hello.c built
# against it with pkg-config (shared and static) and with CMake's find_package(Ballast).
# Installs gcc, pkg-config and cmake with apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v cmake >/dev/null 2>&1 || need+=(cmake make)
if [ ${#need[@]} -gt 0 ]; then
    echo "ci/capi.sh: installing ${need[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"
fi

# The header: build.rs regenerates capi/include/ballast.h; it must not differ from git's.
cargo build --locked -p ballast-capi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    if ! git diff --exit-code -- capi/include/ballast.h; then
        echo "ci/capi.sh: capi/include/ballast.h is not what cbindgen generates from capi/src: commit the regenerated file" >&2
        exit 1
    fi
    echo "ci/capi.sh: capi/include/ballast.h matches cbindgen's output"
fi
if LC_ALL=C grep -n '[^[:print:][:space:]]' capi/include/ballast.h; then
    echo "ci/capi.sh: capi/include/ballast.h is not ASCII" >&2
    exit 1
fi

CC=gcc cargo test --locked -p ballast-capi

prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
bash ci/install-capi.sh "$prefix"
for f in lib/libballast.so lib/libballast.a include/ballast.h lib/pkgconfig/ballast.pc lib/cmake/Ballast/BallastConfig.cmake; do
    [ -f "$prefix/$f" ] || { echo "ci/capi.sh: $prefix/$f was not installed" >&2; exit 1; }
done
want='rank 1 of 2 got "hello from rank 0" (18 bytes from rank 0, tag 7)'
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config's flags are words
gcc examples/c/hello.c $(pkg-config --cflags --libs ballast) -o "$work/hello-shared"
[ "$("$work/hello-shared")" = "$want" ]
echo "ci/capi.sh: hello.c with pkg-config (shared): ok"
# shellcheck disable=SC2046
gcc examples/c/hello.c $(pkg-config --cflags ballast) "$prefix/lib/libballast.a" \
    $(pkg-config --static --libs-only-l ballast | sed 's/-lballast//') -o "$work/hello-static"
if ldd "$work/hello-static" | grep -q libballast; then echo "ci/capi.sh: hello-static links libballast.so" >&2; exit 1; fi
[ "$("$work/hello-static")" = "$want" ]
echo "ci/capi.sh: hello.c with libballast.a (static): ok"
mkdir -p "$work/cmake"
cat > "$work/cmake/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.13)
project(ballast_hello C)
find_package(Ballast 0.1 REQUIRED)
add_executable(hello "$PWD/examples/c/hello.c")
target_link_libraries(hello Ballast::ballast)
CMAKE
cmake -S "$work/cmake" -B "$work/cmake/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake/build" >/dev/null
[ "$("$work/cmake/build/hello")" = "$want" ]
echo "ci/capi.sh: hello.c with CMake find_package(Ballast): ok"
echo "ci/capi.sh: all passed"
