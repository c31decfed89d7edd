//! Fault injection, as a wrapper around any [`Flash`] (the engine has no fault flags).
//!
//! # The fault model
//! - **Power cut.** [`Faulty::cut_power_after`] lets `n` more commands (a batched read, program
//!   or erase counts as one) complete; the next program or erase is the one power fails
//!   during. With [`CutMode::Torn`] that command is damaged: a *torn program* leaves its pages
//!   programmed but unreadable (every read of them fails as uncorrectable), an *interrupted
//!   erase* leaves the block unreadable and unprogrammable until it is erased again. With
//!   [`CutMode::Garbled`] the torn program's pages read back *without* an error but with a few
//!   bits wrong in their payload and OOB bytes (the ECC miscorrected a partly programmed page),
//!   so only the stack's own checksums can tell. With [`CutMode::Partial`] power fails part-way
//!   through a multi-page program: its first pages are programmed intact, the next is torn, and
//!   the later ones stay erased. With [`CutMode::Disturbing`] the torn program also destroys
//!   an earlier page of its block, acknowledged long before (the paired lower page of a
//!   multi-level cell), which reads as uncorrectable until the block is erased. With
//!   [`CutMode::Clean`] power fails just before the command, which does not happen. From then on
//!   every command returns [`FlashError::PowerLoss`] until [`Faulty::restore_power`], which is
//!   the reboot: the layers above must remount from what the flash holds.
//! - **Bit flips.** [`Faulty::flip_bits`] adds bit errors to a programmed page. Reads report
//!   errors up to the ECC strength as corrected, and fail as uncorrectable beyond it.
//! - **Page failure.** [`Faulty::fail_program`] makes the next program of a page fail; the device
//!   then treats its block as a grown bad block, as NAND status-fail handling does.
//! - **Grown bad block on erase.** [`Faulty::fail_erase`] makes the next erase of a block fail.
//! - **Misdirected write.** [`Faulty::misdirect_next_program`] sends the next single-page program
//!   to the same page of the next block of that plane when that page is the one to program
//!   there, and drops it otherwise; the command still reports success, and the intended page
//!   stays erased.
//!
//! Damage is kept in this wrapper, so it lasts as long as the wrapper (a simulated reboot keeps
//! it); it is cleared when the damaged block is erased.

use std::collections::{HashMap, HashSet};

use crate::{
    BlockAddr, BlockInfo, Content, DeviceConfig, Flash, FlashError, FlashStats, Nanos, PageAddr,
    ProgramOp, ReadOp,
};

/// When an injected power cut strikes the command it falls on ([`Faulty::cut_power_after`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Power fails between two commands.
    Clean,
    /// Power fails during the program or erase, damaging it: a program's pages read as
    /// uncorrectable, an erased block as uncorrectable until erased again.
    Torn,
    /// As [`CutMode::Torn`], except that a program's pages read back without an error, each
    /// with a few bits of its payload and of its OOB bytes wrong (the ECC miscorrected them).
    Garbled,
    /// As [`CutMode::Garbled`], except that the OOB bytes read back whole: only the payload is
    /// wrong, so a stack that trusts a record without checking the payload it describes
    /// takes the unit for whole.
    GarbledPayload,
    /// Power fails part-way through a program of several pages: the first `intact` pages (or
    /// all but the last, if the command has fewer) are programmed whole, the next one is torn
    /// (uncorrectable), and the later ones are not programmed. An erase is interrupted as with
    /// [`CutMode::Torn`].
    Partial {
        /// Pages of the command programmed whole before the torn one.
        intact: usize,
    },
    /// As [`CutMode::Torn`], and the cut also destroys the page `distance` pages before the
    /// (first) torn one in its block, if there is one: on multi-level cells a page shares its
    /// cells with an earlier page (the upper page with its paired lower page), and an
    /// interrupted program of the later one leaves the earlier one's charge half-changed, so
    /// data written and acknowledged long before reads as uncorrectable until the block is
    /// erased ("paired-page" corruption; docs/RELIABILITY.md).
    Disturbing {
        /// How many pages before the torn page its paired page lies (0: none is disturbed).
        distance: u32,
    },
}

/// How many faults of each kind were injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Power cuts that struck (clean or torn).
    pub power_cuts: u64,
    /// Programs damaged by a torn power cut (their pages read as uncorrectable, or garbled, or
    /// only some of them programmed).
    pub torn_programs: u64,
    /// Of [`Self::torn_programs`], those whose pages read back garbled without an error
    /// ([`CutMode::Garbled`]).
    pub garbled_programs: u64,
    /// Of [`Self::torn_programs`], those of several pages cut by [`CutMode::Partial`] (of a
    /// one-page program it is a plain torn program, not counted here).
    pub partial_programs: u64,
    /// Pages a [`CutMode::Disturbing`] cut destroyed before the torn program's own (counted
    /// apart from the torn programs, which count the cut once).
    pub disturbed_pages: u64,
    /// Erases damaged by a torn power cut (the block reads as uncorrectable until erased again).
    pub interrupted_erases: u64,
    /// Calls of [`Faulty::flip_bits`] (each may add several bit errors).
    pub bit_flips: u64,
    /// Programs failed by [`Faulty::fail_program`].
    pub program_failures: u64,
    /// Erases failed by [`Faulty::fail_erase`].
    pub erase_failures: u64,
    /// Programs misdirected by [`Faulty::misdirect_next_program`] (dropped ones included).
    pub misdirected_writes: u64,
}

/// A device with fault injection: passes every command to the wrapped device and applies the
/// faults armed on it (the model is in the module documentation).
pub struct Faulty<F: Flash> {
    inner: F,
    ops: u64,
    cut_at: Option<(u64, CutMode)>,
    powered: bool,
    bit_errors: HashMap<PageAddr, u32>,
    torn: HashSet<PageAddr>,
    /// Pages a [`CutMode::Garbled`] or [`CutMode::GarbledPayload`] cut left readable but
    /// wrong, until their block is erased; true when the OOB bytes are wrong too.
    garbled: HashMap<PageAddr, bool>,
    interrupted: HashSet<BlockAddr>,
    fail_program: HashSet<PageAddr>,
    fail_erase: HashSet<BlockAddr>,
    misdirect: bool,
    misdirected: Option<Misdirected>,
    /// Pages a misdirected program left erased or landed on, until their block is erased.
    astray: HashSet<PageAddr>,
    /// Blocks a program or an erase failed in (marked bad).
    failed: HashSet<BlockAddr>,
    /// Pages struck before their block was erased, until they are programmed again: the erase
    /// wiped the damage, not the loss (a stack that still references one finds it erased).
    wiped: HashSet<PageAddr>,
    cut_command: Option<CutCommand>,
    /// The earlier page the last [`CutMode::Disturbing`] cut destroyed, until taken.
    disturbed: Option<PageAddr>,
    counts: FaultCounts,
}

/// The command a power cut struck: refused ([`CutMode::Clean`]) or damaged
/// ([`CutMode::Torn`]). A harness reads it to tell what kind of page each cut hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CutCommand {
    /// A program, with the OOB bytes of its first page (which name what the stack wrote).
    Program {
        /// The OOB bytes the program carried.
        oob: Vec<u8>,
    },
    /// An erase.
    Erase,
}

/// A program [`Faulty::misdirect_next_program`] sent astray: where it was meant to go, where it
/// went, and the OOB bytes it carried (which name what the lost page held).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misdirected {
    /// The page the command named, left erased.
    pub intended: PageAddr,
    /// The page it landed on, if any.
    pub landed: Option<PageAddr>,
    /// The OOB bytes of the command.
    pub oob: Vec<u8>,
    /// The payload bytes of the command (empty for a fingerprint): what a harness asks a
    /// stack about when the record alone does not say what the page was to hold.
    pub data: Vec<u8>,
}

impl<F: Flash> Faulty<F> {
    /// Wraps a device, powered and with no fault armed.
    pub fn new(inner: F) -> Self {
        Faulty {
            inner,
            ops: 0,
            cut_at: None,
            powered: true,
            bit_errors: HashMap::new(),
            torn: HashSet::new(),
            garbled: HashMap::new(),
            interrupted: HashSet::new(),
            fail_program: HashSet::new(),
            fail_erase: HashSet::new(),
            misdirect: false,
            misdirected: None,
            astray: HashSet::new(),
            failed: HashSet::new(),
            wiped: HashSet::new(),
            cut_command: None,
            disturbed: None,
            counts: FaultCounts::default(),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &F {
        &self.inner
    }
    /// The wrapped device, mutably: commands sent to it bypass the faults and the count of
    /// commands a power cut waits for.
    pub fn inner_mut(&mut self) -> &mut F {
        &mut self.inner
    }
    /// Unwraps the device; the damage kept in this wrapper (bit errors, torn pages) is dropped.
    pub fn into_inner(self) -> F {
        self.inner
    }
    /// Commands issued so far (successful or not).
    pub fn ops(&self) -> u64 {
        self.ops
    }
    /// Faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }
    /// False from a power cut until [`Self::restore_power`].
    pub fn powered(&self) -> bool {
        self.powered
    }

    /// Arms a power cut: `n` more commands of any kind complete, and power fails at the first
    /// program or erase after them, as `mode` says.
    pub fn cut_power_after(&mut self, n: u64, mode: CutMode) {
        self.cut_at = Some((self.ops + n, mode));
    }
    /// The reboot after a power cut: commands work again, and a cut still armed is dropped.
    pub fn restore_power(&mut self) {
        self.powered = true;
        self.cut_at = None;
    }
    /// Adds `bits` bit errors to a page until its block is erased: reads correct up to
    /// `ecc_correctable_bits` of them in total and fail as uncorrectable beyond.
    pub fn flip_bits(&mut self, page: PageAddr, bits: u32) {
        *self.bit_errors.entry(page).or_default() += bits;
        self.counts.bit_flips += 1;
    }
    /// Makes the next program of `page` fail; the block is marked bad (a grown bad block).
    pub fn fail_program(&mut self, page: PageAddr) {
        self.fail_program.insert(page);
    }
    /// Makes the next erase of `block` fail; the block is marked bad (a grown bad block).
    pub fn fail_erase(&mut self, block: BlockAddr) {
        self.fail_erase.insert(block);
    }
    /// Misdirects the next single-page program to the same page of the next block of its
    /// plane (dropped if that page is not the one to program there); it reports success.
    pub fn misdirect_next_program(&mut self) {
        self.misdirect = true;
    }
    /// Whether a misdirected program is armed and has not struck yet.
    pub fn misdirect_armed(&self) -> bool {
        self.misdirect
    }
    /// The last misdirected program, once (so a harness can tell what it destroyed).
    pub fn take_misdirected(&mut self) -> Option<Misdirected> {
        self.misdirected.take()
    }

    /// Whether an injected fault damaged what `page` holds since it was last programmed: a
    /// torn program, an interrupted erase, bit errors past the ECC, a misdirected program (the
    /// page it left erased, or the one it landed on), or a failed program or erase of its
    /// block. An erase of its block wipes the damage but not the loss: the page stays struck
    /// until it is programmed again (a stack that could not move a damaged unit before GC
    /// erased it finds it erased). A harness asks it of the unit a stack names when it
    /// refuses an image as damaged.
    pub fn struck(&self, page: PageAddr) -> bool {
        self.damaged(page) || self.wiped.contains(&page)
    }

    /// Whether `page` carries damage an injected fault left on flash now.
    fn damaged(&self, page: PageAddr) -> bool {
        let ecc = self.inner.config().ecc_correctable_bits;
        let b = page.block_addr();
        self.torn.contains(&page)
            || self.garbled.contains_key(&page)
            || self.interrupted.contains(&b)
            || self.bit_errors.get(&page).is_some_and(|&bits| bits > ecc)
            || self.astray.contains(&page)
            || self.failed.contains(&b)
    }

    /// The command the last power cut struck, once.
    pub fn take_cut_command(&mut self) -> Option<CutCommand> {
        self.cut_command.take()
    }

    /// The earlier page the last [`CutMode::Disturbing`] cut destroyed, once (so a harness can
    /// ask the stack what it held).
    pub fn take_disturbed(&mut self) -> Option<PageAddr> {
        self.disturbed.take()
    }

    /// Counts a command and reports whether power fails during it.
    fn begin(&mut self, damaging: bool) -> Result<Option<CutMode>, FlashError> {
        if !self.powered {
            return Err(FlashError::PowerLoss);
        }
        self.ops += 1;
        match self.cut_at {
            Some((at, mode)) if damaging && self.ops > at => {
                self.powered = false;
                self.counts.power_cuts += 1;
                Ok(Some(mode))
            }
            _ => Ok(None),
        }
    }

    fn forget_block(&mut self, b: BlockAddr) {
        for page in 0..self.inner.config().geometry.pages_per_block {
            let p = PageAddr {
                die: b.die,
                plane: b.plane,
                block: b.block,
                page,
            };
            if self.damaged(p) {
                self.wiped.insert(p);
            }
        }
        self.bit_errors.retain(|p, _| p.block_addr() != b);
        self.torn.retain(|p| p.block_addr() != b);
        self.garbled.retain(|p, _| p.block_addr() != b);
        self.astray.retain(|p| p.block_addr() != b);
        self.interrupted.remove(&b);
    }
}

impl<F: Flash> Flash for Faulty<F> {
    fn config(&self) -> &DeviceConfig {
        self.inner.config()
    }

    fn read(&mut self, at: Nanos, ops: &mut [ReadOp<'_>]) -> Result<Nanos, FlashError> {
        self.begin(false)?;
        let done = self.inner.read(at, ops)?;
        let ecc = self.inner.config().ecc_correctable_bits;
        for op in ops.iter_mut() {
            if self.torn.contains(&op.addr) || self.interrupted.contains(&op.addr.block_addr()) {
                return Err(FlashError::Uncorrectable {
                    addr: op.addr,
                    bit_errors: u32::MAX,
                });
            }
            if let Some(&bits) = self.bit_errors.get(&op.addr) {
                if bits > ecc {
                    return Err(FlashError::Uncorrectable {
                        addr: op.addr,
                        bit_errors: bits,
                    });
                }
                op.corrected_bits += bits;
            }
            if let Some(&record) = self.garbled.get(&op.addr) {
                garble(op, record);
            }
        }
        Ok(done)
    }

    fn program(&mut self, at: Nanos, ops: &[ProgramOp<'_>]) -> Result<Nanos, FlashError> {
        let cut = self.begin(true)?;
        if cut.is_some() {
            let oob = ops.first().map_or_else(Vec::new, |o| o.oob.to_vec());
            self.cut_command = Some(CutCommand::Program { oob });
        }
        if cut == Some(CutMode::Clean) {
            return Err(FlashError::PowerLoss);
        }
        for op in ops {
            if self.interrupted.contains(&op.addr.block_addr()) {
                return Err(FlashError::ProgramFailed(op.addr));
            }
            if self.fail_program.remove(&op.addr) {
                self.counts.program_failures += 1;
                self.failed.insert(op.addr.block_addr());
                self.inner.mark_bad(op.addr.block_addr())?;
                return Err(FlashError::ProgramFailed(op.addr));
            }
        }
        if std::mem::take(&mut self.misdirect) && ops.len() == 1 {
            // Only the page it lands on is programmed.
            self.counts.misdirected_writes += 1;
            let g = self.inner.config().geometry;
            let mut wrong = ops[0];
            wrong.addr.block = (wrong.addr.block + 1) % g.blocks_per_plane;
            let target = self.inner.block_info(wrong.addr.block_addr());
            let lands = !target.bad && target.next_page == wrong.addr.page;
            self.astray.insert(ops[0].addr);
            if lands {
                self.astray.insert(wrong.addr);
            }
            self.misdirected = Some(Misdirected {
                intended: ops[0].addr,
                landed: lands.then_some(wrong.addr),
                oob: ops[0].oob.to_vec(),
                data: match ops[0].payload {
                    crate::Payload::Bytes(b) => b.to_vec(),
                    crate::Payload::Fingerprint(_) => Vec::new(),
                },
            });
            if lands {
                self.wiped.remove(&wrong.addr);
                return self.inner.program(at, &[wrong]);
            }
            return Ok(at);
        }
        // A partial program stops after its torn page: the later pages are never programmed.
        let programmed = match cut {
            Some(CutMode::Partial { intact }) => &ops[..(intact + 1).min(ops.len())],
            _ => ops,
        };
        let done = self.inner.program(at, programmed)?;
        for op in programmed {
            self.wiped.remove(&op.addr);
        }
        let Some(mode) = cut else {
            return Ok(done);
        };
        self.counts.torn_programs += 1;
        match mode {
            CutMode::Garbled | CutMode::GarbledPayload => {
                self.counts.garbled_programs += 1;
                let record = mode == CutMode::Garbled;
                self.garbled.extend(ops.iter().map(|o| (o.addr, record)));
            }
            CutMode::Partial { .. } => {
                self.counts.partial_programs += u64::from(ops.len() > 1);
                self.torn.extend(programmed.last().map(|o| o.addr));
            }
            CutMode::Disturbing { distance } => {
                self.torn.extend(ops.iter().map(|o| o.addr));
                let first = ops.first().map(|o| o.addr);
                let paired = first.and_then(|a| {
                    let page = a.page.checked_sub(distance).filter(|_| distance > 0)?;
                    Some(PageAddr { page, ..a })
                });
                if let Some(p) = paired {
                    self.torn.insert(p);
                    self.counts.disturbed_pages += 1;
                    self.disturbed = Some(p);
                }
            }
            CutMode::Torn | CutMode::Clean => self.torn.extend(ops.iter().map(|o| o.addr)),
        }
        Err(FlashError::PowerLoss)
    }

    fn erase(&mut self, at: Nanos, blocks: &[BlockAddr]) -> Result<Nanos, FlashError> {
        let cut = self.begin(true)?;
        if cut.is_some() {
            self.cut_command = Some(CutCommand::Erase);
        }
        if cut == Some(CutMode::Clean) {
            return Err(FlashError::PowerLoss);
        }
        for &b in blocks {
            if self.fail_erase.remove(&b) {
                self.counts.erase_failures += 1;
                self.failed.insert(b);
                self.inner.mark_bad(b)?;
                return Err(FlashError::EraseFailed(b));
            }
        }
        let done = self.inner.erase(at, blocks)?;
        for &b in blocks {
            self.forget_block(b);
        }
        if cut.is_some() {
            self.counts.interrupted_erases += 1;
            self.interrupted.extend(blocks.iter().copied());
            return Err(FlashError::PowerLoss);
        }
        Ok(done)
    }

    fn block_info(&self, b: BlockAddr) -> BlockInfo {
        self.inner.block_info(b)
    }

    fn mark_bad(&mut self, b: BlockAddr) -> Result<(), FlashError> {
        if !self.powered {
            return Err(FlashError::PowerLoss);
        }
        self.inner.mark_bad(b)
    }

    fn stats(&self) -> FlashStats {
        self.inner.stats()
    }

    fn die_free_ns(&self, die: crate::DieId) -> Nanos {
        self.inner.die_free_ns(die)
    }

    fn sync(&mut self) -> Result<(), FlashError> {
        if !self.powered {
            return Err(FlashError::PowerLoss);
        }
        self.inner.sync()
    }
}

/// What a read of a [`CutMode::Garbled`] page returns: the page's bytes with a few bits wrong
/// (three in the payload, two in the first 16 bytes of the OOB area, where every stack keeps
/// its record, unless `record` is false; each in a byte of its own, so they never cancel),
/// and a fingerprint likewise. Which bits is a function of the address alone, so every read
/// of the page agrees.
fn garble(op: &mut ReadOp<'_>, record: bool) {
    let a = op.addr;
    let page = (u64::from(a.die.0) << 48) | (u64::from(a.plane) << 40) | (u64::from(a.block) << 20);
    let page = page | u64::from(a.page);
    if op.content == Content::Bytes {
        flip_distinct(op.data, op.data.len(), 3, page);
    }
    if record {
        flip_distinct(op.oob, 16, 2, page ^ 0x6f6f_625f_6761_7262);
    }
    if let Content::Fingerprint(fp) = op.content {
        op.content = Content::Fingerprint(fp ^ (1 << (a.page % 64)));
    }
}

/// Flips one bit in each of `bits` distinct bytes among the first `span` of `buf`, chosen from
/// `seed` (fewer when the buffer is shorter).
fn flip_distinct(buf: &mut [u8], span: usize, bits: usize, seed: u64) {
    use rand::{Rng, SeedableRng};
    let span = span.min(buf.len());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for at in rand::seq::index::sample(&mut rng, span, bits.min(span)) {
        buf[at] ^= 1 << rng.gen_range(0..8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{preset, Content, DieId, Nand, Payload};

    fn dev() -> Faulty<Nand> {
        Faulty::new(Nand::in_memory(preset("tiny").unwrap()).unwrap())
    }
    fn p(block: u32, page: u32) -> PageAddr {
        PageAddr {
            die: DieId(0),
            plane: 0,
            block,
            page,
        }
    }
    fn prog(f: &mut Faulty<Nand>, a: PageAddr) -> Result<Nanos, FlashError> {
        f.program(
            0,
            &[ProgramOp {
                addr: a,
                payload: Payload::Fingerprint(a.page as u64),
                oob: &[],
            }],
        )
    }
    fn read(f: &mut Faulty<Nand>, a: PageAddr) -> Result<(Content, u32), FlashError> {
        let mut ops = [ReadOp::new(a, &mut [], &mut [])];
        f.read(0, &mut ops)?;
        Ok((ops[0].content, ops[0].corrected_bits))
    }

    #[test]
    fn torn_program_reads_uncorrectable_and_power_stays_off() {
        let mut f = dev();
        prog(&mut f, p(0, 0)).unwrap();
        f.cut_power_after(0, CutMode::Torn);
        assert_eq!(prog(&mut f, p(0, 1)), Err(FlashError::PowerLoss));
        assert_eq!(read(&mut f, p(0, 0)), Err(FlashError::PowerLoss));
        assert_eq!(
            f.take_cut_command(),
            Some(CutCommand::Program { oob: vec![] })
        );
        assert_eq!(f.take_cut_command(), None);
        f.restore_power();
        assert_eq!(read(&mut f, p(0, 0)).unwrap().0, Content::Fingerprint(0));
        assert!(matches!(
            read(&mut f, p(0, 1)),
            Err(FlashError::Uncorrectable { .. })
        ));
        // The torn page is consumed: the next program goes to page 2.
        assert!(matches!(
            prog(&mut f, p(0, 1)),
            Err(FlashError::NotErased(_))
        ));
        f.erase(0, &[p(0, 0).block_addr()]).unwrap();
        assert_eq!(read(&mut f, p(0, 1)).unwrap().0, Content::Erased);
        assert_eq!(f.counts().torn_programs, 1);
    }

    #[test]
    fn a_disturbing_cut_destroys_the_paired_earlier_page_too() {
        let mut f = dev();
        for page in 0..4 {
            prog(&mut f, p(0, page)).unwrap();
        }
        f.cut_power_after(0, CutMode::Disturbing { distance: 3 });
        assert_eq!(prog(&mut f, p(0, 4)), Err(FlashError::PowerLoss));
        assert_eq!(f.take_disturbed(), Some(p(0, 1)));
        assert_eq!(f.take_disturbed(), None);
        f.restore_power();
        for page in [1, 4] {
            assert!(matches!(
                read(&mut f, p(0, page)),
                Err(FlashError::Uncorrectable { .. })
            ));
            assert!(f.struck(p(0, page)));
        }
        for page in [0, 2, 3] {
            assert_eq!(
                read(&mut f, p(0, page)).unwrap().0,
                Content::Fingerprint(page.into())
            );
        }
        assert_eq!(f.counts().disturbed_pages, 1);
        assert_eq!(f.counts().torn_programs, 1);
        // A torn first page has no earlier page to disturb.
        f.cut_power_after(0, CutMode::Disturbing { distance: 1 });
        assert_eq!(prog(&mut f, p(1, 0)), Err(FlashError::PowerLoss));
        assert_eq!(f.take_disturbed(), None);
        assert_eq!(f.counts().disturbed_pages, 1);
        // The erase wipes the damage (the loss stays struck until the page is programmed).
        f.restore_power();
        f.erase(0, &[p(0, 0).block_addr()]).unwrap();
        assert_eq!(read(&mut f, p(0, 1)).unwrap().0, Content::Erased);
    }

    /// Programs page (0, 0) with 0x5a bytes and a record of sevens under a cut in `mode`,
    /// reboots and reads it back: the device, the page, what was written and what was read.
    #[allow(clippy::type_complexity)]
    fn torn_then_read(mode: CutMode) -> (Faulty<Nand>, PageAddr, [Vec<u8>; 2], [Vec<u8>; 2]) {
        let mut f = dev();
        let a = p(0, 0);
        let data = vec![0x5au8; f.config().geometry.page_size_bytes as usize];
        let oob = vec![7u8; 16];
        f.cut_power_after(0, mode);
        let op = ProgramOp {
            addr: a,
            payload: Payload::Bytes(&data),
            oob: &oob,
        };
        assert_eq!(f.program(0, &[op]), Err(FlashError::PowerLoss));
        f.restore_power();
        let (mut got, mut got_oob) = (vec![0u8; data.len()], vec![0u8; 16]);
        let mut ops = [ReadOp::new(a, &mut got, &mut got_oob)];
        f.read(0, &mut ops).unwrap();
        assert_eq!(ops[0].content, Content::Bytes);
        (f, a, [data, oob], [got, got_oob])
    }

    #[test]
    fn garbled_program_reads_without_error_but_wrong() {
        let (mut f, a, [data, oob], [got, got_oob]) = torn_then_read(CutMode::Garbled);
        let wrong_bits = |x: &[u8], y: &[u8]| -> u32 {
            x.iter().zip(y).map(|(a, b)| (a ^ b).count_ones()).sum()
        };
        assert_eq!(wrong_bits(&got, &data), 3, "the payload reads back wrong");
        assert_eq!(wrong_bits(&got_oob, &oob), 2, "the record reads back wrong");
        assert!(f.struck(a));
        let c = f.counts();
        assert_eq!((c.torn_programs, c.garbled_programs), (1, 1));
        // The same wrong bits every time, whether the payload is read or not.
        let mut again_oob = vec![0u8; 16];
        let mut ops = [ReadOp::new(a, &mut [], &mut again_oob)];
        f.read(0, &mut ops).unwrap();
        assert_eq!(again_oob, got_oob);
        f.erase(0, &[a.block_addr()]).unwrap();
        prog(&mut f, a).unwrap();
        assert_eq!(read(&mut f, a).unwrap().0, Content::Fingerprint(0));
    }

    #[test]
    fn garbled_payload_keeps_the_record_whole() {
        let (f, a, [data, oob], [got, got_oob]) = torn_then_read(CutMode::GarbledPayload);
        assert_eq!(got_oob, oob, "the record reads back whole");
        assert_ne!(got, data, "the payload does not");
        assert!(f.struck(a));
    }

    #[test]
    fn partial_program_keeps_a_prefix_tears_one_page_and_skips_the_rest() {
        let mut f = dev();
        let pages = [p(0, 0), p(1, 0), p(2, 0), p(3, 0)];
        let ops: Vec<ProgramOp<'_>> = pages
            .iter()
            .map(|&a| ProgramOp {
                addr: a,
                payload: Payload::Fingerprint(u64::from(a.block)),
                oob: &[],
            })
            .collect();
        f.cut_power_after(0, CutMode::Partial { intact: 1 });
        assert_eq!(f.program(0, &ops), Err(FlashError::PowerLoss));
        f.restore_power();
        assert_eq!(read(&mut f, pages[0]).unwrap().0, Content::Fingerprint(0));
        assert!(matches!(
            read(&mut f, pages[1]),
            Err(FlashError::Uncorrectable { .. })
        ));
        assert_eq!(read(&mut f, pages[2]).unwrap().0, Content::Erased);
        assert_eq!(read(&mut f, pages[3]).unwrap().0, Content::Erased);
        assert!(!f.struck(pages[0]) && f.struck(pages[1]) && !f.struck(pages[2]));
        assert_eq!(f.counts().partial_programs, 1);
        // Never-programmed pages can be programmed.
        prog(&mut f, pages[2]).unwrap();
        // More intact pages than the command has: the last one is torn.
        f.cut_power_after(0, CutMode::Partial { intact: 9 });
        assert_eq!(f.program(0, &[ops[3]]), Err(FlashError::PowerLoss));
        f.restore_power();
        assert!(f.struck(pages[3]));
        assert_eq!(
            f.counts().partial_programs,
            1,
            "one page: a plain torn program"
        );
    }

    #[test]
    fn clean_cut_does_not_program() {
        let mut f = dev();
        f.cut_power_after(1, CutMode::Clean);
        prog(&mut f, p(0, 0)).unwrap();
        assert_eq!(f.take_cut_command(), None);
        assert_eq!(prog(&mut f, p(0, 1)), Err(FlashError::PowerLoss));
        assert!(matches!(
            f.take_cut_command(),
            Some(CutCommand::Program { .. })
        ));
        f.restore_power();
        assert_eq!(read(&mut f, p(0, 1)).unwrap().0, Content::Erased);
        prog(&mut f, p(0, 1)).unwrap();
    }

    #[test]
    fn interrupted_erase_leaves_block_unusable_until_erased() {
        let mut f = dev();
        prog(&mut f, p(1, 0)).unwrap();
        f.cut_power_after(0, CutMode::Torn);
        assert_eq!(
            f.erase(0, &[p(1, 0).block_addr()]),
            Err(FlashError::PowerLoss)
        );
        assert_eq!(f.take_cut_command(), Some(CutCommand::Erase));
        f.restore_power();
        assert!(matches!(
            read(&mut f, p(1, 0)),
            Err(FlashError::Uncorrectable { .. })
        ));
        assert!(matches!(
            prog(&mut f, p(1, 0)),
            Err(FlashError::ProgramFailed(_))
        ));
        f.erase(0, &[p(1, 0).block_addr()]).unwrap();
        prog(&mut f, p(1, 0)).unwrap();
    }

    #[test]
    fn bit_flips_within_ecc_are_corrected_beyond_are_errors() {
        let mut f = dev();
        prog(&mut f, p(0, 0)).unwrap();
        f.flip_bits(p(0, 0), 3);
        assert_eq!(read(&mut f, p(0, 0)).unwrap(), (Content::Fingerprint(0), 3));
        f.flip_bits(p(0, 0), 6);
        assert!(matches!(
            read(&mut f, p(0, 0)),
            Err(FlashError::Uncorrectable { bit_errors: 9, .. })
        ));
    }

    #[test]
    fn failed_program_and_erase_make_grown_bad_blocks() {
        let mut f = dev();
        f.fail_program(p(2, 0));
        assert_eq!(
            prog(&mut f, p(2, 0)),
            Err(FlashError::ProgramFailed(p(2, 0)))
        );
        assert!(f.block_info(p(2, 0).block_addr()).bad);
        f.fail_erase(p(3, 0).block_addr());
        assert_eq!(
            f.erase(0, &[p(3, 0).block_addr()]),
            Err(FlashError::EraseFailed(p(3, 0).block_addr()))
        );
        assert!(f.block_info(p(3, 0).block_addr()).bad);
    }

    #[test]
    fn misdirected_write_lands_elsewhere() {
        let mut f = dev();
        f.misdirect_next_program();
        prog(&mut f, p(4, 0)).unwrap();
        assert_eq!(read(&mut f, p(4, 0)).unwrap().0, Content::Erased);
        assert_eq!(read(&mut f, p(5, 0)).unwrap().0, Content::Fingerprint(0));
        assert!(f.struck(p(4, 0)) && f.struck(p(5, 0)) && !f.struck(p(5, 1)));
        f.erase(0, &[p(4, 0).block_addr()]).unwrap();
        assert!(f.struck(p(4, 0)), "erased, its contents are still lost");
        prog(&mut f, p(4, 0)).unwrap();
        assert!(!f.struck(p(4, 0)) && f.struck(p(5, 0)));
    }

    #[test]
    fn struck_pages_are_the_damaged_ones_until_they_are_programmed_again() {
        let mut f = dev();
        prog(&mut f, p(0, 0)).unwrap();
        f.flip_bits(p(0, 0), 1);
        assert!(
            !f.struck(p(0, 0)),
            "a flip the ECC corrects damages nothing"
        );
        f.flip_bits(p(0, 0), 100);
        assert!(f.struck(p(0, 0)));
        f.cut_power_after(0, CutMode::Torn);
        assert_eq!(prog(&mut f, p(1, 0)), Err(FlashError::PowerLoss));
        f.restore_power();
        assert!(f.struck(p(1, 0)) && !f.struck(p(1, 1)));
        f.fail_erase(p(2, 0).block_addr());
        assert!(f.erase(0, &[p(2, 0).block_addr()]).is_err());
        assert!(f.struck(p(2, 5)));
        f.erase(0, &[p(0, 0).block_addr(), p(1, 0).block_addr()])
            .unwrap();
        assert!(
            f.struck(p(0, 0)) && f.struck(p(1, 0)) && !f.struck(p(1, 1)),
            "an erase wipes the damage, not the loss"
        );
        prog(&mut f, p(0, 0)).unwrap();
        prog(&mut f, p(1, 0)).unwrap();
        assert!(!f.struck(p(0, 0)) && !f.struck(p(1, 0)));
    }
}
