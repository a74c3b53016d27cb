//! A line about the MPI library and job (`ballast info`).

use super::Mpi;

impl Mpi {
    /// One line about the MPI library and job: library version (first line), processes,
    /// thread level, and whether Ballast initialised MPI.
    pub fn describe(&self) -> String {
        let lib = rsmpi::environment::library_version().unwrap_or_else(|_| "unknown MPI library".into());
        // First line only, whitespace runs (MPICH puts a tab after "Version:") as one space.
        let lib = lib
            .split([',', '\n'])
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let (major, minor) = rsmpi::environment::version();
        format!(
            "{lib} (MPI {major}.{minor}), {} processes, thread level {:?}, initialised by {}",
            self.size(),
            self.threading(),
            if self.initialized_by_ballast() {
                "Ballast"
            } else {
                "the host program"
            }
        )
    }
}
