//! Scheduled file I/O (seed 000 V-B, V-C): a file's reads and writes as *object I/O instances*
//! (OIOs) for OAQ, the host-side object-aware I/O scheduler, and a file's priority (the
//! prototype's `ioctl()`).
//!
//! The [`vfs::FileSystem`] calls of [`Ofs`] execute at once on the store. A caller that wants
//! the prototype's path instead (OFS -> OAQ -> the object store) opens a regular file for
//! scheduled I/O ([`Ofs::open_scheduled`]) and turns each read or write of it into an OIO
//! ([`ScheduledFile::oio`]): the same byte range of the file's data object, in sectors. It
//! queues the OIO in a [`sched::Oaq`] and executes the object requests OAQ dispatches as object
//! READ / WRITE commands on the store ([`ScheduledFile::oid`] names the object). A file's bytes
//! are its object's bytes, so nothing else of OFS takes part in a data transfer: the store
//! keeps the object's length and modified time in its onode.
//!
//! A file's priority is the `Priority` attribute of its data object ([`Ofs::set_priority`]):
//! the device reads it (real-time placement of the object's writes, seed 000 IV-C), and the
//! caller registers it with OAQ ([`sched::Oaq::set_object_priority`]) so that the file's OREQs
//! queue at that level.

use flash::Flash;
use osd::{Attr, AttrValue, Oid, Osd};
use sched::{Direction, ObjectId, Oio, Priority};
use vfs::{FsError, Ino};

use crate::fs::{osd_err, Ofs};
use crate::layout::{data_oid, PARTITION};

/// Bytes of a sector, the unit OIOs count in.
pub const SECTOR_BYTES: u64 = 512;

/// A regular file opened for scheduled I/O: its data object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledFile {
    pub ino: Ino,
    oid: Oid,
}

impl ScheduledFile {
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

/// The store address of an object OAQ names (OFS's objects all live in its one partition).
pub fn store_oid(object: ObjectId) -> Oid {
    Oid::new(PARTITION.0, object.0)
}

impl<F: Flash> Ofs<F> {
    /// Opens regular file `ino` for scheduled I/O.
    pub fn open_scheduled(&mut self, ino: Ino) -> Result<ScheduledFile, FsError> {
        let oid = self.file(ino)?;
        Ok(ScheduledFile { ino, oid })
    }

    /// Sets the priority of regular file `ino` (0 is normal; the prototype's `ioctl()`, seed
    /// 000 V-C): a SET_ATTR of its data object's `Priority` attribute.
    pub fn set_priority(&mut self, ino: Ino, priority: u8) -> Result<(), FsError> {
        let oid = self.file(ino)?;
        self.counters.attr_updates += 1;
        self.store
            .set_attr(oid, Attr::Priority, AttrValue::U64(priority as u64))
            .map_err(osd_err)
    }

    /// The priority of regular file `ino`.
    pub fn priority(&mut self, ino: Ino) -> Result<u8, FsError> {
        let oid = self.file(ino)?;
        match self.store.get_attr(oid, Attr::Priority).map_err(osd_err)? {
            AttrValue::U64(p) if p <= u8::MAX as u64 => Ok(p as u8),
            v => Err(FsError::Corrupted(format!(
                "priority of object {} reads {v:?}",
                data_oid(ino)
            ))),
        }
    }
}
