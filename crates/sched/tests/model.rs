//! OAQ against a plain model: random submissions, priority changes and dispatches. Checks that
//! every submitted sector range is dispatched exactly once, that an OREQ's OIOs tile its range
//! without gaps or overlaps and all belong to its object, direction and priority, that no
//! merged OREQ exceeds the size limit, and that every dispatch takes the highest priority
//! queued, oldest first within it.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sched::{Direction, Oaq, OaqConfig, ObjectId, Oio, OioId, Priority};

#[derive(Clone, Debug)]
enum Step {
    Submit {
        oid: u64,
        write: bool,
        offset: u64,
        sectors: u32,
        priority: Option<u8>,
    },
    SetPriority {
        oid: u64,
        priority: Option<u8>,
    },
    Dispatch,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0..4u64, any::<bool>(), 0..48u64, 1..80u32, prop::option::weighted(0.3, 0..4u8))
            .prop_map(|(oid, write, slot, sectors, priority)| Step::Submit {
                oid,
                write,
                // Mostly on 8-sector boundaries, so contiguous runs are common.
                offset: slot * 8,
                sectors: if sectors > 60 { sectors } else { sectors.div_ceil(8) * 8 },
                priority,
            }),
        1 => (0..4u64, prop::option::of(0..4u8))
            .prop_map(|(oid, priority)| Step::SetPriority { oid, priority }),
        3 => Just(Step::Dispatch),
    ]
}

struct Model {
    /// Submitted, not yet dispatched OIOs with their effective priority and creation order.
    pending: BTreeMap<OioId, (Oio, Priority)>,
    attr: BTreeMap<u64, u8>,
    dispatched: BTreeMap<OioId, u32>,
}

fn check_dispatch(q: &mut Oaq, m: &mut Model, max: u32) -> bool {
    let Some(r) = q.dispatch() else {
        assert!(m.pending.is_empty(), "OAQ is empty but OIOs are pending");
        return false;
    };
    // Priority order: nothing pending outranks the dispatched OREQ.
    let top = m.pending.values().map(|(_, p)| *p).max().unwrap();
    assert_eq!(r.priority, top, "dispatched {r:?} while {top:?} was queued");
    // FIFO within a level: the OREQ holds the oldest pending OIO of its priority.
    let oldest = m
        .pending
        .iter()
        .find(|(_, (_, p))| *p == r.priority)
        .map(|(id, _)| *id)
        .unwrap();
    assert!(r.oios.contains(&oldest), "{r:?} skipped {oldest:?}");
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for id in &r.oios {
        let (oio, p) = m.pending.remove(id).expect("OIO dispatched twice");
        assert_eq!(oio.oid, r.oid, "a merge crossed objects");
        assert_eq!(oio.dir, r.dir, "a merge crossed directions");
        assert_eq!(p, r.priority, "a merge crossed priorities");
        *m.dispatched.entry(*id).or_default() += 1;
        ranges.push((oio.offset_sectors, oio.offset_sectors + oio.sectors as u64));
    }
    ranges.sort();
    assert_eq!(ranges[0].0, r.offset_sectors);
    assert_eq!(ranges.last().unwrap().1, r.end());
    for w in ranges.windows(2) {
        assert_eq!(w[0].1, w[1].0, "a merge crossed a gap or overlapped: {r:?}");
    }
    if r.oios.len() > 1 {
        assert!(r.sectors <= max, "merged OREQ of {} sectors", r.sectors);
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn oaq_matches_the_model(steps in prop::collection::vec(step(), 1..200)) {
        let cfg = OaqConfig { max_request_sectors: 64, hash_buckets: 3, priority_levels: 4 };
        let mut q = Oaq::new(cfg).unwrap();
        let mut m = Model { pending: BTreeMap::new(), attr: BTreeMap::new(), dispatched: BTreeMap::new() };
        let mut submitted = 0u64;
        for s in steps {
            match s {
                Step::Submit { oid, write, offset, sectors, priority } => {
                    let oio = Oio {
                        oid: ObjectId(oid),
                        dir: if write { Direction::Write } else { Direction::Read },
                        offset_sectors: offset,
                        sectors,
                        priority: priority.map(Priority),
                    };
                    let id = q.submit(oio).unwrap();
                    let p = priority.or(m.attr.get(&oid).copied()).unwrap_or(0);
                    m.pending.insert(id, (oio, Priority(p)));
                    submitted += 1;
                }
                Step::SetPriority { oid, priority } => {
                    q.set_object_priority(ObjectId(oid), priority.map(Priority)).unwrap();
                    match priority {
                        Some(p) => { m.attr.insert(oid, p); }
                        None => { m.attr.remove(&oid); }
                    }
                }
                Step::Dispatch => { check_dispatch(&mut q, &mut m, cfg.max_request_sectors); }
            }
        }
        while check_dispatch(&mut q, &mut m, cfg.max_request_sectors) {}
        prop_assert!(q.is_empty());
        prop_assert_eq!(m.dispatched.len() as u64, submitted);
        prop_assert!(m.dispatched.values().all(|&n| n == 1));
        prop_assert_eq!(q.contexts(), m.attr.len());
    }
}
