//! A file's data object and its priority (OSSD-13 V-B, V-C).
//!
//! The [`vfs::FileSystem`] calls of [`Ofs`] execute at once on the store. The prototype's other
//! path (OFS -> OAQ -> the device) lives in the `host` crate: it asks OFS for a regular file's
//! data object ([`Ofs::data_object`]) and turns each read or write of the file into an object
//! I/O instance for OAQ, the same byte range of that object. So nothing else of OFS takes part
//! in a scheduled data transfer: the store keeps the object's length and modified time in its
//! onode.
//!
//! A file's priority is the `Priority` attribute of its data object ([`Ofs::set_priority`], the
//! prototype's `ioctl()`): the device reads it (real-time placement of the object's writes,
//! OSSD-13 IV-C), and the host registers it with OAQ so that the file's requests queue at that
//! level.

use crate::store::Store;
use osd::{Attr, AttrValue, Oid};
use vfs::{FsError, Ino};

use crate::fs::{osd_err, Ofs};
use crate::layout::data_oid;

impl<S: Store> Ofs<S> {
    /// The data object of regular file `ino`: what the host path (the `host` crate) turns the
    /// file's reads and writes into object I/O of. A file's bytes are its object's bytes.
    pub fn data_object(&mut self, ino: Ino) -> Result<Oid, FsError> {
        self.file(ino)
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
