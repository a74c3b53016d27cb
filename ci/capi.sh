#!/usr/bin/env bash
# The C ABI (crate capi/): the checked-in header is what cbindgen generates; the crate's
# tests (hello.c, and the C conformance program under -fsanitize=address,undefined); then
# the C ABI call-sequence fuzzer (many seeds under ASan+UBSan, some under valgrind, which sees
# the Rust side read freed memory); then
# an install with ci/install-capi.sh into a temporary prefix, and examples/c/hello.c built
# against it with pkg-config (shared and static) and with CMake's find_package(Ballast).
# Then the same with an mpi build (ballast_comm_from_mpi, the MPI conformance program under
# mpirun). Installs gcc, pkg-config and cmake with apt when missing (MPI comes from ci/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v cmake >/dev/null 2>&1 || need+=(cmake make)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
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

# The call-sequence fuzzer (capi/tests/c/fuzz.c: random calls on a few handles of every kind,
# frees and stale handles included; every misuse must be BALLAST_EINVAL, nothing may crash):
# 100 seeds of 3,000 steps under ASan+UBSan (about 10 s on an idle 2-core machine), then 4
# seeds and tests/c/handles.c under valgrind (about 10 s). At most 30 s for each fuzzer
# part: the seeds that ran in that time are reported (a loaded machine runs fewer, never
# longer).
lib_dir=${CARGO_TARGET_DIR:-target}/debug
soname=$(readelf -d "$lib_dir/libballast.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
mkdir -p "$work/fuzz"
ln -sf "$(cd "$lib_dir" && pwd)/libballast.so" "$work/fuzz/$soname"
cflags=(-std=c11 -Wall -Wextra -Werror -g -Icapi/include -L"$lib_dir" -Wl,-rpath,"$work/fuzz")
gcc "${cflags[@]}" -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
    capi/tests/c/fuzz.c -lballast -o "$work/fuzz/fuzz-asan"
gcc "${cflags[@]}" capi/tests/c/fuzz.c -lballast -o "$work/fuzz/fuzz"
gcc "${cflags[@]}" capi/tests/c/handles.c -lballast -o "$work/fuzz/handles"
fuzz_run() { # NAME SECONDS SEEDS COMMAND...: runs COMMAND SEED 3000 for each seed within SECONDS
    local name=$1 budget=$2 seeds=$3 n=0 start=$SECONDS
    shift 3
    for seed in $(seq 1 "$seeds"); do
        [ $((SECONDS - start)) -lt "$budget" ] || break
        if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            "$@" "$seed" 3000 >"$work/fuzz/out" 2>&1; then
            cat "$work/fuzz/out" >&2
            echo "ci/capi.sh: the C ABI fuzzer failed ($name) with seed $seed: rerun with $* $seed 3000" >&2
            exit 1
        fi
        n=$((n + 1))
    done
    echo "ci/capi.sh: C ABI fuzzer ($name): $n seeds of 3000 steps, no failure ($((SECONDS - start)) s)"
}
fuzz_run "ASan+UBSan" 30 100 "$work/fuzz/fuzz-asan"
valgrind=(valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite)
fuzz_run "valgrind" 30 4 "${valgrind[@]}" "$work/fuzz/fuzz"
"${valgrind[@]}" "$work/fuzz/handles" >"$work/fuzz/out" 2>&1 || { cat "$work/fuzz/out" >&2; exit 1; }
echo "ci/capi.sh: tests/c/handles.c under valgrind: $(grep '^capi handles: ' "$work/fuzz/out")"
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

# The mpi build: the .pc and CMake config define BALLAST_HAVE_MPI and carry MPI's flags; the
# MPI conformance program (a host calling MPI_Init_thread, then ballast_comm_from_mpi and
# ballast_comm_from_env) under mpirun, without the sanitizers (they clash with MPI).
mpi_prefix="$work/mpi-prefix"
bash ci/install-capi.sh "$mpi_prefix" --features mpi
export PKG_CONFIG_PATH="$mpi_prefix/lib/pkgconfig"
pkg-config --cflags ballast | grep -q -- -DBALLAST_HAVE_MPI \
    || { echo "ci/capi.sh: the mpi install's ballast.pc does not define BALLAST_HAVE_MPI" >&2; exit 1; }
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L capi/tests/c/mpi_conformance.c \
    $(pkg-config --cflags --libs ballast) -lpthread -o "$work/mpi_conformance"
mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
# mpi_case SECONDS N PROGRAM [ARG...]: `mpirun -n N $work/PROGRAM ARG...` under `timeout
# SECONDS`; it must exit 0 and every one of its N processes print "... passed, 0 failed"
# (else its log is printed and the script ends).
mpi_case() {
    local secs=$1 n=$2 prog=$3
    shift 3
    local log="$work/$prog.log" good what="mpirun -n $n $prog${*:+ $*}"
    if ! timeout "$secs" mpirun "${mpirun_flags[@]}" -n "$n" "$work/$prog" "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "ci/capi.sh: $what failed (or hung)" >&2
        exit 1
    fi
    good=$(grep -c ' passed, 0 failed$' "$log" || true)
    [ "$good" = "$n" ] || { cat "$log" >&2; echo "ci/capi.sh: $what: $good of $n processes reported all passed" >&2; exit 1; }
    echo "ci/capi.sh: $what: $(grep -m1 ' passed, 0 failed$' "$log")"
}
for run in "1" "2" "3" "3 --multiple"; do
    read -r n opt <<< "$run"
    # shellcheck disable=SC2086 # $opt is empty or one word
    mpi_case 300 "$n" mpi_conformance $opt
done
# Issue 35's collectives over MPI (capi/tests/c/mpi_collectives.c): on the native path, the
# engine and a sub-communicator, against references computed on one rank, under mpirun -n
# 1, 2, 3, 4 and 7 (oversubscribed): about 60 s in all with a debug build on a loaded
# 2-core machine (load average 11); the release install used here was not timed.
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L capi/tests/c/mpi_collectives.c \
    $(pkg-config --cflags --libs ballast) -o "$work/mpi_collectives"
for n in 1 2 3 4 7; do
    mpi_case 300 "$n" mpi_collectives
done
# Out of memory over MPI (capi/tests/c/mpi_limits.c, issue 33): RLIMIT_AS lowered per case
# after MPI_Init, on the native path and on the engine, with a receive refused for memory
# whose message a later receive takes whole, and traffic at buffer_size 1 (about 33 s
# each with the release build here; 7-12 s before these cases).
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L capi/tests/c/mpi_limits.c \
    $(pkg-config --cflags --libs ballast) -o "$work/mpi_limits"
for path in on off; do
    mpi_case 180 2 mpi_limits "$path"
done
# Issue 35's receive loop allocates nothing from C (capi/tests/c/mpi_lean.c): 100 round
# trips of ballast_irecv_into + ballast_isend + the waits (or a ballast_test loop) + frees
# on the native path, counted by the program's own malloc and kin; and ETRUNC from the
# wait, the message kept.
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L capi/tests/c/mpi_lean.c \
    $(pkg-config --cflags --libs ballast) -o "$work/mpi_lean"
mpi_case 120 2 mpi_lean
# The shm transport from C under mpirun (issue 36): capi/tests/c/shm_processes.c (point to
# point, the collectives, the footprint's shm fields against ballast_predict) at 1, 2, 3, 4
# and 7 processes, and examples/c/shm_ring.c (docs/EMBEDDING.md) at 4. Neither calls MPI:
# this mpi build's MPI carries the start-up exchange only; the bytes go through the
# segments. (capi/tests/shm_processes.rs runs the same program with srun's variables.)
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror capi/tests/c/shm_processes.c $(pkg-config --cflags --libs ballast) \
    -o "$work/shm_processes"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror examples/c/shm_ring.c $(pkg-config --cflags --libs ballast) -o "$work/shm_ring"
(
    mpirun_flags+=(-x BALLAST_TRANSPORT=shm)
    for n in 1 2 3 4 7; do
        mpi_case 120 "$n" shm_processes
    done
    ring_out=$(timeout 120 mpirun "${mpirun_flags[@]}" -n 4 "$work/shm_ring")
    grep -q '^4 ranks over shm: got "hello from rank 3"; sum of ranks 6; segment [0-9]* B shared, 3 peer segments mapped$' \
        <<< "$ring_out" || { echo "$ring_out" >&2; echo "ci/capi.sh: examples/c/shm_ring.c under mpirun -n 4: wrong output" >&2; exit 1; }
    echo "ci/capi.sh: mpirun -n 4 examples/c/shm_ring.c: $ring_out"
)
# Several ranks per MPI process from C (capi/tests/c/mpi_run_ranks.c): 4 ranks on 2
# processes exchanging messages and barriers, with MPI initialised by Ballast, by the host
# at MPI_THREAD_MULTIPLE, and at MPI_THREAD_SERIALIZED (refused, then one rank per process).
# Then ballast_abort under MPI (capi/tests/c/mpi_abort.c): MPI_Abort ends the job with the
# code, on the native path, the engine path and ranks of ballast_mpi_run_ranks. About 5 s
# in all here (the six mpirun runs 3 s, with a debug libballast; the two mpicc builds).
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror capi/tests/c/mpi_run_ranks.c $(pkg-config --cflags --libs ballast) \
    -o "$work/mpi_run_ranks"
for mode in "" host serialized; do
    # shellcheck disable=SC2086 # $mode is empty or one word
    mpi_case 120 2 mpi_run_ranks $mode
done
# shellcheck disable=SC2046
mpicc -std=c11 -Wall -Wextra -Werror capi/tests/c/mpi_abort.c $(pkg-config --cflags --libs ballast) \
    -o "$work/mpi_abort"
for run in "comm 7 native on" "comm 7 engine off" "ranks 9 engine on"; do
    read -r mode code path native <<< "$run"
    log="$work/mpi_abort.log"
    status=0
    timeout 120 mpirun "${mpirun_flags[@]}" -x BALLAST_MPI_NATIVE="$native" -n 2 "$work/mpi_abort" "$mode" \
        >"$log" 2>&1 || status=$?
    if [ "$status" != "$code" ] || grep -q ' returned ' "$log" \
        || { [ "$mode" = comm ] && ! grep -q "^process 0: path: $path" "$log"; }; then
        cat "$log" >&2
        echo "ci/capi.sh: mpirun -n 2 mpi_abort $mode (BALLAST_MPI_NATIVE=$native) exited with $status, not $code, or a call returned or the path is not $path" >&2
        exit 1
    fi
    echo "ci/capi.sh: mpirun -n 2 mpi_abort $mode ($path path): the job ended with the code $code"
done
mkdir -p "$work/cmake-mpi"
cat > "$work/cmake-mpi/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.13)
project(ballast_mpi_conformance C)
find_package(Ballast 0.1 REQUIRED)
if(NOT Ballast_HAVE_MPI)
  message(FATAL_ERROR "the mpi install's BallastConfig.cmake does not set Ballast_HAVE_MPI")
endif()
find_package(Threads REQUIRED)
add_executable(mpi_conformance "$PWD/capi/tests/c/mpi_conformance.c")
target_compile_definitions(mpi_conformance PRIVATE _POSIX_C_SOURCE=200809L)
target_link_libraries(mpi_conformance Ballast::ballast Threads::Threads)
CMAKE
cmake -S "$work/cmake-mpi" -B "$work/cmake-mpi/build" -DCMAKE_PREFIX_PATH="$mpi_prefix" >/dev/null
cmake --build "$work/cmake-mpi/build" >/dev/null
timeout 300 mpirun "${mpirun_flags[@]}" -n 2 "$work/cmake-mpi/build/mpi_conformance" >"$work/cmake-mpi.log" 2>&1 \
    || { cat "$work/cmake-mpi.log" >&2; exit 1; }
[ "$(grep -c ' passed, 0 failed$' "$work/cmake-mpi.log")" = 2 ] || { cat "$work/cmake-mpi.log" >&2; exit 1; }
echo "ci/capi.sh: mpi_conformance built with CMake find_package(Ballast) (MPI): ok"

# C++ against the MPI install, with a plain C++ compiler (issue 35): the .pc and the CMake
# targets define OMPI_SKIP_MPICXX and MPICH_SKIP_MPICXX, so <mpi.h> (included by ballast.h)
# needs no MPI C++ library. Through pkg-config, then through CMake with only CXX enabled
# (the targets then carry MPI::MPI_CXX); each run under mpirun -n 2 (a few seconds).
pkg-config --cflags ballast | grep -q -- "-DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX" \
    || { echo "ci/capi.sh: the mpi install's ballast.pc does not skip the MPI C++ bindings" >&2; exit 1; }
# shellcheck disable=SC2046
c++ -std=c++11 -Wall -Wextra -Werror capi/tests/cpp/mpi_ring.cpp $(pkg-config --cflags --libs ballast) \
    -o "$work/mpi_ring_cpp"
mkdir -p "$work/cmake-cpp"
cat > "$work/cmake-cpp/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.13)
project(ballast_mpi_cpp LANGUAGES CXX)
find_package(Ballast REQUIRED)
add_executable(mpi_ring "$PWD/capi/tests/cpp/mpi_ring.cpp")
target_link_libraries(mpi_ring Ballast::ballast)
CMAKE
cmake -S "$work/cmake-cpp" -B "$work/cmake-cpp/build" -DCMAKE_PREFIX_PATH="$mpi_prefix" >/dev/null
cmake --build "$work/cmake-cpp/build" >/dev/null
for prog in "$work/mpi_ring_cpp" "$work/cmake-cpp/build/mpi_ring"; do
    log="$work/mpi_ring.log"
    timeout 120 mpirun "${mpirun_flags[@]}" -n 2 "$prog" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
    [ "$(grep -c ': ok$' "$log")" = 2 ] || { cat "$log" >&2; exit 1; }
done
echo "ci/capi.sh: C++ against the MPI install, through pkg-config and CMake: ok"
# The MPI conformance program on the engine path too (BALLAST_MPI_NATIVE=off), 2 ranks.
echo "ci/capi.sh: BALLAST_MPI_NATIVE=off:"
BALLAST_MPI_NATIVE=off mpi_case 300 2 mpi_conformance

# The family check: a host built with MPICH (mpicc.mpich, installed beside Open MPI, which
# stays the default) against this Open MPI build of libballast is refused, not misread.
if ! mpicc -showme:version 2>/dev/null | grep -q "Open MPI"; then
    echo "ci/capi.sh: SKIP the MPI family check: it needs libballast built with Open MPI (mpicc is not Open MPI's)"
elif ! command -v mpicc.mpich >/dev/null 2>&1; then
    echo "ci/capi.sh: installing mpich (the family check)"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mpich libmpich-dev
fi
if mpicc -showme:version 2>/dev/null | grep -q "Open MPI"; then
    mpicc.mpich capi/tests/c/mpi_family.c -DBALLAST_HAVE_MPI -I"$mpi_prefix/include" -L"$mpi_prefix/lib" \
        -Wl,-rpath,"$mpi_prefix/lib" -lballast -o "$work/mpi_family"
    timeout 120 mpirun.mpich -n 1 "$work/mpi_family" \
        || { echo "ci/capi.sh: an MPICH host was not refused by the Open MPI libballast" >&2; exit 1; }
    echo "ci/capi.sh: an MPICH host is refused by the Open MPI build: ok"
fi

# The C++ ring test against an install: local ranks and mpirun, identical to its reference.
bash ci/ringtest.sh
echo "ci/capi.sh: all passed"
