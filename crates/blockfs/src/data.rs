//! File data: reads, writes and truncation, in whole blocks as a block file system does.
//!
//! A write covering part of a block that already holds data reads the block first and merges
//! (there is no page cache to find it in); bytes past the old end of file are zeroed in the
//! merge, and a truncation that ends inside a block zeroes the rest of that block on disk, so
//! a file grown later reads zeros there (ext4's `block_truncate_page`). New blocks come from
//! the goal-based allocator ([`crate::alloc`]).

use flash::{Flash, Nanos};
use ftl::{Data, ReadOut};
use vfs::{FileData, FsError, ReadInto};

use crate::layout::DataMode;
use crate::{device, live, BlockFs, Zone};

/// Logical block `l` of file `f` should be mapped (the caller mapped the range) but is not.
fn unmapped(f: u32, l: u32) -> FsError {
    FsError::Corrupted(format!("file {f}: block {l} is not mapped"))
}

impl<F: Flash> BlockFs<F> {
    /// Fixes the file system's data mode at its first data write; refuses the other mode.
    fn claim_data_mode(&mut self, data: &FileData<'_>, f: u32) -> Result<(), FsError> {
        let want = match data {
            FileData::Bytes(_) => DataMode::Bytes,
            FileData::Token(_) => DataMode::Tokens,
        };
        match self.sb.data_mode {
            DataMode::Unset => {
                self.sb.data_mode = want;
                self.touch(0, Some(f));
                Ok(())
            }
            m if m == want => Ok(()),
            m => Err(FsError::Invalid(format!(
                "this file system holds file data as {m:?}; a write as {want:?} could not share \
                 the device's write units with it"
            ))),
        }
    }

    /// Maps every hole of logical blocks `[b0, b1)` of file `f` to new blocks; true if any.
    /// All or nothing: on failure nothing stays allocated.
    fn map_range(&mut self, f: u32, b0: u32, b1: u32) -> Result<bool, FsError> {
        let holes: Vec<(u32, u32)> = self.inodes[&f]
            .segments(b0, b1)
            .into_iter()
            .filter(|s| s.phys.is_none())
            .map(|s| (s.logical, s.len))
            .collect();
        let missing: u64 = holes.iter().map(|h| h.1 as u64).sum();
        if missing == 0 {
            return Ok(false);
        }
        if missing > (self.free_data - self.windows.reserved_blocks) as u64 {
            self.release_all_windows();
        }
        if missing > self.free_data as u64 {
            return Err(FsError::NoSpace(format!(
                "{missing} blocks wanted, {} free",
                self.free_data
            )));
        }
        let mut added = Vec::new();
        let mut changed = usize::MAX;
        for (mut l, len) in holes {
            let end = l + len;
            while l < end {
                let (s, n) = match self.take_from_window(f, l, end - l) {
                    Some(run) => run,
                    None => {
                        self.release_window(f);
                        let goal = self.inodes[&f].goal_for(l);
                        let prefer = (end - l).saturating_add(self.window_want(f));
                        self.alloc_run(Zone::Data, goal, end - l, prefer, f)
                            .ok_or_else(|| {
                                FsError::Corrupted(format!(
                                    "{} free data blocks counted but none found",
                                    self.free_data
                                ))
                            })?
                    }
                };
                let c = live(&mut self.inodes, f, "inode")?.insert(l, s, n);
                changed = changed.min(c);
                added.push((l, s, n));
                l += n;
            }
        }
        if let Err(e) = self.fit_leaves(f, changed) {
            let i = live(&mut self.inodes, f, "inode")?;
            for &(l, _, n) in &added {
                i.unmap(l, l + n);
            }
            let runs: Vec<(u32, u32)> = added.iter().map(|&(_, s, n)| (s, n)).collect();
            self.free_runs(&runs, f);
            self.fit_leaves(f, 0)?;
            // Never written: nothing to discard.
            self.pending_discard.clear();
            return Err(e);
        }
        // An append: set blocks aside after it for the next one.
        if let Some(&(l, s, n)) = added.last() {
            if l + n == self.inodes[&f].mapped_end() {
                self.open_window(f, l + n, s + n);
            }
        }
        Ok(true)
    }

    /// Logical block `l` of `f` holds data that a partial write of it must keep.
    fn keeps_old(&self, f: u32, l: u32, old_size: u64) -> bool {
        (l as u64) * self.bs() < old_size && self.inodes[&f].map(l).is_some()
    }

    pub(crate) fn write_file(
        &mut self,
        f: u32,
        offset: u64,
        len: u64,
        data: FileData<'_>,
    ) -> Result<Nanos, FsError> {
        let at = self.now;
        let bs = self.bs();
        let end = offset
            .checked_add(len)
            .filter(|e| e.div_ceil(bs) < u32::MAX as u64)
            .ok_or_else(|| {
                FsError::Invalid(format!("write at {offset} beyond the largest file"))
            })?;
        let old_size = self.inodes[&f].size;
        if len > 0 {
            self.claim_data_mode(&data, f)?;
        }
        let (b0, b1) = ((offset / bs) as u32, end.div_ceil(bs) as u32);
        // Edge blocks written in part whose old contents must be merged in.
        let mut merge = Vec::new();
        if len > 0 {
            if !offset.is_multiple_of(bs) || (b1 == b0 + 1 && !end.is_multiple_of(bs)) {
                merge.push(b0);
            }
            if !end.is_multiple_of(bs) && b1 - 1 != b0 {
                merge.push(b1 - 1);
            }
            merge.retain(|&l| self.keeps_old(f, l, old_size));
        }
        let grew_map = len > 0 && self.map_range(f, b0, b1)?;
        let mut t = at;
        if len > 0 {
            t = self.write_blocks(f, (b0, b1), &merge, old_size, offset, data)?;
        }
        let i = live(&mut self.inodes, f, "inode")?;
        let grew = end > i.size;
        i.size = i.size.max(end);
        i.mtime = at;
        self.touch_inode(f, grew || grew_map);
        Ok(t)
    }

    /// Writes logical blocks `[b0, b1)` of `f` (all mapped): merged edge blocks, then the data.
    fn write_blocks(
        &mut self,
        f: u32,
        (b0, b1): (u32, u32),
        merge: &[u32],
        old_size: u64,
        offset: u64,
        data: FileData<'_>,
    ) -> Result<Nanos, FsError> {
        let at = self.now;
        let bs = self.bs();
        let mut ready = at;
        let mut buf = Vec::new();
        if let FileData::Bytes(src) = data {
            buf = vec![0u8; (b1 - b0) as usize * bs as usize];
            for &l in merge {
                let p = self.inodes[&f].map(l).ok_or_else(|| unmapped(f, l))?;
                let o = (l - b0) as usize * bs as usize;
                let dst = &mut buf[o..o + bs as usize];
                let done = self
                    .ftl
                    .read(at, p as u64 * bs, bs, ReadOut::Bytes(dst))
                    .map_err(device)?;
                ready = ready.max(done);
                // Whatever lies past the old end of file reads as zeros from now on.
                let keep = (old_size - l as u64 * bs).min(bs) as usize;
                dst[keep..].fill(0);
                self.stats.data_rmw_reads += 1;
            }
            let o = (offset - b0 as u64 * bs) as usize;
            buf[o..o + src.len()].copy_from_slice(src);
        } else {
            for &l in merge {
                let p = self.inodes[&f].map(l).ok_or_else(|| unmapped(f, l))?;
                self.fps.clear();
                let done = self
                    .ftl
                    .read(at, p as u64 * bs, bs, ReadOut::Fingerprints(&mut self.fps))
                    .map_err(device)?;
                ready = ready.max(done);
                self.stats.data_rmw_reads += 1;
            }
        }
        let mut done = ready;
        for s in self.inodes[&f].segments(b0, b1) {
            let p = s.phys.ok_or_else(|| unmapped(f, s.logical))?;
            let what = match data {
                FileData::Bytes(_) => {
                    let o = (s.logical - b0) as usize * bs as usize;
                    Data::Bytes(&buf[o..o + s.len as usize * bs as usize])
                }
                FileData::Token(tok) => Data::Token(tok),
            };
            let d = self
                .ftl
                .write(ready, p as u64 * bs, s.len as u64 * bs, what)
                .map_err(device)?;
            done = done.max(d);
            self.stats.data_blocks_written += s.len as u64;
        }
        Ok(done)
    }

    pub(crate) fn read_file(
        &mut self,
        f: u32,
        offset: u64,
        into: ReadInto<'_>,
    ) -> Result<(u64, Nanos), FsError> {
        let at = self.now;
        let bs = self.bs();
        let size = self.inodes[&f].size;
        if offset >= size || into.is_empty() {
            return Ok((0, at));
        }
        let n = into.len().min(size - offset);
        let (b0, b1) = ((offset / bs) as u32, (offset + n).div_ceil(bs) as u32);
        let segs = self.inodes[&f].segments(b0, b1);
        let mut done = at;
        match into {
            ReadInto::Bytes(out) => {
                if self.sb.data_mode == DataMode::Tokens && segs.iter().any(|s| s.phys.is_some()) {
                    return Err(FsError::Invalid(
                        "bytes asked of a file system holding fingerprints".into(),
                    ));
                }
                let mut buf = vec![0u8; (b1 - b0) as usize * bs as usize];
                for s in segs {
                    let Some(p) = s.phys else { continue };
                    let o = (s.logical - b0) as usize * bs as usize;
                    let dst = &mut buf[o..o + s.len as usize * bs as usize];
                    let d = self
                        .ftl
                        .read(at, p as u64 * bs, s.len as u64 * bs, ReadOut::Bytes(dst))
                        .map_err(device)?;
                    done = done.max(d);
                    self.stats.data_blocks_read += s.len as u64;
                }
                let o = (offset - b0 as u64 * bs) as usize;
                out[..n as usize].copy_from_slice(&buf[o..o + n as usize]);
            }
            ReadInto::Discard(_) => {
                for s in segs {
                    let Some(p) = s.phys else { continue };
                    self.fps.clear();
                    let d = self
                        .ftl
                        .read(
                            at,
                            p as u64 * bs,
                            s.len as u64 * bs,
                            ReadOut::Fingerprints(&mut self.fps),
                        )
                        .map_err(device)?;
                    done = done.max(d);
                    self.stats.data_blocks_read += s.len as u64;
                }
            }
        }
        Ok((n, done))
    }

    pub(crate) fn truncate_file(&mut self, f: u32, size: u64) -> Result<Nanos, FsError> {
        let at = self.now;
        let bs = self.bs();
        if size.div_ceil(bs) >= u32::MAX as u64 {
            return Err(FsError::Invalid(format!(
                "size {size} beyond the largest file"
            )));
        }
        let old = self.inodes[&f].size;
        let mut t = at;
        let mut map_changed = false;
        self.release_window(f);
        if size < old {
            let keep = size.div_ceil(bs) as u32;
            let (freed, changed) = live(&mut self.inodes, f, "inode")?.unmap(keep, u32::MAX);
            if !freed.is_empty() {
                map_changed = true;
                self.fit_leaves(f, changed)?;
                self.free_runs(&freed, f);
            }
            if !size.is_multiple_of(bs) {
                if let Some(p) = self.inodes[&f].map((size / bs) as u32) {
                    t = self.zero_tail(p, (size % bs) as usize, at)?;
                }
            }
        }
        let i = live(&mut self.inodes, f, "inode")?;
        i.size = size;
        i.mtime = at;
        self.touch_inode(f, size != old || map_changed);
        let d = self.issue_discards(at)?;
        Ok(t.max(d))
    }

    /// Zeroes block `p` from byte `keep` on (read, merge, write).
    fn zero_tail(&mut self, p: u32, keep: usize, at: Nanos) -> Result<Nanos, FsError> {
        let bs = self.bs();
        let off = p as u64 * bs;
        self.stats.data_rmw_reads += 1;
        self.stats.data_blocks_written += 1;
        if self.sb.data_mode == DataMode::Tokens {
            self.fps.clear();
            let r = self
                .ftl
                .read(at, off, bs, ReadOut::Fingerprints(&mut self.fps))
                .map_err(device)?;
            // The new contents' fingerprint: any value standing for "old head, zero tail".
            let token =
                flash::fingerprint::mix(self.fps.first().copied().unwrap_or(0) ^ keep as u64);
            return self
                .ftl
                .write(r, off, bs, Data::Token(token))
                .map_err(device);
        }
        let mut buf = vec![0u8; bs as usize];
        let r = self
            .ftl
            .read(at, off, bs, ReadOut::Bytes(&mut buf))
            .map_err(device)?;
        buf[keep..].fill(0);
        self.ftl
            .write(r, off, bs, Data::Bytes(&buf))
            .map_err(device)
    }
}
