//! Issue 16, part 2: per-object Reed-Solomon parity (OSCM-11 III, "Object-level reliability").
//! Damage to a protected object's units (a whole page the device cannot read, bits flipped in
//! the image file past the device's ECC, a power cut between a data program and its parity's)
//! is corrected from parity; without parity the same damage is an error, never wrong bytes.

mod parity_rig;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;

use flash::fault::CutMode;
use flash::image::ImageStore;
use flash::{preset, Nand};
use fml::FmlConfig;
use osd::record::{Record, DATA_RECORD_BYTES};
use osd::store::ScrubOutcome;
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError, PartitionId,
};
use parity_rig::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn a_failed_page_reads_back_right_with_parity_and_fails_without() {
    let mut s = fresh(config(0, 8));
    let unit = s.unit_bytes() as u64;
    let (a, b) = (oid(1), oid(2));
    for o in [a, b] {
        s.create(PartitionId(P), Some(o.object)).unwrap();
    }
    s.set_attr(a, Attr::Reliability, AttrValue::U64(1)).unwrap();
    assert_eq!(s.get_attr(a, Attr::Reliability).unwrap(), AttrValue::U64(1));
    let data = bytes(1, 40 * unit as usize + 123);
    s.write(a, 0, &data).unwrap();
    s.write(b, 0, &data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    // Parity reaches flash at checkpoints.
    assert_eq!(s.stats().parity_units_written, 0, "{:?}", s.stats());
    s.checkpoint().unwrap();
    assert!(s.stats().parity_units_written >= 6, "{:?}", s.stats());
    for o in [a, b] {
        let v = unit_of(&s, o, 9 * unit);
        fail_unit(&mut s, v);
    }
    assert_eq!(read_all(&mut s, a).unwrap(), data);
    assert_eq!(s.stats().units_corrected, 1);
    assert_eq!(s.stats().units_rewritten, 1);
    match read_all(&mut s, b) {
        Err(OsdError::Uncorrectable { what, .. }) => {
            assert!(
                what.contains(&format!("bytes {}..{}", 9 * unit, 10 * unit)),
                "{what}"
            );
        }
        other => panic!("unprotected object read {other:?}"),
    }
    // The rebuilt unit was rewritten: read again, nothing to correct.
    assert_eq!(read_all(&mut s, a).unwrap(), data);
    assert_eq!(s.stats().units_corrected, 1);
    // And it survives a reopen.
    let dev = s.close().unwrap();
    let mut s = ObjectStore::open(dev, config(0, 8)).unwrap();
    assert_eq!(read_all(&mut s, a).unwrap(), data);
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(report.damaged.len(), 1, "only object b's unit: {report:?}");
}

#[test]
fn two_parity_units_rebuild_two_failed_units_of_a_group_and_not_three() {
    let mut s = fresh(config(2, 4));
    let unit = s.unit_bytes() as u64;
    let a = oid(1);
    s.create(PartitionId(P), Some(a.object)).unwrap();
    let data = bytes(2, 16 * unit as usize);
    s.write(a, 0, &data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    // Group 1 (units 4..8): two failures.
    for u in [4, 6] {
        let v = unit_of(&s, a, u * unit);
        fail_unit(&mut s, v);
    }
    assert_eq!(read_all(&mut s, a).unwrap(), data);
    assert_eq!(s.stats().units_corrected, 1, "one group rebuilt at once");
    assert_eq!(s.stats().units_rewritten, 2);
    // Group 2 (units 8..12): three failures are too many.
    for u in [8, 9, 11] {
        let v = unit_of(&s, a, u * unit);
        fail_unit(&mut s, v);
    }
    match read_all(&mut s, a) {
        Err(e @ OsdError::Uncorrectable { .. }) => {
            let why = e.to_string();
            assert!(why.contains("3 units of the group are damaged"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    // The scrub names each lost unit with its object and offset.
    let r = s.scrub(false).unwrap();
    let lost: Vec<u64> = r
        .findings
        .iter()
        .filter(|f| f.outcome == ScrubOutcome::Unrepairable)
        .map(|f| f.offset / unit)
        .collect();
    assert_eq!(lost, vec![8, 9, 11], "{r:?}");
    assert!(r.findings.iter().all(|f| f.object == a.to_string()));
}

#[test]
fn overwrites_keep_parity_current_by_delta() {
    let mut s = fresh(config(1, 4));
    let unit = s.unit_bytes() as usize;
    let a = oid(1);
    s.create(PartitionId(P), Some(a.object)).unwrap();
    let mut want = bytes(3, 12 * unit);
    s.write(a, 0, &want).unwrap();
    s.flush(FlushScope::Device).unwrap();
    // Partial and whole-unit overwrites, an append, a truncate into a group.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for i in 0..30 {
        let off = rng.gen_range(0..want.len());
        let len = rng.gen_range(1..3 * unit);
        let d = bytes(100 + i, len);
        s.write(a, off as u64, &d).unwrap();
        if want.len() < off + len {
            want.resize(off + len, 0);
        }
        want[off..off + len].copy_from_slice(&d);
    }
    s.truncate(a, (want.len() - unit - 100) as u64).unwrap();
    want.truncate(want.len() - unit - 100);
    s.flush(FlushScope::Device).unwrap();
    assert!(
        s.stats().parity_data_reads > 0,
        "delta updates read old data"
    );
    let r = s.scrub(false).unwrap();
    assert!(r.findings.is_empty(), "{r:?}");
    assert!(r.parity_groups_checked >= 3, "{r:?}");
    // One failed unit in every group: all rebuilt.
    let units = want.len().div_ceil(unit) as u64;
    for g in 0..units.div_ceil(4) {
        let u = (g * 4 + g % 4).min(units - 1);
        let v = unit_of(&s, a, u * unit as u64);
        fail_unit(&mut s, v);
    }
    assert_eq!(read_all(&mut s, a).unwrap(), want);
}

#[test]
fn scrub_finds_and_repairs_damage() {
    let mut s = fresh(config(1, 8));
    let unit = s.unit_bytes() as u64;
    let (a, b) = (oid(1), oid(2));
    s.create(PartitionId(P), Some(a.object)).unwrap();
    s.create(PartitionId(P), Some(b.object)).unwrap();
    s.set_attr(b, Attr::Reliability, AttrValue::U64(0)).unwrap();
    let data = bytes(4, 20 * unit as usize);
    s.write(a, 0, &data).unwrap();
    s.write(b, 0, &data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    for (o, u) in [(a, 3), (a, 17), (b, 5)] {
        let v = unit_of(&s, o, u * unit);
        fail_unit(&mut s, v);
    }
    let r = s.scrub(false).unwrap();
    let got: Vec<(String, u64, ScrubOutcome)> = r
        .findings
        .iter()
        .map(|f| (f.object.clone(), f.offset, f.outcome))
        .collect();
    assert_eq!(
        got,
        vec![
            (a.to_string(), 3 * unit, ScrubOutcome::Repairable),
            (a.to_string(), 17 * unit, ScrubOutcome::Repairable),
            (b.to_string(), 5 * unit, ScrubOutcome::Unrepairable),
        ]
    );
    // The quick scan reads OOB records only: the failed pages' records cannot be read, so
    // their groups do not check out; b has no parity to check.
    let q = s.scrub_quick().unwrap();
    assert_eq!((q.objects, q.protected_objects), (2, 1), "{q:?}");
    let groups: Vec<u64> = q.findings.iter().map(|f| f.offset / unit).collect();
    assert_eq!(groups, vec![0, 16], "{q:?}");
    let r = s.scrub(true).unwrap();
    assert_eq!((r.repaired, r.unrepairable), (2, 1), "{r:?}");
    assert!(s.scrub_quick().unwrap().findings.is_empty());
    let r = s.scrub(false).unwrap();
    assert_eq!(r.findings.len(), 1, "only b's unit is left: {r:?}");
    assert_eq!(read_all(&mut s, a).unwrap(), data);
}

/// A power cut at every flash command of an overwrite of a protected object, its flush and the
/// checkpoint that writes its parity: after recovery
/// the parity matches the data (the scrub finds nothing), the bytes are old or new, and a failed
/// unit in any group is still rebuilt.
#[test]
fn power_cuts_during_parity_updates_leave_parity_consistent() {
    let cfg = config(1, 4);
    let unit = device().geometry.page_size_bytes as usize;
    let old = bytes(5, 10 * unit);
    let new = bytes(6, 10 * unit);
    for after in 0..80u64 {
        let mut s = fresh(cfg);
        let a = oid(1);
        s.create(PartitionId(P), Some(a.object)).unwrap();
        s.write(a, 0, &old).unwrap();
        s.flush(FlushScope::Device).unwrap();
        let mode = if after % 2 == 0 {
            CutMode::Torn
        } else {
            CutMode::Clean
        };
        s.device_mut().cut_power_after(after, mode);
        // Parity reaches flash with the checkpoint: the cut lands before, during or after it.
        let r = s
            .write(a, unit as u64 / 2, &new[..6 * unit])
            .and_then(|_| s.flush(FlushScope::Device))
            .and_then(|_| s.checkpoint().map(|_| ()));
        let mut dev = s.crash();
        dev.restore_power();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        let got = read_all(&mut s, a).unwrap();
        assert_eq!(got.len(), old.len(), "cut after {after}");
        for (i, &x) in got.iter().enumerate() {
            let written = i >= unit / 2 && i < unit / 2 + 6 * unit;
            assert!(
                x == old[i] || (written && x == new[i - unit / 2]),
                "cut after {after}: byte {i}"
            );
            if r.is_ok() && written {
                assert_eq!(x, new[i - unit / 2], "flushed, cut after {after}: byte {i}");
            }
        }
        let report = s.scrub(false).unwrap();
        assert!(report.findings.is_empty(), "cut after {after}: {report:?}");
        for u in [1u64, 6, 9] {
            let v = unit_of(&s, a, u * unit as u64);
            fail_unit(&mut s, v);
        }
        assert_eq!(read_all(&mut s, a).unwrap(), got, "cut after {after}");
    }
}

fn tiny_image(path: &Path, reliability: u8) -> Vec<u8> {
    let dev = preset("tiny").unwrap();
    let nand = Nand::open(dev, ImageStore::create(path, &dev).unwrap()).unwrap();
    let cfg = OsdConfig {
        fml: FmlConfig::for_blocks(32),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(nand, cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s.create(PartitionId(P), Some(ObjectId(P + 1))).unwrap();
    s.set_attr(
        oid(1),
        Attr::Reliability,
        AttrValue::U64(reliability as u64),
    )
    .unwrap();
    let data = bytes(7, 300_000);
    s.write(oid(1), 0, &data).unwrap();
    s.close().unwrap();
    data
}

/// Bits flipped in the image file's page bytes (past any ECC: the image backend's payload
/// checksum catches them): corrected with parity, an uncorrectable read without.
#[test]
fn flipped_bits_in_the_image_are_corrected_with_parity() {
    let dir = std::env::temp_dir().join(format!("ossd-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for reliability in [0u8, 1] {
        let path = dir.join(format!("r{reliability}.img"));
        let data = tiny_image(&path, reliability);
        let g = preset("tiny").unwrap().geometry;
        let page_area = (4096 + 16 * g.blocks() as u64).next_multiple_of(4096);
        let slot = 16 + g.oob_size_bytes as u64 + g.page_size_bytes as u64;
        let image = std::fs::read(&path).unwrap();
        // One data unit in each parity group of 16: units 3, 19, 35, 51, 67.
        let targets: Vec<u64> = (0..g.pages())
            .map(|i| page_area + i * slot)
            .filter(|&at| {
                let oob = &image[(at + 16) as usize..(at + 16 + DATA_RECORD_BYTES as u64) as usize];
                matches!(Record::decode(oob), Ok(Some(Record::Data { oid: o, offset, .. }))
                    if o == oid(1) && offset % 16 == 3)
            })
            .collect();
        assert_eq!(targets.len(), 5);
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for (i, at) in targets.iter().enumerate() {
            let byte = at + 16 + g.oob_size_bytes as u64 + 100 + i as u64 * 7;
            f.write_all_at(&[image[byte as usize] ^ 0x04], byte)
                .unwrap();
        }
        drop(f);
        let (dev, store) = ImageStore::open(&path).unwrap();
        let nand = Nand::open(dev, store).unwrap();
        let mut s = ObjectStore::open(
            nand,
            OsdConfig {
                fml: FmlConfig::for_blocks(32),
                ..OsdConfig::default()
            },
        )
        .unwrap();
        let mut b = vec![0u8; data.len()];
        let r = s.read(oid(1), 0, &mut b);
        if reliability == 0 {
            assert!(matches!(r, Err(OsdError::Uncorrectable { .. })), "{r:?}");
        } else {
            assert_eq!(r.unwrap(), data.len());
            assert!(b == data);
            assert_eq!(s.stats().units_corrected, 5);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random writes and truncates of two protected objects against an in-memory oracle, then
    /// one failed unit in every parity group: every byte reads back as the oracle has it.
    #[test]
    fn any_single_failure_per_group_is_masked(
        m in 1u8..3,
        k in 2u8..9,
        ops in prop::collection::vec((0u64..2, 0usize..60_000, 1usize..9_000, any::<bool>()), 1..40),
        victim in any::<u64>(),
    ) {
        let mut s = fresh(config(m, k));
        let unit = s.unit_bytes() as usize;
        let mut oracle: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for n in 0..2 {
            s.create(PartitionId(P), Some(ObjectId(P + n))).unwrap();
            oracle.insert(n, Vec::new());
        }
        for (i, &(n, off, len, trunc)) in ops.iter().enumerate() {
            let want = oracle.get_mut(&n).unwrap();
            if trunc {
                s.truncate(oid(n), off as u64).unwrap();
                want.resize(off, 0);
            } else {
                let d = bytes(i as u64, len);
                s.write(oid(n), off as u64, &d).unwrap();
                if want.len() < off + len {
                    want.resize(off + len, 0);
                }
                want[off..off + len].copy_from_slice(&d);
            }
        }
        s.flush(FlushScope::Device).unwrap();
        let r = s.scrub(false).unwrap();
        prop_assert!(r.findings.is_empty(), "{:?}", r.findings);
        for (n, want) in &oracle {
            // Objects under a unit live in small-object pages, without parity.
            if want.len() < unit {
                continue;
            }
            let units = want.len().div_ceil(unit) as u64;
            let k = k as u64;
            for g in 0..units.div_ceil(k) {
                let u = (g * k + victim % k).min(units - 1);
                let mut v = Vec::new();
                prop_assert!(s.peek_read_units(oid(*n), u * unit as u64, 1, &mut v));
                if let Some(&v) = v.first() {
                    fail_unit(&mut s, v);
                }
            }
        }
        for (n, want) in &oracle {
            let got = read_all(&mut s, oid(*n)).map_err(|e| TestCaseError::fail(format!("{n}: {e}")))?;
            prop_assert!(&got == want, "object {} differs", n);
        }
    }
}

/// A whole-group rewrite from the write buffer starts the group's parity afresh: no old
/// contents are read back; buffered units dropped before they reach flash (a truncate) leave
/// parity that is recomputed, never used stale.
#[test]
fn whole_group_rewrites_read_no_old_contents() {
    let mut s = fresh(config(1, 4));
    let unit = s.unit_bytes() as usize;
    let a = oid(1);
    s.create(PartitionId(P), Some(a.object)).unwrap();
    s.write(a, 0, &bytes(8, 16 * unit)).unwrap();
    s.checkpoint().unwrap();
    let reads = s.stats().parity_data_reads;
    let new = bytes(9, 16 * unit);
    s.write(a, 0, &new).unwrap();
    s.checkpoint().unwrap();
    assert_eq!(s.stats().parity_data_reads, reads, "{:?}", s.stats());
    assert!(s.scrub(false).unwrap().findings.is_empty());
    for u in [0u64, 5, 10, 15] {
        let v = unit_of(&s, a, u * unit as u64);
        fail_unit(&mut s, v);
    }
    assert_eq!(read_all(&mut s, a).unwrap(), new);
    // Rewrite groups 2 and 3 whole, then cut the object inside group 2 before the buffer
    // reaches flash.
    let newer = bytes(10, 8 * unit);
    s.write(a, 8 * unit as u64, &newer).unwrap();
    s.truncate(a, (9 * unit + 7) as u64).unwrap();
    s.checkpoint().unwrap();
    let r = s.scrub(false).unwrap();
    assert!(r.findings.is_empty(), "{r:?}");
    let mut want = new[..8 * unit].to_vec();
    want.extend_from_slice(&newer[..unit + 7]);
    let v = unit_of(&s, a, 8 * unit as u64);
    fail_unit(&mut s, v);
    assert_eq!(read_all(&mut s, a).unwrap(), want);
}

/// A misdirected write (the device reports success, the unit never lands where it was meant):
/// the unit reads erased, and parity rebuilds it. (Its rewrite lands in the block the
/// misdirected program skipped a page of, which the device refuses as out of order: the store
/// returns the right bytes and stops taking writes until it is reopened.)
#[test]
fn a_misdirected_unit_is_rebuilt() {
    let mut s = fresh(OsdConfig {
        buffer_bytes: 0,
        ..config(1, 8)
    });
    let unit = s.unit_bytes() as usize;
    let a = oid(1);
    s.create(PartitionId(P), Some(a.object)).unwrap();
    let data = bytes(11, 12 * unit);
    s.write(a, 0, &data[..11 * unit]).unwrap();
    s.device_mut().misdirect_next_program();
    s.write(a, 11 * unit as u64, &data[11 * unit..]).unwrap();
    assert_eq!(s.device_mut().counts().misdirected_writes, 1);
    let r = s.scrub(false).unwrap();
    assert_eq!(r.findings.len(), 1, "{r:?}");
    assert_eq!(
        (r.findings[0].offset, r.findings[0].outcome),
        (11 * unit as u64, ScrubOutcome::Repairable)
    );
    assert!(r.findings[0].what.contains("erased"), "{r:?}");
    assert_eq!(read_all(&mut s, a).unwrap(), data);
    assert_eq!(s.stats().units_corrected, 1);
}

/// A power cut after a read has rewritten one rebuilt unit: recovery rolls the rewrite forward
/// and checks the parity of the groups it touched and of the object's last group, whose
/// damaged unit fails that check. Its parity on flash still rebuilds the unit and must be
/// kept, not recomputed from data that lacks the unit (which lost it for good).
#[test]
fn recovery_keeps_parity_that_rebuilds_a_damaged_unit() {
    let cfg = config(1, 8);
    let unit = device().geometry.page_size_bytes as usize;
    let data = bytes(7, 32 * unit);
    for after in 0..40u64 {
        let (mut s, a) = checkpointed(cfg, &data);
        for u in [3u64, 12, 17, 30] {
            let v = unit_of(&s, a, u * unit as u64);
            fail_unit(&mut s, v);
        }
        s.device_mut().cut_power_after(after, CutMode::Clean);
        let _ = read_all(&mut s, a);
        let mut dev = s.crash();
        dev.restore_power();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        assert_eq!(read_all(&mut s, a).unwrap(), data, "cut after {after}");
    }
}

/// A truncate whose new end falls inside a parity group that holds a damaged unit past that
/// end: the unit is cut off, not rebuilt. A rebuild's rewrite would carry a record newer than
/// the truncated onode already on flash, so roll-forward would map the cut-off unit again, and
/// a write that grows the object would bring its old bytes back after a crash (`ossd torture
/// --reliability 1 --fill 80`, seed 4165530700685967975).
#[test]
fn a_truncate_cuts_off_a_damaged_unit_without_rebuilding_it() {
    let cfg = config(1, 4);
    let unit = device().geometry.page_size_bytes as usize;
    let data = bytes(5, 8 * unit);
    let (mut s, a) = checkpointed(cfg, &data);
    let v = unit_of(&s, a, 6 * unit as u64);
    fail_unit(&mut s, v);
    // Units 5.. go; unit 4, in the damaged unit's group, stays.
    let end = 4 * unit + 100;
    s.truncate(a, end as u64).unwrap();
    let tail = bytes(6, unit);
    s.write(a, 12 * unit as u64, &tail).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let mut expect = data[..end].to_vec();
    expect.resize(12 * unit, 0);
    expect.extend_from_slice(&tail);
    assert_eq!(read_all(&mut s, a).unwrap(), expect);
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    assert_eq!(read_all(&mut s, a).unwrap(), expect, "after a crash");
}

/// A power cut anywhere in a truncate whose new end falls in a group holding a damaged unit the
/// truncate keeps: after recovery the unit reads back. It is rebuilt before the shorter onode
/// can reach flash; after that onode, recovery finds the group's parity stale and recomputes it
/// from the data, which a damaged unit would leave unrebuildable (`ossd torture --reliability 1
/// --fill 80 --seed 51`, seed 6777794186695470792).
#[test]
fn a_truncate_cut_anywhere_keeps_a_damaged_unit_readable() {
    let cfg = config(1, 4);
    let unit = device().geometry.page_size_bytes as usize;
    let data = bytes(8, 12 * unit);
    // Units 3.. go; group 0 keeps units 0-2, and unit 1 is damaged.
    let end = 2 * unit + 500;
    for after in 0..40u64 {
        let (mut s, a) = checkpointed(cfg, &data);
        let v = unit_of(&s, a, unit as u64);
        fail_unit(&mut s, v);
        s.device_mut().cut_power_after(after, CutMode::Clean);
        let done = s.truncate(a, end as u64).is_ok();
        let mut dev = s.crash();
        dev.restore_power();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        let got = read_all(&mut s, a).unwrap_or_else(|e| panic!("cut after {after}: {e}"));
        if done {
            assert_eq!(got, data[..end], "cut after {after}");
        } else {
            assert!(got == data || got == data[..end], "cut after {after}");
        }
    }
}

/// A fresh store holding object 1 with `data`, flushed and checkpointed (its parity on flash).
fn checkpointed(cfg: OsdConfig, data: &[u8]) -> (Store, Oid) {
    let mut s = fresh(cfg);
    let a = oid(1);
    s.create(PartitionId(P), Some(a.object)).unwrap();
    s.write(a, 0, data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    (s, a)
}

/// A power cut inside a checkpoint after it wrote a group's parity but before it committed the
/// index, the parity covering a unit whose program went astray (left erased, so roll-forward
/// cannot see it): recovery rolls the parity forward and must check it against the data, or
/// the group keeps parity that covers a unit it no longer maps and rebuilds nothing after
/// (`ossd torture --reliability 1 --fill 80 --seed 57`, seed 3329150959812950998).
#[test]
fn parity_rolled_forward_past_a_lost_unit_is_checked_against_the_data() {
    let cfg = OsdConfig {
        buffer_bytes: 0,
        ..config(1, 4)
    };
    let unit = device().geometry.page_size_bytes as usize;
    let data = bytes(12, 8 * unit);
    let mut rolled_back = 0;
    for after in 0..30u64 {
        let mut s = fresh(cfg);
        let a = oid(1);
        s.create(PartitionId(P), Some(a.object)).unwrap();
        // Units 0, 1 and 3..8: unit 2, in group 0 (not the object's last group), is a hole.
        s.write(a, 0, &data[..2 * unit]).unwrap();
        s.write(a, 3 * unit as u64, &data[3 * unit..]).unwrap();
        s.checkpoint().unwrap();
        s.device_mut().misdirect_next_program();
        s.write(a, 2 * unit as u64, &data[2 * unit..3 * unit])
            .unwrap();
        s.device_mut().cut_power_after(after, CutMode::Clean);
        let _ = s.checkpoint();
        let mut dev = s.crash();
        dev.restore_power();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        let got = read_all(&mut s, a).unwrap_or_else(|e| panic!("cut after {after}: {e}"));
        let mut hole = data.clone();
        hole[2 * unit..3 * unit].fill(0);
        assert!(got == data || got == hole, "cut after {after}");
        rolled_back += usize::from(got == hole);
        // Whatever unit 2 came back as, the group's parity must rebuild another unit.
        let v = unit_of(&s, a, 0);
        fail_unit(&mut s, v);
        let again = read_all(&mut s, a).unwrap_or_else(|e| panic!("cut after {after}: {e}"));
        assert_eq!(again, got, "cut after {after}");
    }
    assert!(
        rolled_back > 0,
        "no cut left the astray unit out of the index"
    );
}
