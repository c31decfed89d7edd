//! The capability matrix: every attack is refused with its own status code, and the server goes
//! on serving the same connection and new ones afterwards.

mod common;

use common::*;
use osd::{Attr, AttrValue, Oid, PartitionId};
use proto::{Command, Failure, MasterKey, Ops, ReplyBody, Status, HEADER_LEN};

fn status(r: &proto::Reply) -> Status {
    match &r.result {
        Ok(_) => Status::Ok,
        Err(f) => f.status(),
    }
}

#[test]
fn capability_matrix() {
    let srv = start(server::ServerConfig::default());
    let mut c = Raw::hello(srv.addr);
    let admin = cap(P, None, Ops::ALL);
    let made = c.signed(
        Command::Create {
            partition: PartitionId(P),
            id: Some(osd::ObjectId(0x20000)),
        },
        &admin,
    );
    assert_eq!(made.result, Ok(ReplyBody::Object(osd::ObjectId(0x20000))));
    let oid = Oid::new(P, 0x20000);
    let rw = cap(P, Some(0x20000), Ops::READ.union(Ops::WRITE));
    let write = |data: &[u8]| Command::Write {
        oid,
        offset: 0,
        data: data.to_vec(),
    };
    let read = Command::Read {
        oid,
        offset: 0,
        length: 5,
    };
    // The server still serves: a good request on this connection and on a new one.
    let still_serving = |c: &mut Raw| {
        assert_eq!(status(&c.signed(read.clone(), &rw)), Status::Ok);
        let mut fresh = Raw::hello(srv.addr);
        assert_eq!(status(&fresh.signed(read.clone(), &rw)), Status::Ok);
    };
    assert_eq!(c.signed(write(b"hello"), &rw).result, Ok(ReplyBody::Done));
    assert_eq!(
        c.signed(read.clone(), &rw).result,
        Ok(ReplyBody::Data(b"hello".to_vec()))
    );

    let mut attacks: Vec<(&str, proto::Reply, Status)> = Vec::new();

    // Forged: a capability signed under a key the target does not hold.
    let forger = MasterKey::from_bytes([0x13; 32]);
    let k = forger.capability_key(&rw);
    attacks.push((
        "forged",
        c.call(write(b"evil!"), Some((&rw, &k))),
        Status::BadIntegrity,
    ));

    // Altered capability: a read-only capability whose bytes are changed to allow writing.
    let ro = cap(P, Some(0x20000), Ops::READ);
    let k = master().capability_key(&ro);
    let mut f = c.frame(write(b"evil!"), Some((&ro, &k)));
    f[HEADER_LEN + 19] |= Ops::WRITE.0 as u8;
    c.send_bytes(&f);
    attacks.push((
        "altered capability",
        c.read_reply().unwrap(),
        Status::BadIntegrity,
    ));

    // Altered capability: widened from one object to another.
    let mut f = c.frame(write(b"evil!"), Some((&rw, &master().capability_key(&rw))));
    f[HEADER_LEN + 15] ^= 1;
    c.send_bytes(&f);
    attacks.push((
        "altered object",
        c.read_reply().unwrap(),
        Status::BadIntegrity,
    ));

    // Altered request: the data changed in flight.
    let mut f = c.frame(write(b"good!"), Some((&rw, &master().capability_key(&rw))));
    let n = f.len();
    f[n - 33] ^= 0xff;
    c.send_bytes(&f);
    attacks.push((
        "altered data",
        c.read_reply().unwrap(),
        Status::BadIntegrity,
    ));

    // Altered header: the request id changed (a replayed frame cannot be renumbered).
    let mut f = c.frame(write(b"good!"), Some((&rw, &master().capability_key(&rw))));
    f[15] ^= 1;
    c.send_bytes(&f);
    attacks.push((
        "altered header",
        c.read_reply().unwrap(),
        Status::BadIntegrity,
    ));

    // Expired.
    let old = proto::Capability {
        expires_unix_s: now() - 1,
        ..rw
    };
    attacks.push(("expired", c.signed(write(b"late!"), &old), Status::Expired));

    // Wrong object, wrong partition, wrong operation.
    let other = cap(P, Some(0x20001), Ops::ALL);
    attacks.push((
        "wrong object",
        c.signed(write(b"x"), &other),
        Status::WrongObject,
    ));
    let elsewhere = cap(P + 1, None, Ops::ALL);
    attacks.push((
        "wrong partition",
        c.signed(write(b"x"), &elsewhere),
        Status::WrongPartition,
    ));
    attacks.push((
        "wrong operation",
        c.signed(write(b"x"), &ro),
        Status::OperationDenied,
    ));
    let list = Command::List {
        partition: PartitionId(P),
        token: 0,
        max: 10,
    };
    attacks.push((
        "list with an object capability",
        c.signed(list.clone(), &rw),
        Status::WrongObject,
    ));
    attacks.push((
        "remove without the right",
        c.signed(Command::Remove { oid }, &rw),
        Status::OperationDenied,
    ));
    attacks.push((
        "truncate through the length attribute with set-attr only",
        c.signed(
            Command::SetAttr {
                oid,
                attr: Attr::LogicalLength,
                value: AttrValue::U64(0),
            },
            &cap(P, Some(0x20000), Ops::SET_ATTR),
        ),
        Status::OperationDenied,
    ));
    attacks.push((
        "create a partition with a partition capability",
        c.signed(Command::CreatePartition { id: None }, &admin),
        Status::WrongPartition,
    ));

    // No capability at all.
    attacks.push(("unsigned", c.call(write(b"x"), None), Status::NoCapability));

    // The key version attribute is the target's own.
    attacks.push((
        "set the key version attribute",
        c.signed(
            Command::SetAttr {
                oid: Oid::partition_root(PartitionId(P)),
                attr: Attr::User(server::KEY_VERSION_ATTR),
                value: AttrValue::Bytes(vec![0, 0, 0, 0]),
            },
            &admin,
        ),
        Status::Reserved,
    ));

    // A key version not issued yet.
    let future = proto::Capability {
        key_version: 1,
        ..rw
    };
    attacks.push((
        "future key version",
        c.signed(read.clone(), &future),
        Status::UnknownKeyVersion,
    ));

    for (name, reply, want) in &attacks {
        assert_eq!(status(reply), *want, "{name}: {reply:?}");
        assert!(want.is_security(), "{name}");
        still_serving(&mut c);
    }
    // No attack changed the object.
    assert_eq!(
        c.signed(read.clone(), &rw).result,
        Ok(ReplyBody::Data(b"hello".to_vec()))
    );

    // Revocation: the partition moves to key version 1; version-0 capabilities stop working.
    assert_eq!(
        c.signed(
            Command::SetKeyVersion {
                partition: PartitionId(P),
                version: 1
            },
            &admin
        )
        .result,
        Ok(ReplyBody::Done)
    );
    let r = c.signed(read.clone(), &rw);
    assert_eq!(status(&r), Status::Revoked, "{r:?}");
    let r = c.signed(read.clone(), &admin);
    assert_eq!(status(&r), Status::Revoked, "{r:?}");
    assert_eq!(
        c.signed(read.clone(), &future).result,
        Ok(ReplyBody::Data(b"hello".to_vec()))
    );
    // Going back is refused (a store error, signed by a current capability).
    let admin1 = proto::Capability {
        key_version: 1,
        ..admin
    };
    let r = c.signed(
        Command::SetKeyVersion {
            partition: PartitionId(P),
            version: 1,
        },
        &admin1,
    );
    assert!(
        matches!(
            &r.result,
            Err(Failure::Osd(osd::OsdError::InvalidArgument(_)))
        ),
        "{r:?}"
    );

    // The revocation is in the store and survives the server.
    let mut store = srv.stop();
    assert_eq!(server::key_version(&mut store, PartitionId(P)).unwrap(), 1);
    let srv = start_with(store, server::ServerConfig::default());
    let mut c = Raw::hello(srv.addr);
    assert_eq!(status(&c.signed(read.clone(), &rw)), Status::Revoked);
    assert_eq!(status(&c.signed(read, &future)), Status::Ok);
    srv.stop();
}

#[test]
fn replies_are_signed_and_the_client_checks_them() {
    let srv = start(server::ServerConfig::default());
    let mut c = Raw::hello(srv.addr);
    let admin = cap(P, None, Ops::ALL);
    let k = master().capability_key(&admin);
    let f = c.frame(
        Command::Create {
            partition: PartitionId(P),
            id: None,
        },
        Some((&admin, &k)),
    );
    c.send_bytes(&f);
    let mut head = [0u8; HEADER_LEN];
    std::io::Read::read_exact(&mut c.s, &mut head).unwrap();
    let h = proto::Header::decode(&head, u32::MAX).unwrap();
    let mut body = vec![0u8; h.body_len as usize];
    std::io::Read::read_exact(&mut c.s, &mut body).unwrap();
    assert!(h.is_secured());
    assert!(proto::Security::verify(&k, &h, &body));
    body[3] ^= 1;
    assert!(!proto::Security::verify(&k, &h, &body));
    srv.stop();
}

/// Regression: the target caches key versions; a partition removed and created again starts
/// from its own (absent, so 0) key version, not the cached one of its predecessor.
#[test]
fn a_recreated_partition_starts_at_key_version_zero() {
    let srv = start(server::ServerConfig::default());
    let mut c = Raw::hello(srv.addr);
    let q = 0x10007;
    let device = cap(0, None, Ops::ALL);
    let mk = Command::CreatePartition {
        id: Some(PartitionId(q)),
    };
    assert_eq!(status(&c.signed(mk.clone(), &device)), Status::Ok);
    let v0 = cap(q, None, Ops::ALL);
    let bump = Command::SetKeyVersion {
        partition: PartitionId(q),
        version: 2,
    };
    assert_eq!(status(&c.signed(bump, &v0)), Status::Ok);
    let v2 = proto::Capability {
        key_version: 2,
        ..v0
    };
    let rm = Command::RemovePartition { id: PartitionId(q) };
    assert_eq!(status(&c.signed(rm.clone(), &v0)), Status::Revoked);
    assert_eq!(status(&c.signed(rm, &v2)), Status::Ok);
    assert_eq!(status(&c.signed(mk, &device)), Status::Ok);
    let list = Command::List {
        partition: PartitionId(q),
        token: 0,
        max: 10,
    };
    assert_eq!(status(&c.signed(list.clone(), &v0)), Status::Ok);
    assert_eq!(status(&c.signed(list, &v2)), Status::UnknownKeyVersion);
    srv.stop();
}
