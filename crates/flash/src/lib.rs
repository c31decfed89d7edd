//! The NAND flash device: the papers' RawSSD behind the FAL (OSSD-13 V-G, V-H).
//!
//! # The NAND contract ([`Flash`])
//! - A page is read, programmed or (with its block) erased; nothing else.
//! - A page is programmed once after its block was erased, and the pages of a block are
//!   programmed in order 0, 1, 2, ...: anything else is an error, never silently allowed.
//! - An erased page reads as [`Content::Erased`] with an OOB area of `0xFF` bytes.
//! - A block that fails a program or an erase, or that was bad from the factory, is *bad*: every
//!   later program or erase of it returns [`FlashError::BadBlock`]. Reads of pages it already
//!   holds still work, so the owner can move them out.
//! - Every operation is issued at a virtual time and returns its completion time, computed from
//!   the availability of the die and its channel bus ([`nand`] has the time model).
//!
//! A page holds either real bytes or a 64-bit fingerprint of them ([`Payload`]); the writer
//! chooses per program, so multi-gigabyte simulations stay small and are still checkable. A
//! timing-only device ([`PayloadMode::Timing`]) keeps neither, for studies at geometries where
//! even a fingerprint per page is too much memory.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod config;
pub mod fault;
pub mod fingerprint;
pub mod gang;
pub mod geometry;
pub mod image;
pub mod nand;
pub mod store;

pub use config::{
    preset, preset_ftl_defaults, presets, DeviceConfig, DeviceConfigError, PayloadMode, Preset,
    UnknownPreset,
};
pub use gang::Ganged;
pub use geometry::{BlockAddr, DieId, Gang, Geometry, Nanos, PageAddr, Scheduling, Timing};
pub use nand::Nand;

/// What a program stores in a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Real bytes, exactly one page long.
    Bytes(&'a [u8]),
    /// A 64-bit stand-in for the page's bytes.
    Fingerprint(u64),
}

/// What a read of a programmed page on a timing-only device ([`PayloadMode::Timing`]) returns
/// as its fingerprint: the device kept nothing to return. A layer that knows its device is
/// timing-only takes it as "not stored", never as data to check. (A real fingerprint equals it
/// with probability 2^-64.)
pub const NOT_STORED: u64 = u64::from_be_bytes(*b"NOTSTORD");

/// What a read found in a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content {
    /// Never programmed since its block was erased.
    Erased,
    /// Real bytes, copied into the caller's buffer when one was given.
    Bytes,
    /// A fingerprint written in place of bytes.
    Fingerprint(u64),
}

/// CRC-32C of what a unit holds: its bytes, or in fingerprint mode the 64-bit token standing
/// for them (little-endian), so the checksum is defined in both payload modes. The object store
/// and the FTL keep it in each unit's OOB record (docs/FORMAT.md).
pub fn payload_crc(payload: Payload<'_>) -> u32 {
    match payload {
        Payload::Bytes(b) => crc32c::crc32c(b),
        Payload::Fingerprint(fp) => crc32c::crc32c(&fp.to_le_bytes()),
    }
}

/// The checksum of what a read found (`data` the unit's bytes for [`Content::Bytes`]); `None`
/// for an erased unit, which holds nothing to check.
pub fn content_crc(content: Content, data: &[u8]) -> Option<u32> {
    match content {
        Content::Bytes => Some(payload_crc(Payload::Bytes(data))),
        Content::Fingerprint(fp) => Some(payload_crc(Payload::Fingerprint(fp))),
        Content::Erased => None,
    }
}

/// One page of a batched program.
#[derive(Clone, Copy, Debug)]
pub struct ProgramOp<'a> {
    /// The page to program.
    pub addr: PageAddr,
    /// What it stores.
    pub payload: Payload<'a>,
    /// At most `oob_size_bytes`; the rest of the OOB area stays 0xFF.
    pub oob: &'a [u8],
}

/// One page of a batched read. `data` may be empty to read only the OOB area (the transfer then
/// moves only OOB bytes, as a recovery scan does).
#[derive(Debug)]
pub struct ReadOp<'a> {
    /// The page to read.
    pub addr: PageAddr,
    /// Receives the page's bytes (a whole page, or empty for the OOB area only).
    pub data: &'a mut [u8],
    /// Receives the start of the page's OOB area (as many bytes as it is long).
    pub oob: &'a mut [u8],
    /// Set by the read.
    pub content: Content,
    /// Bit errors the ECC corrected in this read.
    pub corrected_bits: u32,
}

impl<'a> ReadOp<'a> {
    /// A read of `addr` into `data` and `oob`; `content` and `corrected_bits` are set by the read.
    pub fn new(addr: PageAddr, data: &'a mut [u8], oob: &'a mut [u8]) -> Self {
        ReadOp {
            addr,
            data,
            oob,
            content: Content::Erased,
            corrected_bits: 0,
        }
    }
}

/// Wear and state of one physical block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockInfo {
    /// Erases the block went through; an erase at `endurance_cycles` fails instead.
    pub erase_count: u32,
    /// Pages programmed since the last erase (the next page to program).
    pub next_page: u32,
    /// Bad: from the factory, or grown (a failed program or erase, or marked by the FML).
    pub bad: bool,
    /// Bad from the factory (drawn at format from `factory_bad_ppm`).
    pub factory_bad: bool,
}

/// Counters of physical operations, kept by the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Physical pages read (OOB-only reads included).
    pub pages_read: u64,
    /// Physical pages programmed.
    pub pages_programmed: u64,
    /// Blocks erased (failed erases not counted).
    pub blocks_erased: u64,
    /// Bytes moved over the channel buses, data and OOB, both ways.
    pub bytes_transferred: u64,
    /// The device's busy horizon: the latest completion time of any command issued so far.
    pub busy_until_ns: Nanos,
}

/// Why a device command failed; each breach of the NAND contract has its own variant.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FlashError {
    /// An address beyond the geometry.
    #[error("{what} address out of range: {detail}")]
    OutOfRange {
        /// What was addressed (`block` or `page`).
        what: &'static str,
        /// The address.
        detail: String,
    },
    /// A program or erase of a bad block.
    #[error("{0} is a bad block")]
    BadBlock(BlockAddr),
    /// A program of a page already programmed since its block's erase.
    #[error("program of {0}: page is not erased")]
    NotErased(PageAddr),
    /// A program of a page other than its block's next one.
    #[error("program of {addr}: out of order, the block's next page is {expected}")]
    OutOfOrder {
        /// The page asked for.
        addr: PageAddr,
        /// The block's next page to program.
        expected: u32,
    },
    /// A buffer or OOB record of the wrong length.
    #[error("{what} of {addr}: {got} bytes given, the page takes {expected}")]
    Size {
        /// Which buffer (`program data`, `program OOB`, `read buffer`, `write unit`, ...).
        what: &'static str,
        /// The (first) page of the command.
        addr: PageAddr,
        /// Bytes given.
        got: usize,
        /// Bytes expected (the most, for an OOB record).
        expected: usize,
    },
    /// A program that failed (injected); its block is marked bad.
    #[error("program of {0} failed; the block is now a grown bad block")]
    ProgramFailed(PageAddr),
    /// An erase that failed: the block reached its endurance, or a failure was injected. The
    /// block is marked bad.
    #[error("erase of {0} failed (worn out or faulty); the block is now a grown bad block")]
    EraseFailed(BlockAddr),
    /// A read with more bit errors than the ECC corrects; its data is not returned.
    #[error("read of {addr}: {bit_errors} bit errors, beyond what the ECC corrects")]
    Uncorrectable {
        /// The page.
        addr: PageAddr,
        /// Bit errors found (`u32::MAX` for a torn page, 0 where the count is unknown: a
        /// damaged image slot, or a layer above refusing what it read).
        bit_errors: u32,
    },
    /// Power is off after an injected power cut ([`fault::Faulty`]).
    #[error("power is off (a power cut was injected); reopen the device")]
    PowerLoss,
    /// An image file could not be used.
    #[error("device image {path}: {msg}")]
    Image {
        /// The file.
        path: String,
        /// What is wrong with it.
        msg: String,
    },
    /// The device configuration is refused.
    #[error("device configuration: {0}")]
    Config(#[from] DeviceConfigError),
}

/// The device boundary: physical pages and blocks, batched so one command can drive several
/// planes and dies at once (multi-plane pages on one die share one array operation).
pub trait Flash {
    /// The device configuration.
    fn config(&self) -> &DeviceConfig;
    /// Reads pages issued together at `at`; returns when the last one is transferred.
    fn read(&mut self, at: Nanos, ops: &mut [ReadOp<'_>]) -> Result<Nanos, FlashError>;
    /// Programs pages issued together at `at`; returns when the last one is programmed.
    fn program(&mut self, at: Nanos, ops: &[ProgramOp<'_>]) -> Result<Nanos, FlashError>;
    /// Erases blocks issued together at `at`.
    fn erase(&mut self, at: Nanos, blocks: &[BlockAddr]) -> Result<Nanos, FlashError>;
    /// A block's wear and state.
    fn block_info(&self, b: BlockAddr) -> BlockInfo;
    /// Marks a block bad (the FML retires it); persistent like any other block state.
    fn mark_bad(&mut self, b: BlockAddr) -> Result<(), FlashError>;
    /// Counters of the physical operations so far.
    fn stats(&self) -> FlashStats;
    /// Makes everything written so far durable (image backends).
    fn sync(&mut self) -> Result<(), FlashError>;
    /// When `die` finishes the work issued to it so far (a scheduler's view of the queue wait
    /// of one parallel element, BLOCKMGMT-09 3.2). The default, the whole device's busy horizon, is
    /// a safe over-estimate for devices that do not track dies.
    fn die_free_ns(&self, _die: DieId) -> Nanos {
        self.stats().busy_until_ns
    }
}
