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
//! Dies work in parallel; dies on one channel share its bus. Commands are served in the order
//! they are issued (a reservation model), so callers issue in time order.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::store::{MemStore, PageStore};
use crate::{
    BlockAddr, BlockInfo, Content, DeviceConfig, Flash, FlashError, FlashStats, Nanos, Payload,
    ProgramOp, ReadOp,
};

pub struct Nand<S: PageStore = MemStore> {
    config: DeviceConfig,
    store: S,
    blocks: Vec<BlockInfo>,
    die_free: Vec<Nanos>,
    channel_free: Vec<Nanos>,
    stats: FlashStats,
}

impl Nand<MemStore> {
    /// A fresh in-memory device, every block erased, factory bad blocks drawn from the seed.
    pub fn in_memory(config: DeviceConfig) -> Result<Self, FlashError> {
        config.validate().map_err(FlashError::Config)?;
        Nand::open(config, MemStore::new(config.geometry))
    }
}

impl<S: PageStore> Nand<S> {
    /// Opens a device over a store; a blank store is formatted (factory bad blocks drawn).
    pub fn open(config: DeviceConfig, mut store: S) -> Result<Self, FlashError> {
        config.validate().map_err(FlashError::Config)?;
        let g = config.geometry;
        let blocks = match store.load_blocks()? {
            Some(b) => {
                if b.len() != g.blocks() as usize {
                    return Err(FlashError::Config(format!(
                        "store holds {} blocks, geometry has {}",
                        b.len(),
                        g.blocks()
                    )));
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
            stats: FlashStats::default(),
        })
    }

    pub fn store(&self) -> &S {
        &self.store
    }

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
        let t = &self.config.timing;
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
