//! fsck of the in-memory state (which, right after a mount, is the on-disk state): the
//! bitmaps agree with what inodes reference, no block is referenced twice, every directory
//! entry names an inode in use of the right kind whose parent is that directory, every inode
//! but the root has exactly one entry and the entries form a tree from the root, sizes fit the
//! block maps, and the free counts agree with the bitmaps.

use flash::Flash;
use vfs::{FileKind, ROOT};

use crate::inode::leaves_needed;
use crate::{BlockFs, MetaOwner};

/// At most this many problems are listed; the rest are counted.
const LIST_MAX: usize = 50;

struct Found {
    list: Vec<String>,
    more: usize,
}

impl Found {
    fn push(&mut self, p: String) {
        if self.list.len() < LIST_MAX {
            self.list.push(p);
        } else {
            self.more += 1;
        }
    }
    fn done(mut self) -> Vec<String> {
        if self.more > 0 {
            self.list
                .push(format!("... and {} more problems", self.more));
        }
        self.list
    }
}

const FIXED: u32 = u32::MAX;

impl<F: Flash> BlockFs<F> {
    pub(crate) fn check_state(&self) -> Vec<String> {
        let mut f = Found {
            list: Vec::new(),
            more: 0,
        };
        let owner = self.check_maps(&mut f);
        self.check_bitmaps(&owner, &mut f);
        self.check_tree(&mut f);
        for p in self.windows.check(&self.block_map) {
            f.push(p);
        }
        f.done()
    }

    /// Claims every block an inode references; returns the owner of each block.
    fn check_maps(&self, f: &mut Found) -> Vec<u32> {
        let l = &self.sb.layout;
        let bs = l.block_bytes as u64;
        let mut owner = vec![0u32; l.blocks as usize];
        owner[..l.meta_zone.start as usize].fill(FIXED);
        let mut claim = |b: u32, ino: u32, f: &mut Found| {
            let o = &mut owner[b as usize];
            match *o {
                0 => *o = ino,
                FIXED => f.push(format!("inode {ino} references fixed metadata block {b}")),
                other => f.push(format!(
                    "block {b} is referenced by inodes {other} and {ino}"
                )),
            }
        };
        let mut inos: Vec<u32> = self.inodes.keys().copied().collect();
        inos.sort_unstable();
        for ino in inos {
            let i = &self.inodes[&ino];
            let zone = match i.kind {
                FileKind::File => l.data_zone,
                FileKind::Dir => l.meta_zone,
                FileKind::Symlink | FileKind::Special(_) => {
                    unreachable!("blockfs makes no symbolic links or special files")
                }
            };
            let mut end = 0u64;
            for e in &i.extents {
                if e.len == 0 || (e.logical as u64) < end {
                    f.push(format!("inode {ino}: extents out of order at {e:?}"));
                }
                end = e.logical as u64 + e.len as u64;
                if !zone.holds(e.start, e.len) {
                    f.push(format!("inode {ino}: extent {e:?} outside its zone"));
                    continue;
                }
                for b in e.start..e.start + e.len {
                    claim(b, ino, f);
                }
            }
            for (k, &leaf) in i.leaves.iter().enumerate() {
                if !l.meta_zone.contains(leaf) {
                    f.push(format!(
                        "inode {ino}: extent block {leaf} outside the meta zone"
                    ));
                    continue;
                }
                claim(leaf, ino, f);
                let want = MetaOwner::Leaf {
                    ino,
                    index: k as u32,
                };
                if self.owners.get(&leaf) != Some(&want) {
                    f.push(format!(
                        "extent block {leaf} of inode {ino} not known as such"
                    ));
                }
            }
            if leaves_needed(i.extents.len(), l.inode_bytes, l.block_bytes) != Some(i.leaves.len())
            {
                f.push(format!(
                    "inode {ino}: {} extents in {} extent blocks",
                    i.extents.len(),
                    i.leaves.len()
                ));
            }
            self.check_size(ino, bs, f);
            if !self.inode_map.get(ino) {
                f.push(format!(
                    "inode {ino} is in use but free in the inode bitmap"
                ));
            }
        }
        owner
    }

    /// Sizes fit the block maps: a file maps no block past its size, a directory's size is
    /// its blocks, with no holes.
    fn check_size(&self, ino: u32, bs: u64, f: &mut Found) {
        let i = &self.inodes[&ino];
        match i.kind {
            FileKind::File => {
                if i.mapped_end() as u64 > i.size.div_ceil(bs) {
                    f.push(format!(
                        "inode {ino}: blocks mapped up to block {} past its size {}",
                        i.mapped_end(),
                        i.size
                    ));
                }
            }
            FileKind::Dir => {
                let n = self.dirs.get(&ino).map_or(0, |d| d.blocks.len()) as u64;
                if i.size != n * bs || i.data_blocks() != n || i.mapped_end() as u64 != n {
                    f.push(format!(
                        "directory {ino}: size {} for {n} directory blocks ({} mapped)",
                        i.size,
                        i.data_blocks()
                    ));
                }
                for index in 0..n as u32 {
                    let Some(p) = i.map(index) else { continue };
                    if self.owners.get(&p) != Some(&MetaOwner::Dir { ino, index }) {
                        f.push(format!(
                            "directory block {p} of inode {ino} not known as such"
                        ));
                    }
                }
            }
            FileKind::Symlink | FileKind::Special(_) => {
                unreachable!("blockfs makes no symbolic links or special files")
            }
        }
    }

    fn check_bitmaps(&self, owner: &[u32], f: &mut Found) {
        let l = &self.sb.layout;
        for (b, &o) in owner.iter().enumerate() {
            let b = b as u32;
            match (o != 0, self.block_map.get(b)) {
                (true, false) if o == FIXED => f.push(format!(
                    "fixed metadata block {b} is free in the block bitmap"
                )),
                (true, false) => f.push(format!(
                    "block {b} of inode {o} is free in the block bitmap"
                )),
                (false, true) => f.push(format!(
                    "block {b} is in use in the block bitmap but nothing references it"
                )),
                _ => {}
            }
        }
        let used = |z: crate::layout::Region| self.block_map.count_set(z.start, z.end()) as u32;
        if self.free_data != l.data_zone.len - used(l.data_zone)
            || self.free_meta != l.meta_zone.len - used(l.meta_zone)
        {
            f.push("free block counts disagree with the block bitmap".into());
        }
        for ino in 1..l.inodes {
            if self.inode_map.get(ino) && !self.inodes.contains_key(&ino) {
                f.push(format!(
                    "inode {ino} is in use in the inode bitmap but does not exist"
                ));
            }
        }
        if !self.inode_map.get(0) {
            f.push("inode 0 is not reserved".into());
        }
        if self.free_inodes != l.inodes - self.inode_map.count_set(0, l.inodes) as u32 {
            f.push("free inode count disagrees with the inode bitmap".into());
        }
    }

    /// Directory entries and the tree they form.
    fn check_tree(&self, f: &mut Found) {
        let root = ROOT as u32;
        match self.inodes.get(&root) {
            Some(r) if r.kind == FileKind::Dir && self.dirs.contains_key(&root) => {
                if r.parent != root {
                    f.push(format!("the root's parent is {}", r.parent));
                }
            }
            _ => {
                f.push("no root directory".into());
                return;
            }
        }
        let bs = self.bs() as usize;
        let mut refs: rustc_hash::FxHashMap<u32, u32> = Default::default();
        let mut dirs: Vec<u32> = self.dirs.keys().copied().collect();
        dirs.sort_unstable();
        for d in dirs {
            let dir = &self.dirs[&d];
            if !self.inodes.contains_key(&d) {
                f.push(format!(
                    "directory contents for inode {d}, which does not exist"
                ));
            }
            let mut count = 0;
            for (index, block) in dir.blocks.iter().enumerate() {
                let used: usize = 16 + block.iter().map(|e| 6 + e.name.len()).sum::<usize>();
                if used != dir.used[index] || used > bs {
                    f.push(format!("directory {d} block {index}: {used} bytes used"));
                }
                for e in block {
                    count += 1;
                    *refs.entry(e.ino).or_default() += 1;
                    if dir.index.get(&e.name) != Some(&(e.ino, index as u32)) {
                        f.push(format!("directory {d}: index disagrees on {:?}", e.name));
                    }
                    match self.inodes.get(&e.ino) {
                        None => f.push(format!(
                            "directory {d}: entry {:?} names inode {}, which is not in use",
                            e.name, e.ino
                        )),
                        Some(i) if i.kind != e.kind => f.push(format!(
                            "directory {d}: entry {:?} says {:?}, inode {} is a {:?}",
                            e.name, e.kind, e.ino, i.kind
                        )),
                        Some(i) if i.parent != d => f.push(format!(
                            "directory {d}: entry {:?} names inode {} whose parent is {}",
                            e.name, e.ino, i.parent
                        )),
                        _ => {}
                    }
                }
            }
            if count != dir.index.len() {
                f.push(format!(
                    "directory {d}: {count} entries, {} indexed",
                    dir.index.len()
                ));
            }
        }
        let mut inos: Vec<u32> = self.inodes.keys().copied().collect();
        inos.sort_unstable();
        for &ino in &inos {
            let n = refs.get(&ino).copied().unwrap_or(0);
            let want = if ino == root { 0 } else { 1 };
            if n != want {
                f.push(format!("inode {ino} has {n} directory entries"));
            }
        }
        // Reachability: with one entry per inode and parents agreeing, anything the walk from
        // the root does not reach hangs in a cycle.
        let mut seen = rustc_hash::FxHashSet::default();
        let mut stack = vec![root];
        while let Some(d) = stack.pop() {
            if !seen.insert(d) {
                continue;
            }
            if let Some(dir) = self.dirs.get(&d) {
                stack.extend(
                    dir.index
                        .values()
                        .map(|&(i, _)| i)
                        .filter(|i| self.dirs.contains_key(i)),
                );
            }
        }
        let unreachable = self
            .dirs
            .keys()
            .filter(|d| !seen.contains(d) && self.inodes.contains_key(d))
            .count();
        if unreachable > 0 {
            f.push(format!(
                "{unreachable} directories are not reachable from the root"
            ));
        }
    }
}
