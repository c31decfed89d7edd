//! A torn program whose record reads back whole over a wrong payload (docs/RELIABILITY.md,
//! finding 38): recovery passes the host's newest data unit over when its payload fails its
//! checksum, so the object keeps its flushed bytes, and keeps them after newer writes and
//! another crash. Found by `ossd torture --stack osd --faults power-cut,garbled-payload`.

use flash::fault::{CutMode, Faulty};
use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{FlushScope, ObjectStore, Osd, OsdConfig, PartitionId};

#[test]
fn a_torn_data_unit_with_a_whole_record_is_passed_over_for_good() {
    let dev = preset("tiny").unwrap();
    let cfg = || OsdConfig {
        buffer_bytes: 0,
        small_objects: false,
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Faulty::new(Nand::in_memory(dev).unwrap()), cfg()).unwrap();
    let unit = dev.geometry.page_size_bytes as usize;
    let p = s.create_partition(None).unwrap();
    let o = s.create(p, None).unwrap();
    let oid = osd::Oid {
        partition: PartitionId(p.0),
        object: o,
    };
    s.write(oid, 0, &vec![1u8; 4 * unit]).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    // The rewrite of unit 1 is torn at its program (no buffer: programmed at once): its record
    // reads back whole, its payload does not.
    s.device_mut().cut_power_after(0, CutMode::GarbledPayload);
    assert!(s.write(oid, unit as u64, &vec![2u8; unit]).is_err());
    let mut dev = s.crash();
    assert!(dev.counts().garbled_programs > 0, "the cut tore a program");
    dev.restore_power();
    let mut s = ObjectStore::open(dev, cfg()).unwrap();
    assert_eq!(s.recovery().torn_units, 1, "{:?}", s.recovery());
    let read = |s: &mut ObjectStore<Faulty<Nand>>| {
        let mut got = vec![0u8; 4 * unit];
        s.read(oid, 0, &mut got).map(|_| got)
    };
    assert_eq!(
        read(&mut s).unwrap(),
        vec![1u8; 4 * unit],
        "the flushed bytes"
    );
    let report = s.fsck().unwrap();
    assert!(
        report.problems.is_empty() && report.damaged.is_empty(),
        "{report:?}"
    );
    // Newer units and another crash: the torn unit must not come back.
    s.write(oid, 3 * unit as u64, &vec![3u8; unit]).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let mut s = ObjectStore::open(s.crash(), cfg()).unwrap();
    let mut want = vec![1u8; 4 * unit];
    want[3 * unit..].fill(3);
    assert_eq!(read(&mut s).unwrap(), want, "still the flushed bytes");
}
