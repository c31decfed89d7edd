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
    /// When the object was created, in virtual ns (read-only).
    CreatedTime,
    /// When the object's data or length last changed, in virtual ns.
    ModifiedTime,
    /// When the object was last read, in virtual ns (kept when `osd.atime` is on).
    AccessedTime,
    /// When an attribute was last set, in virtual ns (read-only).
    AttrChangedTime,
    /// Scheduling priority; 0 is normal.
    Priority,
    /// Placement hint: the size the object is expected to reach.
    ExpectedSize,
    /// Placement hint: how the object will be accessed.
    AccessPattern,
    /// While true the object refuses writes, truncation and reliability changes.
    ReadOnly,
    /// The object is a file system inode (OSCM-11 V-D).
    InodeEmbedded,
    /// Object-level reliability (OSCM-11 III): parity units per parity group of the object's
    /// data units, 0 for none (at most [`crate::store::MAX_RELIABILITY`]). Setting it on an
    /// object with data recomputes its parity.
    Reliability,
    /// Per-object encryption (issue 16 item 7): `U64(0)` none, `U64(1)` XChaCha20-Poly1305
    /// under a random data key wrapped by the device master key
    /// ([`crate::ObjectStore::set_master_key`]). Set only while the object is empty and has
    /// no parity.
    Encryption,
    /// Per-object compression (issue 16 item 6): `U64(0)` none, `U64(1)` LZ4, `U64(2)`
    /// Zstandard, `U64(3)` auto (Zstandard unless the first bytes written at offset 0 are
    /// compressed already). Data is stored in chunks of `osd.compression_chunk_units` units,
    /// each compressed on its own (raw when that saves no unit). Set only while the object
    /// is empty and has no parity.
    Compression,
    /// User attribute `id` (at least 0x1000): bytes kept in the onode.
    User(u16),
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrValue {
    /// A number: bytes for lengths and sizes, virtual ns for times, or a count.
    U64(u64),
    /// A flag (`ReadOnly`, `InodeEmbedded`).
    Bool(bool),
    /// An access pattern (`AccessPattern`).
    Pattern(AccessPattern),
    /// A user attribute's value.
    Bytes(Vec<u8>),
    /// A user attribute that is not set.
    Absent,
}

/// What a FLUSH covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushScope {
    /// One object (this store flushes everything buffered: its buffer is shared).
    Object(Oid),
    /// The objects of one partition (likewise everything buffered).
    Partition(PartitionId),
    /// Everything, access times included.
    Device,
}

/// Typed errors in the spirit of the OSD sense codes.
#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    /// The partition or object (named) does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The partition or object (named) exists already.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// The FML cannot hold the data.
    #[error("no space: {needed_bytes} bytes needed, {free_bytes} bytes left")]
    NoSpace {
        /// Bytes the command needed.
        needed_bytes: u64,
        /// Bytes the FML can still hold valid.
        free_bytes: u64,
    },
    /// An argument the command cannot take (says why).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A write, truncation or reliability change of a read-only object.
    #[error("object {0} is read-only")]
    ReadOnly(Oid),
    /// Metadata read back that does not decode or check.
    #[error("corrupted {what} at {location}")]
    Corrupted {
        /// What is damaged and how.
        what: String,
        /// Where: a unit, a checkpoint, or the device.
        location: String,
        /// The write unit holding the damage, when it is one unit: typed, so that a harness
        /// can tell whether a fault it injected struck that unit (`location` says it in
        /// words).
        unit: Option<u32>,
    },
    /// A unit could not be read back whole: the device's ECC gave up, its payload does not
    /// match the checksum written with it (bit rot, a damaged image), or it fails
    /// authentication. Its contents are lost and are never returned. `what` names the object and
    /// byte range, or the kind of metadata, and says which of these it was; `location` the
    /// write unit (and, when parity could not rebuild it, why).
    #[error("uncorrectable read of {what} at {location}: its contents are lost")]
    Uncorrectable {
        /// The object and byte range, or the kind of metadata.
        what: String,
        /// The write unit.
        location: String,
        /// The write unit, typed (see [`OsdError::Corrupted`]'s).
        unit: Option<u32>,
    },
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
    /// The object is encrypted and the store has no master key: open it with one
    /// (`--key-file`).
    #[error(
        "object {0} is encrypted: give the device master key (--key-file) to read or write it"
    )]
    KeyRequired(Oid),
    /// The master key given does not unwrap the object's data key: it is not the key the object
    /// was encrypted under (or the wrapped key was altered).
    #[error("the master key given does not unwrap the data key of object {0}: wrong key file")]
    WrongKey(Oid),
    /// An earlier write failed part way; the store refuses writes until it is reopened (the
    /// first failure's reason).
    #[error("the store stopped accepting writes after an earlier failure ({0}); reopen it")]
    Poisoned(String),
    /// A transaction command was refused (docs/DESIGN.md "Transactions").
    #[error("transaction: {0}")]
    Transaction(#[from] TxnError),
}

/// A transaction's handle, given by BEGIN (seeds 001 and 003: "a transaction-id attribute").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnId(pub u64);

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Why a transaction command was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// No open transaction has this id (never begun, committed, aborted, or lost at a reopen).
    #[error("no open transaction {0}")]
    NotFound(TxnId),
    /// The transaction's log would exceed the limit: the command was refused, the transaction
    /// stays open with what it held before.
    #[error(
        "transaction {txn} would take {needed_bytes} bytes of log, over its limit of {limit_bytes}"
    )]
    TooLarge {
        /// The transaction.
        txn: TxnId,
        /// Log bytes the transaction would need with this command.
        needed_bytes: u64,
        /// The limit ([`crate::store::TXN_LOG_MAX_UNITS`] write units).
        limit_bytes: u64,
    },
    /// Too many transactions are open at once.
    #[error("{limit} transactions are open already")]
    TooMany {
        /// The limit ([`crate::store::TXN_OPEN_MAX`]).
        limit: u64,
    },
    /// The command cannot be part of a transaction (says what and why).
    #[error("{0}")]
    Unsupported(String),
}

/// An object command inside a transaction: applied at COMMIT, all or nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// Creates an object (an id the device assigns is assigned when the command is taken).
    Create {
        /// Its partition (which must exist).
        partition: PartitionId,
        /// The id wanted, or `None` for one the device assigns.
        id: Option<ObjectId>,
    },
    /// Removes an object.
    Remove {
        /// The object.
        oid: Oid,
    },
    /// Writes bytes at an offset.
    Write {
        /// The object.
        oid: Oid,
        /// First byte.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Sets the logical length.
    Truncate {
        /// The object.
        oid: Oid,
        /// The new length.
        length: u64,
    },
    /// Sets an attribute (priority, expected size, access pattern, read-only, logical length,
    /// or a user attribute).
    SetAttr {
        /// The object.
        oid: Oid,
        /// The attribute.
        attr: Attr,
        /// Its value.
        value: AttrValue,
    },
}

/// The OSD command set.
pub trait Osd {
    /// Creates a partition with the given id (at least 0x10000) or one the device assigns.
    fn create_partition(&mut self, id: Option<PartitionId>) -> Result<PartitionId, OsdError>;
    /// Removes an empty partition.
    fn remove_partition(&mut self, id: PartitionId) -> Result<(), OsdError>;
    /// Creates an object with the given id (at least 0x10000) or one the device assigns.
    fn create(
        &mut self,
        partition: PartitionId,
        id: Option<ObjectId>,
    ) -> Result<ObjectId, OsdError>;
    /// Removes an object and its data (a partition is removed with `remove_partition`).
    fn remove(&mut self, oid: Oid) -> Result<(), OsdError>;
    /// Reads from `offset`; returns the bytes read (fewer at the end of the object).
    fn read(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<usize, OsdError>;
    /// Writes `data` at `offset`; the object grows to cover it.
    fn write(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<(), OsdError>;
    /// Writes at the end of the object; returns the offset the data went to.
    fn append(&mut self, oid: Oid, data: &[u8]) -> Result<u64, OsdError>;
    /// Sets the logical length (shrinking discards data past it; growing reads as zeros).
    fn truncate(&mut self, oid: Oid, length: u64) -> Result<(), OsdError>;
    /// Reads an attribute; a user attribute not set is `AttrValue::Absent`.
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
    /// What the device is: its write unit, capacity and use (T10 OSD's root information
    /// attributes), for a host that formats and sizes a file system on it.
    fn describe(&mut self) -> Result<DeviceInfo, OsdError>;
    /// BEGIN: opens a transaction over objects of `partition` (which must exist). Its commands
    /// are invisible to every reader until COMMIT.
    fn begin_txn(&mut self, partition: PartitionId) -> Result<TxnId, OsdError>;
    /// Adds an object command to an open transaction; returns the id of an object it creates.
    /// The command is checked now against the transaction's view (and again at COMMIT).
    fn txn_op(&mut self, txn: TxnId, op: TxnOp) -> Result<Option<ObjectId>, OsdError>;
    /// COMMIT: applies the transaction's commands, durably and all or nothing (after a power
    /// cut, recovery shows all of them or none). A refusal discards the transaction.
    fn commit_txn(&mut self, txn: TxnId) -> Result<(), OsdError>;
    /// ABORT: discards an open transaction (nothing of it was written).
    fn abort_txn(&mut self, txn: TxnId) -> Result<(), OsdError>;
}

/// The device-level facts a host needs (T10 OSD-2's root information attributes page, trimmed
/// to what ossd has).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Bytes per write unit: the unit of placement, of the extent map and of a read from flash.
    pub unit_bytes: u32,
    /// Bytes the store can hold (write units the flash management layer offers, times
    /// `unit_bytes`).
    pub capacity_bytes: u64,
    /// Bytes of flash holding valid units (data, index nodes, onodes, checkpoints).
    pub used_bytes: u64,
    /// The placement policy's name (`osd.placement`: one, semantic, split, ...).
    pub placement: String,
}
