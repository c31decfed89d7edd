//! What can go wrong in the FTL.

use flash::FlashError;
use fml::FmlError;

use crate::FtlConfigError;

/// Why an FTL command, or opening the FTL, failed.
#[derive(Debug, thiserror::Error)]
pub enum FtlError {
    /// The FML below failed (no space, a device error).
    #[error(transparent)]
    Fml(#[from] FmlError),
    /// A request the FTL refuses: not sector-aligned, empty, beyond the logical capacity, or
    /// with a data buffer of another length.
    #[error("{what}: offset {offset} length {len}: {why}")]
    BadRequest {
        /// The command (`write`, `read`, `trim`).
        what: &'static str,
        /// The request's offset, in bytes.
        offset: u64,
        /// The request's length, in bytes.
        len: u64,
        /// Why it is refused.
        why: String,
    },
    /// Bytes were asked of a logical page written in fingerprint mode.
    #[error("logical page {lpn} holds a fingerprint, but bytes were asked for (written in fingerprint mode)")]
    PayloadMode {
        /// The logical page.
        lpn: u32,
    },
    /// The unit the map names for a logical page could not be read, or does not hold that
    /// page (it reads erased, or its OOB record names something else).
    #[error("logical page {lpn} could not be read: {source}")]
    Unreadable {
        /// The logical page.
        lpn: u32,
        /// The write unit (its `Vpa`) the map names for it.
        unit: u32,
        /// The device's error; for a unit that read but is not the page's, an uncorrectable
        /// read of its first page with 0 bit errors.
        source: FlashError,
    },
    /// The settings are refused.
    #[error("FTL configuration: {0}")]
    Config(#[from] FtlConfigError),
    /// Recovery found what it cannot rebuild a map from: records of an older version only, or a
    /// mapped unit the FML cannot mark valid (twice, in a bad block, past a write pointer).
    #[error("corrupted on flash: {0}")]
    Corrupted(String),
    /// The logical page's unit was unreadable when GC moved it: its contents are gone, and reads
    /// (and partial writes, which would merge with them) fail until the whole page is written.
    #[error("logical page {lpn} was lost: its unit was unreadable when GC moved it")]
    Lost {
        /// The logical page.
        lpn: u32,
    },
    /// The unit read back does not match the checksum written with it: its contents are lost
    /// and are never returned.
    #[error("logical page {lpn}: uncorrectable read of unit {unit}: its contents do not match their checksum")]
    Checksum {
        /// The logical page.
        lpn: u32,
        /// The write unit read (its `Vpa`).
        unit: u32,
    },
}

impl FtlError {
    /// The write unit the error names as unreadable or failing its checksum, if any.
    pub fn unit(&self) -> Option<u32> {
        match self {
            FtlError::Unreadable { unit, .. } | FtlError::Checksum { unit, .. } => Some(*unit),
            _ => None,
        }
    }
}

impl From<FlashError> for FtlError {
    fn from(e: FlashError) -> Self {
        FtlError::Fml(FmlError::Flash(e))
    }
}
