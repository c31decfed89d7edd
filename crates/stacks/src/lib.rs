//! The stacks under test and the one place they are built.
//!
//! - [`StackKind`]: the one name of a stack, for the CLI, experiments, torture and benches.
//! - [`Stack`]: a block-level stack (the page-mapping FTL or DFTL, or the object store with the
//!   byte space cut into objects) as the lab's engine and the device-side controller drive it.
//! - [`FileStack`]: a file-level stack (OFS, the ext4-like blockfs, p-OFTL, LittleFS) as the file
//!   workloads drive it.
//! - [`StackSpec`]: every layer's config with its defaults and `key = value` settings on top;
//!   it builds either kind of stack on a fresh in-memory device.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

mod block;
mod build;
mod counters;
mod file;
mod kind;

pub use block::{dies_of_units, gc_dies_of, gc_state_of, FtlStack, OsdStack, Stack, StackFault};
pub use build::{apply, controlled_fml, FmlBase, SettingError, StackError, StackSpec, ValueError};
pub use controller::GcState;
pub use counters::{flash_counters, ftl_counters, osd_counters, poftl_counters, Counters};
pub use file::FileStack;
pub use kind::{StackKind, UnknownStack};
