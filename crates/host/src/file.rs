//! A regular file opened for scheduled I/O: its data object, and the object I/O instances
//! (OIOs) its reads and writes become for OAQ (OSSD-13 §IV-C: the host-side object-aware I/O
//! scheduler sees objects, not blocks).

use ofs::Ofs;
use osd::Oid;
use sched::{Direction, ObjectId, Oio, Priority};
use vfs::{FsError, Ino};

/// Bytes of a sector, the unit OIOs count in.
pub const SECTOR_BYTES: u64 = 512;

/// A regular file opened for scheduled I/O: its data object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledFile {
    /// The file's inode.
    pub ino: Ino,
    oid: Oid,
}

impl ScheduledFile {
    /// Opens regular file `ino` of `ofs` for scheduled I/O.
    pub fn open<S: ofs::Store>(ofs: &mut Ofs<S>, ino: Ino) -> Result<ScheduledFile, FsError> {
        Ok(ScheduledFile {
            ino,
            oid: ofs.data_object(ino)?,
        })
    }

    /// The file's data object, as the store addresses it.
    pub fn oid(&self) -> Oid {
        self.oid
    }

    /// The file's data object, as OAQ names it.
    pub fn object(&self) -> ObjectId {
        ObjectId(self.oid.object.0)
    }

    /// The OIO of a read or write of `len` bytes at `offset` of the file. The range must be
    /// whole sectors (a page cache hands the block layer whole pages) and at most 2^32 - 1
    /// sectors; `priority` overrides the file's own for this request.
    pub fn oio(
        &self,
        dir: Direction,
        offset: u64,
        len: u64,
        priority: Option<Priority>,
    ) -> Result<Oio, FsError> {
        if len == 0 || !offset.is_multiple_of(SECTOR_BYTES) || !len.is_multiple_of(SECTOR_BYTES) {
            return Err(FsError::Invalid(format!(
                "scheduled I/O of inode {} at {offset}, {len} bytes: not a non-empty range of whole {SECTOR_BYTES}-byte sectors",
                self.ino
            )));
        }
        let sectors = u32::try_from(len / SECTOR_BYTES).map_err(|_| {
            FsError::Invalid(format!(
                "scheduled I/O of inode {}: {len} bytes is too long for one OIO",
                self.ino
            ))
        })?;
        Ok(Oio {
            oid: self.object(),
            dir,
            offset_sectors: offset / SECTOR_BYTES,
            sectors,
            priority,
        })
    }
}
