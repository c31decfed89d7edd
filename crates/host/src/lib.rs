//! The host path of an object-based SSD (OSSD-13 §IV-C, §V-C, VI-E): what lies between a file
//! system call and the device-side controller.
//!
//! The path of one request, top to bottom:
//!
//! 1. A read or write of a file on OFS becomes an object I/O instance (OIO): the same range of
//!    the file's data object, in sectors ([`ScheduledFile::oio`]), with no per-request priority
//!    unless the caller gives one.
//! 2. OAQ ([`sched::Oaq`]) merges it into a queued object request (OREQ) of the same object,
//!    direction and priority, or queues a new one at the object's priority (the level set on the
//!    file through OFS, [`ofs::Ofs::set_priority`], the prototype's `ioctl()`, registered with
//!    OAQ; 0 for every other file).
//! 3. [`HostQueue`] hands OAQ's head (highest priority first) to the device while the device's
//!    queue for that priority holds fewer than `device_queue_depth` requests; beyond that,
//!    requests wait (and merge) in OAQ. The OREQ travels with its priority, as an OSD command
//!    carries it.
//! 4. The device-side controller (the `controller` crate) orders it against GC steps and other
//!    requests by that priority and issues it as an object READ or WRITE of the object store
//!    under OFS ([`OfsStack`]).
//! 5. On completion [`HostQueue::completed`] returns every OIO the OREQ carried, each with its
//!    own arrival, for the caller to account for.
//!
//! The controller speaks [`controller::Request`], a byte range of one flat space. Here that
//! space is the scheduled files laid end to end ([`Files`]), so a request names one object and
//! an offset in it.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

mod error;
mod file;
mod files;
mod queue;
mod stack;

pub use error::HostError;
pub use file::{ScheduledFile, SECTOR_BYTES};
pub use files::{Files, Span};
pub use queue::{HostConfig, HostQueue, HostStats, Pending, PriorityBy};
pub use stack::OfsStack;
