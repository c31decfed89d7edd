//! Transactions and the object services (issue 16 item 8; docs/DESIGN.md "Transactions"):
//! compressed and parity-protected objects take part (their commands are installed through the
//! ordinary paths), all or nothing through a power cut at every flash operation of the commit;
//! encrypted objects' data commands are refused with a typed error (the log would hold their
//! bytes in clear); and the limits are typed refusals.

use flash::fault::{CutMode, Faulty};
use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use osd::store::{TXN_LOG_MAX_UNITS, TXN_OPEN_MAX};
use osd::{
    Attr, AttrValue, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError, PartitionId,
    TxnError, TxnOp,
};

const P: u64 = 0x10000;

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 32;
    c.geometry.pages_per_block = 8;
    c.gang.units_per_superblock = 1;
    c
}

fn config() -> OsdConfig {
    OsdConfig {
        buffer_bytes: 16 << 10,
        checkpoint_units: 24,
        compression_chunk_units: 4,
        metadata_copies: 1,
        parity_group_units: 4,
        fml: FmlConfig::for_blocks(64),
        ..OsdConfig::default()
    }
}

fn oid(o: u64) -> Oid {
    Oid::new(P, P + o)
}

fn text(seed: u8, len: usize) -> Vec<u8> {
    let words = [
        &b"object "[..],
        b"store ",
        b"flash ",
        b"commit ",
        b"parity ",
    ];
    let mut out = Vec::with_capacity(len);
    let mut i = seed as usize;
    while out.len() < len {
        out.extend_from_slice(words[i % words.len()]);
        i = i.wrapping_mul(7).wrapping_add(3);
    }
    out.truncate(len);
    out
}

type Store = ObjectStore<Faulty<Nand>>;

/// Object 1 compressed (zstd), object 2 with one parity unit per group, both with data.
fn setup() -> Store {
    let mut s =
        ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), config()).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s.create(PartitionId(P), Some(ObjectId(P + 1))).unwrap();
    s.set_attr(oid(1), Attr::Compression, AttrValue::U64(2))
        .unwrap();
    s.write(oid(1), 0, &text(1, 100_000)).unwrap();
    s.create(PartitionId(P), Some(ObjectId(P + 2))).unwrap();
    s.set_attr(oid(2), Attr::Reliability, AttrValue::U64(1))
        .unwrap();
    s.write(oid(2), 0, &text(2, 90_000)).unwrap();
    s.flush(FlushScope::Device).unwrap();
    s
}

fn txn() -> Vec<TxnOp> {
    vec![
        TxnOp::Write {
            oid: oid(1),
            offset: 30_000,
            data: text(3, 50_000),
        },
        TxnOp::Write {
            oid: oid(2),
            offset: 10_000,
            data: text(4, 40_000),
        },
        TxnOp::Truncate {
            oid: oid(1),
            length: 120_000,
        },
        TxnOp::Truncate {
            oid: oid(2),
            length: 60_000,
        },
    ]
}

fn contents(s: &mut Store) -> Vec<Vec<u8>> {
    (1..3)
        .map(|o| {
            let Ok(AttrValue::U64(len)) = s.get_attr(oid(o), Attr::LogicalLength) else {
                panic!("object {o} is gone")
            };
            let mut d = vec![0u8; len as usize];
            s.read(oid(o), 0, &mut d).unwrap();
            d
        })
        .collect()
}

fn commit(s: &mut Store) -> Result<(), OsdError> {
    let t = s.begin_txn(PartitionId(P))?;
    for op in txn() {
        s.txn_op(t, op)?;
    }
    s.commit_txn(t)
}

#[test]
fn compressed_and_parity_objects_commit_all_or_nothing_at_every_power_cut() {
    let mut s = setup();
    let before = contents(&mut s);
    let start = s.device_mut().ops();
    commit(&mut s).unwrap();
    let total = s.device_mut().ops() - start;
    let after = contents(&mut s);
    assert_ne!(before, after);
    let mut cuts = 0;
    for cut in 0..=total {
        for mode in [CutMode::Clean, CutMode::Torn] {
            let mut s = setup();
            s.device_mut().cut_power_after(cut, mode);
            match commit(&mut s) {
                Ok(()) => {}
                Err(e) if e.to_string().contains("power is off") => {}
                Err(e) => panic!("cut {cut}: {e}"),
            }
            let mut dev = s.crash();
            dev.restore_power();
            let mut s = ObjectStore::open(dev, config()).unwrap();
            let report = s.fsck().unwrap();
            assert!(
                report.problems.is_empty() && report.damaged.is_empty(),
                "cut {cut}: {report:?}"
            );
            let got = contents(&mut s);
            assert!(
                got == before || got == after,
                "cut {cut} {mode:?}: lengths {:?}, before {:?}, after {:?}",
                got.iter().map(Vec::len).collect::<Vec<_>>(),
                before.iter().map(Vec::len).collect::<Vec<_>>(),
                after.iter().map(Vec::len).collect::<Vec<_>>()
            );
            // Parity still describes the data: a scrub finds nothing to repair.
            let scrub = s.scrub(false).unwrap();
            assert!(scrub.findings.is_empty(), "cut {cut}: {:?}", scrub.findings);
            cuts += 1;
        }
    }
    println!("{cuts} power cuts over the {total} flash operations of a commit: all or nothing");
}

#[test]
fn an_encrypted_objects_data_stays_out_of_transactions() {
    let mut s = setup();
    s.set_master_key(Some(osd::MasterKey::from_bytes([9; 32])));
    s.create(PartitionId(P), Some(ObjectId(P + 3))).unwrap();
    s.set_attr(oid(3), Attr::Encryption, AttrValue::U64(1))
        .unwrap();
    let t = s.begin_txn(PartitionId(P)).unwrap();
    for op in [
        TxnOp::Write {
            oid: oid(3),
            offset: 0,
            data: b"secret".to_vec(),
        },
        TxnOp::Truncate {
            oid: oid(3),
            length: 5,
        },
    ] {
        assert!(matches!(
            s.txn_op(t, op),
            Err(OsdError::Transaction(TxnError::Unsupported(_)))
        ));
    }
    // Its removal and its attributes are not its bytes.
    s.txn_op(
        t,
        TxnOp::SetAttr {
            oid: oid(3),
            attr: Attr::User(0x1001),
            value: AttrValue::Bytes(b"x".to_vec()),
        },
    )
    .unwrap();
    s.txn_op(t, TxnOp::Remove { oid: oid(3) }).unwrap();
    s.commit_txn(t).unwrap();
    assert!(matches!(
        s.get_attr(oid(3), Attr::LogicalLength),
        Err(OsdError::NotFound(_))
    ));
}

#[test]
fn limits_and_refusals_are_typed() {
    let mut s = setup();
    let unit = s.unit_bytes() as u64;
    let t = s.begin_txn(PartitionId(P)).unwrap();
    // Services, the inode hint and times are not set in a transaction.
    for attr in [
        Attr::Compression,
        Attr::Encryption,
        Attr::Reliability,
        Attr::InodeEmbedded,
        Attr::ModifiedTime,
    ] {
        let r = s.txn_op(
            t,
            TxnOp::SetAttr {
                oid: oid(1),
                attr,
                value: AttrValue::U64(0),
            },
        );
        assert!(
            matches!(r, Err(OsdError::Transaction(TxnError::Unsupported(_)))),
            "{attr:?}: {r:?}"
        );
    }
    // Another partition.
    s.create_partition(Some(PartitionId(0x20000))).unwrap();
    assert!(matches!(
        s.txn_op(
            t,
            TxnOp::Create {
                partition: PartitionId(0x20000),
                id: None
            }
        ),
        Err(OsdError::Transaction(TxnError::Unsupported(_)))
    ));
    // The log limit: a write that would pass it is refused, the transaction keeps the rest.
    let half = vec![1u8; (TXN_LOG_MAX_UNITS * unit / 2) as usize];
    s.txn_op(
        t,
        TxnOp::Write {
            oid: oid(1),
            offset: 0,
            data: half.clone(),
        },
    )
    .unwrap();
    let r = s.txn_op(
        t,
        TxnOp::Write {
            oid: oid(2),
            offset: 0,
            data: half,
        },
    );
    let Err(OsdError::Transaction(TxnError::TooLarge {
        needed_bytes,
        limit_bytes,
        ..
    })) = r
    else {
        panic!("{r:?}")
    };
    assert!(needed_bytes > limit_bytes && limit_bytes == TXN_LOG_MAX_UNITS * unit);
    s.commit_txn(t).unwrap();
    let mut b = [0u8; 4];
    s.read(oid(1), 0, &mut b).unwrap();
    assert_eq!(b, [1; 4]);
    // Open transactions are bounded.
    let open: Vec<_> = (0..TXN_OPEN_MAX)
        .map(|_| s.begin_txn(PartitionId(P)).unwrap())
        .collect();
    assert!(matches!(
        s.begin_txn(PartitionId(P)),
        Err(OsdError::Transaction(TxnError::TooMany { .. }))
    ));
    s.abort_txn(open[0]).unwrap();
    assert!(matches!(
        s.abort_txn(open[0]),
        Err(OsdError::Transaction(TxnError::NotFound(_)))
    ));
    s.begin_txn(PartitionId(P)).unwrap();
}
