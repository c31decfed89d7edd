//! The mapping table: the logical-to-physical map, DFTL's cached mapping table and global
//! translation directory, the checkpoint's units, and the translation I/O DFTL does.

use flash::gang::Vpa;
use flash::{Content, Flash, Nanos, Payload};
use fml::{FmlError, StreamId};

use rustc_hash::FxHashMap;

use crate::dftl::Cmt;
use crate::oob::{payload_crc, Kind, Record, Slots};
use crate::{fingerprint, Ftl, FtlError, META_STREAM, UNMAPPED};

/// The mapping state; GC reports relocations to it.
#[derive(Clone)]
pub(crate) struct Map {
    /// Per logical page: its location (the unit, or under sub-page mapping `unit * slots +
    /// slot`), [`UNMAPPED`] or [`crate::LOST`].
    pub(crate) l2p: Vec<u32>,
    /// Logical pages per write unit (1 unless sub-page mapping is on).
    pub(crate) slots: u32,
    /// Sub-page mapping only (empty otherwise): live slots of each unit; a unit is valid in
    /// the FML while this is above 0. Changed only through [`Map::set_live`].
    pub(crate) live: Vec<u8>,
    /// Sub-page mapping only: per super-block, the live slots of its units, and its units
    /// with a live slot (GC's victim choice counts slots, [`Ftl::gc_step`]).
    pub(crate) block_slots: Vec<u32>,
    pub(crate) block_units: Vec<u32>,
    /// Write units per super-block.
    pub(crate) units_per_superblock: u32,
    /// Write units on the device (the range of unit addresses).
    pub(crate) total_units: usize,
    pub(crate) next_seq: u64,
    pub(crate) cmt: Option<Cmt>,
    /// GTD: location of each translation page (DFTL).
    pub(crate) gtd: Vec<u32>,
    pub(crate) ckpt: Vec<u32>,
    pub(crate) ckpt_seq: u64,
    /// Parts of a checkpoint being written, and its sequence number.
    pub(crate) ckpt_new: Vec<u32>,
    pub(crate) ckpt_new_seq: u64,
    /// Logical pages GC moved whose cached translation must be updated (DFTL).
    pub(crate) moved: Vec<u32>,
    pub(crate) lost: u64,
    /// Stream for GC copies of data (`None`: the FML's GC stream).
    pub(crate) gc_data_stream: Option<StreamId>,
    /// The record of the unit GC is copying, decoded in `before_copy` for `relocated`.
    pub(crate) copying: Option<Record>,
    /// What each unit holds, kept only on a timing-only device (which keeps no OOB records).
    pub(crate) owners: Option<Owners>,
}

/// What each unit holds, for GC on a timing-only device: there the FTL cannot read a unit's
/// OOB record back, so it keeps the record's substance itself, 4 bytes per unit and slot (the
/// device's OOB records would cost 21; MQSim keeps the same reverse map).
#[derive(Clone)]
pub(crate) struct Owners {
    /// Per unit (per slot under sub-page mapping): the logical page a data unit holds, or
    /// [`META_UNIT`] (in the unit's first slot: the record is in `meta`). Entries of units no
    /// longer valid are stale and never asked for; a stale slot of a valid packed unit is
    /// emptied by GC, which checks each slot against the map.
    data: Vec<u32>,
    /// Records of the valid translation pages and checkpoint parts, by unit.
    meta: FxHashMap<u32, Record>,
}

/// An [`Owners::data`] entry of a unit holding a translation page or a checkpoint part (an
/// empty slot is [`EMPTY_SLOT`], above every logical page and below this).
const META_UNIT: u32 = u32::MAX - 2;

impl Owners {
    /// Owners of `units` write units of `slots` logical pages each.
    pub(crate) fn new(units: usize, slots: u32) -> Self {
        Owners {
            data: vec![META_UNIT; units * slots as usize],
            meta: FxHashMap::default(),
        }
    }

    /// The record of the valid unit `v`, as it was programmed (`None` if unknown).
    pub(crate) fn record(&self, v: u32, slots: u32) -> Option<Record> {
        let first = v as usize * slots as usize;
        match *self.data.get(first)? {
            META_UNIT => self.meta.get(&v).copied(),
            lpn if slots == 1 => Some(Record {
                kind: Kind::Data,
                key: lpn,
                seq: 0,
                payload_crc: 0,
                slots: Slots::NONE,
            }),
            _ => {
                let mut s = Slots::empty(slots as usize);
                s.keys[..slots as usize]
                    .copy_from_slice(self.data.get(first..first + slots as usize)?);
                Some(Record {
                    kind: Kind::Packed,
                    key: 0,
                    seq: 0,
                    payload_crc: 0,
                    slots: s,
                })
            }
        }
    }
}

impl Map {
    /// Notes what unit `v` now holds (timing-only devices; a no-op otherwise).
    pub(crate) fn wrote(&mut self, v: u32, r: &Record) {
        let Some(o) = self.owners.as_mut() else {
            return;
        };
        let k = self.slots as usize;
        let Some(slots) = o.data.get_mut(v as usize * k..(v as usize + 1) * k) else {
            return;
        };
        match r.kind {
            Kind::Data => slots[0] = r.key,
            Kind::Packed => slots.copy_from_slice(&r.slots.keys[..k]),
            Kind::Map | Kind::Checkpoint => {
                slots[0] = META_UNIT;
                o.meta.insert(v, *r);
            }
        }
    }

    /// Forgets a translation page or checkpoint part that is no longer valid.
    pub(crate) fn forget(&mut self, v: u32) {
        if let Some(o) = self.owners.as_mut() {
            o.meta.remove(&v);
        }
    }
}

impl Map {
    pub(crate) fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }
}

impl<F: Flash> Ftl<F> {
    /// DFTL address translation: a cache miss reads the translation page; evicting a dirty
    /// entry writes its translation page back first. A no-op for the page-mapping FTL.
    pub(crate) fn translate(
        &mut self,
        at: Nanos,
        lpn: u32,
        dirty: bool,
    ) -> Result<Nanos, FtlError> {
        let Some(cmt) = self.map.cmt.as_mut() else {
            return Ok(at);
        };
        let io = cmt.access(lpn, dirty);
        let mut t = at;
        if let Some(tp) = io.writeback {
            t = self.write_tpage(t, tp)?;
        }
        if let Some(tp) = io.fetch {
            let loc = self.map.gtd[tp as usize];
            if loc != UNMAPPED {
                let (done, _) = self.read_unit(t, Vpa(loc))?;
                self.stats.map_pages_read += 1;
                t = done;
            }
        }
        Ok(t)
    }

    /// Writes a translation page back: read the old copy (the cache holds only part of it),
    /// write the new one.
    pub(crate) fn write_tpage(&mut self, at: Nanos, tp: u32) -> Result<Nanos, FtlError> {
        let mut t = self.make_room(at)?;
        let old = self.map.gtd[tp as usize];
        if old != UNMAPPED {
            let (done, _) = self.read_unit(t, Vpa(old))?;
            self.stats.map_pages_read += 1;
            t = done;
        }
        let seq = self.map.take_seq();
        // The page's entries live in the host-side table; the flash copy stands for them.
        let payload = Payload::Fingerprint(fingerprint(tp, seq));
        let record = Record {
            kind: Kind::Map,
            key: tp,
            seq,
            payload_crc: payload_crc(payload),
            slots: Slots::NONE,
        };
        let (vpa, done) = self.fml.write(t, META_STREAM, payload, &record.encode())?;
        self.map.wrote(vpa.0, &record);
        if old != UNMAPPED {
            self.fml.invalidate(Vpa(old));
            self.map.forget(old);
        }
        self.map.gtd[tp as usize] = vpa.0;
        self.stats.map_pages_written += 1;
        Ok(done)
    }

    /// Reads a whole unit (its bytes cross the bus even when it holds a fingerprint, so the
    /// timing is the same in both payload modes); the bytes land in the scratch buffer. Used
    /// for translation pages only, whose contents stand for entries the FTL keeps in host
    /// memory and are never used: their checksum is written but there is nothing to check it
    /// for (docs/FORMAT.md, section 2).
    fn read_unit(&mut self, at: Nanos, v: Vpa) -> Result<(Nanos, Content), FmlError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.fml.read(at, v, &mut scratch, &mut []);
        self.scratch = scratch;
        r
    }
}
