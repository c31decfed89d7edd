//! The oracle: what every 512-byte sector of every slot may hold, now and after a crash.
//!
//! Writes are self-verifying (the STYLE brief's habit): each sector written carries a *version*
//! and bytes derived from (slot, sector, version), so a read names the version it found, or
//! proves the bytes were never written to that sector. Version 0 is the all-zero sector (never
//! written, trimmed, or a hole in an object).

/// Bytes of a sector: the unit of the oracle's bookkeeping.
pub const SECTOR: usize = 512;

fn mix(mut x: u64) -> u64 {
    // splitmix64's finalizer.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn key(slot: u32, sector: u32) -> u64 {
    mix((slot as u64) << 32 | sector as u64)
}

/// Fills `out` (one sector) with the bytes of `version` at (slot, sector).
pub fn fill(slot: u32, sector: u32, version: u64, out: &mut [u8]) {
    if version == 0 {
        out.fill(0);
        return;
    }
    let k = key(slot, sector);
    for (i, w) in out.chunks_mut(8).enumerate() {
        let x = if i == 0 {
            version ^ k
        } else {
            mix(version ^ k.rotate_left(i as u32))
        };
        w.copy_from_slice(&x.to_le_bytes());
    }
}

/// The version a sector's bytes hold at (slot, sector), or `None` if they are no version ever
/// written there (torn, misplaced, or invented bytes).
pub fn decode(slot: u32, sector: u32, bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let head = bytes.first_chunk::<8>()?;
    let v = u64::from_le_bytes(*head) ^ key(slot, sector);
    let mut expect = [0u8; SECTOR];
    fill(slot, sector, v, &mut expect);
    (v != 0 && expect[..] == *bytes).then_some(v)
}

#[derive(Clone, Debug)]
struct Sector {
    /// The current version; `None` once a read of it failed after a destructive fault.
    cur: Option<u64>,
    /// The version at the last completed flush, and every version since.
    since_flush: Vec<u64>,
    /// Every version since the last checkpoint (an FTL TRIM is durable only at a checkpoint).
    since_ckpt: Vec<u64>,
    /// Trimmed since the last checkpoint, and no write after the trim flushed yet.
    trimmed: bool,
    /// Every version ever written (for sectors whose data a destructive fault made unknown).
    ever: Vec<u64>,
}

impl Sector {
    fn new() -> Self {
        Sector {
            cur: Some(0),
            since_flush: vec![0],
            since_ckpt: vec![0],
            trimmed: false,
            ever: vec![0],
        }
    }
    fn set(&mut self, v: u64) {
        self.cur = Some(v);
        self.since_flush.push(v);
        self.since_ckpt.push(v);
        self.ever.push(v);
    }
}

#[derive(Clone, Debug)]
struct Slot {
    sectors: Vec<Sector>,
    /// Length in sectors (objects end; a block range does not, but the append offset uses it).
    len: u32,
    exists: bool,
    /// Existed at the last flush and was not removed since: must exist after a crash.
    must_exist: bool,
}

/// What a check found wrong with one sector or slot. Versions are the oracle's numbers of the
/// writes (0: never written).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// A read returned bytes no write put there.
    #[error("slot {slot} sector {sector}: read returned bytes never written there")]
    ReadGarbage {
        /// The slot.
        slot: u32,
        /// The sector.
        sector: u32,
    },
    /// A read returned another version than the current one.
    #[error("slot {slot} sector {sector}: read version {read}, expected {expected}")]
    ReadStale {
        /// The slot.
        slot: u32,
        /// The sector.
        sector: u32,
        /// The version read.
        read: u64,
        /// The current version.
        expected: u64,
    },
    /// After a destructive fault, a read returned a version never written to the sector.
    #[error("slot {slot} sector {sector}: read version {read}, never written there")]
    ReadForeign {
        /// The slot.
        slot: u32,
        /// The sector.
        sector: u32,
        /// The version read.
        read: u64,
    },
    /// An object that must exist after recovery is gone.
    #[error("slot {slot}: the object vanished")]
    Vanished {
        /// The slot.
        slot: u32,
    },
    /// Recovery brought back bytes no write put there.
    #[error("slot {slot} sector {sector}: recovered bytes never written there")]
    RecoveredGarbage {
        /// The slot.
        slot: u32,
        /// The sector.
        sector: u32,
    },
    /// Recovery brought back a version the durability rules do not allow.
    #[error(
        "slot {slot} sector {sector}: recovered version {recovered}, allowed {allowed:?}{}",
        .since_checkpoint.as_ref().map_or(String::new(), |c| format!(" or since the checkpoint {c:?}"))
    )]
    RecoveredVersion {
        /// The slot.
        slot: u32,
        /// The sector.
        sector: u32,
        /// The version recovered.
        recovered: u64,
        /// The versions allowed: since the last flush (or every version ever written, when
        /// the current one is unknown).
        allowed: Vec<u64>,
        /// When the sector was trimmed since the last checkpoint, the versions since that
        /// checkpoint, which are allowed too.
        since_checkpoint: Option<Vec<u64>>,
    },
}

/// The expected state of every slot: per sector, the versions a read may return now and the
/// versions a recovery may bring back after a crash, a clean shutdown or a destructive fault.
pub struct Oracle {
    slots: Vec<Slot>,
    sectors_per_slot: u32,
    /// Discards are durable at the next flush (objects) or only at a checkpoint (FTL TRIM).
    discard_durable_at_flush: bool,
    next_version: u64,
}

impl Oracle {
    /// `slots` empty slots of `sectors_per_slot` sectors each. With `discard_durable_at_flush`
    /// (objects) a slot does not exist until written; otherwise (a block range) every slot
    /// exists from the start and a discard is durable only at a checkpoint.
    pub fn new(slots: u32, sectors_per_slot: u32, discard_durable_at_flush: bool) -> Self {
        let slot = Slot {
            sectors: vec![Sector::new(); sectors_per_slot as usize],
            len: 0,
            exists: !discard_durable_at_flush,
            must_exist: false,
        };
        Oracle {
            slots: vec![slot; slots as usize],
            sectors_per_slot,
            discard_durable_at_flush,
            next_version: 1,
        }
    }

    /// How many slots the oracle tracks.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }
    /// Sectors each slot spans (its most, in 512-byte [`SECTOR`]s).
    pub fn sectors_per_slot(&self) -> u32 {
        self.sectors_per_slot
    }
    /// The slot's length in sectors (0 after a discard).
    pub fn len(&self, slot: u32) -> u32 {
        self.slots[slot as usize].len
    }

    /// Records a write of `count` sectors from `first` and returns its bytes. Recorded before
    /// the stack runs it: a write cut short may have reached flash in part.
    pub fn write(&mut self, slot: u32, first: u32, count: u32) -> Vec<u8> {
        let mut data = vec![0u8; count as usize * SECTOR];
        let s = &mut self.slots[slot as usize];
        for i in 0..count {
            let v = self.next_version;
            self.next_version += 1;
            let sector = first + i;
            fill(
                slot,
                sector,
                v,
                &mut data[i as usize * SECTOR..(i as usize + 1) * SECTOR],
            );
            s.sectors[sector as usize].set(v);
        }
        s.len = s.len.max(first + count);
        s.exists = true;
        data
    }

    /// Records a discard: an object REMOVE, or a TRIM of the slot's whole range.
    pub fn discard(&mut self, slot: u32) {
        let at_flush = self.discard_durable_at_flush;
        let s = &mut self.slots[slot as usize];
        for sec in &mut s.sectors {
            sec.set(0);
            if !at_flush {
                sec.trimmed = true;
            }
        }
        s.len = 0;
        if at_flush {
            s.exists = false;
            s.must_exist = false;
        }
    }

    /// A flush completed: everything written before it is durable.
    pub fn flush(&mut self) {
        for s in &mut self.slots {
            for sec in &mut s.sectors {
                if let Some(cur) = sec.cur {
                    sec.since_flush.clear();
                    sec.since_flush.push(cur);
                    // A flushed write after a trim is newer than every copy the trim left.
                    if cur != 0 {
                        sec.trimmed = false;
                    }
                }
            }
            s.must_exist = s.exists;
        }
    }

    /// A checkpoint completed (clean close): discards are durable too.
    pub fn checkpoint(&mut self) {
        self.flush();
        for s in &mut self.slots {
            for sec in &mut s.sectors {
                if let Some(cur) = sec.cur {
                    sec.since_ckpt.clear();
                    sec.since_ckpt.push(cur);
                    sec.trimmed = false;
                }
            }
        }
    }

    /// Checks sectors read while the stack ran (no crash since): each must hold its current
    /// version exactly. `got` holds `returned` bytes from sector `first`; sectors past them
    /// read as zero (past an object's end).
    pub fn check_read(
        &mut self,
        slot: u32,
        first: u32,
        count: u32,
        got: &[u8],
        returned: usize,
    ) -> Result<(), Mismatch> {
        for i in 0..count {
            let sector = first + i;
            let bytes = sector_bytes(got, i, returned);
            let found = decode(slot, sector, bytes);
            let sec = &mut self.slots[slot as usize].sectors[sector as usize];
            match (sec.cur, found) {
                (_, None) => return Err(Mismatch::ReadGarbage { slot, sector }),
                (Some(cur), Some(v)) if cur == v => {}
                (Some(cur), Some(v)) => {
                    return Err(Mismatch::ReadStale {
                        slot,
                        sector,
                        read: v,
                        expected: cur,
                    })
                }
                // Unknown since a destructive fault: anything once written there will do, and
                // is what the sector holds from now on.
                (None, Some(v)) if sec.ever.contains(&v) => sec.cur = Some(v),
                (None, Some(v)) => {
                    return Err(Mismatch::ReadForeign {
                        slot,
                        sector,
                        read: v,
                    })
                }
            }
        }
        Ok(())
    }

    /// A read failed after a destructive fault: the sectors' contents are now unknown.
    pub fn mark_unknown(&mut self, slot: u32, first: u32, count: u32) {
        for sec in &mut self.slots[slot as usize].sectors[first as usize..(first + count) as usize]
        {
            sec.cur = None;
        }
    }

    /// Whether the slot must exist after a crash.
    pub fn must_exist(&self, slot: u32) -> bool {
        self.slots[slot as usize].must_exist
    }

    /// Checks a whole slot after recovery and makes what it holds the new truth. `got` is
    /// `None` for a missing object, else its bytes (`returned` of them valid); `clean` after a
    /// clean shutdown, where everything must be exactly current. `damaged` after a destructive
    /// fault: then only the rule against invented bytes holds (any version ever written to a
    /// sector, or an object gone), because the record naming a newer copy may be what was
    /// destroyed.
    pub fn check_recovered(
        &mut self,
        slot: u32,
        got: Option<(&[u8], usize)>,
        clean: bool,
        damaged: bool,
    ) -> Result<(), Mismatch> {
        let sectors = self.sectors_per_slot;
        let s = &mut self.slots[slot as usize];
        if got.is_none() && !damaged && (s.must_exist || (clean && s.exists)) {
            return Err(Mismatch::Vanished { slot });
        }
        let mut first_err = None;
        for sector in 0..sectors {
            let found = match got {
                None => Some(0),
                Some((bytes, returned)) => {
                    decode(slot, sector, sector_bytes(bytes, sector, returned))
                }
            };
            let sec = &mut s.sectors[sector as usize];
            let Some(v) = found else {
                first_err.get_or_insert(Mismatch::RecoveredGarbage { slot, sector });
                continue;
            };
            let ok = match sec.cur {
                _ if damaged => sec.ever.contains(&v),
                None => sec.ever.contains(&v),
                Some(cur) if clean => v == cur,
                Some(_) => {
                    sec.since_flush.contains(&v) || (sec.trimmed && sec.since_ckpt.contains(&v))
                }
            };
            if !ok {
                first_err.get_or_insert_with(|| Mismatch::RecoveredVersion {
                    slot,
                    sector,
                    recovered: v,
                    allowed: sec.cur.map_or(&sec.ever, |_| &sec.since_flush).clone(),
                    since_checkpoint: sec.trimmed.then(|| sec.since_ckpt.clone()),
                });
            }
            sec.cur = Some(v);
            sec.since_flush.clear();
            sec.since_flush.push(v);
            sec.since_ckpt.push(v);
        }
        s.exists = got.is_some() || !self.discard_durable_at_flush;
        s.must_exist = s.exists;
        s.len = match got {
            None => 0,
            Some((_, returned)) => returned.div_ceil(SECTOR) as u32,
        };
        first_err.map_or(Ok(()), Err)
    }

    /// After recovery of a slot whose read failed (a destructive fault): unknown contents.
    pub fn recovered_unknown(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        for sec in &mut s.sectors {
            sec.cur = None;
        }
        s.must_exist = false;
    }
}

/// Sector `i` of a read buffer of which `returned` bytes are valid (the rest reads as zero).
fn sector_bytes(buf: &[u8], i: u32, returned: usize) -> &[u8] {
    const ZERO: [u8; SECTOR] = [0; SECTOR];
    let at = i as usize * SECTOR;
    if at + SECTOR <= returned {
        &buf[at..at + SECTOR]
    } else {
        &ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_and_misplaced_bytes_are_caught() {
        let mut b = [0u8; SECTOR];
        fill(3, 7, 42, &mut b);
        assert_eq!(decode(3, 7, &b), Some(42));
        assert_eq!(decode(3, 8, &b), None, "another sector's bytes");
        assert_eq!(decode(4, 7, &b), None, "another slot's bytes");
        b[100] ^= 1;
        assert_eq!(decode(3, 7, &b), None, "a flipped bit");
        assert_eq!(decode(0, 0, &[0; SECTOR]), Some(0));
    }

    #[test]
    fn crash_allows_flushed_or_later_versions_only() {
        let mut o = Oracle::new(1, 4, true);
        let d1 = o.write(0, 0, 2);
        o.flush();
        let d2 = o.write(0, 0, 1);
        let mut img = d1.clone();
        img[..SECTOR].copy_from_slice(&d2[..SECTOR]);
        img.resize(4 * SECTOR, 0);
        assert!(o
            .check_recovered(0, Some((&img, 2 * SECTOR)), false, false)
            .is_ok());
        // Losing a flushed sector is caught.
        let mut o = Oracle::new(1, 4, true);
        o.write(0, 0, 2);
        o.flush();
        let e = o
            .check_recovered(0, Some((&d1, SECTOR)), false, false)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Mismatch::RecoveredVersion {
                    slot: 0,
                    sector: 1,
                    ..
                }
            ),
            "{e}"
        );
        // So is a vanished object.
        let mut o = Oracle::new(1, 4, true);
        o.write(0, 0, 1);
        o.flush();
        assert_eq!(
            o.check_recovered(0, None, false, false),
            Err(Mismatch::Vanished { slot: 0 })
        );
    }
}
