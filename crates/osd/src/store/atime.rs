//! Access times (OSCM-11 IV): journaled in atime pages under `split+atime`, merged into onodes.

use super::*;

impl<F: Flash> ObjectStore<F> {
    /// A read of `oid`: its access time becomes now, journaled under `split+atime`, in the
    /// onode otherwise.
    pub(super) fn touch(&mut self, oid: Oid) -> Result<(), OsdError> {
        if !self.config.atime {
            return Ok(());
        }
        let now = self.now;
        if self.config.placement == Placement::SplitAtime {
            self.atime_pending.push((oid, now));
            self.atime_journal.insert(oid, now);
            if self.atime_pending.len() >= self.unit / ATIME_ENTRY_BYTES - 1 {
                self.write_atime_page()?;
            }
            return Ok(());
        }
        let c = self.onode_mut(oid)?;
        c.onode.accessed_ns = now;
        c.dirty = true;
        // A read ends here: dirty onodes past the cache's size go back to flash.
        self.evict_onodes()
    }

    /// Writes the pending journal entries as one atime page (24-byte entries: object id and
    /// time), and merges the journal into the onodes once enough pages are on flash.
    pub(super) fn write_atime_page(&mut self) -> Result<(), OsdError> {
        if self.atime_pending.is_empty() {
            return Ok(());
        }
        self.make_room()?;
        let mut page = vec![0u8; self.unit];
        page[..4].copy_from_slice(ATIME_MAGIC);
        let n = self
            .atime_pending
            .len()
            .min(self.unit / ATIME_ENTRY_BYTES - 1);
        page[4..8].copy_from_slice(&(n as u32).to_le_bytes());
        for (i, (oid, t)) in self.atime_pending.drain(..n).enumerate() {
            let at = ATIME_ENTRY_BYTES * (i + 1);
            page[at..at + 16].copy_from_slice(&oid.as_u128().to_le_bytes());
            page[at + 16..at + 24].copy_from_slice(&t.to_le_bytes());
        }
        let v = self.write_meta_unit(PageKind::Atime, &page, Record::Atime { seq: 0 })?;
        self.stats.atime_pages_written += 1;
        self.atime_pages.push(v);
        if self.atime_pages.len() >= self.config.atime_merge_pages {
            self.merge_atimes()?;
        }
        Ok(())
    }

    /// Merges every journaled access time into its onode; the atime pages are released once
    /// the onodes are durable (at the next checkpoint).
    pub(super) fn merge_atimes(&mut self) -> Result<(), OsdError> {
        let journal = std::mem::take(&mut self.atime_journal);
        for (oid, t) in journal {
            self.merge_atime_into(oid, t)?;
        }
        self.atime_pending.clear();
        let pages = std::mem::take(&mut self.atime_pages);
        self.released.extend(pages);
        Ok(())
    }

    pub(super) fn merge_atime_into(&mut self, oid: Oid, t: u64) -> Result<(), OsdError> {
        if let Some(c) = self.onode_unless_lost(oid)? {
            if t > c.onode.accessed_ns {
                c.onode.accessed_ns = t;
                c.dirty = true;
            }
        }
        Ok(())
    }

    /// The entries of an atime page.
    pub(super) fn read_atime_page(&mut self, vpa: u32) -> Result<Vec<(Oid, u64)>, OsdError> {
        let mut page = vec![0u8; self.unit];
        let (t, content, rec) = read_meta_checked(
            &mut self.fml,
            &mut self.stats,
            (self.now, vpa),
            &mut page,
            META_RECORD_BYTES,
            |r, _| matches!(r, Record::Atime { .. }),
        )
        .map_err(|e| e.into_osd("atime page", vpa))?;
        self.now = self.now.max(t);
        let n = u32::from_le_bytes([page[4], page[5], page[6], page[7]]) as usize;
        if content != Content::Bytes
            || !matches!(rec, Record::Atime { .. })
            || &page[..4] != ATIME_MAGIC
            || n.saturating_add(1).saturating_mul(ATIME_ENTRY_BYTES) > self.unit
        {
            return Err(OsdError::Corrupted {
                what: "atime page".into(),
                location: format!("unit {vpa}"),
                unit: Some(vpa),
            });
        }
        Ok((1..=n)
            .map(|i| {
                let at = ATIME_ENTRY_BYTES * i;
                let mut oid = [0u8; 16];
                oid.copy_from_slice(&page[at..at + 16]);
                let mut t = [0u8; 8];
                t.copy_from_slice(&page[at + 16..at + 24]);
                (
                    Oid::from_u128(u128::from_le_bytes(oid)),
                    u64::from_le_bytes(t),
                )
            })
            .collect())
    }
}
