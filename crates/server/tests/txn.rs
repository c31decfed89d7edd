//! Transactions over the wire (BEGIN, commands in a transaction, COMMIT, ABORT): the client
//! exposes them, a transaction's commands are invisible to other connections until COMMIT,
//! each command needs the capability it needs alone, and a transaction belongs to the
//! connection that began it (another connection cannot commit, abort or add to it, and the
//! transactions a connection leaves open are aborted when it closes).

mod common;

use client::{Client, Credentials};
use common::*;
use osd::{Attr, AttrValue, ObjectId, Oid, Osd, OsdError, PartitionId, TxnError, TxnId, TxnOp};
use proto::{Command, Ops, ReplyBody, Status};

fn status(r: &proto::Reply) -> Status {
    match &r.result {
        Ok(_) => Status::Ok,
        Err(f) => f.status(),
    }
}

#[test]
fn a_committed_transaction_is_seen_whole_and_only_after_commit() {
    let srv = start(server::ServerConfig::default());
    let mut a = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    let mut b = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    let p = PartitionId(P);
    let t = a.begin_txn(p).unwrap();
    let x = a
        .txn_op(
            t,
            TxnOp::Create {
                partition: p,
                id: None,
            },
        )
        .unwrap()
        .expect("a create returns the id assigned");
    let ox = Oid {
        partition: p,
        object: x,
    };
    let oy = Oid::new(P, 0x30000);
    assert_eq!(
        a.txn_op(
            t,
            TxnOp::Create {
                partition: p,
                id: Some(ObjectId(0x30000)),
            },
        )
        .unwrap(),
        Some(ObjectId(0x30000))
    );
    for op in [
        TxnOp::Write {
            oid: ox,
            offset: 0,
            data: vec![7; 50_000],
        },
        TxnOp::Write {
            oid: oy,
            offset: 10,
            data: b"why".to_vec(),
        },
        TxnOp::SetAttr {
            oid: oy,
            attr: Attr::User(0x1001),
            value: AttrValue::Bytes(b"v1".to_vec()),
        },
    ] {
        assert_eq!(a.txn_op(t, op).unwrap(), None);
    }
    // Nothing of it before COMMIT, from either connection.
    assert!(matches!(
        b.get_attr(ox, Attr::LogicalLength),
        Err(OsdError::NotFound(_))
    ));
    assert!(matches!(
        a.get_attr(oy, Attr::LogicalLength),
        Err(OsdError::NotFound(_))
    ));
    // Another connection cannot commit, abort or add to it.
    assert!(matches!(
        b.commit_txn(t),
        Err(OsdError::Transaction(TxnError::NotFound(_)))
    ));
    assert!(matches!(
        b.txn_op(t, TxnOp::Remove { oid: oy }),
        Err(OsdError::Transaction(TxnError::NotFound(_)))
    ));
    a.commit_txn(t).unwrap();
    let mut buf = vec![0u8; 50_000];
    assert_eq!(b.read(ox, 0, &mut buf).unwrap(), 50_000);
    assert!(buf.iter().all(|&x| x == 7));
    let mut y = vec![0u8; 13];
    assert_eq!(b.read(oy, 0, &mut y).unwrap(), 13);
    assert_eq!(&y[10..], b"why");
    assert_eq!(
        b.get_attr(oy, Attr::User(0x1001)).unwrap(),
        AttrValue::Bytes(b"v1".to_vec())
    );
    // Committed or aborted, it is gone.
    assert!(matches!(
        a.abort_txn(t),
        Err(OsdError::Transaction(TxnError::NotFound(_)))
    ));
    // ABORT leaves no trace.
    let t2 = a.begin_txn(p).unwrap();
    a.txn_op(t2, TxnOp::Remove { oid: ox }).unwrap();
    a.abort_txn(t2).unwrap();
    assert!(b.get_attr(ox, Attr::LogicalLength).is_ok());
    srv.stop();
}

#[test]
fn each_command_in_a_transaction_needs_its_own_capability() {
    let srv = start(server::ServerConfig::default());
    let mut c = Raw::hello(srv.addr);
    let admin = cap(P, None, Ops::ALL);
    let begun = c.signed(
        Command::Begin {
            partition: PartitionId(P),
        },
        &admin,
    );
    let Ok(ReplyBody::Txn(t)) = begun.result else {
        panic!("{begun:?}")
    };
    let oid = Oid::new(P, 0x20000);
    // Only read rights on the object: its write in a transaction is refused.
    let ro = cap(P, Some(0x20000), Ops::READ);
    let w = Command::TxnOp {
        txn: t,
        op: TxnOp::Write {
            oid,
            offset: 0,
            data: vec![1],
        },
    };
    assert_eq!(status(&c.signed(w, &ro)), Status::OperationDenied);
    // BEGIN needs write rights on the whole partition.
    assert_eq!(
        status(&c.signed(
            Command::Begin {
                partition: PartitionId(P)
            },
            &ro
        )),
        Status::WrongObject
    );
    // A transaction of another partition: refused by the server's ownership check.
    let other = cap(0x20000, None, Ops::ALL);
    assert_eq!(
        status(&c.signed(
            Command::Commit {
                partition: PartitionId(0x20000),
                txn: t
            },
            &other
        )),
        Status::Transaction
    );
    // The partition's key-version attribute cannot be set through a transaction either.
    let reserved = Command::TxnOp {
        txn: t,
        op: TxnOp::SetAttr {
            oid: Oid::new(P, 0),
            attr: Attr::User(server::KEY_VERSION_ATTR),
            value: AttrValue::Bytes(vec![0, 0, 0, 9]),
        },
    };
    assert_eq!(status(&c.signed(reserved, &admin)), Status::Reserved);
    assert_eq!(
        status(&c.signed(
            Command::Commit {
                partition: PartitionId(P),
                txn: t
            },
            &admin
        )),
        Status::Ok
    );
    srv.stop();
}

#[test]
fn a_closed_connection_leaves_no_transaction_open() {
    let srv = start(server::ServerConfig::default());
    // More transactions than the store holds open at once, each on a connection that closes.
    for _ in 0..osd::store::TXN_OPEN_MAX + 4 {
        let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
        let t: TxnId = c.begin_txn(PartitionId(P)).unwrap();
        c.txn_op(
            t,
            TxnOp::Create {
                partition: PartitionId(P),
                id: None,
            },
        )
        .unwrap();
    }
    let mut c = Client::connect(srv.addr, Credentials::Key(master())).unwrap();
    // Closing is asynchronous: the store thread aborts each closed connection's transactions
    // in arrival order, before this BEGIN reaches it.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let t = c.begin_txn(PartitionId(P)).unwrap();
    c.abort_txn(t).unwrap();
    let (objects, _) = c.list(PartitionId(P), 0, 100).unwrap();
    assert!(objects.is_empty(), "{objects:?}");
    srv.stop();
}
