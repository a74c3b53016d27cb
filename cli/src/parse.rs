//! Value parsers shared by subcommands' options.

/// `--cell-kb`, `--point-cell-kb` (also `ballast run`'s): a finite KB count, 0 or more.
pub fn non_negative_kb(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a memory size: give KB per cell, finite and 0 or more"
        ))
    }
}

/// `dry-run --rank-overhead-mb`: a finite MiB count, 0 or more.
pub fn non_negative_mb(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a memory size: give MiB per rank, finite and 0 or more"
        ))
    }
}
