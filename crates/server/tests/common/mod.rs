//! A server on loopback over an in-memory store, and a raw connection that sends hand-made frames.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flash::Nand;
use fml::FmlConfig;
use osd::{ObjectStore, Osd, OsdConfig, PartitionId};
use proto::{
    CapKey, CapObject, Capability, Command, Header, MasterKey, Ops, Reply, Request, HEADER_LEN,
};
use server::ServerConfig;

pub const P: u64 = 0x10000;

pub type Store = ObjectStore<Nand>;

pub fn master() -> MasterKey {
    MasterKey::from_bytes([0x42; 32])
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A 64 MiB store (the tiny preset with more blocks) with partition 0x10000.
pub fn store() -> Store {
    let mut device = flash::preset("tiny").unwrap();
    device.geometry.blocks_per_plane = 128;
    let cfg = OsdConfig {
        fml: FmlConfig::for_blocks(device.gang.superblocks(&device.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(device).unwrap(), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    s
}

pub struct Running {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Store>>,
}

impl Running {
    /// Shuts the server down gracefully and returns its store.
    pub fn stop(mut self) -> Store {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap()
    }
}

pub fn start(config: ServerConfig) -> Running {
    start_with(store(), config)
}

pub fn start_with(store: Store, config: ServerConfig) -> Running {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            server::serve(listener, store, master(), config, async {
                let _ = stop_rx.await;
            })
            .await
            .unwrap()
        })
    });
    let addr = addr_rx.recv().unwrap();
    Running {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

pub fn cap(partition: u64, object: Option<u64>, ops: Ops) -> Capability {
    Capability {
        partition: PartitionId(partition),
        object: object.map_or(CapObject::All, |o| CapObject::One(osd::ObjectId(o))),
        ops,
        key_version: 0,
        expires_unix_s: now() + 600,
    }
}

/// A connection that speaks frames by hand.
pub struct Raw {
    pub s: TcpStream,
    next_id: u64,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Raw { s, next_id: 100 }
    }

    /// Connects and completes HELLO.
    pub fn hello(addr: SocketAddr) -> Raw {
        let mut r = Raw::connect(addr);
        let reply = r.call(Command::Hello { versions: vec![1] }, None);
        assert!(reply.result.is_ok(), "{reply:?}");
        r
    }

    pub fn frame(&mut self, c: Command, cred: Option<(&Capability, &CapKey)>) -> Vec<u8> {
        self.next_id += 1;
        proto::encode_request(
            1,
            &Request {
                request_id: self.next_id,
                command: c,
            },
            cred,
        )
    }

    pub fn send_bytes(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    /// The next reply, or None when the server closed the connection.
    pub fn read_reply(&mut self) -> Option<Reply> {
        let mut head = [0u8; HEADER_LEN];
        if self.s.read_exact(&mut head).is_err() {
            return None;
        }
        let h = Header::decode(&head, u32::MAX).unwrap();
        let mut body = vec![0u8; h.body_len as usize];
        self.s.read_exact(&mut body).unwrap();
        Some(proto::decode_reply(&h, &body).unwrap())
    }

    pub fn call(&mut self, c: Command, cred: Option<(&Capability, &CapKey)>) -> Reply {
        let f = self.frame(c, cred);
        self.send_bytes(&f);
        self.read_reply().expect("server closed the connection")
    }

    /// Sends a command signed with `cap` under the test master key.
    pub fn signed(&mut self, c: Command, cap: &Capability) -> Reply {
        let k = master().capability_key(cap);
        self.call(c, Some((cap, &k)))
    }
}
