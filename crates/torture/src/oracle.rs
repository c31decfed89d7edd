//! The oracle: what every 512-byte sector of every slot may hold, and (on objects) what each
//! object's existence, length and attributes may be, now and after a crash.
//!
//! Writes are self-verifying (the STYLE brief's habit): each sector written carries a *version*
//! and bytes derived from (slot, sector, version), so a read names the version it found, or
//! proves the bytes were never written to that sector. Version 0 is the all-zero sector (never
//! written, trimmed, or a hole in an object). A write of part of a sector (byte-granular writes,
//! a truncation inside a sector) makes a version too, whose bytes are the new ones over the range
//! written and the sector's previous version elsewhere: a read is then compared against the
//! bytes of the versions allowed.
//!
//! Object metadata is versioned the same way: per slot, whether it exists, its length in bytes
//! and each tracked attribute keep their current value and every value since the last flush; a
//! recovery must bring back one of those (exactly the current one after a clean shutdown).

/// Bytes of a sector: the unit of the oracle's bookkeeping.
pub const SECTOR: usize = 512;

/// User attributes the oracle tracks per object: `Attr::User(FIRST_ATTR + i)` for `i` below.
pub const ATTRS: usize = 3;
/// The id of the first tracked user attribute.
pub const FIRST_ATTR: u16 = 0x1000;

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
/// written there whole (torn, misplaced, invented bytes, or a partial write's).
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

/// How a version's bytes are made: `fill(version)` (or zeros) over `lo..hi`, the bytes of the
/// version `base` elsewhere. A whole-sector write is `0..SECTOR` (no base).
#[derive(Clone, Copy, Debug)]
struct Recipe {
    lo: u16,
    hi: u16,
    zero: bool,
    base: u64,
}

impl Recipe {
    fn whole(&self) -> bool {
        self.lo == 0 && self.hi as usize == SECTOR && !self.zero
    }
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

/// A piece of metadata with its current value and every value since the last flush.
#[derive(Clone, Debug)]
struct Versioned<T> {
    cur: T,
    since_flush: Vec<T>,
    ever: Vec<T>,
}

impl<T: Clone + PartialEq> Versioned<T> {
    fn new(v: T) -> Self {
        Versioned {
            cur: v.clone(),
            since_flush: vec![v.clone()],
            ever: vec![v],
        }
    }
    fn set(&mut self, v: T) {
        if !self.since_flush.contains(&v) {
            self.since_flush.push(v.clone());
        }
        if !self.ever.contains(&v) {
            self.ever.push(v.clone());
        }
        self.cur = v;
    }
    fn flush(&mut self) {
        self.since_flush.clear();
        self.since_flush.push(self.cur.clone());
    }
    /// What a recovery found becomes the truth.
    fn settle(&mut self, v: T) {
        if !self.ever.contains(&v) {
            self.ever.push(v.clone());
        }
        self.since_flush.clear();
        self.since_flush.push(v.clone());
        self.cur = v;
    }
    /// Whether a recovery may bring back `v`: exactly the current value after a clean
    /// shutdown, any value since the last flush after a crash, any value ever after damage.
    fn allows(&self, v: &T, clean: bool, damaged: bool) -> bool {
        if damaged {
            self.ever.contains(v)
        } else if clean {
            self.cur == *v
        } else {
            self.since_flush.contains(v)
        }
    }
    fn allowed(&self, clean: bool) -> Vec<T> {
        if clean {
            vec![self.cur.clone()]
        } else {
            self.since_flush.clone()
        }
    }
}

#[derive(Clone, Debug)]
struct Slot {
    sectors: Vec<Sector>,
    /// Length in bytes (objects end; a block range does not, but the append offset uses it).
    len: Versioned<u64>,
    exists: Versioned<bool>,
    /// Tracked user attributes (`None`: not set).
    attrs: Vec<Versioned<Option<Vec<u8>>>>,
    /// False after a failed read after a destructive fault: the slot's metadata is unknown
    /// until the next recovery check.
    known: bool,
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
    /// A read returned another number of bytes than the object's length leaves from there.
    #[error("slot {slot}: a read at byte {offset} returned {read} bytes, expected {expected} (length {len})")]
    ReadLength {
        /// The slot.
        slot: u32,
        /// Where the read started, in bytes.
        offset: u64,
        /// Bytes returned.
        read: usize,
        /// Bytes the object holds from there (within the read).
        expected: usize,
        /// The object's length.
        len: u64,
    },
    /// An object that must exist after recovery is gone.
    #[error("slot {slot}: the object vanished")]
    Vanished {
        /// The slot.
        slot: u32,
    },
    /// An object came back that did not exist at the last flush and that no command since
    /// created (a durable remove undone), or exists after a clean shutdown that removed it.
    #[error("slot {slot}: the object came back ({len} bytes) though it was removed durably")]
    Resurrected {
        /// The slot.
        slot: u32,
        /// Its length.
        len: u64,
    },
    /// Recovery brought back a length the durability rules do not allow.
    #[error("slot {slot}: recovered length {len}, allowed {allowed:?} (or a write unit boundary between them)")]
    RecoveredLength {
        /// The slot.
        slot: u32,
        /// The length recovered.
        len: u64,
        /// The lengths allowed.
        allowed: Vec<u64>,
    },
    /// The object's length attribute and the bytes a read of it returns disagree.
    #[error(
        "slot {slot}: length attribute {len}, but a read of the whole object returned {read} bytes"
    )]
    LengthDisagrees {
        /// The slot.
        slot: u32,
        /// The length attribute.
        len: u64,
        /// Bytes read.
        read: usize,
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
    /// An attribute read while the stack ran is not its current value.
    #[error("slot {slot} attribute {attr:#x}: read {got:?}, expected {expected:?}")]
    Attr {
        /// The slot.
        slot: u32,
        /// The attribute id.
        attr: u16,
        /// The value read (`None`: not set).
        got: Option<Vec<u8>>,
        /// The current value.
        expected: Option<Vec<u8>>,
    },
    /// Recovery brought back an attribute value the durability rules do not allow.
    #[error("slot {slot} attribute {attr:#x}: recovered {got:?}, allowed {allowed:?}")]
    RecoveredAttr {
        /// The slot.
        slot: u32,
        /// The attribute id.
        attr: u16,
        /// The value recovered.
        got: Option<Vec<u8>>,
        /// The values allowed.
        allowed: Vec<Option<Vec<u8>>>,
    },
    /// A listing of the objects differs from the oracle's.
    #[error("list returned slots {listed:?}, expected {expected:?}")]
    List {
        /// Slots listed.
        listed: Vec<u32>,
        /// Slots that exist.
        expected: Vec<u32>,
    },
    /// The second partition's presence is not what it may be.
    #[error("the second partition is {}, allowed {allowed:?}", if *.present { "present" } else { "absent" })]
    Partition {
        /// Whether it is listed.
        present: bool,
        /// The presences allowed.
        allowed: Vec<bool>,
    },
}

/// The expected state of every slot: per sector, the versions a read may return now and the
/// versions a recovery may bring back after a crash, a clean shutdown or a destructive fault;
/// per object, its existence, length and attributes likewise.
pub struct Oracle {
    slots: Vec<Slot>,
    sectors_per_slot: u32,
    /// Discards are durable at the next flush (objects) or only at a checkpoint (FTL TRIM).
    discard_durable_at_flush: bool,
    next_version: u64,
    /// How every version's bytes are made (index: version; 0 is the zero sector).
    recipes: Vec<Recipe>,
    /// A write that extended an object and landed in part leaves its length at a boundary of
    /// this many bytes (the stack's write unit: roll-forward extends a length unit by unit).
    unit_bytes: u64,
    /// Whether the second partition exists (objects only).
    partition: Versioned<bool>,
    next_attr: u64,
}

impl Oracle {
    /// `slots` empty slots of `sectors_per_slot` sectors each. With `discard_durable_at_flush`
    /// (objects) a slot does not exist until written; otherwise (a block range) every slot
    /// exists from the start and a discard is durable only at a checkpoint.
    pub fn new(slots: u32, sectors_per_slot: u32, discard_durable_at_flush: bool) -> Self {
        let slot = Slot {
            sectors: vec![Sector::new(); sectors_per_slot as usize],
            len: Versioned::new(0),
            exists: Versioned::new(!discard_durable_at_flush),
            attrs: vec![Versioned::new(None); ATTRS],
            known: true,
        };
        Oracle {
            slots: vec![slot; slots as usize],
            sectors_per_slot,
            discard_durable_at_flush,
            next_version: 1,
            recipes: vec![Recipe {
                lo: 0,
                hi: SECTOR as u16,
                zero: true,
                base: 0,
            }],
            unit_bytes: 4096,
            partition: Versioned::new(false),
            next_attr: 0,
        }
    }

    /// Sets the stack's write unit (default 4 KiB): see [`Mismatch::RecoveredLength`].
    pub fn set_unit_bytes(&mut self, unit_bytes: u64) {
        self.unit_bytes = unit_bytes.max(1);
    }

    /// How many slots the oracle tracks.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }
    /// Sectors each slot spans (its most, in 512-byte [`SECTOR`]s).
    pub fn sectors_per_slot(&self) -> u32 {
        self.sectors_per_slot
    }
    /// The slot's length in sectors, rounded up (0 after a discard).
    pub fn len(&self, slot: u32) -> u32 {
        self.slots[slot as usize].len.cur.div_ceil(SECTOR as u64) as u32
    }
    /// The slot's length in bytes.
    pub fn len_bytes(&self, slot: u32) -> u64 {
        self.slots[slot as usize].len.cur
    }
    /// Whether the object exists now (always on a block range), as far as the oracle knows.
    pub fn exists(&self, slot: u32) -> bool {
        self.slots[slot as usize].exists.cur
    }
    /// Whether the slot's metadata is known (not after a failed read after damage).
    pub fn known(&self, slot: u32) -> bool {
        self.slots[slot as usize].known
    }

    fn new_version(&mut self, recipe: Recipe) -> u64 {
        let v = self.next_version;
        self.next_version += 1;
        debug_assert_eq!(self.recipes.len() as u64, v);
        self.recipes.push(recipe);
        v
    }

    /// The bytes of `version` at (slot, sector).
    fn content(&self, slot: u32, sector: u32, version: u64) -> [u8; SECTOR] {
        let mut chain = Vec::new();
        let mut v = version;
        while v != 0 {
            chain.push(v);
            let r = self.recipes[v as usize];
            if r.whole() || (r.zero && r.lo == 0 && r.hi as usize == SECTOR) {
                break;
            }
            v = r.base;
        }
        let mut out = [0u8; SECTOR];
        let mut f = [0u8; SECTOR];
        for &v in chain.iter().rev() {
            let r = self.recipes[v as usize];
            let (lo, hi) = (r.lo as usize, r.hi as usize);
            if r.zero {
                out[lo..hi].fill(0);
            } else {
                fill(slot, sector, v, &mut f);
                out[lo..hi].copy_from_slice(&f[lo..hi]);
            }
        }
        out
    }

    /// The first of `candidates` whose bytes match `bytes` over their first `valid` bytes (the
    /// rest lies past the object's end).
    fn identify(
        &self,
        slot: u32,
        sector: u32,
        bytes: &[u8],
        valid: usize,
        candidates: &[u64],
    ) -> Option<u64> {
        if valid == SECTOR {
            if let Some(v) = decode(slot, sector, bytes) {
                if candidates.contains(&v) && (v == 0 || self.recipes[v as usize].whole()) {
                    return Some(v);
                }
            }
        }
        candidates
            .iter()
            .copied()
            .find(|&c| self.content(slot, sector, c)[..valid] == bytes[..valid])
    }

    /// For a sector whose bytes and whose object's length were both unknown (after damage): the
    /// first of `candidates` that `bytes` hold up to their last non-zero byte (within `valid`),
    /// zeros after it, and that byte's end. The object may have come back from a recovery
    /// the oracle could not read with any length it ever had, ending inside the sector, and a
    /// growth since zeroed the sector from there.
    fn identify_cut(
        &self,
        slot: u32,
        sector: u32,
        bytes: &[u8],
        valid: usize,
        candidates: &[u64],
    ) -> Option<(u64, usize)> {
        let cut = bytes[..valid]
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |i| i + 1);
        candidates
            .iter()
            .copied()
            .find(|&c| self.content(slot, sector, c)[..cut] == bytes[..cut])
            .map(|v| (v, cut))
    }

    /// Records a write of `count` sectors from `first` and returns its bytes. Recorded before
    /// the stack runs it: a write cut short may have reached flash in part.
    pub fn write(&mut self, slot: u32, first: u32, count: u32) -> Vec<u8> {
        let mut data = vec![0u8; count as usize * SECTOR];
        for i in 0..count {
            let v = self.new_version(Recipe {
                lo: 0,
                hi: SECTOR as u16,
                zero: false,
                base: 0,
            });
            let sector = first + i;
            fill(
                slot,
                sector,
                v,
                &mut data[i as usize * SECTOR..(i as usize + 1) * SECTOR],
            );
            self.slots[slot as usize].sectors[sector as usize].set(v);
        }
        let s = &mut self.slots[slot as usize];
        let end = (first + count) as u64 * SECTOR as u64;
        if end > s.len.cur {
            s.len.set(end);
        }
        s.exists.set(true);
        data
    }

    /// Whether a write of `len` bytes at `offset` can be recorded: the sectors it covers only in
    /// part must have known contents (their other bytes stay).
    pub fn can_write_bytes(&self, slot: u32, offset: u64, len: u64) -> bool {
        let s = &self.slots[slot as usize];
        let edge = |b: u64| {
            let sec = (b / SECTOR as u64) as usize;
            b.is_multiple_of(SECTOR as u64) || s.sectors.get(sec).is_some_and(|x| x.cur.is_some())
        };
        len > 0
            && offset + len <= self.sectors_per_slot as u64 * SECTOR as u64
            && edge(offset)
            && edge(offset + len)
    }

    /// Records a write of `len` bytes at byte `offset` (any alignment; see
    /// [`Oracle::can_write_bytes`]) and returns its bytes.
    pub fn write_bytes(&mut self, slot: u32, offset: u64, len: u64) -> Vec<u8> {
        let mut data = Vec::with_capacity(len as usize);
        let end = offset + len;
        let mut at = offset;
        let mut f = [0u8; SECTOR];
        while at < end {
            let sector = (at / SECTOR as u64) as u32;
            let lo = (at % SECTOR as u64) as usize;
            let hi = (end - sector as u64 * SECTOR as u64).min(SECTOR as u64) as usize;
            let base = self.slots[slot as usize].sectors[sector as usize]
                .cur
                .unwrap_or(0);
            let v = self.new_version(Recipe {
                lo: lo as u16,
                hi: hi as u16,
                zero: false,
                base: if lo == 0 && hi == SECTOR { 0 } else { base },
            });
            fill(slot, sector, v, &mut f);
            data.extend_from_slice(&f[lo..hi]);
            self.slots[slot as usize].sectors[sector as usize].set(v);
            at = sector as u64 * SECTOR as u64 + hi as u64;
        }
        let s = &mut self.slots[slot as usize];
        if end > s.len.cur {
            s.len.set(end);
        }
        s.exists.set(true);
        data
    }

    /// Zeroes the bytes of every sector from byte `from` up to `to` (a shrink or a recovered
    /// end): the truncated tail of a sector gets a version of its own.
    fn zero_from(&mut self, slot: u32, from: u64, to: u64) {
        let first_whole = from.div_ceil(SECTOR as u64);
        let partial = from % SECTOR as u64;
        if partial != 0 {
            let sector = (from / SECTOR as u64) as u32;
            if let Some(cur) = self.slots[slot as usize].sectors[sector as usize].cur {
                let c = self.content(slot, sector, cur);
                if c[partial as usize..].iter().any(|&b| b != 0) {
                    let v = self.new_version(Recipe {
                        lo: partial as u16,
                        hi: SECTOR as u16,
                        zero: true,
                        base: cur,
                    });
                    self.slots[slot as usize].sectors[sector as usize].set(v);
                }
            }
        }
        let last = to.div_ceil(SECTOR as u64).min(self.sectors_per_slot as u64);
        for sec in first_whole..last {
            let sec = &mut self.slots[slot as usize].sectors[sec as usize];
            if sec.cur != Some(0) {
                sec.set(0);
            }
        }
    }

    /// Whether the bytes of the sector holding byte `at` are known (always at a sector
    /// boundary): a truncation to `at` must keep the bytes before it.
    pub fn known_at(&self, slot: u32, at: u64) -> bool {
        at.is_multiple_of(SECTOR as u64)
            || self.slots[slot as usize]
                .sectors
                .get((at / SECTOR as u64) as usize)
                .is_none_or(|s| s.cur.is_some())
    }

    /// Records a truncation (objects): shrinking drops the bytes past `len` (a later growth
    /// reads them as zeros); growing adds zeros.
    pub fn truncate(&mut self, slot: u32, len: u64) {
        let old = self.slots[slot as usize].len.cur;
        if len < old {
            self.zero_from(slot, len, old);
        }
        let s = &mut self.slots[slot as usize];
        s.len.set(len);
        s.exists.set(true);
    }

    /// Records an object CREATE (a no-op on an object that exists).
    pub fn create(&mut self, slot: u32) {
        self.slots[slot as usize].exists.set(true);
    }

    /// A fresh attribute value of `len` bytes (each value distinct).
    pub fn attr_value(&mut self, len: usize) -> Vec<u8> {
        self.next_attr += 1;
        let x = mix(self.next_attr).to_le_bytes();
        let mut v: Vec<u8> = self.next_attr.to_le_bytes()[..len.min(8)].to_vec();
        v.extend(x.iter().cycle().take(len.saturating_sub(8)));
        v
    }

    /// Records an attribute change (`None`: cleared).
    pub fn set_attr(&mut self, slot: u32, attr: usize, value: Option<Vec<u8>>) {
        self.slots[slot as usize].attrs[attr].set(value);
    }

    /// Records the second partition created (`true`) or removed.
    pub fn set_partition(&mut self, present: bool) {
        self.partition.set(present);
    }
    /// Whether the second partition exists now.
    pub fn partition(&self) -> bool {
        self.partition.cur
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
        s.len.set(0);
        if at_flush {
            s.exists.set(false);
            for a in &mut s.attrs {
                a.set(None);
            }
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
            s.len.flush();
            s.exists.flush();
            for a in &mut s.attrs {
                a.flush();
            }
        }
        self.partition.flush();
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
    /// version exactly. `got` holds `returned` bytes from sector `first`; bytes past them read
    /// as zero (past an object's end). On objects `returned` must be what the object's length
    /// leaves from `first`.
    pub fn check_read(
        &mut self,
        slot: u32,
        first: u32,
        count: u32,
        got: &[u8],
        returned: usize,
    ) -> Result<(), Mismatch> {
        let s = &self.slots[slot as usize];
        if self.discard_durable_at_flush && s.known {
            let offset = first as u64 * SECTOR as u64;
            let expected = s
                .len
                .cur
                .saturating_sub(offset)
                .min(count as u64 * SECTOR as u64) as usize;
            if returned != expected {
                return Err(Mismatch::ReadLength {
                    slot,
                    offset,
                    read: returned,
                    expected,
                    len: s.len.cur,
                });
            }
        }
        for i in 0..count {
            let sector = first + i;
            let (bytes, valid) = sector_bytes(got, i, returned);
            let sec = &self.slots[slot as usize].sectors[sector as usize];
            match sec.cur {
                Some(cur) => {
                    if self
                        .identify(slot, sector, &bytes, SECTOR, &[cur])
                        .is_some()
                    {
                        continue;
                    }
                    let ever = sec.ever.clone();
                    return Err(match self.identify(slot, sector, &bytes, SECTOR, &ever) {
                        Some(v) => Mismatch::ReadStale {
                            slot,
                            sector,
                            read: v,
                            expected: cur,
                        },
                        None => Mismatch::ReadGarbage { slot, sector },
                    });
                }
                // Unknown since a destructive fault: anything once written there will do, and
                // is what the sector holds from now on. So may any length the object ever had
                // (a recovery may have rolled it back): when the object ends inside the sector,
                // only the bytes before its end are data, compared as after a recovery, and
                // the rest reads as zeros from now on.
                None => {
                    let ever = sec.ever.clone();
                    let valid = if valid == 0 { SECTOR } else { valid };
                    let found = self
                        .identify(slot, sector, &bytes, valid, &ever)
                        .map(|v| (v, valid))
                        .or_else(|| {
                            let known = self.slots[slot as usize].known;
                            (!known)
                                .then(|| self.identify_cut(slot, sector, &bytes, valid, &ever))
                                .flatten()
                        });
                    match found {
                        Some((v, cut)) => {
                            self.slots[slot as usize].sectors[sector as usize].cur = Some(v);
                            if cut < SECTOR {
                                let at = sector as u64 * SECTOR as u64;
                                self.zero_from(slot, at + cut as u64, at + SECTOR as u64);
                            }
                        }
                        None => {
                            return Err(match decode(slot, sector, &bytes) {
                                Some(read) => Mismatch::ReadForeign { slot, sector, read },
                                None => Mismatch::ReadGarbage { slot, sector },
                            })
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks tracked attributes read while the stack ran (`None`: the object does not exist).
    pub fn check_attrs(&self, slot: u32, got: Option<&[Option<Vec<u8>>]>) -> Result<(), Mismatch> {
        let s = &self.slots[slot as usize];
        if !s.known {
            return Ok(());
        }
        let Some(got) = got else {
            return if s.exists.cur {
                Err(Mismatch::Vanished { slot })
            } else {
                Ok(())
            };
        };
        if !s.exists.cur {
            return Err(Mismatch::Resurrected {
                slot,
                len: s.len.cur,
            });
        }
        for (i, (a, g)) in s.attrs.iter().zip(got).enumerate() {
            if a.cur != *g {
                return Err(Mismatch::Attr {
                    slot,
                    attr: FIRST_ATTR + i as u16,
                    got: g.clone(),
                    expected: a.cur.clone(),
                });
            }
        }
        Ok(())
    }

    /// The slots that exist, of those whose state is known; and the unknown ones.
    fn listing(&self) -> (Vec<u32>, Vec<u32>) {
        let mut exist = Vec::new();
        let mut unknown = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if !s.known {
                unknown.push(i as u32);
            } else if s.exists.cur {
                exist.push(i as u32);
            }
        }
        (exist, unknown)
    }

    /// Checks a listing of the objects (slots, any order) against the objects that exist.
    pub fn check_list(&self, listed: &[u32]) -> Result<(), Mismatch> {
        let (expected, unknown) = self.listing();
        let mut all = listed.to_vec();
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        let twice = all.len() != n;
        let known: Vec<u32> = all.into_iter().filter(|s| !unknown.contains(s)).collect();
        if known != expected || twice || listed.iter().any(|&s| s >= self.slots()) {
            return Err(Mismatch::List {
                listed: listed.to_vec(),
                expected,
            });
        }
        Ok(())
    }

    /// Checks whether the second partition is listed, now (`recovered`: after a reboot, under
    /// the same rules as everything else) and makes it the truth.
    pub fn check_partition(
        &mut self,
        present: bool,
        recovered: Option<(bool, bool)>,
    ) -> Result<(), Mismatch> {
        let ok = match recovered {
            None => self.partition.cur == present,
            Some((clean, damaged)) => self.partition.allows(&present, clean, damaged),
        };
        let allowed = match recovered {
            None => vec![self.partition.cur],
            Some((clean, _)) => self.partition.allowed(clean),
        };
        if recovered.is_some() {
            self.partition.settle(present);
        }
        if ok {
            Ok(())
        } else {
            Err(Mismatch::Partition { present, allowed })
        }
    }

    /// Whether the slot must exist after a crash.
    pub fn must_exist(&self, slot: u32) -> bool {
        !self.slots[slot as usize]
            .exists
            .since_flush
            .contains(&false)
    }

    /// A read failed after a destructive fault: the sectors' contents are now unknown.
    pub fn mark_unknown(&mut self, slot: u32, first: u32, count: u32) {
        for sec in &mut self.slots[slot as usize].sectors[first as usize..(first + count) as usize]
        {
            sec.cur = None;
        }
    }

    /// Checks a whole slot after recovery and makes what it holds the new truth. `got` is
    /// `None` for a missing object, else its bytes (`returned` of them valid: on objects, its
    /// length); `clean` after a clean shutdown, where everything must be exactly current.
    /// `damaged` after a destructive fault: then only the rule against invented bytes holds
    /// (any version ever written to a sector, or an object gone), because the record naming a
    /// newer copy may be what was destroyed.
    ///
    /// On objects, existence is checked both ways (one that must exist is there; one that came
    /// back was there at the last flush or made since), and the length is one the object had
    /// since the last flush, or a multiple of the write unit between the shortest and the
    /// longest of those (a write that extended the object landed in part: roll-forward extends
    /// a length unit by unit).
    pub fn check_recovered(
        &mut self,
        slot: u32,
        got: Option<(&[u8], usize)>,
        clean: bool,
        damaged: bool,
    ) -> Result<(), Mismatch> {
        let sectors = self.sectors_per_slot;
        let objects = self.discard_durable_at_flush;
        let unit = self.unit_bytes;
        let mut first_err = None;
        {
            let s = &self.slots[slot as usize];
            let present = got.is_some();
            let exists_ok = damaged || s.exists.allows(&present, clean, false);
            if !exists_ok && !present {
                return Err(Mismatch::Vanished { slot });
            }
            if !exists_ok && objects {
                first_err = Some(Mismatch::Resurrected {
                    slot,
                    len: got.map_or(0, |(_, n)| n as u64),
                });
            }
            if let (Some((_, n)), true, false) = (got, objects, damaged) {
                let n = n as u64;
                let ok = if clean {
                    s.len.cur == n
                } else {
                    let lens = &s.len.since_flush;
                    let lo = lens.iter().copied().min().unwrap_or(0);
                    let hi = lens.iter().copied().max().unwrap_or(0);
                    lens.contains(&n) || (n.is_multiple_of(unit) && lo < n && n < hi)
                };
                if !ok {
                    first_err.get_or_insert(Mismatch::RecoveredLength {
                        slot,
                        len: n,
                        allowed: s.len.allowed(clean),
                    });
                }
            }
        }
        for sector in 0..sectors {
            let (bytes, valid) = match got {
                None => ([0u8; SECTOR], SECTOR),
                Some((buf, returned)) => sector_bytes(buf, sector, returned),
            };
            // Past an object's end every version reads as zeros: compare the bytes before it.
            let valid = if valid == 0 { SECTOR } else { valid };
            let sec = &self.slots[slot as usize].sectors[sector as usize];
            let candidates: Vec<u64> = match sec.cur {
                _ if damaged => sec.ever.clone(),
                None => sec.ever.clone(),
                Some(cur) if clean => vec![cur],
                Some(_) => {
                    let mut c = sec.since_flush.clone();
                    if sec.trimmed {
                        c.extend(&sec.since_ckpt);
                    }
                    c
                }
            };
            let found = self.identify(slot, sector, &bytes, valid, &candidates);
            // A sector cut short at an end the oracle never saw (see `identify_cut`).
            let mut cut = None;
            let v = match found {
                Some(v) => v,
                None if damaged && sec.cur.is_none() && !self.slots[slot as usize].known => {
                    let ever = sec.ever.clone();
                    match self.identify_cut(slot, sector, &bytes, valid, &ever) {
                        Some((v, at)) => {
                            cut = Some(at);
                            v
                        }
                        None => {
                            first_err.get_or_insert(Mismatch::RecoveredGarbage { slot, sector });
                            continue;
                        }
                    }
                }
                None => {
                    let ever = sec.ever.clone();
                    match self.identify(slot, sector, &bytes, valid, &ever) {
                        Some(v) => {
                            let sec = &self.slots[slot as usize].sectors[sector as usize];
                            first_err.get_or_insert_with(|| Mismatch::RecoveredVersion {
                                slot,
                                sector,
                                recovered: v,
                                allowed: sec.cur.map_or(&sec.ever, |_| &sec.since_flush).clone(),
                                since_checkpoint: sec.trimmed.then(|| sec.since_ckpt.clone()),
                            });
                            v
                        }
                        None => {
                            first_err.get_or_insert(Mismatch::RecoveredGarbage { slot, sector });
                            continue;
                        }
                    }
                }
            };
            let sec = &mut self.slots[slot as usize].sectors[sector as usize];
            sec.cur = Some(v);
            sec.since_flush.clear();
            sec.since_flush.push(v);
            sec.since_ckpt.push(v);
            if let Some(c) = cut {
                let at = sector as u64 * SECTOR as u64;
                self.zero_from(slot, at + c as u64, at + SECTOR as u64);
            }
        }
        let exists = got.is_some() || !objects;
        let len = match got {
            None => 0,
            Some((_, returned)) => returned as u64,
        };
        if objects {
            // What lies past the recovered end reads as zeros from now on.
            self.zero_from(slot, len, sectors as u64 * SECTOR as u64);
            for sec in &mut self.slots[slot as usize].sectors {
                if let Some(cur) = sec.cur {
                    sec.since_flush.clear();
                    sec.since_flush.push(cur);
                }
            }
        }
        let s = &mut self.slots[slot as usize];
        s.exists.settle(exists);
        s.len.settle(if objects { len } else { s.len.cur });
        s.known = true;
        first_err.map_or(Ok(()), Err)
    }

    /// Checks an object's tracked attributes after recovery (`None`: the object is gone) and
    /// makes them the truth: each holds its value at the last flush or one set since (exactly
    /// the current one after a clean shutdown; any value it ever had after damage).
    pub fn check_recovered_attrs(
        &mut self,
        slot: u32,
        got: Option<&[Option<Vec<u8>>]>,
        clean: bool,
        damaged: bool,
    ) -> Result<(), Mismatch> {
        let s = &mut self.slots[slot as usize];
        let mut first_err = None;
        for (i, a) in s.attrs.iter_mut().enumerate() {
            let g = got.and_then(|g| g[i].clone());
            if got.is_some() && !a.allows(&g, clean, damaged) && !(damaged && g.is_none()) {
                first_err.get_or_insert_with(|| Mismatch::RecoveredAttr {
                    slot,
                    attr: FIRST_ATTR + i as u16,
                    got: g.clone(),
                    allowed: a.allowed(clean),
                });
            }
            a.settle(g);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Whether anything of the slot (a sector, its existence, length or attributes) changed
    /// since the last flush.
    pub fn changed_since_flush(&self, slot: u32) -> bool {
        let s = &self.slots[slot as usize];
        s.sectors.iter().any(|sec| sec.since_flush.len() > 1)
            || s.len.since_flush.len() > 1
            || s.exists.since_flush.len() > 1
            || s.attrs.iter().any(|a| a.since_flush.len() > 1)
    }

    /// Whether the second partition was created or removed since the last flush.
    pub fn partition_changed_since_flush(&self) -> bool {
        self.partition.since_flush.len() > 1
    }

    /// The slot is being removed after a recovery that need not have kept it (a stack that
    /// promises only what was flushed): from now on it is an empty slot, known, removed since
    /// the last flush.
    pub fn forget(&mut self, slot: u32) {
        let at_flush = self.discard_durable_at_flush;
        let s = &mut self.slots[slot as usize];
        for sec in &mut s.sectors {
            *sec = Sector::new();
        }
        s.len = Versioned::new(0);
        s.exists = Versioned::new(!at_flush);
        s.attrs = vec![Versioned::new(None); ATTRS];
        s.known = true;
    }

    /// After recovery of a slot whose read failed (a destructive fault): unknown contents.
    pub fn recovered_unknown(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        for sec in &mut s.sectors {
            sec.cur = None;
        }
        s.known = false;
        // Whatever it held, nothing of it must survive a later crash.
        s.exists.since_flush = vec![false, true];
    }
}

/// Sector `i` of a read buffer of which `returned` bytes are valid (the rest reads as zero),
/// and how many of its bytes are valid (0 when it lies wholly past them).
fn sector_bytes(buf: &[u8], i: u32, returned: usize) -> ([u8; SECTOR], usize) {
    let mut out = [0u8; SECTOR];
    let at = i as usize * SECTOR;
    let n = returned.saturating_sub(at).min(SECTOR);
    if n > 0 {
        out[..n].copy_from_slice(&buf[at..at + n]);
    }
    (out, n)
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
        let mut lost = d1.clone();
        lost[SECTOR..].fill(0);
        let e = o
            .check_recovered(0, Some((&lost, 2 * SECTOR)), false, false)
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

    /// A shrunken object (no write since the flush) is caught by its length alone.
    #[test]
    fn a_shrunken_object_is_caught() {
        let mut o = Oracle::new(1, 4, true);
        let d = o.write(0, 0, 2);
        o.flush();
        o.write(0, 3, 1); // unflushed: the length may be 2048 or 1024, and nothing else
        let e = o
            .check_recovered(0, Some((&d, SECTOR)), false, false)
            .unwrap_err();
        assert!(
            matches!(e, Mismatch::RecoveredLength { len: 512, .. }),
            "{e}"
        );
    }

    /// An empty object back after a durable remove, or after a clean shutdown that removed it.
    #[test]
    fn a_resurrected_empty_object_is_caught() {
        let mut o = Oracle::new(1, 4, true);
        o.write(0, 0, 1);
        o.flush();
        o.discard(0);
        o.flush();
        let e = o.check_recovered(0, Some((&[], 0)), false, false);
        assert_eq!(e, Err(Mismatch::Resurrected { slot: 0, len: 0 }));
        // Not yet durable: either is fine.
        let mut o = Oracle::new(1, 4, true);
        o.create(0);
        o.flush();
        o.discard(0);
        assert!(o.check_recovered(0, Some((&[], 0)), false, false).is_ok());
        let mut o = Oracle::new(1, 4, true);
        o.create(0);
        o.flush();
        o.discard(0);
        assert!(o.check_recovered(0, None, false, false).is_ok());
        // A clean shutdown keeps the remove.
        let mut o = Oracle::new(1, 4, true);
        o.create(0);
        o.flush();
        o.discard(0);
        o.checkpoint();
        assert!(o.check_recovered(0, Some((&[], 0)), true, false).is_err());
    }

    /// Byte-granular writes and truncations: reads compare every byte and the length.
    #[test]
    fn bytes_and_truncations_are_checked_exactly() {
        let mut o = Oracle::new(1, 8, true);
        let a = o.write_bytes(0, 100, 1000); // sectors 0..2, length 1100
        assert_eq!(o.len_bytes(0), 1100);
        let mut img = vec![0u8; 4 * SECTOR];
        img[100..1100].copy_from_slice(&a);
        assert!(o.check_read(0, 0, 4, &img, 1100).is_ok());
        assert!(matches!(
            o.check_read(0, 0, 4, &img, 1024),
            Err(Mismatch::ReadLength { .. })
        ));
        let mut bad = img.clone();
        bad[700] ^= 1;
        assert!(o.check_read(0, 0, 4, &bad, 1100).is_err());
        let b = o.write_bytes(0, 300, 10);
        img[300..310].copy_from_slice(&b);
        assert!(o.check_read(0, 0, 4, &img, 1100).is_ok());
        o.flush();
        o.truncate(0, 305);
        let mut cut = img.clone();
        cut[305..].fill(0);
        assert!(o.check_read(0, 0, 4, &cut, 305).is_ok());
        // After a crash: the flushed state or the truncated one, nothing between.
        let mut o2 = Oracle::new(1, 8, true);
        let a = o2.write_bytes(0, 100, 1000);
        let mut img = vec![0u8; 4 * SECTOR];
        img[100..1100].copy_from_slice(&a);
        o2.flush();
        o2.truncate(0, 305);
        let mut cut = img.clone();
        cut[305..].fill(0);
        let mut x = Oracle::new(1, 8, true);
        std::mem::swap(&mut x, &mut o2);
        let mut y = Oracle::new(1, 8, true);
        let a2 = y.write_bytes(0, 100, 1000);
        assert_eq!(a, a2);
        y.flush();
        y.truncate(0, 305);
        assert!(x
            .check_recovered(0, Some((&cut, 305)), false, false)
            .is_ok());
        assert!(y
            .check_recovered(0, Some((&img, 1100)), false, false)
            .is_ok());
        let mut z = Oracle::new(1, 8, true);
        z.write_bytes(0, 100, 1000);
        z.flush();
        z.truncate(0, 305);
        assert!(matches!(
            z.check_recovered(0, Some((&img, 700)), false, false),
            Err(Mismatch::RecoveredLength { len: 700, .. })
        ));
    }

    /// After damage, an object whose length is unknown may end inside a sector (any length it
    /// ever had): the bytes before its end hold a version written there, the rest is no data,
    /// and from then on reads as zeros (issue 15: seeds 5009595551979017198 and others).
    #[test]
    fn an_unknown_sector_the_object_ends_in_compares_the_bytes_before_the_end() {
        let mut o = Oracle::new(1, 4, true);
        let d = o.write(0, 0, 2);
        o.recovered_unknown(0);
        let mut img = d.clone();
        img[700..].fill(0);
        img.resize(4 * SECTOR, 0);
        assert!(o.check_read(0, 0, 4, &img, 700).is_ok());
        // The tail past that end reads as zeros now, though the object may grow again.
        assert!(o
            .check_read(0, 0, 2, &img[..2 * SECTOR], 2 * SECTOR)
            .is_ok());
        let mut stale = d.clone();
        stale.resize(4 * SECTOR, 0);
        assert!(matches!(
            o.check_read(0, 0, 2, &stale[..2 * SECTOR], 2 * SECTOR),
            Err(Mismatch::ReadStale { sector: 1, .. })
        ));
        // The object came back ending there, unseen (the recovery's read failed), and grew
        // since: the sector reads as that version cut short, zeros after the old end, then on.
        let mut o = Oracle::new(1, 4, true);
        let d = o.write(0, 0, 2);
        o.recovered_unknown(0);
        let mut grown = d.clone();
        grown[700..].fill(0);
        assert!(o.check_read(0, 0, 2, &grown, 2 * SECTOR).is_ok());
        assert!(matches!(
            o.check_read(0, 0, 2, &d, 2 * SECTOR),
            Err(Mismatch::ReadStale { sector: 1, .. })
        ));
        let mut o = Oracle::new(1, 4, true);
        let d = o.write(0, 0, 2);
        o.recovered_unknown(0);
        let mut img = d.clone();
        img[700..].fill(0);
        img.resize(4 * SECTOR, 0);
        assert!(o
            .check_recovered(0, Some((&img, 4 * SECTOR)), false, true)
            .is_ok());
        // Bytes never written there are still caught before the end.
        let mut o = Oracle::new(1, 4, true);
        let d = o.write(0, 0, 2);
        o.recovered_unknown(0);
        let mut bad = d.clone();
        bad[600] ^= 1;
        bad[700..].fill(0);
        assert!(matches!(
            o.check_read(0, 0, 2, &bad, 700),
            Err(Mismatch::ReadGarbage { sector: 1, .. })
        ));
    }

    /// Attributes: exact while running and after a clean shutdown; flushed or later after a
    /// crash.
    #[test]
    fn attributes_are_versioned() {
        let mut o = Oracle::new(1, 4, true);
        o.create(0);
        let v1 = o.attr_value(5);
        let v2 = o.attr_value(5);
        assert_ne!(v1, v2);
        o.set_attr(0, 1, Some(v1.clone()));
        o.flush();
        o.set_attr(0, 1, Some(v2.clone()));
        let got = |v: Option<Vec<u8>>| vec![None, v, None];
        assert!(o.check_attrs(0, Some(&got(Some(v2.clone())))).is_ok());
        assert!(o.check_attrs(0, Some(&got(Some(v1.clone())))).is_err());
        assert!(o.check_attrs(0, None).is_err());
        let mut c = Oracle::new(1, 4, true);
        c.create(0);
        c.set_attr(0, 1, Some(v1.clone()));
        c.flush();
        c.set_attr(0, 1, Some(v2.clone()));
        assert!(c
            .check_recovered_attrs(0, Some(&got(Some(v1.clone()))), false, false)
            .is_ok());
        let mut c = Oracle::new(1, 4, true);
        c.create(0);
        c.set_attr(0, 1, Some(v1.clone()));
        c.flush();
        c.set_attr(0, 1, Some(v2.clone()));
        assert!(c
            .check_recovered_attrs(0, Some(&got(None)), false, false)
            .is_err());
        let mut c = Oracle::new(1, 4, true);
        c.create(0);
        c.set_attr(0, 1, Some(v1.clone()));
        c.flush();
        c.set_attr(0, 1, Some(v2));
        c.checkpoint();
        assert!(c
            .check_recovered_attrs(0, Some(&got(Some(v1))), true, false)
            .is_err());
    }

    #[test]
    fn listings_are_exact() {
        let mut o = Oracle::new(3, 4, true);
        o.create(0);
        o.write(2, 0, 1);
        assert!(o.check_list(&[2, 0]).is_ok());
        assert!(o.check_list(&[0]).is_err());
        assert!(o.check_list(&[0, 1, 2]).is_err());
        assert!(o.check_list(&[0, 2, 2]).is_err());
        o.set_partition(true);
        assert!(o.check_partition(true, None).is_ok());
        assert!(o.check_partition(false, None).is_err());
        assert!(o.check_partition(false, Some((false, false))).is_ok());
    }
}
