//! Bytes read from flash are untrusted: an image whose pages were damaged at random (OOB records,
//! descriptor pages, index nodes, the checkpoint, data) must open with an error or open and
//! answer with errors, never panic.

use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use flash::image::ImageStore;
use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{Attr, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;

fn config() -> OsdConfig {
    OsdConfig {
        checkpoint_units: 64,
        fml: FmlConfig::for_blocks(32),
        ..OsdConfig::default()
    }
}

/// Opens the image and touches everything; returns whether it opened.
fn exercise(path: &std::path::Path) -> bool {
    let Ok((dev, store)) = ImageStore::open(path) else {
        return false;
    };
    let Ok(nand) = Nand::open(dev, store) else {
        return false;
    };
    let Ok(mut s) = ObjectStore::open(nand, config()) else {
        return false;
    };
    let _ = s.fsck();
    if let Ok((ids, _)) = s.list(PartitionId(P), 0, 1000) {
        for id in ids {
            let oid = Oid {
                partition: PartitionId(P),
                object: id,
            };
            let _ = s.get_attr(oid, Attr::LogicalLength);
            let mut buf = vec![0u8; 70_000];
            let _ = s.read(oid, 0, &mut buf);
            let _ = s.write(oid, 10, b"after damage");
        }
    }
    let _ = s.flush(FlushScope::Device);
    true
}

#[test]
fn damaged_images_never_panic() {
    let dir = std::env::temp_dir().join(format!("ossd-corrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let clean = dir.join("clean.img");
    let dev = preset("tiny").unwrap();
    {
        let nand = Nand::open(dev, ImageStore::create(&clean, &dev).unwrap()).unwrap();
        let mut s = ObjectStore::format(nand, config()).unwrap();
        s.create_partition(Some(PartitionId(P))).unwrap();
        for k in 0..40u64 {
            s.create(PartitionId(P), Some(ObjectId(P + k))).unwrap();
            let data: Vec<u8> = (0..(k * 1500) as usize)
                .map(|i| (i as u8) ^ (k as u8))
                .collect();
            s.write(Oid::new(P, P + k), 0, &data).unwrap();
        }
        s.flush(FlushScope::Device).unwrap();
        s.close().unwrap();
    }
    // The programmed page slots (docs/FORMAT.md, "Device image"): a slot whose epoch is not 0.
    let g = dev.geometry;
    let page_area = (4096 + 16 * g.blocks() as u64).next_multiple_of(4096);
    let slot = 16 + g.oob_size_bytes as u64 + g.page_size_bytes as u64;
    let image = std::fs::read(&clean).unwrap();
    let programmed: Vec<u64> = (0..g.pages())
        .map(|i| page_area + i * slot)
        .filter(|&at| image[at as usize..at as usize + 4] != [0, 0, 0, 0])
        .collect();
    assert!(
        programmed.len() > 50,
        "only {} pages programmed",
        programmed.len()
    );
    let mut opened = 0;
    for seed in 0..200u64 {
        let path = dir.join("damaged.img");
        std::fs::copy(&clean, &path).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..rng.gen_range(1..20) {
            let at = programmed[rng.gen_range(0..programmed.len())];
            // Mostly the slot header and the OOB record, sometimes the page bytes.
            let off = if rng.gen_bool(0.7) {
                rng.gen_range(0..16 + g.oob_size_bytes as u64)
            } else {
                rng.gen_range(0..slot)
            };
            f.write_all_at(&[rng.gen()], at + off).unwrap();
        }
        drop(f);
        match catch_unwind(AssertUnwindSafe(|| exercise(&path))) {
            Ok(true) => opened += 1,
            Ok(false) => {}
            Err(_) => panic!("seed {seed}: the store panicked on a damaged image"),
        }
    }
    println!("{opened} of 200 damaged images opened (the rest were refused with an error)");
    std::fs::remove_dir_all(&dir).unwrap();
}
