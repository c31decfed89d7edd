//! Super-block ("block" from here up) state with checked transitions, valid-unit bitmaps and
//! counts.
//!
//! ```text
//!   Free --open--> Open --fill--> Full --choose--> Victim --erase--> Free
//!                    \______________________________^   (program failure: retire via GC)
//!                   Open <--adopt-- Full   (closed early at remount, its tail still erased)
//!   any --failure--> Bad
//! ```
//!
//! [`BlockTable`]'s fields are private: every change of a block's state goes through
//! [`BlockTable::set_state`], which refuses an illegal transition, or, when the FML opens a
//! device, through [`BlockTable::load`], which takes a fresh table's `Free` blocks to what the
//! device holds (`Full`, a `Victim` to retire, or `Bad`).

use serde::Serialize;

/// Where a super-block is in its life cycle (the diagram above).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum BlockState {
    /// Erased, in the free pool.
    Free,
    /// The update block of the stream with this id, being filled in order.
    Open(u8),
    /// Completely written (or closed early at remount).
    Full,
    /// Chosen by GC: its valid units are being copied out, then it is erased.
    Victim,
    /// Retired: factory bad, grown bad, or worn out.
    Bad,
}

impl BlockState {
    fn may_become(self, to: BlockState) -> bool {
        use BlockState::*;
        matches!(
            (self, to),
            (Free, Open(_))
                | (Open(_), Full)
                | (Open(_), Victim)
                | (Full, Victim)
                | (Full, Open(_))
                | (Victim, Free)
        ) || to == Bad
    }

    /// The states a block of a fresh table (all `Free`) may take when the FML opens a device:
    /// still erased, holding programmed units, holding units to move before it is retired, or
    /// bad.
    fn may_load(to: BlockState) -> bool {
        matches!(
            to,
            BlockState::Free | BlockState::Full | BlockState::Victim | BlockState::Bad
        )
    }
}

/// What kind of pages a block holds, for per-segment-type cleaning thresholds (OSCM-11 V-B).
/// A block takes the class of the stream that filled it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum SegmentClass {
    /// File and object data (the default).
    #[default]
    Data,
    /// Onodes and index nodes: likely to be invalidated soon.
    Metadata,
    /// Access-time journal entries: little live data, cleaned first.
    Atime,
}

/// One super-block's bookkeeping. Read it through [`BlockTable::blocks`] (or `Fml::blocks`);
/// only the table changes it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Block {
    /// Life-cycle state; changes only by checked transitions.
    pub state: BlockState,
    /// Valid write units.
    pub valid: u32,
    /// Next write unit to program (units programmed so far).
    pub next: u32,
    /// Erases the block has been through (program/erase cycles), as the device reports at open
    /// plus every erase since.
    pub erase_count: u32,
    /// Order in which the block was opened (FIFO victim order).
    pub seq: u64,
    /// Virtual time of the last program into the block (cost-benefit age).
    pub last_write_ns: u64,
    /// Retire instead of erasing once GC has emptied it (a program into it failed).
    pub retire: bool,
    /// What the stream that last opened the block writes (per-class GC thresholds).
    pub class: SegmentClass,
}

/// What [`crate::Fml::open`] found on the device for one block, for [`BlockTable::load`].
#[derive(Clone, Copy, Debug)]
pub struct Loaded {
    /// The state the block takes: `Free`, `Full`, `Victim` (with `retire`) or `Bad`.
    pub state: BlockState,
    /// Units programmed so far (0 for an erased block).
    pub next: u32,
    /// Erase count the device reports.
    pub erase_count: u32,
    /// Open order to start from (FIFO victim order).
    pub seq: u64,
    /// Retire once GC has moved its units (a program into it failed before the reboot).
    pub retire: bool,
}

/// All blocks, plus the valid bitmap over all write units.
#[derive(Clone)]
pub struct BlockTable {
    blocks: Vec<Block>,
    valid_bits: Vec<u64>,
    units_per_block: u32,
}

impl BlockTable {
    /// `count` erased (`Free`) blocks of `units_per_block` write units each, none valid.
    pub fn new(count: u32, units_per_block: u32) -> Self {
        let blank = Block {
            state: BlockState::Free,
            valid: 0,
            next: 0,
            erase_count: 0,
            seq: 0,
            last_write_ns: 0,
            retire: false,
            class: SegmentClass::Data,
        };
        let units = count as u64 * units_per_block as u64;
        BlockTable {
            blocks: vec![blank; count as usize],
            valid_bits: vec![0; units.div_ceil(64) as usize],
            units_per_block,
        }
    }

    /// Write units per block.
    pub fn units_per_block(&self) -> u32 {
        self.units_per_block
    }

    /// Every block, indexed by super-block id.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Sets a fresh table's block `id` to what the device holds, when the FML opens it. Loading
    /// a block twice, or into `Open`, is a bug in the FML.
    pub fn load(&mut self, id: u32, found: Loaded) {
        let b = &mut self.blocks[id as usize];
        assert!(
            b.state == BlockState::Free && b.next == 0 && BlockState::may_load(found.state),
            "block {id}: cannot load {found:?} over {b:?}"
        );
        assert!(
            found.retire == (found.state == BlockState::Victim),
            "block {id}: only a victim loads to be retired ({found:?})"
        );
        b.state = found.state;
        b.next = found.next;
        b.erase_count = found.erase_count;
        b.seq = found.seq;
        b.retire = found.retire;
    }

    /// Makes free block `id` the update block of `stream`, filling with `class`, opened
    /// `seq`-th.
    pub fn open(&mut self, id: u32, stream: u8, class: SegmentClass, seq: u64) {
        self.set_state(id, BlockState::Open(stream));
        let b = &mut self.blocks[id as usize];
        b.class = class;
        b.seq = seq;
    }

    /// Counts a program into open block `id` at virtual time `at_ns`, whether it succeeded or
    /// not (a failed program uses the unit up too); returns the new write pointer.
    pub fn programmed(&mut self, id: u32, at_ns: u64) -> u32 {
        let b = &mut self.blocks[id as usize];
        assert!(
            matches!(b.state, BlockState::Open(_)),
            "block {id}: programmed while {:?}",
            b.state
        );
        b.next += 1;
        b.last_write_ns = at_ns;
        b.next
    }

    /// A program into open block `id` failed: it becomes a victim, retired once GC has moved
    /// its valid units.
    pub fn fail_program(&mut self, id: u32) {
        self.set_state(id, BlockState::Victim);
        self.blocks[id as usize].retire = true;
    }

    /// Victim `id` holds a unit its owner lost and still references: retired once empty
    /// instead of erased, so that the page is never programmed again.
    pub fn retire_when_empty(&mut self, id: u32) {
        if self.blocks[id as usize].state == BlockState::Victim {
            self.blocks[id as usize].retire = true;
        }
    }

    /// Counts an erase of free block `id` (erased again before it is opened); returns its erase
    /// count.
    pub fn erased_free(&mut self, id: u32) -> u32 {
        let b = &mut self.blocks[id as usize];
        assert!(
            b.state == BlockState::Free,
            "block {id}: erased as free while {:?}",
            b.state
        );
        b.erase_count += 1;
        b.erase_count
    }

    /// Victim `id` was erased: it becomes `Free` with its write pointer at 0; returns its erase
    /// count.
    pub fn erased_victim(&mut self, id: u32) -> u32 {
        self.set_state(id, BlockState::Free);
        let b = &mut self.blocks[id as usize];
        b.erase_count += 1;
        b.next = 0;
        b.retire = false;
        b.erase_count
    }

    /// Moves a block to a new state; an illegal transition is a bug in the FML.
    pub fn set_state(&mut self, id: u32, to: BlockState) {
        let b = &mut self.blocks[id as usize];
        assert!(
            b.state.may_become(to),
            "block {id}: illegal transition {:?} -> {to:?}",
            b.state
        );
        b.state = to;
    }

    /// Whether write unit `unit` (a VPA's index) holds live data.
    pub fn is_valid(&self, unit: u32) -> bool {
        self.valid_bits[(unit / 64) as usize] & (1 << (unit % 64)) != 0
    }

    /// Marks write unit `unit` live and counts it in its block; marking it twice is a bug.
    pub fn set_valid(&mut self, unit: u32) {
        let w = &mut self.valid_bits[(unit / 64) as usize];
        let bit = 1 << (unit % 64);
        assert!(*w & bit == 0, "unit {unit} is already valid");
        *w |= bit;
        self.blocks[(unit / self.units_per_block) as usize].valid += 1;
    }

    /// Clears a valid unit; returns false if it was not valid.
    pub fn clear_valid(&mut self, unit: u32) -> bool {
        let w = &mut self.valid_bits[(unit / 64) as usize];
        let bit = 1 << (unit % 64);
        if *w & bit == 0 {
            return false;
        }
        *w &= !bit;
        self.blocks[(unit / self.units_per_block) as usize].valid -= 1;
        true
    }

    /// The first valid unit of `block` at offset `from` or later.
    pub fn next_valid(&self, block: u32, from: u32) -> Option<u32> {
        let base = block * self.units_per_block;
        let end = base + self.units_per_block;
        let mut u = base + from;
        while u < end {
            let word = self.valid_bits[(u / 64) as usize] >> (u % 64);
            if word == 0 {
                u = (u / 64 + 1) * 64;
                continue;
            }
            let hit = u + word.trailing_zeros();
            return (hit < end).then_some(hit);
        }
        None
    }

    /// Whole-table check (debug builds, tests, fsck): counts match the bitmap, and units past a
    /// block's write pointer are never valid.
    pub fn check(&self) -> Result<(), Inconsistency> {
        for (id, b) in self.blocks.iter().enumerate() {
            let block = id as u32;
            let base = block * self.units_per_block;
            let count = (base..base + self.units_per_block)
                .filter(|&u| self.is_valid(u))
                .count() as u32;
            if count != b.valid {
                return Err(Inconsistency::ValidCount {
                    block,
                    counted: b.valid,
                    bits: count,
                });
            }
            if let Some(unit) = self.next_valid(block, b.next) {
                return Err(Inconsistency::ValidPastWritePointer {
                    block,
                    unit,
                    next: b.next,
                });
            }
            if matches!(b.state, BlockState::Free | BlockState::Bad) && b.valid > 0 {
                return Err(Inconsistency::ValidInUnusedBlock {
                    block,
                    state: b.state,
                    valid: b.valid,
                });
            }
        }
        Ok(())
    }
}

/// What a whole-structure check ([`BlockTable::check`], `Fml::check`) found wrong: the first
/// inconsistency, naming the block (super-block id), unit or stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Inconsistency {
    /// A block's valid count disagrees with its bitmap.
    #[error("block {block}: valid count {counted} but {bits} bits set")]
    ValidCount {
        /// The block.
        block: u32,
        /// Its valid count.
        counted: u32,
        /// Valid bits set in its bitmap.
        bits: u32,
    },
    /// A unit past its block's write pointer is marked valid.
    #[error("block {block}: unit {unit} valid past the write pointer {next}")]
    ValidPastWritePointer {
        /// The block.
        block: u32,
        /// The unit (its number on the device, not its offset in the block).
        unit: u32,
        /// The block's write pointer.
        next: u32,
    },
    /// A free or bad block holds valid units.
    #[error("block {block}: {state:?} with {valid} valid units")]
    ValidInUnusedBlock {
        /// The block.
        block: u32,
        /// Its state (`Free` or `Bad`).
        state: BlockState,
        /// Its valid count.
        valid: u32,
    },
    /// The free pool does not hold exactly the blocks in state `Free`.
    #[error("{free} blocks are Free but the pool holds {pool}")]
    FreePool {
        /// Blocks in state `Free`.
        free: u32,
        /// Blocks in the free pool.
        pool: u32,
    },
    /// A stream's update block is not open for that stream.
    #[error("stream {stream} holds block {block} in state {state:?}")]
    StreamBlock {
        /// The stream.
        stream: u8,
        /// Its update block.
        block: u32,
        /// The block's state.
        state: BlockState,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_counts_and_scan() {
        let mut t = BlockTable::new(3, 100);
        t.blocks[1].next = 100;
        t.blocks[1].state = BlockState::Full;
        for u in [100, 163, 164, 199] {
            t.set_valid(u);
        }
        assert_eq!(t.blocks[1].valid, 4);
        assert_eq!(t.next_valid(1, 0), Some(100));
        assert_eq!(t.next_valid(1, 1), Some(163));
        assert_eq!(t.next_valid(1, 65), Some(199));
        assert_eq!(t.next_valid(0, 0), None);
        assert!(t.clear_valid(163));
        assert!(!t.clear_valid(163));
        t.check().unwrap();
        t.blocks[1].next = 80; // unit 199 (offset 99) now lies past the write pointer
        assert_eq!(
            t.check(),
            Err(Inconsistency::ValidPastWritePointer {
                block: 1,
                unit: 199,
                next: 80
            })
        );
    }

    #[test]
    #[should_panic(expected = "illegal transition")]
    fn illegal_transition_panics() {
        let mut t = BlockTable::new(1, 4);
        t.set_state(0, BlockState::Victim);
    }
}
