//! What each command requires of a capability, and the check of a capability against it. Pure:
//! the target (`server`) adds the integrity check, the clock and the partition's current key
//! version; the client uses the same table to pick or mint a capability.

use osd::{Attr, FlushScope, ObjectId, PartitionId};

use crate::cap::{CapObject, Capability, Ops};
use crate::msg::{Command, Status};

/// What a command needs: a capability of this partition (`Capability::DEVICE` for device-level
/// commands) covering this object (`None`: the capability must cover all objects) with these
/// operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The partition the capability must be for (`Capability::DEVICE` for device-level commands).
    pub partition: PartitionId,
    /// The object it must cover; `None`: it must cover every object of the partition.
    pub object: Option<ObjectId>,
    /// Operations it must allow.
    pub ops: Ops,
}

impl Requirement {
    /// The requirement of a command; `None` for HELLO, which needs no capability.
    pub fn of(c: &Command) -> Option<Requirement> {
        let device = |ops| Requirement {
            partition: Capability::DEVICE,
            object: None,
            ops,
        };
        let partition = |p, ops| Requirement {
            partition: p,
            object: None,
            ops,
        };
        let object = |oid: osd::Oid, ops| Requirement {
            partition: oid.partition,
            object: Some(oid.object),
            ops,
        };
        Some(match c {
            Command::Hello { .. } => return None,
            Command::CreatePartition { .. } => device(Ops::PARTITION_ADMIN),
            Command::ListPartitions { .. } => device(Ops::LIST),
            Command::Describe => device(Ops::GET_ATTR),
            Command::FormatOsd => device(Ops::PARTITION_ADMIN),
            Command::RemovePartition { id } => partition(*id, Ops::PARTITION_ADMIN),
            Command::SetKeyVersion { partition: p, .. } => partition(*p, Ops::PARTITION_ADMIN),
            Command::Create { partition: p, id } => Requirement {
                partition: *p,
                object: *id,
                ops: Ops::CREATE,
            },
            Command::Remove { oid } => object(*oid, Ops::REMOVE),
            Command::Read { oid, .. } => object(*oid, Ops::READ),
            Command::Write { oid, .. }
            | Command::Append { oid, .. }
            | Command::Truncate { oid, .. } => object(*oid, Ops::WRITE),
            Command::GetAttr { oid, .. } => object(*oid, Ops::GET_ATTR),
            // Setting the logical length truncates: it needs the right to write as well.
            Command::SetAttr { oid, attr, .. } => object(
                *oid,
                if *attr == Attr::LogicalLength {
                    Ops::SET_ATTR.union(Ops::WRITE)
                } else {
                    Ops::SET_ATTR
                },
            ),
            Command::List { partition: p, .. } => partition(*p, Ops::LIST),
            // A transaction is bound to one partition: opening, committing and aborting it
            // need the right to write there; each command in it needs what it needs alone.
            Command::Begin { partition: p }
            | Command::Commit { partition: p, .. }
            | Command::Abort { partition: p, .. } => partition(*p, Ops::WRITE),
            Command::TxnOp { op, .. } => return Requirement::of(&crate::msg::plain_command(op)),
            Command::Flush { scope } => match scope {
                FlushScope::Object(oid) => object(*oid, Ops::FLUSH),
                FlushScope::Partition(p) => partition(*p, Ops::FLUSH),
                FlushScope::Device => device(Ops::FLUSH),
            },
        })
    }

    /// Checks a capability's scope and operations against the requirement (not its integrity,
    /// expiry or key version): `WrongPartition`, `WrongObject` or `OperationDenied`.
    pub fn check(&self, cap: &Capability) -> Result<(), (Status, String)> {
        if cap.partition != self.partition {
            return Err((
                Status::WrongPartition,
                format!(
                    "capability for partition {:#x}, request for {:#x}",
                    cap.partition.0, self.partition.0
                ),
            ));
        }
        match (cap.object, self.object) {
            (CapObject::All, _) => {}
            (CapObject::One(have), Some(want)) if have == want => {}
            (CapObject::One(have), want) => {
                return Err((
                    Status::WrongObject,
                    match want {
                        Some(w) => format!(
                            "capability for object {:#x}, request for {:#x}",
                            have.0, w.0
                        ),
                        None => format!(
                        "capability for object {:#x}, request needs all objects of the partition",
                        have.0
                    ),
                    },
                ))
            }
        }
        if !cap.ops.contains(self.ops) {
            return Err((
                Status::OperationDenied,
                format!(
                    "capability allows {}, request needs {}",
                    if cap.ops.0 == 0 {
                        "nothing".into()
                    } else {
                        cap.ops.names()
                    },
                    self.ops.names()
                ),
            ));
        }
        Ok(())
    }

    /// Whether a capability satisfies the requirement.
    pub fn allows(&self, cap: &Capability) -> bool {
        self.check(cap).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osd::Oid;

    #[test]
    fn scope_and_operations_are_checked() {
        let oid = Oid::new(0x10000, 0x20000);
        let read = Requirement::of(&Command::Read {
            oid,
            offset: 0,
            length: 1,
        })
        .unwrap();
        let cap = Capability {
            partition: PartitionId(0x10000),
            object: CapObject::One(ObjectId(0x20000)),
            ops: Ops::READ,
            key_version: 0,
            expires_unix_s: 0,
        };
        assert_eq!(read.check(&cap), Ok(()));
        let other = Capability {
            object: CapObject::One(ObjectId(0x20001)),
            ..cap
        };
        assert_eq!(read.check(&other).unwrap_err().0, Status::WrongObject);
        let elsewhere = Capability {
            partition: PartitionId(0x10001),
            ..cap
        };
        assert_eq!(
            read.check(&elsewhere).unwrap_err().0,
            Status::WrongPartition
        );
        let write = Requirement::of(&Command::Write {
            oid,
            offset: 0,
            data: vec![],
        })
        .unwrap();
        assert_eq!(write.check(&cap).unwrap_err().0, Status::OperationDenied);
        let list = Requirement::of(&Command::List {
            partition: PartitionId(0x10000),
            token: 0,
            max: 1,
        })
        .unwrap();
        assert_eq!(
            list.check(&Capability {
                ops: Ops::ALL,
                ..cap
            })
            .unwrap_err()
            .0,
            Status::WrongObject
        );
        assert_eq!(
            list.check(&Capability {
                ops: Ops::LIST,
                object: CapObject::All,
                ..cap
            }),
            Ok(())
        );
        let mkpart = Requirement::of(&Command::CreatePartition { id: None }).unwrap();
        assert_eq!(mkpart.partition, Capability::DEVICE);
        assert!(Requirement::of(&Command::Hello { versions: vec![1] }).is_none());
    }
}
