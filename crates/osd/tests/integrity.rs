//! Issue 16, part 1: a user flipped 200 random bits in a copy of a `nandsim-128m` image holding
//! seven objects; `ossd fsck` said "clean" in 28 of 30 trials and `ossd get` returned wrong bytes
//! with success in 111 of 150 reads. This replays that trial, scaled to the 16 MiB `tiny` device:
//! random bits flipped in the image file, then every read returns exactly the bytes written or
//! fails with `Uncorrectable` / `Corrupted`, and fsck reports damage whenever a live unit's data
//! or OOB record was hit. Seeded: every trial replays exactly.

use std::os::unix::fs::FileExt;
use std::path::Path;

use flash::gang::Vpa;
use flash::image::ImageStore;
use flash::{preset, Nand};
use fml::FmlConfig;
use osd::record::DATA_RECORD_BYTES;
use osd::store::FsckReport;
use osd::PartitionId;
use osd::{Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;
/// Object sizes: from under a unit (small-object pages) to a fifth of the device.
const SIZES: [usize; 7] = [300, 5_000, 40_000, 200_000, 700_000, 1_500_000, 2_600_000];
const TRIALS: u64 = 12;
const FLIPS: usize = 24;

fn config() -> OsdConfig {
    OsdConfig {
        fml: FmlConfig::for_blocks(32),
        ..OsdConfig::default()
    }
}

fn contents(k: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(1000 + k as u64);
    (0..SIZES[k]).map(|_| rng.gen()).collect()
}

fn open(path: &Path) -> Result<ObjectStore<Nand<ImageStore>>, String> {
    let (dev, store) = ImageStore::open(path).map_err(|e| e.to_string())?;
    let nand = Nand::open(dev, store).map_err(|e| e.to_string())?;
    ObjectStore::open(nand, config()).map_err(|e| e.to_string())
}

/// Writes the seven objects (one `put` each, as the CLI does) into a fresh image formatted
/// with `placement`.
fn make_image(path: &Path, placement: osd::Placement) {
    let dev = preset("tiny").unwrap();
    let nand = Nand::open(dev, ImageStore::create(path, &dev).unwrap()).unwrap();
    let cfg = OsdConfig {
        placement,
        ..config()
    };
    let mut s = ObjectStore::format(nand, cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s.close().unwrap();
    for k in 0..SIZES.len() {
        let mut s = open(path).unwrap();
        s.create(PartitionId(P), Some(ObjectId(P + 1 + k as u64)))
            .unwrap();
        s.write(Oid::new(P, P + 1 + k as u64), 0, &contents(k))
            .unwrap();
        s.flush(FlushScope::Device).unwrap();
        s.close().unwrap();
    }
}

/// Byte ranges of the image file (docs/FORMAT.md, "Device image") whose damage the store must
/// notice: the page bytes and the OOB record of every unit the store references.
fn live_ranges(path: &Path) -> Vec<(u64, u64)> {
    let mut s = open(path).unwrap();
    let report = s.fsck().unwrap();
    assert!(
        report.problems.is_empty() && report.damaged.is_empty(),
        "{report:?}"
    );
    let dev = preset("tiny").unwrap();
    let g = dev.geometry;
    let page_area = (4096 + 16 * g.blocks() as u64).next_multiple_of(4096);
    let slot = 16 + g.oob_size_bytes as u64 + g.page_size_bytes as u64;
    let layout = *s.fml().layout();
    assert_eq!(layout.pages_per_unit(), 1, "one page per unit on `tiny`");
    let units = layout.superblocks * layout.units_per_superblock;
    let mut out = Vec::new();
    for v in (0..units).map(Vpa).filter(|&v| s.fml().is_valid(v)) {
        let p = layout.page(v, 0);
        let at = page_area
            + (g.block_index(p.block_addr()) as u64 * g.pages_per_block as u64 + p.page as u64)
                * slot;
        // The OOB record (at most a data record's length), then the page bytes.
        out.push((at + 16, at + 16 + DATA_RECORD_BYTES as u64));
        out.push((at + 16 + g.oob_size_bytes as u64, at + slot));
    }
    out
}

#[derive(Default, Debug)]
struct Tally {
    refused_to_open: u32,
    reads_exact: u32,
    reads_failed: u32,
    live_hit: u32,
    fsck_reported: u32,
}

/// Reads every object back: exactly what was written, or an error that says so. Returns the
/// reads that failed.
fn check_reads(s: &mut ObjectStore<Nand<ImageStore>>, trial: u64, t: &mut Tally) -> u32 {
    let mut failed = 0;
    for k in 0..SIZES.len() {
        let oid = Oid::new(P, P + 1 + k as u64);
        let want = contents(k);
        let got = s.get_attr(oid, Attr::LogicalLength).and_then(|len| {
            let AttrValue::U64(len) = len else {
                panic!("length reads {len:?}")
            };
            let mut buf = vec![0u8; len as usize];
            let n = s.read(oid, 0, &mut buf)?;
            buf.truncate(n);
            Ok(buf)
        });
        match got {
            Ok(bytes) => {
                assert!(
                    bytes == want,
                    "trial {trial}: object {k} read back {} bytes that differ from the {} written",
                    bytes.len(),
                    want.len()
                );
                t.reads_exact += 1;
            }
            Err(OsdError::Uncorrectable { .. } | OsdError::Corrupted { .. }) => {
                t.reads_failed += 1;
                failed += 1;
            }
            Err(e) => panic!("trial {trial}: object {k}: unexpected error {e}"),
        }
    }
    failed
}

#[test]
fn flipped_bits_are_reported_never_returned() {
    let dir = std::env::temp_dir().join(format!("ossd-integrity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let clean = dir.join("clean.img");
    make_image(&clean, osd::Placement::Semantic);
    let live = live_ranges(&clean);
    let len = std::fs::metadata(&clean).unwrap().len();
    let mut t = Tally::default();
    for trial in 0..TRIALS {
        let path = dir.join("damaged.img");
        std::fs::copy(&clean, &path).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(trial);
        let mut hit = false;
        // As the user did: bits anywhere in the first 55% of the file (header, block table and
        // page slots, programmed or not).
        for _ in 0..FLIPS {
            let at = rng.gen_range(0..len * 55 / 100);
            let bit = rng.gen_range(0..8);
            let mut b = [0u8];
            f.read_exact_at(&mut b, at).unwrap();
            f.write_all_at(&[b[0] ^ (1 << bit)], at).unwrap();
            hit |= live.iter().any(|&(a, z)| (a..z).contains(&at));
        }
        drop(f);
        t.live_hit += hit as u32;
        let mut s = match open(&path) {
            Ok(s) => s,
            Err(_) => {
                // Refusing a damaged image is safe: nothing wrong is returned.
                t.refused_to_open += 1;
                continue;
            }
        };
        let report: FsckReport = match s.fsck() {
            Ok(r) => r,
            Err(e) => panic!("trial {trial}: fsck failed instead of reporting: {e}"),
        };
        let reported = !report.problems.is_empty() || !report.damaged.is_empty();
        t.fsck_reported += reported as u32;
        assert!(
            reported || !hit,
            "trial {trial}: a live unit was damaged and fsck says clean"
        );
        let failed = check_reads(&mut s, trial, &mut t);
        assert!(
            reported || failed == 0,
            "trial {trial}: fsck says clean but {failed} reads failed"
        );
    }
    println!("{t:?}");
    // The trial must exercise the checks: damage was found and some reads still succeeded.
    assert!(t.live_hit >= TRIALS as u32 / 2, "{t:?}");
    assert!(t.reads_failed > 0 && t.reads_exact > 0, "{t:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The smallest case, deterministic: one bit of one data unit's page bytes flipped. The object
/// fails to read with an error naming it and its byte range; fsck names the same unit.
#[test]
fn one_flipped_data_bit_is_an_uncorrectable_read() {
    let dir = std::env::temp_dir().join(format!("ossd-integrity1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("one.img");
    make_image(&path, osd::Placement::Semantic);
    // Find a data unit of object 5 (700,000 bytes): its second unit.
    let dev = preset("tiny").unwrap();
    let g = dev.geometry;
    let page_area = (4096 + 16 * g.blocks() as u64).next_multiple_of(4096);
    let slot = 16 + g.oob_size_bytes as u64 + g.page_size_bytes as u64;
    let image = std::fs::read(&path).unwrap();
    let oid = Oid::new(P, P + 1 + 4);
    let target = (0..g.pages())
        .map(|i| page_area + i * slot)
        .find(|&at| {
            let oob = &image[(at + 16) as usize..(at + 16 + DATA_RECORD_BYTES as u64) as usize];
            matches!(
                osd::record::Record::decode(oob),
                Ok(Some(osd::record::Record::Data { oid: o, offset: 1, moved: false, .. }))
                    if o == oid
            )
        })
        .expect("unit 1 of the object is on flash");
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let byte = target + 16 + g.oob_size_bytes as u64 + 1234;
    f.write_all_at(&[image[byte as usize] ^ 0x10], byte)
        .unwrap();
    drop(f);
    let mut s = open(&path).unwrap();
    let mut buf = vec![0u8; SIZES[4]];
    match s.read(oid, 0, &mut buf) {
        Err(OsdError::Uncorrectable { what, .. }) => {
            assert!(
                what.contains(&format!("object {oid} bytes 4096..8192")),
                "{what}"
            );
        }
        other => panic!("read of the damaged object: {other:?}"),
    }
    // The other objects read back whole.
    for k in [0, 3, 6] {
        let mut b = vec![0u8; SIZES[k]];
        s.read(Oid::new(P, P + 1 + k as u64), 0, &mut b).unwrap();
        assert!(b == contents(k), "object {k}");
    }
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert!(
        report.damaged[0].contains(&format!("object {oid} bytes 4096..8192")),
        "{report:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every programmed unit of the image: (kind, record, slot offset in the file).
fn units_on_image(image: &[u8]) -> Vec<(&'static str, osd::record::Record, u64)> {
    let g = preset("tiny").unwrap().geometry;
    let page_area = (4096 + 16 * g.blocks() as u64).next_multiple_of(4096);
    let slot = 16 + g.oob_size_bytes as u64 + g.page_size_bytes as u64;
    (0..g.pages())
        .map(|i| page_area + i * slot)
        .filter(|&at| image[at as usize..at as usize + 4] != [0, 0, 0, 0])
        .filter_map(|at| {
            let oob = &image[(at + 16) as usize..(at + 16 + g.oob_size_bytes as u64) as usize];
            let r = osd::record::Record::decode(oob).ok().flatten()?;
            Some((r.kind_name(), r, at))
        })
        .collect()
}

/// A unit test per codec, end to end: one bit flipped in the payload of the newest unit of each
/// kind the store writes (data unit, index node, descriptor page, small-object page, atime
/// page, checkpoint) is found. The store refuses to open, or opens and fsck reports damage;
/// either way no read returns wrong bytes.
#[test]
fn a_flipped_payload_bit_is_found_in_every_kind_of_unit() {
    let dir = std::env::temp_dir().join(format!("ossd-integrity2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let clean = dir.join("clean.img");
    make_image(&clean, osd::Placement::SplitAtime);
    // Access times journaled after the last checkpoint: a live atime page, found by recovery.
    {
        let mut s = open(&clean).unwrap();
        let mut b = vec![0u8; 64];
        for k in 0..SIZES.len() {
            s.read(Oid::new(P, P + 1 + k as u64), 0, &mut b).unwrap();
        }
        s.flush(FlushScope::Device).unwrap();
        drop(s.crash());
    }
    let image = std::fs::read(&clean).unwrap();
    let units = units_on_image(&image);
    let g = preset("tiny").unwrap().geometry;
    let kinds = [
        "data unit",
        "index node",
        "descriptor page",
        "small-object page",
        "atime page",
        "checkpoint",
    ];
    for kind in kinds {
        let (_, rec, at) = units
            .iter()
            .filter(|u| u.0 == kind)
            .max_by_key(|u| u.1.seq())
            .unwrap_or_else(|| panic!("no {kind} on the image"));
        let path = dir.join("damaged.img");
        std::fs::copy(&clean, &path).unwrap();
        let byte = at + 16 + g.oob_size_bytes as u64 + 5;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[image[byte as usize] ^ 0x40], byte)
            .unwrap();
        drop(f);
        let mut s = match open(&path) {
            Ok(s) => s,
            Err(e) => {
                // Refused: safe (a damaged index node of the checkpoint's tree, for one).
                println!("{kind}: the store refuses to open: {e}");
                continue;
            }
        };
        let report = s.fsck().unwrap();
        println!(
            "{kind}: {:?}",
            report.damaged.first().or(report.problems.first())
        );
        assert!(
            !report.problems.is_empty() || !report.damaged.is_empty(),
            "a flipped bit in the {kind} {rec:?} went unnoticed: {report:?}"
        );
        let mut t = Tally::default();
        check_reads(&mut s, 0, &mut t);
        if kind == "data unit" {
            assert_eq!(t.reads_failed, 1, "{kind}: {t:?}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A device holding only records of version 1 (before payload checksums) is refused with an
/// error that says so, not reported as "not an object store".
#[test]
fn version_1_images_are_refused_by_name() {
    use flash::{Flash, Payload, ProgramOp};
    let dev = preset("tiny").unwrap();
    let mut nand = Nand::in_memory(dev).unwrap();
    // A version 1 checkpoint record: kind 4, version 1, sequence 1, CRC-32C of 0..8 at 8.
    let mut rec = [0u8; 12];
    rec[0] = 4;
    rec[1] = 1;
    rec[2] = 1;
    let crc = crc32c::crc32c(&rec[..8]);
    rec[8..12].copy_from_slice(&crc.to_le_bytes());
    let page = vec![0u8; dev.geometry.page_size_bytes as usize];
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
    match ObjectStore::open(nand, config()) {
        Err(OsdError::Corrupted { what, .. }) => assert!(what.contains("version 1"), "{what}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a version 1 device opened"),
    }
}
