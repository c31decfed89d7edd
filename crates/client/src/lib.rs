#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! A blocking OSD client over TCP that implements [`osd::Osd`], so code written against the
//! trait runs on a local `ObjectStore` and on a remote `ossd serve` alike.
//!
//! ```no_run
//! use client::{Client, Credentials};
//! use osd::{Oid, Osd, PartitionId};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let key = proto::MasterKey::parse(&std::fs::read("ossd.key")?)?;
//! let mut c = Client::connect("127.0.0.1:7000", Credentials::Key(key))?;
//! let o = c.create(PartitionId(0x10000), None)?;
//! c.write(Oid { partition: PartitionId(0x10000), object: o }, 0, b"hello")?;
//! # Ok(()) }
//! ```
//!
//! Credentials are either the master key (a trusted client that mints itself a capability per
//! partition, all operations, valid an hour) or capabilities with their capability keys as
//! `ossd cap` prints them; each command is sent with the first capability that allows it.
//!
//! Objects with the host's knowledge (seed 001 §III's client library): [`create_object`] with
//! [`ObjectOptions`] sets priority, placement hints, per-object reliability and encryption right
//! after CREATE, on a remote target or a local store alike.
//!
//! Pipelining: [`Client::send`] queues a request and returns its id; [`Client::receive`]
//! returns the next reply; [`Client::pipeline`] sends a batch and collects the replies in order.
//! Every reply to an authenticated request must carry a valid integrity value under the
//! request's capability key; replies without one are accepted only as refusals.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use osd::{
    Attr, AttrValue, DeviceInfo, FlushScope, ObjectId, Oid, Osd, OsdError, PartitionId, TxnError,
    TxnId, TxnOp,
};
use proto::{
    CapKey, CapObject, Capability, Command, Failure, Header, MasterKey, Ops, ReplyBody, Request,
    Requirement, Security, Status, HEADER_LEN, SUPPORTED_VERSIONS,
};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed or closed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// A reply frame that does not decode.
    #[error("malformed reply: {0}")]
    Proto(#[from] proto::ProtoError),
    /// The target's object store refused the command (its error, rebuilt from the reply's status).
    #[error("{0}")]
    Osd(OsdError),
    /// The target refused the frame or the command before the store saw it (version, capability,
    /// limits).
    #[error("refused ({status:?}): {message}")]
    Refused {
        /// The status the target replied with.
        status: Status,
        /// The target's explanation.
        message: String,
    },
    /// The client holds no capability for this partition that allows these operations.
    #[error("no capability allows {ops} on partition {partition:#x}")]
    NoCapability {
        /// The partition id.
        partition: u64,
        /// The operations wanted.
        ops: String,
    },
    /// A reply (its request id) whose integrity value is wrong or missing.
    #[error("reply {0} has a bad or missing integrity value")]
    BadReplyIntegrity(u64),
    /// A reply that does not fit its request.
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

impl From<ClientError> for OsdError {
    /// Store errors pass through; network, protocol and security errors become
    /// `OsdError::Remote` naming what happened.
    fn from(e: ClientError) -> OsdError {
        match e {
            ClientError::Osd(e) => e,
            other => OsdError::Remote(other.to_string()),
        }
    }
}

/// What the client signs its requests with.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// The master key: the client mints its own capabilities (trusted clients, tools, tests).
    Key(MasterKey),
    /// Capabilities and their keys, as issued by `ossd cap`.
    Capabilities(Vec<(Capability, CapKey)>),
}

/// How long capabilities minted from the master key are valid.
const MINTED_LIFETIME_S: u64 = 3600;

/// A connection to an OSD target.
pub struct Client {
    rd: BufReader<TcpStream>,
    wr: BufWriter<TcpStream>,
    version: u8,
    max_frame_bytes: u32,
    next_id: u64,
    credentials: Credentials,
    key_versions: HashMap<PartitionId, u32>,
    minted: HashMap<PartitionId, (Capability, CapKey)>,
    /// Capability keys of requests sent and not yet answered.
    pending: HashMap<u64, Option<CapKey>>,
    /// The last reply's body, kept so its allocation is reused.
    body: Vec<u8>,
    /// Transactions this connection began, and their partitions (COMMIT and ABORT name it).
    txns: HashMap<TxnId, PartitionId>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Client {
    /// Connects and negotiates the protocol version (HELLO).
    pub fn connect(
        addr: impl ToSocketAddrs,
        credentials: Credentials,
    ) -> Result<Client, ClientError> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let mut c = Client {
            rd: BufReader::with_capacity(256 << 10, stream.try_clone()?),
            wr: BufWriter::with_capacity(256 << 10, stream),
            version: proto::VERSION_1,
            max_frame_bytes: proto::DEFAULT_MAX_FRAME_BYTES,
            next_id: 1,
            credentials,
            key_versions: HashMap::new(),
            minted: HashMap::new(),
            pending: HashMap::new(),
            body: Vec::new(),
            txns: HashMap::new(),
        };
        match c.call(Command::Hello {
            versions: SUPPORTED_VERSIONS.to_vec(),
        })? {
            ReplyBody::Hello {
                version,
                max_frame_bytes,
            } if SUPPORTED_VERSIONS.contains(&version) => {
                c.version = version;
                c.max_frame_bytes = max_frame_bytes;
            }
            other => {
                return Err(ClientError::Unexpected(format!(
                    "HELLO answered with {other:?}"
                )))
            }
        }
        Ok(c)
    }

    /// Sets a read timeout on the connection (none by default).
    pub fn set_timeout(&mut self, t: Option<Duration>) -> Result<(), ClientError> {
        self.rd.get_ref().set_read_timeout(t)?;
        self.wr.get_ref().set_write_timeout(t)?;
        Ok(())
    }

    /// The largest frame body the server accepts.
    pub fn max_frame_bytes(&self) -> u32 {
        self.max_frame_bytes
    }

    /// With master-key credentials: the key version to mint capabilities of `partition` with
    /// (0 unless set; after a revocation, the new version).
    pub fn set_key_version(&mut self, partition: PartitionId, version: u32) {
        self.key_versions.insert(partition, version);
        self.minted.remove(&partition);
    }

    fn credential_for(&mut self, c: &Command) -> Result<Option<(Capability, CapKey)>, ClientError> {
        let Some(req) = Requirement::of(c) else {
            return Ok(None);
        };
        match &self.credentials {
            Credentials::Key(master) => {
                let now = unix_now();
                if let Some((cap, key)) = self.minted.get(&req.partition) {
                    if cap.expires_unix_s > now + 60 {
                        return Ok(Some((*cap, key.clone())));
                    }
                }
                let cap = Capability {
                    partition: req.partition,
                    object: CapObject::All,
                    ops: Ops::ALL,
                    key_version: self.key_versions.get(&req.partition).copied().unwrap_or(0),
                    expires_unix_s: now + MINTED_LIFETIME_S,
                };
                let key = master.capability_key(&cap);
                self.minted.insert(req.partition, (cap, key.clone()));
                Ok(Some((cap, key)))
            }
            Credentials::Capabilities(caps) => caps
                .iter()
                .find(|(cap, _)| req.allows(cap))
                .map(|(c, k)| Some((*c, k.clone())))
                .ok_or(ClientError::NoCapability {
                    partition: req.partition.0,
                    ops: req.ops.names(),
                }),
        }
    }

    /// Sends a request without waiting for its reply; returns its request id.
    pub fn send(&mut self, command: Command) -> Result<u64, ClientError> {
        let cred = self.credential_for(&command)?;
        let id = self.next_id;
        self.next_id += 1;
        let frame = proto::encode_request(
            self.version,
            &Request {
                request_id: id,
                command,
            },
            cred.as_ref().map(|(c, k)| (c, k)),
        );
        self.wr.write_all(&frame)?;
        self.pending.insert(id, cred.map(|(_, k)| k));
        Ok(id)
    }

    /// Reads the next reply: its request id and its result. Flushes queued requests first.
    pub fn receive(&mut self) -> Result<(u64, Result<ReplyBody, ClientError>), ClientError> {
        self.wr.flush()?;
        let mut head = [0u8; HEADER_LEN];
        self.rd.read_exact(&mut head)?;
        // Replies may be larger than the requests' limit by their own framing; allow slack.
        let header = Header::decode(&head, self.max_frame_bytes.saturating_add(4096))?;
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        body.resize(header.body_len as usize, 0);
        let read = self.rd.read_exact(&mut body);
        let body = put_back(&mut self.body, body);
        read?;
        let reply = proto::decode_reply(&header, body)?;
        let key = self.pending.remove(&reply.request_id).flatten();
        let result = match (reply.result, key, header.is_secured()) {
            (r, Some(k), true) => {
                if !Security::verify(&k, &header, body) {
                    return Err(ClientError::BadReplyIntegrity(reply.request_id));
                }
                r.map_err(failure)
            }
            // Unauthenticated replies are believed only when they refuse.
            (Err(f), _, false) => Err(failure(f)),
            (Ok(b), None, false) if matches!(b, ReplyBody::Hello { .. }) => Ok(b),
            _ => return Err(ClientError::BadReplyIntegrity(reply.request_id)),
        };
        Ok((reply.request_id, result))
    }

    /// Sends one command and waits for its reply.
    pub fn call(&mut self, command: Command) -> Result<ReplyBody, ClientError> {
        let id = self.send(command)?;
        let (got, r) = self.receive()?;
        if got != id {
            return Err(ClientError::Unexpected(format!(
                "reply to {got}, expected {id}"
            )));
        }
        r
    }

    /// Sends every command before reading any reply; returns the results in command order.
    pub fn pipeline(
        &mut self,
        commands: Vec<Command>,
    ) -> Result<Vec<Result<ReplyBody, ClientError>>, ClientError> {
        let ids = commands
            .into_iter()
            .map(|c| self.send(c))
            .collect::<Result<Vec<_>, _>>()?;
        let mut got: HashMap<u64, Result<ReplyBody, ClientError>> = HashMap::new();
        while got.len() < ids.len() {
            let (id, r) = self.receive()?;
            got.insert(id, r);
        }
        Ok(ids
            .iter()
            .map(|id| {
                got.remove(id).unwrap_or_else(|| {
                    Err(ClientError::Unexpected(format!("no reply to request {id}")))
                })
            })
            .collect())
    }

    /// FORMAT OSD: removes every object and every partition of the target, durably (needs a
    /// device capability with partition-admin rights). Key versions start again from 0.
    pub fn format_osd(&mut self) -> Result<(), ClientError> {
        self.expect_done(Command::FormatOsd)
    }

    /// Revokes every capability of `partition` issued under older key versions (needs
    /// partition-admin rights).
    pub fn revoke(&mut self, partition: PartitionId, new_version: u32) -> Result<(), ClientError> {
        self.expect_done(Command::SetKeyVersion {
            partition,
            version: new_version,
        })?;
        self.set_key_version(partition, new_version);
        Ok(())
    }

    fn expect_done(&mut self, c: Command) -> Result<(), ClientError> {
        match self.call(c)? {
            ReplyBody::Done => Ok(()),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// Puts the body buffer back in its slot and lends it out again.
fn put_back(slot: &mut Vec<u8>, body: Vec<u8>) -> &[u8] {
    *slot = body;
    slot
}

fn failure(f: Failure) -> ClientError {
    match f {
        Failure::Osd(e) => ClientError::Osd(e),
        Failure::Refused { status, message } => ClientError::Refused { status, message },
    }
}

fn unexpected<T>(b: ReplyBody) -> Result<T, OsdError> {
    Err(ClientError::Unexpected(format!("{b:?}")).into())
}

impl Osd for Client {
    fn create_partition(&mut self, id: Option<PartitionId>) -> Result<PartitionId, OsdError> {
        match self.call(Command::CreatePartition { id })? {
            ReplyBody::Partition(p) => Ok(p),
            b => unexpected(b),
        }
    }

    fn remove_partition(&mut self, id: PartitionId) -> Result<(), OsdError> {
        Ok(self.expect_done(Command::RemovePartition { id })?)
    }

    fn create(
        &mut self,
        partition: PartitionId,
        id: Option<ObjectId>,
    ) -> Result<ObjectId, OsdError> {
        match self.call(Command::Create { partition, id })? {
            ReplyBody::Object(o) => Ok(o),
            b => unexpected(b),
        }
    }

    fn remove(&mut self, oid: Oid) -> Result<(), OsdError> {
        Ok(self.expect_done(Command::Remove { oid })?)
    }

    /// Reads in pieces that fit the server's frame limit.
    fn read(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<usize, OsdError> {
        let chunk = (self.max_frame_bytes.saturating_sub(128) as usize).max(1);
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(chunk);
            let data = match self.call(Command::Read {
                oid,
                offset: offset + done as u64,
                length: want as u32,
            })? {
                ReplyBody::Data(d) => d,
                b => return unexpected(b),
            };
            if data.len() > want {
                return unexpected(ReplyBody::Data(data));
            }
            buf[done..done + data.len()].copy_from_slice(&data);
            done += data.len();
            if data.len() < want {
                break;
            }
        }
        Ok(done)
    }

    /// Writes in pieces that fit the server's frame limit.
    fn write(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<(), OsdError> {
        let chunk = (self.max_frame_bytes.saturating_sub(256) as usize).max(1);
        if data.is_empty() {
            return Ok(self.expect_done(Command::Write {
                oid,
                offset,
                data: vec![],
            })?);
        }
        for (i, piece) in data.chunks(chunk).enumerate() {
            self.expect_done(Command::Write {
                oid,
                offset: offset + (i * chunk) as u64,
                data: piece.to_vec(),
            })?;
        }
        Ok(())
    }

    fn append(&mut self, oid: Oid, data: &[u8]) -> Result<u64, OsdError> {
        let max = self.max_frame_bytes.saturating_sub(256) as usize;
        if data.len() > max {
            return Err(OsdError::InvalidArgument(format!(
                "APPEND of {} bytes exceeds the server's frame limit ({max}); write at an offset instead",
                data.len()
            )));
        }
        match self.call(Command::Append {
            oid,
            data: data.to_vec(),
        })? {
            ReplyBody::Offset(o) => Ok(o),
            b => unexpected(b),
        }
    }

    fn truncate(&mut self, oid: Oid, length: u64) -> Result<(), OsdError> {
        Ok(self.expect_done(Command::Truncate { oid, length })?)
    }

    fn get_attr(&mut self, oid: Oid, attr: Attr) -> Result<AttrValue, OsdError> {
        match self.call(Command::GetAttr { oid, attr })? {
            ReplyBody::Attr(v) => Ok(v),
            b => unexpected(b),
        }
    }

    fn set_attr(&mut self, oid: Oid, attr: Attr, value: AttrValue) -> Result<(), OsdError> {
        Ok(self.expect_done(Command::SetAttr { oid, attr, value })?)
    }

    fn list_partitions(
        &mut self,
        token: u64,
        max: usize,
    ) -> Result<(Vec<PartitionId>, Option<u64>), OsdError> {
        match self.call(Command::ListPartitions {
            token,
            max: max.min(u32::MAX as usize) as u32,
        })? {
            ReplyBody::Ids { ids, next } => Ok((ids.into_iter().map(PartitionId).collect(), next)),
            b => unexpected(b),
        }
    }

    fn list(
        &mut self,
        partition: PartitionId,
        token: u64,
        max: usize,
    ) -> Result<(Vec<ObjectId>, Option<u64>), OsdError> {
        match self.call(Command::List {
            partition,
            token,
            max: max.min(u32::MAX as usize) as u32,
        })? {
            ReplyBody::Ids { ids, next } => Ok((ids.into_iter().map(ObjectId).collect(), next)),
            b => unexpected(b),
        }
    }

    fn flush(&mut self, scope: FlushScope) -> Result<(), OsdError> {
        Ok(self.expect_done(Command::Flush { scope })?)
    }

    fn begin_txn(&mut self, partition: PartitionId) -> Result<TxnId, OsdError> {
        match self.call(Command::Begin { partition })? {
            ReplyBody::Txn(t) => {
                self.txns.insert(t, partition);
                Ok(t)
            }
            b => unexpected(b),
        }
    }

    /// A WRITE in a transaction must fit one frame (the server's limit less 256 bytes): it is
    /// one command of the transaction, not split.
    fn txn_op(&mut self, txn: TxnId, op: TxnOp) -> Result<Option<ObjectId>, OsdError> {
        match self.call(Command::TxnOp { txn, op })? {
            ReplyBody::Taken(o) => Ok(o),
            b => unexpected(b),
        }
    }

    fn commit_txn(&mut self, txn: TxnId) -> Result<(), OsdError> {
        let partition = self
            .txns
            .remove(&txn)
            .ok_or(OsdError::Transaction(TxnError::NotFound(txn)))?;
        Ok(self.expect_done(Command::Commit { partition, txn })?)
    }

    fn abort_txn(&mut self, txn: TxnId) -> Result<(), OsdError> {
        let partition = self
            .txns
            .remove(&txn)
            .ok_or(OsdError::Transaction(TxnError::NotFound(txn)))?;
        Ok(self.expect_done(Command::Abort { partition, txn })?)
    }

    fn describe(&mut self) -> Result<DeviceInfo, OsdError> {
        match self.call(Command::Describe)? {
            ReplyBody::Device(d) => Ok(d),
            b => unexpected(b),
        }
    }
}

/// What an object is made with: seed 001 §III's client library passes the host's knowledge
/// (hints, priority, reliability, encryption) as attributes set right after CREATE. `None`
/// leaves the store's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectOptions {
    /// Scheduling priority (`Attr::Priority`; 0 normal, higher first).
    pub priority: Option<u64>,
    /// Placement hint: the size the object will reach (`Attr::ExpectedSize`, bytes).
    pub expected_size: Option<u64>,
    /// Placement hint: how it will be accessed (`Attr::AccessPattern`).
    pub access_pattern: Option<osd::onode::AccessPattern>,
    /// Parity units per parity group of its data units (`Attr::Reliability`; 0 none).
    pub reliability: Option<u64>,
    /// Encrypt its data under a data key wrapped by the target's master key
    /// (`Attr::Encryption`; the target must hold the master key: `ossd serve --key-file`).
    pub encrypt: bool,
}

impl ObjectOptions {
    /// The attributes to set, in the order the store accepts them: encryption while the
    /// object is empty and has no parity, then reliability, then the hints.
    pub fn attributes(&self) -> Vec<(Attr, AttrValue)> {
        let mut out = Vec::new();
        if self.encrypt {
            out.push((Attr::Encryption, AttrValue::U64(1)));
        }
        let numbers = [
            (Attr::Reliability, self.reliability),
            (Attr::Priority, self.priority),
            (Attr::ExpectedSize, self.expected_size),
        ];
        for (a, v) in numbers {
            if let Some(v) = v {
                out.push((a, AttrValue::U64(v)));
            }
        }
        if let Some(p) = self.access_pattern {
            out.push((Attr::AccessPattern, AttrValue::Pattern(p)));
        }
        out
    }
}

/// Creates an object in `partition` (id `id`, or one the store picks) with `options`, on any
/// store: a local `ObjectStore` or a [`Client`]. If an option is refused, the object is removed
/// again and the refusal returned, so no half-made object is left.
pub fn create_object<S: Osd + ?Sized>(
    store: &mut S,
    partition: PartitionId,
    id: Option<ObjectId>,
    options: &ObjectOptions,
) -> Result<ObjectId, OsdError> {
    let object = store.create(partition, id)?;
    let oid = Oid { partition, object };
    for (attr, value) in options.attributes() {
        if let Err(e) = store.set_attr(oid, attr, value) {
            let _ = store.remove(oid);
            return Err(e);
        }
    }
    Ok(object)
}
