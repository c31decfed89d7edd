//! The device a torture run works on: a NAND model in memory, a watchdog that turns a livelock
//! into a reported failure, and the fault-injecting wrapper outermost.

use flash::fault::Faulty;
use flash::{
    BlockAddr, BlockInfo, DeviceConfig, Flash, FlashError, FlashStats, Gang, Nand, Nanos,
    ProgramOp, ReadOp,
};

/// The device every stack under torture runs on.
pub type Device = Faulty<Watchdog<Nand>>;

/// The harness's own default device: a 2 MiB slice of the `tiny` preset (2 dies, 4 KiB pages,
/// 8-page blocks, two dies per super-block, 32 super-blocks). Small enough that GC, checkpoints
/// and block reuse happen within a few hundred operations, which is where recovery bugs live.
#[expect(clippy::expect_used, reason = "the tiny preset is built into flash")]
pub fn small() -> DeviceConfig {
    let mut c = flash::preset("tiny").expect("the tiny preset exists");
    c.geometry.channels = 2;
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 32;
    c.geometry.pages_per_block = 8;
    c.gang = Gang {
        planes_per_unit: 1,
        dies_per_unit: 1,
        units_per_superblock: 2,
    };
    c.endurance_cycles = 1_000_000;
    c
}

/// [`small`] with two planes per die ganged into each write unit: every unit is a program
/// command of two pages, so a torn cut can leave one programmed and the other not
/// (`partial-program`), which one-page units never show.
pub fn small_gang() -> DeviceConfig {
    let mut c = small();
    c.geometry.planes_per_die = 2;
    c.geometry.blocks_per_plane = 16;
    // Each super-block is one die's two planes, so the device keeps `small`'s 32 of them.
    c.gang.planes_per_unit = 2;
    c.gang.units_per_superblock = 1;
    c
}

/// A device configuration by name: `small` (the default above), `small-gang` or any flash
/// preset.
pub fn named(name: &str) -> Result<DeviceConfig, UnknownDevice> {
    match name {
        "small" => Ok(small()),
        "small-gang" => Ok(small_gang()),
        _ => flash::preset(name).map_err(|preset| UnknownDevice {
            name: name.to_string(),
            preset,
        }),
    }
}

/// A device name that is neither `small` nor a flash preset ([`named`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{preset}, or small (the torture default), or small-gang")]
pub struct UnknownDevice {
    /// The name given.
    pub name: String,
    /// The flash crate's refusal (it names the known presets).
    pub preset: flash::UnknownPreset,
}

/// Counts flash commands and panics past a budget: a stack that loops forever issuing commands
/// (a GC that never converges, a recovery that retries forever) becomes a reported failure with
/// its seed instead of a hung run. A livelock that issues no flash command is not caught here.
pub struct Watchdog<F: Flash> {
    inner: F,
    ops: u64,
    budget: u64,
}

impl<F: Flash> Watchdog<F> {
    /// Wraps `inner`; the watchdog panics on the command after `budget` flash commands
    /// (reads, programs and erases each count one per call).
    pub fn new(inner: F, budget: u64) -> Self {
        Watchdog {
            inner,
            ops: 0,
            budget,
        }
    }

    /// The wrapped device (commands sent to it are not counted).
    pub fn inner_mut(&mut self) -> &mut F {
        &mut self.inner
    }

    fn tick(&mut self) {
        self.ops += 1;
        if self.ops > self.budget {
            panic!(
                "watchdog: more than {} flash commands in one run (livelock?)",
                self.budget
            );
        }
    }
}

impl<F: Flash> Flash for Watchdog<F> {
    fn config(&self) -> &DeviceConfig {
        self.inner.config()
    }
    fn read(&mut self, at: Nanos, ops: &mut [ReadOp<'_>]) -> Result<Nanos, FlashError> {
        self.tick();
        self.inner.read(at, ops)
    }
    fn program(&mut self, at: Nanos, ops: &[ProgramOp<'_>]) -> Result<Nanos, FlashError> {
        self.tick();
        self.inner.program(at, ops)
    }
    fn erase(&mut self, at: Nanos, blocks: &[BlockAddr]) -> Result<Nanos, FlashError> {
        self.tick();
        self.inner.erase(at, blocks)
    }
    fn block_info(&self, b: BlockAddr) -> BlockInfo {
        self.inner.block_info(b)
    }
    fn mark_bad(&mut self, b: BlockAddr) -> Result<(), FlashError> {
        self.inner.mark_bad(b)
    }
    fn stats(&self) -> FlashStats {
        self.inner.stats()
    }
    fn sync(&mut self) -> Result<(), FlashError> {
        self.inner.sync()
    }
}

/// A fresh, erased device with a watchdog budget.
pub fn fresh(config: DeviceConfig, budget: u64) -> Result<Device, FlashError> {
    Ok(Faulty::new(Watchdog::new(Nand::in_memory(config)?, budget)))
}
