//! The write path: host writes into the write buffer, eviction and write-back flushing,
//! read-modify-write of partial units, programming, and flush.

use flash::gang::Vpa;
use flash::{Content, Flash, Nanos, Payload};
use fml::buffer::{Entry, Fill};

use crate::oob::{payload_crc, Kind, Record, Slots};
use crate::{
    fingerprint, fold, BufferPolicy, Data, Ftl, FtlError, DATA_STREAM, LOST, SECTOR_BYTES,
};

impl<F: Flash> Ftl<F> {
    /// Host write. Returns when the write is accepted (in the buffer, or programmed when the
    /// buffer is off or had to make room).
    #[expect(
        clippy::expect_used,
        reason = "each buffer entry taken was found in the buffer just above, with no change in between"
    )]
    pub fn write(
        &mut self,
        at: Nanos,
        offset: u64,
        len: u64,
        data: Data<'_>,
    ) -> Result<Nanos, FtlError> {
        self.check_range("write", offset, len)?;
        if let Data::Bytes(b) = data {
            if b.len() as u64 != len {
                return Err(FtlError::BadRequest {
                    what: "write",
                    offset,
                    len,
                    why: format!("{} data bytes given", b.len()),
                });
            }
        }
        self.stats.host_writes += 1;
        self.stats.host_write_bytes += len;
        let mut done = at;
        let unit = self.unit_bytes;
        let full = self.full_mask();
        let bytes_mode = matches!(data, Data::Bytes(_));
        let pieces = self.pieces(offset, len);
        let mut consumed = 0usize;
        for (lpn, s0, s1) in pieces {
            let mask = Self::mask(s0, s1);
            let n = ((s1 - s0) as u64 * SECTOR_BYTES) as usize;
            // A unit buffered in the other payload mode is written out first.
            if self
                .buf
                .get(lpn)
                .is_some_and(|e| matches!(e.fill, Fill::Bytes(_)) != bytes_mode)
            {
                let old = self.buf.take(lpn).expect("entry exists");
                done = done.max(self.program_entry(at, old)?);
            }
            if self.buf.capacity() > 0 && self.buf.get(lpn).is_none() {
                match self.config.buffer_policy {
                    BufferPolicy::WriteBack => done = done.max(self.admit_write_back(at)?),
                    BufferPolicy::Destage => done = done.max(self.admit_destage(at)?),
                    BufferPolicy::Evict if self.buf.is_full() => {
                        done = done.max(self.evict_one(at)?)
                    }
                    BufferPolicy::Evict => {}
                }
            }
            let e = self.buf.entry(lpn, bytes_mode, unit);
            match (&mut e.fill, data) {
                (Fill::Bytes(b), Data::Bytes(src)) => {
                    let o = s0 as usize * SECTOR_BYTES as usize;
                    b[o..o + n].copy_from_slice(&src[consumed..consumed + n]);
                }
                (Fill::Token(fp), Data::Token(t)) => {
                    *fp = if mask == full {
                        fingerprint(lpn, t)
                    } else {
                        fold(*fp, t, mask)
                    };
                }
                _ => unreachable!("entries of the other mode were written out above"),
            }
            e.mask |= mask;
            consumed += n;
            if self.config.buffer_policy == BufferPolicy::Destage && self.is_cold(at, lpn) {
                self.cold.push_back(lpn);
                self.write_back_cold(done)?;
            }
            if self.buf.capacity() == 0 {
                let e = self.buf.take(lpn).expect("entry exists");
                done = done.max(self.program_entry(at, e)?);
            }
        }
        if self.buf.capacity() > 0 {
            done = done.max(self.cache_transfer(at, len));
        }
        let every = self.config.checkpoint_every_units;
        if every > 0 && self.map.next_seq.saturating_sub(self.map.ckpt_seq) > every {
            done = done.max(self.checkpoint(done)?);
        }
        Ok(done)
    }

    /// `ftl.cache_mb_s`: moves `bytes` over the buffer's memory channel, starting at `at` or
    /// when the transfer before it ends, whichever is later; returns when it ends. The
    /// transfer overlaps whatever else the request waits for (room in the buffer, a program):
    /// the channel is a resource of its own, booked in arrival order.
    pub(crate) fn cache_transfer(&mut self, at: Nanos, bytes: u64) -> Nanos {
        if self.config.cache_mb_s == 0 {
            return at;
        }
        let start = at.max(self.cache_free);
        self.cache_free = start + (bytes * 1000).div_ceil(self.config.cache_mb_s);
        self.cache_free
    }

    /// Write-back buffer: makes room for one more unit; returns when the unit may enter.
    /// Flushes started by earlier writes that completed by `at` free their slots; units beyond
    /// the flush threshold start flushing now; if buffered and in-flight units still fill the
    /// buffer, the write waits for the earliest flush to complete.
    fn admit_write_back(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let cap = self.buf.capacity();
        let threshold = ((cap as f64 * self.config.flush_percent / 100.0) as usize).clamp(1, cap);
        let mut ready = at;
        loop {
            self.retire_flushes(ready);
            // Background flushes: the oldest units beyond the threshold, issued now (a slot
            // of the buffer per logical page until its program completes).
            while self.buf.len() >= threshold && self.flush_oldest(at)? {}
            if self.buf.len() + self.inflight.len() < cap {
                return Ok(ready);
            }
            match self.inflight.pop() {
                Some(r) => ready = ready.max(r.0),
                None => return Ok(ready),
            }
        }
    }

    /// Destage buffer: makes room for one more page; returns when it may enter. A full buffer
    /// sends its oldest page to flash (MQSim evicts its least recently used slot); then, while
    /// write-backs in flight reach the back-pressure depth, the write waits for the earliest.
    fn admit_destage(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        while self.buf.is_full() && self.flush_oldest(at)? {}
        let mut ready = at;
        loop {
            self.retire_flushes(ready);
            if self.inflight.len() < self.destage_depth {
                return Ok(ready);
            }
            if let Some(r) = self.inflight.pop() {
                ready = ready.max(r.0);
            }
        }
    }

    /// Destage buffer: whether a write of `lpn` at `at` is its first in the hot window (MQSim
    /// clears its set of written pages once a window has passed).
    fn is_cold(&mut self, at: Nanos, lpn: u32) -> bool {
        if at >= self.hot_window_end {
            self.hot.clear();
            self.hot_window_end = at.saturating_add(self.config.hot_window_ns.max(1));
        }
        self.hot.insert(lpn)
    }

    /// Destage buffer: writes the cold pages back, a write unit's worth at a time (a page at a
    /// time without sub-page mapping), issued at `at`; each counts as in flight until its
    /// program completes. Pages that left the buffer another way are skipped.
    fn write_back_cold(&mut self, at: Nanos) -> Result<(), FtlError> {
        let slots = self.map.slots as usize;
        while self.cold.len() >= slots {
            let mut group = Vec::with_capacity(slots);
            while group.len() < slots {
                let Some(lpn) = self.cold.pop_front() else {
                    break;
                };
                if let Some(e) = self.buf.take(lpn) {
                    group.push(e);
                }
            }
            let pages = group.len();
            let one_mode = group.windows(2).all(|w| {
                matches!(w[0].fill, Fill::Bytes(_)) == matches!(w[1].fill, Fill::Bytes(_))
            });
            let mut done = at;
            if slots > 1 && one_mode && pages > 0 {
                done = self.program_group(at, group)?;
            } else {
                for e in group {
                    done = done.max(self.program_entry(at, e)?);
                }
            }
            self.in_flight(done, pages);
        }
        Ok(())
    }

    /// Starts programming the oldest buffered unit in the background (`write-back` and
    /// `destage`): its logical pages stay in flight until the program completes. False when
    /// the buffer is empty.
    fn flush_oldest(&mut self, at: Nanos) -> Result<bool, FtlError> {
        let Some((done, pages)) = self.program_oldest(at)? else {
            return Ok(false);
        };
        self.in_flight(done, pages);
        Ok(true)
    }

    /// Counts `pages` logical pages as in flight until `done`.
    fn in_flight(&mut self, done: Nanos, pages: usize) {
        for _ in 0..pages {
            self.inflight.push(std::cmp::Reverse(done));
        }
    }

    /// Forgets the background programs that completed by `at`.
    fn retire_flushes(&mut self, at: Nanos) {
        while self.inflight.peek().is_some_and(|r| r.0 <= at) {
            self.inflight.pop();
        }
    }

    /// Writes the oldest buffered unit to flash (under sub-page mapping, a unit's worth of
    /// the oldest logical pages).
    fn evict_one(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        Ok(self.program_oldest(at)?.map_or(at, |(done, _)| done))
    }

    /// Programs one buffered logical page, merging in its old contents when the buffer holds
    /// only part (under sub-page mapping, alone in a unit whose other slots are padding).
    pub(crate) fn program_entry(
        &mut self,
        at: Nanos,
        mut e: Entry<u32>,
    ) -> Result<Nanos, FtlError> {
        if self.map.slots > 1 {
            return self.program_group(at, vec![e]);
        }
        let mut t = self.foreground_gc(at)?;
        t = self.translate(t, e.key, true)?;
        let full = self.full_mask();
        let old = self.map.l2p[e.key as usize];
        if e.mask != full && old == LOST {
            // The rest of the unit is gone: merging would invent its bytes.
            return Err(FtlError::Lost { lpn: e.key });
        }
        if e.mask != full {
            match &mut e.fill {
                Fill::Bytes(b) => {
                    if old < LOST {
                        self.stats.rmw_reads += 1;
                        let (done, content, _) = self.read_mapped(t, e.key, old)?;
                        if !matches!(content, Content::Bytes) {
                            return Err(FtlError::PayloadMode { lpn: e.key });
                        }
                        t = done;
                        Self::merge(b, &self.scratch, e.mask);
                    } else {
                        Self::zero_missing(b, e.mask);
                    }
                }
                Fill::Token(fp) => {
                    let mut old_fp = 0;
                    if old < LOST {
                        self.stats.rmw_reads += 1;
                        let (done, content, _) = self.read_mapped(t, e.key, old)?;
                        t = done;
                        if let Content::Fingerprint(f) = content {
                            old_fp = f;
                        }
                    }
                    *fp = fold(old_fp, *fp, e.mask);
                }
            }
        }
        let seq = self.map.take_seq();
        let payload = match &e.fill {
            Fill::Bytes(b) => Payload::Bytes(b),
            Fill::Token(fp) => Payload::Fingerprint(*fp),
        };
        let record = Record {
            kind: Kind::Data,
            key: e.key,
            seq,
            payload_crc: payload_crc(payload),
            slots: Slots::NONE,
        };
        let (vpa, done) = self.fml.write(t, DATA_STREAM, payload, &record.encode())?;
        self.map.wrote(vpa.0, &record);
        self.stats.data_units_written += 1;
        if old < LOST {
            self.fml.invalidate(Vpa(old));
        }
        self.map.l2p[e.key as usize] = vpa.0;
        self.buf.recycle(e);
        Ok(done)
    }

    pub(crate) fn merge(dst: &mut [u8], old: &[u8], mask: u64) {
        let s = SECTOR_BYTES as usize;
        for i in 0..dst.len() / s {
            if mask & (1 << i) == 0 {
                dst[i * s..(i + 1) * s].copy_from_slice(&old[i * s..(i + 1) * s]);
            }
        }
    }

    pub(crate) fn zero_missing(dst: &mut [u8], mask: u64) {
        let s = SECTOR_BYTES as usize;
        for i in 0..dst.len() / s {
            if mask & (1 << i) == 0 {
                dst[i * s..(i + 1) * s].fill(0);
            }
        }
    }

    /// Writes every buffered unit to flash and syncs the device; returns when all are durable.
    pub fn flush(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        self.stats.flushes += 1;
        let mut done = at;
        while let Some((d, _)) = self.program_oldest(at)? {
            done = done.max(d);
        }
        while let Some(r) = self.inflight.pop() {
            done = done.max(r.0);
        }
        self.fml.flash_mut().sync()?;
        Ok(done)
    }
}
