//! Regenerates include/ballast.h from src/ with cbindgen (cbindgen.toml); the file is
//! written only when its content changes. CI checks the checked-in copy is current.

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
}
