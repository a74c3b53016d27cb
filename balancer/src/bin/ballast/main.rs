//! The `ballast` command-line tool.
#![deny(unsafe_code)]

fn main() -> anyhow::Result<()> {
    Ok(())
}
