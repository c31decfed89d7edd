//! The FTL on a device image file: data survives closing the file and reopening it (the map is
//! rebuilt from the checkpoint and the OOB records), and after a "crash" (dropping the FTL
//! without a checkpoint) everything flushed is still there.

use flash::image::ImageStore;
use flash::{preset, Nand};
use fml::FmlConfig;
use ftl::{Data, Ftl, FtlConfig, ReadOut};

fn open(path: &std::path::Path) -> Ftl<Nand<ImageStore>> {
    let (cfg, store) = ImageStore::open(path).unwrap();
    let nand = Nand::open(cfg, store).unwrap();
    Ftl::open(nand, ftl_config()).unwrap()
}

fn ftl_config() -> FtlConfig {
    FtlConfig {
        fml: FmlConfig::for_blocks(32),
        buffer_bytes: 64 << 10,
        ..FtlConfig::default()
    }
}

fn pattern(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i as usize * 31 + j * 7 % 251) as u8)
        .collect()
}

#[test]
fn ftl_on_an_image_survives_reopen_and_crash() {
    let path = std::env::temp_dir().join(format!("ossd-ftl-image-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = preset("tiny").unwrap();
    let nand = Nand::open(cfg, ImageStore::create(&path, &cfg).unwrap()).unwrap();
    let mut ftl = Ftl::open(nand, ftl_config()).unwrap();
    let cap = ftl.capacity_bytes();
    // Several overwrites of a quarter of the space, so GC runs, then a trim and a clean close.
    let chunk = 16 * 1024u64;
    let slots = cap / 4 / chunk;
    let mut t = 0;
    let mut last = vec![0u64; slots as usize];
    for round in 1..=12u64 {
        for s in 0..slots {
            let v = round * 1000 + s;
            t = ftl
                .write(
                    t,
                    s * chunk,
                    chunk,
                    Data::Bytes(&pattern(v, chunk as usize)),
                )
                .unwrap();
            last[s as usize] = v;
        }
    }
    t = ftl.trim(t, 0, chunk).unwrap();
    ftl.close(t).unwrap();

    let mut ftl = open(&path);
    let mut buf = vec![0u8; chunk as usize];
    ftl.read(0, 0, chunk, ReadOut::Bytes(&mut buf)).unwrap();
    assert!(
        buf.iter().all(|&b| b == 0),
        "trimmed range reads zero after a clean reopen"
    );
    for s in 1..slots {
        ftl.read(0, s * chunk, chunk, ReadOut::Bytes(&mut buf))
            .unwrap();
        assert_eq!(
            buf,
            pattern(last[s as usize], chunk as usize),
            "slot {s} after reopen"
        );
    }
    ftl.check().unwrap();

    // Flushed writes survive a crash: drop the FTL without a checkpoint, reopen the file.
    let t = ftl
        .write(0, chunk, chunk, Data::Bytes(&pattern(7, chunk as usize)))
        .unwrap();
    ftl.flush(t).unwrap();
    drop(ftl.crash());
    let mut ftl = open(&path);
    ftl.read(0, chunk, chunk, ReadOut::Bytes(&mut buf)).unwrap();
    assert_eq!(buf, pattern(7, chunk as usize));
    assert!(ftl.recovery().checkpoint_seq.is_some());
    assert!(ftl.recovery().rolled_forward >= 1);
    ftl.check().unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// Issue 16: a bit flipped in a data page of the image is an uncorrectable read naming the
/// logical page, never wrong bytes; the other pages read back whole.
#[test]
fn a_flipped_data_bit_is_a_checksum_error() {
    use std::os::unix::fs::FileExt;
    let path = std::env::temp_dir().join(format!("ossd-ftl-flip-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = preset("tiny").unwrap();
    let nand = Nand::open(cfg, ImageStore::create(&path, &cfg).unwrap()).unwrap();
    let mut ftl = Ftl::open(nand, ftl_config()).unwrap();
    let unit = ftl.unit_bytes() as u64;
    let t = ftl
        .write(0, 0, 8 * unit, Data::Bytes(&pattern(5, 8 * unit as usize)))
        .unwrap();
    ftl.close(t).unwrap();
    // Find the slot holding logical page 3 (docs/FORMAT.md: record kind 1, key at bytes 2..6).
    let g = cfg.geometry;
    let page_area = (4096 + 16 * g.blocks() as u64).next_multiple_of(4096);
    let slot = 16 + g.oob_size_bytes as u64 + g.page_size_bytes as u64;
    let image = std::fs::read(&path).unwrap();
    let at = (0..g.pages())
        .map(|i| page_area + i * slot)
        .find(|&at| {
            let oob = &image[(at + 16) as usize..(at + 16) as usize + ftl::oob::RECORD_BYTES];
            matches!(ftl::oob::Record::decode(oob),
                Ok(Some(r)) if r.kind == ftl::oob::Kind::Data && r.key == 3)
        })
        .expect("logical page 3 is on flash");
    let byte = at + 16 + g.oob_size_bytes as u64 + 100;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[image[byte as usize] ^ 1], byte).unwrap();
    drop(f);
    let mut ftl = open(&path);
    let mut buf = vec![0u8; unit as usize];
    match ftl.read(0, 3 * unit, unit, ReadOut::Bytes(&mut buf)) {
        Err(ftl::FtlError::Checksum { lpn: 3, .. }) => {}
        other => panic!("read of the damaged page: {other:?}"),
    }
    let want = pattern(5, 8 * unit as usize);
    for lpn in [0u64, 2, 4, 7] {
        ftl.read(0, lpn * unit, unit, ReadOut::Bytes(&mut buf))
            .unwrap();
        assert!(
            buf[..] == want[(lpn * unit) as usize..((lpn + 1) * unit) as usize],
            "page {lpn}"
        );
    }
    std::fs::remove_file(&path).unwrap();
}

/// A device holding only records of version 1 (before payload checksums) is refused by name,
/// not opened as an empty FTL.
#[test]
fn version_1_records_are_refused() {
    use flash::{Flash, Payload, ProgramOp};
    let cfg = preset("tiny").unwrap();
    let mut nand = Nand::in_memory(cfg).unwrap();
    // Version 1: kind 1 (data), version 1, key 0, sequence 1, CRC-32C of bytes 0..12 at 12.
    let mut rec = [0u8; 16];
    rec[0] = 1;
    rec[1] = 1;
    rec[6] = 1;
    let crc = crc32c::crc32c(&rec[..12]);
    rec[12..16].copy_from_slice(&crc.to_le_bytes());
    let page = vec![0u8; cfg.geometry.page_size_bytes as usize];
    let addr = flash::BlockAddr {
        die: flash::DieId(0),
        plane: 0,
        block: 0,
    }
    .page(0);
    nand.program(
        0,
        &[ProgramOp {
            addr,
            payload: Payload::Bytes(&page),
            oob: &rec,
        }],
    )
    .unwrap();
    match Ftl::open(nand, ftl_config()) {
        Err(ftl::FtlError::Corrupted(m)) => assert!(m.contains("version 1"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a version 1 device opened as an empty FTL"),
    }
}
