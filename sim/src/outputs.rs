//! A run's output files: the output directory checked (and removed again on failure) before
//! the run, `out.dat` and `report.json` written atomically after it, and the list of the
//! files a run wrote.
use std::path::{Path, PathBuf};

use ballast_balancer::AllocationSource;

use crate::placement::Placement;
use crate::report::{self, RunReport};
use crate::run::RankOutcome;
use crate::{all_spikes, SimError};

/// The output directory checked before the run: the levels it created are removed again
/// (when still empty) unless [`OutputDir::keep`] is called, so a run that fails leaves
/// nothing behind.
#[must_use]
pub struct OutputDir {
    created: Vec<PathBuf>,
}

impl OutputDir {
    /// The run finished: the directory stays.
    pub fn keep(mut self) {
        self.created.clear();
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        // Deepest first; `remove_dir` removes only empty directories.
        for d in &self.created {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Creates `dir` when absent and checks that a file can be created in it, so that a run
/// whose outputs could not be written fails before it starts. Errors:
/// [`SimError::OutputDir`] naming `dir`; `out.dat` or `report.json` existing there as a
/// FIFO, device or directory ([`ballast_balancer::atomic::refuse_special`]).
pub fn prepare_output_dir(dir: &Path) -> Result<OutputDir, SimError> {
    let fail = |source| SimError::OutputDir {
        path: dir.to_owned(),
        source,
    };
    if dir.exists() && !dir.is_dir() {
        return Err(fail(std::io::Error::other("exists and is not a directory")));
    }
    let created: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .map(Path::to_path_buf)
        .collect();
    // Before the run: out.dat or report.json that exist as a FIFO or a device are refused
    // now (they would be refused, not replaced, once the run is done).
    for name in ["out.dat", "report.json"] {
        ballast_balancer::atomic::refuse_special(&dir.join(name))?;
    }
    let guard = OutputDir { created };
    std::fs::create_dir_all(dir).map_err(fail)?;
    // An unnamed probe file, removed when dropped: the directory is writable.
    tempfile::tempfile_in(dir).map_err(fail)?;
    Ok(guard)
}

/// Writes out.dat and report.json into `dir` (each atomically).
pub fn write_outputs(
    dir: &Path,
    report: &RunReport,
    outcomes: &[RankOutcome],
    dt_ms: f64,
) -> Result<(), SimError> {
    std::fs::create_dir_all(dir).map_err(|source| SimError::CreateDir {
        path: dir.to_owned(),
        source,
    })?;
    report::write_atomically(
        &dir.join("out.dat"),
        report::out_dat(&all_spikes(outcomes), dt_ms).as_bytes(),
    )?;
    let json = serde_json::to_string_pretty(report)?;
    report::write_atomically(&dir.join("report.json"), json.as_bytes())?;
    Ok(())
}

/// The files a run wrote: the allocation file and its sidecar when it regenerated them
/// (`ranks` × 1 cycle), then out.dat and report.json in `output`.
pub fn written_files(placement: &Placement, ranks: usize, output: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(AllocationSource::Regenerated(f)) = &placement.source {
        files.push(f.clone());
        files.push(f.with_file_name(ballast_balancer::sidecar_file_name(ranks as u32, 1)));
    }
    files.push(output.join("out.dat"));
    files.push(output.join("report.json"));
    files
}
