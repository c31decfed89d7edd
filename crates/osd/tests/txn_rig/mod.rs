//! What the transaction tests share: the object commands they draw or script, and how one
//! becomes a command inside a transaction.

use osd::{Attr, AttrValue, ObjectId, Oid, PartitionId, TxnOp};

/// The partition every transaction test works in.
pub const P: u64 = 0x10000;
/// The user attribute the tests set and clear.
pub const TAG: Attr = Attr::User(0x1001);

/// One object command, in a transaction or alone (objects are numbered from 0 in `P`).
#[derive(Clone, Debug)]
pub enum Op {
    Create(u64),
    Remove(u64),
    /// Object, offset, length, seed of the bytes.
    Write(u64, u64, u64, u8),
    Truncate(u64, u64),
    /// Set (`Some`) or clear the tag.
    Tag(u64, Option<u8>),
    ReadOnly(u64, bool),
}

/// Object `o` of the partition.
pub fn oid(o: u64) -> Oid {
    Oid::new(P, P + o)
}

/// The tag's value as a test writes it: `len` copies of the byte.
pub fn tag_value(t: Option<u8>, len: usize) -> AttrValue {
    t.map_or(AttrValue::Absent, |t| AttrValue::Bytes(vec![t; len]))
}

/// `op` as a command inside a transaction; `bytes` makes a write's data from its seed and
/// length, `tag_len` is the tag's length.
pub fn txn_op(op: &Op, bytes: fn(u8, u64) -> Vec<u8>, tag_len: usize) -> TxnOp {
    match *op {
        Op::Create(o) => TxnOp::Create {
            partition: PartitionId(P),
            id: Some(ObjectId(P + o)),
        },
        Op::Remove(o) => TxnOp::Remove { oid: oid(o) },
        Op::Write(o, off, len, seed) => TxnOp::Write {
            oid: oid(o),
            offset: off,
            data: bytes(seed, len),
        },
        Op::Truncate(o, length) => TxnOp::Truncate {
            oid: oid(o),
            length,
        },
        Op::Tag(o, t) => TxnOp::SetAttr {
            oid: oid(o),
            attr: TAG,
            value: tag_value(t, tag_len),
        },
        Op::ReadOnly(o, b) => TxnOp::SetAttr {
            oid: oid(o),
            attr: Attr::ReadOnly,
            value: AttrValue::Bool(b),
        },
    }
}
