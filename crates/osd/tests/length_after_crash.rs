//! Regression: without a write buffer, a unit is programmed while its write is still filling,
//! before the onode's length grows; its data record carried the old length, so a crash before
//! the next onode reached flash brought the new bytes back with the old length. OFS keeps a
//! one-bucket directory as a short object rewritten whole: the bucket's header then named more
//! entry bytes than the object held, and the file system could not be mounted whole. Found by
//! `ossd torture --stack ofs` (seed 1261203858117736319).

use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{Attr, AttrValue, FlushScope, ObjectStore, Osd, OsdConfig, PartitionId};

#[test]
fn a_rolled_forward_unit_brings_its_write_length_back() {
    let dev = preset("tiny").unwrap();
    let cfg = || OsdConfig {
        buffer_bytes: 0,
        small_objects: false,
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(dev).unwrap(), cfg()).unwrap();
    let p = s.create_partition(None).unwrap();
    let o = s.create(p, None).unwrap();
    let oid = osd::Oid {
        partition: PartitionId(p.0),
        object: o,
    };
    s.write(oid, 0, &[1u8; 40]).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    // Grows the object within its first unit; the unit is programmed at once (no buffer), the
    // onode with the new length stays in memory.
    s.write(oid, 0, &[2u8; 54]).unwrap();
    let mut s = ObjectStore::open(s.crash(), cfg()).unwrap();
    let len = match s.get_attr(oid, Attr::LogicalLength).unwrap() {
        AttrValue::U64(n) => n,
        v => panic!("length reads {v:?}"),
    };
    let mut got = vec![0u8; len as usize];
    s.read(oid, 0, &mut got).unwrap();
    assert!(
        got == [1u8; 40] || got == [2u8; 54],
        "the write's bytes came back with length {len}: {got:?}"
    );
}
