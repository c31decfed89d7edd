//! Issue 16 item 3: the background scrub. Repeated idle calls (`ObjectStore::background`) walk
//! every object's data units a parity group at a time, find damage, repair what parity
//! rebuilds, count it all, and keep the unrepairable findings; a power cut in a repair leaves a
//! store that recovers with every flushed write intact.

mod parity_rig;

use flash::fault::CutMode;
use flash::Flash;
use osd::store::ScrubOutcome;
use osd::{
    Attr, AttrValue, BackgroundScrubConfig, FlushScope, ObjectStore, Oid, Osd, OsdError,
    PartitionId,
};
use parity_rig::*;

const SECOND: u64 = 1_000_000_000;

/// A scrub fast enough for tests: every idle second earns a whole call's worth.
fn scrubbing() -> BackgroundScrubConfig {
    BackgroundScrubConfig {
        units_per_second: 1_000_000,
        max_units_per_call: 64,
        ..BackgroundScrubConfig::default()
    }
}

/// Idle seconds until the background scrub has completed `passes` passes in all.
fn idle_until_passes(s: &mut Store, passes: u64) -> Result<u64, OsdError> {
    let mut t = s.now();
    for calls in 1..=10_000 {
        t = s.background(t, t + SECOND)?.max(t + SECOND);
        if s.stats().bg_scrub_passes >= passes {
            return Ok(calls);
        }
    }
    panic!("no pass after 10,000 idle seconds: {:?}", s.stats());
}

/// A protected object (4 groups of 8 units, one parity unit each), flushed with its parity.
fn protected_store(seed: u64) -> (Store, Oid, Vec<u8>) {
    let mut s = fresh(config(1, 8));
    let unit = s.unit_bytes();
    let a = oid(1);
    s.create(PartitionId(P), Some(a.object)).unwrap();
    let data = bytes(seed, 32 * unit);
    s.write(a, 0, &data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    (s, a, data)
}

#[test]
fn idle_calls_find_and_repair_one_failed_unit_per_group() {
    let (mut s, a, data) = protected_store(1);
    let unit = s.unit_bytes() as u64;
    for u in [2u64, 9, 20, 31] {
        let v = unit_of(&s, a, u * unit);
        fail_unit(&mut s, v);
    }
    // Off by default: idle time reads nothing.
    let t = s.now();
    let before = s.fml().flash().stats();
    s.background(t, t + 10 * SECOND).unwrap();
    assert_eq!(s.stats().bg_scrub_units_checked, 0);
    assert_eq!(
        s.fml().flash().stats(),
        before,
        "the scrub is off by default"
    );

    s.set_background_scrub(scrubbing()).unwrap();
    let calls = idle_until_passes(&mut s, 1).unwrap();
    assert!(calls >= 1, "{calls}");
    let st = s.stats();
    assert_eq!(st.bg_scrub_units_checked, 32, "{st:?}");
    assert_eq!(st.bg_scrub_damage_found, 4, "{st:?}");
    assert_eq!(st.bg_scrub_repaired, 4, "{st:?}");
    assert_eq!(st.bg_scrub_unrepairable, 0, "{st:?}");
    assert_eq!(st.units_rewritten, 4, "{st:?}");
    assert_eq!(s.background_scrub_findings().count(), 0);
    // The units were rewritten: a read needs no correction.
    let corrected = s.stats().units_corrected;
    assert_eq!(read_all(&mut s, a).unwrap(), data);
    assert_eq!(s.stats().units_corrected, corrected);
    // The scrub command agrees, and the repair survives a reopen.
    assert!(s.scrub(false).unwrap().findings.is_empty());
    let dev = s.close().unwrap();
    let mut s = ObjectStore::open(dev, config(1, 8)).unwrap();
    assert_eq!(read_all(&mut s, a).unwrap(), data);
    assert_eq!(s.stats().units_corrected, 0);
}

#[test]
fn the_cursor_wraps_and_the_next_pass_counts() {
    let (mut s, a, _) = protected_store(2);
    let b = oid(2);
    s.create(PartitionId(P), Some(b.object)).unwrap();
    s.set_attr(b, Attr::Reliability, AttrValue::U64(0)).unwrap();
    let unit = s.unit_bytes();
    s.write(b, 0, &bytes(3, 40 * unit)).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s.set_background_scrub(BackgroundScrubConfig {
        max_units_per_call: 8,
        ..scrubbing()
    })
    .unwrap();
    let calls = idle_until_passes(&mut s, 1).unwrap();
    // 72 units, 8 a call (one group of a each, two spans of 16 of b's): many calls, not one.
    assert!(calls >= 5, "{calls}");
    let st = s.stats();
    assert_eq!((st.bg_scrub_units_checked, st.bg_scrub_passes), (72, 1));
    assert_eq!(st.bg_scrub_groups_checked, 4, "a's groups: {st:?}");
    assert_eq!(st.bg_scrub_damage_found, 0);
    let (at, _) = s.background_scrub_cursor();
    assert!(at == a || at == b || at.as_u128() == 0, "{at}");
    idle_until_passes(&mut s, 2).unwrap();
    let st = s.stats();
    assert_eq!((st.bg_scrub_units_checked, st.bg_scrub_passes), (144, 2));
    assert_eq!(st.bg_scrub_groups_checked, 8);
    // A step is a mechanism apart from the idle policy: it checks whole groups.
    let step = s.scrub_step(1).unwrap();
    assert!(
        step.units_checked == 8 || step.units_checked == 16,
        "{step:?}"
    );
}

#[test]
fn damage_without_parity_is_unrepairable_counted_and_still_an_error() {
    let mut s = fresh(config(0, 8));
    let unit = s.unit_bytes() as u64;
    let b = oid(1);
    s.create(PartitionId(P), Some(b.object)).unwrap();
    let data = bytes(4, 20 * unit as usize);
    s.write(b, 0, &data).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let v = unit_of(&s, b, 5 * unit);
    fail_unit(&mut s, v);
    s.set_background_scrub(scrubbing()).unwrap();
    idle_until_passes(&mut s, 2).unwrap();
    let st = s.stats();
    assert_eq!(
        (st.bg_scrub_unrepairable, st.bg_scrub_repaired),
        (2, 0),
        "{st:?}"
    );
    assert_eq!(st.bg_scrub_damage_found, 2);
    assert_eq!(st.units_rewritten, 0);
    // Found by both passes, listed once.
    let found: Vec<_> = s.background_scrub_findings().cloned().collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (&found[0].object, found[0].offset, found[0].outcome),
        (&b.to_string(), 5 * unit, ScrubOutcome::Unrepairable)
    );
    match read_all(&mut s, b) {
        Err(OsdError::Uncorrectable { .. }) => {}
        other => panic!("a lost unit read {other:?}"),
    }
}

#[test]
fn the_findings_list_is_bounded() {
    let mut s = fresh(config(0, 8));
    let unit = s.unit_bytes() as u64;
    let b = oid(1);
    s.create(PartitionId(P), Some(b.object)).unwrap();
    s.write(b, 0, &bytes(5, 20 * unit as usize)).unwrap();
    s.flush(FlushScope::Device).unwrap();
    for u in [1u64, 4, 7, 12] {
        let v = unit_of(&s, b, u * unit);
        fail_unit(&mut s, v);
    }
    s.set_background_scrub(BackgroundScrubConfig {
        max_findings: 2,
        ..scrubbing()
    })
    .unwrap();
    idle_until_passes(&mut s, 1).unwrap();
    assert_eq!(s.stats().bg_scrub_unrepairable, 4);
    let offsets: Vec<u64> = s.background_scrub_findings().map(|f| f.offset).collect();
    assert_eq!(offsets, vec![7 * unit, 12 * unit], "the newest two");
}

/// A power cut at every flash command of background scrub steps repairing damaged units:
/// recovery succeeds and the object reads back whole (repaired, or still rebuilt from parity).
#[test]
fn power_cuts_during_background_repairs_lose_nothing() {
    let cfg = config(1, 8);
    let mut cuts_in_repairs = 0;
    for after in 0..60u64 {
        let (mut s, a, data) = protected_store(6);
        let unit = s.unit_bytes() as u64;
        for u in [3u64, 12, 17, 30] {
            let v = unit_of(&s, a, u * unit);
            fail_unit(&mut s, v);
        }
        s.set_background_scrub(scrubbing()).unwrap();
        let mode = if after % 2 == 0 {
            CutMode::Torn
        } else {
            CutMode::Clean
        };
        s.device_mut().cut_power_after(after, mode);
        let r = idle_until_passes(&mut s, 1);
        let repaired = s.stats().bg_scrub_repaired;
        if r.is_err() {
            cuts_in_repairs += 1;
        }
        let mut dev = s.crash();
        dev.restore_power();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        assert_eq!(read_all(&mut s, a).unwrap(), data, "cut after {after}");
        let report = s.scrub(false).unwrap();
        assert_eq!(report.unrepairable, 0, "cut after {after}: {report:?}");
        if r.is_ok() {
            assert_eq!(repaired, 4, "cut after {after}");
        }
        let fsck = s.fsck().unwrap();
        assert!(fsck.problems.is_empty(), "cut after {after}: {fsck:?}");
    }
    assert!(
        cuts_in_repairs > 10,
        "{cuts_in_repairs} cuts landed in repairs"
    );
}

#[test]
fn the_scrub_charges_its_reads_and_gc_comes_first() {
    let (mut s, _, _) = protected_store(7);
    s.set_background_scrub(BackgroundScrubConfig {
        units_per_second: 1_000,
        max_units_per_call: 256,
        ..BackgroundScrubConfig::default()
    })
    .unwrap();
    // A millisecond of idle time earns one unit: a whole group is checked (never half one),
    // and its reads take virtual time.
    let t = s.now();
    let done = s.background(t, t + 1_000_000).unwrap();
    assert_eq!(s.stats().bg_scrub_units_checked, 8);
    assert!(done > t, "the reads took no time");
    // The same window offered again earns nothing more.
    s.background(t, t + 1_000_000).unwrap();
    assert_eq!(s.stats().bg_scrub_units_checked, 8);
    // A far `until` is capped at max_units_per_call.
    let t = s.now();
    s.background(t, t + 1_000 * SECOND).unwrap();
    assert!(s.stats().bg_scrub_units_checked <= 8 + 256 + 8);
}

#[test]
fn bad_settings_are_clear_errors() {
    let d = BackgroundScrubConfig::default();
    assert_eq!(
        (
            d.units_per_second,
            d.max_units_per_call,
            d.repair,
            d.max_findings
        ),
        (0, 256, true, 64)
    );
    let mut s = fresh(config(0, 8));
    for bad in [
        BackgroundScrubConfig {
            max_units_per_call: 0,
            ..d
        },
        BackgroundScrubConfig {
            max_findings: 5000,
            ..d
        },
        BackgroundScrubConfig {
            units_per_second: u64::MAX,
            ..d
        },
    ] {
        match s.set_background_scrub(bad) {
            Err(OsdError::InvalidArgument(why)) => assert!(why.contains("background scrub")),
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
    assert_eq!(s.background_scrub(), d, "a bad setting changes nothing");
}
