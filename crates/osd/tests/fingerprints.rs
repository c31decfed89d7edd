//! Fingerprint-mode writes (the lab's `write_token`): a write past an object's end whose old
//! end lies inside a unit already on flash.

use flash::{preset, Nand};
use osd::{FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId};

const P: u64 = 0x10000;

/// The object's old end is inside unit 1, a fingerprint unit on flash; the write past it used to
/// zero the rest of that unit with bytes, and programming the zeros then refused the unit as
/// "bytes and fingerprint writes mixed in one unit" (`ossd run --stack ossd --device rawssd
/// --workload zipf --set workload.read_fraction=0.5 --set utilisation=0.8`).
#[test]
fn a_fingerprint_write_past_the_end_of_a_unit_on_flash() {
    let dev = preset("rawssd").unwrap();
    let mut s = ObjectStore::format(Nand::in_memory(dev).unwrap(), OsdConfig::default()).unwrap();
    let unit = s.unit_bytes() as u64;
    s.create_partition(Some(PartitionId(P))).unwrap();
    let oid = Oid::new(P, P + 1);
    s.create(PartitionId(P), Some(ObjectId(P + 1))).unwrap();
    // One and a half units, flushed: unit 1 is on flash, half of it the object's.
    s.write_token(oid, 0, unit + unit / 2, 7).unwrap();
    s.flush(FlushScope::Device).unwrap();
    // Past the end, leaving a gap inside unit 1; then whatever programs the buffer.
    s.write_token(oid, unit + 3 * unit / 4, 4096, 8).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.write_token(oid, 3 * unit, 4096, 9).unwrap();
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(
        s.get_attr(oid, osd::Attr::LogicalLength).unwrap(),
        osd::AttrValue::U64(3 * unit + 4096)
    );
    let mut fps = Vec::new();
    s.read_fingerprints(oid, 0, 3 * unit + 4096, &mut fps)
        .unwrap();
    assert_eq!(fps.len(), 4);
    assert!(
        fps.iter().enumerate().all(|(u, &f)| (f != 0) == (u != 2)),
        "{fps:?}"
    );
    assert!(s.fsck().unwrap().problems.is_empty());
}
