//! Build script of ballast-runtime: with the `mpi` feature, compiles the C shim of MPI
//! constants that `mpi.h` defines as macros and rsmpi does not export (`MPI_IN_PLACE`;
//! `src/comm/mpi_native/ffi/consts.c`), with the MPI that rsmpi's own build finds
//! (build-probe-mpi: `mpicc`, else pkg-config's include paths), as rsmpi builds its shim.

fn main() {
    println!("cargo:rerun-if-changed=src/comm/mpi_native/ffi/consts.c");
    #[cfg(feature = "mpi")]
    mpi::build_consts();
}

#[cfg(feature = "mpi")]
mod mpi {
    pub fn build_consts() {
        let lib = match build_probe_mpi::probe() {
            Ok(lib) => lib,
            Err(errs) => {
                eprintln!("ballast-runtime (feature mpi): no MPI library found:");
                for e in errs {
                    eprintln!("  {e}");
                }
                std::process::exit(1);
            }
        };
        let mut b = cc::Build::new();
        b.file("src/comm/mpi_native/ffi/consts.c");
        match lib.mpicc {
            Some(mpicc) => {
                b.compiler(mpicc);
            }
            None => {
                for inc in &lib.include_paths {
                    b.include(inc);
                }
            }
        }
        b.compile("ballast_mpi_consts");
    }
}
