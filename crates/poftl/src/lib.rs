#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! p-OFTL (POFTL-14): an object-based flash translation layer with no device mapping table.
//!
//! - [`remap`]: static address remapping (III-A): bank bits shifted below the page bits so
//!   that consecutive pages of a super-block spread over `2^k` banks.
//! - [`grouping`]: page hotness and the semantic-aware data grouping algorithm (III-B), with
//!   the SFS-style and no-grouping baselines.
//! - [`store`]: the object store: objects as extents only, a data buffer grouped into write
//!   regions, whole-super-block GC, over the shared FML.
//! - [`log`]: which logged creations, truncations and removals a mount still needs, and the
//!   snapshots that bound the log.
//! - [`fs`]: a thin file layer (one object per file, directories in host memory) so the lab's
//!   file-level workloads can drive the store.
//!
//! The FML's ganged layout (`flash::gang::Layout` with one single-plane die per parallel unit
//! and `2^k` units per super-block) places write unit `v` exactly where [`remap::Remap`] places
//! linear address `v`; the store checks that for every page it maps.

pub mod fs;
pub mod grouping;
pub mod log;
pub mod remap;
pub mod store;

pub use grouping::{GroupingPolicy, UnknownGrouping};
pub use remap::{Remap, RemapError};
pub use store::{
    CheckError, Data, GcCopies, PoftlConfig, PoftlError, PoftlStats, PoftlStore, ReadOut,
};
