//! Ganging physical pages into write units (virtual pages) and blocks into virtual erase blocks
//! (super-blocks), as RawSSD does (OSSD-13 V-H) and p-OFTL's static remapping does (POFTL-14
//! III-A). The FML works only in these units; see [`crate::Gang`] for the layout.

use crate::{
    BlockAddr, BlockInfo, Content, DeviceConfig, DieId, Flash, FlashError, Nanos, PageAddr,
    Payload, ProgramOp, ReadOp,
};

/// Address of one write unit: `superblock * units_per_superblock + offset`. Within a
/// super-block, offset `u` lies in parallel unit `u % width` at page row `u / width`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vpa(pub u32);

impl Vpa {
    /// No write unit (a sentinel; never a valid address).
    pub const NONE: Vpa = Vpa(u32::MAX);
}

/// Precomputed layout of a gang over a geometry.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Bytes of one write unit.
    pub write_unit_bytes: u32,
    /// Write units in one super-block (parallel units per super-block times pages per block).
    pub units_per_superblock: u32,
    /// Super-blocks on the device.
    pub superblocks: u32,
    width: u32,
    groups: u32,
    die_groups: u32,
    dies_per_unit: u32,
    planes_per_unit: u32,
    page_size: u32,
}

impl Layout {
    /// The layout of a device's gang over its geometry.
    pub fn new(c: &DeviceConfig) -> Self {
        let g = &c.geometry;
        let gang = &c.gang;
        Layout {
            write_unit_bytes: gang.write_unit_bytes(g),
            units_per_superblock: gang.units_per_superblock_total(g),
            superblocks: gang.superblocks(g),
            width: gang.units_per_superblock,
            groups: gang.parallel_units(g) / gang.units_per_superblock,
            die_groups: g.dies() / gang.dies_per_unit,
            dies_per_unit: gang.dies_per_unit,
            planes_per_unit: gang.planes_per_unit,
            page_size: g.page_size_bytes,
        }
    }

    /// The super-block a write unit lies in.
    pub fn superblock_of(&self, v: Vpa) -> u32 {
        v.0 / self.units_per_superblock
    }
    /// The offset of a write unit within its super-block (the order it is programmed in).
    pub fn offset_of(&self, v: Vpa) -> u32 {
        v.0 % self.units_per_superblock
    }
    /// The write unit at `offset` in `superblock`.
    pub fn vpa(&self, superblock: u32, offset: u32) -> Vpa {
        Vpa(superblock * self.units_per_superblock + offset)
    }
    /// Physical pages in one write unit (dies per unit times planes per unit).
    pub fn pages_per_unit(&self) -> u32 {
        self.dies_per_unit * self.planes_per_unit
    }

    /// The `i`-th physical page of a write unit.
    pub fn page(&self, v: Vpa, i: u32) -> PageAddr {
        let sb = self.superblock_of(v);
        let off = self.offset_of(v);
        let (group, block) = (sb % self.groups, sb / self.groups);
        let pu = group * self.width + off % self.width;
        let (plane_group, die_group) = (pu / self.die_groups, pu % self.die_groups);
        let die = die_group * self.dies_per_unit + i / self.planes_per_unit;
        let plane = plane_group * self.planes_per_unit + i % self.planes_per_unit;
        PageAddr {
            die: DieId(die),
            plane,
            block,
            page: off / self.width,
        }
    }

    /// The write unit a physical page belongs to, if any (a search over the super-blocks:
    /// for tools such as the torture harness, not for hot paths).
    pub fn vpa_of(&self, page: PageAddr) -> Option<Vpa> {
        let block = page.block_addr();
        let sb = (0..self.superblocks).find(|&sb| self.blocks(sb).any(|b| b == block))?;
        (0..self.units_per_superblock)
            .map(|off| self.vpa(sb, off))
            .find(|&v| (0..self.pages_per_unit()).any(|i| self.page(v, i) == page))
    }

    /// The physical blocks of a super-block.
    pub fn blocks(&self, superblock: u32) -> impl Iterator<Item = BlockAddr> + '_ {
        let per_unit = self.pages_per_unit();
        (0..self.width).flat_map(move |u| {
            (0..per_unit).map(move |i| self.page(self.vpa(superblock, u), i).block_addr())
        })
    }
}

/// A device seen in write units and super-blocks.
#[derive(Clone)]
pub struct Ganged<F: Flash> {
    flash: F,
    layout: Layout,
    scratch: Vec<BlockAddr>,
}

impl<F: Flash> Ganged<F> {
    /// Views a device through the gang of its configuration.
    pub fn new(flash: F) -> Self {
        let layout = Layout::new(flash.config());
        Ganged {
            flash,
            layout,
            scratch: Vec::new(),
        }
    }

    /// The gang layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The device below.
    pub fn flash(&self) -> &F {
        &self.flash
    }
    /// The device below, for fault injection and syncs.
    pub fn flash_mut(&mut self) -> &mut F {
        &mut self.flash
    }
    /// Hands the device back.
    pub fn into_flash(self) -> F {
        self.flash
    }

    /// Programs one write unit. `Bytes` must be a whole write unit; the OOB record goes into the
    /// spare area of the unit's first physical page.
    pub fn program(
        &mut self,
        at: Nanos,
        v: Vpa,
        payload: Payload<'_>,
        oob: &[u8],
    ) -> Result<Nanos, FlashError> {
        let l = self.layout;
        let n = l.pages_per_unit();
        if let Payload::Bytes(b) = payload {
            if b.len() != l.write_unit_bytes as usize {
                return Err(FlashError::Size {
                    what: "write unit",
                    addr: l.page(v, 0),
                    got: b.len(),
                    expected: l.write_unit_bytes as usize,
                });
            }
        }
        let ps = l.page_size as usize;
        let op = |i: u32| ProgramOp {
            addr: l.page(v, i),
            payload: match payload {
                Payload::Bytes(b) => Payload::Bytes(&b[i as usize * ps..(i as usize + 1) * ps]),
                fp => fp,
            },
            oob: if i == 0 { oob } else { &[] },
        };
        if n == 1 {
            return self.flash.program(at, &[op(0)]);
        }
        let ops: Vec<ProgramOp<'_>> = (0..n).map(op).collect();
        self.flash.program(at, &ops)
    }

    /// Reads one write unit. `data` is a whole write unit, or empty to read only the OOB record
    /// (from the first physical page).
    #[expect(
        clippy::unwrap_used,
        reason = "the caller's OOB buffer is taken exactly once, for the unit's first page (i == 0)"
    )]
    pub fn read(
        &mut self,
        at: Nanos,
        v: Vpa,
        data: &mut [u8],
        oob: &mut [u8],
    ) -> Result<(Nanos, Content), FlashError> {
        let l = self.layout;
        if data.is_empty() || l.pages_per_unit() == 1 {
            let mut ops = [ReadOp::new(l.page(v, 0), data, oob)];
            let done = self.flash.read(at, &mut ops)?;
            return Ok((done, ops[0].content));
        }
        if data.len() != l.write_unit_bytes as usize {
            return Err(FlashError::Size {
                what: "write unit read buffer",
                addr: l.page(v, 0),
                got: data.len(),
                expected: l.write_unit_bytes as usize,
            });
        }
        let ps = l.page_size as usize;
        let mut no_oob: Vec<[u8; 0]> = vec![[]; l.pages_per_unit() as usize];
        let mut ops: Vec<ReadOp<'_>> = Vec::with_capacity(l.pages_per_unit() as usize);
        let mut oob = Some(oob);
        for (i, (chunk, empty)) in data.chunks_mut(ps).zip(no_oob.iter_mut()).enumerate() {
            let o: &mut [u8] = if i == 0 { oob.take().unwrap() } else { empty };
            ops.push(ReadOp::new(l.page(v, i as u32), chunk, o));
        }
        let done = self.flash.read(at, &mut ops)?;
        Ok((done, ops[0].content))
    }

    /// Reads one write unit's OOB record (from its first page) and checks that every other
    /// page of the unit was programmed and reads (their bytes are not transferred): a unit
    /// whose program power cut part-way (docs/FORMAT.md, "Recovery") fails as uncorrectable,
    /// naming its first missing or unreadable page, though its record reads back whole. The
    /// same as an OOB-only [`Self::read`] on one-page units.
    pub fn read_record_whole(
        &mut self,
        at: Nanos,
        v: Vpa,
        oob: &mut [u8],
    ) -> Result<(Nanos, Content), FlashError> {
        let l = self.layout;
        let mut ops: Vec<ReadOp<'_>> = Vec::with_capacity(l.pages_per_unit() as usize);
        ops.push(ReadOp::new(l.page(v, 0), &mut [], oob));
        ops.extend((1..l.pages_per_unit()).map(|i| ReadOp::new(l.page(v, i), &mut [], &mut [])));
        let done = self.flash.read(at, &mut ops)?;
        let content = ops[0].content;
        if content != Content::Erased {
            if let Some(missing) = ops.iter().find(|r| r.content == Content::Erased) {
                return Err(FlashError::Uncorrectable {
                    addr: missing.addr,
                    bit_errors: 0,
                });
            }
        }
        Ok((done, content))
    }

    /// Erases a whole super-block.
    pub fn erase(&mut self, at: Nanos, superblock: u32) -> Result<Nanos, FlashError> {
        let mut blocks = std::mem::take(&mut self.scratch);
        blocks.clear();
        blocks.extend(self.layout.blocks(superblock));
        let r = self.flash.erase(at, &blocks);
        self.scratch = blocks;
        r
    }

    /// Combined state of a super-block's blocks: the highest erase count, bad if any is bad,
    /// and the next write unit (from its first parallel unit's write pointer).
    pub fn superblock_info(&self, superblock: u32) -> BlockInfo {
        let mut info = BlockInfo::default();
        for (i, b) in self.layout.blocks(superblock).enumerate() {
            let bi = self.flash.block_info(b);
            info.erase_count = info.erase_count.max(bi.erase_count);
            info.bad |= bi.bad;
            info.factory_bad |= bi.factory_bad;
            if i == 0 {
                info.next_page = bi.next_page;
            }
        }
        info
    }

    /// Marks every block of a super-block bad.
    pub fn retire(&mut self, superblock: u32) -> Result<(), FlashError> {
        let blocks: Vec<BlockAddr> = self.layout.blocks(superblock).collect();
        for b in blocks {
            if !self.flash.block_info(b).bad {
                self.flash.mark_bad(b)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{preset, Nand};
    use std::collections::HashSet;

    #[test]
    fn layout_covers_every_page_exactly_once() {
        for name in ["tiny", "rawssd", "poftl", "nandsim-128m"] {
            let c = preset(name).unwrap();
            let l = Layout::new(&c);
            let mut seen = HashSet::new();
            // Check a sample of super-blocks fully (all of them for small devices).
            let step = (l.superblocks / 64).max(1);
            for sb in (0..l.superblocks).step_by(step as usize) {
                for off in 0..l.units_per_superblock {
                    for i in 0..l.pages_per_unit() {
                        let p = l.page(l.vpa(sb, off), i);
                        c.geometry.check_page(p).unwrap();
                        assert!(seen.insert(p), "{name}: {p} mapped twice");
                    }
                }
            }
            if step == 1 {
                assert_eq!(seen.len() as u64, c.geometry.pages(), "{name}");
            }
        }
    }

    #[test]
    fn consecutive_units_rotate_over_channels() {
        let c = preset("rawssd").unwrap();
        let l = Layout::new(&c);
        let channels: HashSet<u32> = (0..4)
            .flat_map(|u| (0..4).map(move |i| (u, i)))
            .map(|(u, i)| c.geometry.channel_of(l.page(l.vpa(0, u), i).die))
            .collect();
        assert_eq!(
            channels.len(),
            8,
            "four 16 KiB units of a virtual erase block use all buses"
        );
    }

    #[test]
    fn unit_round_trip_and_superblock_erase() {
        let c = preset("rawssd").unwrap();
        let mut g = Ganged::new(Nand::in_memory(c).unwrap());
        let data: Vec<u8> = (0..16384u32).map(|i| (i * 7) as u8).collect();
        let v = g.layout().vpa(3, 0);
        g.program(0, v, Payload::Bytes(&data), b"rec").unwrap();
        let mut out = vec![0u8; 16384];
        let mut oob = [0u8; 3];
        let (_, content) = g.read(0, v, &mut out, &mut oob).unwrap();
        assert_eq!(content, Content::Bytes);
        assert_eq!(out, data);
        assert_eq!(&oob, b"rec");
        g.erase(0, 3).unwrap();
        let (_, content) = g.read(0, v, &mut [], &mut oob).unwrap();
        assert_eq!(content, Content::Erased);
        assert_eq!(g.superblock_info(3).erase_count, 1);
    }
}
