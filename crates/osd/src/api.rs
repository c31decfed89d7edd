//! The OSD command set (T10 OSD, as OSSD-13 IV-A and OSCM-11 III use it) as one trait that a
//! local store and, later, a network client both implement.

use crate::id::{ObjectId, Oid, PartitionId};
use crate::onode::AccessPattern;

/// A predefined attribute (user attributes are `Attr::User(id)` with id >= 0x1000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attr {
    /// Logical length in bytes; setting it truncates or extends the object.
    LogicalLength,
    /// Flash bytes the object's data occupies (read-only).
    UsedCapacity,
    CreatedTime,
    ModifiedTime,
    AccessedTime,
    AttrChangedTime,
    /// Scheduling priority; 0 is normal.
    Priority,
    /// Placement hint: the size the object is expected to reach.
    ExpectedSize,
    /// Placement hint: how the object will be accessed.
    AccessPattern,
    ReadOnly,
    /// The object is a file system inode (OSCM-11 V-D).
    InodeEmbedded,
    /// Object-level reliability (OSCM-11 III): parity units per parity group of the object's
    /// data units, 0 for none (at most [`crate::store::MAX_RELIABILITY`]). Setting it on an
    /// object with data recomputes its parity.
    Reliability,
    User(u16),
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrValue {
    U64(u64),
    Bool(bool),
    Pattern(AccessPattern),
    Bytes(Vec<u8>),
    /// A user attribute that is not set.
    Absent,
}

/// What a FLUSH covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushScope {
    Object(Oid),
    Partition(PartitionId),
    Device,
}

/// Typed errors in the spirit of the OSD sense codes.
#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("no space: {needed_bytes} bytes needed, {free_bytes} bytes left")]
    NoSpace { needed_bytes: u64, free_bytes: u64 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("object {0} is read-only")]
    ReadOnly(Oid),
    #[error("corrupted {what} at {location}")]
    Corrupted { what: String, location: String },
    /// A unit read back does not match the checksum written with it (bit rot, a damaged image):
    /// its contents are lost and are never returned. `what` names the object and byte range,
    /// or the kind of metadata; `location` the write unit.
    #[error(
        "uncorrectable read of {what} at {location}: its contents do not match their checksum"
    )]
    Uncorrectable { what: String, location: String },
    /// The flash management layer (or the device under it) refused a command.
    #[error("device: {0}")]
    Device(#[from] fml::FmlError),
    /// A bug: an internal invariant did not hold.
    #[error("internal error: {0}")]
    Internal(String),
    /// A remote target (over the OSD wire protocol) failed the command on its device, or the
    /// connection to it failed; the message is the target's or the transport's. The typed
    /// device error stays on the target.
    #[error("remote: {0}")]
    Remote(String),
    #[error("the store stopped accepting writes after an earlier failure ({0}); reopen it")]
    Poisoned(String),
}

/// The OSD command set.
pub trait Osd {
    fn create_partition(&mut self, id: Option<PartitionId>) -> Result<PartitionId, OsdError>;
    /// Removes an empty partition.
    fn remove_partition(&mut self, id: PartitionId) -> Result<(), OsdError>;
    /// Creates an object with the given id (at least 0x10000) or one the device assigns.
    fn create(
        &mut self,
        partition: PartitionId,
        id: Option<ObjectId>,
    ) -> Result<ObjectId, OsdError>;
    fn remove(&mut self, oid: Oid) -> Result<(), OsdError>;
    /// Reads from `offset`; returns the bytes read (fewer at the end of the object).
    fn read(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<usize, OsdError>;
    fn write(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<(), OsdError>;
    /// Writes at the end of the object; returns the offset the data went to.
    fn append(&mut self, oid: Oid, data: &[u8]) -> Result<u64, OsdError>;
    /// Sets the logical length (shrinking discards data past it; growing reads as zeros).
    fn truncate(&mut self, oid: Oid, length: u64) -> Result<(), OsdError>;
    fn get_attr(&mut self, oid: Oid, attr: Attr) -> Result<AttrValue, OsdError>;
    /// Sets an attribute; `AttrValue::Absent` removes a user attribute.
    fn set_attr(&mut self, oid: Oid, attr: Attr, value: AttrValue) -> Result<(), OsdError>;
    /// Partitions in id order from the continuation token (0 to start); returns the next token.
    fn list_partitions(
        &mut self,
        token: u64,
        max: usize,
    ) -> Result<(Vec<PartitionId>, Option<u64>), OsdError>;
    /// Objects of a partition in id order from the continuation token (0 to start).
    fn list(
        &mut self,
        partition: PartitionId,
        token: u64,
        max: usize,
    ) -> Result<(Vec<ObjectId>, Option<u64>), OsdError>;
    /// Makes everything written before it durable.
    fn flush(&mut self, scope: FlushScope) -> Result<(), OsdError>;
}
