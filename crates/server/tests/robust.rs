//! Bad input, slow clients, many clients, pipelining, and the same code on a local and a remote
//! store.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use client::{Client, Credentials};
use common::*;
use osd::{Attr, AttrValue, FlushScope, ObjectId, Oid, Osd, PartitionId};
use proto::{Capability, Command, Header, Ops, ReplyBody, Status, HEADER_LEN};
use rand::{Rng, RngCore, SeedableRng};
use server::ServerConfig;

fn status(r: &proto::Reply) -> Status {
    match &r.result {
        Ok(_) => Status::Ok,
        Err(f) => f.status(),
    }
}

/// A well-behaved client does a round trip on a fresh connection.
fn serves(addr: std::net::SocketAddr) {
    let mut c = Raw::hello(addr);
    let r = c.signed(
        Command::List {
            partition: PartitionId(P),
            token: 0,
            max: 10,
        },
        &cap(P, None, Ops::LIST),
    );
    assert_eq!(status(&r), Status::Ok, "{r:?}");
}

/// Reads until the server closes the connection (or 5 s pass); returns the replies seen.
fn drain(c: &mut Raw) -> Vec<proto::Reply> {
    c.s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    while let Some(r) = c.read_reply() {
        out.push(r);
    }
    out
}

#[test]
fn garbage_truncated_and_oversized_frames() {
    let cfg = ServerConfig {
        max_frame_bytes: 1 << 20,
        frame_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    };
    let srv = start(cfg);

    // Bad magic: an error reply, then the connection is closed.
    let mut c = Raw::connect(srv.addr);
    c.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let replies = drain(&mut c);
    assert_eq!(replies.len(), 1);
    assert_eq!(status(&replies[0]), Status::BadFrame);
    serves(srv.addr);

    // An absurd length: TooLong naming the request id, then closed.
    let mut c = Raw::hello(srv.addr);
    let h = Header {
        version: 1,
        flags: 0,
        opcode: proto::Opcode::Write as u16,
        request_id: 77,
        body_len: u32::MAX,
    };
    c.send_bytes(&h.encode());
    let replies = drain(&mut c);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        (replies[0].request_id, status(&replies[0])),
        (77, Status::TooLong)
    );
    serves(srv.addr);

    // A READ longer than a reply may be.
    let mut c = Raw::hello(srv.addr);
    let r = c.signed(
        Command::Read {
            oid: Oid::new(P, 0x20000),
            offset: 0,
            length: u32::MAX,
        },
        &cap(P, None, Ops::ALL),
    );
    assert_eq!(status(&r), Status::TooLong);

    // Unknown opcode and a malformed body: error replies, the connection stays.
    let mut h = Header {
        version: 1,
        flags: 0,
        opcode: 0x7777,
        request_id: 5,
        body_len: 3,
    };
    c.send_bytes(&h.encode());
    c.send_bytes(&[1, 2, 3]);
    assert_eq!(status(&c.read_reply().unwrap()), Status::UnknownOpcode);
    h.opcode = proto::Opcode::Remove as u16;
    c.send_bytes(&h.encode());
    c.send_bytes(&[1, 2, 3]);
    assert_eq!(status(&c.read_reply().unwrap()), Status::BadFrame);
    // Reply flag on a request, and unknown flags.
    let mut f = c.frame(
        Command::Flush {
            scope: FlushScope::Device,
        },
        None,
    );
    f[5] = 0x01;
    c.send_bytes(&f);
    assert_eq!(status(&c.read_reply().unwrap()), Status::BadFrame);
    let r = c.signed(
        Command::List {
            partition: PartitionId(P),
            token: 0,
            max: 1,
        },
        &cap(P, None, Ops::LIST),
    );
    assert_eq!(status(&r), Status::Ok);

    // Commands before HELLO, and a HELLO with no common version.
    let mut c = Raw::connect(srv.addr);
    let r = c.signed(
        Command::Flush {
            scope: FlushScope::Device,
        },
        &cap(0, None, Ops::ALL),
    );
    assert_eq!(status(&r), Status::HelloRequired);
    let r = c.call(
        Command::Hello {
            versions: vec![9, 200],
        },
        None,
    );
    assert_eq!(status(&r), Status::UnsupportedVersion);
    let r = c.call(
        Command::Hello {
            versions: vec![9, 1],
        },
        None,
    );
    assert_eq!(
        r.result,
        Ok(ReplyBody::Hello {
            version: 1,
            max_frame_bytes: 1 << 20
        })
    );

    // A truncated frame and a hang-up: nothing breaks.
    let mut c = Raw::hello(srv.addr);
    let f = c.frame(
        Command::Write {
            oid: Oid::new(P, 0x20000),
            offset: 0,
            data: vec![7; 100],
        },
        None,
    );
    c.send_bytes(&f[..f.len() - 1]);
    drop(c);
    serves(srv.addr);

    // A slow client (half a frame, then silence) is disconnected after the frame timeout, and
    // others are served meanwhile.
    let mut slow = Raw::hello(srv.addr);
    slow.send_bytes(&f[..HEADER_LEN + 2]);
    serves(srv.addr);
    let t = Instant::now();
    slow.s
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    assert_eq!(
        slow.s.read(&mut b).unwrap_or(0),
        0,
        "slow client not closed"
    );
    assert!(t.elapsed() < Duration::from_secs(4));

    // Random bytes from many connections.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(18);
    for i in 0..50 {
        let mut c = Raw::hello(srv.addr);
        let mut junk = vec![0u8; rng.gen_range(1..600)];
        rng.fill_bytes(&mut junk);
        if i % 2 == 0 {
            let n = 4.min(junk.len());
            junk[..n].copy_from_slice(&b"OSDW"[..n]);
        }
        let _ = c.s.write_all(&junk);
        let _ = c.s.shutdown(std::net::Shutdown::Write);
        drain(&mut c);
    }
    serves(srv.addr);
    srv.stop();
}

#[test]
fn pipelined_requests_are_answered_by_id() {
    let srv = start(ServerConfig::default());
    let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    let p = PartitionId(P);
    let objects: Vec<ObjectId> = (0..20).map(|_| c.create(p, None).unwrap()).collect();
    let mut batch = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        batch.push(Command::Write {
            oid: Oid {
                partition: p,
                object: *o,
            },
            offset: 0,
            data: vec![i as u8; 1000 + i],
        });
        batch.push(Command::Read {
            oid: Oid {
                partition: p,
                object: *o,
            },
            offset: 0,
            length: 5000,
        });
    }
    // 40 requests in flight at once (the server allows 64 per connection).
    let replies = c.pipeline(batch).unwrap();
    for (i, pair) in replies.chunks(2).enumerate() {
        assert_eq!(pair[0].as_ref().unwrap(), &ReplyBody::Done);
        assert_eq!(
            pair[1].as_ref().unwrap(),
            &ReplyBody::Data(vec![i as u8; 1000 + i])
        );
    }
    // More than the in-flight limit: the server slows the sender down, nothing is lost.
    let batch: Vec<Command> = (0..300)
        .map(|_| Command::GetAttr {
            oid: Oid {
                partition: p,
                object: objects[0],
            },
            attr: Attr::LogicalLength,
        })
        .collect();
    for r in c.pipeline(batch).unwrap() {
        assert_eq!(r.unwrap(), ReplyBody::Attr(AttrValue::U64(1000)));
    }
    srv.stop();
}

/// The same code against `osd::Osd` on a local store and through the client.
fn exercise(s: &mut dyn Osd) -> Vec<String> {
    let p = PartitionId(P);
    let mut log = Vec::new();
    let o = s.create(p, Some(ObjectId(0x30000))).unwrap();
    let oid = Oid {
        partition: p,
        object: o,
    };
    s.write(oid, 0, b"0123456789").unwrap();
    log.push(format!("append at {}", s.append(oid, b"abc").unwrap()));
    s.truncate(oid, 12).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(oid, 2, &mut buf).unwrap();
    log.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    s.set_attr(oid, Attr::Priority, AttrValue::U64(2)).unwrap();
    s.set_attr(oid, Attr::ExpectedSize, AttrValue::U64(1 << 20))
        .unwrap();
    s.set_attr(
        oid,
        Attr::AccessPattern,
        AttrValue::Pattern(osd::onode::AccessPattern::Sequential),
    )
    .unwrap();
    s.set_attr(oid, Attr::User(0x1001), AttrValue::Bytes(b"tag".to_vec()))
        .unwrap();
    for a in [
        Attr::LogicalLength,
        Attr::Priority,
        Attr::ExpectedSize,
        Attr::AccessPattern,
        Attr::User(0x1001),
        Attr::User(0x1002),
    ] {
        log.push(format!("{a:?} = {:?}", s.get_attr(oid, a).unwrap()));
    }
    log.push(format!(
        "{:?}",
        s.create(p, Some(ObjectId(0x30000)))
            .map_err(|e| e.to_string())
    ));
    log.push(format!(
        "{:?}",
        s.read(Oid::new(P, 0x99999), 0, &mut buf)
            .map_err(|e| e.to_string())
    ));
    let q = s.create_partition(None).unwrap();
    log.push(format!("{:?}", s.list_partitions(0, 10).unwrap()));
    s.remove_partition(q).unwrap();
    log.push(format!("{:?}", s.list(p, 0, 10).unwrap()));
    s.flush(FlushScope::Object(oid)).unwrap();
    s.remove(oid).unwrap();
    s.flush(FlushScope::Device).unwrap();
    log.push(format!("{:?}", s.list(p, 0, 10).unwrap()));
    log
}

#[test]
fn local_and_remote_stores_answer_alike() {
    let mut local = store();
    let expected = exercise(&mut local);
    let srv = start(ServerConfig::default());
    let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    assert_eq!(exercise(&mut c), expected);
    srv.stop();
}

#[test]
fn issued_capabilities_limit_the_client() {
    let srv = start(ServerConfig::default());
    let mut admin = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    let o = admin.create(PartitionId(P), None).unwrap();
    let oid = Oid {
        partition: PartitionId(P),
        object: o,
    };
    let rw = cap(P, Some(o.0), Ops::READ.union(Ops::WRITE));
    let mut c = Client::connect(
        srv.addr,
        Credentials::Capabilities(vec![(rw, master().capability_key(&rw))]),
    )
    .unwrap();
    c.write(oid, 0, b"mine").unwrap();
    let mut b = [0u8; 4];
    assert_eq!(c.read(oid, 0, &mut b).unwrap(), 4);
    assert_eq!(&b, b"mine");
    // The client has no capability for these; it says so without asking the server.
    assert!(c
        .remove(oid)
        .unwrap_err()
        .to_string()
        .contains("no capability"));
    assert!(c.create(PartitionId(P), None).is_err());
    srv.stop();
}

/// 16 clients, each writing and reading back its own objects for a few seconds with seeded
/// payloads; every read is compared byte for byte. Then a graceful stop, and the store holds
/// each client's last version of every object.
#[test]
fn sixteen_concurrent_clients() {
    const CLIENTS: u64 = 16;
    let srv = start(ServerConfig::default());
    let addr = srv.addr;
    let deadline = Instant::now() + Duration::from_secs(3);
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            std::thread::spawn(move || {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(i);
                let mut c = Client::connect(addr, Credentials::Key(master())).unwrap();
                let p = PartitionId(P);
                let objects: Vec<Oid> = (0..4)
                    .map(|k| Oid {
                        partition: p,
                        object: c.create(p, Some(ObjectId(0x100000 + i * 16 + k))).unwrap(),
                    })
                    .collect();
                let mut model: Vec<Vec<u8>> = vec![Vec::new(); objects.len()];
                let mut ops = 0u64;
                while Instant::now() < deadline || ops < 20 {
                    let k = rng.gen_range(0..objects.len());
                    if rng.gen_bool(0.5) || model[k].is_empty() {
                        let len = rng.gen_range(1..64 << 10);
                        let mut data = vec![0u8; len];
                        rng.fill_bytes(&mut data);
                        c.truncate(objects[k], 0).unwrap();
                        c.write(objects[k], 0, &data).unwrap();
                        model[k] = data;
                    } else {
                        let mut buf = vec![0u8; model[k].len() + 10];
                        let n = c.read(objects[k], 0, &mut buf).unwrap();
                        assert_eq!(n, model[k].len(), "client {i} object {k}");
                        assert!(
                            buf[..n] == model[k][..],
                            "client {i} object {k}: data differs"
                        );
                    }
                    ops += 1;
                }
                (objects, model, ops)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let total: u64 = results.iter().map(|r| r.2).sum();
    assert!(total >= CLIENTS * 20);
    let mut s = srv.stop();
    for (objects, model, _) in results {
        for (oid, want) in objects.iter().zip(model) {
            let mut buf = vec![0u8; want.len()];
            assert_eq!(s.read(*oid, 0, &mut buf).unwrap(), want.len());
            assert!(buf == want);
        }
    }
    eprintln!("16 clients: {total} operations in 3 s");
}

/// DESCRIBE answers as the local store does; FORMAT OSD leaves the target durably empty (every
/// object and partition gone, across a restart), needs partition-admin rights on the device,
/// and the emptied target takes new partitions and objects.
#[test]
fn describe_and_format_osd_over_the_wire() {
    let mut local = store();
    let expected = local.describe().unwrap();
    let srv = start(ServerConfig::default());
    let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    let d = c.describe().unwrap();
    assert_eq!(
        (d.unit_bytes, d.capacity_bytes),
        (expected.unit_bytes, expected.capacity_bytes)
    );
    assert_eq!(d.placement, expected.placement);
    let q = c.create_partition(None).unwrap();
    for p in [PartitionId(P), q] {
        for _ in 0..3 {
            let o = c.create(p, None).unwrap();
            c.write(
                Oid {
                    partition: p,
                    object: o,
                },
                0,
                &[7u8; 5000],
            )
            .unwrap();
        }
    }
    c.flush(FlushScope::Device).unwrap();
    assert!(c.describe().unwrap().used_bytes > d.used_bytes);
    // A device capability to list, not to administer partitions, is refused.
    let list = cap(Capability::DEVICE.0, None, Ops::LIST);
    let mut weak = Client::connect(
        srv.addr,
        Credentials::Capabilities(vec![(list, master().capability_key(&list))]),
    )
    .unwrap();
    assert!(weak.format_osd().is_err());
    assert_eq!(c.list_partitions(0, 10).unwrap().0.len(), 2);
    c.format_osd().unwrap();
    assert!(c.list_partitions(0, 10).unwrap().0.is_empty());
    drop((c, weak));
    let store = srv.stop();
    let srv = start_with(store, ServerConfig::default());
    let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    assert!(c.list_partitions(0, 10).unwrap().0.is_empty());
    let p = c.create_partition(Some(PartitionId(P))).unwrap();
    let o = c.create(p, None).unwrap();
    c.write(
        Oid {
            partition: p,
            object: o,
        },
        0,
        b"after",
    )
    .unwrap();
    srv.stop();
}

/// The client library's objects with options: every attribute lands on the target; encryption
/// needs the target's master key and is refused (leaving no object) without it.
#[test]
fn objects_with_hints_priority_reliability_and_encryption() {
    use client::{create_object, ObjectOptions};
    use osd::onode::AccessPattern;
    let mut with_key = store();
    with_key.set_master_key(Some(osd::MasterKey::from_bytes([9; 32])));
    let srv = start_with(with_key, ServerConfig::default());
    let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    let opts = ObjectOptions {
        priority: Some(3),
        expected_size: Some(1 << 20),
        access_pattern: Some(AccessPattern::Sequential),
        reliability: None,
        encrypt: true,
    };
    // Encryption and parity are not combined (yet): one object of each.
    let parity = ObjectOptions {
        reliability: Some(1),
        encrypt: false,
        ..opts.clone()
    };
    for o in [&opts, &parity] {
        let object = create_object(&mut c, PartitionId(P), None, o).unwrap();
        let oid = Oid {
            partition: PartitionId(P),
            object,
        };
        for (attr, value) in o.attributes() {
            assert_eq!(c.get_attr(oid, attr).unwrap(), value, "{attr:?}");
        }
        c.write(oid, 0, &[5u8; 10_000]).unwrap();
        let mut back = vec![0u8; 10_000];
        assert_eq!(c.read(oid, 0, &mut back).unwrap(), 10_000);
        assert!(back.iter().all(|b| *b == 5));
    }
    let both = ObjectOptions {
        encrypt: true,
        ..parity.clone()
    };
    let before = c.list(PartitionId(P), 0, 100).unwrap().0;
    assert!(create_object(&mut c, PartitionId(P), None, &both).is_err());
    assert_eq!(c.list(PartitionId(P), 0, 100).unwrap().0, before);
    drop(c);
    srv.stop();

    // A target without the master key refuses encryption; nothing is left behind.
    let srv = start(ServerConfig::default());
    let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    let before = c.list(PartitionId(P), 0, 100).unwrap().0;
    assert!(create_object(&mut c, PartitionId(P), None, &opts).is_err());
    assert_eq!(c.list(PartitionId(P), 0, 100).unwrap().0, before);
    srv.stop();
}
