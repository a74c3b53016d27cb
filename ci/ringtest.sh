#!/usr/bin/env bash
# The C++ ring test (examples/cpp/ringtest) against an installed libballast:
#  1. ci/install-capi.sh into a temporary prefix; the example built with CMake against it
#     (find_package(Ballast), -DCMAKE_PREFIX_PATH);
#  2. for a few networks: ringtest_reference (one process, no exchange) writes the
#     reference spike file, checked on its own (format, sorted by time then gid, every cell
#     spiking at least once per the slowest possible trip around its ring); ringtest runs as
#     1, 3 and 8 ranks through ballast_local_run and each spike file must be identical to the
#     reference; on every rank the peers the runtime connected must be the peers the
#     connectivity needs (plus the final all-gather's partners);
#  3. errors: a bad option, a bad BALLAST_* value (reported through ballast_last_error), an
#     output that cannot be written: non-zero exits with the message, no file left behind;
#  4. with an MPI libballast (install-capi.sh --features mpi, whose ballast.pc carries
#     -DBALLAST_HAVE_MPI): the same under mpirun -n 1, 3 and 4 with --mpi
#     (ballast_comm_from_mpi).
# Installs g++, cmake, make and pkg-config with apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v g++ >/dev/null 2>&1 || need+=(g++ libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v make >/dev/null 2>&1 || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
    echo "ci/ringtest.sh: installing ${need[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"
fi

prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
bash ci/install-capi.sh "$prefix"
cmake -S examples/cpp/ringtest -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
ringtest=$work/build/ringtest
reference=$work/build/ringtest_reference
echo "ci/ringtest.sh: built examples/cpp/ringtest with CMake find_package(Ballast) against $prefix"
# The same program built with pkg-config instead, once plainly and once under
# AddressSanitizer and UBSan (both checked against the reference below).
pc_flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs ballast)
# shellcheck disable=SC2086 # pkg-config's flags are words
g++ -std=c++17 -O2 examples/cpp/ringtest/ringtest.cpp $pc_flags -o "$work/ringtest-pkgconfig"
# shellcheck disable=SC2086
g++ -std=c++17 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined examples/cpp/ringtest/ringtest.cpp \
    $pc_flags -o "$work/ringtest-asan"

# The networks: rings, cells per ring, tstop (ms).
networks=("4 8 100" "5 7 150" "16 10 200" "1 3 30")

# check_spikes FILE RINGS CELLS TSTOP: the format, the order, and that every cell spiked
# at least floor(tstop / (cells * 3 ms)) times (at least once): a hop of the wave is the
# 1 ms delay plus at most 1.8 ms to reach threshold, so a trip around the ring is shorter
# than cells * 3 ms.
check_spikes() {
    local file=$1 rings=$2 cells=$3 tstop=$4
    local bad
    bad=$(LC_ALL=C grep -cvE $'^[0-9]+\\.[0-9]{3}\t[0-9]+$' "$file" || true)
    if [ "$bad" != 0 ]; then
        echo "ci/ringtest.sh: $file: $bad lines not in the format '<ms with 3 decimals><TAB><gid>'" >&2
        return 1
    fi
    if ! LC_ALL=C sort -c -t $'\t' -k1,1n -k2,2n "$file"; then
        echo "ci/ringtest.sh: $file: not sorted by time then gid" >&2
        return 1
    fi
    awk -F'\t' -v n=$((rings * cells)) -v cells="$cells" -v tstop="$tstop" -v file="$file" '
        { if ($2 >= n) { printf "ci/ringtest.sh: %s: gid %s out of range (%d cells)\n", file, $2, n > "/dev/stderr"; bad = 1 }
          count[$2]++; total++ }
        END {
            want = int(tstop / (cells * 3)); if (want < 1) want = 1
            for (g = 0; g < n; g++) if (count[g] < want) {
                printf "ci/ringtest.sh: %s: gid %d spiked %d times, want at least %d\n", file, g, count[g], want > "/dev/stderr"; bad = 1
            }
            if (bad) exit 1
            printf "ci/ringtest.sh: %s: %d spikes, every one of the %d cells at least %d times\n", file, total, n, want
        }' "$file"
}

# check_peers LOG: on every rank, the peers the runtime connected (measured just before the
# final all-gather) are the peers the connectivity needs, plus at most the all-gather's 2
# ring partners, which may have started it already (their endpoints open on their first
# message). An all-to-all exchange would connect every rank to all the others.
check_peers() {
    awk '/^ringtest: rank [0-9]+:/ {
            ranks++
            for (i = 1; i <= NF; i++) { if ($i == "needed") need = $(i + 1) + 0; if ($i == "connected") conn = $(i + 1) + 0 }
            if (conn < need || conn > need + 2) { print "ci/ringtest.sh: " $0 ": the exchange connected other peers than it needs" > "/dev/stderr"; bad = 1 }
        }
        END { if (bad || ranks == 0) exit 1 }' "$1"
}

for net in "${networks[@]}"; do
    read -r rings cells tstop <<< "$net"
    shape=(--rings "$rings" --cells-per-ring "$cells" --tstop "$tstop")
    ref="$work/ref-$rings-$cells.dat"
    "$reference" "${shape[@]}" --out "$ref" >/dev/null
    check_spikes "$ref" "$rings" "$cells" "$tstop"
    for n in 1 3 8; do
        out="$work/local-$n-$rings-$cells.dat"
        timeout 300 "$ringtest" --ranks "$n" "${shape[@]}" --out "$out" > "$work/log"
        cmp "$ref" "$out"
        check_peers "$work/log"
        echo "ci/ringtest.sh: ringtest --ranks $n (ballast_local_run) ${shape[*]}: identical to the reference"
    done
done
"$work/ringtest-pkgconfig" --ranks 3 --rings 4 --cells-per-ring 8 --tstop 100 --out "$work/pkgconfig.dat" >/dev/null
cmp "$work/ref-4-8.dat" "$work/pkgconfig.dat"
echo "ci/ringtest.sh: ringtest built with pkg-config, 3 ranks: identical to the reference"
for n in 3 8; do
    "$work/ringtest-asan" --ranks "$n" --rings 5 --cells-per-ring 7 --tstop 150 --out "$work/asan.dat" >/dev/null
    cmp "$work/ref-5-7.dat" "$work/asan.dat"
done
echo "ci/ringtest.sh: ringtest under -fsanitize=address,undefined, 3 and 8 ranks: no report, identical to the reference"
# 4 rings of 8 on 8 ranks: rank i holds cell i of every ring, whose targets are on ranks
# i + 1 and 3 i + 1 (mod 8): no rank sends to more than 2 of its 7 peers.
"$ringtest" --ranks 8 --rings 4 --cells-per-ring 8 --tstop 100 --out "$work/x.dat" > "$work/log"
if awk '/^ringtest: rank / { for (i = 1; i <= NF; i++) if ($i == "sends" && $(i + 2) + 0 > 2) bad = 1 } END { exit !bad }' "$work/log"; then
    echo "ci/ringtest.sh: a rank sends to more than the 2 ranks holding its targets:" >&2
    cat "$work/log" >&2
    exit 1
fi
echo "ci/ringtest.sh: 8 ranks: every rank sends only to the ranks of its targets"

# Errors: the exit code and the message; no output (nor temporary) left behind.
expect_fail() { # CODE NEEDLE COMMAND...
    local code=$1 needle=$2 rc=0
    shift 2
    "$@" > "$work/err" 2>&1 || rc=$?
    if [ "$rc" != "$code" ] || ! grep -qF -- "$needle" "$work/err"; then
        echo "ci/ringtest.sh: '$*' exited $rc (want $code) with:" >&2
        cat "$work/err" >&2
        echo "(want it to say '$needle')" >&2
        exit 1
    fi
}
expect_fail 2 "--ranks: '0' is not an integer from 1 to 256" "$ringtest" --ranks 0 --out "$work/bad.dat"
expect_fail 2 "unknown option '--bogus'" "$ringtest" --bogus --out "$work/bad.dat"
expect_fail 2 "unknown option '--ranks'" "$reference" --ranks 2 --out "$work/bad.dat"
expect_fail 1 "BALLAST_BUFFER_COUNT" env BALLAST_BUFFER_COUNT=zz "$ringtest" --out "$work/bad.dat"
expect_fail 1 "$work/no/such/dir/bad.dat.tmp." "$ringtest" --ranks 3 --out "$work/no/such/dir/bad.dat"
mkdir "$work/bad.dir"  # the rename over a directory fails: the temporary must go
expect_fail 1 "$work/bad.dir: rename from" "$ringtest" --ranks 2 --out "$work/bad.dir"
rmdir "$work/bad.dir"
if ls "$work" | grep -e '^bad\.dat' -e '\.tmp\.'; then
    echo "ci/ringtest.sh: a failed or finished run left files behind" >&2
    exit 1
fi
echo "ci/ringtest.sh: bad options, a bad BALLAST_* value and an unwritable output: non-zero exits with the reason"

# Under mpirun, with an MPI libballast (a failure to install it fails the script).
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "ci/ringtest.sh: CI=true but mpirun or mpicc is missing" >&2
        exit 1
    fi
    echo "ci/ringtest.sh: SKIP mpirun -n 1/3/4 ringtest --mpi: mpirun or mpicc is not installed (openmpi-bin, libopenmpi-dev)"
else
    mpi_prefix="$work/prefix-mpi"
    if ! bash ci/install-capi.sh "$mpi_prefix" --features mpi > "$work/install-mpi.log" 2>&1; then
        cat "$work/install-mpi.log" >&2
        echo "ci/ringtest.sh: ci/install-capi.sh --features mpi failed" >&2
        exit 1
    fi
    if ! PKG_CONFIG_PATH="$mpi_prefix/lib/pkgconfig" pkg-config --cflags ballast | grep -q -- '-DBALLAST_HAVE_MPI'; then
        echo "ci/ringtest.sh: the mpi install's ballast.pc does not define BALLAST_HAVE_MPI" >&2
        exit 1
    fi
    cmake -S examples/cpp/ringtest -B "$work/build-mpi" -DCMAKE_PREFIX_PATH="$mpi_prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$work/build-mpi" >/dev/null
    mpirun_flags=(--oversubscribe)
    [ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
    for net in "4 8 100" "5 7 150"; do
        read -r rings cells tstop <<< "$net"
        shape=(--rings "$rings" --cells-per-ring "$cells" --tstop "$tstop")
        for n in 1 3 4; do
            out="$work/mpi-$n-$rings-$cells.dat"
            timeout 300 mpirun "${mpirun_flags[@]}" -n "$n" "$work/build-mpi/ringtest" --mpi "${shape[@]}" --out "$out" > "$work/log"
            cmp "$work/ref-$rings-$cells.dat" "$out"
            echo "ci/ringtest.sh: mpirun -n $n ringtest --mpi (ballast_comm_from_mpi) ${shape[*]}: identical to the reference"
        done
    done
fi
echo "ci/ringtest.sh: all passed"
