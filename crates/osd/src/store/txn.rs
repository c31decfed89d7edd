//! Object-level transactions (seeds 001 and 003: "a transaction-id attribute, copy-on-write
//! until commit, atomic object I/O"; issue 16 item 8; docs/DESIGN.md "Transactions").
//!
//! A transaction's commands are kept in memory, checked as they come, until COMMIT. COMMIT is a
//! three-phase state machine ([`CommitPhase`]):
//! 1. **Logging**: the commands (bytes included) are encoded into a *transaction log* and
//!    programmed out of place as log units (record kind 15) that nothing references; the last
//!    unit of the log is the **commit record** (kind 16). Its program is the durability point.
//! 2. **Committed**: the commands are installed through the ordinary paths (data units,
//!    descriptor pages, ...), then flushed.
//! 3. **Installed**: a *done record* (kind 17) says recovery need not install it again.
//!
//! No checkpoint is taken between the first log unit and the done record, so recovery, which
//! rolls forward from the newest checkpoint, always sees the whole log of a transaction whose
//! installation a power cut interrupted, and installs it again over what rolled forward
//! ([`ObjectStore::finish_committed`]). Every command is idempotent when the log is replayed
//! from its first command (a create of an object that exists recreates it: the object can
//! only exist then because the interrupted installation created it).

use super::*;
use crate::api::{TxnError, TxnId, TxnOp};
use codec::le::Le;

/// A transaction's log takes at most this many write units (1 MiB with 4 KiB units): bounded
/// memory per transaction, bounded work for recovery, and room for the log and its installation
/// within the free blocks GC keeps.
pub const TXN_LOG_MAX_UNITS: u64 = 256;
/// Transactions open at once, at most.
pub const TXN_OPEN_MAX: usize = 64;

const LOG_MAGIC: &[u8; 4] = b"OTXL";
const LOG_VERSION: u8 = 1;
/// Magic, version, 3 reserved, command count u32, log length u64, CRC-32C u32 of what follows.
const LOG_HEADER_BYTES: usize = 24;

/// Where a COMMIT is (docs/DESIGN.md "Transactions", the write path with its durability points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CommitPhase {
    /// Log units being programmed: a failure leaves no trace (the log is garbage).
    Logging,
    /// The commit record is on flash: the transaction will be whole after any crash.
    Committed,
    /// The done record is on flash.
    Installed,
}

/// An open transaction: its commands, and its view of the objects they touch.
pub(super) struct OpenTxn {
    /// Every object of the transaction is in this partition.
    partition: PartitionId,
    ops: Vec<TxnOp>,
    log_bytes: u64,
    /// The objects as the transaction sees them (`None`: absent), for checking each command.
    view: FxHashMap<Oid, Option<Onode>>,
}

/// The store's transactions.
#[derive(Default)]
pub(super) struct Txns {
    open: std::collections::BTreeMap<TxnId, OpenTxn>,
    next: u64,
    /// A commit (or recovery's finishing of one) is installing: no checkpoint may run, or the
    /// commit record would fall behind it and recovery would no longer see the log.
    pub(super) installing: bool,
    /// Replaying a log at recovery: a command may meet the effects of later commands of the
    /// same transaction (see [`ObjectStore::apply_txn_op`]).
    redo: bool,
    /// Test-only mutation: install before the commit record (the sweep must catch it).
    #[cfg(feature = "txn-mutants")]
    pub(super) mutant_install_first: bool,
    /// Test-only mutation: program the commit record before the rest of the log.
    #[cfg(feature = "txn-mutants")]
    pub(super) mutant_commit_record_first: bool,
}

/// A transaction found by recovery's scan: its log parts and whether it was installed.
#[derive(Default)]
pub(super) struct FoundTxn {
    /// Log part -> unit holding it (the newest copy).
    parts: std::collections::BTreeMap<u32, (u64, u32)>,
    /// The log's part count, from the commit record.
    committed: Option<u32>,
    done: bool,
    /// Every unit of it on flash, kept valid until recovery's checkpoint.
    units: Vec<u32>,
}

impl FoundTxn {
    pub(super) fn add(&mut self, seq: u64, v: u32, rec: &Record) {
        self.units.push(v);
        match *rec {
            Record::TxnLog { part, parts, .. } => {
                let e = self.parts.entry(part).or_insert((seq, v));
                if seq >= e.0 {
                    *e = (seq, v);
                }
                if part + 1 == parts {
                    self.committed = Some(parts);
                }
            }
            Record::TxnDone { .. } => self.done = true,
            _ => {}
        }
    }
}

fn unsupported(what: String) -> OsdError {
    OsdError::Transaction(TxnError::Unsupported(what))
}

fn not_found(oid: Oid) -> OsdError {
    OsdError::NotFound(format!("object {oid}"))
}

impl<F: Flash> ObjectStore<F> {
    /// BEGIN.
    pub(super) fn begin_inner(&mut self, partition: PartitionId) -> Result<TxnId, OsdError> {
        self.check_writable()?;
        if self.load_onode(Oid::partition_root(partition))?.is_none() {
            return Err(OsdError::NotFound(format!("partition {:#x}", partition.0)));
        }
        if self.txns.open.len() >= TXN_OPEN_MAX {
            return Err(TxnError::TooMany {
                limit: TXN_OPEN_MAX as u64,
            }
            .into());
        }
        // Above every sequence number so far: an id from before a reopen never names a
        // transaction begun after it.
        self.txns.next = self.txns.next.max(self.gc.seq) + 1;
        let id = TxnId(self.txns.next);
        self.txns.open.insert(
            id,
            OpenTxn {
                partition,
                ops: Vec::new(),
                log_bytes: LOG_HEADER_BYTES as u64,
                view: FxHashMap::default(),
            },
        );
        Ok(id)
    }

    /// Adds a command to an open transaction, checked against its view.
    pub(super) fn txn_op_inner(
        &mut self,
        id: TxnId,
        mut op: TxnOp,
    ) -> Result<Option<ObjectId>, OsdError> {
        self.check_writable()?;
        let mut t = self.txns.open.remove(&id).ok_or(TxnError::NotFound(id))?;
        let limit = TXN_LOG_MAX_UNITS * self.unit as u64;
        let needed = t.log_bytes + encoded_len(&op) as u64;
        let r = if needed > limit {
            Err(TxnError::TooLarge {
                txn: id,
                needed_bytes: needed,
                limit_bytes: limit,
            }
            .into())
        } else {
            self.check_op(t.partition, &mut t.view, &mut op)
        };
        let created = match (&r, &op) {
            (Ok(()), TxnOp::Create { id, .. }) => *id,
            _ => None,
        };
        if r.is_ok() {
            // A logical length set is a truncate; it is logged as one.
            t.log_bytes += encoded_len(&op) as u64;
            t.ops.push(op);
        }
        self.txns.open.insert(id, t);
        r.map(|()| created)
    }

    /// ABORT: nothing of the transaction reached flash.
    pub(super) fn abort_inner(&mut self, id: TxnId) -> Result<(), OsdError> {
        self.txns
            .open
            .remove(&id)
            .map(|_| ())
            .ok_or(TxnError::NotFound(id).into())
    }

    /// The object as `view` sees it (loaded from the store the first time).
    fn view_of<'v>(
        &mut self,
        view: &'v mut FxHashMap<Oid, Option<Onode>>,
        oid: Oid,
    ) -> Result<&'v mut Option<Onode>, OsdError> {
        match view.entry(oid) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let o = self.load_onode(oid)?.map(|c| c.onode.clone());
                Ok(e.insert(o))
            }
        }
    }

    /// Checks one command against the transaction's view and applies it there; assigns the id
    /// of a create that asks the device for one, and turns a logical length set into a truncate.
    fn check_op(
        &mut self,
        partition: PartitionId,
        view: &mut FxHashMap<Oid, Option<Onode>>,
        op: &mut TxnOp,
    ) -> Result<(), OsdError> {
        let in_partition = match op {
            TxnOp::Create { partition: p, .. } => *p,
            TxnOp::Remove { oid }
            | TxnOp::Write { oid, .. }
            | TxnOp::Truncate { oid, .. }
            | TxnOp::SetAttr { oid, .. } => oid.partition,
        };
        if in_partition != partition {
            return Err(unsupported(format!(
                "the transaction is over partition {:#x}; partition {:#x} is outside it",
                partition.0, in_partition.0
            )));
        }
        if let TxnOp::SetAttr {
            oid,
            attr: Attr::LogicalLength,
            value,
        } = op
        {
            let AttrValue::U64(length) = *value else {
                return Err(OsdError::InvalidArgument(
                    "logical length takes a number".into(),
                ));
            };
            *op = TxnOp::Truncate { oid: *oid, length };
        }
        let now = self.now;
        match op {
            TxnOp::Create { partition, id } => {
                if self.load_onode(Oid::partition_root(*partition))?.is_none() {
                    return Err(OsdError::NotFound(format!("partition {:#x}", partition.0)));
                }
                let object = match *id {
                    Some(o) if o.0 < FIRST_USER_ID => {
                        return Err(OsdError::InvalidArgument(format!(
                            "object ids below {FIRST_USER_ID:#x} are reserved"
                        )))
                    }
                    Some(o) => o,
                    None => loop {
                        // Not in the store, nor created by this transaction; an aborted
                        // transaction's assigned ids are simply skipped.
                        let o = self.free_object_id(*partition)?;
                        self.next_object = o.0 + 1;
                        let oid = Oid {
                            partition: *partition,
                            object: o,
                        };
                        if self.view_of(view, oid)?.is_none() {
                            break o;
                        }
                    },
                };
                let oid = Oid {
                    partition: *partition,
                    object,
                };
                let v = self.view_of(view, oid)?;
                if v.is_some() {
                    return Err(OsdError::AlreadyExists(format!("object {oid}")));
                }
                let mut onode = Onode::new(oid, now);
                // As a plain create: the units the transaction writes come after.
                onode.created_seq = self.gc.seq.max(1);
                *v = Some(onode);
                *id = Some(object);
            }
            TxnOp::Remove { oid } => {
                if oid.is_partition_root() {
                    return Err(unsupported(
                        "partitions are not created or removed inside a transaction".into(),
                    ));
                }
                let v = self.view_of(view, *oid)?;
                if v.is_none() {
                    return Err(not_found(*oid));
                }
                *v = None;
            }
            TxnOp::Write { oid, offset, data } => {
                let end = offset.saturating_add(data.len() as u64);
                if end >= LENGTH_LIMIT_BYTES {
                    return Err(too_long(end));
                }
                self.check_data_op(view, *oid)?;
            }
            TxnOp::Truncate { oid, length } => {
                if *length >= LENGTH_LIMIT_BYTES {
                    return Err(too_long(*length));
                }
                self.check_data_op(view, *oid)?;
            }
            TxnOp::SetAttr { oid, attr, value } => {
                let (oid, attr) = (*oid, *attr);
                let Some(o) = self.view_of(view, oid)?.as_mut() else {
                    return Err(not_found(oid));
                };
                let bad = |what: &str| OsdError::InvalidArgument(format!("{attr:?} takes {what}"));
                match (attr, &*value) {
                    (Attr::Priority, AttrValue::U64(p)) if *p <= u8::MAX as u64 => {}
                    (Attr::Priority, _) => return Err(bad("a number from 0 to 255")),
                    (Attr::ExpectedSize, AttrValue::U64(_)) => {}
                    (Attr::AccessPattern, AttrValue::Pattern(_)) => {}
                    (Attr::ReadOnly, AttrValue::Bool(b)) => o.read_only = *b,
                    (Attr::User(id), AttrValue::Bytes(b)) => o
                        .set_user_attr(id, Some(b.as_slice()))
                        .map_err(|e| OsdError::InvalidArgument(e.to_string()))?,
                    (Attr::User(id), AttrValue::Absent) => o
                        .set_user_attr(id, None)
                        .map_err(|e| OsdError::InvalidArgument(e.to_string()))?,
                    (
                        Attr::ExpectedSize | Attr::AccessPattern | Attr::ReadOnly | Attr::User(_),
                        _,
                    ) => return Err(bad("another kind of value")),
                    (a, _) => {
                        return Err(unsupported(format!(
                            "{a:?} is not set inside a transaction (services and the inode \
                             hint change how an object is stored; times are the store's)"
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    /// A write or truncate: the object exists in the view, is writable, and is not encrypted
    /// (the log would hold its bytes in clear: docs/DESIGN.md "Transactions").
    fn check_data_op(
        &mut self,
        view: &mut FxHashMap<Oid, Option<Onode>>,
        oid: Oid,
    ) -> Result<(), OsdError> {
        let Some(o) = self.view_of(view, oid)?.as_ref() else {
            return Err(not_found(oid));
        };
        if o.wrapped_key.is_some() {
            return Err(unsupported(format!(
                "object {oid} is encrypted: its bytes would reach flash in clear in the \
                 transaction log; write it outside a transaction"
            )));
        }
        if o.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        Ok(())
    }

    /// COMMIT: checks the commands again against the store as it is now (other commands may
    /// have run since they were taken), then logs, commits and installs them.
    pub(super) fn commit_inner(&mut self, id: TxnId) -> Result<(), OsdError> {
        self.check_writable()?;
        let t = self.txns.open.remove(&id).ok_or(TxnError::NotFound(id))?;
        let mut ops = t.ops;
        if ops.is_empty() {
            return Ok(());
        }
        let mut view = FxHashMap::default();
        for op in ops.iter_mut() {
            self.check_op(t.partition, &mut view, op)?;
        }
        let log = encode_log(&ops);
        // Room first, while GC may still checkpoint: none may run from the first log unit on.
        self.make_room()?;
        let txn = self.gc.take_seq();
        self.meta_busy += 1;
        self.txns.installing = true;
        let mut phase = CommitPhase::Logging;
        let r = self.commit_phases(txn, &log, &ops, &mut phase);
        self.meta_busy -= 1;
        self.txns.installing = false;
        match (r, phase) {
            (Ok(()), _) => {}
            // Nothing is committed: the log units are garbage (released at the next checkpoint).
            (Err(e), CommitPhase::Logging) => return Err(e),
            (Err(e), _) => {
                // Committed on flash, not in memory: only recovery can finish it.
                self.poison(format!(
                    "transaction {id} is committed but its installation failed ({e}); reopen \
                     the store to finish it"
                ));
                return Err(e);
            }
        }
        self.maybe_checkpoint()
    }

    fn commit_phases(
        &mut self,
        txn: u64,
        log: &[u8],
        ops: &[TxnOp],
        phase: &mut CommitPhase,
    ) -> Result<(), OsdError> {
        #[cfg(feature = "txn-mutants")]
        if self.txns.mutant_install_first {
            for op in ops {
                self.apply_txn_op(op.clone())?;
            }
            self.flush_all()?;
        }
        let unit = self.unit;
        let parts = log.len().div_ceil(unit) as u32;
        let mut page = vec![0u8; unit];
        #[allow(unused_mut)]
        let mut order: Vec<(usize, &[u8])> = log.chunks(unit).enumerate().collect();
        #[cfg(feature = "txn-mutants")]
        if self.txns.mutant_commit_record_first {
            order.reverse();
        }
        for (i, chunk) in order {
            page.fill(0);
            page[..chunk.len()].copy_from_slice(chunk);
            let rec = Record::TxnLog {
                txn,
                part: i as u32,
                parts,
                seq: 0,
            };
            let v = self.write_meta_unit(PageKind::Descriptor, &page, rec)?;
            // Kept until the next checkpoint, which is what makes the log unnecessary (GC
            // moving it retargets the release).
            self.released.push(v);
            self.stats.txn_log_units_written += 1;
        }
        self.sync()?;
        *phase = CommitPhase::Committed;
        #[cfg(feature = "txn-mutants")]
        let installed_first = self.txns.mutant_install_first;
        #[cfg(not(feature = "txn-mutants"))]
        let installed_first = false;
        if !installed_first {
            for op in ops {
                self.apply_txn_op(op.clone())?;
            }
            self.flush_all()?;
        }
        page.fill(0);
        let v =
            self.write_meta_unit(PageKind::Descriptor, &page, Record::TxnDone { txn, seq: 0 })?;
        self.released.push(v);
        self.sync()?;
        *phase = CommitPhase::Installed;
        self.stats.txns_committed += 1;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), OsdError> {
        self.fml
            .flash_mut()
            .sync()
            .map_err(|e| OsdError::Device(e.into()))
    }

    /// Applies one checked command through the ordinary paths. When recovery replays a log
    /// (`redo`), the store may already hold effects of this transaction's later commands, which
    /// each command overwrites: a create meets the object it created (recreated from empty), a
    /// remove may find the object gone, a write may find the read-only flag a later command set
    /// (cleared: the command was checked writable at that point of the transaction).
    fn apply_txn_op(&mut self, op: TxnOp) -> Result<(), OsdError> {
        match op {
            TxnOp::Create { partition, id } => {
                let object = id
                    .ok_or_else(|| OsdError::Internal("a logged create has no object id".into()))?;
                let oid = Oid { partition, object };
                if self.txns.redo && self.load_onode(oid)?.is_some() {
                    self.remove_object(oid)?;
                }
                self.create(partition, Some(object))?;
            }
            TxnOp::Remove { oid } => {
                if !self.txns.redo || self.load_onode(oid)?.is_some() {
                    self.remove_object(oid)?;
                }
            }
            TxnOp::Write { oid, offset, data } => {
                self.writable_for_redo(oid)?;
                self.write(oid, offset, &data)?;
            }
            TxnOp::Truncate { oid, length } => {
                self.writable_for_redo(oid)?;
                self.truncate(oid, length)?;
            }
            TxnOp::SetAttr { oid, attr, value } => self.set_attr(oid, attr, value)?,
        }
        Ok(())
    }

    fn writable_for_redo(&mut self, oid: Oid) -> Result<(), OsdError> {
        if self.txns.redo {
            let c = self.onode_mut(oid)?;
            if c.onode.read_only {
                c.onode.read_only = false;
                c.dirty = true;
            }
        }
        Ok(())
    }

    /// Recovery: every transaction whose commit record is newer than the checkpoint and which
    /// has no done record is installed again, from its log, over what rolled forward; its units
    /// (and those of every other transaction found) stay valid until recovery's checkpoint, so
    /// a power cut during this leaves the log for the next recovery.
    pub(super) fn finish_committed(
        &mut self,
        found: std::collections::BTreeMap<u64, FoundTxn>,
    ) -> Result<(), OsdError> {
        let mut todo = Vec::new();
        for (txn, f) in found {
            for &v in &f.units {
                if !self.fml.is_valid(Vpa(v)) {
                    self.mark_valid(v)?;
                }
                self.released.push(v);
            }
            // A log without its commit record was never committed: it leaves no trace.
            if let (Some(parts), false) = (f.committed, f.done) {
                todo.push((txn, parts, f.parts));
            }
        }
        for (txn, parts, units) in todo {
            let ops = self.read_log(txn, parts, &units)?;
            self.meta_busy += 1;
            self.txns.installing = true;
            self.txns.redo = true;
            let r = ops
                .into_iter()
                .try_for_each(|op| self.apply_txn_op(op))
                .and_then(|()| self.flush_all());
            self.meta_busy -= 1;
            self.txns.installing = false;
            self.txns.redo = false;
            r?;
            self.recovery.txns_finished += 1;
        }
        Ok(())
    }

    /// Reads a committed transaction's log back. Every part was programmed before the commit
    /// record, so a part that is missing or damaged is damage, not a torn program: an error.
    fn read_log(
        &mut self,
        txn: u64,
        parts: u32,
        units: &std::collections::BTreeMap<u32, (u64, u32)>,
    ) -> Result<Vec<TxnOp>, OsdError> {
        let mut log = Vec::with_capacity(parts as usize * self.unit);
        let mut page = vec![0u8; self.unit];
        for part in 0..parts {
            let damaged = |what: String| OsdError::Corrupted {
                what: format!("log of committed transaction {txn:#x}: {what}"),
                location: "recovery".into(),
                unit: None,
            };
            let Some(&(_, v)) = units.get(&part) else {
                return Err(damaged(format!("part {part} of {parts} is missing")));
            };
            match read_meta_checked(
                &mut self.fml,
                &mut self.stats,
                (self.now, v),
                &mut page,
                TXN_RECORD_BYTES,
                |r, _| matches!(r, Record::TxnLog { .. }),
            ) {
                Ok((
                    t,
                    Content::Bytes,
                    Record::TxnLog {
                        txn: t2, part: p2, ..
                    },
                )) if t2 == txn && p2 == part => {
                    self.now = self.now.max(t);
                }
                Ok(_) => return Err(damaged(format!("unit {v} is not part {part}"))),
                Err(BadUnit::Device(e)) => return Err(OsdError::Device(e)),
                Err(e) => return Err(e.into_osd(format!("transaction log part {part}"), v)),
            }
            log.extend_from_slice(&page);
        }
        decode_log(&log).map_err(|what| OsdError::Corrupted {
            what: format!("log of committed transaction {txn:#x}: {what}"),
            location: "recovery".into(),
            unit: None,
        })
    }

    /// Test-only mutation (feature `txn-mutants`): COMMIT installs before it writes the commit
    /// record, so a power cut during installation leaves part of a transaction. The power-cut
    /// sweep must catch it.
    #[cfg(feature = "txn-mutants")]
    pub fn set_txn_mutant_install_first(&mut self, on: bool) {
        self.txns.mutant_install_first = on;
    }

    /// Test-only mutation (feature `txn-mutants`): COMMIT programs its commit record before
    /// the rest of the log, so a power cut between them leaves a commit record whose log is
    /// not whole. The power-cut sweep must catch it.
    #[cfg(feature = "txn-mutants")]
    pub fn set_txn_mutant_commit_record_first(&mut self, on: bool) {
        self.txns.mutant_commit_record_first = on;
    }
}

fn put_oid(out: &mut Vec<u8>, oid: Oid) {
    out.extend_from_slice(&oid.as_u128().to_le_bytes());
}

fn attr_code(a: Attr) -> (u8, u16) {
    match a {
        Attr::Priority => (7, 0),
        Attr::ExpectedSize => (8, 0),
        Attr::AccessPattern => (9, 0),
        Attr::ReadOnly => (10, 0),
        Attr::User(id) => (12, id),
        // Only the attributes above pass `check_op`; a logical length is a truncate.
        _ => (0, 0),
    }
}

fn encode_value(out: &mut Vec<u8>, v: &AttrValue) {
    match v {
        AttrValue::U64(x) => {
            out.push(0);
            out.extend_from_slice(&x.to_le_bytes());
        }
        AttrValue::Bool(b) => {
            out.push(1);
            out.push(*b as u8);
        }
        AttrValue::Pattern(p) => {
            use crate::onode::AccessPattern;
            out.push(2);
            out.push(match p {
                AccessPattern::Unknown => 0,
                AccessPattern::Sequential => 1,
                AccessPattern::Random => 2,
                AccessPattern::WriteOnce => 3,
            });
        }
        AttrValue::Bytes(b) => {
            out.push(3);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        AttrValue::Absent => out.push(4),
    }
}

fn encode_op(out: &mut Vec<u8>, op: &TxnOp) {
    match op {
        TxnOp::Create { partition, id } => {
            out.push(1);
            out.extend_from_slice(&partition.0.to_le_bytes());
            out.extend_from_slice(&id.map_or(0, |o| o.0).to_le_bytes());
        }
        TxnOp::Remove { oid } => {
            out.push(2);
            put_oid(out, *oid);
        }
        TxnOp::Write { oid, offset, data } => {
            out.push(3);
            put_oid(out, *oid);
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        TxnOp::Truncate { oid, length } => {
            out.push(4);
            put_oid(out, *oid);
            out.extend_from_slice(&length.to_le_bytes());
        }
        TxnOp::SetAttr { oid, attr, value } => {
            out.push(5);
            put_oid(out, *oid);
            let (kind, id) = attr_code(*attr);
            out.push(kind);
            out.extend_from_slice(&id.to_le_bytes());
            encode_value(out, value);
        }
    }
}

/// Bytes a command takes in the log (docs/FORMAT.md "Transaction log").
fn encoded_len(op: &TxnOp) -> usize {
    let mut v = Vec::new();
    match op {
        // Not encoded whole just to be measured.
        TxnOp::Write { data, .. } => 1 + 16 + 8 + 4 + data.len(),
        _ => {
            encode_op(&mut v, op);
            v.len()
        }
    }
}

/// The log: header, then the commands in order.
fn encode_log(ops: &[TxnOp]) -> Vec<u8> {
    let mut body = Vec::new();
    for op in ops {
        encode_op(&mut body, op);
    }
    let mut out = Vec::with_capacity(LOG_HEADER_BYTES + body.len());
    out.extend_from_slice(LOG_MAGIC);
    out.push(LOG_VERSION);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    out.extend_from_slice(&((LOG_HEADER_BYTES + body.len()) as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn get_oid(r: &mut Le<'_>) -> Result<Oid, String> {
    Ok(Oid::from_u128(u128::from_le_bytes(r.array()?)))
}

fn decode_value(r: &mut Le<'_>) -> Result<AttrValue, String> {
    use crate::onode::AccessPattern;
    Ok(match r.u8()? {
        0 => AttrValue::U64(r.u64()?),
        1 => AttrValue::Bool(r.u8()? != 0),
        2 => AttrValue::Pattern(match r.u8()? {
            0 => AccessPattern::Unknown,
            1 => AccessPattern::Sequential,
            2 => AccessPattern::Random,
            3 => AccessPattern::WriteOnce,
            p => return Err(format!("access pattern {p} is unknown")),
        }),
        3 => {
            let n = r.u32()? as usize;
            AttrValue::Bytes(r.bytes(n)?.to_vec())
        }
        4 => AttrValue::Absent,
        t => return Err(format!("attribute value tag {t} is unknown")),
    })
}

fn decode_op(r: &mut Le<'_>) -> Result<TxnOp, String> {
    Ok(match r.u8()? {
        1 => {
            let partition = PartitionId(r.u64()?);
            let id = ObjectId(r.u64()?);
            TxnOp::Create {
                partition,
                id: Some(id),
            }
        }
        2 => TxnOp::Remove { oid: get_oid(r)? },
        3 => {
            let oid = get_oid(r)?;
            let offset = r.u64()?;
            let n = r.u32()? as usize;
            TxnOp::Write {
                oid,
                offset,
                data: r.bytes(n)?.to_vec(),
            }
        }
        4 => TxnOp::Truncate {
            oid: get_oid(r)?,
            length: r.u64()?,
        },
        5 => {
            let oid = get_oid(r)?;
            let kind = r.u8()?;
            let id = r.u16()?;
            let attr = match (kind, id) {
                (7, 0) => Attr::Priority,
                (8, 0) => Attr::ExpectedSize,
                (9, 0) => Attr::AccessPattern,
                (10, 0) => Attr::ReadOnly,
                (12, id) if id >= FIRST_USER_ATTR => Attr::User(id),
                (k, i) => return Err(format!("attribute ({k}, {i}) cannot be in a log")),
            };
            TxnOp::SetAttr {
                oid,
                attr,
                value: decode_value(r)?,
            }
        }
        t => return Err(format!("command tag {t} is unknown")),
    })
}

/// Decodes a log read back (whole units, zero padded): untrusted bytes, so every length is
/// checked and a mismatch is an error, never a panic.
fn decode_log(buf: &[u8]) -> Result<Vec<TxnOp>, String> {
    let mut r = Le::new(buf);
    if r.array::<4>()? != *LOG_MAGIC {
        return Err("bad magic".into());
    }
    let version = r.u8()?;
    if version != LOG_VERSION {
        return Err(format!("log version {version} is unknown"));
    }
    if r.array::<3>()? != [0; 3] {
        return Err("reserved header bytes are not zero".into());
    }
    let count = r.u32()?;
    let len = r.u64()?;
    let crc = r.u32()?;
    let body = usize::try_from(len)
        .ok()
        .and_then(|l| buf.get(LOG_HEADER_BYTES..l))
        .ok_or_else(|| format!("log length {len} exceeds its {} bytes", buf.len()))?;
    if crc32c::crc32c(body) != crc {
        return Err("log checksum mismatch".into());
    }
    let mut r = Le::new(body);
    let mut ops = Vec::new();
    for _ in 0..count {
        ops.push(decode_op(&mut r)?);
    }
    if r.remaining() != 0 {
        return Err(format!("{} bytes after the last command", r.remaining()));
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onode::AccessPattern;

    fn sample() -> Vec<TxnOp> {
        let a = Oid::new(0x10000, 0x10001);
        vec![
            TxnOp::Create {
                partition: PartitionId(0x10000),
                id: Some(ObjectId(0x10001)),
            },
            TxnOp::Write {
                oid: a,
                offset: 5,
                data: vec![7; 300],
            },
            TxnOp::Truncate { oid: a, length: 9 },
            TxnOp::SetAttr {
                oid: a,
                attr: Attr::User(0x1001),
                value: AttrValue::Bytes(b"x".to_vec()),
            },
            TxnOp::SetAttr {
                oid: a,
                attr: Attr::User(0x1002),
                value: AttrValue::Absent,
            },
            TxnOp::SetAttr {
                oid: a,
                attr: Attr::AccessPattern,
                value: AttrValue::Pattern(AccessPattern::Random),
            },
            TxnOp::SetAttr {
                oid: a,
                attr: Attr::ReadOnly,
                value: AttrValue::Bool(true),
            },
            TxnOp::SetAttr {
                oid: a,
                attr: Attr::Priority,
                value: AttrValue::U64(3),
            },
            TxnOp::Remove { oid: a },
        ]
    }

    #[test]
    fn a_log_round_trips_and_its_length_is_what_was_counted() {
        let ops = sample();
        let mut log = encode_log(&ops);
        let counted: usize = ops.iter().map(encoded_len).sum::<usize>() + LOG_HEADER_BYTES;
        assert_eq!(log.len(), counted);
        // Read back as whole units: zero padded.
        log.resize(4096, 0);
        assert_eq!(decode_log(&log), Ok(ops));
    }

    #[test]
    fn a_damaged_or_cut_log_is_an_error_never_a_panic() {
        let log = encode_log(&sample());
        for cut in 0..log.len() {
            assert!(decode_log(&log[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..log.len() {
            let mut d = log.clone();
            d[i] ^= 0x10;
            assert!(decode_log(&d).is_err(), "flip at {i}");
        }
    }
}
