//! The lab: a virtual-time engine, workloads, trace readers and metrics.

pub mod request;
pub mod trace;
pub mod workload;

pub use request::{Op, Request};
