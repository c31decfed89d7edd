//! The OSD command set (`Osd`) over the store, and the calls that end a store's life.

use super::*;
use crate::api::{TxnId, TxnOp};

impl<F: Flash> Osd for ObjectStore<F> {
    fn create_partition(&mut self, id: Option<PartitionId>) -> Result<PartitionId, OsdError> {
        self.check_writable()?;
        let pid = match id {
            Some(p) if p.0 < FIRST_USER_ID => {
                return Err(OsdError::InvalidArgument(format!(
                    "partition ids below {FIRST_USER_ID:#x} are reserved"
                )))
            }
            Some(p) => p,
            None => {
                let p = PartitionId(self.next_partition);
                self.next_partition += 1;
                p
            }
        };
        self.next_partition = self.next_partition.max(pid.0 + 1);
        let root = Oid::partition_root(pid);
        if self.load_onode(root)?.is_some() {
            return Err(OsdError::AlreadyExists(format!("partition {:#x}", pid.0)));
        }
        let now = self.now;
        self.onodes.insert(
            root,
            CachedOnode {
                onode: Onode::new(root, now),
                dirty: true,
                loc: None,
            },
        );
        Ok(pid)
    }

    fn remove_partition(&mut self, id: PartitionId) -> Result<(), OsdError> {
        let (objects, _) = self.list(id, 0, 1)?;
        if !objects.is_empty() {
            return Err(OsdError::InvalidArgument(format!(
                "partition {:#x} is not empty",
                id.0
            )));
        }
        self.remove_object(Oid::partition_root(id))
    }

    fn create(
        &mut self,
        partition: PartitionId,
        id: Option<ObjectId>,
    ) -> Result<ObjectId, OsdError> {
        self.check_writable()?;
        if self.load_onode(Oid::partition_root(partition))?.is_none() {
            return Err(OsdError::NotFound(format!("partition {:#x}", partition.0)));
        }
        let object = match id {
            Some(o) if o.0 < FIRST_USER_ID => {
                return Err(OsdError::InvalidArgument(format!(
                    "object ids below {FIRST_USER_ID:#x} are reserved"
                )))
            }
            Some(o) => o,
            None => self.free_object_id(partition)?,
        };
        self.next_object = self.next_object.max(object.0 + 1);
        let oid = Oid { partition, object };
        if self.load_onode(oid)?.is_some() {
            return Err(OsdError::AlreadyExists(format!("object {oid}")));
        }
        if self.onodes.get(&oid).is_some_and(|c| c.dirty) {
            // A removal not yet on flash: write its tombstone first, so recovery cannot mix the
            // old object's data into the new one.
            self.flush_all()?;
        }
        let now = self.now;
        self.trim_onode_cache();
        let mut onode = Onode::new(oid, now);
        // Every unit of this object takes a later sequence number: recovery tells an earlier
        // incarnation's units (of a creation a crash discarded) by theirs.
        onode.created_seq = self.gc.seq.max(1);
        let (m, k) = (
            self.config.default_reliability,
            self.config.parity_group_units,
        );
        if m > 0 {
            if m > MAX_RELIABILITY || k == 0 || k as usize + m as usize > 256 {
                return Err(OsdError::InvalidArgument(format!(
                    "default reliability {m} with parity groups of {k} data units: at most \
                     {MAX_RELIABILITY} parity units, and 1 to {} data units",
                    256 - m as usize
                )));
            }
            onode.reliability = m;
            onode.parity_group = k;
        }
        self.onodes.insert(
            oid,
            CachedOnode {
                onode,
                dirty: true,
                loc: None,
            },
        );
        self.evict_onodes()?;
        Ok(object)
    }

    fn remove(&mut self, oid: Oid) -> Result<(), OsdError> {
        if oid.is_partition_root() {
            return Err(OsdError::InvalidArgument(
                "object id 0 is the partition; use remove_partition".into(),
            ));
        }
        self.remove_object(oid)?;
        self.maybe_checkpoint()
    }

    #[expect(
        clippy::unwrap_used,
        reason = "the buffered unit taken was found in the buffer just above"
    )]
    fn read(&mut self, oid: Oid, offset: u64, out: &mut [u8]) -> Result<usize, OsdError> {
        if self.is_encrypted(oid)? {
            // Without the key nothing is read, not even a hole's zeros.
            self.data_key(oid)?;
        }
        let c = self.onode_mut(oid)?;
        let len = c.onode.logical_length;
        if let Some(d) = &c.onode.inline {
            // An embedded inode: its data came with the onode.
            let start = (offset as usize).min(d.len());
            let n = (d.len() - start).min(out.len());
            out[..n].copy_from_slice(&d[start..start + n]);
            self.stats.host_read_bytes += n as u64;
            self.touch(oid)?;
            return Ok(n);
        }
        if offset >= len {
            return Ok(0);
        }
        if self.is_small(oid, len)? {
            let d = &self.smalls[&oid].bytes;
            let start = offset as usize;
            let n = (d.len() - start).min(out.len());
            out[..n].copy_from_slice(&d[start..start + n]);
            self.stats.host_read_bytes += n as u64;
            self.touch(oid)?;
            return Ok(n);
        }
        let end = len.min(offset + out.len() as u64);
        let unit = self.unit as u64;
        let mut u = offset / unit;
        let mut produced = 0usize;
        while u * unit < end {
            let b0 = (offset.max(u * unit) - u * unit) as usize;
            let b1 = (end.min((u + 1) * unit) - u * unit) as usize;
            let n = b1 - b0;
            let dst = &mut out[produced..produced + n];
            let buffered = self
                .buf
                .get((oid, u))
                .map(|e| (e.mask, matches!(e.fill, Fill::Bytes(_))));
            match buffered {
                Some((mask, true)) if mask == self.full_mask() => {
                    if let Some(Entry {
                        fill: Fill::Bytes(b),
                        ..
                    }) = self.buf.get((oid, u))
                    {
                        dst.copy_from_slice(&b[b0..b1]);
                    }
                }
                Some(_) => {
                    let e = self.buf.take((oid, u)).unwrap();
                    self.program_entry(e)?;
                    self.read_unit_into(oid, u, b0, dst)?;
                }
                None => self.read_unit_into(oid, u, b0, dst)?,
            }
            produced += n;
            u += 1;
        }
        self.stats.host_read_bytes += produced as u64;
        self.touch(oid)?;
        Ok(produced)
    }

    fn write(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<(), OsdError> {
        self.write_inner(oid, offset, data.len() as u64, Some(data), 0)?;
        self.maybe_checkpoint()
    }

    fn append(&mut self, oid: Oid, data: &[u8]) -> Result<u64, OsdError> {
        let at = self.onode_mut(oid)?.onode.logical_length;
        self.write(oid, at, data)?;
        Ok(at)
    }

    fn truncate(&mut self, oid: Oid, length: u64) -> Result<(), OsdError> {
        self.check_writable()?;
        if length >= LENGTH_LIMIT_BYTES {
            return Err(too_long(length));
        }
        if self.is_encrypted(oid)? {
            self.data_key(oid)?;
        }
        let c = self.onode_mut(oid)?;
        if c.onode.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        let old = c.onode.logical_length;
        if let Some(d) = c.onode.inline.as_mut() {
            if length as usize <= INLINE_MAX_BYTES {
                d.resize(length as usize, 0);
                c.onode.logical_length = length;
                c.dirty = true;
                return Ok(());
            }
            self.spill_inline(oid)?;
        }
        if self.truncate_small(oid, length)? {
            return Ok(());
        }
        let unit = self.unit as u64;
        if length > old {
            self.zero_gap(oid, old, false)?;
        }
        if length < old {
            // Damaged units the truncate keeps, in the group holding the new end, are rebuilt
            // while that group's parity still covers the units it cuts off, and before the
            // shorter onode can reach flash (a checkpoint GC asks for may write it). After a
            // crash past that onode, recovery finds the group's parity stale and recomputes it
            // from the data, a damaged unit included (`--reliability 1 --fill 80 --seed 51`,
            // seed 6777794186695470792: "parity did not rebuild it").
            self.parity_before_truncate(oid, length.div_ceil(unit))?;
        }
        let now = self.now;
        let c = self.onode_mut(oid)?;
        c.onode.logical_length = length;
        c.onode.modified_ns = now;
        c.dirty = true;
        #[cfg(feature = "mutants")]
        if fml::mutants::on(fml::mutants::Mutant::TruncateStaleLength) {
            c.dirty = false;
        }
        if length < old {
            // The shorter onode reaches flash before the dropped units are released: recovery
            // replays it in order, and until it is durable GC cannot erase data a crash would
            // bring back.
            self.flush_all()?;
            let first_gone = length.div_ceil(unit);
            self.buf.drop_object_from(oid, first_gone);
            // Again for damage the flush's own programs did (one gone astray), before the
            // group's parity is recomputed from the units it keeps (seed
            // 10599065308326577469). Kept units only, so no rewrite maps a unit the onode cut
            // off; a unit GC moves meanwhile is dropped again by the onode written below.
            self.parity_before_truncate(oid, first_gone)?;
            let freed = self.drop_units_from(oid, first_gone)?;
            self.parity_after_truncate(oid, first_gone)?;
            let c = self.onode_mut(oid)?;
            c.onode.used_bytes = c.onode.used_bytes.saturating_sub(freed * unit);
            c.dirty = true;
            #[cfg(feature = "mutants")]
            if fml::mutants::on(fml::mutants::Mutant::TruncateStaleLength) {
                c.dirty = false;
            }
            // The onode again, with the used bytes the drop left: the one on flash still
            // counts the dropped units, and a checkpoint GC asks for before this onode is
            // ready (a later write buffering units of the object) would commit the index
            // without them beside it, which recovery does not settle for an object left
            // without extents (`--reliability 1 --fill 80`, seed 3291029010607707482).
            self.write_ready_onodes()?;
        }
        self.maybe_checkpoint()
    }

    fn get_attr(&mut self, oid: Oid, attr: Attr) -> Result<AttrValue, OsdError> {
        let journaled = self.atime_journal.get(&oid).copied().unwrap_or(0);
        let o = &self.onode_mut(oid)?.onode;
        Ok(match attr {
            Attr::LogicalLength => AttrValue::U64(o.logical_length),
            Attr::UsedCapacity => AttrValue::U64(o.used_bytes),
            Attr::CreatedTime => AttrValue::U64(o.created_ns),
            Attr::ModifiedTime => AttrValue::U64(o.modified_ns),
            Attr::AccessedTime => AttrValue::U64(o.accessed_ns.max(journaled)),
            Attr::AttrChangedTime => AttrValue::U64(o.attr_changed_ns),
            Attr::Priority => AttrValue::U64(o.priority as u64),
            Attr::ExpectedSize => AttrValue::U64(o.expected_size),
            Attr::AccessPattern => AttrValue::Pattern(o.access),
            Attr::ReadOnly => AttrValue::Bool(o.read_only),
            Attr::InodeEmbedded => AttrValue::Bool(o.inode),
            Attr::Reliability => AttrValue::U64(o.reliability as u64),
            Attr::Encryption => AttrValue::U64(o.wrapped_key.is_some() as u64),
            Attr::Compression => AttrValue::U64(o.compression.attr().code()),
            Attr::User(id) => o
                .user_attr(id)
                .map_or(AttrValue::Absent, |v| AttrValue::Bytes(v.to_vec())),
        })
    }

    fn set_attr(&mut self, oid: Oid, attr: Attr, value: AttrValue) -> Result<(), OsdError> {
        self.check_writable()?;
        if attr == Attr::LogicalLength {
            let AttrValue::U64(l) = value else {
                return Err(OsdError::InvalidArgument(
                    "logical length takes a number".into(),
                ));
            };
            return self.truncate(oid, l);
        }
        if attr == Attr::Reliability {
            let AttrValue::U64(m) = value else {
                return Err(OsdError::InvalidArgument(
                    "reliability takes a number of parity units per group".into(),
                ));
            };
            if self.onode_mut(oid)?.onode.read_only {
                return Err(OsdError::ReadOnly(oid));
            }
            return self.set_reliability(oid, m);
        }
        if attr == Attr::Encryption {
            let AttrValue::U64(on) = value else {
                return Err(OsdError::InvalidArgument(
                    "encryption takes 0 (none) or 1 (xchacha20-poly1305)".into(),
                ));
            };
            return self.set_encryption(oid, on);
        }
        if attr == Attr::Compression {
            let AttrValue::U64(code) = value else {
                return Err(OsdError::InvalidArgument(
                    "compression takes 0 (none), 1 (lz4), 2 (zstd) or 3 (auto)".into(),
                ));
            };
            return self.set_compression(oid, code);
        }
        let now = self.now;
        let c = self.onode_mut(oid)?;
        let o = &mut c.onode;
        let bad = |what: &str| OsdError::InvalidArgument(format!("{attr:?} takes {what}"));
        match (attr, value) {
            (Attr::Priority, AttrValue::U64(p)) if p <= u8::MAX as u64 => o.priority = p as u8,
            (Attr::Priority, _) => return Err(bad("a number from 0 to 255")),
            (Attr::ExpectedSize, AttrValue::U64(s)) => o.expected_size = s,
            (Attr::AccessPattern, AttrValue::Pattern(p)) => o.access = p,
            (Attr::ReadOnly, AttrValue::Bool(b)) => o.read_only = b,
            (Attr::InodeEmbedded, AttrValue::Bool(b)) => {
                o.inode = b;
                if !b {
                    c.dirty = true;
                    return self.spill_inline(oid);
                }
            }
            (Attr::AccessedTime, AttrValue::U64(t)) => o.accessed_ns = t,
            (Attr::ModifiedTime, AttrValue::U64(t)) => o.modified_ns = t,
            (Attr::User(id), AttrValue::Bytes(v)) => o
                .set_user_attr(id, Some(&v))
                .map_err(|e| OsdError::InvalidArgument(e.to_string()))?,
            (Attr::User(id), AttrValue::Absent) => o
                .set_user_attr(id, None)
                .map_err(|e| OsdError::InvalidArgument(e.to_string()))?,
            (Attr::User(id), _) if id < FIRST_USER_ATTR => {
                return Err(bad("a user attribute id of at least 0x1000"))
            }
            (a, _) => {
                return Err(OsdError::InvalidArgument(format!(
                    "{a:?} cannot be set to that value (or is read-only)"
                )))
            }
        }
        o.attr_changed_ns = now;
        c.dirty = true;
        #[cfg(feature = "mutants")]
        if matches!(attr, Attr::User(_)) && fml::mutants::on(fml::mutants::Mutant::AttrLost) {
            c.dirty = false;
        }
        self.evict_onodes()
    }

    fn list_partitions(
        &mut self,
        token: u64,
        max: usize,
    ) -> Result<(Vec<PartitionId>, Option<u64>), OsdError> {
        // Partitions created since the last flush are not in the index yet: flush them first.
        if self.onodes.values().any(|c| c.dirty && c.loc.is_none()) {
            self.flush_all()?;
        }
        let mut out = Vec::new();
        let mut p = token;
        while out.len() < max.max(1) {
            let from = onode_key(Oid::partition_root(PartitionId(p)));
            let hit = self.with_index(|ix, io| ix.range(io, &from, &IndexKey::MAX, 1))?;
            let Some((k, _)) = hit.into_iter().next() else {
                return Ok((out, None));
            };
            let oid = Oid::from_u128(k.oid);
            if oid.is_partition_root() && k.kind == KIND_ONODE && self.load_onode(oid)?.is_some() {
                out.push(oid.partition);
            }
            match oid.partition.0.checked_add(1) {
                Some(n) => p = n,
                None => return Ok((out, None)),
            }
        }
        Ok((out, Some(p)))
    }

    fn list(
        &mut self,
        partition: PartitionId,
        token: u64,
        max: usize,
    ) -> Result<(Vec<ObjectId>, Option<u64>), OsdError> {
        if self.load_onode(Oid::partition_root(partition))?.is_none() {
            return Err(OsdError::NotFound(format!("partition {:#x}", partition.0)));
        }
        // Onodes created since the last flush are not in the index yet: flush them first.
        if self.onodes.values().any(|c| c.dirty && c.loc.is_none()) {
            self.flush_all()?;
        }
        let from = onode_key(Oid::new(partition.0, token.max(1)));
        let to = onode_key(Oid::new(partition.0, u64::MAX));
        let max = max.max(1);
        let hits = self.with_index(|ix, io| ix.range(io, &from, &to, usize::MAX))?;
        let mut out = Vec::new();
        for (k, _) in hits {
            if k.kind != KIND_ONODE
                || self
                    .onodes
                    .get(&Oid::from_u128(k.oid))
                    .is_some_and(|c| c.onode.removed)
            {
                continue;
            }
            if out.len() == max {
                return Ok((out, Some(Oid::from_u128(k.oid).object.0)));
            }
            out.push(Oid::from_u128(k.oid).object);
        }
        Ok((out, None))
    }

    fn flush(&mut self, scope: FlushScope) -> Result<(), OsdError> {
        // Every scope flushes the whole write buffer (it is shared and small); access times,
        // which no object's data depends on, only at a device-wide FLUSH.
        self.check_writable()?;
        match scope {
            FlushScope::Device => self.flush_access_times()?,
            _ => self.flush_all()?,
        }
        self.fml
            .flash_mut()
            .sync()
            .map_err(|e| OsdError::Device(e.into()))?;
        self.maybe_checkpoint()
    }

    fn begin_txn(&mut self, partition: PartitionId) -> Result<TxnId, OsdError> {
        self.begin_inner(partition)
    }

    fn txn_op(&mut self, txn: TxnId, op: TxnOp) -> Result<Option<ObjectId>, OsdError> {
        self.txn_op_inner(txn, op)
    }

    fn commit_txn(&mut self, txn: TxnId) -> Result<(), OsdError> {
        self.commit_inner(txn)
    }

    fn abort_txn(&mut self, txn: TxnId) -> Result<(), OsdError> {
        self.abort_inner(txn)
    }

    fn describe(&mut self) -> Result<DeviceInfo, OsdError> {
        let unit = self.unit as u64;
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        Ok(DeviceInfo {
            unit_bytes: self.unit as u32,
            capacity_bytes: self.fml.capacity_units() * unit,
            used_bytes: valid * unit,
            placement: self.config.placement.to_string(),
        })
    }
}

impl<F: Flash> ObjectStore<F> {
    pub(super) fn remove_object(&mut self, oid: Oid) -> Result<(), OsdError> {
        self.check_writable()?;
        let lost = self.onode_unreadable(oid)?;
        // Room first, so that no checkpoint GC asks for falls between the tombstone and the
        // release of the object's units below (writing the tombstone then needs no GC): such a
        // checkpoint wrote the tombstone and committed the index with the units still in it,
        // and when the object was created again before the next checkpoint, recovery kept
        // them as the new object's (`ossd torture --reliability 1 --fill 80 --seed 51`, seed
        // 910428404600861958: a removed object's first sectors came back).
        self.make_room()?;
        // Its buffered data need never reach flash.
        self.buf.drop_object_from(oid, 0);
        // Its small-object bytes are not read: a removal needs none (their page may be lost).
        self.forget_small(oid)?;
        self.atime_journal.remove(&oid);
        self.data_keys.remove(&oid);
        if lost {
            // A blank onode stands in for the unreadable one: the tombstone replaces it before
            // any checkpoint could write it as the object's.
            self.onodes.insert(
                oid,
                CachedOnode {
                    onode: Onode::new(oid, self.now),
                    dirty: true,
                    loc: None,
                },
            );
        }
        let c = self.onode_mut(oid)?;
        c.onode.removed = true;
        c.onode.logical_length = 0;
        c.onode.used_bytes = 0;
        c.onode.inline = None;
        // The tombstone keeps no wrapped data key.
        c.onode.wrapped_key = None;
        c.dirty = true;
        // The tombstone reaches flash before the object's units are released (see truncate):
        // the tombstone, with the other onodes that may go, not the whole write buffer.
        self.write_ready_onodes()?;
        debug_assert!(
            !self.onodes.contains_key(&oid),
            "a written tombstone leaves the cache"
        );
        self.drop_units_from(oid, 0)?;
        self.placer.forget(oid);
        Ok(())
    }

    /// Whether `oid` has an onode that cannot be read: lost with a page GC could read
    /// neither copy of (finding 28), or on a damaged page. Such an object can still be
    /// removed: its tombstone replaces the onode (a tombstone keeps nothing of an onode but
    /// the object's id). NotFound if it does not exist.
    fn onode_unreadable(&mut self, oid: Oid) -> Result<bool, OsdError> {
        match self.load_onode(oid) {
            Ok(Some(_)) => Ok(false),
            Ok(None) => Err(OsdError::NotFound(format!("object {oid}"))),
            Err(OsdError::Uncorrectable { .. } | OsdError::Corrupted { .. }) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// The next object id not in use in `partition`. The counter comes from the last
    /// checkpoint, so objects created after it and rolled forward by recovery may hold the next
    /// ids: skip them (an assigned id must never be `AlreadyExists`).
    pub(super) fn free_object_id(&mut self, partition: PartitionId) -> Result<ObjectId, OsdError> {
        loop {
            let id = ObjectId(self.next_object);
            if self
                .load_onode(Oid {
                    partition,
                    object: id,
                })?
                .is_none()
            {
                return Ok(id);
            }
            self.next_object += 1;
        }
    }

    /// Checkpoints and hands the device back.
    pub fn close(mut self) -> Result<F, OsdError> {
        self.checkpoint()?;
        Ok(self.fml.into_flash())
    }

    /// Hands the device back without writing anything (what a power cut leaves).
    pub fn crash(self) -> F {
        self.fml.into_flash()
    }

    /// Marks the store unusable for writes after a failure it cannot reason about.
    pub fn poison(&mut self, why: String) {
        self.poisoned.get_or_insert(why);
    }
}
