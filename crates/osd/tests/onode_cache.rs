//! The onode cache and removals as OSCM-11 has them (issue 19 item 5): a REMOVE writes its
//! tombstone, not the whole write buffer, and a cache smaller than the objects in use writes
//! dirty onodes back when it evicts them, so it stays within its size.

use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError, PartitionId,
};

const P: u64 = 0x10000;

fn cfg(onode_cache_entries: usize) -> OsdConfig {
    let dev = preset("tiny").unwrap();
    OsdConfig {
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        buffer_bytes: 64 << 10,
        onode_cache_entries,
        ..OsdConfig::default()
    }
}

fn store(onode_cache_entries: usize) -> ObjectStore<Nand> {
    let dev = preset("tiny").unwrap();
    let mut s =
        ObjectStore::format(Nand::in_memory(dev).unwrap(), cfg(onode_cache_entries)).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s
}

fn oid(k: u64) -> Oid {
    Oid {
        partition: PartitionId(P),
        object: ObjectId(P + k),
    }
}

#[test]
fn a_remove_writes_its_tombstone_and_leaves_other_buffered_data_buffered() {
    let mut s = store(1024);
    s.create(PartitionId(P), Some(oid(1).object)).unwrap();
    s.create(PartitionId(P), Some(oid(2).object)).unwrap();
    s.flush(FlushScope::Device).unwrap();
    // Object 1's write stays in the write buffer.
    s.write(oid(1), 0, &[7u8; 4096]).unwrap();
    let before = s.stats();
    s.remove(oid(2)).unwrap();
    let after = s.stats();
    assert_eq!(
        after.data_units_written, before.data_units_written,
        "the remove programmed buffered data of another object"
    );
    assert_eq!(
        after.descriptor_pages_written,
        before.descriptor_pages_written + 1,
        "a remove writes one descriptor page: its tombstone"
    );
    // The tombstone is durable at once (the contract asks for the next flush): after a power
    // cut the object stays removed, and object 1, created and flushed, is still there.
    let mut s = ObjectStore::open(s.crash(), cfg(1024)).unwrap();
    assert!(matches!(
        s.get_attr(oid(2), Attr::LogicalLength),
        Err(OsdError::NotFound(_))
    ));
    assert!(s.get_attr(oid(1), Attr::LogicalLength).is_ok());
    assert!(s.fsck().unwrap().problems.is_empty());
}

#[test]
fn a_small_cache_writes_dirty_onodes_back_and_loses_none() {
    let cache = 8;
    let mut s = store(cache);
    let n = 200;
    for k in 0..n {
        s.create(PartitionId(P), Some(oid(k).object)).unwrap();
        s.set_attr(
            oid(k),
            Attr::User(0x1000),
            AttrValue::Bytes(k.to_le_bytes().to_vec()),
        )
        .unwrap();
    }
    // No flush yet: every descriptor page so far was written by an eviction.
    let written = s.stats().descriptor_pages_written;
    assert!(
        written >= (n - cache as u64) / 20,
        "{written} descriptor pages for {n} onodes through a cache of {cache}"
    );
    s.flush(FlushScope::Device).unwrap();
    // Every onode reads back, through the cache, after a power cut.
    let mut s = ObjectStore::open(s.crash(), cfg(cache)).unwrap();
    for k in 0..n {
        assert_eq!(
            s.get_attr(oid(k), Attr::User(0x1000)).unwrap(),
            AttrValue::Bytes(k.to_le_bytes().to_vec()),
            "object {k}"
        );
    }
    assert!(s.fsck().unwrap().problems.is_empty());
}
