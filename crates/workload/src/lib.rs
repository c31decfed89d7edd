//! What the host asks of a stack, apart from how it is measured:
//!
//! - [`block`]: block-level request generators (sequential, random, hot/cold, Zipf) and prefill;
//! - [`trace`]: readers of real block traces (MQSim, MSR Cambridge, blkparse, FIU);
//! - [`files`]: the papers' file-level workloads (PostMark with aging, hot/cold files,
//!   multi-stream writers, torrent downloads, videoserver, sequential base, largefile, a block
//!   trace replayed onto files), each driving any [`stacks::FileStack`];
//! - [`scheduled`]: the open-loop workloads of the scheduled experiments (BLOCKMGMT-09's
//!   synthetic workload, OSSD-13 VI-E's video and prioritized file writes), as requests with
//!   arrival times and priorities;
//! - [`latency`]: the latency summary they report.
//!
//! The lab's engine runs these in virtual time and judges the results; the FUSE and network
//! front ends can reuse them against real stacks.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod block;
pub mod files;
pub mod latency;
pub mod scheduled;
pub mod trace;

pub use controller::request::{Op, Request};
