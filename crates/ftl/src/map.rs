//! The mapping table: the logical-to-physical map, DFTL's cached mapping table and global
//! translation directory, the checkpoint's units, and the translation I/O DFTL does.

use flash::gang::Vpa;
use flash::{Content, Flash, Nanos, Payload};
use fml::{FmlError, StreamId};

use rustc_hash::FxHashMap;

use crate::dftl::Cmt;
use crate::oob::{payload_crc, Kind, Record};
use crate::{fingerprint, Ftl, FtlError, META_STREAM, UNMAPPED};

/// The mapping state; GC reports relocations to it.
pub(crate) struct Map {
    pub(crate) l2p: Vec<u32>,
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
/// OOB record back, so it keeps the record's substance itself, 4 bytes per unit (the device's
/// OOB records would cost 21; MQSim keeps the same reverse map).
pub(crate) struct Owners {
    /// Per unit: the logical page a data unit holds, or [`META_UNIT`] (the record is in
    /// `meta`). Entries of units no longer valid are stale and never asked for.
    data: Vec<u32>,
    /// Records of the valid translation pages and checkpoint parts, by unit.
    meta: FxHashMap<u32, Record>,
}

/// An [`Owners::data`] entry of a unit holding a translation page or a checkpoint part.
const META_UNIT: u32 = u32::MAX;

impl Owners {
    pub(crate) fn new(units: usize) -> Self {
        Owners {
            data: vec![META_UNIT; units],
            meta: FxHashMap::default(),
        }
    }

    /// The record of the valid unit `v`, as it was programmed (`None` if unknown).
    pub(crate) fn record(&self, v: u32) -> Option<Record> {
        match *self.data.get(v as usize)? {
            META_UNIT => self.meta.get(&v).copied(),
            lpn => Some(Record {
                kind: Kind::Data,
                key: lpn,
                seq: 0,
                payload_crc: 0,
            }),
        }
    }
}

impl Map {
    /// Notes what unit `v` now holds (timing-only devices; a no-op otherwise).
    pub(crate) fn wrote(&mut self, v: u32, r: &Record) {
        let Some(o) = self.owners.as_mut() else {
            return;
        };
        let Some(slot) = o.data.get_mut(v as usize) else {
            return;
        };
        if r.kind == Kind::Data {
            *slot = r.key;
        } else {
            *slot = META_UNIT;
            o.meta.insert(v, *r);
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
