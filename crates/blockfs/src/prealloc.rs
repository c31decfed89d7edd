//! Per-file preallocation windows, after ext4's mballoc: once a file is past
//! [`STREAM_BLOCKS`] blocks, an append that allocates also sets aside the free blocks after it
//! (twice the file's size, at most `prealloc_max_bytes`) for the file's next appends. Windows
//! live in memory only: the on-disk bitmap never sees them, other files' allocations skip them,
//! and they are given back when the file is deleted or truncated, when more than
//! `prealloc_windows` files hold one (the oldest first), and when space runs short. Small files
//! get none and are laid out one after another by the rotor, as ext4's locality groups do.

use std::collections::VecDeque;

use flash::Flash;
use rustc_hash::FxHashMap;

use crate::alloc::{free_run, Bitmap};
use crate::BlockFs;

/// A file gets a window once it holds this many blocks (ext4's `mb_stream_req` default).
pub const STREAM_BLOCKS: u32 = 16;

/// Blocks `[start, start + len)` set aside for logical blocks `logical..` of one file.
#[derive(Clone, Copy, Debug)]
struct Window {
    logical: u32,
    start: u32,
    len: u32,
}

/// Every window, and the blocks they hold.
pub(crate) struct Windows {
    by_ino: FxHashMap<u32, Window>,
    /// Inodes in the order their windows opened (may name windows since given back).
    order: VecDeque<u32>,
    pub(crate) reserved: Bitmap,
    pub(crate) reserved_blocks: u32,
}

impl Windows {
    pub(crate) fn new(blocks: u32) -> Self {
        Windows {
            by_ino: FxHashMap::default(),
            order: VecDeque::new(),
            reserved: Bitmap::new(blocks),
            reserved_blocks: 0,
        }
    }

    fn release(&mut self, ino: u32) {
        if let Some(w) = self.by_ino.remove(&ino) {
            for b in w.start..w.start + w.len {
                self.reserved.set(b, false);
            }
            self.reserved_blocks -= w.len;
        }
    }

    /// Problems with the windows against the block bitmap (fsck).
    pub(crate) fn check(&self, map: &Bitmap) -> Vec<String> {
        let mut found = Vec::new();
        let mut total = 0;
        for (ino, w) in &self.by_ino {
            total += w.len;
            if (w.start..w.start + w.len).any(|b| map.get(b) || !self.reserved.get(b)) {
                found.push(format!(
                    "preallocation window of inode {ino} overlaps used blocks"
                ));
            }
        }
        if total != self.reserved_blocks {
            found.push("preallocated block count disagrees with the windows".into());
        }
        found
    }
}

impl<F: Flash> BlockFs<F> {
    pub(crate) fn release_window(&mut self, ino: u32) {
        self.windows.release(ino);
    }

    /// Gives every window back (space is short).
    pub(crate) fn release_all_windows(&mut self) {
        let all: Vec<u32> = self.windows.by_ino.keys().copied().collect();
        for ino in all {
            self.windows.release(ino);
        }
        self.windows.order.clear();
    }

    /// Takes up to `want` blocks for logical block `l` of `f` from its window, if the window
    /// continues there.
    pub(crate) fn take_from_window(&mut self, f: u32, l: u32, want: u32) -> Option<(u32, u32)> {
        let w = self.windows.by_ino.get_mut(&f)?;
        if w.logical != l {
            return None;
        }
        let (start, n) = (w.start, want.min(w.len));
        w.logical += n;
        w.start += n;
        w.len -= n;
        if w.len == 0 {
            self.windows.by_ino.remove(&f);
        }
        self.windows.reserved_blocks -= n;
        for b in start..start + n {
            self.windows.reserved.set(b, false);
        }
        self.claim_run(start, n, f);
        Some((start, n))
    }

    /// Blocks of the window file `f` would get now (0: none); an allocation for it prefers a
    /// free run with room for the window after it, as mballoc's normalized requests do.
    pub(crate) fn window_want(&self, f: u32) -> u32 {
        let max = (self.cfg.prealloc_max_bytes / self.bs()) as u32;
        let blocks = self.inodes[&f].data_blocks().min(u32::MAX as u64) as u32;
        if blocks < STREAM_BLOCKS {
            return 0;
        }
        blocks.saturating_mul(2).min(max)
    }

    /// Opens a window for `f`'s logical blocks from `logical` on, at the free blocks from
    /// `after` on.
    pub(crate) fn open_window(&mut self, f: u32, logical: u32, after: u32) {
        let want = self.window_want(f);
        let zone = self.sb.layout.data_zone;
        if want == 0 || self.windows.by_ino.contains_key(&f) || !zone.contains(after) {
            return;
        }
        let len = free_run(
            &self.block_map,
            &self.windows.reserved,
            after,
            want,
            zone.end(),
        );
        if len == 0 {
            return;
        }
        while self.windows.by_ino.len() >= self.cfg.prealloc_windows.max(1) as usize {
            match self.windows.order.pop_front() {
                Some(old) => self.windows.release(old),
                None => break,
            }
        }
        if self.windows.order.len() > 4 * self.cfg.prealloc_windows as usize + 16 {
            let live = &self.windows.by_ino;
            self.windows.order.retain(|i| live.contains_key(i));
        }
        for b in after..after + len {
            self.windows.reserved.set(b, true);
        }
        self.windows.reserved_blocks += len;
        self.windows.by_ino.insert(
            f,
            Window {
                logical,
                start: after,
                len,
            },
        );
        self.windows.order.push_back(f);
    }
}
