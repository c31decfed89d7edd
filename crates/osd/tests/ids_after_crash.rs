//! Regression: after a power cut, `create` with no id returned `AlreadyExists` for objects
//! created (and flushed) after the last checkpoint, because the id counter came from the
//! checkpoint alone. Found by the S3 face's key-directory model test (crates/s3/tests/model.rs).

use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{FlushScope, ObjectStore, Osd, OsdConfig, PartitionId};

#[test]
fn assigned_ids_skip_objects_rolled_forward() {
    let dev = preset("tiny").unwrap();
    let cfg = || OsdConfig {
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(dev).unwrap(), cfg()).unwrap();
    let p = s.create_partition(None).unwrap();
    s.checkpoint().unwrap();
    let before: Vec<_> = (0..3).map(|_| s.create(p, None).unwrap()).collect();
    s.flush(FlushScope::Device).unwrap();
    let mut s = ObjectStore::open(s.crash(), cfg()).unwrap();
    let after = s.create(p, None).unwrap();
    assert!(!before.contains(&after), "{after:?} was handed out twice");
    assert!(s.create(PartitionId(p.0), None).is_ok());
}
