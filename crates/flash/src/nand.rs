//! The NAND device model: physics and timing over a [`PageStore`].
//!
//! # Time model
//! Each die and each channel bus has a time at which it becomes free. A command issued at `at`:
//! - **program**: waits for its die, moves each page over the channel bus (waiting for the bus),
//!   then keeps the die busy for t_PROG;
//! - **read**: waits for its die, keeps it busy for t_R, then moves each page over the bus;
//!   the die stays busy until its page register is drained;
//! - **erase**: waits for its die, keeps it busy for t_BERS.
//!
//! Pages of one batch on the same die at the same page index in distinct planes share one
//! array operation (multi-plane); otherwise array operations on a die run one after another.
//! Dies work in parallel; dies on one channel share its bus. Commands are timed in the order
//! they are issued (a reservation model), so callers issue in time order.
//!
//! [`Scheduling`] decides what happens before a reservation that lies in a die's or bus's
//! future. `in-order` keeps one "free at" time per die and bus: a command waits for every
//! command issued before it, and a read holds its die while it waits for the bus. `backfill`
//! keeps each resource's busy intervals and gives a command the earliest gap at or after its
//! issue time that fits it whole (a read's die time and bus transfer, a program's transfer
//! and array time), so a command issued for later (the program of a read-modify-write, issued
//! when its read completes) no longer leaves the die idle for the commands issued after it.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::store::{MemStore, PageStore};
use crate::PayloadMode;
use crate::{
    BlockAddr, BlockInfo, Content, DeviceConfig, DeviceConfigError, Flash, FlashError, FlashStats,
    Nanos, Payload, ProgramOp, ReadOp, Scheduling,
};

/// Busy intervals kept per die or bus under [`Scheduling::Backfill`]; older ones are merged
/// into the floor (their gaps are no longer offered).
const KEPT_INTERVALS: usize = 32;

/// The busy intervals of one die or channel bus (backfill scheduling).
#[derive(Clone, Debug, Default)]
struct Timeline {
    /// The resource counts as busy before this time.
    floor: Nanos,
    /// Busy intervals after `floor`: sorted, disjoint, never touching.
    busy: Vec<(Nanos, Nanos)>,
}

impl Timeline {
    /// The earliest start at or after `at` of an idle gap `len` long.
    fn fit(&self, at: Nanos, len: Nanos) -> Nanos {
        let mut s = at.max(self.floor);
        for &(b, e) in &self.busy {
            if e <= s {
                continue;
            }
            if s + len <= b {
                return s;
            }
            s = e;
        }
        s
    }

    /// The end of the first busy interval overlapping `[s, e)`, if any.
    fn conflict(&self, s: Nanos, e: Nanos) -> Option<Nanos> {
        if s < self.floor {
            return Some(self.floor);
        }
        self.busy
            .iter()
            .find(|&&(b, x)| b < e && s < x)
            .map(|&(_, x)| x)
    }

    /// Marks `[s, e)` busy (it must be idle).
    fn reserve(&mut self, s: Nanos, e: Nanos) {
        if e <= s {
            return;
        }
        let i = self.busy.partition_point(|&(b, _)| b < s);
        self.busy.insert(i, (s, e));
        // Merge with the following and the preceding interval where they touch.
        if i + 1 < self.busy.len() && self.busy[i + 1].0 <= e {
            self.busy[i].1 = self.busy[i + 1].1.max(e);
            self.busy.remove(i + 1);
        }
        if i > 0 && self.busy[i - 1].1 >= s {
            self.busy[i - 1].1 = self.busy[i - 1].1.max(self.busy[i].1);
            self.busy.remove(i);
        }
        if self.busy.len() > KEPT_INTERVALS {
            let (_, end) = self.busy.remove(0);
            self.floor = self.floor.max(end);
        }
    }

    /// When the resource is free of every reservation.
    fn free_at(&self) -> Nanos {
        self.busy
            .last()
            .map_or(self.floor, |&(_, e)| e.max(self.floor))
    }
}

/// The simulated NAND device: enforces the [`Flash`] contract over a page store and times
/// every command (module documentation).
#[derive(Clone)]
pub struct Nand<S: PageStore = MemStore> {
    config: DeviceConfig,
    store: S,
    blocks: Vec<BlockInfo>,
    die_free: Vec<Nanos>,
    channel_free: Vec<Nanos>,
    /// Busy intervals per die and per channel ([`Scheduling::Backfill`] only).
    die_busy: Vec<Timeline>,
    channel_busy: Vec<Timeline>,
    stats: FlashStats,
}

impl Nand<MemStore> {
    /// A fresh in-memory device, every block erased, factory bad blocks drawn from the seed.
    pub fn in_memory(config: DeviceConfig) -> Result<Self, FlashError> {
        config.validate()?;
        let store = match config.payload {
            PayloadMode::Full => MemStore::new(config.geometry),
            PayloadMode::Timing => MemStore::timing_only(config.geometry),
        };
        Nand::open(config, store)
    }
}

impl<S: PageStore> Nand<S> {
    /// Opens a device over a store; a blank store is formatted (factory bad blocks drawn).
    pub fn open(config: DeviceConfig, mut store: S) -> Result<Self, FlashError> {
        config.validate()?;
        let g = config.geometry;
        let blocks = match store.load_blocks()? {
            Some(b) => {
                if b.len() != g.blocks() as usize {
                    return Err(FlashError::Config(DeviceConfigError::StoreBlocks {
                        store_blocks: b.len(),
                        geometry_blocks: g.blocks(),
                    }));
                }
                b
            }
            None => {
                let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0xBAD_B10C);
                let mut blocks = vec![BlockInfo::default(); g.blocks() as usize];
                for (i, b) in blocks.iter_mut().enumerate() {
                    if rng.gen_range(0..1_000_000) < config.factory_bad_ppm {
                        b.bad = true;
                        b.factory_bad = true;
                        store.put_block(i as u32, b)?;
                    }
                }
                blocks
            }
        };
        Ok(Nand {
            config,
            store,
            blocks,
            die_free: vec![0; g.dies() as usize],
            channel_free: vec![0; g.channels as usize],
            die_busy: vec![Timeline::default(); g.dies() as usize],
            channel_busy: vec![Timeline::default(); g.channels as usize],
            stats: FlashStats::default(),
        })
    }

    /// The page store below.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The OOB bytes page `page` holds now, read without a command: no time passes and no
    /// statistic moves (a test harness's look at what a fault is about to strike). `None` when
    /// the page is erased or out of range.
    pub fn peek_oob(&mut self, page: crate::PageAddr, oob: &mut [u8]) -> Option<()> {
        let g = self.config.geometry;
        g.check_page(page).ok()?;
        let bi = g.block_index(page.block_addr());
        if page.page >= self.blocks[bi as usize].next_page {
            return None;
        }
        self.store.get_page(bi, page.page, &mut [], oob).ok()?;
        Some(())
    }

    /// The payload and OOB bytes page `page` holds now, read without a command, as
    /// [`Nand::peek_oob`] (`data` one page long). `None` when the page is erased, out of range,
    /// or holds a fingerprint rather than bytes.
    pub fn peek_page(
        &mut self,
        page: crate::PageAddr,
        data: &mut [u8],
        oob: &mut [u8],
    ) -> Option<()> {
        let g = self.config.geometry;
        g.check_page(page).ok()?;
        let bi = g.block_index(page.block_addr());
        if page.page >= self.blocks[bi as usize].next_page {
            return None;
        }
        match self.store.get_page(bi, page.page, data, oob).ok()? {
            crate::Content::Bytes => Some(()),
            _ => None,
        }
    }

    /// Hands the page store back (to reopen the device over it).
    pub fn into_store(self) -> S {
        self.store
    }

    /// Bytes of memory the device model holds (block table plus stored contents).
    pub fn resident_bytes(&self) -> u64 {
        self.store.resident_bytes() + (self.blocks.len() * std::mem::size_of::<BlockInfo>()) as u64
    }

    fn block_mut(&mut self, b: BlockAddr) -> (u32, &mut BlockInfo) {
        let i = self.config.geometry.block_index(b);
        (i, &mut self.blocks[i as usize])
    }

    /// Times one die's share of a batch. `pages` are the page indexes (to detect multi-plane
    /// eligibility), `planes` their planes.
    fn array_ops(ops: impl Iterator<Item = (u32, u32)> + Clone) -> u64 {
        let n = ops.clone().count() as u64;
        let mut it = ops.clone();
        let Some((page0, _)) = it.next() else {
            return 0;
        };
        let same_page = ops.clone().all(|(p, _)| p == page0);
        let mut planes: u64 = 0;
        let mut distinct = true;
        for (_, plane) in ops {
            let bit = 1u64 << (plane % 64);
            distinct &= planes & bit == 0;
            planes |= bit;
        }
        if same_page && distinct {
            1
        } else {
            n
        }
    }

    /// Backfill: reserves a read of one die's pages (array time `array`, then `xfer` on the
    /// bus, the die held until the transfer ends); returns when the transfer ends.
    fn backfill_read(&mut self, d: usize, c: usize, at: Nanos, array: Nanos, xfer: Nanos) -> Nanos {
        let mut s = at;
        loop {
            s = self.die_busy[d].fit(s, array + xfer);
            let bus = self.channel_busy[c].fit(s + array, xfer);
            let end = bus + xfer;
            match self.die_busy[d].conflict(s, end) {
                Some(next) => s = next,
                None => {
                    self.die_busy[d].reserve(s, end);
                    self.channel_busy[c].reserve(bus, end);
                    self.die_free[d] = self.die_busy[d].free_at();
                    self.channel_free[c] = self.channel_busy[c].free_at();
                    return end;
                }
            }
        }
    }

    /// Backfill: reserves a program of one die's pages (`xfer` on the bus, the die held from
    /// the transfer's start, then `array` of program time); returns when the program ends.
    fn backfill_program(
        &mut self,
        d: usize,
        c: usize,
        at: Nanos,
        xfer: Nanos,
        array: Nanos,
    ) -> Nanos {
        let mut s = at;
        loop {
            s = self.die_busy[d].fit(s, xfer + array);
            let bus = self.channel_busy[c].fit(s, xfer);
            if bus == s {
                let end = s + xfer + array;
                self.die_busy[d].reserve(s, end);
                self.channel_busy[c].reserve(s, s + xfer);
                self.die_free[d] = self.die_busy[d].free_at();
                self.channel_free[c] = self.channel_busy[c].free_at();
                return end;
            }
            s = bus;
        }
    }

    /// Backfill: reserves `len` of die time (an erase); returns when it ends.
    fn backfill_die(&mut self, d: usize, at: Nanos, len: Nanos) -> Nanos {
        let s = self.die_busy[d].fit(at, len);
        self.die_busy[d].reserve(s, s + len);
        self.die_free[d] = self.die_busy[d].free_at();
        s + len
    }

    fn finish(&mut self, done: Nanos) -> Nanos {
        self.stats.busy_until_ns = self.stats.busy_until_ns.max(done);
        done
    }
}

impl<S: PageStore> Flash for Nand<S> {
    fn config(&self) -> &DeviceConfig {
        &self.config
    }

    fn read(&mut self, at: Nanos, ops: &mut [ReadOp<'_>]) -> Result<Nanos, FlashError> {
        let g = self.config.geometry;
        for op in ops.iter_mut() {
            g.check_page(op.addr)?;
            if !op.data.is_empty() && op.data.len() != g.page_size_bytes as usize {
                return Err(FlashError::Size {
                    what: "read buffer",
                    addr: op.addr,
                    got: op.data.len(),
                    expected: g.page_size_bytes as usize,
                });
            }
            let bi = g.block_index(op.addr.block_addr());
            op.corrected_bits = 0;
            op.content = if op.addr.page >= self.blocks[bi as usize].next_page {
                op.oob.fill(0xFF);
                op.data.fill(0xFF);
                Content::Erased
            } else {
                self.store.get_page(bi, op.addr.page, op.data, op.oob)?
            };
        }
        let t = self.config.timing;
        let mut done = at;
        for (i, op) in ops.iter().enumerate() {
            let die = op.addr.die;
            if ops[..i].iter().any(|o| o.addr.die == die) {
                continue;
            }
            let mine = || ops.iter().filter(move |o| o.addr.die == die);
            let n_array = Self::array_ops(mine().map(|o| (o.addr.page, o.addr.plane)));
            let d = die.0 as usize;
            let c = g.channel_of(die) as usize;
            if t.scheduling == Scheduling::Backfill {
                let mut xfer = 0;
                for o in mine() {
                    let bytes = (o.data.len() + o.oob.len()) as u32;
                    xfer += t.transfer_ns(bytes);
                    self.stats.bytes_transferred += bytes as u64;
                    self.stats.pages_read += 1;
                }
                let end = self.backfill_read(d, c, at + t.command_ns, t.read_ns * n_array, xfer);
                done = done.max(end);
                continue;
            }
            let mut now = (at + t.command_ns).max(self.die_free[d]) + t.read_ns * n_array;
            for o in mine() {
                let bytes = (o.data.len() + o.oob.len()) as u32;
                let start = now.max(self.channel_free[c]);
                now = start + t.transfer_ns(bytes);
                self.channel_free[c] = now;
                self.stats.bytes_transferred += bytes as u64;
                self.stats.pages_read += 1;
            }
            self.die_free[d] = now;
            done = done.max(now);
        }
        Ok(self.finish(done))
    }

    fn program(&mut self, at: Nanos, ops: &[ProgramOp<'_>]) -> Result<Nanos, FlashError> {
        let g = self.config.geometry;
        for op in ops {
            g.check_page(op.addr)?;
            if let Payload::Bytes(b) = op.payload {
                if b.len() != g.page_size_bytes as usize {
                    return Err(FlashError::Size {
                        what: "program data",
                        addr: op.addr,
                        got: b.len(),
                        expected: g.page_size_bytes as usize,
                    });
                }
            }
            if op.oob.len() > g.oob_size_bytes as usize {
                return Err(FlashError::Size {
                    what: "program OOB",
                    addr: op.addr,
                    got: op.oob.len(),
                    expected: g.oob_size_bytes as usize,
                });
            }
            let (bi, info) = self.block_mut(op.addr.block_addr());
            if info.bad {
                return Err(FlashError::BadBlock(op.addr.block_addr()));
            }
            if op.addr.page < info.next_page {
                return Err(FlashError::NotErased(op.addr));
            }
            if op.addr.page > info.next_page {
                return Err(FlashError::OutOfOrder {
                    addr: op.addr,
                    expected: info.next_page,
                });
            }
            info.next_page += 1;
            let epoch = info.erase_count;
            self.store
                .put_page(bi, op.addr.page, epoch, op.payload, op.oob)?;
            self.stats.pages_programmed += 1;
        }
        let t = self.config.timing;
        let mut done = at;
        for (i, op) in ops.iter().enumerate() {
            let die = op.addr.die;
            if ops[..i].iter().any(|o| o.addr.die == die) {
                continue;
            }
            let mine = || ops.iter().filter(move |o| o.addr.die == die);
            let n_array = Self::array_ops(mine().map(|o| (o.addr.page, o.addr.plane)));
            let d = die.0 as usize;
            let c = g.channel_of(die) as usize;
            if t.scheduling == Scheduling::Backfill {
                let mut xfer = 0;
                for o in mine() {
                    let bytes = g.page_size_bytes + o.oob.len() as u32;
                    xfer += t.transfer_ns(bytes);
                    self.stats.bytes_transferred += bytes as u64;
                }
                let array = t.program_ns * n_array;
                let end = self.backfill_program(d, c, at + t.command_ns, xfer, array);
                done = done.max(end);
                continue;
            }
            let mut now = (at + t.command_ns).max(self.die_free[d]);
            for o in mine() {
                let bytes = g.page_size_bytes + o.oob.len() as u32;
                let start = now.max(self.channel_free[c]);
                now = start + t.transfer_ns(bytes);
                self.channel_free[c] = now;
                self.stats.bytes_transferred += bytes as u64;
            }
            now += t.program_ns * n_array;
            self.die_free[d] = now;
            done = done.max(now);
        }
        Ok(self.finish(done))
    }

    fn erase(&mut self, at: Nanos, blocks: &[BlockAddr]) -> Result<Nanos, FlashError> {
        let g = self.config.geometry;
        let endurance = self.config.endurance_cycles;
        for &b in blocks {
            g.check_block(b)?;
            let (bi, info) = self.block_mut(b);
            if info.bad {
                return Err(FlashError::BadBlock(b));
            }
            if info.erase_count >= endurance {
                info.bad = true;
                let copy = *info;
                self.store.put_block(bi, &copy)?;
                return Err(FlashError::EraseFailed(b));
            }
            info.erase_count += 1;
            info.next_page = 0;
            let copy = *info;
            self.store.drop_block(bi);
            self.store.put_block(bi, &copy)?;
            self.stats.blocks_erased += 1;
        }
        let t = self.config.timing;
        let mut done = at;
        for (i, b) in blocks.iter().enumerate() {
            if blocks[..i].iter().any(|o| o.die == b.die) {
                continue;
            }
            let n_array = Self::array_ops(
                blocks
                    .iter()
                    .filter(|o| o.die == b.die)
                    .map(|o| (0, o.plane)),
            );
            let d = b.die.0 as usize;
            if t.scheduling == Scheduling::Backfill {
                let end = self.backfill_die(d, at + t.command_ns, t.erase_ns * n_array);
                done = done.max(end);
                continue;
            }
            let now = (at + t.command_ns).max(self.die_free[d]) + t.erase_ns * n_array;
            self.die_free[d] = now;
            done = done.max(now);
        }
        Ok(self.finish(done))
    }

    fn block_info(&self, b: BlockAddr) -> BlockInfo {
        self.blocks[self.config.geometry.block_index(b) as usize]
    }

    fn mark_bad(&mut self, b: BlockAddr) -> Result<(), FlashError> {
        self.config.geometry.check_block(b)?;
        let (bi, info) = self.block_mut(b);
        info.bad = true;
        let copy = *info;
        self.store.put_block(bi, &copy)
    }

    fn stats(&self) -> FlashStats {
        self.stats
    }

    fn sync(&mut self) -> Result<(), FlashError> {
        self.store.sync()
    }

    fn die_free_ns(&self, die: crate::DieId) -> Nanos {
        self.die_free.get(die.0 as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{preset, DieId, PageAddr};

    fn tiny() -> Nand {
        Nand::in_memory(preset("tiny").unwrap()).unwrap()
    }

    fn page(die: u32, block: u32, page: u32) -> PageAddr {
        PageAddr {
            die: DieId(die),
            plane: 0,
            block,
            page,
        }
    }

    fn program(n: &mut Nand, at: Nanos, p: PageAddr, fp: u64) -> Result<Nanos, FlashError> {
        n.program(
            at,
            &[ProgramOp {
                addr: p,
                payload: Payload::Fingerprint(fp),
                oob: &[1, 2],
            }],
        )
    }

    fn read(n: &mut Nand, p: PageAddr) -> Result<Content, FlashError> {
        let mut oob = [0u8; 2];
        let mut ops = [ReadOp::new(p, &mut [], &mut oob)];
        n.read(0, &mut ops)?;
        Ok(ops[0].content)
    }

    fn tiny_with(scheduling: Scheduling) -> Nand {
        let mut c = preset("tiny").unwrap();
        c.timing.scheduling = scheduling;
        Nand::in_memory(c).unwrap()
    }

    #[test]
    fn backfill_uses_the_idle_time_before_a_later_reservation() {
        let later = 10_000_000;
        for scheduling in [Scheduling::InOrder, Scheduling::Backfill] {
            let mut n = tiny_with(scheduling);
            let t = n.config().timing;
            let one = t.transfer_ns(4096 + 2) + t.program_ns;
            // A program issued for later (a read-modify-write's program, issued when its read
            // completes), then one issued now on the same die.
            assert_eq!(
                program(&mut n, later, page(0, 0, 0), 1).unwrap(),
                later + one
            );
            let now = program(&mut n, 0, page(0, 1, 0), 2).unwrap();
            let read_done = {
                let mut oob = [0u8; 2];
                let mut ops = [ReadOp::new(page(2, 0, 0), &mut [], &mut oob)];
                n.read(0, &mut ops).unwrap()
            };
            match scheduling {
                Scheduling::InOrder => {
                    assert_eq!(now, later + 2 * one);
                    // Die 2 shares channel 0 with die 0: its read waits for the bus.
                    assert!(read_done > later);
                }
                Scheduling::Backfill => {
                    assert_eq!(now, one);
                    assert_eq!(read_done, t.read_ns + t.transfer_ns(2));
                }
            }
            let last = match scheduling {
                Scheduling::InOrder => later + 2 * one,
                Scheduling::Backfill => later + one,
            };
            assert_eq!(n.die_free_ns(DieId(0)), last);
        }
    }

    #[test]
    fn timelines_merge_touching_intervals_and_forget_old_gaps() {
        let mut t = Timeline::default();
        t.reserve(10, 20);
        t.reserve(30, 40);
        assert_eq!(t.fit(0, 10), 0);
        assert_eq!(t.fit(0, 11), 40);
        assert_eq!(t.fit(15, 10), 20);
        t.reserve(20, 30);
        assert_eq!(t.busy, vec![(10, 40)]);
        assert_eq!(t.conflict(0, 11), Some(40));
        assert_eq!(t.conflict(40, 50), None);
        for i in 0..2 * KEPT_INTERVALS as u64 {
            t.reserve(100 + 10 * i, 105 + 10 * i);
        }
        assert_eq!(t.busy.len(), KEPT_INTERVALS);
        assert!(t.floor > 100);
        assert_eq!(t.fit(0, 1), t.floor);
        assert_eq!(t.free_at(), 105 + 10 * (2 * KEPT_INTERVALS as u64 - 1));
    }

    #[test]
    fn a_timing_only_device_keeps_nothing_but_times_and_checks_as_a_full_one() {
        let full_cfg = preset("tiny").unwrap();
        let timing_cfg = DeviceConfig {
            payload: crate::PayloadMode::Timing,
            ..full_cfg
        };
        let mut full = Nand::in_memory(full_cfg).unwrap();
        let mut timing = Nand::in_memory(timing_cfg).unwrap();
        for n in [&mut full, &mut timing] {
            let mut t = 0;
            for p in 0..8 {
                t = program(n, t, page(0, 1, p), 40 + p as u64).unwrap();
            }
            t = n
                .erase(
                    t,
                    &[BlockAddr {
                        die: DieId(1),
                        plane: 0,
                        block: 2,
                    }],
                )
                .unwrap();
            program(n, t, page(1, 2, 0), 9).unwrap();
            // The NAND contract holds without contents.
            assert_eq!(
                program(n, t, page(0, 1, 3), 7),
                Err(FlashError::NotErased(page(0, 1, 3)))
            );
            assert_eq!(read(n, page(0, 1, 8)).unwrap(), Content::Erased);
        }
        assert_eq!(full.stats(), timing.stats());
        assert_eq!(
            read(&mut full, page(0, 1, 5)).unwrap(),
            Content::Fingerprint(45)
        );
        let mut oob = [0u8; 2];
        let mut ops = [ReadOp::new(page(0, 1, 5), &mut [], &mut oob)];
        timing.read(0, &mut ops).unwrap();
        assert_eq!(ops[0].content, Content::Fingerprint(crate::NOT_STORED));
        assert_eq!(oob, [0xFF, 0xFF], "no OOB record is kept");
        assert_eq!(
            read(&mut full, page(1, 2, 0)).unwrap(),
            Content::Fingerprint(9)
        );
        assert_eq!(
            read(&mut timing, page(1, 2, 0)).unwrap(),
            Content::Fingerprint(crate::NOT_STORED)
        );
        assert_eq!(full.stats(), timing.stats());
        assert!(full.resident_bytes() > timing.resident_bytes());
    }

    #[test]
    fn program_twice_is_an_error() {
        let mut n = tiny();
        program(&mut n, 0, page(0, 0, 0), 7).unwrap();
        assert_eq!(
            program(&mut n, 0, page(0, 0, 0), 8),
            Err(FlashError::NotErased(page(0, 0, 0)))
        );
    }

    #[test]
    fn out_of_order_program_is_an_error() {
        let mut n = tiny();
        assert_eq!(
            program(&mut n, 0, page(0, 0, 3), 7),
            Err(FlashError::OutOfOrder {
                addr: page(0, 0, 3),
                expected: 0
            })
        );
    }

    #[test]
    fn erase_makes_pages_programmable_and_erased() {
        let mut n = tiny();
        program(&mut n, 0, page(0, 1, 0), 7).unwrap();
        assert_eq!(
            read(&mut n, page(0, 1, 0)).unwrap(),
            Content::Fingerprint(7)
        );
        n.erase(0, &[page(0, 1, 0).block_addr()]).unwrap();
        assert_eq!(read(&mut n, page(0, 1, 0)).unwrap(), Content::Erased);
        program(&mut n, 0, page(0, 1, 0), 9).unwrap();
        assert_eq!(n.block_info(page(0, 1, 0).block_addr()).erase_count, 1);
    }

    #[test]
    fn out_of_range_and_wrong_sizes_are_errors() {
        let mut n = tiny();
        assert!(matches!(
            program(&mut n, 0, page(9, 0, 0), 1),
            Err(FlashError::OutOfRange { .. })
        ));
        assert!(matches!(
            program(&mut n, 0, page(0, 0, 99), 1),
            Err(FlashError::OutOfRange { .. })
        ));
        let short = [0u8; 10];
        let r = n.program(
            0,
            &[ProgramOp {
                addr: page(0, 0, 0),
                payload: Payload::Bytes(&short),
                oob: &[],
            }],
        );
        assert!(matches!(r, Err(FlashError::Size { .. })));
        let big_oob = [0u8; 65];
        let r = n.program(
            0,
            &[ProgramOp {
                addr: page(0, 0, 0),
                payload: Payload::Fingerprint(1),
                oob: &big_oob,
            }],
        );
        assert!(matches!(r, Err(FlashError::Size { .. })));
    }

    #[test]
    fn endurance_limit_makes_a_grown_bad_block() {
        let mut cfg = preset("tiny").unwrap();
        cfg.endurance_cycles = 3;
        let mut n = Nand::in_memory(cfg).unwrap();
        let b = page(1, 2, 0).block_addr();
        for _ in 0..3 {
            n.erase(0, &[b]).unwrap();
        }
        assert_eq!(n.erase(0, &[b]), Err(FlashError::EraseFailed(b)));
        assert!(n.block_info(b).bad);
        assert_eq!(n.erase(0, &[b]), Err(FlashError::BadBlock(b)));
        assert_eq!(
            program(&mut n, 0, b.page(0), 1),
            Err(FlashError::BadBlock(b))
        );
    }

    #[test]
    fn factory_bad_blocks_follow_the_seed() {
        let mut cfg = preset("tiny").unwrap();
        cfg.factory_bad_ppm = 50_000;
        let bad = |seed| {
            let mut c = cfg;
            c.seed = seed;
            let n = Nand::in_memory(c).unwrap();
            (0..c.geometry.blocks())
                .filter(|&i| n.blocks[i as usize].factory_bad)
                .collect::<Vec<_>>()
        };
        assert_eq!(bad(1), bad(1));
        assert_ne!(bad(1), bad(2));
        assert!(!bad(1).is_empty());
    }

    #[test]
    fn bytes_round_trip_with_oob() {
        let mut n = tiny();
        let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        n.program(
            0,
            &[ProgramOp {
                addr: page(2, 0, 0),
                payload: Payload::Bytes(&data),
                oob: b"hello",
            }],
        )
        .unwrap();
        let mut out = vec![0u8; 4096];
        let mut oob = [0u8; 8];
        let mut ops = [ReadOp::new(page(2, 0, 0), &mut out, &mut oob)];
        n.read(0, &mut ops).unwrap();
        assert_eq!(ops[0].content, Content::Bytes);
        assert_eq!(out, data);
        assert_eq!(&oob, b"hello\xFF\xFF\xFF");
    }

    #[test]
    fn timing_follows_the_model() {
        let cfg = preset("tiny").unwrap();
        let t = cfg.timing;
        let mut n = Nand::in_memory(cfg).unwrap();
        let xfer = t.transfer_ns(4096 + 2);
        // One program: transfer then t_PROG.
        let done = program(&mut n, 0, page(0, 0, 0), 1).unwrap();
        assert_eq!(done, xfer + t.program_ns);
        // Die 2 is on channel 0 as well (channel-first numbering, 2 channels): it waits only
        // for the bus, so it overlaps die 0's array time.
        assert_eq!(
            program(&mut n, 0, page(2, 0, 0), 1).unwrap(),
            2 * xfer + t.program_ns
        );
        // Die 1 is on channel 1: fully parallel.
        assert_eq!(
            program(&mut n, 0, page(1, 0, 0), 1).unwrap(),
            xfer + t.program_ns
        );
        // Die 0 again: waits for the die, then transfers (the bus is free by then).
        assert_eq!(
            program(&mut n, 0, page(0, 0, 1), 1).unwrap(),
            2 * (xfer + t.program_ns)
        );
        // A read on die 1 issued later: t_R, then the transfer of the OOB bytes asked for.
        let at = 10 * t.program_ns;
        let mut oob = [0u8; 2];
        let mut ops = [ReadOp::new(page(1, 0, 0), &mut [], &mut oob)];
        assert_eq!(
            n.read(at, &mut ops).unwrap(),
            at + t.read_ns + t.transfer_ns(2)
        );
    }

    #[test]
    fn multi_plane_program_shares_one_array_operation() {
        let cfg = preset("rawssd").unwrap();
        let t = cfg.timing;
        let mut n = Nand::in_memory(cfg).unwrap();
        let a = PageAddr {
            die: DieId(0),
            plane: 0,
            block: 0,
            page: 0,
        };
        let b = PageAddr { plane: 1, ..a };
        let ops = [
            ProgramOp {
                addr: a,
                payload: Payload::Fingerprint(1),
                oob: &[],
            },
            ProgramOp {
                addr: b,
                payload: Payload::Fingerprint(2),
                oob: &[],
            },
        ];
        let done = n.program(0, &ops).unwrap();
        assert_eq!(done, 2 * t.transfer_ns(4096) + t.program_ns);
    }
}
