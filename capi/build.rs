//! Regenerates include/ballast.h from src/ with cbindgen (cbindgen.toml); the file is
//! written only when its content changes. CI checks the checked-in copy is current.
//! With the `mpi` feature it also records the family of the MPI the library is built with
//! (`BALLAST_MPI_FAMILY`: `Open MPI` or `MPICH`, from the `mpi.h` that rsmpi's probe
//! finds), which `ballast_comm_from_mpi` compares with the MPI the process runs.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("capi/cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not generate include/ballast.h");
    bindings.write_to_file(dir.join("include/ballast.h"));
    // The shared library's SONAME: libballast.so.MAJOR.MINOR (0.x releases may break the
    // ABI at a minor version), so that programs record it rather than the path they were
    // linked against; ci/install-capi.sh installs that file and libballast.so beside it.
    let (major, minor) = (env!("CARGO_PKG_VERSION_MAJOR"), env!("CARGO_PKG_VERSION_MINOR"));
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libballast.so.{major}.{minor}");
    #[cfg(feature = "mpi")]
    mpi_family();
}

/// Emits `BALLAST_MPI_FAMILY` for the crate: the family of the `mpi.h` that
/// `build_probe_mpi` (the probe rsmpi's build uses, so the same MPI) finds.
#[cfg(feature = "mpi")]
fn mpi_family() {
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo:rerun-if-env-changed=MPI_PKG_CONFIG");
    let lib = build_probe_mpi::probe().unwrap_or_else(|errs| {
        panic!("capi/build.rs: no MPI library found (as rsmpi looks for it): {errs:?}")
    });
    let header = lib
        .include_paths
        .iter()
        .map(|d| d.join("mpi.h"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("capi/build.rs: no mpi.h in {:?}", lib.include_paths));
    let text = std::fs::read_to_string(&header).expect("capi/build.rs: read mpi.h");
    let family = if text.contains("#define OPEN_MPI 1") {
        "Open MPI"
    } else if text.contains("MPICH_VERSION") {
        "MPICH"
    } else {
        "unknown"
    };
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rustc-env=BALLAST_MPI_FAMILY={family}");
}
