//! The verbs-only cases of `verbs_conformance`, by subject.

pub(crate) mod failures;
pub(crate) mod fanout;
pub(crate) mod refused;
