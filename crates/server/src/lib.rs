#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! The OSD target over TCP: a tokio server that decodes `proto` frames, checks each request's
//! capability (integrity, expiry, scope, operations, key version) and runs the command on one
//! synchronous object store.
//!
//! Threads and tasks: one task per connection reads frames and checks capabilities (the HMAC
//! work runs there, in parallel across connections); a writer task per connection encodes and
//! signs replies; one dedicated store thread owns the store (it is synchronous and `&mut`) and
//! runs commands in arrival order. Replies carry their request's id, so a client may pipeline
//! up to `max_in_flight` requests per connection.
//!
//! Shutdown (`serve`'s `shutdown` future completes): stop accepting, stop reading new frames,
//! let every connection's in-flight commands finish and their replies go out (at most
//! `drain_timeout`), then FLUSH the device and hand the store back to the caller, who closes it.
//!
//! Transactions (BEGIN, COMMIT, ABORT and commands inside one) belong to the connection that
//! began them, in the partition it named: another connection's COMMIT, ABORT or command names
//! no transaction it may use (`Transaction`, no such transaction), and the transactions a
//! connection leaves open are aborted when it closes.
//!
//! Key versions (revocation) live in a user attribute of each partition's root object
//! ([`KEY_VERSION_ATTR`], 4 bytes big-endian, absent = 0); clients may not set it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use osd::{Attr, AttrValue, FlushScope, Oid, Osd, OsdError, PartitionId, TxnError, TxnId};
use proto::{
    Capability, Command, Failure, Header, MasterKey, Reply, ReplyBody, Requirement, Security,
    Status, HEADER_LEN, SUPPORTED_VERSIONS,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};

/// The user attribute of a partition's root object that holds the partition's current key
/// version (4 bytes, big-endian; absent means 0). Reserved: clients cannot set it.
pub const KEY_VERSION_ATTR: u16 = 0xfff0;

/// Server settings; `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Largest frame body accepted (default 16 MiB); a larger header is answered with TooLong
    /// and the connection is closed.
    pub max_frame_bytes: u32,
    /// How long a connection may sit idle between frames (default 300 s).
    pub idle_timeout: Duration,
    /// How long a started frame may take to arrive whole, and a reply to be written (default
    /// 10 s): a slow or stalled client is disconnected.
    pub frame_timeout: Duration,
    /// Commands one connection may have queued or running (default 64).
    pub max_in_flight: usize,
    /// How long shutdown waits for in-flight commands (default 10 s).
    pub drain_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_frame_bytes: proto::DEFAULT_MAX_FRAME_BYTES,
            idle_timeout: Duration::from_secs(300),
            frame_timeout: Duration::from_secs(10),
            max_in_flight: 64,
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Listening or accepting failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// The thread that owns the object store ended while the server still ran.
    #[error("the store thread stopped unexpectedly")]
    StoreThread,
    /// Flushing the store at shutdown failed.
    #[error("final flush of the store failed: {0}")]
    Flush(OsdError),
}

/// Reads a partition's current key version from its root object.
pub fn key_version<S: Osd + ?Sized>(store: &mut S, p: PartitionId) -> Result<u32, OsdError> {
    if p == Capability::DEVICE {
        return Ok(0);
    }
    match store.get_attr(Oid::partition_root(p), Attr::User(KEY_VERSION_ATTR))? {
        AttrValue::Absent => Ok(0),
        AttrValue::Bytes(b) if b.len() == 4 => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        other => Err(OsdError::Corrupted {
            what: format!("key version attribute {other:?}"),
            location: format!("partition {:#x}", p.0),
            unit: None,
        }),
    }
}

/// Sets a partition's key version (it may only grow) and flushes the partition, so a revocation
/// survives a crash once it is acknowledged.
pub fn set_key_version<S: Osd + ?Sized>(
    store: &mut S,
    p: PartitionId,
    version: u32,
) -> Result<(), OsdError> {
    if p == Capability::DEVICE {
        return Err(OsdError::InvalidArgument(
            "the device's key version is fixed at 0; change the master key to revoke device capabilities".into(),
        ));
    }
    let current = key_version(store, p)?;
    if version <= current {
        return Err(OsdError::InvalidArgument(format!(
            "key version {version} of partition {:#x} must be above the current {current}",
            p.0
        )));
    }
    store.set_attr(
        Oid::partition_root(p),
        Attr::User(KEY_VERSION_ATTR),
        AttrValue::Bytes(version.to_be_bytes().to_vec()),
    )?;
    store.flush(FlushScope::Partition(p))
}

/// A reply on its way to a connection's writer: signed with the request's capability key when
/// the request was authenticated.
struct Outgoing {
    reply: Reply,
    key: Option<proto::CapKey>,
    version: u8,
    /// Frees one of the connection's in-flight slots once the reply is written.
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

struct Job {
    request_id: u64,
    opcode: u16,
    command: Command,
    capability: Capability,
    out: Outgoing,
    reply_to: mpsc::UnboundedSender<Outgoing>,
    peer: SocketAddr,
}

enum StoreMsg {
    Run(Box<Job>),
    /// A connection closed: abort the transactions it left open.
    Closed(SocketAddr),
    Stop,
}

/// Open transactions: the connection that began each, and its partition.
type Owners = HashMap<TxnId, (SocketAddr, PartitionId)>;

/// Longest READ a client may ask for: the reply must fit the frame limit.
fn max_read_bytes(max_frame: u32) -> u32 {
    max_frame.saturating_sub(128)
}

fn store_thread<S: Osd>(
    mut store: S,
    jobs: std::sync::mpsc::Receiver<StoreMsg>,
) -> (S, Result<(), OsdError>) {
    let mut versions: HashMap<PartitionId, u32> = HashMap::new();
    let mut owners = Owners::new();
    while let Ok(msg) = jobs.recv() {
        let job = match msg {
            StoreMsg::Run(j) => j,
            StoreMsg::Closed(peer) => {
                let left: Vec<TxnId> = owners
                    .iter()
                    .filter(|(_, (p, _))| *p == peer)
                    .map(|(t, _)| *t)
                    .collect();
                for t in left {
                    owners.remove(&t);
                    let _ = store.abort_txn(t);
                }
                continue;
            }
            StoreMsg::Stop => break,
        };
        let Job {
            request_id,
            opcode,
            command,
            capability,
            mut out,
            reply_to,
            peer,
        } = *job;
        // Revocation: the capability's key version must be the partition's current one.
        let p = capability.partition;
        let current = match versions.get(&p) {
            Some(v) => Ok(*v),
            None => match key_version(&mut store, p) {
                Ok(v) => {
                    versions.insert(p, v);
                    Ok(v)
                }
                // A partition that does not exist has no key version yet: the command will fail
                // with the store's own error.
                Err(OsdError::NotFound(_)) => Ok(0),
                Err(e) => Err(Failure::Osd(e)),
            },
        };
        let result = match current {
            Err(f) => Err(f),
            Ok(cur) if capability.key_version < cur => Err(refuse(
                peer,
                request_id,
                Status::Revoked,
                format!(
                    "key version {} of partition {:#x} was revoked (current {cur})",
                    capability.key_version, p.0
                ),
            )),
            Ok(cur) if capability.key_version > cur => Err(refuse(
                peer,
                request_id,
                Status::UnknownKeyVersion,
                format!(
                    "key version {} of partition {:#x} is not issued yet (current {cur})",
                    capability.key_version, p.0
                ),
            )),
            Ok(_) => {
                // A partition removed or created afresh starts again from its own attribute.
                let forget = match &command {
                    Command::RemovePartition { id } => Some(*id),
                    Command::CreatePartition { id } => *id,
                    Command::FormatOsd => {
                        versions.clear();
                        None
                    }
                    _ => None,
                };
                let r = if is_txn(&command) {
                    execute_txn(&mut store, &mut owners, peer, command)
                } else {
                    execute(&mut store, command)
                };
                if let Some(p) = forget {
                    versions.remove(&p);
                }
                if let Ok((ReplyBody::Done, Some((p, v)))) = &r {
                    versions.insert(*p, *v);
                }
                r.map(|(b, _)| b).map_err(Failure::Osd)
            }
        };
        out.reply = Reply {
            request_id,
            opcode,
            result,
        };
        // The connection may be gone; its reply is dropped with it.
        let _ = reply_to.send(out);
    }
    let flushed = store.flush(FlushScope::Device);
    (store, flushed)
}

type Executed = (ReplyBody, Option<(PartitionId, u32)>);

/// FORMAT OSD: every object of every partition removed, then the partitions, then a device
/// FLUSH, so the reply means the device is durably empty. A failure part way leaves what was
/// not reached yet; the command can be sent again.
pub fn format_osd<S: Osd + ?Sized>(s: &mut S) -> Result<(), OsdError> {
    const BATCH: usize = 1024;
    loop {
        let (partitions, _) = s.list_partitions(0, BATCH)?;
        if partitions.is_empty() {
            break;
        }
        for p in partitions {
            loop {
                let (objects, _) = s.list(p, 0, BATCH)?;
                if objects.is_empty() {
                    break;
                }
                for o in objects {
                    s.remove(osd::Oid {
                        partition: p,
                        object: o,
                    })?;
                }
            }
            s.remove_partition(p)?;
        }
    }
    s.flush(FlushScope::Device)
}

fn execute<S: Osd>(s: &mut S, c: Command) -> Result<Executed, OsdError> {
    let done = |r: Result<(), OsdError>| r.map(|()| (ReplyBody::Done, None));
    match c {
        Command::Hello { .. } => Err(OsdError::InvalidArgument("HELLO is not a command".into())),
        Command::CreatePartition { id } => s
            .create_partition(id)
            .map(|p| (ReplyBody::Partition(p), None)),
        Command::RemovePartition { id } => done(s.remove_partition(id)),
        Command::ListPartitions { token, max } => s
            .list_partitions(token, max.min(65_536) as usize)
            .map(|(ids, next)| {
                let ids = ids.into_iter().map(|p| p.0).collect();
                (ReplyBody::Ids { ids, next }, None)
            }),
        Command::SetKeyVersion { partition, version } => set_key_version(s, partition, version)
            .map(|()| (ReplyBody::Done, Some((partition, version)))),
        Command::Create { partition, id } => s
            .create(partition, id)
            .map(|o| (ReplyBody::Object(o), None)),
        Command::Describe => s.describe().map(|d| (ReplyBody::Device(d), None)),
        Command::FormatOsd => done(format_osd(s)),
        Command::Remove { oid } => done(s.remove(oid)),
        Command::Read {
            oid,
            offset,
            length,
        } => {
            let mut buf = vec![0u8; length as usize];
            let n = s.read(oid, offset, &mut buf)?;
            buf.truncate(n);
            Ok((ReplyBody::Data(buf), None))
        }
        Command::Write { oid, offset, data } => done(s.write(oid, offset, &data)),
        Command::Append { oid, data } => s.append(oid, &data).map(|o| (ReplyBody::Offset(o), None)),
        Command::Truncate { oid, length } => done(s.truncate(oid, length)),
        Command::GetAttr { oid, attr } => s.get_attr(oid, attr).map(|v| (ReplyBody::Attr(v), None)),
        Command::SetAttr { oid, attr, value } => done(s.set_attr(oid, attr, value)),
        Command::List {
            partition,
            token,
            max,
        } => s
            .list(partition, token, max.min(65_536) as usize)
            .map(|(ids, next)| {
                let ids = ids.into_iter().map(|o| o.0).collect();
                (ReplyBody::Ids { ids, next }, None)
            }),
        Command::Flush { scope } => done(s.flush(scope)),
        Command::Begin { .. }
        | Command::Commit { .. }
        | Command::Abort { .. }
        | Command::TxnOp { .. } => Err(OsdError::Internal(
            "a transaction command reached the plain path".into(),
        )),
    }
}

fn is_txn(c: &Command) -> bool {
    matches!(
        c,
        Command::Begin { .. }
            | Command::Commit { .. }
            | Command::Abort { .. }
            | Command::TxnOp { .. }
    )
}

/// A transaction command, from connection `peer`: only the connection that began a transaction
/// (in the partition it named) may add to, commit or abort it.
fn execute_txn<S: Osd>(
    s: &mut S,
    owners: &mut Owners,
    peer: SocketAddr,
    c: Command,
) -> Result<Executed, OsdError> {
    let mine = |owners: &Owners, txn: TxnId, partition: PartitionId| {
        if owners.get(&txn) == Some(&(peer, partition)) {
            Ok(())
        } else {
            Err(OsdError::Transaction(TxnError::NotFound(txn)))
        }
    };
    match c {
        Command::Begin { partition } => {
            let t = s.begin_txn(partition)?;
            owners.insert(t, (peer, partition));
            Ok((ReplyBody::Txn(t), None))
        }
        Command::Commit { partition, txn } => {
            mine(owners, txn, partition)?;
            // A COMMIT that fails has discarded the transaction too.
            owners.remove(&txn);
            s.commit_txn(txn).map(|()| (ReplyBody::Done, None))
        }
        Command::Abort { partition, txn } => {
            mine(owners, txn, partition)?;
            owners.remove(&txn);
            s.abort_txn(txn).map(|()| (ReplyBody::Done, None))
        }
        Command::TxnOp { txn, op } => {
            let partition = match &op {
                osd::TxnOp::Create { partition, .. } => *partition,
                osd::TxnOp::Remove { oid }
                | osd::TxnOp::Write { oid, .. }
                | osd::TxnOp::Truncate { oid, .. }
                | osd::TxnOp::SetAttr { oid, .. } => oid.partition,
            };
            mine(owners, txn, partition)?;
            s.txn_op(txn, op).map(|o| (ReplyBody::Taken(o), None))
        }
        other => execute(s, other),
    }
}

/// Logs a refusal and makes its failure. The log line names the peer, the request and why.
fn refuse(peer: SocketAddr, request_id: u64, status: Status, why: String) -> Failure {
    eprintln!("ossd serve: {peer}: request {request_id} refused: {status:?}: {why}");
    Failure::refused(status, why)
}

struct Shared {
    key: MasterKey,
    config: ServerConfig,
    jobs: std::sync::mpsc::Sender<StoreMsg>,
}

/// Serves `store` on `listener` until `shutdown` completes; then drains, flushes the device and
/// returns the store (the caller closes it).
pub async fn serve<S, F>(
    listener: TcpListener,
    store: S,
    key: MasterKey,
    config: ServerConfig,
    shutdown: F,
) -> Result<S, ServerError>
where
    S: Osd + Send + 'static,
    F: std::future::Future<Output = ()>,
{
    let (jobs_tx, jobs_rx) = std::sync::mpsc::channel();
    let store_thread = std::thread::Builder::new()
        .name("ossd-store".into())
        .spawn(move || store_thread(store, jobs_rx))?;
    let shared = Arc::new(Shared {
        key,
        config,
        jobs: jobs_tx,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection(stream, peer, shared.clone(), stop_rx.clone()));
                }
                // Running out of descriptors and the like: log and keep accepting.
                Err(e) => {
                    eprintln!("ossd serve: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(shared.config.drain_timeout, drain)
        .await
        .is_err()
    {
        eprintln!("ossd serve: drain timed out; closing the remaining connections");
        connections.abort_all();
    }
    let _ = shared.jobs.send(StoreMsg::Stop);
    let (store, flushed) = tokio::task::spawn_blocking(move || store_thread.join())
        .await
        .map_err(|_| ServerError::StoreThread)?
        .map_err(|_| ServerError::StoreThread)?;
    flushed.map_err(ServerError::Flush)?;
    Ok(store)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel::<Outgoing>();
    let writer = tokio::spawn(writer(wr, rx, peer, shared.config.frame_timeout));
    let in_flight = Arc::new(Semaphore::new(shared.config.max_in_flight));
    let mut version: Option<u8> = None;
    let cfg = &shared.config;
    let send = |reply: Reply, version: u8| {
        let _ = tx.send(Outgoing {
            reply,
            key: None,
            version,
            _permit: None,
        });
    };
    loop {
        if tx.is_closed() {
            break; // the writer gave up on this client
        }
        let mut head = [0u8; HEADER_LEN];
        // Wait for the first byte of the next frame (idle timeout, or shutdown) ...
        let first = tokio::select! {
            _ = stop.changed() => break,
            r = tokio::time::timeout(cfg.idle_timeout, rd.read(&mut head[..1])) => r,
        };
        match first {
            Err(_) => {
                eprintln!(
                    "ossd serve: {peer}: idle for {:?}; closing",
                    cfg.idle_timeout
                );
                break;
            }
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) => {}
        }
        // ... then the rest of it within the frame timeout.
        let deadline = tokio::time::Instant::now() + cfg.frame_timeout;
        if !read_within(&mut rd, &mut head[1..], deadline, peer).await {
            break;
        }
        let reply_version = version.unwrap_or(proto::VERSION_1);
        let header = match Header::decode(&head, cfg.max_frame_bytes) {
            Ok(h) => h,
            Err(e) => {
                // The stream cannot be resynchronized after a bad header: reply and close.
                let (status, id, op) = match e {
                    proto::ProtoError::TooLong { .. } => (
                        Status::TooLong,
                        u64::from_be_bytes(*head[8..].first_chunk().unwrap_or(&[0; 8])),
                        u16::from_be_bytes([head[6], head[7]]),
                    ),
                    _ => (Status::BadFrame, 0, 0),
                };
                eprintln!("ossd serve: {peer}: bad frame header: {e}; closing");
                send(
                    Reply {
                        request_id: id,
                        opcode: op,
                        result: Err(Failure::refused(status, e.to_string())),
                    },
                    reply_version,
                );
                break;
            }
        };
        let mut body = vec![0u8; header.body_len as usize];
        if !read_within(&mut rd, &mut body, deadline, peer).await {
            break;
        }
        let fail = |status: Status, why: String| Reply {
            request_id: header.request_id,
            opcode: header.opcode,
            result: Err(refuse(peer, header.request_id, status, why)),
        };
        let decoded = match proto::decode_request(&header, &body) {
            Ok(d) => d,
            Err(e) => {
                let status = match e {
                    proto::ProtoError::UnknownOpcode { .. } => Status::UnknownOpcode,
                    _ => Status::BadFrame,
                };
                send(fail(status, e.to_string()), reply_version);
                continue;
            }
        };
        if let Command::Hello { versions } = &decoded.command {
            let chosen = SUPPORTED_VERSIONS.iter().find(|v| versions.contains(v));
            let result = match chosen {
                Some(v) => {
                    version = Some(*v);
                    Ok(ReplyBody::Hello {
                        version: *v,
                        max_frame_bytes: cfg.max_frame_bytes,
                    })
                }
                None => Err(refuse(
                    peer,
                    header.request_id,
                    Status::UnsupportedVersion,
                    format!(
                        "client offers versions {versions:?}; server speaks {SUPPORTED_VERSIONS:?}"
                    ),
                )),
            };
            send(
                Reply {
                    request_id: header.request_id,
                    opcode: header.opcode,
                    result,
                },
                reply_version,
            );
            continue;
        }
        let Some(v) = version else {
            send(
                fail(Status::HelloRequired, "send HELLO first".into()),
                reply_version,
            );
            continue;
        };
        if header.version != v {
            send(
                fail(
                    Status::UnsupportedVersion,
                    format!("frame version {} but HELLO chose {v}", header.version),
                ),
                v,
            );
            continue;
        }
        let (cap, key) = match authenticate(&shared, &header, &body, &decoded) {
            Ok(ck) => ck,
            Err((status, why)) => {
                send(fail(status, why), v);
                continue;
            }
        };
        // Wait for a free in-flight slot: a client that pipelines without reading replies is
        // slowed down here instead of growing the server's queues.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let job = Job {
            request_id: header.request_id,
            opcode: header.opcode,
            command: decoded.command,
            capability: cap,
            out: Outgoing {
                reply: Reply {
                    request_id: header.request_id,
                    opcode: header.opcode,
                    result: Ok(ReplyBody::Done),
                },
                key: Some(key),
                version: v,
                _permit: Some(permit),
            },
            reply_to: tx.clone(),
            peer,
        };
        if shared.jobs.send(StoreMsg::Run(Box::new(job))).is_err() {
            break;
        }
    }
    // Its open transactions die with it.
    let _ = shared.jobs.send(StoreMsg::Closed(peer));
    // Dropping our sender lets the writer finish once every in-flight reply is written.
    drop(tx);
    let _ = writer.await;
}

/// Checks a request's capability: present, integrity value, expiry, scope and operations, and
/// the target's reserved attribute. The key version is checked by the store thread, which owns
/// the partitions' current versions.
fn authenticate(
    shared: &Shared,
    header: &Header,
    body: &[u8],
    d: &proto::Decoded,
) -> Result<(Capability, proto::CapKey), (Status, String)> {
    let Some(sec) = &d.security else {
        return Err((
            Status::NoCapability,
            "the request carries no capability".into(),
        ));
    };
    let cap = sec.capability;
    let key = shared.key.capability_key(&cap);
    if !Security::verify(&key, header, body) {
        return Err((
            Status::BadIntegrity,
            "integrity value does not match (forged or altered capability or request)".into(),
        ));
    }
    let now = unix_now();
    if cap.expires_unix_s <= now {
        return Err((
            Status::Expired,
            format!("capability expired at {} (now {now})", cap.expires_unix_s),
        ));
    }
    // HELLO, the one command without a requirement, is answered before this.
    let Some(req) = Requirement::of(&d.command) else {
        return Err((
            Status::Internal,
            "HELLO reached the capability check".into(),
        ));
    };
    req.check(&cap)?;
    if let Command::SetAttr {
        attr: Attr::User(KEY_VERSION_ATTR),
        ..
    }
    | Command::TxnOp {
        op:
            osd::TxnOp::SetAttr {
                attr: Attr::User(KEY_VERSION_ATTR),
                ..
            },
        ..
    } = d.command
    {
        return Err((
            Status::Reserved,
            format!("attribute {KEY_VERSION_ATTR:#x} holds the key version; use SET KEY VERSION"),
        ));
    }
    if let Command::Read { length, .. } = d.command {
        let max = max_read_bytes(shared.config.max_frame_bytes);
        if length > max {
            return Err((
                Status::TooLong,
                format!("READ of {length} bytes (at most {max})"),
            ));
        }
    }
    Ok((cap, key))
}

/// Reads exactly `buf.len()` bytes before `deadline`; false (logged) on timeout, error or EOF.
async fn read_within(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    buf: &mut [u8],
    deadline: tokio::time::Instant,
    peer: SocketAddr,
) -> bool {
    match tokio::time::timeout_at(deadline, rd.read_exact(buf)).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            if e.kind() != std::io::ErrorKind::UnexpectedEof || !buf.is_empty() {
                eprintln!("ossd serve: {peer}: connection closed mid-frame: {e}");
            }
            false
        }
        Err(_) => {
            eprintln!("ossd serve: {peer}: frame not complete within the frame timeout; closing");
            false
        }
    }
}

async fn writer(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    peer: SocketAddr,
    timeout: Duration,
) {
    while let Some(out) = rx.recv().await {
        let frame = proto::encode_reply(out.version, &out.reply, out.key.as_ref());
        match tokio::time::timeout(timeout, wr.write_all(&frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) => {
                eprintln!("ossd serve: {peer}: client does not read its replies; closing");
                break;
            }
        }
    }
    let _ = wr.shutdown().await;
}
