//! Per-object encryption (issue 16 item 7): round trips, refusals without the key or with the
//! wrong one, authentication of every unit (a flipped ciphertext bit is an error even when
//! the checksums are forged to match), no plaintext anywhere in the image file, GC copies,
//! reopening (recovery), scrub, fsck, rotation of the master key, and sequence numbers (the
//! nonces' input) never reused under one data key across power cuts.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use flash::fault::{CutMode, Faulty};
use flash::gang::Vpa;
use flash::image::ImageStore;
use flash::{payload_crc, preset, DeviceConfig, Flash, Nand, Payload, ReadOp};
use fml::FmlConfig;
use osd::record::{Record, Seal, ENCRYPTED_RECORD_BYTES, RECORD_MAX_BYTES};
use osd::{
    Attr, AttrValue, FlushScope, MasterKey, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError,
    PartitionId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;

fn key(b: u8) -> MasterKey {
    MasterKey::from_bytes([b; 32])
}

fn oid(n: u64) -> Oid {
    Oid::new(P, P + n)
}

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.endurance_cycles = 1_000_000;
    c
}

fn config() -> OsdConfig {
    OsdConfig {
        fml: FmlConfig::for_blocks(device().gang.superblocks(&device().geometry)),
        ..OsdConfig::default()
    }
}

/// A distinctive pattern no cipher output or metadata will contain by chance: a 16-byte
/// marker with a counter, repeated.
fn pattern(n: usize, tag: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let mut i = 0u32;
    while v.len() < n {
        v.extend_from_slice(b"PLAINTEXT!");
        v.push(tag);
        v.push(b'#');
        v.extend_from_slice(&i.to_le_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

fn random(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

fn create_encrypted<F: flash::Flash>(s: &mut ObjectStore<F>, n: u64) {
    s.create(PartitionId(P), Some(ObjectId(P + n))).unwrap();
    s.set_attr(oid(n), Attr::Encryption, AttrValue::U64(1))
        .unwrap();
}

fn read_all<F: flash::Flash>(s: &mut ObjectStore<F>, o: Oid) -> Result<Vec<u8>, OsdError> {
    let AttrValue::U64(len) = s.get_attr(o, Attr::LogicalLength)? else {
        panic!("length")
    };
    let mut b = vec![0u8; len as usize];
    let n = s.read(o, 0, &mut b)?;
    b.truncate(n);
    Ok(b)
}

type Mem = ObjectStore<Faulty<Nand>>;

fn fresh_mem() -> Mem {
    let mut s =
        ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), config()).unwrap();
    s.set_master_key(Some(key(1)));
    s.create_partition(Some(PartitionId(P))).unwrap();
    s
}

fn reopen(s: Mem, k: Option<MasterKey>) -> Mem {
    let mut s = ObjectStore::open(s.crash(), config()).unwrap();
    s.set_master_key(k);
    s
}

#[test]
fn round_trip_and_refusals_without_or_with_the_wrong_key() {
    let mut s = fresh_mem();
    let sizes = [0usize, 100, 3000, 4096, 70_000, 300_001];
    for (i, &n) in sizes.iter().enumerate() {
        create_encrypted(&mut s, i as u64 + 1);
        s.write(oid(i as u64 + 1), 0, &random(i as u64, n)).unwrap();
    }
    // Partial and unaligned overwrites (read-modify-write of sealed units), and a hole.
    s.write(oid(5), 1001, &random(77, 9000)).unwrap();
    s.write(oid(6), 400_000, b"past a hole").unwrap();
    let mut want: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| random(i as u64, n))
        .collect();
    want[4][1001..10_001].copy_from_slice(&random(77, 9000));
    want[5].resize(400_000, 0);
    want[5].extend_from_slice(b"past a hole");
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            &read_all(&mut s, oid(i as u64 + 1)).unwrap(),
            w,
            "object {i}"
        );
    }
    s.flush(FlushScope::Device).unwrap();
    // Reopened with the key (recovery rolls the sealed units forward), then cleanly.
    let mut s = reopen(s, Some(key(1)));
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            &read_all(&mut s, oid(i as u64 + 1)).unwrap(),
            w,
            "object {i}"
        );
        assert_eq!(
            s.get_attr(oid(i as u64 + 1), Attr::Encryption).unwrap(),
            AttrValue::U64(1)
        );
    }
    let dev = s.close().unwrap();
    let mut s = ObjectStore::open(dev, config()).unwrap();
    // No key: typed refusals, for reads, writes and truncates; metadata stays readable.
    let mut b = [0u8; 10];
    assert!(matches!(s.read(oid(3), 0, &mut b), Err(OsdError::KeyRequired(o)) if o == oid(3)));
    assert!(matches!(
        s.read(oid(1), 0, &mut b),
        Err(OsdError::KeyRequired(_))
    ));
    assert!(matches!(
        s.write(oid(3), 0, b"x"),
        Err(OsdError::KeyRequired(_))
    ));
    assert!(matches!(
        s.truncate(oid(3), 1),
        Err(OsdError::KeyRequired(_))
    ));
    assert_eq!(
        s.get_attr(oid(4), Attr::LogicalLength).unwrap(),
        AttrValue::U64(4096)
    );
    // The wrong key: refused as such, never garbage.
    s.set_master_key(Some(key(2)));
    assert!(matches!(s.read(oid(3), 0, &mut b), Err(OsdError::WrongKey(o)) if o == oid(3)));
    assert!(matches!(
        s.write(oid(4), 0, b"x"),
        Err(OsdError::WrongKey(_))
    ));
    // Fsck and scrub check checksums without the key.
    s.set_master_key(None);
    let f = s.fsck().unwrap();
    assert!(f.problems.is_empty() && f.damaged.is_empty(), "{f:?}");
    let r = s.scrub(false).unwrap();
    assert!(r.findings.is_empty(), "{r:?}");
    s.set_master_key(Some(key(1)));
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            &read_all(&mut s, oid(i as u64 + 1)).unwrap(),
            w,
            "object {i}"
        );
    }
}

#[test]
fn encryption_is_set_only_on_empty_objects_without_parity_and_with_a_key() {
    let mut s = fresh_mem();
    s.create(PartitionId(P), Some(ObjectId(P + 1))).unwrap();
    s.write(oid(1), 0, b"data").unwrap();
    assert!(matches!(
        s.set_attr(oid(1), Attr::Encryption, AttrValue::U64(1)),
        Err(OsdError::InvalidArgument(_))
    ));
    // Emptied, it may be encrypted; then it refuses parity.
    s.truncate(oid(1), 0).unwrap();
    s.set_attr(oid(1), Attr::Encryption, AttrValue::U64(1))
        .unwrap();
    assert!(matches!(
        s.set_attr(oid(1), Attr::Reliability, AttrValue::U64(1)),
        Err(OsdError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.set_attr(oid(1), Attr::Encryption, AttrValue::U64(2)),
        Err(OsdError::InvalidArgument(_))
    ));
    // An object with parity refuses encryption.
    s.create(PartitionId(P), Some(ObjectId(P + 2))).unwrap();
    s.set_attr(oid(2), Attr::Reliability, AttrValue::U64(1))
        .unwrap();
    assert!(matches!(
        s.set_attr(oid(2), Attr::Encryption, AttrValue::U64(1)),
        Err(OsdError::InvalidArgument(_))
    ));
    // Without a master key nothing can be encrypted.
    s.set_master_key(None);
    s.create(PartitionId(P), Some(ObjectId(P + 3))).unwrap();
    assert!(matches!(
        s.set_attr(oid(3), Attr::Encryption, AttrValue::U64(1)),
        Err(OsdError::KeyRequired(_))
    ));
    // An onode full of user attributes has no room for the wrapped key: refused, unchanged.
    s.create(PartitionId(P), Some(ObjectId(P + 4))).unwrap();
    s.set_attr(oid(4), Attr::User(0x1000), AttrValue::Bytes(vec![1; 128]))
        .unwrap();
    assert!(matches!(
        s.set_attr(oid(4), Attr::Encryption, AttrValue::U64(1)),
        Err(OsdError::InvalidArgument(m)) if m.contains("no room")
    ));
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(
        s.get_attr(oid(4), Attr::Encryption).unwrap(),
        AttrValue::U64(0)
    );
    // Fingerprint-mode writes carry no bytes to encrypt.
    s.set_master_key(Some(key(1)));
    assert!(matches!(
        s.write_token(oid(1), 0, 4096, 7),
        Err(OsdError::InvalidArgument(_))
    ));
}

/// Regression: encryption set on an object that was flushed plain (and empty), then a write
/// and a crash before the next flush. The onode with the wrapped key must be on flash before
/// the sealed units are, or recovery rolls sealed units into a plain object and the read
/// fails as corruption (and the reverse when encryption is turned off).
#[test]
fn a_crash_after_changing_encryption_leaves_readable_objects() {
    // Write-through: every write programs its units at once, and no onode follows them.
    let cfg = OsdConfig {
        buffer_bytes: 0,
        ..config()
    };
    for on_then_off in [false, true] {
        let mut s =
            ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), cfg).unwrap();
        s.set_master_key(Some(key(1)));
        s.create_partition(Some(PartitionId(P))).unwrap();
        s.create(PartitionId(P), Some(ObjectId(P + 1))).unwrap();
        if on_then_off {
            s.set_attr(oid(1), Attr::Encryption, AttrValue::U64(1))
                .unwrap();
        }
        s.flush(FlushScope::Device).unwrap();
        s.set_attr(
            oid(1),
            Attr::Encryption,
            AttrValue::U64(u64::from(!on_then_off)),
        )
        .unwrap();
        let d = random(9, 20_000);
        s.write(oid(1), 0, &d).unwrap();
        // Again: these units' records carry the grown length, which recovery rolls forward.
        s.write(oid(1), 0, &d).unwrap();
        let dev = s.crash();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        s.set_master_key(Some(key(1)));
        let got = read_all(&mut s, oid(1)).unwrap();
        assert!(got.is_empty() || got == d[..got.len()], "{on_then_off}");
        let f = s.fsck().unwrap();
        assert!(f.problems.is_empty() && f.damaged.is_empty(), "{f:?}");
    }
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ossd-encryption-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn open_image(path: &Path, k: Option<MasterKey>) -> ObjectStore<Nand<ImageStore>> {
    let (dev, store) = ImageStore::open(path).unwrap();
    let mut s = ObjectStore::open(Nand::open(dev, store).unwrap(), config()).unwrap();
    s.set_master_key(k);
    s
}

fn make_image(path: &Path) -> ObjectStore<Nand<ImageStore>> {
    let dev = device();
    let nand = Nand::open(dev, ImageStore::create(path, &dev).unwrap()).unwrap();
    let mut s = ObjectStore::format(nand, config()).unwrap();
    s.set_master_key(Some(key(1)));
    s.create_partition(Some(PartitionId(P))).unwrap();
    s
}

/// Every offset at which `needle` occurs in `hay`.
fn occurrences(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

#[test]
fn no_plaintext_of_an_encrypted_object_reaches_the_image_file() {
    let path = temp("plaintext.img");
    let mut s = make_image(&path);
    // Sizes that would take every path a plain object takes: embedded in the onode (an inode
    // hint, under 128 bytes), a small-object page (under a unit), whole and partial units.
    let sizes = [60usize, 700, 4096, 50_000, 400_000];
    for (i, &n) in sizes.iter().enumerate() {
        let o = oid(i as u64 + 1);
        create_encrypted(&mut s, i as u64 + 1);
        s.set_attr(o, Attr::InodeEmbedded, AttrValue::Bool(i == 0))
            .unwrap();
        s.write(o, 0, &pattern(n, b'E')).unwrap();
        // Overwrites leave old versions on flash until GC: those must be sealed too.
        s.write(o, n as u64 / 2, &pattern(n / 3, b'E')).unwrap();
        s.flush(FlushScope::Device).unwrap();
    }
    // A plain object with the same kind of pattern: the scan must find it (the test can see
    // plaintext when there is some).
    s.create(PartitionId(P), Some(ObjectId(P + 100))).unwrap();
    s.write(oid(100), 0, &pattern(9000, b'P')).unwrap();
    s.close().unwrap();
    let image = std::fs::read(&path).unwrap();
    let plain = occurrences(&image, b"PLAINTEXT!P#");
    assert!(
        plain > 500,
        "the plain object's pattern must be found ({plain})"
    );
    assert_eq!(occurrences(&image, b"PLAINTEXT!E#"), 0);
    assert_eq!(occurrences(&image, b"PLAINTEXT!"), plain);
    // And every encrypted object still reads back.
    let mut s = open_image(&path, Some(key(1)));
    for (i, &n) in sizes.iter().enumerate() {
        let mut want = pattern(n, b'E');
        let over = pattern(n / 3, b'E');
        want[n / 2..n / 2 + n / 3].copy_from_slice(&over);
        assert_eq!(read_all(&mut s, oid(i as u64 + 1)).unwrap(), want);
    }
    std::fs::remove_file(&path).unwrap();
}

/// Where the slot of write unit `v` (one page on `tiny`) starts in the image file.
fn slot_of(s: &ObjectStore<Nand<ImageStore>>, v: Vpa) -> (u64, u64) {
    let g = device().geometry;
    let page_area = (4096 + 16 * g.blocks() as u64).next_multiple_of(4096);
    let slot = 16 + g.oob_size_bytes as u64 + g.page_size_bytes as u64;
    let layout = *s.fml().layout();
    assert_eq!(layout.pages_per_unit(), 1);
    let p = layout.page(v, 0);
    let at = page_area
        + (g.block_index(p.block_addr()) as u64 * g.pages_per_block as u64 + p.page as u64) * slot;
    (at + 16, at + 16 + g.oob_size_bytes as u64)
}

#[test]
fn a_flipped_ciphertext_bit_is_an_error_even_with_forged_checksums() {
    let path = temp("flip.img");
    let mut s = make_image(&path);
    create_encrypted(&mut s, 1);
    let data = random(5, 20_000);
    s.write(oid(1), 0, &data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let mut v = Vec::new();
    assert!(s.peek_read_units(oid(1), 8192, 1, &mut v));
    let (oob_at, page_at) = slot_of(&s, v[0]);
    let unit = s.unit_bytes();
    s.close().unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut page = vec![0u8; unit];
    f.read_exact_at(&mut page, page_at).unwrap();
    page[100] ^= 0x10;
    f.write_all_at(&page, page_at).unwrap();
    // The payload checksum catches it first.
    let mut s = open_image(&path, Some(key(1)));
    let mut b = vec![0u8; 4096];
    let e = s.read(oid(1), 8192, &mut b).unwrap_err();
    assert!(matches!(e, OsdError::Uncorrectable { .. }), "{e}");
    assert!(!s.fsck().unwrap().damaged.is_empty());
    drop(s);
    // Forge the payload checksum and both record CRCs to match the altered ciphertext: only
    // the AEAD tag can tell now, and it does.
    let mut oob = [0u8; RECORD_MAX_BYTES];
    f.read_exact_at(&mut oob, oob_at).unwrap();
    let sealed = Record::decode_sealed(&oob).unwrap().unwrap();
    assert!(matches!(
        sealed.record,
        Record::Data {
            seal: Some(Seal { tag: Some(_), .. }),
            ..
        }
    ));
    let mut forged = [0u8; RECORD_MAX_BYTES];
    let n = sealed
        .record
        .encode(payload_crc(Payload::Bytes(&page)), &mut forged);
    assert_eq!(n, ENCRYPTED_RECORD_BYTES);
    f.write_all_at(&forged[..n], oob_at).unwrap();
    let mut s = open_image(&path, Some(key(1)));
    assert!(s.fsck().unwrap().damaged.is_empty(), "checksums forged");
    let e = s.read(oid(1), 8192, &mut b).unwrap_err();
    assert!(
        matches!(&e, OsdError::Uncorrectable { what, .. } if what.contains("authentication")),
        "{e}"
    );
    // The other units still read.
    assert_eq!(s.read(oid(1), 0, &mut b).unwrap(), 4096);
    assert_eq!(b, data[..4096]);
    // A tag altered with its record's CRC left alone: the record is damaged.
    drop(s);
    let mut bad = forged;
    bad[50] ^= 1;
    f.write_all_at(&bad[..n], oob_at).unwrap();
    let mut s = open_image(&path, Some(key(1)));
    assert!(matches!(
        s.read(oid(1), 8192, &mut b),
        Err(OsdError::Corrupted { .. })
    ));
    std::fs::remove_file(&path).unwrap();
}

/// Every encrypted record on the device (valid or stale, not yet erased) by (object, unit,
/// nonce sequence number) -> payload checksums: one payload per nonce, or a nonce was reused.
fn nonces_are_unique(s: &mut Mem, seen: &mut BTreeMap<(u128, u64, u64), u32>) {
    let layout = *s.fml().layout();
    let total = layout.superblocks * layout.units_per_superblock;
    for v in 0..total {
        let mut oob = [0u8; ENCRYPTED_RECORD_BYTES];
        let addr = layout.page(Vpa(v), 0);
        let mut op = [ReadOp::new(addr, &mut [], &mut oob)];
        if s.device_mut().read(0, &mut op).is_err() || op[0].content == flash::Content::Erased {
            continue;
        }
        let Ok(Some(sealed)) = Record::decode_sealed(&oob) else {
            continue;
        };
        if let Record::Data {
            oid,
            offset,
            seal: Some(seal),
            ..
        } = sealed.record
        {
            let k = (oid.as_u128(), offset, seal.nonce_seq);
            let prev = *seen.entry(k).or_insert(sealed.payload_crc);
            assert_eq!(
                prev, sealed.payload_crc,
                "nonce {k:?} sealed two different payloads"
            );
        }
    }
}

/// Sequence numbers of the readable records on the device.
fn readable_seqs(s: &mut Mem) -> Vec<u64> {
    let layout = *s.fml().layout();
    let total = layout.superblocks * layout.units_per_superblock;
    let mut out = Vec::new();
    for v in 0..total {
        let mut oob = [0u8; ENCRYPTED_RECORD_BYTES];
        let mut op = [ReadOp::new(layout.page(Vpa(v), 0), &mut [], &mut oob)];
        if s.device_mut().read(0, &mut op).is_ok() {
            if let Ok(Some(r)) = Record::decode(&oob) {
                out.push(r.seq());
            }
        }
    }
    out
}

/// A torn program of a sealed unit is unreadable after the cut, so recovery cannot see the
/// sequence number (the nonce's input) it used; the store must not hand that number out again
/// under the same data key. It skips `SEQ_GAP_AT_OPEN` at every open of a store with sealed
/// units.
#[test]
fn a_torn_sealed_program_never_gives_its_nonce_to_another_unit() {
    let mut s = fresh_mem();
    create_encrypted(&mut s, 1);
    s.write(oid(1), 0, &random(1, 50_000)).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let before = readable_seqs(&mut s).into_iter().max().unwrap();
    s.device_mut().cut_power_after(0, CutMode::Torn);
    s.write(oid(1), 0, &random(2, 4096)).unwrap();
    assert!(
        s.flush(FlushScope::Device).is_err(),
        "the cut tears the program"
    );
    let mut dev = s.crash();
    dev.restore_power();
    let mut s = ObjectStore::open(dev, config()).unwrap();
    s.set_master_key(Some(key(1)));
    let after_open = readable_seqs(&mut s).into_iter().max().unwrap();
    s.write(oid(1), 0, &random(3, 4096)).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let new: Vec<u64> = readable_seqs(&mut s)
        .into_iter()
        .filter(|&q| q > after_open)
        .collect();
    assert!(!new.is_empty());
    assert!(
        new.iter()
            .all(|&q| q > before + osd::store::SEQ_GAP_AT_OPEN),
        "sequence numbers after the cut {new:?}, before {before}"
    );
    let mut want = random(1, 50_000);
    want[..4096].copy_from_slice(&random(3, 4096));
    assert_eq!(read_all(&mut s, oid(1)).unwrap(), want);
}

#[test]
fn gc_copies_power_cuts_and_recovery_keep_sealed_units_readable_and_nonces_unique() {
    let mut s = fresh_mem();
    for n in 1..=4 {
        create_encrypted(&mut s, n);
    }
    s.create(PartitionId(P), Some(ObjectId(P + 9))).unwrap();
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut seen = BTreeMap::new();
    let mut copied = 0;
    // Objects filling most of the device, then small random overwrites: GC must copy the
    // sealed units of partly overwritten blocks, many times.
    for n in 1..=4u64 {
        let d = random(100 + n, 2 << 20);
        s.write(oid(n), 0, &d).unwrap();
        model.insert(n, d);
    }
    // (Short of full: data units never take the low watermark's free blocks.)
    s.write(oid(9), 0, &random(99, 3 << 20)).unwrap();
    for round in 0..300u64 {
        let n = 1 + round % 4;
        let len = rng.gen_range(1..40_000usize);
        let off = rng.gen_range(0..(2u64 << 20));
        let d = random(round, len);
        s.write(oid(n), off, &d).unwrap();
        let m = model.entry(n).or_default();
        if m.len() < off as usize + len {
            m.resize(off as usize + len, 0);
        }
        m[off as usize..off as usize + len].copy_from_slice(&d);
        if round % 37 == 3 {
            let to = m.len() as u64 * 3 / 4;
            s.truncate(oid(n), to).unwrap();
            m.truncate(to as usize);
        }
        s.flush(FlushScope::Device).unwrap();
        if round % 30 == 29 {
            // A power cut in the middle of the next writes' programs, then recovery.
            s.device_mut().cut_power_after(
                rng.gen_range(1..40),
                if round % 60 == 29 {
                    CutMode::Torn
                } else {
                    CutMode::Clean
                },
            );
            let _ = s.write(oid(1), 0, &random(5000 + round, 100_000));
            let _ = s.flush(FlushScope::Device);
            copied += s.fml().stats().gc_units_copied;
            let mut dev = s.crash();
            dev.restore_power();
            s = ObjectStore::open(dev, config()).unwrap();
            s.set_master_key(Some(key(1)));
            // Object 1 holds its flushed contents or, where the lost write reached, its bytes.
            let got = read_all(&mut s, oid(1)).unwrap();
            let late = random(5000 + round, 100_000);
            let m = model.get_mut(&1).unwrap();
            let len = got.len();
            assert!(
                len == m.len() || len == m.len().max(100_000),
                "round {round}"
            );
            for (i, b) in got.iter().enumerate() {
                let old = m.get(i).copied().unwrap_or(0);
                assert!(
                    *b == old || late.get(i) == Some(b),
                    "round {round} byte {i}"
                );
            }
            // Adopt what was read, so the model follows the store.
            *m = got;
        }
        if round % 10 == 0 {
            nonces_are_unique(&mut s, &mut seen);
        }
    }
    copied += s.fml().stats().gc_units_copied;
    assert!(copied > 100, "GC must copy units: {copied}");
    println!("{copied} units copied by GC");
    for (n, want) in &model {
        assert_eq!(&read_all(&mut s, oid(*n)).unwrap(), want, "object {n}");
    }
    let f = s.fsck().unwrap();
    assert!(f.problems.is_empty() && f.damaged.is_empty(), "{f:?}");
    assert!(s.scrub(false).unwrap().findings.is_empty());
    let mut s = reopen(s, Some(key(1)));
    for (n, want) in &model {
        assert_eq!(&read_all(&mut s, oid(*n)).unwrap(), want, "object {n}");
    }
    nonces_are_unique(&mut s, &mut seen);
    assert!(seen.len() > 200, "{} sealed records seen", seen.len());
    println!("{} sealed records seen, no nonce reused", seen.len());
}

#[test]
fn rekey_rewraps_data_keys_without_rewriting_data() {
    let mut s = fresh_mem();
    create_encrypted(&mut s, 1);
    create_encrypted(&mut s, 2);
    s.create(PartitionId(P), Some(ObjectId(P + 3))).unwrap();
    for n in 1..=3 {
        s.write(oid(n), 0, &random(n, 30_000)).unwrap();
    }
    s.flush(FlushScope::Device).unwrap();
    let written = s.stats().data_units_written;
    // With the wrong current key nothing changes.
    s.set_master_key(Some(key(9)));
    assert!(matches!(s.rekey(key(2)), Err(OsdError::WrongKey(_))));
    s.set_master_key(Some(key(1)));
    assert_eq!(s.rekey(key(2)).unwrap(), 2);
    assert_eq!(s.stats().data_units_written, written, "no data rewritten");
    let mut s = reopen(s, Some(key(1)));
    let mut b = [0u8; 8];
    assert!(matches!(
        s.read(oid(1), 0, &mut b),
        Err(OsdError::WrongKey(_))
    ));
    s.set_master_key(Some(key(2)));
    for n in 1..=3 {
        assert_eq!(read_all(&mut s, oid(n)).unwrap(), random(n, 30_000));
    }
    // Run again with the same two keys (as after a crash half-way): nothing left to do under
    // the old key, and the objects already under the new one are recognised.
    s.set_master_key(Some(key(1)));
    assert_eq!(s.rekey(key(2)).unwrap(), 0);
}
