//! Transactions against an in-memory oracle (issue 16 item 8): random plain commands,
//! transactions (two open at once, their commands interleaved with plain ones), commits,
//! aborts, reads, clean reopens and power cuts. After every step every object reads back as
//! the oracle says: a transaction's commands are invisible until COMMIT, applied whole by it,
//! and gone at ABORT or at a reopen; each command is refused exactly when the oracle refuses it
//! (in the transaction's view when it is taken, against the store as it is at COMMIT).

use std::collections::BTreeMap;

use flash::fault::Faulty;
use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Osd, OsdConfig, OsdError, PartitionId,
    TxnError, TxnId,
};

mod txn_rig;
use proptest::prelude::*;
use txn_rig::{oid, tag_value, txn_op, Op, P, TAG};

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 48;
    c.geometry.pages_per_block = 8;
    c.gang.units_per_superblock = 1;
    c
}

/// The store's settings; `unit_map_bytes` 0 keeps the unit map off.
fn config(unit_map_bytes: u64) -> OsdConfig {
    OsdConfig {
        unit_map_bytes,
        buffer_bytes: 32 << 10,
        checkpoint_units: 16,
        fml: FmlConfig::for_blocks(96),
        ..OsdConfig::default()
    }
}

#[derive(Clone, Debug)]
enum Step {
    Plain(Op),
    Begin(usize),
    /// Commands into one transaction, in order.
    InTxn(usize, Vec<Op>),
    Commit(usize),
    Abort(usize),
    Flush,
    Reopen,
    /// A power cut right after everything was made durable (a FLUSH first unless the last
    /// change was a COMMIT, which is durable by itself).
    Crash,
}

fn arb_op() -> impl Strategy<Value = Op> {
    let o = 1u64..4;
    prop_oneof![
        o.clone().prop_map(Op::Create),
        o.clone().prop_map(Op::Remove),
        (o.clone(), 0u64..40_000, 1u64..20_000, any::<u8>())
            .prop_map(|(o, off, len, s)| Op::Write(o, off, len, s)),
        (o.clone(), 0u64..50_000).prop_map(|(o, l)| Op::Truncate(o, l)),
        (o.clone(), proptest::option::of(any::<u8>())).prop_map(|(o, t)| Op::Tag(o, t)),
        (o, any::<bool>()).prop_map(|(o, b)| Op::ReadOnly(o, b)),
    ]
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => arb_op().prop_map(Step::Plain),
        3 => (0usize..2).prop_map(Step::Begin),
        12 => (0usize..2, proptest::collection::vec(arb_op(), 1..6))
            .prop_map(|(t, ops)| Step::InTxn(t, ops)),
        2 => (0usize..2).prop_map(Step::Commit),
        1 => (0usize..2).prop_map(Step::Abort),
        1 => Just(Step::Flush),
        1 => Just(Step::Reopen),
        1 => Just(Step::Crash),
    ]
}

fn bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| seed ^ (i as u8).wrapping_mul(31) ^ (i >> 8) as u8)
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Obj {
    data: Vec<u8>,
    tag: Option<Vec<u8>>,
    read_only: bool,
}

type Model = BTreeMap<u64, Obj>;

/// What the oracle expects of a command: done, or refused with this kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Done,
    NotFound,
    Exists,
    ReadOnly,
}

fn outcome(r: &Result<(), OsdError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Done,
        Err(OsdError::NotFound(_)) => Outcome::NotFound,
        Err(OsdError::AlreadyExists(_)) => Outcome::Exists,
        Err(OsdError::ReadOnly(_)) => Outcome::ReadOnly,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Checks `op` against `m` (the view) and applies it when it is allowed.
fn apply(m: &mut BTreeMap<u64, Option<Obj>>, op: &Op) -> Outcome {
    let o = match *op {
        Op::Create(o)
        | Op::Remove(o)
        | Op::Write(o, ..)
        | Op::Truncate(o, _)
        | Op::Tag(o, _)
        | Op::ReadOnly(o, _) => o,
    };
    let slot = m.entry(o).or_insert(None);
    match (op, slot.as_mut()) {
        (Op::Create(_), Some(_)) => Outcome::Exists,
        (Op::Create(_), None) => {
            *slot = Some(Obj {
                data: Vec::new(),
                tag: None,
                read_only: false,
            });
            Outcome::Done
        }
        (_, None) => Outcome::NotFound,
        (Op::Remove(_), Some(_)) => {
            *slot = None;
            Outcome::Done
        }
        (Op::Write(..) | Op::Truncate(..), Some(x)) if x.read_only => Outcome::ReadOnly,
        (Op::Write(_, off, len, seed), Some(x)) => {
            let end = (off + len) as usize;
            if x.data.len() < end {
                x.data.resize(end, 0);
            }
            x.data[*off as usize..end].copy_from_slice(&bytes(*seed, *len));
            Outcome::Done
        }
        (Op::Truncate(_, l), Some(x)) => {
            x.data.resize(*l as usize, 0);
            Outcome::Done
        }
        (Op::Tag(_, t), Some(x)) => {
            x.tag = t.map(|t| vec![t; 2]);
            Outcome::Done
        }
        (Op::ReadOnly(_, b), Some(x)) => {
            x.read_only = *b;
            Outcome::Done
        }
    }
}

type Store = ObjectStore<Faulty<Nand>>;

fn plain(s: &mut Store, op: &Op) -> Result<(), OsdError> {
    match *op {
        Op::Create(o) => s.create(PartitionId(P), Some(ObjectId(P + o))).map(|_| ()),
        Op::Remove(o) => s.remove(oid(o)),
        Op::Write(o, off, len, seed) => s.write(oid(o), off, &bytes(seed, len)),
        Op::Truncate(o, l) => s.truncate(oid(o), l),
        Op::Tag(o, t) => s.set_attr(oid(o), TAG, tag_value(t, 2)),
        Op::ReadOnly(o, b) => s.set_attr(oid(o), Attr::ReadOnly, AttrValue::Bool(b)),
    }
}

/// An open transaction in the oracle: its commands and its view.
struct OracleTxn {
    id: TxnId,
    ops: Vec<Op>,
    view: BTreeMap<u64, Option<Obj>>,
}

fn check(s: &mut Store, model: &Model) -> Result<(), TestCaseError> {
    for o in 1..5u64 {
        let got = match s.get_attr(oid(o), Attr::LogicalLength) {
            Ok(AttrValue::U64(len)) => {
                let mut data = vec![0u8; len as usize];
                s.read(oid(o), 0, &mut data).unwrap();
                let tag = match s.get_attr(oid(o), TAG).unwrap() {
                    AttrValue::Bytes(b) => Some(b),
                    _ => None,
                };
                let read_only =
                    s.get_attr(oid(o), Attr::ReadOnly).unwrap() == AttrValue::Bool(true);
                Some(Obj {
                    data,
                    tag,
                    read_only,
                })
            }
            Err(OsdError::NotFound(_)) => None,
            other => panic!("object {o}: {other:?}"),
        };
        let want = model.get(&o);
        prop_assert!(
            got.as_ref() == want,
            "object {}: got {:?}, want {:?}",
            o,
            got.as_ref().map(|g| (g.data.len(), &g.tag, g.read_only)),
            want.map(|g| (g.data.len(), &g.tag, g.read_only))
        );
    }
    Ok(())
}

fn reopen(s: Store, clean: bool, cfg: OsdConfig) -> Store {
    let dev = if clean { s.close().unwrap() } else { s.crash() };
    ObjectStore::open(dev, cfg).unwrap()
}

fn run(steps: Vec<Step>, unit_map_bytes: u64) -> Result<(), TestCaseError> {
    let cfg = config(unit_map_bytes);
    let mut s = ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s.flush(FlushScope::Device).unwrap();
    let mut model = Model::new();
    // Two objects to start from, so that most commands find theirs.
    for o in 1..3u64 {
        let mut view = BTreeMap::new();
        for op in [Op::Create(o), Op::Write(o, 0, 20_000 * o, o as u8)] {
            prop_assert_eq!(apply(&mut view, &op), Outcome::Done);
            plain(&mut s, &op).unwrap();
        }
        model.insert(o, view.remove(&o).flatten().unwrap());
    }
    s.flush(FlushScope::Device).unwrap();
    let mut open: [Option<OracleTxn>; 2] = [None, None];
    let mut durable = true;

    for step in steps {
        match &step {
            Step::Plain(op) => {
                let mut view: BTreeMap<u64, Option<Obj>> =
                    model.iter().map(|(k, v)| (*k, Some(v.clone()))).collect();
                let want = apply(&mut view, op);
                prop_assert_eq!(outcome(&plain(&mut s, op)), want, "{:?}", step);
                model = view
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v)))
                    .collect();
                durable = false;
            }
            Step::Begin(t) => {
                if open[*t].is_none() {
                    let id = s.begin_txn(PartitionId(P)).unwrap();
                    open[*t] = Some(OracleTxn {
                        id,
                        ops: Vec::new(),
                        view: BTreeMap::new(),
                    });
                }
            }
            Step::InTxn(t, ops) => {
                let Some(tx) = open[*t].as_mut() else {
                    continue;
                };
                for op in ops {
                    let o = match *op {
                        Op::Create(o)
                        | Op::Remove(o)
                        | Op::Write(o, ..)
                        | Op::Truncate(o, _)
                        | Op::Tag(o, _)
                        | Op::ReadOnly(o, _) => o,
                    };
                    // The view takes the object as it is when the transaction first touches it.
                    tx.view.entry(o).or_insert_with(|| model.get(&o).cloned());
                    let want = apply(&mut tx.view, op);
                    let got = outcome(&s.txn_op(tx.id, txn_op(op, bytes, 2)).map(|_| ()));
                    prop_assert_eq!(got, want, "{:?} in {:?}", op, step);
                    if got == Outcome::Done {
                        tx.ops.push(op.clone());
                    }
                }
            }
            Step::Commit(t) => {
                let Some(tx) = open[*t].take() else { continue };
                // Checked again, from scratch, against the store as it is now.
                let mut view: BTreeMap<u64, Option<Obj>> =
                    model.iter().map(|(k, v)| (*k, Some(v.clone()))).collect();
                let want = tx
                    .ops
                    .iter()
                    .map(|op| apply(&mut view, op))
                    .find(|o| *o != Outcome::Done)
                    .unwrap_or(Outcome::Done);
                let got = outcome(&s.commit_txn(tx.id));
                prop_assert_eq!(got, want, "{:?}", step);
                if got == Outcome::Done && !tx.ops.is_empty() {
                    model = view
                        .into_iter()
                        .filter_map(|(k, v)| v.map(|v| (k, v)))
                        .collect();
                    durable = true;
                }
                // Committed or refused, it is gone.
                prop_assert!(matches!(
                    s.commit_txn(tx.id),
                    Err(OsdError::Transaction(TxnError::NotFound(_)))
                ));
            }
            Step::Abort(t) => {
                let Some(tx) = open[*t].take() else { continue };
                s.abort_txn(tx.id).unwrap();
            }
            Step::Flush => {
                s.flush(FlushScope::Device).unwrap();
                durable = true;
            }
            Step::Reopen | Step::Crash => {
                if matches!(step, Step::Crash) && !durable {
                    s.flush(FlushScope::Device).unwrap();
                }
                s = reopen(s, matches!(step, Step::Reopen), cfg);
                durable = true;
                // Open transactions die with the store's memory.
                for tx in open.iter_mut().filter_map(Option::take) {
                    prop_assert!(matches!(
                        s.abort_txn(tx.id),
                        Err(OsdError::Transaction(TxnError::NotFound(_)))
                    ));
                }
            }
        }
        check(&mut s, &model)?;
    }
    let report = s.fsck().unwrap();
    prop_assert!(report.problems.is_empty(), "{:?}", report.problems);

    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn transactions_match_the_oracle(
        steps in proptest::collection::vec(arb_step(), 20..120),
        // The unit map off, small enough that objects are let go of mid-run, or large.
        unit_map_bytes in prop_oneof![2 => Just(0u64), 1 => Just(24 * 8u64), 1 => Just(1u64 << 20)],
    ) {
        run(steps, unit_map_bytes)?;
    }
}
