//! The network commands: serve an image, make keys and capabilities, revoke, measure.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use client::{Client, Credentials};
use std::sync::{Arc, Mutex};

use osd::{Attr, AttrValue, DeviceInfo, FlushScope, ObjectId, Oid, Osd, OsdError, PartitionId};
use proto::{CapObject, Capability, MasterKey, Ops};

use crate::objects;

/// Reads a master key file (64 hex digits or 32 raw bytes); warns when others may read it.
pub fn read_key(path: &Path) -> Result<MasterKey> {
    let meta = std::fs::metadata(path).with_context(|| format!("key file {}", path.display()))?;
    if meta.len() > 4096 {
        bail!(
            "key file {}: {} bytes; a key file holds 64 hex digits",
            path.display(),
            meta.len()
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "warning: key file {} is readable by group or others (mode {:o}); chmod 600 it",
                path.display(),
                meta.permissions().mode() & 0o777
            );
        }
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    MasterKey::parse(&bytes).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// Reads a master key file as the object store's device master key (per-object encryption).
pub fn read_store_key(path: &Path) -> Result<osd::MasterKey> {
    Ok(osd::MasterKey::from_bytes(*read_key(path)?.as_bytes()))
}

/// Writes a fresh random master key (from the operating system's generator), mode 0600.
pub fn keygen(out: &Path, force: bool) -> Result<()> {
    use rand::RngCore;
    let mut key = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut key)
        .map_err(|e| anyhow!("no random numbers from the operating system: {e}"))?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(out).with_context(|| {
        format!(
            "creating {}{}",
            out.display(),
            if force {
                ""
            } else {
                " (use --force to replace it)"
            }
        )
    })?;
    f.write_all(MasterKey::from_bytes(key).to_file_text().as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    println!("wrote a new master key to {}", out.display());
    Ok(())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Prints a capability and its capability key, in hex, for a client.
pub fn cap(
    key_file: &Path,
    partition: u64,
    object: Option<u64>,
    ops: &str,
    expires_s: u64,
    key_version: u32,
) -> Result<()> {
    let key = read_key(key_file)?;
    let ops = Ops::parse(ops).map_err(|e| anyhow!("--ops: {e}"))?;
    let expires_unix_s = unix_now()
        .checked_add(expires_s)
        .ok_or_else(|| anyhow!("--expires {expires_s}: too far in the future"))?;
    let cap = Capability {
        partition: PartitionId(partition),
        object: object.map_or(CapObject::All, |o| CapObject::One(ObjectId(o))),
        ops,
        key_version,
        expires_unix_s,
    };
    let k = key.capability_key(&cap);
    println!("capability {}", proto::cap::hex_encode(&cap.encode()));
    println!("key        {}", k.to_hex());
    eprintln!(
        "partition {partition:#x}, {}, ops {}, key version {key_version}, expires at {expires_unix_s} (unix seconds)",
        match object {
            Some(o) => format!("object {o:#x}"),
            None => "all objects".into(),
        },
        ops.names()
    );
    Ok(())
}

/// Bumps a partition's key version on a stopped image (revoking every capability issued under
/// older versions); prints the new version.
pub fn revoke(image: &Path, partition: u64, version: Option<u32>) -> Result<()> {
    let mut s = objects::open(image)?;
    let p = PartitionId(partition);
    let current = server::key_version(&mut s, p).map_err(|e| anyhow!(e))?;
    let next = match version {
        Some(v) => v,
        None => current
            .checked_add(1)
            .ok_or_else(|| anyhow!("key version of partition {partition:#x} is at its maximum"))?,
    };
    server::set_key_version(&mut s, p, next).map_err(|e| anyhow!(e))?;
    objects::close(s)?;
    println!("partition {partition:#x}: key version {current} -> {next}");
    Ok(())
}

pub struct ServeArgs {
    pub image: Option<PathBuf>,
    /// Serve a fresh in-memory device of this preset instead of an image (nothing persists).
    pub memory: Option<String>,
    /// The OSD face: address and master key file.
    pub listen: Option<String>,
    pub key_file: Option<PathBuf>,
    pub max_frame_bytes: u32,
    pub idle_timeout_s: u64,
    pub frame_timeout_s: u64,
    /// The S3 face: address and credentials file.
    pub s3: Option<String>,
    pub s3_credentials: Option<PathBuf>,
    pub s3_max_object_bytes: u64,
    pub s3_min_part_bytes: u64,
}

/// What `ossd serve` runs: the OSD face, the S3 face, or both on one store.
struct Faces {
    osd: Option<(MasterKey, server::ServerConfig, String)>,
    s3: Option<(s3::Credentials, s3::S3Config, String)>,
}

fn faces(a: &ServeArgs) -> Result<Faces> {
    // The OSD face keeps its historical default address when only the key is given.
    let listen = a
        .listen
        .clone()
        .or_else(|| a.key_file.as_ref().map(|_| "127.0.0.1:7000".to_string()));
    let osd = match (&listen, &a.key_file) {
        (Some(listen), Some(key_file)) => {
            let key = read_key(key_file)?;
            if a.max_frame_bytes < 4096 {
                bail!("--max-frame-bytes {}: at least 4096", a.max_frame_bytes);
            }
            let config = server::ServerConfig {
                max_frame_bytes: a.max_frame_bytes,
                idle_timeout: Duration::from_secs(a.idle_timeout_s),
                frame_timeout: Duration::from_secs(a.frame_timeout_s),
                ..server::ServerConfig::default()
            };
            Some((key, config, listen.clone()))
        }
        (Some(_), None) => bail!("--listen needs --key-file (the master key of the OSD face)"),
        (None, Some(_)) => bail!("--key-file is for the OSD face: give --listen ADDR with it"),
        (None, None) => None,
    };
    let s3 = match (&a.s3, &a.s3_credentials) {
        (Some(addr), Some(file)) => {
            let creds = s3::Credentials::load(file).map_err(|e| anyhow!(e))?;
            if a.s3_max_object_bytes == 0 {
                bail!("--s3-max-object-bytes must be positive");
            }
            let config = s3::S3Config {
                limits: s3::Limits {
                    max_object_bytes: a.s3_max_object_bytes,
                    min_part_bytes: a.s3_min_part_bytes,
                    ..s3::Limits::default()
                },
                ..s3::S3Config::default()
            };
            Some((creds, config, addr.clone()))
        }
        (Some(_), None) => bail!("--s3 needs --s3-credentials FILE (access and secret keys, TOML)"),
        (None, Some(_)) => bail!("--s3-credentials is for the S3 face: give --s3 ADDR with it"),
        (None, None) => None,
    };
    if osd.is_none() && s3.is_none() {
        bail!("nothing to serve: give --listen ADDR --key-file K (OSD) and/or --s3 ADDR --s3-credentials F (S3)");
    }
    Ok(Faces { osd, s3 })
}

/// Serves an image (or a fresh in-memory device) until SIGTERM or Ctrl-C; then drains, flushes
/// and closes it.
pub fn serve(a: ServeArgs) -> Result<()> {
    let faces = faces(&a)?;
    match (&a.image, &a.memory) {
        (Some(image), None) => {
            let mut store = objects::open(image)?;
            // The OSD face's master key also unwraps the data keys of encrypted objects
            // (docs/SECURITY.md "Data at rest": derived under another label than the capability
            // keys). Served through S3 alone, encrypted objects stay unreadable.
            if let Some((key, _, _)) = &faces.osd {
                store.set_master_key(Some(osd::MasterKey::from_bytes(*key.as_bytes())));
            }
            let what = image.display().to_string();
            let store = run(store, faces, &what)?;
            objects::close(store)?;
            println!("closed {what}");
        }
        (None, Some(preset)) => {
            let device = flash::preset(preset).map_err(|e| anyhow!(e))?;
            let cfg = osd::OsdConfig {
                fml: fml::FmlConfig::for_blocks(device.gang.superblocks(&device.geometry)),
                ..osd::OsdConfig::default()
            };
            let nand = flash::Nand::in_memory(device).map_err(|e| anyhow!(e))?;
            let mut store = osd::ObjectStore::format(nand, cfg).map_err(|e| anyhow!(e))?;
            store
                .create_partition(Some(PartitionId(objects::DEFAULT_PARTITION)))
                .map_err(|e| anyhow!(e))?;
            let what = format!("in-memory {preset} device");
            run(store, faces, &what)?;
        }
        _ => bail!("give one of --image FILE and --memory PRESET"),
    }
    Ok(())
}

/// One store behind a mutex, so the OSD face's store thread and the S3 face can share it: each
/// command locks it for its own duration, and first sets the store's clock to the wall clock
/// (ns since the Unix epoch), as a mount does: a served store's times (objects' modified times,
/// OFS's mtimes over `ossd mount --remote`) are dates.
struct SharedStore<S>(Arc<Mutex<S>>);

impl<S> Clone for SharedStore<S> {
    fn clone(&self) -> Self {
        SharedStore(self.0.clone())
    }
}

impl<F: flash::Flash> SharedStore<osd::ObjectStore<F>> {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut osd::ObjectStore<F>) -> Result<T, OsdError>,
    ) -> Result<T, OsdError> {
        let mut g = self
            .0
            .lock()
            .map_err(|_| OsdError::Internal("a command panicked holding the store".into()))?;
        g.set_time(mount::fuse::wall_ns());
        f(&mut g)
    }
}

impl<F: flash::Flash> Osd for SharedStore<osd::ObjectStore<F>> {
    fn create_partition(&mut self, id: Option<PartitionId>) -> Result<PartitionId, OsdError> {
        self.with(|s| s.create_partition(id))
    }
    fn remove_partition(&mut self, id: PartitionId) -> Result<(), OsdError> {
        self.with(|s| s.remove_partition(id))
    }
    fn create(&mut self, p: PartitionId, id: Option<ObjectId>) -> Result<ObjectId, OsdError> {
        self.with(|s| s.create(p, id))
    }
    fn remove(&mut self, oid: Oid) -> Result<(), OsdError> {
        self.with(|s| s.remove(oid))
    }
    fn read(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<usize, OsdError> {
        self.with(|s| s.read(oid, offset, buf))
    }
    fn write(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<(), OsdError> {
        self.with(|s| s.write(oid, offset, data))
    }
    fn append(&mut self, oid: Oid, data: &[u8]) -> Result<u64, OsdError> {
        self.with(|s| s.append(oid, data))
    }
    fn truncate(&mut self, oid: Oid, length: u64) -> Result<(), OsdError> {
        self.with(|s| s.truncate(oid, length))
    }
    fn get_attr(&mut self, oid: Oid, attr: Attr) -> Result<AttrValue, OsdError> {
        self.with(|s| s.get_attr(oid, attr))
    }
    fn set_attr(&mut self, oid: Oid, attr: Attr, value: AttrValue) -> Result<(), OsdError> {
        self.with(|s| s.set_attr(oid, attr, value))
    }
    fn list_partitions(
        &mut self,
        token: u64,
        max: usize,
    ) -> Result<(Vec<PartitionId>, Option<u64>), OsdError> {
        self.with(|s| s.list_partitions(token, max))
    }
    fn list(
        &mut self,
        p: PartitionId,
        token: u64,
        max: usize,
    ) -> Result<(Vec<ObjectId>, Option<u64>), OsdError> {
        self.with(|s| s.list(p, token, max))
    }
    fn flush(&mut self, scope: FlushScope) -> Result<(), OsdError> {
        self.with(|s| s.flush(scope))
    }
    fn describe(&mut self) -> Result<DeviceInfo, OsdError> {
        self.with(|s| s.describe())
    }
    fn begin_txn(&mut self, p: PartitionId) -> Result<osd::TxnId, OsdError> {
        self.with(|s| s.begin_txn(p))
    }
    fn txn_op(&mut self, t: osd::TxnId, op: osd::TxnOp) -> Result<Option<ObjectId>, OsdError> {
        self.with(|s| s.txn_op(t, op))
    }
    fn commit_txn(&mut self, t: osd::TxnId) -> Result<(), OsdError> {
        self.with(|s| s.commit_txn(t))
    }
    fn abort_txn(&mut self, t: osd::TxnId) -> Result<(), OsdError> {
        self.with(|s| s.abort_txn(t))
    }
}

/// Completes on SIGTERM or Ctrl-C.
async fn signalled() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    eprintln!("ossd serve: shutting down: draining, flushing, closing");
}

fn run<F: flash::Flash + Send + 'static>(
    store: osd::ObjectStore<F>,
    faces: Faces,
    what: &str,
) -> Result<osd::ObjectStore<F>> {
    let shared = SharedStore(Arc::new(Mutex::new(store)));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let osd_listener = match &faces.osd {
            Some((_, _, listen)) => Some(
                tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("listening on {listen}"))?,
            ),
            None => None,
        };
        let s3_listener = match &faces.s3 {
            Some((_, _, addr)) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("listening on {addr} (S3)"))?,
            ),
            None => None,
        };
        if let Some(l) = &osd_listener {
            println!("listening on {} ({what})", l.local_addr()?);
        }
        if let Some(l) = &s3_listener {
            println!("s3 listening on {} ({what})", l.local_addr()?);
        }
        std::io::stdout().flush()?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        tokio::spawn(async move {
            signalled().await;
            let _ = stop_tx.send(true);
        });
        match (faces.osd, faces.s3, osd_listener, s3_listener) {
            (Some((key, config, _)), None, Some(l), None) => {
                drop(
                    server::serve(l, shared.clone(), key, config, stopped())
                        .await
                        .map_err(|e| anyhow!(e))?,
                );
            }
            (None, Some((creds, config, _)), None, Some(l)) => {
                drop(
                    s3::serve(l, shared.clone(), creds, config, stopped())
                        .await
                        .map_err(|e| anyhow!(e))?,
                );
            }
            (Some((key, oconfig, _)), Some((creds, sconfig, _)), Some(ol), Some(sl)) => {
                let (a, b) = tokio::join!(
                    server::serve(ol, shared.clone(), key, oconfig, stopped()),
                    s3::serve(sl, shared.clone(), creds, sconfig, stopped()),
                );
                drop(a.map_err(|e| anyhow!(e))?);
                drop(b.map_err(|e| anyhow!(e))?);
            }
            _ => bail!("internal: faces and listeners disagree"),
        }
        let inner = Arc::try_unwrap(shared.0)
            .map_err(|_| anyhow!("the store is still shared after the faces stopped"))?;
        inner
            .into_inner()
            .map_err(|_| anyhow!("a command panicked holding the store"))
    })
}

pub struct BenchArgs {
    pub addr: String,
    pub key_file: PathBuf,
    pub partition: u64,
    pub clients: usize,
    pub large_bytes: usize,
    pub small_bytes: usize,
    pub seconds: f64,
}

fn payload(client: usize, object: usize, round: u64, len: usize) -> Vec<u8> {
    // Cheap, distinct per (client, object, round): a xorshift stream.
    let mut x =
        (client as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (object as u64 + 1) << 20 ^ round;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// One phase: every client runs `step(client, i)` until the time is up; returns the steps done
/// and the wall seconds.
fn phase<F>(clients: &mut [Client], seconds: f64, step: F) -> Result<(u64, f64)>
where
    F: Fn(&mut Client, usize, u64) -> Result<()> + Sync,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let counts = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(ci, c)| {
                let step = &step;
                s.spawn(move || -> Result<u64> {
                    let mut n = 0;
                    while Instant::now() < deadline {
                        step(c, ci, n)?;
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a client thread panicked"))?)
            .collect::<Result<Vec<u64>>>()
    })?;
    Ok((counts.iter().sum(), start.elapsed().as_secs_f64()))
}

/// Measures a running server over the network: MiB/s writing and reading large objects, and
/// ops/s writing and reading small ones, with `clients` connections in parallel. Every read is
/// compared with what was written.
pub fn bench(a: BenchArgs) -> Result<()> {
    let key = read_key(&a.key_file)?;
    if a.clients == 0 || a.large_bytes == 0 || a.small_bytes == 0 {
        bail!("--clients, --large-bytes and --small-bytes must be positive");
    }
    let p = PartitionId(a.partition);
    let mut clients = (0..a.clients)
        .map(|_| Client::connect(a.addr.as_str(), Credentials::Key(key.clone())))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("connecting to {}", a.addr))?;
    const LARGE_PER_CLIENT: usize = 4;
    const SMALL_PER_CLIENT: usize = 64;
    let mut large = Vec::new();
    let mut small = Vec::new();
    for c in clients.iter_mut() {
        let mk = |c: &mut Client| -> Result<Oid> {
            let o = c.create(p, None).map_err(|e| anyhow!(e))?;
            Ok(Oid {
                partition: p,
                object: o,
            })
        };
        large.push(
            (0..LARGE_PER_CLIENT)
                .map(|_| mk(c))
                .collect::<Result<Vec<_>>>()?,
        );
        small.push(
            (0..SMALL_PER_CLIENT)
                .map(|_| mk(c))
                .collect::<Result<Vec<_>>>()?,
        );
    }
    let large_data: Vec<Vec<u8>> = (0..a.clients)
        .map(|ci| payload(ci, 0, 0, a.large_bytes))
        .collect();
    let small_data: Vec<Vec<u8>> = (0..a.clients)
        .map(|ci| payload(ci, 1, 0, a.small_bytes))
        .collect();
    let mib = |n: u64, bytes: usize, s: f64| n as f64 * bytes as f64 / (1 << 20) as f64 / s;

    let (n, s) = phase(&mut clients, a.seconds, |c, ci, i| {
        let oid = large[ci][i as usize % LARGE_PER_CLIENT];
        c.write(oid, 0, &large_data[ci]).map_err(|e| anyhow!(e))
    })?;
    println!(
        "large write  {} clients x {} B objects: {n} writes in {s:.2} s = {:.1} MiB/s",
        a.clients,
        a.large_bytes,
        mib(n, a.large_bytes, s)
    );
    let (n, s) = phase(&mut clients, a.seconds, |c, ci, i| {
        let oid = large[ci][i as usize % LARGE_PER_CLIENT];
        let mut buf = vec![0u8; a.large_bytes];
        let got = c.read(oid, 0, &mut buf).map_err(|e| anyhow!(e))?;
        if got != a.large_bytes || buf != large_data[ci] {
            bail!("object {oid}: read back differs from what was written");
        }
        Ok(())
    })?;
    println!(
        "large read   {} clients x {} B objects: {n} reads in {s:.2} s = {:.1} MiB/s",
        a.clients,
        a.large_bytes,
        mib(n, a.large_bytes, s)
    );
    let (n, s) = phase(&mut clients, a.seconds, |c, ci, i| {
        let oid = small[ci][i as usize % SMALL_PER_CLIENT];
        c.write(oid, 0, &small_data[ci]).map_err(|e| anyhow!(e))?;
        let mut buf = vec![0u8; a.small_bytes];
        let got = c.read(oid, 0, &mut buf).map_err(|e| anyhow!(e))?;
        if got != a.small_bytes || buf != small_data[ci] {
            bail!("object {oid}: read back differs from what was written");
        }
        Ok(())
    })?;
    println!(
        "small write+read {} clients x {} B objects: {n} pairs in {s:.2} s = {:.0} ops/s ({:.0} write+read pairs/s)",
        a.clients,
        a.small_bytes,
        2.0 * n as f64 / s,
        n as f64 / s
    );
    for (c, (l, sm)) in clients.iter_mut().zip(large.iter().zip(&small)) {
        for oid in l.iter().chain(sm) {
            c.remove(*oid).map_err(|e| anyhow!(e))?;
        }
    }
    Ok(())
}

pub struct BenchS3Args {
    pub addr: String,
    pub credentials: PathBuf,
    pub clients: usize,
    pub large_bytes: usize,
    pub small_bytes: usize,
    pub seconds: f64,
}

/// One S3 phase: every client runs `step(client, index, i)` until the time is up.
fn phase_s3<F>(clients: &mut [s3::client::Client], seconds: f64, step: F) -> Result<(u64, f64)>
where
    F: Fn(&mut s3::client::Client, usize, u64) -> Result<()> + Sync,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let counts = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(ci, c)| {
                let step = &step;
                s.spawn(move || -> Result<u64> {
                    let mut n = 0;
                    while Instant::now() < deadline {
                        step(c, ci, n)?;
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("a client thread panicked"))?)
            .collect::<Result<Vec<u64>>>()
    })?;
    Ok((counts.iter().sum(), start.elapsed().as_secs_f64()))
}

fn s3_ok(
    r: std::result::Result<s3::client::Response, s3::client::ClientError>,
    what: &str,
) -> Result<s3::client::Response> {
    let r = r.map_err(|e| anyhow!("{what}: {e}"))?;
    if !(200..300).contains(&r.status) {
        bail!(
            "{what}: status {} {}",
            r.status,
            r.error_code().unwrap_or_default()
        );
    }
    Ok(r)
}

/// PUTs every key a GET phase will read (a short PUT phase may not have reached them all).
fn prefill(
    clients: &mut [s3::client::Client],
    bucket: &str,
    kind: &str,
    per: u64,
    data: &[Vec<u8>],
) -> Result<()> {
    for (ci, c) in clients.iter_mut().enumerate() {
        for i in 0..per {
            s3_ok(
                c.put(bucket, &format!("{kind}/c{ci}/{i}"), &data[ci]),
                "PUT",
            )?;
        }
    }
    Ok(())
}

/// Measures a running S3 face: MiB/s of PUTs and GETs of large objects, then PUTs/s and GETs/s
/// of small ones, `clients` connections in parallel (UNSIGNED-PAYLOAD SigV4, as clients send
/// over TLS). Every GET is compared with what was PUT.
pub fn bench_s3(a: BenchS3Args) -> Result<()> {
    let creds = s3::Credentials::load(&a.credentials).map_err(|e| anyhow!(e))?;
    let (access, secret) = creds
        .first()
        .ok_or_else(|| anyhow!("{}: no credentials", a.credentials.display()))?;
    if a.clients == 0 || a.large_bytes == 0 || a.small_bytes == 0 {
        bail!("--clients, --large-bytes and --small-bytes must be positive");
    }
    const BUCKET: &str = "bench-net";
    const LARGE_PER_CLIENT: u64 = 4;
    const SMALL_PER_CLIENT: u64 = 64;
    let mut clients: Vec<s3::client::Client> = (0..a.clients)
        .map(|_| s3::client::Client::new(&a.addr, access, secret))
        .collect();
    let r = clients[0]
        .create_bucket(BUCKET)
        .map_err(|e| anyhow!("{e}"))?;
    if r.status != 200 && r.error_code().as_deref() != Some("BucketAlreadyOwnedByYou") {
        bail!("creating bucket {BUCKET}: status {}", r.status);
    }
    let large: Vec<Vec<u8>> = (0..a.clients)
        .map(|ci| payload(ci, 0, 0, a.large_bytes))
        .collect();
    let small: Vec<Vec<u8>> = (0..a.clients)
        .map(|ci| payload(ci, 1, 0, a.small_bytes))
        .collect();
    let mib = |n: u64, bytes: usize, s: f64| n as f64 * bytes as f64 / (1 << 20) as f64 / s;
    let key = |kind: &str, ci: usize, i: u64, per: u64| format!("{kind}/c{ci}/{}", i % per);

    let (n, s) = phase_s3(&mut clients, a.seconds, |c, ci, i| {
        s3_ok(
            c.put(BUCKET, &key("large", ci, i, LARGE_PER_CLIENT), &large[ci]),
            "PUT",
        )
        .map(drop)
    })?;
    println!(
        "s3 large PUT  {} clients x {} B objects: {n} PUTs in {s:.2} s = {:.1} MiB/s",
        a.clients,
        a.large_bytes,
        mib(n, a.large_bytes, s)
    );
    prefill(&mut clients, BUCKET, "large", LARGE_PER_CLIENT, &large)?;
    let (n, s) = phase_s3(&mut clients, a.seconds, |c, ci, i| {
        let k = key("large", ci, i, LARGE_PER_CLIENT);
        let r = s3_ok(c.get(BUCKET, &k), "GET")?;
        if r.body != large[ci] {
            bail!("{k}: GET differs from what was PUT");
        }
        Ok(())
    })?;
    println!(
        "s3 large GET  {} clients x {} B objects: {n} GETs in {s:.2} s = {:.1} MiB/s",
        a.clients,
        a.large_bytes,
        mib(n, a.large_bytes, s)
    );
    let (n, s) = phase_s3(&mut clients, a.seconds, |c, ci, i| {
        s3_ok(
            c.put(BUCKET, &key("small", ci, i, SMALL_PER_CLIENT), &small[ci]),
            "PUT",
        )
        .map(drop)
    })?;
    println!(
        "s3 small PUT  {} clients x {} B objects: {n} PUTs in {s:.2} s = {:.0} PUTs/s",
        a.clients,
        a.small_bytes,
        n as f64 / s
    );
    prefill(&mut clients, BUCKET, "small", SMALL_PER_CLIENT, &small)?;
    let (n, s) = phase_s3(&mut clients, a.seconds, |c, ci, i| {
        let k = key("small", ci, i, SMALL_PER_CLIENT);
        let r = s3_ok(c.get(BUCKET, &k), "GET")?;
        if r.body != small[ci] {
            bail!("{k}: GET differs from what was PUT");
        }
        Ok(())
    })?;
    println!(
        "s3 small GET  {} clients x {} B objects: {n} GETs in {s:.2} s = {:.0} GETs/s",
        a.clients,
        a.small_bytes,
        n as f64 / s
    );
    for (ci, c) in clients.iter_mut().enumerate() {
        for i in 0..LARGE_PER_CLIENT {
            s3_ok(
                c.delete(BUCKET, &key("large", ci, i, LARGE_PER_CLIENT)),
                "DELETE",
            )?;
        }
        for i in 0..SMALL_PER_CLIENT {
            s3_ok(
                c.delete(BUCKET, &key("small", ci, i, SMALL_PER_CLIENT)),
                "DELETE",
            )?;
        }
    }
    Ok(())
}
