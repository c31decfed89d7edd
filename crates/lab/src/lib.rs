//! The lab measures: a virtual-time engine that runs the `workload` crate's workloads and
//! traces on the `stacks` crate's stacks, the papers' experiments as TOML definitions, and the
//! report with every metric, claim and plot.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod aged;
pub mod engine;
pub mod experiment;
pub mod failure;
pub mod ofsprio;
pub mod plot;
pub mod prio;
pub use controller::request;
pub mod report;
pub mod run;
pub mod scheduled;
pub mod variant;

pub use request::{Op, Request};
pub use run::{run, RunConfig, RunReport, StackKind};
