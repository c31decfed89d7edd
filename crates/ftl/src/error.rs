//! What can go wrong in the FTL.

use flash::FlashError;
use fml::FmlError;

use crate::FtlConfigError;

#[derive(Debug, thiserror::Error)]
pub enum FtlError {
    #[error(transparent)]
    Fml(#[from] FmlError),
    #[error("{what}: offset {offset} length {len}: {why}")]
    BadRequest {
        what: &'static str,
        offset: u64,
        len: u64,
        why: String,
    },
    #[error("logical page {lpn} holds a fingerprint, but bytes were asked for (written in fingerprint mode)")]
    PayloadMode { lpn: u32 },
    #[error("logical page {lpn} could not be read: {source}")]
    Unreadable { lpn: u32, source: FlashError },
    #[error("FTL configuration: {0}")]
    Config(#[from] FtlConfigError),
    #[error("corrupted on flash: {0}")]
    Corrupted(String),
    #[error("logical page {lpn} was lost: its unit was unreadable when GC moved it")]
    Lost { lpn: u32 },
    /// The unit read back does not match the checksum written with it: its contents are lost
    /// and are never returned.
    #[error("logical page {lpn}: uncorrectable read of unit {unit}: its contents do not match their checksum")]
    Checksum { lpn: u32, unit: u32 },
}

impl From<FlashError> for FtlError {
    fn from(e: FlashError) -> Self {
        FtlError::Fml(FmlError::Flash(e))
    }
}
