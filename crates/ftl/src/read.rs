//! The read path: host reads from the write buffer or the flash, and checked unit reads.

use flash::{Content, Flash, FlashError, Nanos};
use fml::buffer::Fill;
use fml::{Fml, FmlError};

use crate::oob::{content_crc, packed_record_bytes, Kind, Record, MAX_SLOTS};
use crate::{Ftl, FtlError, ReadOut, LOST, SECTOR_BYTES, UNMAPPED};

impl<F: Flash> Ftl<F> {
    /// Host read.
    #[expect(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "each buffer entry read or taken was found in the buffer just above, with no change in between"
    )]
    pub fn read(
        &mut self,
        at: Nanos,
        offset: u64,
        len: u64,
        out: ReadOut<'_>,
    ) -> Result<Nanos, FtlError> {
        self.check_range("read", offset, len)?;
        self.stats.host_reads += 1;
        self.stats.host_read_bytes += len;
        let mut done = at;
        let pieces = self.pieces(offset, len);
        let mut out = out;
        let mut produced = 0usize;
        for (lpn, s0, s1) in pieces {
            let want = Self::mask(s0, s1);
            let n = ((s1 - s0) as u64 * SECTOR_BYTES) as usize;
            let buffered = self
                .buf
                .get(lpn)
                .map(|e| e.mask & want == want)
                .unwrap_or(false);
            if buffered {
                self.stats.buffer_read_hits += 1;
                let e = self.buf.get(lpn).unwrap();
                match (&mut out, &e.fill) {
                    (ReadOut::Bytes(dst), Fill::Bytes(b)) => {
                        let o = s0 as usize * SECTOR_BYTES as usize;
                        dst[produced..produced + n].copy_from_slice(&b[o..o + n]);
                    }
                    (ReadOut::Fingerprints(v), Fill::Token(fp)) => v.push(*fp),
                    (ReadOut::Fingerprints(v), Fill::Bytes(_)) => v.push(0),
                    (ReadOut::Bytes(_), Fill::Token(_)) => {
                        return Err(FtlError::PayloadMode { lpn })
                    }
                }
                produced += n;
                done = done.max(self.cache_transfer(at, n as u64));
                continue;
            }
            // Partly buffered units are written out first so the flash copy is current.
            if self.buf.get(lpn).is_some() {
                let e = self.buf.take(lpn).expect("entry exists");
                done = done.max(self.program_entry(at, e)?);
            }
            let t = self.translate(at, lpn, false)?;
            let loc = self.map.l2p[lpn as usize];
            match &mut out {
                ReadOut::Bytes(dst) => {
                    let dst = &mut dst[produced..produced + n];
                    if loc == LOST {
                        return Err(FtlError::Lost { lpn });
                    } else if loc == UNMAPPED {
                        dst.fill(0);
                    } else {
                        let (d, content, base) = self.read_mapped(t, lpn, loc)?;
                        if !matches!(content, Content::Bytes) {
                            return Err(FtlError::PayloadMode { lpn });
                        }
                        done = done.max(d);
                        let o = base + s0 as usize * SECTOR_BYTES as usize;
                        dst.copy_from_slice(&self.scratch[o..o + n]);
                    }
                }
                ReadOut::Fingerprints(v) => {
                    if loc == LOST {
                        return Err(FtlError::Lost { lpn });
                    } else if loc == UNMAPPED {
                        v.push(0);
                    } else {
                        let (d, content, _) = self.read_mapped(t, lpn, loc)?;
                        done = done.max(d);
                        v.push(match content {
                            Content::Fingerprint(f) => f,
                            _ => 0,
                        });
                    }
                }
            }
            produced += n;
        }
        Ok(done)
    }

    /// Reads the unit holding location `loc`, which the map names for logical page `lpn`
    /// (bytes into the scratch buffer), and checks its OOB record names that page: a unit that
    /// reads erased, or holds another page (a misdirected write landed there), is unreadable,
    /// never data. Returns where the page's bytes start in the scratch buffer (its slot), and
    /// under sub-page mapping the slot's own fingerprint as the content.
    pub(crate) fn read_mapped(
        &mut self,
        at: Nanos,
        lpn: u32,
        loc: u32,
    ) -> Result<(Nanos, Content, usize), FtlError> {
        let v = self.map.unit_of(loc);
        let slot = (loc % self.map.slots) as usize;
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut oob = [0u8; packed_record_bytes(MAX_SLOTS)];
        let oob = &mut oob[..self.record_bytes];
        let r = self.fml.read(at, v, &mut scratch, oob);
        self.scratch = scratch;
        let unreadable = |fml: &Fml<F>| FtlError::Unreadable {
            lpn,
            unit: v.0,
            source: FlashError::Uncorrectable {
                addr: fml.layout().page(v, 0),
                bit_errors: 0,
            },
        };
        let (done, content) = match r {
            Ok(x) => x,
            // Power lost is no fault of the unit: the caller must see the power loss (and
            // remount), not a corrupted page.
            Err(e @ FmlError::Flash(FlashError::PowerLoss)) => return Err(e.into()),
            Err(FmlError::Flash(source)) => {
                return Err(FtlError::Unreadable {
                    lpn,
                    unit: v.0,
                    source,
                })
            }
            Err(e) => return Err(e.into()),
        };
        if self.map.owners.is_some() && content != Content::Erased {
            // A timing-only device keeps no record and no contents to check (NOT_STORED).
            return Ok((done, content, slot * self.unit_bytes));
        }
        let checked = |payload_crc: u32, scratch: &[u8]| {
            if content_crc(content, scratch) != Some(payload_crc) {
                return Err(FtlError::Checksum { lpn, unit: v.0 });
            }
            Ok(())
        };
        match Record::decode(oob) {
            Ok(Some(Record {
                kind: Kind::Data,
                key,
                payload_crc,
                ..
            })) if self.map.slots == 1 && key == lpn && content != Content::Erased => {
                checked(payload_crc, &self.scratch)?;
                Ok((done, content, 0))
            }
            Ok(Some(Record {
                kind: Kind::Packed,
                payload_crc,
                slots: s,
                ..
            })) if s.n as u32 == self.map.slots
                && s.keys[slot] == lpn
                && content != Content::Erased =>
            {
                checked(payload_crc, &self.scratch)?;
                let content = match content {
                    Content::Fingerprint(_) => Content::Fingerprint(s.fps[slot]),
                    c => c,
                };
                Ok((done, content, slot * self.unit_bytes))
            }
            _ => Err(unreadable(&self.fml)),
        }
    }
}
