//! Reopen times of a 4 GiB image holding 100,000 objects, after a clean shutdown and after a
//! power cut. A measurement, not a check: run it with
//! `cargo test --release -p osd --test reopen -- --ignored --nocapture` and copy the figures into
//! docs/PERFORMANCE.md.

use std::time::Instant;

use flash::image::ImageStore;
use flash::{preset, Nand};
use osd::{FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId};

const P: u64 = 0x10000;

fn open(path: &std::path::Path) -> (ObjectStore<Nand<ImageStore>>, f64) {
    let t = Instant::now();
    let (dev, store) = ImageStore::open(path).unwrap();
    let s = ObjectStore::open(Nand::open(dev, store).unwrap(), OsdConfig::default()).unwrap();
    (s, t.elapsed().as_secs_f64())
}

#[test]
#[ignore = "a measurement for docs/PERFORMANCE.md (about a minute)"]
fn reopen_a_4gib_image_with_100k_objects() {
    let path = std::env::temp_dir().join(format!("ossd-reopen-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let dev = preset("rawssd").unwrap();
    let nand = Nand::open(dev, ImageStore::create(&path, &dev).unwrap()).unwrap();
    let mut s = ObjectStore::format(nand, OsdConfig::default()).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    let t = Instant::now();
    for k in 0..100_000u64 {
        let oid = Oid::new(P, P + k);
        s.create(PartitionId(P), Some(ObjectId(P + k))).unwrap();
        s.write_token(oid, 0, 16 << 10, k).unwrap();
        if k % 10_000 == 9_999 {
            s.flush(FlushScope::Device).unwrap();
        }
    }
    let fill = t.elapsed().as_secs_f64();
    s.close().unwrap();
    let (mut s, clean) = open(&path);
    let clean_virtual = s.recovery().done_ns;
    let scanned = s.recovery().units_scanned;
    // 2,000 more objects after the last checkpoint, flushed, then power is cut.
    for k in 100_000..102_000u64 {
        s.create(PartitionId(P), Some(ObjectId(P + k))).unwrap();
        s.write_token(Oid::new(P, P + k), 0, 16 << 10, k).unwrap();
    }
    s.flush(FlushScope::Device).unwrap();
    drop(s.crash());
    let (mut s, crashed) = open(&path);
    let r = s.recovery();
    let (objects, _) = s.list(PartitionId(P), 0, 200_000).unwrap();
    assert_eq!(objects.len(), 102_000);
    println!("fill 100,000 objects: {fill:.1} s wall");
    println!(
        "clean reopen: {clean:.2} s wall, {:.3} s virtual, {scanned} units scanned",
        clean_virtual as f64 / 1e9
    );
    println!(
        "reopen after power cut: {crashed:.2} s wall, {:.3} s virtual, {} units scanned, {} records rolled forward",
        r.done_ns as f64 / 1e9,
        r.units_scanned,
        r.records_rolled_forward
    );
    std::fs::remove_file(&path).unwrap();
}
