//! Test helpers of the proxy simulation's integration tests: `shared_data` is the
//! balancer's (one copy for the workspace's test crates).
#[path = "../../../balancer/tests/common/mod.rs"]
mod balancer_common;
pub use balancer_common::shared_data;
