//! Object identity (T10 OSD): a 64-bit partition id and a 64-bit object id within it.

use std::fmt;

/// Ids below this are reserved, in partitions and objects alike (T10 OSD reserves them for
/// well-known objects).
pub const FIRST_USER_ID: u64 = 0x10000;

/// A partition's 64-bit id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(pub u64);

/// An object's 64-bit id within its partition (0 is the partition itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(pub u64);

/// A whole object address. Ordered by partition, then object, so a partition's objects are one
/// key range of the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Oid {
    /// The partition.
    pub partition: PartitionId,
    /// The object within it.
    pub object: ObjectId,
}

impl Oid {
    /// The address of `object` in `partition`.
    pub fn new(partition: u64, object: u64) -> Oid {
        Oid {
            partition: PartitionId(partition),
            object: ObjectId(object),
        }
    }

    /// The object that stands for a partition itself (object id 0).
    pub fn partition_root(p: PartitionId) -> Oid {
        Oid {
            partition: p,
            object: ObjectId(0),
        }
    }

    /// Whether this is the object standing for its partition (object id 0).
    pub fn is_partition_root(&self) -> bool {
        self.object.0 == 0
    }

    /// As one number, `partition << 64 | object` (the order of the index keys).
    pub fn as_u128(&self) -> u128 {
        (self.partition.0 as u128) << 64 | self.object.0 as u128
    }

    /// The inverse of [`Self::as_u128`].
    pub fn from_u128(v: u128) -> Oid {
        Oid::new((v >> 64) as u64, v as u64)
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}:{:#x}", self.partition.0, self.object.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u128_round_trip_keeps_order() {
        let a = Oid::new(1, u64::MAX);
        let b = Oid::new(2, 0);
        assert!(a < b && a.as_u128() < b.as_u128());
        assert_eq!(Oid::from_u128(a.as_u128()), a);
        assert_eq!(a.to_string(), "0x1:0xffffffffffffffff");
    }
}
