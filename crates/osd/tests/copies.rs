//! Issue 16, part 2 for metadata: with `metadata_copies = 2` every metadata unit (index nodes,
//! descriptor pages, small-object and atime pages, checkpoints, transaction records) has a copy
//! in the next unit of its block. Any one of them destroyed (a page the device cannot read,
//! bits flipped past the ECC, a misdirected program) is masked: recovery and every read take
//! the copy, and GC moves the unit from it. Without copies the same damage is an error, never
//! wrong bytes.

mod parity_rig;

use std::collections::BTreeMap;

use flash::fault::Faulty;
use flash::gang::Vpa;
use flash::Nand;
use osd::store::UnitRole;
use osd::{Attr, AttrValue, FlushScope, ObjectStore, Osd, OsdConfig, PartitionId};
use parity_rig::*;

fn with_copies(copies: u8) -> OsdConfig {
    OsdConfig {
        metadata_copies: copies,
        // Small caches, so that reopened stores read their metadata from flash.
        onode_cache_entries: 4,
        ..config(0, 8)
    }
}

/// What each object should hold: its bytes and one user attribute.
type Want = BTreeMap<u64, (Vec<u8>, Vec<u8>)>;

/// Objects of every size (small ones share small-object pages), attributes, a checkpoint,
/// then more written and flushed after it (descriptor pages recovery rolls forward), then a
/// crash. Deterministic: the same device every time.
fn workload(cfg: OsdConfig) -> (Faulty<Nand>, Want) {
    let mut s = fresh(cfg);
    let unit = s.unit_bytes() as usize;
    let mut want = Want::new();
    for n in 1..=24u64 {
        let o = oid(n);
        s.create(PartitionId(P), Some(o.object)).unwrap();
        let len = match n % 4 {
            0 => 100 + n as usize,
            1 => unit * 3 + 17,
            2 => unit / 2,
            _ => unit * 9,
        };
        let data = bytes(n, len);
        s.write(o, 0, &data).unwrap();
        let attr = format!("attr of {n}").into_bytes();
        s.set_attr(o, Attr::User(0x1000), AttrValue::Bytes(attr.clone()))
            .unwrap();
        want.insert(n, (data, attr));
        if n == 12 {
            s.checkpoint().unwrap();
        }
    }
    s.flush(FlushScope::Device).unwrap();
    (s.crash(), want)
}

fn check(s: &mut ObjectStore<Faulty<Nand>>, want: &Want) -> Result<(), String> {
    for (n, (data, attr)) in want {
        let o = oid(*n);
        let got = read_all(s, o).map_err(|e| format!("object {n}: {e}"))?;
        if &got != data {
            return Err(format!("object {n}: wrong bytes"));
        }
        match s.get_attr(o, Attr::User(0x1000)) {
            Ok(AttrValue::Bytes(b)) if &b == attr => {}
            other => return Err(format!("object {n}: attribute {other:?}")),
        }
    }
    Ok(())
}

/// Every metadata unit the crashed store holds (valid, with a record of a metadata kind).
fn metadata_units(dev: Faulty<Nand>, cfg: OsdConfig) -> (Faulty<Nand>, Vec<Vpa>) {
    let mut s = ObjectStore::open(dev, cfg).unwrap();
    let units = s.fml().layout().superblocks * s.fml().layout().units_per_superblock;
    let mut meta = Vec::new();
    for v in 0..units {
        if let Ok(UnitRole::Copied { copy: false, .. }) = s.unit_role(v) {
            meta.push(Vpa(v));
        }
    }
    (s.crash(), meta)
}

#[test]
fn every_metadata_unit_destroyed_alone_is_masked_by_its_copy() {
    let cfg = with_copies(2);
    let (dev, _) = workload(cfg);
    let (_, meta) = metadata_units(dev, cfg);
    assert!(meta.len() >= 8, "{} metadata units", meta.len());
    for v in &meta {
        for copy in [false, true] {
            let (dev, want) = workload(cfg);
            let at = Vpa(v.0 + copy as u32);
            let mut s = ObjectStore::open(dev, cfg).unwrap();
            fail_unit(&mut s, at);
            // Reopen with the damage: recovery reads what it needs through the copy.
            let mut s = ObjectStore::open(s.crash(), cfg)
                .unwrap_or_else(|e| panic!("unit {at:?} (copy {copy}) damaged: open: {e}"));
            check(&mut s, &want)
                .unwrap_or_else(|e| panic!("unit {at:?} (copy {copy}) damaged: {e}"));
            if !copy {
                assert!(
                    s.stats().metadata_read_from_copy > 0 || s.recovery().units_damaged == 0,
                    "{:?}",
                    s.stats()
                );
            }
            // And GC moving everything keeps it so.
            let report = s.fsck().unwrap();
            assert!(report.problems.is_empty(), "{report:?}");
        }
    }
}

/// fsck of an undamaged store lists nothing, with copies or without: without them the unit
/// after a metadata unit is another unit, not a damaged copy (every `ossd fsck` of a store
/// without copies once listed "masked" pairs and failed).
#[test]
fn fsck_of_an_undamaged_store_lists_no_masked_pair() {
    for copies in [1, 2] {
        let cfg = with_copies(copies);
        let (dev, want) = workload(cfg);
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        check(&mut s, &want).unwrap();
        let report = s.fsck().unwrap();
        assert!(
            report.problems.is_empty() && report.damaged.is_empty() && report.masked.is_empty(),
            "copies {copies}: {report:?}"
        );
    }
}

#[test]
fn without_copies_metadata_damage_is_an_error_never_wrong_bytes() {
    let cfg = with_copies(1);
    let (dev, _) = workload(cfg);
    let mut s = ObjectStore::open(dev, cfg).unwrap();
    let units = s.fml().layout().superblocks * s.fml().layout().units_per_superblock;
    let meta: Vec<u32> = (0..units)
        .filter(|&v| matches!(s.unit_role(v), Ok(UnitRole::Unprotected)))
        .collect();
    drop(s);
    let mut failed = 0;
    for v in meta {
        let (dev, want) = workload(cfg);
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        fail_unit(&mut s, Vpa(v));
        let r = ObjectStore::open(s.crash(), cfg)
            .map_err(|e| e.to_string())
            .and_then(|mut s| check(&mut s, &want));
        if let Err(e) = r {
            assert!(!e.contains("wrong bytes"), "unit {v}: {e}");
            failed += 1;
        }
    }
    assert!(failed > 0, "some metadata damage must show without copies");
}

#[test]
fn a_unit_and_its_copy_both_destroyed_is_an_error() {
    let cfg = with_copies(2);
    let (dev, _) = workload(cfg);
    let (_, meta) = metadata_units(dev, cfg);
    let mut failed = 0;
    for v in &meta {
        let (dev, want) = workload(cfg);
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        fail_unit(&mut s, *v);
        fail_unit(&mut s, Vpa(v.0 + 1));
        let r = ObjectStore::open(s.crash(), cfg)
            .map_err(|e| e.to_string())
            .and_then(|mut s| check(&mut s, &want));
        if let Err(e) = r {
            assert!(!e.contains("wrong bytes"), "unit {v:?}: {e}");
            failed += 1;
        }
    }
    assert!(failed > 0);
}

/// A descriptor page whose program the device sent elsewhere: the page reads erased, its copy
/// answers, at once and after a crash.
#[test]
fn a_misdirected_descriptor_page_is_read_from_its_copy() {
    let cfg = OsdConfig {
        buffer_bytes: 0,
        ..with_copies(2)
    };
    let mut s = fresh(cfg);
    let o = oid(1);
    s.create(PartitionId(P), Some(o.object)).unwrap();
    let data = bytes(5, 3 * s.unit_bytes() as usize);
    s.write(o, 0, &data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.set_attr(o, Attr::User(0x1001), AttrValue::Bytes(b"moved".to_vec()))
        .unwrap();
    s.device_mut().misdirect_next_program();
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(s.device_mut().counts().misdirected_writes, 1);
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    assert_eq!(read_all(&mut s, o).unwrap(), data);
    assert_eq!(
        s.get_attr(o, Attr::User(0x1001)).unwrap(),
        AttrValue::Bytes(b"moved".to_vec())
    );
    assert!(s.stats().metadata_read_from_copy > 0, "{:?}", s.stats());
}

/// GC moves a metadata unit it cannot read from its copy, with a new copy beside it; the
/// store then survives the old block's erase and a reopen.
#[test]
fn gc_moves_a_damaged_metadata_unit_from_its_copy() {
    // One stream for everything: descriptor and small-object pages share blocks with a scratch
    // object's data, which dies as it is overwritten, so GC must move the metadata.
    let cfg = OsdConfig {
        placement: osd::Placement::Combined,
        ..with_copies(2)
    };
    let mut s = fresh(cfg);
    let unit = s.unit_bytes() as usize;
    let scratch = oid(99);
    s.create(PartitionId(P), Some(scratch.object)).unwrap();
    let mut want = Want::new();
    for n in 1..=40u64 {
        let o = oid(n);
        s.create(PartitionId(P), Some(o.object)).unwrap();
        let data = bytes(n, 200 + n as usize);
        s.write(o, 0, &data).unwrap();
        let attr = format!("attr of {n}").into_bytes();
        s.set_attr(o, Attr::User(0x1000), AttrValue::Bytes(attr.clone()))
            .unwrap();
        want.insert(n, (data, attr));
        s.write(scratch, 0, &bytes(1000 + n, 8 * unit)).unwrap();
        s.flush(FlushScope::Device).unwrap();
    }
    s.checkpoint().unwrap();
    let (dev, meta) = metadata_units(s.crash(), cfg);
    let mut s = ObjectStore::open(dev, cfg).unwrap();
    let layout = *s.fml().layout();
    let mut blocks = BTreeMap::new();
    for v in &meta {
        // One of each pair: the unit itself or its copy, alternately.
        fail_unit(&mut s, Vpa(v.0 + (v.0 % 2)));
        let b = layout.superblock_of(*v);
        blocks.insert(b, s.fml().blocks()[b as usize].erase_count);
    }
    let erased = |s: &ObjectStore<Faulty<Nand>>| {
        blocks
            .iter()
            .all(|(&b, &ec)| s.fml().blocks()[b as usize].erase_count > ec)
    };
    // A large scratch object overwritten at random places: blocks keep some live units
    // each, so GC also takes the blocks of the metadata.
    let span = 2000u64;
    s.write(scratch, 0, &bytes(7, span as usize * unit))
        .unwrap();
    let mut round = 0;
    while !erased(&s) && round < 3000 {
        for i in 0..8 {
            let at = (round * 7919 + i * 104_729) % span;
            s.write(scratch, at * unit as u64, &bytes(round, unit))
                .unwrap();
        }
        s.flush(FlushScope::Device).unwrap();
        round += 1;
    }
    // GC leaves blocks that stay nearly full of live metadata (greedy victims), but moves
    // many a damaged unit.
    assert!(
        s.stats().metadata_moved_from_copy >= meta.len() as u64 / 4,
        "{} of {} damaged metadata units moved from their copy in {round} rounds, {:?}",
        s.stats().metadata_moved_from_copy,
        meta.len(),
        s.fml().stats(),
    );
    assert_eq!(s.fml().stats().units_lost, 0, "{:?}", s.fml().stats());
    check(&mut s, &want).unwrap();
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    check(&mut s, &want).unwrap();
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(report.damaged.is_empty(), "{report:?}");
}
