//! Which objects a unit's loss would cost: for a harness (crates/torture) that scopes the
//! contract it holds the store to after a destructive fault (issue 15 item 1). Pure decoding of
//! bytes already read, no flash command and no store state.

use super::*;

/// The objects whose data or metadata a write unit holds, from its OOB record and payload (the
/// unit's bytes, one unit long), if that can be told from the unit alone:
/// - a data unit: its object;
/// - a descriptor page: the object of every onode it holds, superseded ones included (until the
///   next checkpoint, recovery may still need an onode a later one replaced);
/// - a small-object page: the object of every entry, stale ones included.
///
/// `None` for anything else (index nodes, checkpoints, atime pages, parity units, transaction
/// records: what they cover depends on the tree or the log around them), and for a unit whose
/// record does not decode or whose payload does not match its checksum.
pub fn objects_in_unit(oob: &[u8], payload: &[u8]) -> Option<Vec<Oid>> {
    let sealed = Record::decode_sealed(oob).ok()??;
    if let Record::Data { oid, .. } = sealed.record {
        return Some(vec![oid]);
    }
    if flash::payload_crc(Payload::Bytes(payload)) != sealed.payload_crc {
        return None;
    }
    match sealed.record {
        Record::Descriptor { .. } => descriptor_objects(payload),
        Record::Small { .. } => small::decode_page(payload)
            .ok()
            .map(|entries| entries.into_iter().map(|(oid, _, _)| oid).collect()),
        _ => None,
    }
}

/// The object of every onode in a descriptor page image (`None` if it does not decode).
fn descriptor_objects(page: &[u8]) -> Option<Vec<Oid>> {
    let onodes = onodes::decode_desc_page(page).ok()?;
    Some(onodes.into_iter().map(|o| o.oid).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_names_no_objects() {
        assert_eq!(objects_in_unit(&[0u8; 64], &[0u8; 4096]), None);
        assert_eq!(objects_in_unit(&[0xFFu8; 64], &[0xFFu8; 4096]), None);
        assert_eq!(descriptor_objects(b"ODSC\x05\x00"), None);
        assert_eq!(descriptor_objects(b"XXXX\x00\x00"), None);
        assert_eq!(descriptor_objects(b"ODSC\x00\x00"), Some(vec![]));
    }
}
