//! An S3 face on loopback over an in-memory store, and clients for it.

#![allow(dead_code)]

use std::net::SocketAddr;

use flash::Nand;
use fml::FmlConfig;
use osd::{ObjectStore, OsdConfig};
use s3::client::Client;
use s3::{Credentials, S3Config};

pub const ACCESS: &str = "tester";
pub const SECRET: &str = "tester-secret-key";

pub type Store = ObjectStore<Nand>;

/// A 64 MiB store (the tiny preset with more blocks).
pub fn store() -> Store {
    let mut device = flash::preset("tiny").unwrap();
    device.geometry.blocks_per_plane = 128;
    let cfg = OsdConfig {
        fml: FmlConfig::for_blocks(device.gang.superblocks(&device.geometry)),
        ..OsdConfig::default()
    };
    ObjectStore::format(Nand::in_memory(device).unwrap(), cfg).unwrap()
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

    pub fn client(&self) -> Client {
        Client::new(&self.addr.to_string(), ACCESS, SECRET)
    }
}

pub fn start(config: S3Config) -> Running {
    start_with(store(), config)
}

pub fn start_with(store: Store, config: S3Config) -> Running {
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
            let creds = Credentials::new([(ACCESS.to_string(), SECRET.to_string())]);
            s3::serve(listener, store, creds, config, async {
                let _ = stop_rx.await;
            })
            .await
            .unwrap()
        })
    });
    Running {
        addr: addr_rx.recv().unwrap(),
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

/// Bytes derived from (seed, length): checkable without keeping them.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn md5_hex(data: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
