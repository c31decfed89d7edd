//! Exhaustive power-cut sweeps (LittleFS-style): run a scripted workload, cutting power after
//! each flash command in turn, between commands and in the middle of one (a torn program or an
//! interrupted erase), and check the contract after every recovery. Works for any stack through
//! [`Subject`]; the scripts below cover the object and block interfaces.

use flash::fault::CutMode;
use flash::{DeviceConfig, Flash};

use crate::device;
use crate::oracle::{Mismatch, Oracle, SECTOR};
use crate::subject::{Fail, Subject, Variant};

/// One scripted command on a slot (sector offsets and counts).
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Write `count` sectors from sector `first`.
    Write {
        /// The slot written.
        slot: u32,
        /// First sector written.
        first: u32,
        /// Sectors written.
        count: u32,
    },
    /// Write at the slot's current end (object APPEND).
    Append {
        /// The slot appended to.
        slot: u32,
        /// Sectors appended.
        count: u32,
    },
    /// Object REMOVE, or TRIM of the slot's range.
    Discard(u32),
    /// Read the whole slot and check every sector against the oracle.
    Read(u32),
    /// Make every write before it durable.
    Flush,
    /// Set an object's length in bytes (objects only).
    Truncate {
        /// The slot truncated.
        slot: u32,
        /// The new length in bytes.
        len: u64,
    },
    /// Set tracked attribute `attr` of an object to a fresh value of `len` bytes (objects only).
    SetAttr {
        /// The slot.
        slot: u32,
        /// The attribute (below [`crate::oracle::ATTRS`]).
        attr: usize,
        /// Bytes in the value.
        len: usize,
    },
    /// Create the object empty (objects only; an object that exists is emptied and made anew
    /// by removing it first in the script).
    Create(u32),
    /// Write `len` bytes at byte `offset` (objects only): small objects, and writes that end
    /// inside a sector.
    WriteBytes {
        /// The slot written.
        slot: u32,
        /// First byte written.
        offset: u64,
        /// Bytes written.
        len: u64,
    },
    /// Write `len` bytes at the object's end in bytes (objects only).
    AppendBytes {
        /// The slot appended to.
        slot: u32,
        /// Bytes appended.
        len: u64,
    },
}

/// A scripted workload and where it runs.
#[derive(Clone, Debug)]
pub struct Script {
    /// The stack and its settings.
    pub variant: Variant,
    /// The device each cut point formats afresh (default [`sweep_device`]).
    pub device: DeviceConfig,
    /// Slots the script uses (default 4).
    pub slots: u32,
    /// Sectors per slot (default 96, i.e. 48 KiB).
    pub slot_sectors: u32,
    /// The commands, in order.
    pub steps: Vec<Step>,
}

/// Why a scripted run broke the contract, or could not run.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The in-memory device could not be made.
    #[error(transparent)]
    Device(#[from] flash::FlashError),
    /// The stack could not be formatted.
    #[error("{0}")]
    Format(#[source] Fail),
    /// The stack holds fewer bytes than the script's slots.
    #[error("the script needs more than the {capacity} bytes the stack holds")]
    TooSmall {
        /// Bytes the stack holds.
        capacity: u64,
    },
    /// A step of the uncut script failed.
    #[error("uncut script, {step:?}: {source}")]
    Uncut {
        /// The step.
        step: Step,
        /// How it failed.
        source: Fail,
    },
    /// A step of the script resumed after recovery failed with something other than the
    /// power loss.
    #[error("resumed step {step:?} failed: {source}")]
    Resumed {
        /// The step.
        step: Step,
        /// Why.
        source: Fail,
    },
    /// A step before the cut failed with something other than the power loss.
    #[error("{step:?}: {source}")]
    Step {
        /// The step.
        step: Step,
        /// How it failed.
        source: Fail,
    },
    /// Recovery after the cut failed.
    #[error("recovery failed: {0}")]
    Recovery(#[source] Fail),
    /// The check after recovery could not run.
    #[error("fsck: {0}")]
    Fsck(#[source] Fail),
    /// The check after recovery found problems.
    #[error("fsck: {}", .problems.join("; "))]
    Inconsistent {
        /// The problems found.
        problems: Vec<String>,
    },
    /// Whether a slot exists could not be told after recovery.
    #[error("slot {slot}: {source}")]
    Exists {
        /// The slot.
        slot: u32,
        /// How it failed.
        source: Fail,
    },
    /// A slot could not be read after recovery.
    #[error("read of slot {slot}: {source}")]
    Read {
        /// The slot.
        slot: u32,
        /// How it failed.
        source: Fail,
    },
    /// A slot recovered other data than the oracle allows.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
}

/// What a sweep did.
#[derive(Clone, Debug, Default)]
pub struct SweepReport {
    /// Flash commands the uncut script issues.
    pub flash_commands: u64,
    /// Power cuts that struck (clean and torn).
    pub cuts: u64,
    /// Of the runs that cut again during the recovery after the first cut, those whose second
    /// cut struck recovery (the others' recovery took fewer commands than the cut waited for).
    pub recovery_cuts: u64,
    /// Of those runs, the ones whose third cut, in the rest of the script run on after
    /// recovery, struck (the others' remaining steps took fewer commands).
    pub resumed_cuts: u64,
    /// Blocks the uncut script erased (GC ran when this is above zero).
    pub blocks_erased: u64,
    /// Cut points that broke the contract: "mode cut-point: what".
    pub failures: Vec<String>,
}

/// Object create/write/append/remove/flush, with truncations to byte lengths and attribute
/// changes, enough to fill the device several times over so GC and checkpoints run.
pub fn object_script() -> Vec<Step> {
    object_script_with_metadata_every(3)
}

/// [`object_script`] with its truncations and attribute changes in every `k`-th round only
/// (`k` = 5 loses a flushed sector: see `tests/sweep.rs`).
pub fn object_script_with_metadata_every(k: u32) -> Vec<Step> {
    use Step::*;
    let mut s = vec![
        Write {
            slot: 0,
            first: 0,
            count: 40,
        },
        Write {
            slot: 1,
            first: 10,
            count: 18,
        },
        Flush,
    ];
    for r in 0..30u32 {
        s.extend([
            Write {
                slot: 0,
                first: (r * 14) % 60,
                count: 24,
            },
            Append { slot: 1, count: 2 },
            Read(0),
            Write {
                slot: 2,
                first: 0,
                count: 32,
            },
            Flush,
            Write {
                slot: 2,
                first: 16,
                count: 6,
            },
            Read(1),
            Flush,
        ]);
        if r % k == 1 {
            // Byte-granular lengths and attributes, so cuts land between them and flushes.
            s.extend([
                Truncate {
                    slot: 0,
                    len: 20_000 + r as u64 * 777,
                },
                SetAttr {
                    slot: 0,
                    attr: (r / k % 3) as usize,
                    len: 1 + r as usize % 12,
                },
                Truncate {
                    slot: 1,
                    len: 3_001 + r as u64 * 5,
                },
            ]);
        }
        if r % 5 == 2 {
            s.extend([
                Discard(2),
                Write {
                    slot: 3,
                    first: 0,
                    count: 60,
                },
                Flush,
                Discard(1),
            ]);
        }
    }
    s
}

/// The object store's own services script (before 2026-12-07 in `crates/osd/tests/sweep.rs`,
/// now the one sweep): seven objects, three large (written and appended at byte offsets,
/// truncated, one removed and made anew) and three kept small enough for the small-object
/// buffer (one stays small, one spills past a write unit, is emptied and grows again, one is
/// removed and made anew), with reads that journal access times, enough to fill
/// [`sweep_device`] several times over. Run it with [`Script::services`].
pub fn services_script() -> Vec<Step> {
    use Step::*;
    let w = |slot: u32, offset: u64, len: u64| WriteBytes { slot, offset, len };
    let a = |slot: u32, len: u64| AppendBytes { slot, len };
    let t = |slot: u32, len: u64| Truncate { slot, len };
    let mut s = vec![
        Create(0),
        Create(1),
        Create(2),
        w(0, 0, 20_000),
        w(1, 5_000, 9_000),
        Create(4),
        Create(5),
        Create(6),
        Flush,
    ];
    for r in 0..24u64 {
        s.extend([w(4, (r * 50) % 400, 200), a(5, 350), w(6, r % 3 * 100, 100)]);
        if r % 12 == 11 {
            s.push(t(5, 0));
        }
        if r == 10 {
            s.extend([Discard(6), Create(6)]);
        }
        if r % 8 == 5 {
            s.extend([t(4, 0), Flush, t(6, 50)]);
        }
        s.extend([
            w(0, (r * 7_000) % 30_000, 12_000),
            a(1, 6_000),
            Read(0),
            Read(1),
            w(2, 0, 16_384),
            Read(2),
            Flush,
            t(1, 4_000 + r * 500),
            w(2, 8_000, 3_000),
            Flush,
        ]);
        if r == 2 {
            s.extend([Discard(2), Create(3), w(3, 0, 30_000), Flush, Create(2)]);
        }
    }
    s
}

/// Block write/trim/flush with overwrites, so GC and trimmed ranges interleave.
pub fn block_script() -> Vec<Step> {
    use Step::*;
    let mut s = vec![
        Write {
            slot: 0,
            first: 0,
            count: 64,
        },
        Flush,
    ];
    for r in 0..40u32 {
        s.extend([
            Write {
                slot: 1,
                first: (r * 9) % 40,
                count: 24,
            },
            Write {
                slot: 0,
                first: (r * 17) % 48,
                count: 16,
            },
            Flush,
            Write {
                slot: 2,
                first: 0,
                count: 40,
            },
            Read(1),
            Flush,
        ]);
        if r % 4 == 1 {
            s.extend([
                Discard(2),
                Write {
                    slot: 3,
                    first: 8,
                    count: 48,
                },
                Flush,
                Discard(0),
            ]);
        }
    }
    s
}

/// Where a sweep's second cut strikes the recovery after cut point `cut`: one of its first 64
/// flash commands, spread over the cut points by a mix of the number (a recovery of the sweep
/// scripts takes a few dozen commands, reads and its checkpoint's programs).
fn recovery_cut_point(cut: u64) -> u64 {
    let mut z = cut.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (z ^ (z >> 29)) % 64
}

/// Where a sweep's third cut strikes the script resumed after cut point `cut` and its
/// recovery: one of its first 256 flash commands (a few flushes of the scripts' steps).
fn resumed_cut_point(cut: u64) -> u64 {
    recovery_cut_point(cut ^ 0x5EED_0FC0_FFEE) * 4 + cut % 4
}

/// A device for sweeps: one die, 24 blocks of 8 pages (768 KiB), so short scripts fill it.
pub fn sweep_device() -> DeviceConfig {
    let mut c = device::small();
    c.geometry.channels = 1;
    c.geometry.blocks_per_plane = 24;
    c.gang.units_per_superblock = 1;
    c
}

impl Script {
    /// `steps` on `variant` with the defaults: [`sweep_device`], 4 slots of 96 sectors.
    pub fn new(variant: Variant, steps: Vec<Step>) -> Self {
        Script {
            variant,
            device: sweep_device(),
            slots: 4,
            slot_sectors: 96,
            steps,
        }
    }

    /// [`services_script`] on `variant`: seven slots of 84 sectors on [`sweep_device`] with
    /// two channels (48 blocks, 1.5 MiB: the device the script was written for).
    pub fn services(variant: Variant) -> Self {
        let mut device = sweep_device();
        device.geometry.channels = 2;
        Script {
            device,
            slots: 7,
            slot_sectors: 84,
            ..Script::new(variant, services_script())
        }
    }

    fn start(&self) -> Result<Box<dyn Subject>, SweepError> {
        let dev = device::fresh(self.device, u64::MAX)?;
        let (mut s, capacity) = self.variant.format(dev).map_err(SweepError::Format)?;
        let slot_bytes = self.slot_sectors as u64 * SECTOR as u64;
        if capacity < slot_bytes * self.slots as u64 {
            return Err(SweepError::TooSmall { capacity });
        }
        s.set_slot_bytes(slot_bytes);
        Ok(s)
    }

    fn discard_at_flush(&self) -> bool {
        matches!(self.variant, Variant::Osd(..))
    }

    /// Runs one step against the stack and the oracle.
    fn apply(&self, s: &mut dyn Subject, o: &mut Oracle, step: Step) -> Result<(), Fail> {
        match step {
            Step::Write { slot, first, count } => {
                let data = o.write(slot, first, count);
                s.write(slot, first as u64 * SECTOR as u64, &data)
            }
            Step::Append { slot, count } => {
                let first = o.len(slot);
                let data = o.write(slot, first, count);
                s.write(slot, first as u64 * SECTOR as u64, &data)
            }
            Step::Discard(slot) => {
                o.discard(slot);
                s.discard(slot)
            }
            Step::Read(slot) => {
                let mut buf = vec![0u8; self.slot_sectors as usize * SECTOR];
                let n = s.read(slot, 0, &mut buf)?;
                o.check_read(slot, 0, self.slot_sectors, &buf, n)
                    .map_err(|m| Fail::Other(m.to_string()))
            }
            Step::Flush => {
                s.flush()?;
                o.flush();
                Ok(())
            }
            Step::Truncate { slot, len } => {
                o.truncate(slot, len);
                s.truncate(slot, len)
            }
            Step::SetAttr { slot, attr, len } => {
                let v = o.attr_value(len);
                o.set_attr(slot, attr, Some(v.clone()));
                s.set_attr(slot, attr, Some(&v))
            }
            Step::Create(slot) => {
                o.create(slot);
                s.create(slot)
            }
            Step::WriteBytes { slot, offset, len } => {
                let data = o.write_bytes(slot, offset, len);
                s.write(slot, offset, &data)
            }
            Step::AppendBytes { slot, len } => {
                let offset = o.len_bytes(slot);
                let data = o.write_bytes(slot, offset, len);
                s.write(slot, offset, &data)
            }
        }
    }

    /// Runs the script with power cut after `cut` flash commands; returns whether it struck.
    pub fn cut_at(&self, cut: u64, mode: CutMode) -> Result<bool, SweepError> {
        self.cut_twice_at(cut, None, mode).map(|(struck, _)| struck)
    }

    /// [`Script::cut_at`], and with `in_recovery` set, power cut again after that many flash
    /// commands of the recovery that follows (same mode), then recovered once more. Returns
    /// whether each cut struck.
    pub fn cut_twice_at(
        &self,
        cut: u64,
        in_recovery: Option<u64>,
        mode: CutMode,
    ) -> Result<(bool, bool), SweepError> {
        self.cut_thrice_at(cut, in_recovery, None, mode)
            .map(|(first, second, _)| (first, second))
    }

    /// [`Script::cut_twice_at`], and with `resumed` set, once recovered and checked, the rest
    /// of the script runs on from the step the first cut struck (steps the recovered state
    /// cannot take, such as a truncation of an object the crash rolled back, are passed over),
    /// power is cut a third time after `resumed` flash commands, and the store is recovered
    /// and checked again (issue 15 item 4). Returns whether each cut struck.
    pub fn cut_thrice_at(
        &self,
        cut: u64,
        in_recovery: Option<u64>,
        resumed: Option<u64>,
        mode: CutMode,
    ) -> Result<(bool, bool, bool), SweepError> {
        let mut s = self.start()?;
        let mut o = Oracle::new(self.slots, self.slot_sectors, self.discard_at_flush());
        o.set_unit_bytes(self.device.write_unit_bytes() as u64);
        s.device().cut_power_after(cut, mode);
        let mut struck_at = None;
        for (i, &step) in self.steps.iter().enumerate() {
            match self.apply(s.as_mut(), &mut o, step) {
                Ok(()) => {}
                Err(Fail::PowerLoss) => {
                    struck_at = Some(i);
                    break;
                }
                Err(source) => return Err(SweepError::Step { step, source }),
            }
        }
        let (mut s, struck_recovery) = self.recover(s.crash(), in_recovery, mode)?;
        self.check(s.as_mut(), &mut o)?;
        let (Some(after), Some(i)) = (resumed, struck_at) else {
            return Ok((struck_at.is_some(), struck_recovery, false));
        };
        s.device().cut_power_after(after, mode);
        let objects = s.objects();
        let mut struck_resumed = false;
        for &step in &self.steps[i + 1..] {
            if !Self::applies(objects, &o, step) {
                continue;
            }
            match self.apply(s.as_mut(), &mut o, step) {
                Ok(()) => {}
                Err(Fail::PowerLoss) => {
                    struck_resumed = true;
                    break;
                }
                Err(source) => return Err(SweepError::Resumed { step, source }),
            }
        }
        if struck_resumed {
            let (mut s, _) = self.recover(s.crash(), None, mode)?;
            self.check(s.as_mut(), &mut o)?;
        }
        Ok((true, struck_recovery, struck_resumed))
    }

    /// Whether a step of the script can run on the state a recovery left: on objects, a
    /// truncation, attribute change, read or removal needs its object, a creation its absence
    /// (a crash may have rolled either back).
    fn applies(objects: bool, o: &Oracle, step: Step) -> bool {
        if !objects {
            return true;
        }
        match step {
            Step::Create(slot) => !o.exists(slot),
            Step::Truncate { slot, .. }
            | Step::SetAttr { slot, .. }
            | Step::Read(slot)
            | Step::Discard(slot) => o.exists(slot),
            _ => true,
        }
    }

    /// Restores power and recovers, first cutting power again after `in_recovery` flash
    /// commands of the recovery (then recovering once more); returns the store and whether
    /// that cut struck.
    fn recover(
        &self,
        mut dev: crate::device::Device,
        in_recovery: Option<u64>,
        mode: CutMode,
    ) -> Result<(Box<dyn Subject>, bool), SweepError> {
        let slot_bytes = self.slot_sectors as u64 * SECTOR as u64;
        let mut second = in_recovery;
        let mut struck_recovery = false;
        let mut s = loop {
            dev.restore_power();
            if let Some(after) = second.take() {
                dev.cut_power_after(after, mode);
            }
            match self.variant.open(dev, slot_bytes, false) {
                Ok(s) => break s,
                Err((Fail::PowerLoss, Some(d))) => {
                    struck_recovery = true;
                    dev = d;
                }
                Err((f, _)) => return Err(SweepError::Recovery(f)),
            }
        };
        // A cut armed for recovery that did not strike is disarmed.
        s.device().restore_power();
        Ok((s, struck_recovery))
    }

    /// Checks a recovered store against the oracle (fsck, every slot's bytes, length and
    /// attributes, the listing) and makes what it holds the oracle's truth.
    fn check(&self, s: &mut dyn Subject, o: &mut Oracle) -> Result<(), SweepError> {
        let slot_bytes = self.slot_sectors as u64 * SECTOR as u64;
        let problems = s.fsck().map_err(SweepError::Fsck)?;
        if !problems.is_empty() {
            return Err(SweepError::Inconsistent { problems });
        }
        let mut buf = vec![0u8; slot_bytes as usize];
        for slot in 0..self.slots {
            let got = if s
                .exists(slot)
                .map_err(|source| SweepError::Exists { slot, source })?
            {
                Some(
                    s.read(slot, 0, &mut buf)
                        .map_err(|source| SweepError::Read { slot, source })?,
                )
            } else {
                None
            };
            o.check_recovered(slot, got.map(|n| (&buf[..], n)), false, false)?;
            if s.objects() {
                // The length attribute agrees with the bytes read, and the attributes hold
                // their flushed values or later ones.
                let len = s
                    .length(slot)
                    .map_err(|source| SweepError::Exists { slot, source })?;
                if let (Some(len), Some(n)) = (len, got) {
                    if len != n as u64 {
                        return Err(Mismatch::LengthDisagrees { slot, len, read: n }.into());
                    }
                }
                let attrs = s
                    .attrs(slot)
                    .map_err(|source| SweepError::Read { slot, source })?;
                o.check_recovered_attrs(slot, attrs.as_deref(), false, false)?;
            }
        }
        if s.objects() {
            let listed = s
                .list()
                .map_err(|source| SweepError::Read { slot: 0, source })?;
            o.check_list(&listed)?;
        }
        Ok(())
    }

    /// Cuts power after every flash command of the script in turn: clean, torn, and torn with
    /// the pages read back garbled.
    pub fn sweep(&self) -> Result<SweepReport, SweepError> {
        let mut s = self.start()?;
        let mut o = Oracle::new(self.slots, self.slot_sectors, self.discard_at_flush());
        o.set_unit_bytes(self.device.write_unit_bytes() as u64);
        let before = s.device().ops();
        for &step in &self.steps {
            self.apply(s.as_mut(), &mut o, step)
                .map_err(|source| SweepError::Uncut { step, source })?;
        }
        let mut report = SweepReport {
            flash_commands: s.device().ops() - before,
            blocks_erased: s.device().stats().blocks_erased,
            ..SweepReport::default()
        };
        for cut in 0..=report.flash_commands {
            for mode in [CutMode::Clean, CutMode::Torn, CutMode::Garbled] {
                match self.cut_at(cut, mode) {
                    Ok(struck) => report.cuts += struck as u64,
                    Err(e) => report
                        .failures
                        .push(format!("{mode:?} cut after {cut}: {e}")),
                }
            }
            // And a torn cut that strikes the recovery after it too, at a point drawn from the
            // cut's number (issue 15 item 4: one extra run per cut point, not every pair).
            // Then the script runs on from the struck step and is cut a third time, at a
            // point drawn the same way from the cut's number.
            let again = recovery_cut_point(cut);
            let resumed = resumed_cut_point(cut);
            match self.cut_thrice_at(cut, Some(again), Some(resumed), CutMode::Torn) {
                Ok((struck, in_recovery, after_resuming)) => {
                    report.cuts += struck as u64 + in_recovery as u64 + after_resuming as u64;
                    report.recovery_cuts += in_recovery as u64;
                    report.resumed_cuts += after_resuming as u64;
                }
                Err(e) => report.failures.push(format!(
                    "Torn cut after {cut}, again after {again} commands of recovery, \
                     and after {resumed} commands of the resumed script: {e}"
                )),
            }
        }
        Ok(report)
    }
}
