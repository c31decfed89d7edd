//! Requests and replies: the OSD commands, their parameters and results, status codes.

use osd::onode::AccessPattern;
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, Oid, OsdError, PartitionId, TxnError, TxnId, TxnOp,
};

use crate::cap::{CapKey, Capability, CAPABILITY_LEN, MAC_LEN};
use crate::codec::{Header, ProtoError, Reader, Writer, FLAG_REPLY, FLAG_SECURED, HEADER_LEN};

/// Protocol version 1 (the only one so far).
pub const VERSION_1: u8 = 1;
/// Versions this build speaks, newest first.
pub const SUPPORTED_VERSIONS: &[u8] = &[VERSION_1];

/// Command codes (the header's opcode; a reply carries its request's opcode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Opcode {
    /// HELLO: version negotiation.
    Hello = 0x0001,
    /// CREATE PARTITION.
    CreatePartition = 0x0010,
    /// REMOVE PARTITION.
    RemovePartition = 0x0011,
    /// LIST PARTITIONS.
    ListPartitions = 0x0012,
    /// SET KEY VERSION (revocation).
    SetKeyVersion = 0x0013,
    /// DESCRIBE: the device's write unit, capacity and use (root information attributes).
    Describe = 0x0014,
    /// FORMAT OSD: removes every object and partition.
    FormatOsd = 0x0015,
    /// CREATE (an object).
    Create = 0x0020,
    /// REMOVE (an object).
    Remove = 0x0021,
    /// READ.
    Read = 0x0022,
    /// WRITE.
    Write = 0x0023,
    /// APPEND.
    Append = 0x0024,
    /// TRUNCATE.
    Truncate = 0x0025,
    /// GET ATTRIBUTES.
    GetAttr = 0x0026,
    /// SET ATTRIBUTES.
    SetAttr = 0x0027,
    /// LIST (a partition's objects).
    List = 0x0028,
    /// FLUSH.
    Flush = 0x0029,
    /// BEGIN (a transaction over one partition).
    Begin = 0x0030,
    /// COMMIT (a transaction).
    Commit = 0x0031,
    /// ABORT (a transaction).
    Abort = 0x0032,
    /// An object command inside a transaction (CREATE, REMOVE, WRITE, TRUNCATE or SET
    /// ATTRIBUTES, wrapped with the transaction's id).
    TxnOp = 0x0033,
}

impl Opcode {
    /// Every opcode, in code order.
    pub const ALL: [Opcode; 21] = [
        Opcode::Hello,
        Opcode::CreatePartition,
        Opcode::RemovePartition,
        Opcode::ListPartitions,
        Opcode::SetKeyVersion,
        Opcode::Describe,
        Opcode::FormatOsd,
        Opcode::Create,
        Opcode::Remove,
        Opcode::Read,
        Opcode::Write,
        Opcode::Append,
        Opcode::Truncate,
        Opcode::GetAttr,
        Opcode::SetAttr,
        Opcode::List,
        Opcode::Flush,
        Opcode::Begin,
        Opcode::Commit,
        Opcode::Abort,
        Opcode::TxnOp,
    ];

    /// The opcode of a header's code; [`ProtoError::UnknownOpcode`] for any other.
    pub fn from_code(code: u16) -> Result<Opcode, ProtoError> {
        Opcode::ALL
            .into_iter()
            .find(|o| *o as u16 == code)
            .ok_or(ProtoError::UnknownOpcode { opcode: code })
    }
}

/// An OSD command with its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Version negotiation: the versions the client speaks. Carries no capability.
    Hello {
        /// Protocol versions the client speaks.
        versions: Vec<u8>,
    },
    /// Creates a partition.
    CreatePartition {
        /// The partition id wanted; `None`: the target picks one.
        id: Option<PartitionId>,
    },
    /// Removes a partition.
    RemovePartition {
        /// The partition to remove.
        id: PartitionId,
    },
    /// Lists partition ids, `max` at a time.
    ListPartitions {
        /// Where to continue: 0 first, then the previous reply's continuation.
        token: u64,
        /// Most ids to return (the server caps it at 65,536).
        max: u32,
    },
    /// Revocation: sets a partition's current key version (it may only grow).
    SetKeyVersion {
        /// The partition.
        partition: PartitionId,
        /// The new key version; it must exceed the current one.
        version: u32,
    },
    /// The device's write unit, capacity and use ([`osd::DeviceInfo`]).
    Describe,
    /// T10 OSD's FORMAT OSD: removes every object and every partition, durably; the device is
    /// left empty (partition key versions, kept on the partitions, start again from 0).
    FormatOsd,
    /// Creates an object in a partition.
    Create {
        /// The partition to create it in.
        partition: PartitionId,
        /// The object id wanted; `None`: the target picks one.
        id: Option<ObjectId>,
    },
    /// Removes an object.
    Remove {
        /// The object.
        oid: Oid,
    },
    /// Reads a byte range of an object (shorter at the end of the object).
    Read {
        /// The object.
        oid: Oid,
        /// First byte.
        offset: u64,
        /// Bytes wanted (at most the max frame size less 128).
        length: u32,
    },
    /// Writes bytes at an offset of an object.
    Write {
        /// The object.
        oid: Oid,
        /// First byte written.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Writes bytes at the end of an object; the reply says at which offset.
    Append {
        /// The object.
        oid: Oid,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Sets an object's logical length.
    Truncate {
        /// The object.
        oid: Oid,
        /// The new length in bytes.
        length: u64,
    },
    /// Reads one attribute of an object.
    GetAttr {
        /// The object.
        oid: Oid,
        /// The attribute.
        attr: Attr,
    },
    /// Sets one attribute of an object.
    SetAttr {
        /// The object.
        oid: Oid,
        /// The attribute.
        attr: Attr,
        /// Its new value.
        value: AttrValue,
    },
    /// Lists a partition's object ids, `max` at a time.
    List {
        /// The partition.
        partition: PartitionId,
        /// Where to continue: 0 first, then the previous reply's continuation.
        token: u64,
        /// Most ids to return (the server caps it at 65,536).
        max: u32,
    },
    /// Makes written data durable: one object, a partition or the device.
    Flush {
        /// What to flush.
        scope: FlushScope,
    },
    /// Opens a transaction over objects of one partition; the reply carries its id.
    Begin {
        /// The partition.
        partition: PartitionId,
    },
    /// Commits a transaction this connection began: all of its commands, durably, or none.
    Commit {
        /// Its partition (the capability's).
        partition: PartitionId,
        /// The transaction.
        txn: TxnId,
    },
    /// Discards a transaction this connection began.
    Abort {
        /// Its partition (the capability's).
        partition: PartitionId,
        /// The transaction.
        txn: TxnId,
    },
    /// Adds an object command to a transaction this connection began; the capability is the
    /// one the command would need alone.
    TxnOp {
        /// The transaction.
        txn: TxnId,
        /// The command.
        op: TxnOp,
    },
}

/// The plain command a transaction's command stands for (its parameters and capability).
pub fn plain_command(op: &TxnOp) -> Command {
    match op.clone() {
        TxnOp::Create { partition, id } => Command::Create { partition, id },
        TxnOp::Remove { oid } => Command::Remove { oid },
        TxnOp::Write { oid, offset, data } => Command::Write { oid, offset, data },
        TxnOp::Truncate { oid, length } => Command::Truncate { oid, length },
        TxnOp::SetAttr { oid, attr, value } => Command::SetAttr { oid, attr, value },
    }
}

impl Command {
    /// The command's opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            Command::Hello { .. } => Opcode::Hello,
            Command::CreatePartition { .. } => Opcode::CreatePartition,
            Command::RemovePartition { .. } => Opcode::RemovePartition,
            Command::ListPartitions { .. } => Opcode::ListPartitions,
            Command::SetKeyVersion { .. } => Opcode::SetKeyVersion,
            Command::Describe => Opcode::Describe,
            Command::FormatOsd => Opcode::FormatOsd,
            Command::Create { .. } => Opcode::Create,
            Command::Remove { .. } => Opcode::Remove,
            Command::Read { .. } => Opcode::Read,
            Command::Write { .. } => Opcode::Write,
            Command::Append { .. } => Opcode::Append,
            Command::Truncate { .. } => Opcode::Truncate,
            Command::GetAttr { .. } => Opcode::GetAttr,
            Command::SetAttr { .. } => Opcode::SetAttr,
            Command::List { .. } => Opcode::List,
            Command::Flush { .. } => Opcode::Flush,
            Command::Begin { .. } => Opcode::Begin,
            Command::Commit { .. } => Opcode::Commit,
            Command::Abort { .. } => Opcode::Abort,
            Command::TxnOp { .. } => Opcode::TxnOp,
        }
    }
}

/// A request: its id (echoed in the reply, so replies may be pipelined) and its command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Chosen by the client; the reply carries it back.
    pub request_id: u64,
    /// The command.
    pub command: Command,
}

/// The security part of a decoded request: the capability and the integrity value, and how many
/// body bytes the integrity value covers (after the header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Security {
    /// The capability the request was sent under.
    pub capability: Capability,
    /// HMAC-SHA256 under the capability key over the header and the body before it.
    pub mac: [u8; MAC_LEN],
}

impl Security {
    /// Checks a request's or reply's integrity value: HMAC(key, header bytes + body without the
    /// trailing integrity value), in constant time.
    pub fn verify(key: &CapKey, header: &Header, body: &[u8]) -> bool {
        if body.len() < MAC_LEN {
            return false;
        }
        let (signed, mac) = body.split_at(body.len() - MAC_LEN);
        key.verify(&[&header.encode(), signed], mac)
    }
}

/// A decoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The request's id.
    pub request_id: u64,
    /// The command.
    pub command: Command,
    /// Capability and integrity value; `None` for an unsecured frame (HELLO).
    pub security: Option<Security>,
}

/// Status codes: 0 success; 1-0xff one per `osd::OsdError` variant; 0x1xx protocol errors;
/// 0x2xx security refusals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// `OsdError::NotFound`: no such partition or object.
    NotFound = 0x01,
    /// `OsdError::AlreadyExists`.
    AlreadyExists = 0x02,
    /// `OsdError::NoSpace`: the store is full.
    NoSpace = 0x03,
    /// `OsdError::InvalidArgument`.
    InvalidArgument = 0x04,
    /// `OsdError::ReadOnly`.
    ReadOnly = 0x05,
    /// `OsdError::Corrupted`: what the store read back does not decode or check.
    Corrupted = 0x06,
    /// `OsdError::Device` (or `Remote`): the device failed.
    Device = 0x07,
    /// `OsdError::Poisoned`: an earlier failure left the store refusing writes.
    Poisoned = 0x08,
    /// A unit read back did not match its checksum: its contents are lost, never returned.
    Uncorrectable = 0x09,
    /// An internal invariant of the target did not hold (a bug on the target).
    Internal = 0x0a,
    /// `OsdError::KeyRequired`: the object is encrypted and the target has no master key.
    KeyRequired = 0x0b,
    /// `OsdError::WrongKey`: the target's master key does not unwrap the object's data key.
    WrongKey = 0x0c,
    /// `OsdError::Transaction`: a transaction command was refused (no such transaction, too
    /// large, too many open, or a command a transaction cannot hold).
    Transaction = 0x0d,
    /// The frame's body could not be decoded.
    BadFrame = 0x100,
    /// The HELLO offered no version the target speaks, or a frame carries another version.
    UnsupportedVersion = 0x101,
    /// The header's opcode is not one of [`Opcode`].
    UnknownOpcode = 0x102,
    /// A frame or a requested length exceeds the limit.
    TooLong = 0x103,
    /// A command came before the HELLO exchange.
    HelloRequired = 0x104,
    /// The server is shutting down and takes no new commands.
    ShuttingDown = 0x105,
    /// The request carried no capability.
    NoCapability = 0x200,
    /// The integrity value does not match: the capability was forged or altered, or the request
    /// was altered.
    BadIntegrity = 0x201,
    /// The capability's expiry time has passed.
    Expired = 0x202,
    /// The capability is for another partition.
    WrongPartition = 0x203,
    /// The capability covers another object.
    WrongObject = 0x204,
    /// The capability does not allow this operation.
    OperationDenied = 0x205,
    /// The capability's key version is older than the partition's current one.
    Revoked = 0x206,
    /// The capability's key version is newer than the partition's current one.
    UnknownKeyVersion = 0x207,
    /// The request names an attribute or object the target reserves for itself.
    Reserved = 0x208,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 29] = [
        Status::Ok,
        Status::NotFound,
        Status::AlreadyExists,
        Status::NoSpace,
        Status::InvalidArgument,
        Status::ReadOnly,
        Status::Corrupted,
        Status::Device,
        Status::Poisoned,
        Status::Uncorrectable,
        Status::Internal,
        Status::KeyRequired,
        Status::WrongKey,
        Status::Transaction,
        Status::BadFrame,
        Status::UnsupportedVersion,
        Status::UnknownOpcode,
        Status::TooLong,
        Status::HelloRequired,
        Status::ShuttingDown,
        Status::NoCapability,
        Status::BadIntegrity,
        Status::Expired,
        Status::WrongPartition,
        Status::WrongObject,
        Status::OperationDenied,
        Status::Revoked,
        Status::UnknownKeyVersion,
        Status::Reserved,
    ];

    /// The status of a code, if it is one.
    pub fn from_code(code: u16) -> Option<Status> {
        Status::ALL.into_iter().find(|s| *s as u16 == code)
    }

    /// Whether it is a security refusal (0x2xx).
    pub fn is_security(self) -> bool {
        (self as u16) & 0xff00 == 0x200
    }

    /// The status of an object store error: one code per variant.
    pub fn of(e: &OsdError) -> Status {
        match e {
            OsdError::NotFound(_) => Status::NotFound,
            OsdError::AlreadyExists(_) => Status::AlreadyExists,
            OsdError::NoSpace { .. } => Status::NoSpace,
            OsdError::InvalidArgument(_) => Status::InvalidArgument,
            OsdError::ReadOnly(_) => Status::ReadOnly,
            OsdError::Corrupted { .. } => Status::Corrupted,
            OsdError::Device(_) | OsdError::Remote(_) => Status::Device,
            OsdError::Poisoned(_) => Status::Poisoned,
            OsdError::Uncorrectable { .. } => Status::Uncorrectable,
            OsdError::Internal(_) => Status::Internal,
            OsdError::KeyRequired(_) => Status::KeyRequired,
            OsdError::WrongKey(_) => Status::WrongKey,
            OsdError::Transaction(_) => Status::Transaction,
        }
    }
}

/// Why a command failed.
#[derive(Debug)]
pub enum Failure {
    /// The object store refused or failed it.
    Osd(OsdError),
    /// A protocol error or security refusal (status 0x1xx or 0x2xx) with a message.
    Refused {
        /// The status (0x1xx or 0x2xx).
        status: Status,
        /// What was wrong, for people.
        message: String,
    },
}

impl Failure {
    /// The status code the reply carries.
    pub fn status(&self) -> Status {
        match self {
            Failure::Osd(e) => Status::of(e),
            Failure::Refused { status, .. } => *status,
        }
    }

    /// A protocol error or security refusal with `status` and `message`.
    pub fn refused(status: Status, message: impl Into<String>) -> Failure {
        Failure::Refused {
            status,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Osd(e) => write!(f, "{e}"),
            Failure::Refused { status, message } => write!(f, "{status:?}: {message}"),
        }
    }
}

impl PartialEq for Failure {
    fn eq(&self, other: &Failure) -> bool {
        // OsdError has no PartialEq; its Debug form shows every field.
        format!("{self:?}") == format!("{other:?}")
    }
}

/// What a successful command returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyBody {
    /// HELLO: the version chosen and the target's frame limit.
    Hello {
        /// The protocol version the rest of the connection uses.
        version: u8,
        /// Largest frame body the target accepts, in bytes.
        max_frame_bytes: u32,
    },
    /// No result (REMOVE, WRITE, TRUNCATE, SET ATTRIBUTES, FLUSH, ...).
    Done,
    /// The id of the partition created.
    Partition(PartitionId),
    /// The id of the object created.
    Object(ObjectId),
    /// READ: the bytes (shorter than asked at the end of the object).
    Data(Vec<u8>),
    /// APPEND: the offset the data went to.
    Offset(u64),
    /// GET ATTRIBUTES: the value.
    Attr(AttrValue),
    /// DESCRIBE: the device's facts.
    Device(osd::DeviceInfo),
    /// BEGIN: the transaction's id.
    Txn(TxnId),
    /// A command taken into a transaction: the id of the object it creates, if it does.
    Taken(Option<ObjectId>),
    /// LIST and LIST PARTITIONS: ids and the continuation token.
    Ids {
        /// The ids, in order.
        ids: Vec<u64>,
        /// Where to continue; `None`: the listing is complete.
        next: Option<u64>,
    },
}

/// A reply to request `request_id`, which had opcode `opcode`.
#[derive(Debug, PartialEq)]
pub struct Reply {
    /// The request's id.
    pub request_id: u64,
    /// The request's opcode, as it came.
    pub opcode: u16,
    /// The result, or why the command failed.
    pub result: Result<ReplyBody, Failure>,
}

fn write_oid(w: &mut Writer, oid: Oid) {
    w.u64(oid.partition.0);
    w.u64(oid.object.0);
}

fn read_oid(r: &mut Reader<'_>) -> Result<Oid, ProtoError> {
    let p = r.u64("partition id")?;
    let o = r.u64("object id")?;
    Ok(Oid::new(p, o))
}

fn write_opt(w: &mut Writer, v: Option<u64>) {
    w.bool(v.is_some());
    w.u64(v.unwrap_or(0));
}

fn read_opt(r: &mut Reader<'_>, what: &'static str) -> Result<Option<u64>, ProtoError> {
    let present = r.bool(what)?;
    let v = r.u64(what)?;
    Ok(present.then_some(v))
}

/// Attribute: kind u8 (1..=11 and 13..=15 predefined, 12 user) and id u16 (user attribute id, else 0).
fn write_attr(w: &mut Writer, a: Attr) {
    let (kind, id) = match a {
        Attr::LogicalLength => (1, 0),
        Attr::UsedCapacity => (2, 0),
        Attr::CreatedTime => (3, 0),
        Attr::ModifiedTime => (4, 0),
        Attr::AccessedTime => (5, 0),
        Attr::AttrChangedTime => (6, 0),
        Attr::Priority => (7, 0),
        Attr::ExpectedSize => (8, 0),
        Attr::AccessPattern => (9, 0),
        Attr::ReadOnly => (10, 0),
        Attr::InodeEmbedded => (11, 0),
        Attr::User(id) => (12, id),
        Attr::Reliability => (13, 0),
        Attr::Encryption => (14, 0),
        Attr::Compression => (15, 0),
    };
    w.u8(kind);
    w.u16(id);
}

fn read_attr(r: &mut Reader<'_>) -> Result<Attr, ProtoError> {
    let at = r.offset();
    let kind = r.u8("attribute kind")?;
    let id = r.u16("attribute id")?;
    let a = match kind {
        1 => Attr::LogicalLength,
        2 => Attr::UsedCapacity,
        3 => Attr::CreatedTime,
        4 => Attr::ModifiedTime,
        5 => Attr::AccessedTime,
        6 => Attr::AttrChangedTime,
        7 => Attr::Priority,
        8 => Attr::ExpectedSize,
        9 => Attr::AccessPattern,
        10 => Attr::ReadOnly,
        11 => Attr::InodeEmbedded,
        12 => return Ok(Attr::User(id)),
        13 => Attr::Reliability,
        14 => Attr::Encryption,
        15 => Attr::Compression,
        k => {
            return Err(ProtoError::BadValue {
                what: "attribute kind",
                value: k as u64,
                offset: at,
            })
        }
    };
    if id != 0 {
        return Err(ProtoError::BadValue {
            what: "attribute id of a predefined attribute",
            value: id as u64,
            offset: at + 1,
        });
    }
    Ok(a)
}

/// Attribute value: tag u8 (0 u64, 1 bool, 2 access pattern, 3 bytes, 4 absent) and its payload.
fn write_value(w: &mut Writer, v: &AttrValue) {
    match v {
        AttrValue::U64(x) => {
            w.u8(0);
            w.u64(*x);
        }
        AttrValue::Bool(b) => {
            w.u8(1);
            w.bool(*b);
        }
        AttrValue::Pattern(p) => {
            w.u8(2);
            w.u8(match p {
                AccessPattern::Unknown => 0,
                AccessPattern::Sequential => 1,
                AccessPattern::Random => 2,
                AccessPattern::WriteOnce => 3,
            });
        }
        AttrValue::Bytes(b) => {
            w.u8(3);
            w.blob(b);
        }
        AttrValue::Absent => w.u8(4),
    }
}

fn read_value(r: &mut Reader<'_>) -> Result<AttrValue, ProtoError> {
    let at = r.offset();
    Ok(match r.u8("attribute value tag")? {
        0 => AttrValue::U64(r.u64("attribute value")?),
        1 => AttrValue::Bool(r.bool("attribute value")?),
        2 => {
            let at = r.offset();
            AttrValue::Pattern(match r.u8("access pattern")? {
                0 => AccessPattern::Unknown,
                1 => AccessPattern::Sequential,
                2 => AccessPattern::Random,
                3 => AccessPattern::WriteOnce,
                v => {
                    return Err(ProtoError::BadValue {
                        what: "access pattern",
                        value: v as u64,
                        offset: at,
                    })
                }
            })
        }
        3 => AttrValue::Bytes(r.blob("attribute bytes")?.to_vec()),
        4 => AttrValue::Absent,
        t => {
            return Err(ProtoError::BadValue {
                what: "attribute value tag",
                value: t as u64,
                offset: at,
            })
        }
    })
}

/// Flush scope: tag u8 (0 object + oid, 1 partition + id, 2 device).
fn write_scope(w: &mut Writer, s: FlushScope) {
    match s {
        FlushScope::Object(oid) => {
            w.u8(0);
            write_oid(w, oid);
        }
        FlushScope::Partition(p) => {
            w.u8(1);
            w.u64(p.0);
        }
        FlushScope::Device => w.u8(2),
    }
}

fn read_scope(r: &mut Reader<'_>) -> Result<FlushScope, ProtoError> {
    let at = r.offset();
    Ok(match r.u8("flush scope")? {
        0 => FlushScope::Object(read_oid(r)?),
        1 => FlushScope::Partition(PartitionId(r.u64("partition id")?)),
        2 => FlushScope::Device,
        t => {
            return Err(ProtoError::BadValue {
                what: "flush scope",
                value: t as u64,
                offset: at,
            })
        }
    })
}

fn write_params(w: &mut Writer, c: &Command) {
    match c {
        Command::Hello { versions } => {
            w.u8(versions.len().min(255) as u8);
            for v in versions.iter().take(255) {
                w.u8(*v);
            }
        }
        Command::CreatePartition { id } => write_opt(w, id.map(|p| p.0)),
        Command::RemovePartition { id } => w.u64(id.0),
        Command::ListPartitions { token, max } => {
            w.u64(*token);
            w.u32(*max);
        }
        Command::SetKeyVersion { partition, version } => {
            w.u64(partition.0);
            w.u32(*version);
        }
        Command::Create { partition, id } => {
            w.u64(partition.0);
            write_opt(w, id.map(|o| o.0));
        }
        Command::Describe | Command::FormatOsd => {}
        Command::Remove { oid } => write_oid(w, *oid),
        Command::Read {
            oid,
            offset,
            length,
        } => {
            write_oid(w, *oid);
            w.u64(*offset);
            w.u32(*length);
        }
        Command::Write { oid, offset, data } => {
            write_oid(w, *oid);
            w.u64(*offset);
            w.blob(data);
        }
        Command::Append { oid, data } => {
            write_oid(w, *oid);
            w.blob(data);
        }
        Command::Truncate { oid, length } => {
            write_oid(w, *oid);
            w.u64(*length);
        }
        Command::GetAttr { oid, attr } => {
            write_oid(w, *oid);
            write_attr(w, *attr);
        }
        Command::SetAttr { oid, attr, value } => {
            write_oid(w, *oid);
            write_attr(w, *attr);
            write_value(w, value);
        }
        Command::List {
            partition,
            token,
            max,
        } => {
            w.u64(partition.0);
            w.u64(*token);
            w.u32(*max);
        }
        Command::Flush { scope } => write_scope(w, *scope),
        Command::Begin { partition } => w.u64(partition.0),
        Command::Commit { partition, txn } | Command::Abort { partition, txn } => {
            w.u64(partition.0);
            w.u64(txn.0);
        }
        Command::TxnOp { txn, op } => {
            let c = plain_command(op);
            w.u64(txn.0);
            w.u16(c.opcode() as u16);
            write_params(w, &c);
        }
    }
}

fn read_params(op: Opcode, r: &mut Reader<'_>) -> Result<Command, ProtoError> {
    Ok(match op {
        Opcode::Hello => {
            let n = r.u8("version count")? as usize;
            Command::Hello {
                versions: r.bytes(n, "versions")?.to_vec(),
            }
        }
        Opcode::CreatePartition => Command::CreatePartition {
            id: read_opt(r, "partition id")?.map(PartitionId),
        },
        Opcode::RemovePartition => Command::RemovePartition {
            id: PartitionId(r.u64("partition id")?),
        },
        Opcode::ListPartitions => Command::ListPartitions {
            token: r.u64("list token")?,
            max: r.u32("list max")?,
        },
        Opcode::SetKeyVersion => Command::SetKeyVersion {
            partition: PartitionId(r.u64("partition id")?),
            version: r.u32("key version")?,
        },
        Opcode::Create => Command::Create {
            partition: PartitionId(r.u64("partition id")?),
            id: read_opt(r, "object id")?.map(ObjectId),
        },
        Opcode::Describe => Command::Describe,
        Opcode::FormatOsd => Command::FormatOsd,
        Opcode::Remove => Command::Remove { oid: read_oid(r)? },
        Opcode::Read => Command::Read {
            oid: read_oid(r)?,
            offset: r.u64("read offset")?,
            length: r.u32("read length")?,
        },
        Opcode::Write => Command::Write {
            oid: read_oid(r)?,
            offset: r.u64("write offset")?,
            data: r.blob("write data")?.to_vec(),
        },
        Opcode::Append => Command::Append {
            oid: read_oid(r)?,
            data: r.blob("append data")?.to_vec(),
        },
        Opcode::Truncate => Command::Truncate {
            oid: read_oid(r)?,
            length: r.u64("truncate length")?,
        },
        Opcode::GetAttr => Command::GetAttr {
            oid: read_oid(r)?,
            attr: read_attr(r)?,
        },
        Opcode::SetAttr => Command::SetAttr {
            oid: read_oid(r)?,
            attr: read_attr(r)?,
            value: read_value(r)?,
        },
        Opcode::List => Command::List {
            partition: PartitionId(r.u64("partition id")?),
            token: r.u64("list token")?,
            max: r.u32("list max")?,
        },
        Opcode::Flush => Command::Flush {
            scope: read_scope(r)?,
        },
        Opcode::Begin => Command::Begin {
            partition: PartitionId(r.u64("partition id")?),
        },
        Opcode::Commit => Command::Commit {
            partition: PartitionId(r.u64("partition id")?),
            txn: TxnId(r.u64("transaction id")?),
        },
        Opcode::Abort => Command::Abort {
            partition: PartitionId(r.u64("partition id")?),
            txn: TxnId(r.u64("transaction id")?),
        },
        Opcode::TxnOp => {
            let txn = TxnId(r.u64("transaction id")?);
            let at = r.offset();
            let code = r.u16("transaction command opcode")?;
            let bad = ProtoError::BadValue {
                what:
                    "transaction command opcode (CREATE, REMOVE, WRITE, TRUNCATE or SET ATTRIBUTES)",
                value: code as u64,
                offset: at,
            };
            // Checked before its parameters are read: a nested transaction command would
            // recurse as deep as the frame is long.
            let inner = match Opcode::from_code(code) {
                Ok(
                    o @ (Opcode::Create
                    | Opcode::Remove
                    | Opcode::Write
                    | Opcode::Truncate
                    | Opcode::SetAttr),
                ) => o,
                _ => return Err(bad),
            };
            let op = match read_params(inner, r)? {
                Command::Create { partition, id } => TxnOp::Create { partition, id },
                Command::Remove { oid } => TxnOp::Remove { oid },
                Command::Write { oid, offset, data } => TxnOp::Write { oid, offset, data },
                Command::Truncate { oid, length } => TxnOp::Truncate { oid, length },
                Command::SetAttr { oid, attr, value } => TxnOp::SetAttr { oid, attr, value },
                _ => {
                    return Err(ProtoError::Malformed {
                        what: "transaction command",
                        why: "not one of the five commands a transaction holds",
                    })
                }
            };
            Command::TxnOp { txn, op }
        }
    })
}

/// A writer with room for the header in front, sized for `payload_bytes` of data, so a large
/// WRITE or READ reply is copied into its frame once.
fn frame_writer(payload_bytes: usize) -> Writer {
    let mut w = Writer {
        buf: Vec::with_capacity(HEADER_LEN + CAPABILITY_LEN + 64 + payload_bytes + MAC_LEN),
    };
    w.buf.resize(HEADER_LEN, 0);
    w
}

/// Fills in the header in front of the body and appends the integrity value when keyed.
fn frame(mut header: Header, w: Writer, key: Option<&CapKey>) -> Vec<u8> {
    let mut out = w.buf;
    let body_len = out.len() - HEADER_LEN;
    if let Some(k) = key {
        header.flags |= FLAG_SECURED;
        header.body_len = (body_len + MAC_LEN) as u32;
        let head = header.encode();
        let mac = k.integrity(&[&head, &out[HEADER_LEN..]]);
        out[..HEADER_LEN].copy_from_slice(&head);
        out.extend_from_slice(&mac);
    } else {
        header.body_len = body_len as u32;
        out[..HEADER_LEN].copy_from_slice(&header.encode());
    }
    out
}

/// Encodes a request frame. With `credential` (a capability and its key) the body starts with
/// the capability and ends with the integrity value; HELLO is sent without one.
pub fn encode_request(
    version: u8,
    request: &Request,
    credential: Option<(&Capability, &CapKey)>,
) -> Vec<u8> {
    let payload = match &request.command {
        Command::Write { data, .. }
        | Command::Append { data, .. }
        | Command::TxnOp {
            op: TxnOp::Write { data, .. },
            ..
        } => data.len(),
        _ => 0,
    };
    let mut w = frame_writer(payload);
    if let Some((cap, _)) = credential {
        w.buf.extend_from_slice(&cap.encode());
    }
    write_params(&mut w, &request.command);
    let header = Header {
        version,
        flags: 0,
        opcode: request.command.opcode() as u16,
        request_id: request.request_id,
        body_len: 0,
    };
    frame(header, w, credential.map(|(_, k)| k))
}

/// Decodes a request body (the header decoded already). The integrity value is returned, not
/// checked: checking needs the capability key, which is the target's business.
pub fn decode_request(header: &Header, body: &[u8]) -> Result<Decoded, ProtoError> {
    if header.is_reply() {
        return Err(ProtoError::Malformed {
            what: "request",
            why: "the header's reply flag is set",
        });
    }
    if body.len() != header.body_len as usize {
        return Err(ProtoError::Malformed {
            what: "request body",
            why: "length differs from the header's body length",
        });
    }
    let op = Opcode::from_code(header.opcode)?;
    let (params, security) = if header.is_secured() {
        if body.len() < CAPABILITY_LEN + MAC_LEN {
            return Err(ProtoError::Truncated {
                what: "capability and integrity value",
                offset: 0,
                needed: CAPABILITY_LEN + MAC_LEN,
                have: body.len(),
            });
        }
        let mut r = Reader::new(&body[..CAPABILITY_LEN]);
        let capability = Capability::read(&mut r)?;
        let mac: [u8; MAC_LEN] =
            Reader::new(&body[body.len() - MAC_LEN..]).array("integrity value")?;
        (
            &body[CAPABILITY_LEN..body.len() - MAC_LEN],
            Some(Security { capability, mac }),
        )
    } else {
        (body, None)
    };
    let mut r = Reader::new(params);
    let command = read_params(op, &mut r)?;
    r.finish("request parameters")?;
    Ok(Decoded {
        request_id: header.request_id,
        command,
        security,
    })
}

fn write_failure(w: &mut Writer, f: &Failure) {
    w.u16(f.status() as u16);
    match f {
        Failure::Osd(e) => match e {
            OsdError::NotFound(s)
            | OsdError::AlreadyExists(s)
            | OsdError::InvalidArgument(s)
            | OsdError::Internal(s)
            | OsdError::Remote(s)
            | OsdError::Poisoned(s) => w.string(s),
            // Sent as its message ("device: ..."); it comes back as `OsdError::Remote`.
            OsdError::Device(_) => w.string(&e.to_string()),
            OsdError::NoSpace {
                needed_bytes,
                free_bytes,
            } => {
                w.u64(*needed_bytes);
                w.u64(*free_bytes);
            }
            OsdError::ReadOnly(oid) | OsdError::KeyRequired(oid) | OsdError::WrongKey(oid) => {
                write_oid(w, *oid)
            }
            // The typed unit stays on the target's side: the location names it in words.
            OsdError::Corrupted { what, location, .. }
            | OsdError::Uncorrectable { what, location, .. } => {
                w.string(what);
                w.string(location);
            }
            OsdError::Transaction(t) => write_txn_error(w, t),
        },
        Failure::Refused { message, .. } => w.string(message),
    }
}

fn read_failure(status: Status, r: &mut Reader<'_>) -> Result<Failure, ProtoError> {
    let s = |r: &mut Reader<'_>| r.string("error message");
    Ok(Failure::Osd(match status {
        Status::Ok => unreachable!("read_failure is called for failures"),
        Status::NotFound => OsdError::NotFound(s(r)?),
        Status::AlreadyExists => OsdError::AlreadyExists(s(r)?),
        Status::InvalidArgument => OsdError::InvalidArgument(s(r)?),
        // The target's typed device error does not cross the wire; its message does.
        Status::Device => OsdError::Remote(s(r)?),
        Status::Internal => OsdError::Internal(s(r)?),
        Status::Uncorrectable => OsdError::Uncorrectable {
            what: s(r)?,
            location: s(r)?,
            unit: None,
        },
        Status::Poisoned => OsdError::Poisoned(s(r)?),
        Status::NoSpace => OsdError::NoSpace {
            needed_bytes: r.u64("bytes needed")?,
            free_bytes: r.u64("bytes free")?,
        },
        Status::ReadOnly => OsdError::ReadOnly(read_oid(r)?),
        Status::KeyRequired => OsdError::KeyRequired(read_oid(r)?),
        Status::WrongKey => OsdError::WrongKey(read_oid(r)?),
        Status::Corrupted => OsdError::Corrupted {
            what: s(r)?,
            location: s(r)?,
            unit: None,
        },
        Status::Transaction => OsdError::Transaction(read_txn_error(r)?),
        other => {
            return Ok(Failure::Refused {
                status: other,
                message: s(r)?,
            })
        }
    }))
}

/// A transaction error: kind u8 (1 no such transaction + id; 2 too large + id, bytes needed,
/// limit; 3 too many open + limit; 4 unsupported + message).
fn write_txn_error(w: &mut Writer, t: &TxnError) {
    match t {
        TxnError::NotFound(id) => {
            w.u8(1);
            w.u64(id.0);
        }
        TxnError::TooLarge {
            txn,
            needed_bytes,
            limit_bytes,
        } => {
            w.u8(2);
            w.u64(txn.0);
            w.u64(*needed_bytes);
            w.u64(*limit_bytes);
        }
        TxnError::TooMany { limit } => {
            w.u8(3);
            w.u64(*limit);
        }
        TxnError::Unsupported(m) => {
            w.u8(4);
            w.string(m);
        }
    }
}

fn read_txn_error(r: &mut Reader<'_>) -> Result<TxnError, ProtoError> {
    let at = r.offset();
    Ok(match r.u8("transaction error kind")? {
        1 => TxnError::NotFound(TxnId(r.u64("transaction id")?)),
        2 => TxnError::TooLarge {
            txn: TxnId(r.u64("transaction id")?),
            needed_bytes: r.u64("log bytes needed")?,
            limit_bytes: r.u64("log bytes limit")?,
        },
        3 => TxnError::TooMany {
            limit: r.u64("open transactions limit")?,
        },
        4 => TxnError::Unsupported(r.string("error message")?),
        k => {
            return Err(ProtoError::BadValue {
                what: "transaction error kind",
                value: k as u64,
                offset: at,
            })
        }
    })
}

fn write_reply_body(w: &mut Writer, b: &ReplyBody) {
    match b {
        ReplyBody::Hello {
            version,
            max_frame_bytes,
        } => {
            w.u8(*version);
            w.u32(*max_frame_bytes);
        }
        ReplyBody::Done => {}
        ReplyBody::Partition(p) => w.u64(p.0),
        ReplyBody::Object(o) => w.u64(o.0),
        ReplyBody::Txn(t) => w.u64(t.0),
        ReplyBody::Taken(o) => write_opt(w, o.map(|o| o.0)),
        ReplyBody::Data(d) => w.blob(d),
        ReplyBody::Offset(o) => w.u64(*o),
        ReplyBody::Attr(v) => write_value(w, v),
        ReplyBody::Device(d) => {
            w.u32(d.unit_bytes);
            w.u64(d.capacity_bytes);
            w.u64(d.used_bytes);
            w.string(&d.placement);
        }
        ReplyBody::Ids { ids, next } => {
            w.u32(ids.len() as u32);
            for id in ids {
                w.u64(*id);
            }
            write_opt(w, *next);
        }
    }
}

fn read_reply_body(op: Opcode, r: &mut Reader<'_>) -> Result<ReplyBody, ProtoError> {
    Ok(match op {
        Opcode::Hello => ReplyBody::Hello {
            version: r.u8("chosen version")?,
            max_frame_bytes: r.u32("max frame bytes")?,
        },
        Opcode::CreatePartition => ReplyBody::Partition(PartitionId(r.u64("partition id")?)),
        Opcode::Create => ReplyBody::Object(ObjectId(r.u64("object id")?)),
        Opcode::Read => ReplyBody::Data(r.blob("read data")?.to_vec()),
        Opcode::Append => ReplyBody::Offset(r.u64("append offset")?),
        Opcode::GetAttr => ReplyBody::Attr(read_value(r)?),
        Opcode::Describe => ReplyBody::Device(osd::DeviceInfo {
            unit_bytes: r.u32("unit bytes")?,
            capacity_bytes: r.u64("capacity bytes")?,
            used_bytes: r.u64("used bytes")?,
            placement: r.string("placement")?,
        }),
        Opcode::List | Opcode::ListPartitions => {
            let n = r.u32("id count")? as usize;
            // Bounded by the bytes present, not by the count the peer claims.
            if n > r.remaining() / 8 {
                return Err(ProtoError::Truncated {
                    what: "ids",
                    offset: r.offset(),
                    needed: n.saturating_mul(8),
                    have: r.remaining(),
                });
            }
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(r.u64("id")?);
            }
            ReplyBody::Ids {
                ids,
                next: read_opt(r, "list continuation")?,
            }
        }
        Opcode::RemovePartition
        | Opcode::FormatOsd
        | Opcode::SetKeyVersion
        | Opcode::Remove
        | Opcode::Write
        | Opcode::Truncate
        | Opcode::SetAttr
        | Opcode::Flush
        | Opcode::Commit
        | Opcode::Abort => ReplyBody::Done,
        Opcode::Begin => ReplyBody::Txn(TxnId(r.u64("transaction id")?)),
        Opcode::TxnOp => ReplyBody::Taken(read_opt(r, "object id")?.map(ObjectId)),
    })
}

/// Encodes a reply frame; with `key` (the request's capability key) it ends with an integrity
/// value over the header and body.
pub fn encode_reply(version: u8, reply: &Reply, key: Option<&CapKey>) -> Vec<u8> {
    let payload = match &reply.result {
        Ok(ReplyBody::Data(d)) => d.len(),
        Ok(ReplyBody::Ids { ids, .. }) => ids.len() * 8,
        _ => 0,
    };
    let mut w = frame_writer(payload);
    match &reply.result {
        Ok(b) => {
            w.u16(Status::Ok as u16);
            write_reply_body(&mut w, b);
        }
        Err(f) => write_failure(&mut w, f),
    }
    let header = Header {
        version,
        flags: FLAG_REPLY,
        opcode: reply.opcode,
        request_id: reply.request_id,
        body_len: 0,
    };
    frame(header, w, key)
}

/// Decodes a reply body. A secured reply's integrity value is not checked here (see
/// [`Security::verify`]). Failures decode whatever the opcode; results need a known opcode.
pub fn decode_reply(header: &Header, body: &[u8]) -> Result<Reply, ProtoError> {
    if !header.is_reply() {
        return Err(ProtoError::Malformed {
            what: "reply",
            why: "the header's reply flag is clear",
        });
    }
    if body.len() != header.body_len as usize {
        return Err(ProtoError::Malformed {
            what: "reply body",
            why: "length differs from the header's body length",
        });
    }
    let payload = if header.is_secured() {
        if body.len() < MAC_LEN {
            return Err(ProtoError::Truncated {
                what: "reply integrity value",
                offset: 0,
                needed: MAC_LEN,
                have: body.len(),
            });
        }
        &body[..body.len() - MAC_LEN]
    } else {
        body
    };
    let mut r = Reader::new(payload);
    let at = r.offset();
    let code = r.u16("status")?;
    let status = Status::from_code(code).ok_or(ProtoError::BadValue {
        what: "status",
        value: code as u64,
        offset: at,
    })?;
    let result = if status == Status::Ok {
        Ok(read_reply_body(Opcode::from_code(header.opcode)?, &mut r)?)
    } else {
        Err(read_failure(status, &mut r)?)
    };
    r.finish("reply")?;
    Ok(Reply {
        request_id: header.request_id,
        opcode: header.opcode,
        result,
    })
}

#[cfg(test)]
mod tests;
