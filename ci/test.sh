#!/usr/bin/env bash
# Runs Ballast's whole test suite. Installs the system packages it needs with apt when
# they are missing, so it works on a fresh machine with only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
# The balancer's `sonata` feature links the system HDF5 library (found with pkg-config).
for pkg in libhdf5-dev pkg-config; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "ci/test.sh: installing ${need_pkgs[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${need_pkgs[@]}"
fi

if [ "${CI:-}" = "true" ] && [ ! -d ../shared/data ]; then
    echo "ci/test.sh: CI=true but ../shared/data is missing" >&2
    exit 1
fi

cargo build --workspace --all-targets --locked --features ballast-balancer/sonata
cargo test --workspace --locked --features ballast-balancer/sonata
