//! The object store on flash: the OSD command set over an object management layer (OML)
//! that shares the FML with the block baselines (OSSD-13 IV-V, OSCM-11 III-IV).

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod api;
pub mod compress;
pub mod crypt;
pub mod id;
pub mod index;
pub mod onode;
pub mod placement;
pub mod record;
pub mod store;

pub use api::{Attr, AttrValue, DeviceInfo, FlushScope, Osd, OsdError, TxnError, TxnId, TxnOp};
pub use crypt::MasterKey;
pub use id::{ObjectId, Oid, PartitionId};
pub use placement::{Placement, UnknownPlacement};
pub use store::{BackgroundScrubConfig, IndexMode, ObjectStore, OsdConfig};
