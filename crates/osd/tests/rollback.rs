//! Issue 15: after a destructive fault, recovery may roll a unit back to an older copy
//! (docs/RELIABILITY.md, "What each fault kind may cost"): each sector may then hold any value
//! once written to it, never bytes that were never written there. A shrinking truncate leaves
//! the truncated bytes on flash past the new end; a later write of part of the unit holding
//! the end merges that unit's old contents in. The copy it programs must hold zeros past the
//! object's length, not the truncated bytes: otherwise, once the copy that zeroed them (a
//! growth) is destroyed and recovery falls back to it, a sector holds new bytes followed by
//! truncated ones, a mixture no write ever made (found by `ossd torture --faults all`, seed
//! 2433796964482868409 and others).

use std::collections::BTreeSet;

use flash::fault::Faulty;
use flash::gang::Vpa;
use flash::{preset, DeviceConfig, Flash, Nand, ReadOp};
use fml::FmlConfig;
use osd::compress::Compression;
use osd::record::{Record, DATA_RECORD_BYTES};
use osd::{Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;
const SECTOR: usize = 512;

type Store = ObjectStore<Faulty<Nand>>;

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.endurance_cycles = 1_000_000;
    c
}

/// No data buffer (each write programs its units at once, as in most failing seeds), no
/// checkpoint during the test (recovery rolls every unit forward from its record), chunks of 4
/// units.
fn config() -> OsdConfig {
    OsdConfig {
        buffer_bytes: 0,
        checkpoint_units: 1 << 20,
        small_objects: false,
        compression_chunk_units: 4,
        metadata_copies: 1,
        fml: FmlConfig::for_blocks(device().gang.superblocks(&device().geometry)),
        ..OsdConfig::default()
    }
}

fn oid(n: u64) -> Oid {
    Oid::new(P, P + n)
}

/// Random bytes (incompressible: a compressed object stores such a chunk raw).
fn random(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

/// Compressible bytes.
fn text(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let words: [&[u8]; 4] = [b"flash ", b"unit ", b"chunk ", b"tail "];
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        out.extend_from_slice(words[rng.gen_range(0..4)]);
    }
    out.truncate(n);
    out
}

/// Every readable data unit of `oid` on the device: (write unit, unit offset in the object).
fn data_units(s: &mut Store, oid: Oid) -> BTreeSet<(u32, u64)> {
    let layout = *s.fml().layout();
    let total = layout.superblocks * layout.units_per_superblock;
    let mut out = BTreeSet::new();
    for v in 0..total {
        let mut oob = [0u8; DATA_RECORD_BYTES];
        let mut op = [ReadOp::new(layout.page(Vpa(v), 0), &mut [], &mut oob)];
        if s.device_mut().read(0, &mut op).is_err() || op[0].content == flash::Content::Erased {
            continue;
        }
        if let Ok(Some(Record::Data { oid: o, offset, .. })) = Record::decode(&oob) {
            if o == oid {
                out.insert((v, offset));
            }
        }
    }
    out
}

/// Makes the page(s) of write unit `v` unreadable (bit errors past the ECC).
fn fail_unit(s: &mut Store, v: u32) {
    let layout = *s.fml().layout();
    for i in 0..layout.pages_per_unit() {
        let p = layout.page(Vpa(v), i);
        s.device_mut().flip_bits(p, 1000);
    }
}

/// Writes `old` over units 0 and 1, shrinks the object to `cut` (inside sector 8, the first
/// of unit 1), appends `new` there (a write of part of a sector: unit 1's old contents are
/// merged in), then grows the object with a write in unit 5 (which zeroes the rest of unit 1,
/// or of chunk 0), flushing after each step. The copies that zeroing programmed are then
/// destroyed and the store crashes: recovery falls back to the copies the append programmed.
/// Sector 8 must read back as a value once written there.
fn append_after_truncate_then_lose_the_zeroing(compression: Option<Compression>, old: &[u8]) {
    let cfg = config();
    let mut s = ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    let o = oid(1);
    s.create(PartitionId(P), Some(ObjectId(P + 1))).unwrap();
    if let Some(c) = compression {
        s.set_attr(o, Attr::Compression, AttrValue::U64(c.code()))
            .unwrap();
    }
    let unit = s.unit_bytes();
    assert_eq!(unit, 4096, "the offsets below assume 4 KiB units");
    let cut = 4196u64;
    let end = 4300u64;
    s.write(o, 0, old).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.truncate(o, cut).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let new = random(2, (end - cut) as usize);
    s.write(o, cut, &new).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let before = data_units(&mut s, o);
    s.write(o, 5 * unit as u64, &random(3, SECTOR)).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let after = data_units(&mut s, o);
    // The copies the growth programmed for unit 1 (chunk 0's units on a compressed object).
    let zeroing: Vec<u32> = after
        .difference(&before)
        .filter(|&&(_, off)| {
            if compression.is_some() {
                off < 8
            } else {
                off == 1
            }
        })
        .map(|&(v, _)| v)
        .collect();
    assert!(!zeroing.is_empty(), "the growth zeroed unit 1's tail");
    for v in zeroing {
        fail_unit(&mut s, v);
    }
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    let mut buf = vec![0u8; 6 * unit];
    let n = s.read(o, 0, &mut buf).unwrap();
    assert!(n > end as usize, "the object keeps its growth ({n} bytes)");
    let sector = &buf[8 * SECTOR..9 * SECTOR];
    let base = 8 * SECTOR;
    // Every value sector 8 ever had: the first write's, the truncation's (zeros from the
    // cut), the append's (the new bytes, zeros after them); and zeros.
    let first = old[base..base + SECTOR].to_vec();
    let mut truncated = first.clone();
    truncated[cut as usize - base..].fill(0);
    let mut appended = truncated.clone();
    appended[cut as usize - base..end as usize - base].copy_from_slice(&new);
    let zeros = vec![0u8; SECTOR];
    assert!(
        [&first, &truncated, &appended, &zeros].contains(&&sector.to_vec()),
        "sector 8 holds bytes never written there: the new bytes at {}..{} are {}, bytes \
         {end}..{} are {}",
        cut,
        end,
        if sector[cut as usize - base..end as usize - base] == new[..] {
            "there"
        } else {
            "not there"
        },
        base + SECTOR,
        if sector[end as usize - base..] == old[end as usize..base + SECTOR] {
            "the truncated ones"
        } else {
            "something else"
        },
    );
}

#[test]
fn a_plain_unit_rolled_back_after_an_append_past_a_truncation_holds_no_truncated_bytes() {
    append_after_truncate_then_lose_the_zeroing(None, &random(1, 8192));
}

#[test]
fn a_compressed_chunk_rolled_back_after_an_append_past_a_truncation_holds_no_truncated_bytes() {
    append_after_truncate_then_lose_the_zeroing(Some(Compression::Lz4), &text(1, 8192));
}

#[test]
fn a_raw_chunk_rolled_back_after_an_append_past_a_truncation_holds_no_truncated_bytes() {
    append_after_truncate_then_lose_the_zeroing(Some(Compression::Lz4), &random(1, 8192));
}

/// A write that grows the object from before the unit holding its end, with that unit already
/// in the buffer (a write of whole sectors before the end, so nothing was merged): the buffer
/// evicts that unit before the write reaches it, and its program merges the unit's old
/// contents in. Past the object's end those are bytes a truncate cut off: the copy must hold
/// zeros there, and its record must not claim the length the write will leave, or a crash
/// before the write's own copy of the unit is programmed brings the truncated bytes back
/// (`ossd torture --reliability 1 --fill 80`, seed 10541582998186301944).
#[test]
fn a_unit_evicted_before_a_growing_write_reaches_it_holds_no_truncated_bytes() {
    let cfg = OsdConfig {
        buffer_bytes: 4096,
        ..config()
    };
    let mut s = ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    let o = oid(1);
    s.create(PartitionId(P), Some(ObjectId(P + 1))).unwrap();
    let unit = s.unit_bytes();
    assert_eq!(unit, 4096, "the offsets below assume 4 KiB units");
    let old = random(1, 3 * unit);
    s.write(o, 0, &old).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let cut = 5220usize;
    s.truncate(o, cut as u64).unwrap();
    s.flush(FlushScope::Device).unwrap();
    // Sectors 8 and 9, whole and before the end: unit 1 is buffered with nothing merged.
    let inside = random(2, 2 * SECTOR);
    s.write(o, 4096, &inside).unwrap();
    // Grows the object to 6000 from unit 0: unit 1 leaves the buffer as unit 0 comes in, and
    // unit 0 as the write's unit 1 comes in. The crash loses the write's unit 1.
    let end = 6000usize;
    let new = random(3, end);
    s.write(o, 0, &new).unwrap();
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    let mut buf = vec![0u8; 2 * unit];
    let n = s.read(o, 0, &mut buf).unwrap();
    assert!((cut..=end).contains(&n), "length {n}");
    for i in cut..n {
        assert!(
            buf[i] == 0 || buf[i] == new[i],
            "byte {i} of {n} is {:#x}: neither the growth's ({:#x}) nor a zero (the truncated \
             byte was {:#x})",
            buf[i],
            new[i],
            old[i]
        );
    }
}
