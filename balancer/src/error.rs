//! The balancer's error type: every failure names the file, field, population or gid at fault.
use std::path::PathBuf;

/// Errors of the balancer library. Messages name the file and the field (JSON path,
/// pickle offset, population, gid) that is wrong, so a user can fix the input. New variants
/// may be added (`#[non_exhaustive]`): match with a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BalancerError {
    /// Reading or writing a file failed at the OS level. (The OS error is part of the
    /// message, not a separate `source()`, so that error chains do not print it twice.)
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    /// A JSON file is not valid JSON.
    #[error("{path}: invalid JSON: {error}")]
    Json { path: PathBuf, error: serde_json::Error },
    /// A dry-run file is not valid JSON: serde_json's message, line and column for it
    /// (the dry-run reader is not serde_json, but refuses what serde_json refuses, in its
    /// words), and a hint in parentheses after them when the cause is known (a UTF-8 byte
    /// order mark at the start of the file).
    #[error("{path}: invalid JSON: {message} at line {line} column {column}{}", in_parentheses(.hint))]
    JsonSyntax {
        path: PathBuf,
        message: String,
        line: usize,
        column: usize,
        hint: Option<&'static str>,
    },
    /// A dry-run file is valid JSON but a field is missing or wrong.
    /// `field` is a JSON path such as `metype_memory["L5_TPC:A-cADpyr"]`.
    #[error("{path}: {field}: {message}")]
    DryRun {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// An allocation pickle is truncated, corrupt or of an unexpected shape.
    #[error("{path}: {message}")]
    Pickle { path: PathBuf, message: String },
    /// A pickle names a global outside the allow-list; nothing was executed.
    #[error("{path}: refused pickle global `{module}.{name}` at byte {offset}: only neurodamus allocation types are allowed, nothing was executed")]
    DisallowedGlobal {
        path: PathBuf,
        module: String,
        name: String,
        offset: u64,
    },
    /// An allocation does not match the dry-run data (missing, extra or duplicated gids,
    /// populations on one side only, buckets out of range). `population` and `gid` are the
    /// first problem's (for a whole missing or extra population, `gid` is `None`); `what`
    /// lists every kind of problem with up to 5 examples each.
    #[error("{}allocation does not match the dry-run data: {what}", .file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
    Mismatch {
        /// The allocation file, when the allocation was read from one.
        file: Option<PathBuf>,
        /// The population of the first problem.
        population: String,
        /// The first gid at fault, when the first problem is a gid's.
        gid: Option<u32>,
        /// All the problems, one phrase per kind, `; `-separated.
        what: String,
    },
    /// A SONATA circuit (config JSON, nodes/edges HDF5 or node-types CSV file) is missing or
    /// wrong. `population` is empty for errors of the circuit config itself; `field` is a
    /// JSON path (`networks.nodes[0].nodes_file`), an HDF5 path (`/nodes/A/0/mtype`) or a CSV
    /// column.
    #[error("{path}: {}{message}", sonata_location(.population, .field))]
    Sonata {
        path: PathBuf,
        population: String,
        field: String,
        message: String,
    },
    /// Some outputs of one command were put in place before another failed.
    #[error("{}{error}; not written: {}", wrote(.written), list(.not_written))]
    PartialWrite {
        written: Vec<PathBuf>,
        not_written: Vec<PathBuf>,
        error: Box<BalancerError>,
    },
    /// A parameter is out of range (e.g. zero ranks).
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
}

/// Result alias for the balancer library.
pub type Result<T, E = BalancerError> = std::result::Result<T, E>;

/// `wrote A, B; ` (nothing when empty).
fn wrote(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        String::new()
    } else {
        format!("wrote {}; ", list(paths))
    }
}

/// `A, B`, or `nothing`.
fn list(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nothing else".into();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` (hint)`, or nothing.
fn in_parentheses(hint: &Option<&str>) -> String {
    hint.map_or(String::new(), |h| format!(" ({h})"))
}

/// `population `P`: field: ` with the empty parts left out.
fn sonata_location(population: &str, field: &str) -> String {
    let mut s = String::new();
    if !population.is_empty() {
        s.push_str(&format!("population `{population}`: "));
    }
    if !field.is_empty() {
        s.push_str(field);
        s.push_str(": ");
    }
    s
}

impl BalancerError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BalancerError::Io {
            path: path.into(),
            error: source,
        }
    }
}
