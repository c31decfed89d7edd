//! The lab: a virtual-time engine, workloads, trace readers, the stacks under test and the
//! run report with every metric.

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod engine;
pub mod experiment;
pub mod files;
pub mod ofsprio;
pub mod plot;
pub mod prio;
pub use controller::request;
pub mod report;
pub mod run;
pub mod scheduled;
pub mod trace;
pub mod variant;
pub mod workload;

pub use request::{Op, Request};
pub use run::{run, RunConfig, RunReport, StackKind};
