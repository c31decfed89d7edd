//! Object-level transactions through power cuts (issue 16 item 8; docs/DESIGN.md
//! "Transactions"). A script of multi-object transactions (creates, writes, truncates,
//! attribute changes and removes of several objects each), with plain commands and FLUSHes
//! between them, is run with power cut after every flash operation in turn, cleanly and torn.
//! After each cut the store reopens, fsck is clean, and the objects are *exactly* the state
//! before the command the cut interrupted, or exactly the state after it: never a part of a
//! transaction. Every command of the script is durable when it returns (each plain command is
//! followed by a FLUSH, and a COMMIT is durable by itself), so these two states are the only
//! ones allowed.
//!
//! With the feature `txn-mutants`, two broken COMMITs must be caught by the same sweep: one
//! that installs before its commit record (`the_sweep_catches_a_commit_that_installs_first`),
//! one that programs its commit record before the rest of its log
//! (`the_sweep_catches_a_commit_record_written_before_its_log`).

use std::collections::BTreeMap;

use flash::fault::{CutMode, Faulty};
use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Osd, OsdConfig, OsdError, PartitionId,
    Placement,
};

mod txn_rig;
use txn_rig::{oid, txn_op, Op, P, TAG};

const OBJECTS: u64 = 6;

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 24;
    c.geometry.pages_per_block = 8;
    c.gang.units_per_superblock = 1;
    c
}

fn config() -> OsdConfig {
    OsdConfig {
        placement: Placement::Semantic,
        buffer_bytes: 8 << 10,
        checkpoint_units: 24,
        fml: FmlConfig::for_blocks(48),
        ..OsdConfig::default()
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// A plain command, then a FLUSH.
    Plain(Op),
    /// BEGIN, the commands, COMMIT.
    Txn(Vec<Op>),
    /// BEGIN, the commands, ABORT: no trace.
    Aborted(Vec<Op>),
}

fn script() -> Vec<Step> {
    use Op::*;
    let mut s = vec![
        Step::Plain(Create(1)),
        Step::Plain(Write(1, 0, 9_000, 1)),
        Step::Plain(Create(2)),
        Step::Plain(Write(2, 0, 3_000, 2)),
        Step::Plain(Create(3)),
    ];
    for r in 0..8u8 {
        let k = r as u64;
        s.extend([
            // Several objects, several units each, a log of several units.
            Step::Txn(vec![
                ReadOnly(1, false),
                Create(4),
                Write(4, 0, 48_000, 10 + r),
                Write(1, 2_000 + k * 7_000, 30_000, 20 + r),
                Truncate(2, 1_000 + k * 300),
                Tag(3, Some(r)),
                Write(3, k * 100, 300, 30 + r),
            ]),
            Step::Plain(Write(2, 500, 20_000, 40 + r)),
            Step::Aborted(vec![Remove(1), Write(2, 0, 5_000, 99), Create(6)]),
            // Read-only set at the end: a replayed write must not be refused by it.
            Step::Txn(vec![
                ReadOnly(1, false),
                Write(1, k * 5_000, 20_000, 50 + r),
                ReadOnly(1, true),
                Remove(4),
                Create(5),
                Write(5, 0, 40_000, 60 + r),
                Tag(2, if r % 2 == 0 { None } else { Some(r) }),
            ]),
            // Created and removed, removed and created, in one transaction.
            Step::Txn(vec![
                Create(6),
                Write(6, 0, 3_000, 70 + r),
                Remove(6),
                Remove(5),
                Create(5),
                Write(5, 100, 2_500, 80 + r),
                Truncate(3, 200 + k * 50),
            ]),
            Step::Plain(Remove(5)),
        ]);
    }
    s
}

fn bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let mut z = ((seed as u64) << 40 ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            seed.wrapping_mul(37) ^ ((z ^ (z >> 27)) >> 56) as u8
        })
        .collect()
}

/// What the oracle keeps of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Obj {
    data: Vec<u8>,
    tag: Option<Vec<u8>>,
    read_only: bool,
}

type Model = BTreeMap<u64, Obj>;

fn apply(m: &mut Model, op: &Op) {
    match *op {
        Op::Create(o) => {
            m.insert(
                o,
                Obj {
                    data: Vec::new(),
                    tag: None,
                    read_only: false,
                },
            );
        }
        Op::Remove(o) => {
            m.remove(&o);
        }
        Op::Write(o, off, len, seed) => {
            let d = &mut m.get_mut(&o).unwrap().data;
            let end = (off + len) as usize;
            if d.len() < end {
                d.resize(end, 0);
            }
            d[off as usize..end].copy_from_slice(&bytes(seed, len));
        }
        Op::Truncate(o, len) => m.get_mut(&o).unwrap().data.resize(len as usize, 0),
        Op::Tag(o, t) => m.get_mut(&o).unwrap().tag = t.map(|t| vec![t; 3]),
        Op::ReadOnly(o, b) => m.get_mut(&o).unwrap().read_only = b,
    }
}

fn plain(s: &mut ObjectStore<Faulty<Nand>>, op: &Op) -> Result<(), OsdError> {
    match *op {
        Op::Create(o) => s.create(PartitionId(P), Some(ObjectId(P + o))).map(|_| ()),
        Op::Remove(o) => s.remove(oid(o)),
        _ => {
            let t = s.begin_txn(PartitionId(P))?;
            s.txn_op(t, txn_op(op, bytes, 3))?;
            s.commit_txn(t)
        }
    }
}

fn run(s: &mut ObjectStore<Faulty<Nand>>, step: &Step) -> Result<(), OsdError> {
    match step {
        Step::Plain(op @ (Op::Create(_) | Op::Remove(_))) => {
            plain(s, op)?;
            s.flush(FlushScope::Device)
        }
        Step::Plain(Op::Write(o, off, len, seed)) => {
            s.write(oid(*o), *off, &bytes(*seed, *len))?;
            s.flush(FlushScope::Device)
        }
        Step::Plain(op) => plain(s, op),
        Step::Txn(ops) => {
            let t = s.begin_txn(PartitionId(P))?;
            for op in ops {
                s.txn_op(t, txn_op(op, bytes, 3))?;
            }
            s.commit_txn(t)
        }
        Step::Aborted(ops) => {
            let t = s.begin_txn(PartitionId(P))?;
            for op in ops {
                s.txn_op(t, txn_op(op, bytes, 3))?;
            }
            s.abort_txn(t)
        }
    }
}

fn step_model(m: &mut Model, step: &Step) {
    match step {
        Step::Plain(op) => apply(m, op),
        Step::Txn(ops) => ops.iter().for_each(|op| apply(m, op)),
        Step::Aborted(_) => {}
    }
}

/// Which test-only mutation of COMMIT a run uses (feature `txn-mutants`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "txn-mutants"), allow(dead_code))]
enum Mutant {
    None,
    /// Installs before the commit record.
    InstallFirst,
    /// Programs the commit record before the rest of the log.
    CommitRecordFirst,
}

fn fresh(mutant: Mutant) -> ObjectStore<Faulty<Nand>> {
    let mut s =
        ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), config()).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s.flush(FlushScope::Device).unwrap();
    #[cfg(feature = "txn-mutants")]
    {
        s.set_txn_mutant_install_first(mutant == Mutant::InstallFirst);
        s.set_txn_mutant_commit_record_first(mutant == Mutant::CommitRecordFirst);
    }
    #[cfg(not(feature = "txn-mutants"))]
    assert_eq!(mutant, Mutant::None, "mutants need the feature txn-mutants");
    s
}

/// The objects as the store shows them.
fn observe(s: &mut ObjectStore<Faulty<Nand>>) -> Result<Model, String> {
    let mut m = Model::new();
    for o in 1..=OBJECTS {
        let len = match s.get_attr(oid(o), Attr::LogicalLength) {
            Ok(AttrValue::U64(len)) => len,
            Err(OsdError::NotFound(_)) => continue,
            other => return Err(format!("object {o}: length {other:?}")),
        };
        let mut data = vec![0u8; len as usize];
        s.read(oid(o), 0, &mut data)
            .map_err(|e| format!("read {o}: {e}"))?;
        let tag = match s.get_attr(oid(o), TAG) {
            Ok(AttrValue::Bytes(b)) => Some(b),
            Ok(AttrValue::Absent) => None,
            other => return Err(format!("object {o}: tag {other:?}")),
        };
        let read_only = matches!(
            s.get_attr(oid(o), Attr::ReadOnly),
            Ok(AttrValue::Bool(true))
        );
        m.insert(
            o,
            Obj {
                data,
                tag,
                read_only,
            },
        );
    }
    Ok(m)
}

fn summary(m: &Model) -> String {
    m.iter()
        .map(|(o, x)| {
            format!(
                "{o}:{}b{}",
                x.data.len(),
                if x.read_only { "ro" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the script with power cut after `cut` flash operations.
fn cut_at(cut: u64, mode: CutMode, mutant: Mutant) -> Result<(), String> {
    let mut s = fresh(mutant);
    s.device_mut().cut_power_after(cut, mode);
    let mut before = Model::new();
    let mut after = Model::new();
    let mut in_flight_plain = false;
    for step in script() {
        after = before.clone();
        step_model(&mut after, &step);
        match run(&mut s, &step) {
            Ok(()) => before = after.clone(),
            Err(e) if e.to_string().contains("power is off") => {
                in_flight_plain = matches!(step, Step::Plain(_));
                break;
            }
            Err(e) => return Err(format!("cut {cut}: {step:?}: {e}")),
        }
    }
    let mut dev = s.crash();
    let mut store = None;
    for _ in 0..10 {
        dev.restore_power();
        match ObjectStore::open_or_return(dev, config()) {
            Ok(st) => {
                store = Some(st);
                break;
            }
            Err((e, Some(d))) if e.to_string().contains("power is off") => dev = d,
            Err((e, _)) => return Err(format!("cut {cut}: recovery failed: {e}")),
        }
    }
    let mut s = store.ok_or_else(|| format!("cut {cut}: recovery kept losing power"))?;
    let report = s.fsck().map_err(|e| format!("cut {cut}: fsck: {e}"))?;
    if !report.problems.is_empty() {
        return Err(format!("cut {cut}: fsck: {:?}", report.problems));
    }
    let got = observe(&mut s).map_err(|e| format!("cut {cut}: {e}"))?;
    // A plain write the cut interrupted may be partly on flash, byte by byte (the store's
    // contract for unflushed data, docs/RELIABILITY.md); a transaction never.
    if got != before && got != after && !(in_flight_plain && mixed(&got, &before, &after)) {
        return Err(format!(
            "cut {cut}: neither before nor after the interrupted command: got [{}], before [{}], after [{}]",
            summary(&got),
            summary(&before),
            summary(&after)
        ));
    }
    Ok(())
}

/// Every object as before or after, but its bytes each from one or the other.
fn mixed(got: &Model, before: &Model, after: &Model) -> bool {
    let keys: std::collections::BTreeSet<u64> = got
        .keys()
        .chain(before.keys())
        .chain(after.keys())
        .copied()
        .collect();
    keys.into_iter()
        .all(|o| match (got.get(&o), before.get(&o), after.get(&o)) {
            (Some(g), Some(b), Some(a)) => {
                g.tag == b.tag
                    && g.read_only == b.read_only
                    && g.data.iter().enumerate().all(|(i, x)| {
                        b.data.get(i) == Some(x) || a.data.get(i) == Some(x) || *x == 0
                    })
            }
            (g, b, a) => g == b || g == a,
        })
}

/// Flash operations of the whole script, and the store's counters after it.
fn whole_run(mutant: Mutant) -> (u64, osd::store::OsdStats, u64) {
    let mut s = fresh(mutant);
    let before = s.device_mut().ops();
    let mut model = Model::new();
    for step in script() {
        run(&mut s, &step).unwrap();
        step_model(&mut model, &step);
    }
    assert_eq!(observe(&mut s).unwrap(), model, "the script without cuts");
    (
        s.device_mut().ops() - before,
        s.stats(),
        s.fml().stats().gc_victims,
    )
}

fn sweep(mutant: Mutant) -> (u64, Vec<String>) {
    let (total, stats, gc_victims) = whole_run(mutant);
    assert!(
        stats.checkpoints > 3,
        "the script must checkpoint: {stats:?}"
    );
    println!("script: {total} flash operations, {stats:?}");
    assert!(
        gc_victims > 3,
        "the script must make GC run: {gc_victims} victims"
    );
    let mut failures = Vec::new();
    for cut in 0..=total {
        for mode in [CutMode::Clean, CutMode::Torn] {
            if let Err(e) = cut_at(cut, mode, mutant) {
                failures.push(format!("{mode:?} {e}"));
            }
        }
    }
    (total, failures)
}

#[test]
fn a_transaction_is_all_or_nothing_at_every_power_cut() {
    let (total, failures) = sweep(Mutant::None);
    assert!(
        failures.is_empty(),
        "{} of {} cuts broke all-or-nothing, first: {:?}",
        failures.len(),
        2 * (total + 1),
        &failures[..failures.len().min(3)]
    );
    let (_, st, _) = whole_run(Mutant::None);
    assert!(st.txns_committed >= 18, "{st:?}");
    println!(
        "{} power cuts over {total} flash operations ({} transactions committed, {} log units): all or nothing at every one",
        2 * (total + 1),
        st.txns_committed,
        st.txn_log_units_written
    );
}

/// The mutant installs a transaction before its commit record: a cut during installation
/// leaves part of it, which the sweep must see.
#[cfg(feature = "txn-mutants")]
#[test]
fn the_sweep_catches_a_commit_that_installs_first() {
    let (total, failures) = sweep(Mutant::InstallFirst);
    println!(
        "mutant: {} of {} cuts broke all-or-nothing, first: {:?}",
        failures.len(),
        2 * (total + 1),
        failures.first()
    );
    assert!(!failures.is_empty(), "the sweep missed the mutant");
}

/// The mutant programs the commit record before the rest of the log: a cut between them
/// leaves a commit record whose log recovery cannot read whole.
#[cfg(feature = "txn-mutants")]
#[test]
fn the_sweep_catches_a_commit_record_written_before_its_log() {
    let (total, failures) = sweep(Mutant::CommitRecordFirst);
    println!(
        "mutant: {} of {} cuts broke the contract, first: {:?}",
        failures.len(),
        2 * (total + 1),
        failures.first()
    );
    assert!(!failures.is_empty(), "the sweep missed the mutant");
}
