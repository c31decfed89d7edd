//! Onodes: the cache, descriptor pages (read and written), and the space check metadata writes
//! share.

use super::*;

impl<F: Flash> ObjectStore<F> {
    /// The current onode of `oid`, loaded into the cache; `None` if the object does not exist.
    #[expect(
        clippy::unwrap_used,
        reason = "the onode was found in, or just inserted into, the cache above"
    )]
    pub(super) fn load_onode(&mut self, oid: Oid) -> Result<Option<&mut CachedOnode>, OsdError> {
        if !self.onodes.contains_key(&oid) {
            let Some(loc) = self.with_index_raw(|ix, io| ix.get(io, &onode_key(oid)))? else {
                return Ok(None);
            };
            let (vpa, slot) = split_loc(loc);
            if vpa == LOST {
                return Err(lost_page_error("onode", oid));
            }
            let onode = self.read_onode(vpa, (slot, oid))?;
            if onode.oid != oid {
                // Another descriptor page stands where the index points (a misdirected write
                // landed there): never take another object's onode for this one's.
                return Err(OsdError::Corrupted {
                    what: format!(
                        "descriptor page slot {slot} holds the onode of object {} where the index \
                         expects object {oid}",
                        onode.oid
                    ),
                    location: format!("unit {vpa}"),
                    unit: Some(vpa),
                });
            }
            self.trim_onode_cache();
            self.onodes.insert(
                oid,
                CachedOnode {
                    onode,
                    dirty: false,
                    loc: Some((vpa, slot)),
                },
            );
        }
        let c = self.onodes.get_mut(&oid).unwrap();
        Ok((!c.onode.removed).then_some(c))
    }

    /// Whether `oid`'s onode is one GC lost with its page ([`LOST`]: it read neither copy)
    /// and no newer one has replaced it. Asked without reading flash.
    pub(super) fn onode_lost(&mut self, oid: Oid) -> Result<bool, OsdError> {
        if self.onodes.contains_key(&oid) {
            return Ok(false);
        }
        let loc = self.with_index_raw(|ix, io| ix.get(io, &onode_key(oid)))?;
        Ok(loc.is_some_and(|l| split_loc(l).0 == LOST))
    }

    /// As [`Self::load_onode`], but `None` for an onode GC lost: recovery leaves such an
    /// object as it is (its reads fail) and goes on with the rest of the store, where refusing
    /// the image for it would make every other object unreachable. A newer onode rolled
    /// forward replaces it.
    pub(super) fn onode_unless_lost(
        &mut self,
        oid: Oid,
    ) -> Result<Option<&mut CachedOnode>, OsdError> {
        if self.onode_lost(oid)? {
            return Ok(None);
        }
        self.load_onode(oid)
    }

    pub(super) fn onode_mut(&mut self, oid: Oid) -> Result<&mut CachedOnode, OsdError> {
        self.load_onode(oid)?
            .ok_or_else(|| OsdError::NotFound(format!("object {oid}")))
    }

    /// The onode in `slot` of the descriptor page at `vpa`, which should be `oid`'s (a page
    /// whose slot holds another object's is tried at its copy first).
    pub(super) fn read_onode(
        &mut self,
        vpa: u32,
        (slot, oid): (u16, Oid),
    ) -> Result<Onode, OsdError> {
        let mut page = std::mem::take(&mut self.scratch);
        let r = self
            .read_desc_page(vpa, &mut page, Some((slot, oid)))
            .and_then(|onodes| {
                onodes
                    .into_iter()
                    .nth(slot as usize)
                    .ok_or_else(|| OsdError::Corrupted {
                        what: format!("descriptor page has no slot {slot}"),
                        location: format!("unit {vpa}"),
                        unit: Some(vpa),
                    })
            });
        self.scratch = page;
        r
    }

    /// The onodes of the descriptor page at `vpa`. With `owner` (slot, object), a page whose
    /// slot holds another object's onode is not the one written there, and its copy is tried.
    pub(super) fn read_desc_page(
        &mut self,
        vpa: u32,
        page: &mut [u8],
        owner: Option<(u16, Oid)>,
    ) -> Result<Vec<Onode>, OsdError> {
        self.stats.descriptor_pages_read += 1;
        let (t, content, rec) = read_meta_checked(
            &mut self.fml,
            &mut self.stats,
            (self.now, vpa),
            page,
            META_RECORD_BYTES,
            |r, page| {
                matches!(r, Record::Descriptor { .. })
                    && slot_holds(owner, |i| {
                        decode_desc_page(page).ok()?.get(i).map(|o| o.oid)
                    })
            },
        )
        .map_err(|e| e.into_osd("descriptor page", vpa))?;
        self.now = self.now.max(t);
        let bad = |what: String| OsdError::Corrupted {
            what,
            location: format!("descriptor page at unit {vpa}"),
            unit: Some(vpa),
        };
        if content != Content::Bytes || !matches!(rec, Record::Descriptor { .. }) {
            return Err(bad("not a descriptor page".into()));
        }
        decode_desc_page(page).map_err(bad)
    }

    pub(super) fn trim_onode_cache(&mut self) {
        if self.onodes.len() < self.config.onode_cache_entries {
            return;
        }
        // Drop a quarter of the clean entries (any quarter: an approximate LRU by sweeping).
        let target = self.config.onode_cache_entries * 3 / 4;
        let clean: Vec<Oid> = self
            .onodes
            .iter()
            .filter(|(_, c)| !c.dirty)
            .map(|(o, _)| *o)
            .take(self.onodes.len().saturating_sub(target))
            .collect();
        for o in clean {
            self.onodes.remove(&o);
        }
    }

    /// Writes every dirty onode into descriptor pages and points the index at them.
    pub(super) fn flush_onodes(&mut self) -> Result<(), OsdError> {
        let dirty: Vec<Oid> = self
            .onodes
            .iter()
            .filter(|(_, c)| c.dirty)
            .map(|(o, _)| *o)
            .collect();
        self.write_onodes(dirty)
    }

    /// Writes the dirty onodes whose data is all on flash: none of their units waits in the
    /// write buffer and no small-object bytes of theirs wait for a page, so none of them can put
    /// a length on flash before the data it covers. A removal's tombstone is one of them
    /// (OSCM-11 writes a removal's onode, not the whole write buffer), and so is an onode the
    /// cache evicts.
    pub(super) fn write_ready_onodes(&mut self) -> Result<(), OsdError> {
        let ready = self.ready_onodes();
        self.write_onodes(ready)
    }

    /// The dirty onodes [`Self::write_ready_onodes`] may write.
    ///
    /// A spilling object's data is in neither place for a moment: its small-object entry has
    /// left the cache and its unit 0 is not yet in the buffer while the spill's write makes
    /// room, and GC may checkpoint then. Its onode (used bytes 0) written there would end the
    /// spill and drop the entry holding its flushed bytes (`ossd torture --stack ofs --faults
    /// power-cut`, seed 10123143229783127317: a file's first 2,027 bytes read back as zeros).
    ///
    /// So is a unit on its way from the buffer to flash: `program_entry` takes it out and makes
    /// room before it programs it, and GC may checkpoint then. The onode written there (a write
    /// that grew the object past a truncated length) was durable before the unit holding the
    /// new end, whose older copy on flash still held the bytes the truncate cut off: a crash
    /// brought them back (`ossd torture --stack osd --faults all --fill 80 --reliability 1
    /// --seconds 600 --seed 54`, seed 11656297966808244311).
    pub(super) fn ready_onodes(&self) -> Vec<Oid> {
        self.onodes
            .iter()
            .filter(|&(&o, c)| c.dirty && !self.waits_for_data(o))
            .map(|(o, _)| *o)
            .collect()
    }

    /// Whether some data of `oid` is not yet where its onode may point: units in the write
    /// buffer, small-object bytes waiting for a page, a spill under way, or a unit in flight.
    fn waits_for_data(&self, oid: Oid) -> bool {
        self.buf.holds_object(oid)
            || self.smalls.get(&oid).is_some_and(|s| s.dirty)
            || self.spilling.contains(&oid)
            || self.in_flight == Some(oid)
    }

    /// The onode cache's eviction (OSCM-11 V: a cache of a fixed size, 10 KB in its
    /// experiments): once it holds `onode_cache_entries` or more and too few of them are clean
    /// to drop, the dirty onodes that may go to flash are written back so that they can be
    /// dropped. They are written in batches (more than three quarters of the cache's size):
    /// writing each as it becomes ready would write pages of one onode, and an object just
    /// created, ready at once, would be written empty only to be dirtied by its first write.
    /// Onodes whose data still waits stay, over the cache's size, until their data is written.
    /// Called between commands only: writing may run GC.
    pub(super) fn evict_onodes(&mut self) -> Result<(), OsdError> {
        let cap = self.config.onode_cache_entries;
        if self.onodes.len() < cap {
            return Ok(());
        }
        let clean = self.onodes.values().filter(|c| !c.dirty).count();
        if self.onodes.len() - clean > cap * 3 / 4 {
            let ready = self.ready_onodes();
            if ready.len() > cap * 3 / 4 {
                self.write_onodes(ready)?;
            }
        }
        self.trim_onode_cache();
        Ok(())
    }

    /// Writes the onodes `dirty` (all dirty, in the cache) into descriptor pages and points the
    /// index at them.
    #[expect(
        clippy::unwrap_used,
        reason = "the members are dirty onodes taken from the cache, which nothing evicts while they are written"
    )]
    fn write_onodes(&mut self, mut dirty: Vec<Oid>) -> Result<(), OsdError> {
        if dirty.is_empty() {
            return Ok(());
        }
        // Room for the pages first (GC, and a checkpoint GC may need, run now), then the pages
        // are written without GC in between.
        self.make_room()?;
        // GC may have written onodes (a checkpoint flushes them): keep only those still dirty.
        dirty.retain(|o| self.onodes.get(o).is_some_and(|c| c.dirty));
        dirty.sort_unstable();
        let mut page = vec![0u8; self.unit];
        let mut i = 0;
        while i < dirty.len() {
            // Pack as many as fit.
            let mut bytes = Vec::with_capacity(self.unit);
            let mut members = Vec::new();
            while i < dirty.len() {
                let c = self.onodes.get_mut(&dirty[i]).unwrap();
                c.onode.seq = self.gc.take_seq();
                let mut enc = Vec::new();
                c.onode
                    .encode(&mut enc)
                    .map_err(|e| OsdError::InvalidArgument(format!("{e:?}")))?;
                if 6 + bytes.len() + enc.len() > self.unit {
                    break;
                }
                bytes.extend_from_slice(&enc);
                members.push(dirty[i]);
                i += 1;
            }
            page.fill(0);
            page[..4].copy_from_slice(DESC_MAGIC);
            page[4..6].copy_from_slice(&(members.len() as u16).to_le_bytes());
            page[6..6 + bytes.len()].copy_from_slice(&bytes);
            let vpa = self.write_meta_unit(
                PageKind::Descriptor,
                &page,
                Record::Descriptor {
                    seq: self.gc.seq + 1,
                },
            )?;
            self.stats.descriptor_pages_written += 1;
            let mut live = Vec::with_capacity(members.len());
            let mut has_tombstone = false;
            for (slot, oid) in members.iter().enumerate() {
                let c = self.onodes.get_mut(oid).unwrap();
                c.dirty = false;
                let old = c.loc.take();
                if c.onode.removed {
                    has_tombstone = true;
                    live.push(None);
                    self.onodes.remove(oid);
                    self.with_index_raw(|ix, io| ix.remove(io, &onode_key(*oid)))?;
                } else {
                    c.loc = Some((vpa, slot as u16));
                    live.push(Some(*oid));
                    let loc = slot_loc(vpa, slot as u16);
                    self.with_index_raw(|ix, io| ix.insert(io, onode_key(*oid), loc))?;
                }
                if let Some((ov, os)) = old {
                    self.release_slot(ov, os);
                }
                // An onode written after a spill no longer counts on the small-object entry
                // (its data is all on flash, or was truncated or removed).
                self.end_spill(*oid)?;
            }
            self.pinned_desc_pages += has_tombstone as usize;
            self.desc.insert(
                vpa,
                DescPage {
                    live,
                    pinned: has_tombstone,
                },
            );
        }
        Ok(())
    }

    /// A descriptor slot no longer holds a current onode.
    pub(super) fn release_slot(&mut self, vpa: u32, slot: u16) {
        release_slot_in(&mut self.desc, &mut self.released, vpa, slot);
    }

    /// Writes a metadata unit (descriptor page or checkpoint) into its stream; the caller made
    /// room first.
    pub(super) fn write_meta_unit(
        &mut self,
        kind: PageKind,
        page: &[u8],
        rec: Record,
    ) -> Result<u32, OsdError> {
        let stream = self.placer.choose(&Hint {
            kind,
            oid: Oid::default(),
            object_bytes: 0,
            write_count: 0,
            priority: 0,
        });
        let rec = rec.with_seq(self.gc.take_seq());
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let n = rec.encode(payload_crc(Payload::Bytes(page)), &mut oob);
        // Metadata describes data already on flash: it waits for the data programs.
        self.now = self.now();
        let (v, t) = match program_meta(
            &mut self.fml,
            &mut self.stats,
            self.copies,
            (self.now, stream),
            page,
            &oob[..n],
        ) {
            Ok(x) => x,
            Err(FmlError::NoSpace { .. }) => return Err(self.no_space(self.unit as u64)),
            Err(e) => return Err(fml_err(e)),
        };
        self.now = self.now.max(t);
        Ok(v.0)
    }

    /// A no-space error saying how much is left: the units the FML can still hold valid.
    pub(super) fn no_space(&self, needed_bytes: u64) -> OsdError {
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        let free_units = self.fml.capacity_units().saturating_sub(valid);
        OsdError::NoSpace {
            needed_bytes,
            free_bytes: free_units * self.unit as u64,
        }
    }
}

/// The onodes of a descriptor page image (untrusted bytes: an error says what is wrong).
pub(super) fn decode_desc_page(page: &[u8]) -> Result<Vec<Onode>, String> {
    if page.get(..4) != Some(&DESC_MAGIC[..]) || page.len() < 6 {
        return Err("not a descriptor page".into());
    }
    let count = u16::from_le_bytes([page[4], page[5]]) as usize;
    let mut at = 6;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let rest = page.get(at..).unwrap_or(&[]);
        let (o, used) = Onode::decode(rest).map_err(|e| format!("{e:?}"))?;
        out.push(o);
        at += used;
    }
    Ok(out)
}
