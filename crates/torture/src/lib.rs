//! Torture: deterministic simulation testing of every ossd stack (TigerBeetle's simulator,
//! LittleFS's power-loss runs, redb's crash fuzzing, in one place).
//!
//! - [`sim`] runs one seed: a random workload against a stack through [`subject::Subject`],
//!   faults injected through [`flash::fault`], recovery after each power loss, and the
//!   [`oracle`]'s checks after every read and recovery.
//! - [`campaign`] runs many seeds on every core, with a time or run budget.
//! - [`sweep`] cuts power after each flash command of a scripted workload in turn.
//!
//! The contract checked, per fault kind, is written down in docs/RELIABILITY.md.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod campaign;
pub mod device;
pub mod fault;
mod files;
pub mod oracle;
pub mod sim;
pub mod subject;
pub mod sweep;

pub use campaign::{Campaign, Summary};
pub use fault::{FaultKind, FaultSet, FaultTally};
pub use sim::{run, RunReport, SimConfig, Violation};
pub use subject::{covered, Contract, StackKind, COVERED};
