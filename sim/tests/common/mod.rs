//! Test helpers shared by the proxy simulation's integration tests.
use std::path::PathBuf;

/// Path of `../shared/data/<rel>` beside the workspace, or `None` (after printing why) when
/// it is absent. Under `CI=true` a missing `../shared` is a failure, not a skip.
pub fn shared_data(rel: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(rel);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true but {} is missing", path.display());
    }
    eprintln!(
        "SKIP: {} is absent (../shared is not beside the workspace)",
        path.display()
    );
    None
}
