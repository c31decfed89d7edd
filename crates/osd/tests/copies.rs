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

/// The object the GC tests overwrite: its dead units make GC take the metadata's blocks.
const SCRATCH: u64 = 99;

/// Forty small objects with an attribute each, with metadata copies and one stream for
/// everything (descriptor and small-object pages share blocks with the scratch object's data,
/// which dies as it is overwritten, so GC must move the metadata), a checkpoint, a crash and a
/// reopen: the store, its configuration, what each object holds, and the metadata units.
fn forty_objects_beside_a_scratch() -> (ObjectStore<Faulty<Nand>>, OsdConfig, Want, Vec<Vpa>) {
    let cfg = OsdConfig {
        placement: osd::Placement::Combined,
        ..with_copies(2)
    };
    let mut s = fresh(cfg);
    let unit = s.unit_bytes() as usize;
    let scratch = oid(SCRATCH);
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
    (ObjectStore::open(dev, cfg).unwrap(), cfg, want, meta)
}

/// GC moves a metadata unit it cannot read from its copy, with a new copy beside it; the
/// store then survives the old block's erase and a reopen.
#[test]
fn gc_moves_a_damaged_metadata_unit_from_its_copy() {
    let (mut s, cfg, want, meta) = forty_objects_beside_a_scratch();
    let unit = s.unit_bytes();
    let scratch = oid(SCRATCH);
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

/// The objects a descriptor or small-object page at `v` holds, read from the raw device
/// (`None` for any other unit).
fn objects_in(s: &mut ObjectStore<Faulty<Nand>>, v: Vpa) -> Option<Vec<osd::Oid>> {
    let layout = *s.fml().layout();
    let page_bytes = flash::Flash::config(s.device_mut())
        .geometry
        .page_size_bytes as usize;
    let mut data = vec![0u8; page_bytes * layout.pages_per_unit() as usize];
    let mut oob = [0u8; osd::record::RECORD_MAX_BYTES];
    let mut no_oob = [0u8; 0];
    for (i, chunk) in data.chunks_mut(page_bytes).enumerate() {
        let o: &mut [u8] = if i == 0 { &mut oob } else { &mut no_oob };
        s.device_mut()
            .inner_mut()
            .peek_page(layout.page(v, i as u32), chunk, o)?;
    }
    match osd::record::Record::decode(&oob) {
        Ok(Some(osd::record::Record::Descriptor { .. } | osd::record::Record::Small { .. })) => {
            osd::store::objects_in_unit(&oob, &data)
        }
        _ => None,
    }
}

/// Docs/RELIABILITY.md finding 28: GC could read neither a descriptor page (or small-object
/// page) nor its copy, erased the block anyway, and the page was programmed again while the
/// checkpoint still pointed at it; the next open refused the whole image ("unit 80 is
/// referenced twice"). Now the onodes and entries it held are written again from the cache or
/// marked lost before the erase: the store opens, the objects they belonged to fail their
/// reads (never wrong bytes), every other object reads back, and the damaged ones can be
/// removed.
#[test]
fn gc_losing_a_descriptor_page_and_its_copy_leaves_a_store_that_opens() {
    let (mut s, cfg, want, meta) = forty_objects_beside_a_scratch();
    let unit = s.unit_bytes();
    let scratch = oid(SCRATCH);
    let layout = *s.fml().layout();
    let mut blocks = BTreeMap::new();
    let mut struck = std::collections::BTreeSet::new();
    for v in &meta {
        let Some(objects) = objects_in(&mut s, *v) else {
            continue;
        };
        if objects.contains(&scratch) {
            // The churn below writes the scratch object: its onode stays readable.
            continue;
        }
        fail_unit(&mut s, *v);
        fail_unit(&mut s, Vpa(v.0 + 1));
        struck.extend(objects);
        let b = layout.superblock_of(*v);
        blocks.insert(b, s.fml().blocks()[b as usize].erase_count);
    }
    assert!(
        !blocks.is_empty(),
        "no descriptor or small-object page found"
    );
    let erased = |s: &ObjectStore<Faulty<Nand>>| {
        blocks
            .iter()
            .any(|(&b, &ec)| s.fml().blocks()[b as usize].erase_count > ec)
    };
    let span = 2000u64;
    let mut scratch_bytes = bytes(7, span as usize * unit);
    s.write(scratch, 0, &scratch_bytes).unwrap();
    let mut round = 0;
    let mut reopened = 0;
    // Units GC lost, and onodes or small-object entries lost with them, over every open.
    let mut lost = (0, 0);
    while round < 3000 && reopened < 100 {
        for i in 0..8 {
            let at = ((round * 7919 + i * 104_729) % span) as usize * unit;
            let b = bytes(round, unit);
            s.write(scratch, at as u64, &b).unwrap();
            scratch_bytes[at..at + unit].copy_from_slice(&b);
        }
        s.flush(FlushScope::Device).unwrap();
        round += 1;
        if erased(&s) {
            lost.0 += s.fml().stats().units_lost;
            lost.1 += s.stats().metadata_entries_lost;
            // A crash in every round once GC erased a block of lost pages: each open finds
            // what the checkpoint then references, whether the pages were programmed again
            // or not yet.
            s = ObjectStore::open(s.crash(), cfg)
                .unwrap_or_else(|e| panic!("open in round {round}: {e}"));
            reopened += 1;
        }
    }
    assert!(erased(&s), "no damaged block erased in {round} rounds");
    assert!(lost.0 > 0 && lost.1 > 0, "units and entries lost: {lost:?}");
    // Reopen: the image is not refused, and the units written where the lost pages were
    // read back (recovery once dropped them as stale references).
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap_or_else(|e| panic!("open: {e}"));
    assert!(
        read_all(&mut s, scratch).unwrap() == scratch_bytes,
        "the scratch object reads back wrong"
    );
    let mut failed = Vec::new();
    for (n, (data, attr)) in &want {
        let o = oid(*n);
        let r = read_all(&mut s, o).and_then(|got| Ok((got, s.get_attr(o, Attr::User(0x1000))?)));
        match r {
            Ok((got, AttrValue::Bytes(a))) => {
                assert_eq!(&got, data, "object {n}: wrong bytes");
                assert_eq!(&a, attr, "object {n}: wrong attribute");
            }
            Ok((_, other)) => panic!("object {n}: attribute {other:?}"),
            Err(e) => {
                assert!(struck.contains(&o), "object {n}, not struck: {e}");
                failed.push(o);
            }
        }
    }
    assert!(!failed.is_empty(), "no object lost its onode or entry");
    assert!(!s.fsck().unwrap().problems.is_empty());
    // The damaged objects can be removed, and then the store is whole again.
    for o in &failed {
        s.remove(*o).unwrap_or_else(|e| panic!("remove {o}: {e}"));
    }
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    for (n, (data, _)) in &want {
        let o = oid(*n);
        if !failed.contains(&o) {
            assert_eq!(&read_all(&mut s, o).unwrap(), data, "object {n}");
        }
    }
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
}

/// Without metadata copies the checkpoint has none either: when the newest are destroyed,
/// recovery finds an older one, whose descriptor pages and index nodes GC may have erased since
/// (it erases them only once a newer checkpoint is durable). Recovery either rolls forward from
/// it to the last state, when everything it names is still on flash, or refuses the image as
/// having lost its newest checkpoint, naming no unit (finding 31: `ossd torture --stack ofs
/// --faults all --fill 80 --seed 58`, seeds 6172477060083096476 and 7892539934858586374,
/// pinned in crates/torture/tests/files.rs, once refused it naming a unit no fault struck,
/// "unit 386 was never programmed"); never an older state.
#[test]
fn destroyed_newer_checkpoints_never_bring_back_an_older_state() {
    let cfg = OsdConfig {
        placement: osd::Placement::Combined,
        ..with_copies(1)
    };
    let mut s = fresh(cfg);
    let unit = s.unit_bytes() as usize;
    let scratch = oid(99);
    s.create(PartitionId(P), Some(scratch.object)).unwrap();
    let mut want = BTreeMap::new();
    for n in 1..=40u64 {
        let o = oid(n);
        s.create(PartitionId(P), Some(o.object)).unwrap();
        let data = bytes(n, 200 + n as usize);
        s.write(o, 0, &data).unwrap();
        want.insert(n, data);
        s.flush(FlushScope::Device).unwrap();
    }
    s.checkpoint().unwrap();
    let span = 2000u64;
    let mut scratch_bytes = bytes(7, span as usize * unit);
    s.write(scratch, 0, &scratch_bytes).unwrap();
    for round in 0..400u64 {
        for i in 0..8 {
            let at = ((round * 7919 + i * 104_729) % span) as usize * unit;
            let b = bytes(round, unit);
            s.write(scratch, at as u64, &b).unwrap();
            scratch_bytes[at..at + unit].copy_from_slice(&b);
        }
        // Onodes rewritten too: descriptor pages die and GC erases their blocks.
        let n = 1 + round % 40;
        let b = bytes(round, 100);
        s.write(oid(n), 0, &b).unwrap();
        want.get_mut(&n).unwrap()[..100].copy_from_slice(&b);
        s.flush(FlushScope::Device).unwrap();
    }
    s.checkpoint().unwrap();
    // Every checkpoint on flash but the oldest is destroyed: recovery finds that one, written
    // before the churn, whose descriptor pages and index nodes GC has erased since.
    destroy_all_checkpoints_but_the_oldest(&mut s);
    // Refused as such, or, where everything that checkpoint names is still on flash, rolled
    // forward to the last state: never an older one, never a refusal naming a unit no fault
    // struck.
    match ObjectStore::open(s.crash(), cfg) {
        Err(osd::OsdError::Corrupted { what, unit, .. }) => {
            assert!(what.contains("newest checkpoint is lost"), "{what}");
            assert_eq!(unit, None);
        }
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(mut s) => {
            assert!(
                read_all(&mut s, scratch).unwrap() == scratch_bytes,
                "scratch"
            );
            for (n, data) in &want {
                assert_eq!(&read_all(&mut s, oid(*n)).unwrap(), data, "object {n}");
            }
        }
    }
}

/// Every checkpoint page on flash but the oldest fails (as a page no ECC corrects).
fn destroy_all_checkpoints_but_the_oldest(s: &mut Store) {
    let layout = *s.fml().layout();
    let units = layout.superblocks * layout.units_per_superblock;
    let page_bytes = flash::Flash::config(s.device_mut())
        .geometry
        .page_size_bytes as usize;
    let mut found: Vec<(u64, u32)> = Vec::new();
    for v in 0..units {
        let mut data = vec![0u8; page_bytes];
        let mut oob = [0u8; osd::record::RECORD_MAX_BYTES];
        if s.device_mut()
            .inner_mut()
            .peek_page(layout.page(Vpa(v), 0), &mut data, &mut oob)
            .is_none()
        {
            continue;
        }
        if let Ok(Some(osd::record::Record::Checkpoint { .. })) = osd::record::Record::decode(&oob)
        {
            found.push((u64::from_le_bytes(data[40..48].try_into().unwrap()), v));
        }
    }
    found.sort_unstable();
    assert!(found.len() >= 2, "{found:?}");
    for &(_, at) in &found[1..] {
        fail_unit(s, Vpa(at));
    }
}

/// Finding 34 (docs/RELIABILITY.md): an object created and written past the write buffer,
/// then a crash before its onode reached flash; the recovery after it took its units for
/// garbage. The same id created again (as OFS gives an inode number again after such a crash)
/// and written sparsely, then every checkpoint since the oldest destroyed (no metadata
/// copies): roll-forward from that one meets the first incarnation's units again, and they
/// must not fill the second's holes.
#[test]
fn an_earlier_incarnations_units_never_come_back_under_a_reused_id() {
    let cfg = OsdConfig {
        placement: osd::Placement::Combined,
        buffer_bytes: 32 << 10,
        ..with_copies(1)
    };
    let mut s = fresh(cfg);
    let unit = s.unit_bytes() as usize;
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    let x = oid(5);
    s.create(PartitionId(P), Some(x.object)).unwrap();
    // More than the write buffer holds: units reach flash; the onode, never ready while some
    // of its object's units wait in the buffer, does not.
    s.write(x, 0, &bytes(1, 64 * unit)).unwrap();
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    assert!(
        matches!(
            s.get_attr(x, Attr::LogicalLength),
            Err(osd::OsdError::NotFound(_))
        ),
        "the first incarnation must not have survived its crash"
    );
    s.create(PartitionId(P), Some(x.object)).unwrap();
    let tail = bytes(2, unit);
    s.write(x, 40 * unit as u64, &tail).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    destroy_all_checkpoints_but_the_oldest(&mut s);
    let mut s = ObjectStore::open(s.crash(), cfg).unwrap();
    let mut want = vec![0u8; 40 * unit];
    want.extend_from_slice(&tail);
    assert!(
        read_all(&mut s, x).unwrap() == want,
        "the first incarnation's bytes came back in the second's holes"
    );
    assert!(s.recovery().earlier_incarnation_units > 0);
}
