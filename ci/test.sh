#!/usr/bin/env bash
# Runs Ballast's whole test suite. Installs the system packages it needs with apt when
# they are missing, so it works on a fresh machine with only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
# The balancer's `sonata` feature links the system HDF5 library (found with pkg-config).
# The runtime's `mpi` feature builds rsmpi against the system MPI (bindgen needs libclang).
# Plots (`--plot`) lay text out with a TrueType font.
# The runtime's `verbs` feature builds rdma-sys against libibverbs/librdmacm (bindgen).
for pkg in libhdf5-dev pkg-config libopenmpi-dev openmpi-bin libclang-dev fonts-dejavu-core libibverbs-dev librdmacm-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "ci/test.sh: installing ${need_pkgs[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need_pkgs[@]}"
fi

if [ ! -d ../shared/data ]; then
    if [ "${CI:-}" = "true" ]; then
        echo "ci/test.sh: CI=true but ../shared/data is missing" >&2
        exit 1
    fi
    echo "ci/test.sh: WARNING: ../shared/data is missing: the tests on neurodamus fixtures and SONATA circuits will SKIP (and count as passed)" >&2
fi

# Disk: every feature set below is a separate build of the workspace crates. Incremental
# artefacts (about 1.7 GiB here) only help rebuilds, so CI leaves them out; a developer
# can set CARGO_INCREMENTAL=1. The whole run needs about 3 GiB under the target directory.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir"
free_kib=$(df -Pk "$target_dir" | awk 'NR==2 {print $4}')
echo "ci/test.sh: $((free_kib / 1024)) MiB free for $target_dir (a full run needs about 3 GiB)"
if [ "$free_kib" -lt $((3 * 1024 * 1024)) ]; then
    echo "ci/test.sh: WARNING: less than 3 GiB free: the build may fail with 'No space left on device'" >&2
fi
# Free space and the target's size at a stage boundary: a full disk shows up in a linker
# as 'No space left on device' or as SIGBUS (lld writes its output through a mapping).
disk_report() {
    echo "ci/test.sh: disk $1: $(($(df -Pk "$target_dir" | awk 'NR==2 {print $4}') / 1024)) MiB free, $target_dir $(du -sh "$target_dir" | cut -f1)"
}

# Formatting (rustfmt.toml): the tree must be as `cargo fmt --all` leaves it.
if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all --check
    echo "ci/test.sh: cargo fmt --check: clean"
else
    echo "ci/test.sh: SKIP cargo fmt --check: rustfmt is not installed (rustup component add rustfmt)"
fi
# The runtime's layers (docs/ARCHITECTURE.md): nothing imports upward (core <- bootstrap <-
# fabric <- protocol <- comm <- launch), checked by grep (well under a second). Each layer
# below comm has its own error (ConfigError in core/config, BootstrapError, FabricError,
# ProtocolError): none names the public one, which is comm's (`crate::comm::error`,
# published as `ballast_runtime::error`; `crate::error` is a re-export the alias check
# below refuses inside the crate).
layer_check() { # dir, pattern of the layers above it
    if grep -rnE "crate::($2)\b" "runtime/src/$1"; then
        echo "ci/test.sh: runtime/src/$1 names a layer above it (above)" >&2
        exit 1
    fi
}
layer_check core 'bootstrap|fabric|protocol|comm|launch|select|fault|fanout|error|Error|Result'
layer_check bootstrap 'fabric|protocol|comm|launch|select|fault|fanout|error|Error|Result'
layer_check fabric 'protocol|comm|launch|select|fault|fanout|error|Error|Result'
layer_check protocol 'comm|launch|select|fault|fanout|error|Error|Result'
layer_check comm 'launch|select|fault|fanout'
# lib.rs re-exports modules and types of every layer at the crate root (`crate::engine`,
# `crate::mpi`, `crate::Communicator`, ...), which would let a lower layer name an upper one
# past the grep above: those paths are for users, and the crate's own code uses only the
# canonical ones. The aliases are read from lib.rs (`pub use` names, `as` names, inline
# `pub mod NAME {`), so a new one is covered at once.
root_aliases=$(perl -0777 -ne '
    s{//[^\n]*}{}g;
    while (/^pub use\s+([^;]+);/mg) {
        my $u = $1;
        for my $i ($u =~ /\{(.*)\}/s ? split(/,/, $1) : ($u)) {
            $i =~ s/^\s+|\s+$//g;
            print(($i =~ /\bas\s+(\w+)$/ ? $1 : ($i =~ /(\w+)$/)[0]), "\n") if $i ne "";
        }
    }
    print "$1\n" while /^pub mod (\w+)\s*\{/mg;
' runtime/src/lib.rs | paste -sd'|')
if [ -z "$root_aliases" ]; then
    echo "ci/test.sh: no re-exports found in runtime/src/lib.rs (the alias check's parser is stale)" >&2
    exit 1
fi
if grep -rnE "crate::($root_aliases)\b" runtime/src --include='*.rs' | grep -v '^runtime/src/lib.rs:'; then
    echo "ci/test.sh: runtime/src uses lib.rs's re-exports (above): use the canonical path (crate::protocol::engine, crate::fabric::mpi, crate::comm::Communicator, ...)" >&2
    exit 1
fi
echo "ci/test.sh: runtime layers: no upward import, no root re-export used inside the crate"
# Unsafe code in the runtime lives only in files named ffi.rs or folders named ffi/
# (docs/ARCHITECTURE.md), and the only `allow(unsafe_code)` are on `mod ffi;` lines, under the
# crate's `#![deny(unsafe_code)]` (the FFI to libibverbs is the `ballast-ibv` crate's).
# Comments are ignored. By awk (well under a second).
unsafe_exempt='^runtime/src/(.*/)?ffi(\.rs|/)'
unsafe_bad=$(find runtime/src -name '*.rs' | sort | grep -vE "$unsafe_exempt" | xargs awk '
    { code = $0; sub(/\/\/.*/, "", code) }
    allow { allow = 0; if (code !~ /^[ \t]*(pub(\((crate|super)\))?[ \t]+)?mod[ \t]+ffi;/)
        print FILENAME ":" FNR-1 ": allow(unsafe_code) not on `mod ffi;`" }
    code ~ /allow\(unsafe_code\)/ { if (code ~ /#!/) print FILENAME ":" FNR ": #![allow(unsafe_code)]"; else allow = 1 }
    code ~ /(^|[^A-Za-z0-9_])unsafe[ \t]*(\{|fn[ \t]|impl[ \t<]|extern[ \t]|trait[ \t])/ { print FILENAME ":" FNR ": " $0 }')
if [ -n "$unsafe_bad" ] || ! grep -q '^#!\[deny(unsafe_code)\]' runtime/src/lib.rs; then
    printf '%s\n' "$unsafe_bad" >&2
    echo "ci/test.sh: unsafe code in runtime/src outside ffi.rs / ffi/ (above), or lib.rs lost its deny(unsafe_code)" >&2
    exit 1
fi
echo "ci/test.sh: runtime unsafe code: only in ffi.rs / ffi/"
# No Rust source file above 800 lines in any crate's src/ or tests/ (issue 34's rule, binding
# every later change): big modules are split by concept, big tests by subject.
long_files=$(find . -path ./target -prune -o -type f -name '*.rs' \( -path '*/src/*' -o -path '*/tests/*' \) -print |
    grep -v '/target/' | sort | xargs awk 'FNR == 1 && prev { if (n > 800) print prev ": " n " lines" } { prev = FILENAME; n = FNR } END { if (n > 800) print prev ": " n " lines" }')
if [ -n "$long_files" ]; then
    printf '%s\n' "$long_files" >&2
    echo "ci/test.sh: Rust source files above 800 lines (above): split them by concept or subject" >&2
    exit 1
fi
echo "ci/test.sh: no Rust source file above 800 lines"
cargo build --workspace --all-targets --locked --features ballast/sonata
# Lints: warnings are errors (the toolchain is pinned by the machine; clippy comes with it).
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --workspace --all-targets --locked --features ballast/sonata -- -D warnings
    # The FFI transports and the diagnostics too (every feature CI builds).
    cargo clippy --workspace --all-targets --locked --features ballast/sonata,ballast/mpi,ballast/verbs,ballast-runtime/trace,ballast-runtime/fault,ballast-capi/mpi,ballast-capi/verbs,ballast-capi/bench-twin,ballast-bench/mpi -- -D warnings
    echo "ci/test.sh: clippy: no warnings"
else
    echo "ci/test.sh: SKIP clippy: 'cargo clippy' is not installed (rustup component add clippy)"
fi
# The API docs: no broken or private intra-doc link, and one public path per item (issue 34:
# "do not re-export"; ci/public_paths.py reads rustdoc's pages), with every feature. `ballast`
# is the C library's crate (capi); the CLI binary of the same name has `doc = false`, so the
# two no longer write the same target/doc/ballast.
rm -rf "${CARGO_TARGET_DIR:-target}/doc" # pages of items gone since would read as second paths
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked --features ballast/sonata,ballast/mpi,ballast/verbs,ballast-runtime/trace,ballast-runtime/fault,ballast-capi/mpi,ballast-capi/verbs,ballast-capi/bench-twin,ballast-bench/mpi
python3 ci/public_paths.py "${CARGO_TARGET_DIR:-target}/doc" ballast_runtime ballast_balancer ballast_sim ballast_ibv ballast_bench ballast
disk_report "before the workspace tests"
cargo test --workspace --locked --features ballast/sonata
# The datagram path under load (issue 33's hang): 50 repetitions of the 16-rank all-to-all
# with drops beside the recv_into ping-pong (64 KiB here, 1 MiB in the long run) and a CPU hog, each with its own drop
# pattern, each with a timeout (ci/stress_datagram.sh; its long run is 500 repetitions).
bash ci/stress_datagram.sh --reps 50 --timeout 60 --ping-pong-kib 64

# The fault-injection harness (feature `fault`): random traffic over a fabric that drops,
# duplicates, delays and reorders packets, stalls and kills ranks, for 2,000 seeds and the
# regression seeds (about 30 s on 2 cores; a hung seed fails after 30 s, naming it).
cargo test -p ballast-runtime --locked --features fault --test fault_property

# The MPI transport (feature `mpi`): unit tests, then the MPI test programs under mpirun.
cargo test -p ballast-runtime --locked --features mpi --lib
mpi_test_bin() { # path of the `--test $1` executable
    cargo test -p ballast-runtime --locked --features mpi --test "$1" --no-run --message-format=json \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1
}
mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
conformance=$(mpi_test_bin mpi_conformance)
# -n 1: every case on the engine path (ranks as threads); -n 2, 3, 4, 7: the cases of that
# many ranks on the MPI native path (one rank per process), the others on the engine path;
# cases that ask for `mpi_native` off (e.g. `engine collectives: ...`) run the engine path.
for n in 1 2 3 4 7; do
    echo "ci/test.sh: mpirun -n $n mpi_conformance"
    timeout 900 mpirun "${mpirun_flags[@]}" -n "$n" "$conformance"
done
# A large message refused by recv_into/recv_within while later messages arrive during its
# parts: with Open MPI's shared-memory single copy off, parts move only with the sender's
# progress (as over a network), which is when the later ones can be taken out of MPI first.
if mpirun --version 2>&1 | grep -q "Open MPI"; then
    echo "ci/test.sh: mpirun -n 2 (single copy off) mpi_conformance refused_"
    timeout 300 mpirun "${mpirun_flags[@]}" --mca btl_vader_single_copy_mechanism none -n 2 "$conformance" refused_
fi
# The datagram path with one rank per process: 64 processes all-to-all with cap 4 (~5 s).
echo "ci/test.sh: mpirun -n 64 mpi_conformance '64 ranks cap 4'"
timeout 300 mpirun "${mpirun_flags[@]}" -n 64 "$conformance" "64 ranks cap 4"
host_init=$(mpi_test_bin mpi_host_init)
# -n 3: the halves of the sub-communicator part are of 2 and 1 processes.
for n in 2 3; do timeout 300 mpirun "${mpirun_flags[@]}" -n "$n" "$host_init"; done
# bootstrap::Launch: MPI initialised for the exchange, its communicator freed before MPI_Finalize.
launch_err=$(mktemp)
timeout 300 mpirun "${mpirun_flags[@]}" -n 3 "$(mpi_test_bin mpi_launch)" 2>"$launch_err" || { cat "$launch_err"; exit 1; }
if grep -i 'after MPI_FINALIZE' "$launch_err"; then echo "ci/test.sh: mpi_launch: MPI called after MPI_Finalize" >&2; exit 1; fi
rm -f "$launch_err"
# `ballast fanout` and `ballast info` under mpirun (the CLI's `mpi` feature). The release
# `ballast` (sonata, mpi, verbs) is the one ci/verbs_run.sh and ci/verbs_mpi.sh use too.
disk_report "before the release build"
. ci/release_build.sh
ballast_bin=$ballast_release  # absolute: used after cd
fanout_json=$(timeout 300 mpirun "${mpirun_flags[@]}" -n 4 "$ballast_bin" fanout --transport mpi --json)
# (MPI native path under Open MPI: the accounted footprint equals the model on every rank)
echo "$fanout_json" | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["ranks"]==4 and r["peers_connected"]==3 and r["model_matches_accounting"], r; print("ci/test.sh: mpirun -n 4 ballast fanout --transport mpi: ok")'
# (grep on a here-string, not a pipe: `grep -q` closing early would SIGPIPE the writer under pipefail)
info_out=$(timeout 300 mpirun "${mpirun_flags[@]}" -n 2 "$ballast_bin" info --transport mpi)
grep -q "^MPI: .*2 processes" <<< "$info_out"

# The verbs transport (feature `verbs`): always built and unit-tested on the host (the
# conformance binary prints why it skips without an RDMA device), then run for real on
# soft-RoCE in the QEMU guest by ci/verbs.sh (which skips with a reason without qemu), then
# `ballast run` over verbs in the guest (ci/verbs_run.sh) and under mpirun (ci/verbs_mpi.sh).
cargo build -p ballast-runtime -p ballast-bench --all-targets --locked --features ballast-runtime/verbs,ballast-bench/verbs
cargo test -p ballast-runtime --locked --features verbs
bash ci/verbs.sh
bash ci/verbs_run.sh
bash ci/verbs_mpi.sh

# `ballast run` under mpirun (each process one rank) gives the same out.dat as the local
# transport, for 1, 3 and 8 ranks, both lb-modes and both exchanges.
run_dir=$(mktemp -d)
run_args=(run --synthetic 2000 --synapses-per-cell 150 --tstop 50 --memory-scale 0.001)
(
    cd "$run_dir"
    "$ballast_bin" "${run_args[@]}" --ranks 1 --lb-mode RoundRobin --output ref >/dev/null
    for n in 1 3 8; do
        for mode in Memory RoundRobin; do
            for ex in p2p allgather; do
                out="mpi-$n-$mode-$ex"
                timeout 300 mpirun "${mpirun_flags[@]}" -n "$n" "$ballast_bin" "${run_args[@]}" --transport mpi \
                    --lb-mode "$mode" --exchange "$ex" --output "$out" >/dev/null
                cmp ref/out.dat "$out/out.dat"
                echo "ci/test.sh: mpirun -n $n ballast run --transport mpi --lb-mode $mode --exchange $ex: out.dat identical to local"
            done
        done
    done
)
rm -rf "$run_dir"

# `ballast run` and `ballast fanout` over shm (issue 36): one rank per process under mpirun
# (MPI carries the start-up exchange only), with srun's variables set here by hand (the
# ranks meet at the node's abstract socket named by SLURM_JOB_ID and SLURM_STEP_ID, no
# MPI), and as threads: out.dat identical to local's, footprint = model on every rank.
shm_dir=$(mktemp -d)
(
    cd "$shm_dir"
    "$ballast_bin" "${run_args[@]}" --ranks 1 --lb-mode RoundRobin --output ref >/dev/null
    for n in 1 3 4 8; do
        timeout 300 mpirun "${mpirun_flags[@]}" -n "$n" "$ballast_bin" "${run_args[@]}" --transport shm --output "mpi-$n" >/dev/null
        cmp ref/out.dat "mpi-$n/out.dat"
        python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["transport"]=="shm" and r["footprint_match"], r["footprint_mismatch"]' "mpi-$n/report.json"
        echo "ci/test.sh: mpirun -n $n ballast run --transport shm: out.dat identical to local"
    done
    # `auto` without an RDMA device: shm, since mpirun put every process on this node.
    timeout 300 mpirun "${mpirun_flags[@]}" -n 3 "$ballast_bin" "${run_args[@]}" --transport auto --output auto-3 \
        >/dev/null 2>auto-3.err
    grep -q "; using shm (3 processes, all on this node by OMPI_COMM_WORLD_LOCAL_SIZE)" auto-3.err \
        || { cat auto-3.err; echo "ci/test.sh: --transport auto under mpirun -n 3 did not pick shm" >&2; exit 1; }
    cmp ref/out.dat auto-3/out.dat
    python3 -c 'import json,sys; n=json.load(open(sys.argv[1]))["transport_notes"]; assert n and "using shm (3 processes" in n[0], n' auto-3/report.json
    echo "ci/test.sh: mpirun -n 3 ballast run --transport auto: shm, out.dat identical to local, the choice in report.json"
    pids=()
    for r in 0 1 2 3; do
        SLURM_PROCID=$r SLURM_NTASKS=4 SLURM_JOB_ID=$$ SLURM_STEP_ID=0 timeout 300 \
            "$ballast_bin" "${run_args[@]}" --transport shm --output slurm-4 >"slurm-$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { cat slurm-*.log; exit 1; }; done
    cmp ref/out.dat slurm-4/out.dat
    echo "ci/test.sh: 4 processes with srun's variables, ballast run --transport shm: out.dat identical to local"
    timeout 300 "$ballast_bin" "${run_args[@]}" --transport shm --ranks 4 --output threads-4 >/dev/null
    cmp ref/out.dat threads-4/out.dat
    echo "ci/test.sh: ballast run --transport shm --ranks 4 (threads): out.dat identical to local"
    fanout_json=$(timeout 300 mpirun "${mpirun_flags[@]}" -n 4 "$ballast_bin" fanout --transport shm --json)
    echo "$fanout_json" | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["ranks"]==4 and r["peers_connected"]==3 and r["model_matches_accounting"], r; print("ci/test.sh: mpirun -n 4 ballast fanout --transport shm: footprint = model on every rank")'
)
rm -rf "$shm_dir"
# A real one-node Slurm (slurm-wlm, daemons on localhost), when one can start here.
bash ci/slurm.sh "$ballast_bin"

# The C ABI (capi/): header drift, hello.c, the C conformance program under the
# sanitizers, the install with pkg-config and CMake.
bash ci/capi.sh

# NEURON 9.0.2's spike exchange over Ballast through integrations/neuron/'s shim, beside the
# wheel's own MPI, on NEURON and CoreNEURON (about 4 min with its venv cached; see docs/TESTING.md).
bash ci/neuron.sh

# The demo (README command 1), in release: its printed check must pass.
demo_dir=$(mktemp -d)
demo_out=$(cd "$demo_dir" && "$ballast_bin" demo)
echo "$demo_out" | tail -n 4
grep -q "^check: identical spikes in the RoundRobin and Memory runs (.*): ok$" <<< "$demo_out"
rm -rf "$demo_dir"

# The 1M-cell dry run under `ulimit -v` at 24 limits around the old failure points (issue
# 33: gzp's threads and their malloc arenas): exit 0 with the same allocation bytes, or 1
# with a message, never a signal or a panic (about 20 s; `--full` for the long sweep).
bash ci/dry_run_ulimit.sh "$ballast_bin"

# The round trip with the real neurodamus (its venv, pip cache and compiled mods are cached
# outside the clone; see docs/TESTING.md).
bash ci/neurodamus.sh "$ballast_bin"

disk_report "at the end"
echo "ci/test.sh: all passed"
