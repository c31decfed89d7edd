//! The mapping table: the logical-to-physical map, DFTL's cached mapping table and global
//! translation directory, the checkpoint's units, and the translation I/O DFTL does.

use flash::gang::Vpa;
use flash::{Content, Flash, Nanos, Payload};
use fml::{FmlError, StreamId};

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
        let rec = Record {
            kind: Kind::Map,
            key: tp,
            seq,
            payload_crc: payload_crc(payload),
        }
        .encode();
        let (vpa, done) = self.fml.write(t, META_STREAM, payload, &rec)?;
        if old != UNMAPPED {
            self.fml.invalidate(Vpa(old));
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
