//! The fault kinds a torture run injects, how a user names them (`--faults LIST`), and the tally
//! of what was injected.
//!
//! Every kind goes through [`flash::fault::Faulty`]; this module only decides *which* and counts
//! them. The kinds split in two by what the durability contract can promise after them
//! (docs/RELIABILITY.md has the full rules):
//! - **masked** faults (power cuts, torn programs, interrupted erases, bit flips the ECC
//!   corrects, program and erase failures that grow bad blocks) must be invisible: every
//!   flushed write stays intact and no read fails;
//! - **destructive** faults (bit flips beyond the ECC, whole-page failures, misdirected writes)
//!   destroy data the stack has no second copy of: reads of it may fail, and recovery may refuse
//!   a damaged image, but bytes that were never written there must never come back.

use std::fmt;
use std::ops::AddAssign;

/// One kind of fault, as `--faults` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Power fails between two flash commands.
    PowerCut,
    /// Power fails during a program (torn program) or an erase (interrupted erase).
    Torn,
    /// Bit errors the ECC corrects.
    BitFlip,
    /// Bit errors beyond what the ECC corrects: the page reads as uncorrectable.
    BitFlipBeyondEcc,
    /// A page whose cells fail entirely: every read of it is uncorrectable.
    PageFailure,
    /// A program reports status fail; the block becomes a grown bad block.
    ProgramFailure,
    /// An erase reports status fail; the block becomes a grown bad block.
    EraseFailure,
    /// A program lands on the wrong page (or nowhere) while reporting success.
    MisdirectedWrite,
    /// A torn program whose pages read back without an error but with a few bits wrong (the
    /// ECC miscorrected them): only the stack's checksums can tell. A way a torn cut strikes,
    /// not a fault of its own: enabling it makes torn cuts, and some of them garbled.
    Garbled,
    /// A torn program of several pages that programmed only the first ones whole, tore the
    /// next and left the rest erased. Like [`FaultKind::Garbled`], a way a torn cut strikes.
    PartialProgram,
    /// A torn program whose pages read back without an error, their OOB bytes whole and their
    /// payload a few bits wrong. Not in `all` or `power`: the FTL's stacks (ftl, dftl, blockfs)
    /// and the object store's (osd, ofs) survive it, p-OFTL does not yet (its data record
    /// carries no checksum of the payload it describes; docs/RELIABILITY.md, finding 38).
    GarbledPayload,
    /// A torn program that also destroys an earlier page of its block, written and flushed
    /// long before (the paired lower page of a multi-level cell). A way a torn cut strikes,
    /// like [`FaultKind::Garbled`], and destructive. Not in `power` (the contract cannot hold
    /// whole after it) nor in `all`: nearly every cut of a run would then destroy flushed data,
    /// and `all` campaigns would check almost nothing strictly (docs/RELIABILITY.md); name it
    /// (`--faults all,paired-page`).
    PairedPage,
}

impl FaultKind {
    /// Every kind, in `--faults` listing order.
    pub const ALL: [FaultKind; 12] = [
        FaultKind::PowerCut,
        FaultKind::Torn,
        FaultKind::BitFlip,
        FaultKind::BitFlipBeyondEcc,
        FaultKind::PageFailure,
        FaultKind::ProgramFailure,
        FaultKind::EraseFailure,
        FaultKind::MisdirectedWrite,
        FaultKind::Garbled,
        FaultKind::PartialProgram,
        FaultKind::GarbledPayload,
        FaultKind::PairedPage,
    ];

    /// The kind's `--faults` name (kebab-case, e.g. `power-cut`).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::PowerCut => "power-cut",
            FaultKind::Torn => "torn",
            FaultKind::BitFlip => "bit-flip",
            FaultKind::BitFlipBeyondEcc => "bit-flip-beyond-ecc",
            FaultKind::PageFailure => "page-failure",
            FaultKind::ProgramFailure => "program-failure",
            FaultKind::EraseFailure => "erase-failure",
            FaultKind::MisdirectedWrite => "misdirected-write",
            FaultKind::Garbled => "garbled",
            FaultKind::PartialProgram => "partial-program",
            FaultKind::GarbledPayload => "garbled-payload",
            FaultKind::PairedPage => "paired-page",
        }
    }

    /// Whether the fault destroys data the stack keeps no second copy of, so that errors (not
    /// wrong bytes) become acceptable answers.
    pub fn destructive(self) -> bool {
        matches!(
            self,
            FaultKind::BitFlipBeyondEcc
                | FaultKind::PageFailure
                | FaultKind::MisdirectedWrite
                | FaultKind::PairedPage
        )
    }

    /// Whether the kind is a way a torn cut strikes (unreadable, garbled or partial).
    pub fn tears(self) -> bool {
        matches!(
            self,
            FaultKind::Torn
                | FaultKind::Garbled
                | FaultKind::PartialProgram
                | FaultKind::GarbledPayload
                | FaultKind::PairedPage
        )
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of fault kinds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FaultSet(u16);

impl FaultSet {
    /// The empty set: no faults injected.
    pub const NONE: FaultSet = FaultSet(0);

    /// Every kind, masked and destructive, but `garbled-payload` and `paired-page`
    /// ([`FaultSet::ALL_KINDS`]).
    pub fn all() -> FaultSet {
        Self::ALL_KINDS
    }
    /// Power cuts only, clean and torn (garbled and partial programs included): the faults
    /// after which the whole contract holds.
    pub fn power() -> FaultSet {
        [
            FaultKind::PowerCut,
            FaultKind::Torn,
            FaultKind::Garbled,
            FaultKind::PartialProgram,
        ]
        .into_iter()
        .collect()
    }
    /// The ways a torn cut may strike in this set ([`FaultKind::Torn`], [`FaultKind::Garbled`],
    /// [`FaultKind::PartialProgram`]).
    pub fn tears(self) -> impl Iterator<Item = FaultKind> {
        self.iter().filter(|k| k.tears())
    }
    /// The kinds a run injects as faults of their own: the set without the ways a torn cut
    /// strikes, plus one [`FaultKind::Torn`] when the set has any of them.
    pub fn injected(self) -> Vec<FaultKind> {
        let mut kinds: Vec<FaultKind> = self.iter().filter(|k| !k.tears()).collect();
        if self.tears().next().is_some() {
            let at = kinds.partition_point(|&k| k < FaultKind::Torn);
            kinds.insert(at, FaultKind::Torn);
        }
        kinds
    }
    /// Every kind but [`FaultKind::GarbledPayload`] and [`FaultKind::PairedPage`] (both named
    /// only: every stack survives the first since 2026-12-07, but adding it would move the
    /// schedules of the pinned seeds), as a constant ([`FaultSet::all`]).
    pub const ALL_KINDS: FaultSet = FaultSet(
        ((1 << FaultKind::ALL.len()) - 1)
            & !FaultKind::GarbledPayload.bit()
            & !FaultKind::PairedPage.bit(),
    );

    /// The set without `k`.
    pub const fn without(self, k: FaultKind) -> FaultSet {
        FaultSet(self.0 & !k.bit())
    }
    /// Whether `k` is in the set.
    pub fn contains(self, k: FaultKind) -> bool {
        self.0 & k.bit() != 0
    }
    /// Adds `k` to the set.
    pub fn insert(&mut self, k: FaultKind) {
        self.0 |= k.bit();
    }
    /// Whether the set holds no kind.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The kinds in the set, in [`FaultKind::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }
    /// Whether any kind in the set is destructive.
    pub fn destructive(self) -> bool {
        self.iter().any(FaultKind::destructive)
    }

    /// Parses a comma-separated list of kind names; `all`, `power` (power-cut,torn) and `none`
    /// are shorthands. The error names the bad item and lists the valid ones.
    pub fn parse(list: &str) -> Result<FaultSet, UnknownFault> {
        let mut set = FaultSet::NONE;
        for item in list.split(',').map(str::trim) {
            match item {
                "all" => set.0 |= FaultSet::all().0,
                "power" => set.0 |= FaultSet::power().0,
                "none" => {}
                _ => match FaultKind::ALL.iter().find(|k| k.name() == item) {
                    Some(&k) => set.insert(k),
                    None => {
                        return Err(UnknownFault {
                            item: item.to_string(),
                        })
                    }
                },
            }
        }
        Ok(set)
    }
}

/// An item of a fault list that names no fault kind ([`FaultSet::parse`]); the message lists
/// the kinds and the shorthands.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault kind '{item}'; known kinds: {}, or all, power, none", FaultKind::ALL.map(FaultKind::name).join(", "))]
pub struct UnknownFault {
    /// The item.
    pub item: String,
}

impl FromIterator<FaultKind> for FaultSet {
    fn from_iter<I: IntoIterator<Item = FaultKind>>(iter: I) -> Self {
        let mut s = FaultSet::NONE;
        for k in iter {
            s.insert(k);
        }
        s
    }
}

impl fmt::Debug for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.iter().map(FaultKind::name).collect();
        f.write_str(&names.join(","))
    }
}

/// Faults that actually happened, by kind. Power cuts, torn programs, interrupted erases,
/// program and erase failures and misdirected writes are counted when they strike (as the
/// device reports them), not when they are armed: an armed failure whose block is never
/// programmed or erased again does not count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultTally {
    /// Every power cut, clean or not (torn programs and interrupted erases included).
    pub power_cuts: u64,
    /// Power cuts that struck during a program.
    pub torn_programs: u64,
    /// Of those, programs whose pages read back garbled without an error.
    pub garbled_programs: u64,
    /// Of those, programs of several pages that programmed only some of them.
    pub partial_programs: u64,
    /// Earlier pages a torn program destroyed with it (paired pages).
    pub disturbed_pages: u64,
    /// Power cuts that struck during an erase.
    pub interrupted_erases: u64,
    /// Bit flips the ECC corrects.
    pub bit_flips_within_ecc: u64,
    /// Bit flips beyond what the ECC corrects (the page reads as uncorrectable).
    pub bit_flips_beyond_ecc: u64,
    /// Pages whose cells failed entirely.
    pub page_failures: u64,
    /// Programs that reported status fail (each grows a bad block).
    pub program_failures: u64,
    /// Erases that reported status fail (each grows a bad block).
    pub erase_failures: u64,
    /// Programs that landed on the wrong page, or nowhere, while reporting success.
    pub misdirected_writes: u64,
    /// Destructive flips and page failures that struck a stale page (one the stack no longer
    /// needs): the run stayed under the strict contract.
    pub destructive_on_stale: u64,
    /// Destructive flips and page failures on a guarded unit (a data or parity unit of an
    /// object with parity) with no other damage in its group: parity must mask them.
    pub masked_by_parity: u64,
    /// Of those, strikes a crash exposed before the group's parity (or the unit's place in
    /// the index) reached flash: they relaxed the run.
    pub exposed_by_crash: u64,
}

impl FaultTally {
    /// Clean cuts: power cuts that damaged no command.
    pub fn clean_cuts(&self) -> u64 {
        self.power_cuts - self.torn_programs - self.interrupted_erases
    }

    /// (name, count) rows, in a fixed order, for summaries.
    pub fn rows(&self) -> [(&'static str, u64); 15] {
        [
            ("power cuts (all)", self.power_cuts),
            ("  torn programs", self.torn_programs),
            ("    read back garbled", self.garbled_programs),
            ("    partly programmed", self.partial_programs),
            ("    paired pages destroyed", self.disturbed_pages),
            ("  interrupted erases", self.interrupted_erases),
            ("bit flips within ECC", self.bit_flips_within_ecc),
            ("bit flips beyond ECC", self.bit_flips_beyond_ecc),
            ("whole-page failures", self.page_failures),
            ("program failures", self.program_failures),
            ("erase failures", self.erase_failures),
            ("misdirected writes", self.misdirected_writes),
            ("destructive on stale pages", self.destructive_on_stale),
            ("masked by parity", self.masked_by_parity),
            ("  exposed by a crash", self.exposed_by_crash),
        ]
    }

    /// The smallest count over the kinds in `set` (the must-show figure: every kind at least
    /// N times).
    pub fn min_over(&self, set: FaultSet) -> u64 {
        set.iter()
            .map(|k| match k {
                FaultKind::PowerCut => self.clean_cuts(),
                FaultKind::Torn => self.torn_programs.min(self.interrupted_erases),
                FaultKind::BitFlip => self.bit_flips_within_ecc,
                FaultKind::BitFlipBeyondEcc => self.bit_flips_beyond_ecc,
                FaultKind::PageFailure => self.page_failures,
                FaultKind::ProgramFailure => self.program_failures,
                FaultKind::EraseFailure => self.erase_failures,
                FaultKind::MisdirectedWrite => self.misdirected_writes,
                FaultKind::Garbled | FaultKind::GarbledPayload => self.garbled_programs,
                FaultKind::PartialProgram => self.partial_programs,
                FaultKind::PairedPage => self.disturbed_pages,
            })
            .min()
            .unwrap_or(0)
    }
}

impl AddAssign for FaultTally {
    fn add_assign(&mut self, o: FaultTally) {
        self.power_cuts += o.power_cuts;
        self.torn_programs += o.torn_programs;
        self.garbled_programs += o.garbled_programs;
        self.partial_programs += o.partial_programs;
        self.disturbed_pages += o.disturbed_pages;
        self.interrupted_erases += o.interrupted_erases;
        self.bit_flips_within_ecc += o.bit_flips_within_ecc;
        self.bit_flips_beyond_ecc += o.bit_flips_beyond_ecc;
        self.page_failures += o.page_failures;
        self.program_failures += o.program_failures;
        self.erase_failures += o.erase_failures;
        self.misdirected_writes += o.misdirected_writes;
        self.destructive_on_stale += o.destructive_on_stale;
        self.masked_by_parity += o.masked_by_parity;
        self.exposed_by_crash += o.exposed_by_crash;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        let s = FaultSet::parse("power-cut, bit-flip,misdirected-write").unwrap();
        assert_eq!(s.to_string(), "power-cut,bit-flip,misdirected-write");
        assert!(s.destructive());
        assert_eq!(FaultSet::parse("all").unwrap(), FaultSet::all());
        assert_eq!(FaultSet::parse("power").unwrap(), FaultSet::power());
        assert!(!FaultSet::power().destructive());
        assert!(FaultSet::parse("none").unwrap().is_empty());
        let tearing = FaultSet::parse("garbled,bit-flip").unwrap();
        assert_eq!(
            tearing.injected(),
            [FaultKind::Torn, FaultKind::BitFlip],
            "a way of tearing injects torn cuts"
        );
        assert_eq!(FaultSet::all().injected().len(), 8);
        assert!(!FaultSet::all().contains(FaultKind::PairedPage));
        assert!(FaultSet::parse("all,paired-page")
            .unwrap()
            .contains(FaultKind::PairedPage));
        assert!(!FaultSet::power().contains(FaultKind::PairedPage));
        assert!(!FaultSet::all().contains(FaultKind::GarbledPayload));
        assert!(FaultSet::parse("garbled-payload")
            .unwrap()
            .contains(FaultKind::GarbledPayload));
        let e = FaultSet::parse("power-cut,gremlins").unwrap_err();
        assert_eq!(e.item, "gremlins");
        assert!(e.to_string().contains("page-failure"), "{e}");
    }
}
