use super::*;
use crate::cap::{CapObject, MasterKey, Ops};
use proptest::prelude::*;

fn cap() -> Capability {
    Capability {
        partition: PartitionId(0x10000),
        object: CapObject::All,
        ops: Ops::ALL,
        key_version: 0,
        expires_unix_s: 2_000_000_000,
    }
}

fn key() -> CapKey {
    MasterKey::from_bytes([9; 32]).capability_key(&cap())
}

fn split(frame: &[u8]) -> (Header, &[u8]) {
    let h = Header::decode(&frame[..HEADER_LEN], u32::MAX).unwrap();
    assert_eq!(frame.len(), HEADER_LEN + h.body_len as usize);
    (h, &frame[HEADER_LEN..])
}

fn all_commands() -> Vec<Command> {
    let oid = Oid::new(0x10000, 0x20001);
    vec![
        Command::Hello {
            versions: vec![1, 2, 7],
        },
        Command::CreatePartition { id: None },
        Command::CreatePartition {
            id: Some(PartitionId(0x10001)),
        },
        Command::RemovePartition {
            id: PartitionId(0x10001),
        },
        Command::ListPartitions { token: 5, max: 100 },
        Command::SetKeyVersion {
            partition: PartitionId(0x10000),
            version: 4,
        },
        Command::Create {
            partition: PartitionId(0x10000),
            id: None,
        },
        Command::Create {
            partition: PartitionId(0x10000),
            id: Some(ObjectId(0x30000)),
        },
        Command::Remove { oid },
        Command::Read {
            oid,
            offset: 4096,
            length: 65536,
        },
        Command::Write {
            oid,
            offset: 17,
            data: b"hello, world".to_vec(),
        },
        Command::Write {
            oid,
            offset: 0,
            data: vec![],
        },
        Command::Append {
            oid,
            data: vec![0xaa; 1000],
        },
        Command::Truncate { oid, length: 9 },
        Command::GetAttr {
            oid,
            attr: Attr::Priority,
        },
        Command::GetAttr {
            oid,
            attr: Attr::User(0x1234),
        },
        Command::SetAttr {
            oid,
            attr: Attr::Priority,
            value: AttrValue::U64(3),
        },
        Command::SetAttr {
            oid,
            attr: Attr::ExpectedSize,
            value: AttrValue::U64(1 << 30),
        },
        Command::SetAttr {
            oid,
            attr: Attr::AccessPattern,
            value: AttrValue::Pattern(AccessPattern::WriteOnce),
        },
        Command::SetAttr {
            oid,
            attr: Attr::ReadOnly,
            value: AttrValue::Bool(true),
        },
        Command::SetAttr {
            oid,
            attr: Attr::User(0x1000),
            value: AttrValue::Bytes(b"tag".to_vec()),
        },
        Command::SetAttr {
            oid,
            attr: Attr::User(0x1000),
            value: AttrValue::Absent,
        },
        Command::List {
            partition: PartitionId(0x10000),
            token: 0,
            max: 1000,
        },
        Command::Flush {
            scope: FlushScope::Object(oid),
        },
        Command::Flush {
            scope: FlushScope::Partition(PartitionId(0x10000)),
        },
        Command::Flush {
            scope: FlushScope::Device,
        },
        Command::Begin {
            partition: PartitionId(0x10000),
        },
        Command::Commit {
            partition: PartitionId(0x10000),
            txn: TxnId(7),
        },
        Command::Abort {
            partition: PartitionId(0x10000),
            txn: TxnId(u64::MAX),
        },
        Command::TxnOp {
            txn: TxnId(7),
            op: TxnOp::Create {
                partition: PartitionId(0x10000),
                id: None,
            },
        },
        Command::TxnOp {
            txn: TxnId(7),
            op: TxnOp::Write {
                oid,
                offset: 9,
                data: vec![1, 2, 3],
            },
        },
        Command::TxnOp {
            txn: TxnId(7),
            op: TxnOp::Truncate { oid, length: 5 },
        },
        Command::TxnOp {
            txn: TxnId(7),
            op: TxnOp::Remove { oid },
        },
        Command::TxnOp {
            txn: TxnId(7),
            op: TxnOp::SetAttr {
                oid,
                attr: Attr::User(0x1000),
                value: AttrValue::Bytes(b"t".to_vec()),
            },
        },
    ]
}

#[test]
fn every_request_round_trips_with_and_without_a_capability() {
    let (c, k) = (cap(), key());
    for (i, command) in all_commands().into_iter().enumerate() {
        let req = Request {
            request_id: 1000 + i as u64,
            command: command.clone(),
        };
        let plain = encode_request(VERSION_1, &req, None);
        let (h, body) = split(&plain);
        assert!(!h.is_secured());
        let d = decode_request(&h, body).unwrap();
        assert_eq!(
            (d.request_id, &d.command, d.security),
            (req.request_id, &command, None)
        );

        let signed = encode_request(VERSION_1, &req, Some((&c, &k)));
        let (h, body) = split(&signed);
        assert!(h.is_secured());
        let d = decode_request(&h, body).unwrap();
        assert_eq!(d.command, command);
        assert_eq!(d.security.as_ref().unwrap().capability, c);
        assert!(Security::verify(&k, &h, body), "{command:?}");
        // Any flipped bit of the header or body fails the integrity check (or decoding).
        for byte in 0..signed.len() {
            let mut bad = signed.clone();
            bad[byte] ^= 0x10;
            let Ok(h2) = Header::decode(&bad[..HEADER_LEN], u32::MAX) else {
                continue;
            };
            if h2.body_len as usize != body.len() {
                continue;
            }
            assert!(
                !Security::verify(&k, &h2, &bad[HEADER_LEN..]),
                "flip at byte {byte} of {command:?} verified"
            );
        }
    }
}

fn all_replies() -> Vec<(u16, Result<ReplyBody, Failure>)> {
    let oid = Oid::new(0x10000, 0x20001);
    vec![
        (
            Opcode::Hello,
            Ok(ReplyBody::Hello {
                version: 1,
                max_frame_bytes: 16 << 20,
            }),
        ),
        (
            Opcode::CreatePartition,
            Ok(ReplyBody::Partition(PartitionId(0x10002))),
        ),
        (Opcode::Create, Ok(ReplyBody::Object(ObjectId(0x20002)))),
        (Opcode::Read, Ok(ReplyBody::Data(vec![1, 2, 3]))),
        (Opcode::Append, Ok(ReplyBody::Offset(4096))),
        (Opcode::GetAttr, Ok(ReplyBody::Attr(AttrValue::U64(7)))),
        (
            Opcode::GetAttr,
            Ok(ReplyBody::Attr(AttrValue::Pattern(AccessPattern::Random))),
        ),
        (Opcode::GetAttr, Ok(ReplyBody::Attr(AttrValue::Absent))),
        (
            Opcode::List,
            Ok(ReplyBody::Ids {
                ids: vec![0x20000, 0x20001],
                next: Some(0x20002),
            }),
        ),
        (
            Opcode::ListPartitions,
            Ok(ReplyBody::Ids {
                ids: vec![],
                next: None,
            }),
        ),
        (Opcode::Write, Ok(ReplyBody::Done)),
        (Opcode::Flush, Ok(ReplyBody::Done)),
        (Opcode::Remove, Ok(ReplyBody::Done)),
        (
            Opcode::Read,
            Err(Failure::Osd(OsdError::NotFound("object x".into()))),
        ),
        (
            Opcode::Create,
            Err(Failure::Osd(OsdError::AlreadyExists("y".into()))),
        ),
        (
            Opcode::Write,
            Err(Failure::Osd(OsdError::NoSpace {
                needed_bytes: 10,
                free_bytes: 3,
            })),
        ),
        (
            Opcode::Write,
            Err(Failure::Osd(OsdError::InvalidArgument("z".into()))),
        ),
        (Opcode::Write, Err(Failure::Osd(OsdError::ReadOnly(oid)))),
        (Opcode::Read, Err(Failure::Osd(OsdError::KeyRequired(oid)))),
        (Opcode::Write, Err(Failure::Osd(OsdError::WrongKey(oid)))),
        (
            Opcode::Read,
            Err(Failure::Osd(OsdError::Corrupted {
                what: "page".into(),
                location: "block 3".into(),
                unit: None,
            })),
        ),
        (
            Opcode::Read,
            Err(Failure::Osd(OsdError::Remote("device: io".into()))),
        ),
        (
            Opcode::Read,
            Err(Failure::Osd(OsdError::Uncorrectable {
                what: "object 0x10000 bytes 0-4095".into(),
                location: "unit 7".into(),
                unit: None,
            })),
        ),
        (
            Opcode::Read,
            Err(Failure::Osd(OsdError::Internal("bug".into()))),
        ),
        (
            Opcode::Write,
            Err(Failure::Osd(OsdError::Poisoned("earlier".into()))),
        ),
        (
            Opcode::Read,
            Err(Failure::refused(Status::Expired, "expired at 5")),
        ),
        (Opcode::Begin, Ok(ReplyBody::Txn(TxnId(3)))),
        (Opcode::TxnOp, Ok(ReplyBody::Taken(Some(ObjectId(0x10005))))),
        (Opcode::TxnOp, Ok(ReplyBody::Taken(None))),
        (Opcode::Commit, Ok(ReplyBody::Done)),
        (Opcode::Abort, Ok(ReplyBody::Done)),
        (
            Opcode::Commit,
            Err(Failure::Osd(OsdError::Transaction(TxnError::NotFound(
                TxnId(3),
            )))),
        ),
        (
            Opcode::TxnOp,
            Err(Failure::Osd(OsdError::Transaction(TxnError::TooLarge {
                txn: TxnId(3),
                needed_bytes: 5 << 20,
                limit_bytes: 1 << 20,
            }))),
        ),
        (
            Opcode::Begin,
            Err(Failure::Osd(OsdError::Transaction(TxnError::TooMany {
                limit: 64,
            }))),
        ),
        (
            Opcode::TxnOp,
            Err(Failure::Osd(OsdError::Transaction(TxnError::Unsupported(
                "encrypted".into(),
            )))),
        ),
    ]
    .into_iter()
    .map(|(op, r)| (op as u16, r))
    .chain([(
        0x7777u16,
        Err(Failure::refused(Status::UnknownOpcode, "0x7777")),
    )])
    .collect()
}

#[test]
fn every_reply_round_trips_with_and_without_integrity() {
    let k = key();
    for (i, (op, result)) in all_replies().into_iter().enumerate() {
        let reply = Reply {
            request_id: i as u64,
            opcode: op,
            result,
        };
        for key in [None, Some(&k)] {
            let f = encode_reply(VERSION_1, &reply, key);
            let (h, body) = split(&f);
            assert!(h.is_reply());
            assert_eq!(decode_reply(&h, body).unwrap(), reply);
            if let Some(k) = key {
                assert!(Security::verify(k, &h, body));
            }
        }
    }
}

#[test]
fn every_status_has_a_distinct_code_and_every_osd_error_its_own() {
    let mut codes: Vec<u16> = Status::ALL.iter().map(|s| *s as u16).collect();
    codes.sort();
    codes.dedup();
    assert_eq!(codes.len(), Status::ALL.len());
    for s in Status::ALL {
        assert_eq!(Status::from_code(s as u16), Some(s));
    }
    assert_eq!(Status::from_code(0x9999), None);
    assert!(Status::Revoked.is_security() && !Status::TooLong.is_security());
}

#[test]
fn truncated_requests_and_replies_are_errors_not_panics() {
    let (c, k) = (cap(), key());
    for command in all_commands() {
        let req = Request {
            request_id: 1,
            command,
        };
        for f in [
            encode_request(VERSION_1, &req, None),
            encode_request(VERSION_1, &req, Some((&c, &k))),
        ] {
            let (h, body) = split(&f);
            for cut in 0..body.len() {
                let mut h2 = h;
                h2.body_len = cut as u32;
                assert!(
                    decode_request(&h2, &body[..cut]).is_err(),
                    "cut {cut} of {req:?}"
                );
            }
            // A body whose length disagrees with the header is refused.
            assert!(decode_request(&h, &body[..body.len().saturating_sub(1)]).is_err());
        }
    }
    for (op, result) in all_replies() {
        let f = encode_reply(
            VERSION_1,
            &Reply {
                request_id: 1,
                opcode: op,
                result,
            },
            None,
        );
        let (h, body) = split(&f);
        for cut in 0..body.len() {
            let mut h2 = h;
            h2.body_len = cut as u32;
            assert!(decode_reply(&h2, &body[..cut]).is_err());
        }
    }
}

#[test]
fn garbage_names_what_is_wrong() {
    let h = |opcode: u16, body_len: usize| Header {
        version: 1,
        flags: 0,
        opcode,
        request_id: 1,
        body_len: body_len as u32,
    };
    assert_eq!(
        decode_request(&h(0x7777, 0), &[]).unwrap_err(),
        ProtoError::UnknownOpcode { opcode: 0x7777 }
    );
    // REMOVE with a trailing byte.
    assert_eq!(
        decode_request(&h(Opcode::Remove as u16, 17), &[0; 17]).unwrap_err(),
        ProtoError::TrailingBytes {
            what: "request parameters",
            extra: 1
        }
    );
    // A WRITE whose data length claims more than the frame holds.
    let mut body = vec![0u8; 24];
    body.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode_request(&h(Opcode::Write as u16, body.len()), &body).unwrap_err(),
        ProtoError::Truncated {
            what: "write data",
            offset: 28,
            ..
        }
    ));
    // A bad attribute kind and a bad boolean.
    let mut body = vec![0u8; 16];
    body.extend_from_slice(&[99, 0, 0]);
    assert!(matches!(
        decode_request(&h(Opcode::GetAttr as u16, body.len()), &body).unwrap_err(),
        ProtoError::BadValue {
            what: "attribute kind",
            value: 99,
            offset: 16
        }
    ));
    assert!(matches!(
        decode_request(
            &h(Opcode::CreatePartition as u16, 9),
            &[2, 0, 0, 0, 0, 0, 0, 0, 0]
        )
        .unwrap_err(),
        ProtoError::BadValue {
            what: "partition id",
            value: 2,
            offset: 0
        }
    ));
    // A reply with an unknown status, and a list reply whose count exceeds its bytes.
    let mut rh = h(Opcode::List as u16, 2);
    rh.flags = crate::codec::FLAG_REPLY;
    assert!(matches!(
        decode_reply(&rh, &[0x55, 0x55]).unwrap_err(),
        ProtoError::BadValue { what: "status", .. }
    ));
    let body = [0, 0, 0xff, 0xff, 0xff, 0xff];
    rh.body_len = 6;
    assert!(matches!(
        decode_reply(&rh, &body).unwrap_err(),
        ProtoError::Truncated { what: "ids", .. }
    ));
    // A reply decoded as a request and the other way round.
    assert!(decode_request(&rh, &body).is_err());
    assert!(decode_reply(&h(Opcode::List as u16, 6), &body).is_err());
}

/// Seeded random bytes through the frame decoders: the stable-toolchain stand-in for the fuzz
/// target (`fuzz/fuzz_targets/proto_frame.rs` runs the same function).
#[test]
fn random_bytes_never_panic() {
    use rand::{Rng, RngCore, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x05d);
    let valid: Vec<Vec<u8>> = all_commands()
        .into_iter()
        .map(|command| {
            encode_request(
                VERSION_1,
                &Request {
                    request_id: 3,
                    command,
                },
                Some((&cap(), &key())),
            )
        })
        .collect();
    for i in 0..20_000 {
        let mut data = if i % 2 == 0 {
            // A valid frame with a few bytes changed: gets past the header more often.
            let mut f = valid[rng.gen_range(0..valid.len())].clone();
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..f.len());
                f[at] = rng.gen();
            }
            f
        } else {
            let mut f = vec![0u8; rng.gen_range(0..200)];
            rng.fill_bytes(&mut f);
            if f.len() >= 4 {
                f[..4].copy_from_slice(&crate::MAGIC);
            }
            f
        };
        if i % 7 == 0 {
            data.truncate(rng.gen_range(0..=data.len()));
        }
        crate::fuzz_frames(&data);
    }
}

fn arb_oid() -> impl Strategy<Value = Oid> {
    (any::<u64>(), any::<u64>()).prop_map(|(p, o)| Oid::new(p, o))
}

fn arb_attr() -> impl Strategy<Value = Attr> {
    prop_oneof![
        Just(Attr::LogicalLength),
        Just(Attr::UsedCapacity),
        Just(Attr::CreatedTime),
        Just(Attr::ModifiedTime),
        Just(Attr::AccessedTime),
        Just(Attr::AttrChangedTime),
        Just(Attr::Priority),
        Just(Attr::ExpectedSize),
        Just(Attr::AccessPattern),
        Just(Attr::ReadOnly),
        Just(Attr::InodeEmbedded),
        Just(Attr::Reliability),
        Just(Attr::Encryption),
        Just(Attr::Compression),
        any::<u16>().prop_map(Attr::User),
    ]
}

fn arb_value() -> impl Strategy<Value = AttrValue> {
    prop_oneof![
        any::<u64>().prop_map(AttrValue::U64),
        any::<bool>().prop_map(AttrValue::Bool),
        (0u8..4).prop_map(|p| AttrValue::Pattern(match p {
            0 => AccessPattern::Unknown,
            1 => AccessPattern::Sequential,
            2 => AccessPattern::Random,
            _ => AccessPattern::WriteOnce,
        })),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(AttrValue::Bytes),
        Just(AttrValue::Absent),
    ]
}

fn arb_command() -> impl Strategy<Value = Command> {
    let data = || proptest::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..10)
            .prop_map(|versions| Command::Hello { versions }),
        proptest::option::of(any::<u64>()).prop_map(|id| Command::CreatePartition {
            id: id.map(PartitionId)
        }),
        any::<u64>().prop_map(|id| Command::RemovePartition {
            id: PartitionId(id)
        }),
        (any::<u64>(), any::<u32>())
            .prop_map(|(token, max)| Command::ListPartitions { token, max }),
        (any::<u64>(), any::<u32>()).prop_map(|(p, version)| Command::SetKeyVersion {
            partition: PartitionId(p),
            version
        }),
        (any::<u64>(), proptest::option::of(any::<u64>())).prop_map(|(p, id)| Command::Create {
            partition: PartitionId(p),
            id: id.map(ObjectId)
        }),
        arb_oid().prop_map(|oid| Command::Remove { oid }),
        (arb_oid(), any::<u64>(), any::<u32>()).prop_map(|(oid, offset, length)| Command::Read {
            oid,
            offset,
            length
        }),
        (arb_oid(), any::<u64>(), data()).prop_map(|(oid, offset, data)| Command::Write {
            oid,
            offset,
            data
        }),
        (arb_oid(), data()).prop_map(|(oid, data)| Command::Append { oid, data }),
        (arb_oid(), any::<u64>()).prop_map(|(oid, length)| Command::Truncate { oid, length }),
        (arb_oid(), arb_attr()).prop_map(|(oid, attr)| Command::GetAttr { oid, attr }),
        (arb_oid(), arb_attr(), arb_value()).prop_map(|(oid, attr, value)| Command::SetAttr {
            oid,
            attr,
            value
        }),
        (any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(p, token, max)| Command::List {
            partition: PartitionId(p),
            token,
            max
        }),
        prop_oneof![
            arb_oid().prop_map(FlushScope::Object),
            any::<u64>().prop_map(|p| FlushScope::Partition(PartitionId(p))),
            Just(FlushScope::Device),
        ]
        .prop_map(|scope| Command::Flush { scope }),
        any::<u64>().prop_map(|p| Command::Begin {
            partition: PartitionId(p)
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(p, t)| Command::Commit {
            partition: PartitionId(p),
            txn: TxnId(t)
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(p, t)| Command::Abort {
            partition: PartitionId(p),
            txn: TxnId(t)
        }),
        (any::<u64>(), arb_oid(), any::<u64>(), data()).prop_map(|(t, oid, offset, data)| {
            Command::TxnOp {
                txn: TxnId(t),
                op: TxnOp::Write { oid, offset, data },
            }
        }),
        (any::<u64>(), arb_oid(), arb_attr(), arb_value()).prop_map(|(t, oid, attr, value)| {
            Command::TxnOp {
                txn: TxnId(t),
                op: TxnOp::SetAttr { oid, attr, value },
            }
        }),
    ]
}

/// A transaction command must wrap one of the five commands a transaction holds: a READ, a
/// FLUSH, a nested transaction command or an unknown opcode inside is a bad value naming the
/// offset, and a wrapped command cut short is truncated, never a panic.
#[test]
fn a_transaction_command_wrapping_anything_else_is_refused() {
    let h = |body_len: usize| Header {
        version: 1,
        flags: 0,
        opcode: Opcode::TxnOp as u16,
        request_id: 1,
        body_len: body_len as u32,
    };
    for inner in [
        Opcode::Read as u16,
        Opcode::Flush as u16,
        Opcode::TxnOp as u16,
        Opcode::Begin as u16,
        0x7777,
    ] {
        let mut body = 7u64.to_be_bytes().to_vec();
        body.extend_from_slice(&inner.to_be_bytes());
        body.extend_from_slice(&[0; 40]);
        let e = decode_request(&h(body.len()), &body).unwrap_err();
        assert!(
            matches!(
                e,
                ProtoError::BadValue {
                    what: "transaction command opcode (CREATE, REMOVE, WRITE, TRUNCATE or SET ATTRIBUTES)",
                    offset: 8,
                    ..
                }
            ),
            "{inner:#x}: {e:?}"
        );
    }
    // A wrapped REMOVE without its object id.
    let mut body = 7u64.to_be_bytes().to_vec();
    body.extend_from_slice(&(Opcode::Remove as u16).to_be_bytes());
    body.extend_from_slice(&[0; 9]);
    assert!(matches!(
        decode_request(&h(body.len()), &body).unwrap_err(),
        ProtoError::Truncated { .. }
    ));
    // A COMMIT without its transaction id.
    let hc = Header {
        opcode: Opcode::Commit as u16,
        body_len: 8,
        ..h(8)
    };
    assert!(matches!(
        decode_request(&hc, &[0; 8]).unwrap_err(),
        ProtoError::Truncated {
            what: "transaction id",
            ..
        }
    ));
}

fn arb_cap() -> impl Strategy<Value = Capability> {
    (
        any::<u64>(),
        proptest::option::of(any::<u64>()),
        0u16..(1 << 9),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(p, o, ops, key_version, expires_unix_s)| Capability {
            partition: PartitionId(p),
            object: o.map_or(CapObject::All, |o| CapObject::One(ObjectId(o))),
            ops: Ops(ops),
            key_version,
            expires_unix_s,
        })
}

proptest! {
    #[test]
    fn requests_round_trip(id in any::<u64>(), command in arb_command(), cap in arb_cap(), secured in any::<bool>()) {
        let k = MasterKey::from_bytes([1; 32]).capability_key(&cap);
        let req = Request { request_id: id, command };
        let f = encode_request(VERSION_1, &req, secured.then_some((&cap, &k)));
        let (h, body) = split(&f);
        let d = decode_request(&h, body).unwrap();
        prop_assert_eq!(d.request_id, id);
        prop_assert_eq!(d.command, req.command);
        prop_assert_eq!(d.security.map(|s| s.capability), secured.then_some(cap));
        if secured {
            prop_assert!(Security::verify(&k, &h, body));
        }
    }

    #[test]
    fn replies_round_trip(id in any::<u64>(), ids in proptest::collection::vec(any::<u64>(), 0..50),
                          next in proptest::option::of(any::<u64>()), data in proptest::collection::vec(any::<u8>(), 0..300),
                          value in arb_value(), msg in ".{0,40}", which in 0usize..5) {
        let (opcode, result) = match which {
            0 => (Opcode::List, Ok(ReplyBody::Ids { ids, next })),
            1 => (Opcode::Read, Ok(ReplyBody::Data(data))),
            2 => (Opcode::GetAttr, Ok(ReplyBody::Attr(value))),
            3 => (Opcode::Read, Err(Failure::Osd(OsdError::NotFound(msg)))),
            _ => (Opcode::Write, Err(Failure::refused(Status::BadIntegrity, msg))),
        };
        let reply = Reply { request_id: id, opcode: opcode as u16, result };
        let f = encode_reply(VERSION_1, &reply, Some(&key()));
        let (h, body) = split(&f);
        prop_assert_eq!(decode_reply(&h, body).unwrap(), reply);
    }

    #[test]
    fn arbitrary_bodies_never_panic(opcode in any::<u16>(), flags in 0u8..4, body in proptest::collection::vec(any::<u8>(), 0..400)) {
        let h = Header { version: 1, flags, opcode, request_id: 0, body_len: body.len() as u32 };
        let _ = decode_request(&h, &body);
        let _ = decode_reply(&h, &body);
    }
}
