//! The network commands: serve an image, make keys and capabilities, revoke, measure.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use client::{Client, Credentials};
use osd::{ObjectId, Oid, Osd, PartitionId};
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
    pub listen: String,
    pub key_file: PathBuf,
    pub max_frame_bytes: u32,
    pub idle_timeout_s: u64,
    pub frame_timeout_s: u64,
}

/// Serves an image (or a fresh in-memory device) until SIGTERM or Ctrl-C; then drains, flushes
/// and closes it.
pub fn serve(a: ServeArgs) -> Result<()> {
    let key = read_key(&a.key_file)?;
    if a.max_frame_bytes < 4096 {
        bail!("--max-frame-bytes {}: at least 4096", a.max_frame_bytes);
    }
    let config = server::ServerConfig {
        max_frame_bytes: a.max_frame_bytes,
        idle_timeout: Duration::from_secs(a.idle_timeout_s),
        frame_timeout: Duration::from_secs(a.frame_timeout_s),
        ..server::ServerConfig::default()
    };
    match (&a.image, &a.memory) {
        (Some(image), None) => {
            let mut store = objects::open(image)?;
            // The same master key unwraps the data keys of encrypted objects (docs/SECURITY.md
            // "Data at rest": derived under another label than the capability keys).
            store.set_master_key(Some(osd::MasterKey::from_bytes(*key.as_bytes())));
            let what = image.display().to_string();
            let store = run(store, key, config, &a.listen, &what)?;
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
            run(store, key, config, &a.listen, &what)?;
        }
        _ => bail!("give one of --image FILE and --memory PRESET"),
    }
    Ok(())
}

fn run<S: Osd + Send + 'static>(
    store: S,
    key: MasterKey,
    config: server::ServerConfig,
    listen: &str,
    what: &str,
) -> Result<S> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let addr = listener.local_addr()?;
        println!("listening on {addr} ({what})");
        std::io::stdout().flush()?;
        let shutdown = async {
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
        };
        server::serve(listener, store, key, config, shutdown)
            .await
            .map_err(|e| anyhow!(e))
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
