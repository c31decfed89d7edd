//! The file-level stacks under torture (issue 15 item 6): OFS and blockfs through the
//! [`vfs::FileSystem`] interface, and p-OFTL's object store. A slot is a file named
//! `slot-N` in the root directory (an object with id `N + 1` on p-OFTL); the second
//! partition of the object store is an always-empty directory; the tracked attributes are
//! extended attributes `user.torture.I`.
//!
//! What each promises across a power cut ([`Contract`]):
//! - OFS and p-OFTL: what the object store promises. Every sector, length, attribute and
//!   name holds a value it had at the last sync or took since (exactly the current one after a
//!   clean unmount).
//! - blockfs: what ext2 promises (docs/BLOCKFS.md, "Crash consistency"): a file unchanged since
//!   the last `sync` reads back whole; a file changed since may hold anything, even another
//!   file's bytes, and the image may be inconsistent (mounted read-only, fsck listing the
//!   damage).

use blockfs::{BlockFs, BlockFsConfig};
use ftl::{Ftl, FtlConfig};
use ofs::{Ofs, OfsConfig};
use osd::{ObjectStore, OsdConfig};
use poftl::{PoftlConfig, PoftlError, PoftlStore};
use vfs::{FileData, FileSystem, FsError, Ino, ReadInto, XattrMode, ROOT};

use crate::device::Device;
use crate::oracle::ATTRS;
use crate::subject::{fml_coverage, Contract, Coverage, Fail, Subject};

/// The directory that stands for the object store's second partition.
const PARTITION_DIR: &str = "second-partition";

fn file_name(slot: u32) -> String {
    format!("slot-{slot}")
}

fn xattr_name(attr: usize) -> String {
    format!("user.torture.{attr}")
}

/// Classifies a file system's error: by the device's power first (a vfs error carries the
/// device's failure as text, and torture never matches text), then by its type.
fn fs_fail(e: FsError, powered: bool) -> Fail {
    if !powered {
        return Fail::PowerLoss;
    }
    match e {
        FsError::NoSpace(_) => Fail::NoSpace,
        FsError::Corrupted(m) => Fail::corrupt(m),
        FsError::Damaged { what, unit } => Fail::Corrupt {
            what,
            unit: Some(unit),
        },
        FsError::Device(m) => Fail::Device(m),
        FsError::NotFound(m) => Fail::Missing(m),
        e => Fail::Other(e.to_string()),
    }
}

/// A failure with the device it left: classified by whether the device still has power.
fn failed_with(e: FsError, dev: Device) -> (Fail, Device) {
    (fs_fail(e, dev.powered()), dev)
}

/// A mounted file system and the device under it: what [`FsSubject`] needs beyond
/// [`FileSystem`].
pub(crate) trait Mounted: FileSystem {
    /// The device under the stack.
    fn device(&mut self) -> &mut Device;
    /// Drops everything in RAM (a power cut).
    fn crash(self) -> Device;
    /// Unmounts and closes the stack below cleanly.
    #[allow(clippy::result_large_err)] // the device travels back by design
    fn close(self) -> Result<Device, (Fail, Device)>;
    /// What the flash management below did.
    fn coverage(&self) -> Coverage;
    /// Whether a page holds a unit the stack may still need (see [`Subject::page_live`]).
    fn page_live(&mut self, _page: flash::PageAddr) -> Option<bool> {
        None
    }
    /// What the stack promises across a crash.
    fn contract(&self) -> Contract;
    /// Whether the file system keeps extended attributes.
    fn xattrs(&self) -> bool;
    /// Whether a unit with OOB record `oob` holds file data (see [`Subject::record_is_data`]).
    fn record_is_data(&mut self, _oob: &[u8]) -> bool {
        false
    }
    /// The inodes whose own objects a live page holds data or metadata of (see
    /// [`Subject::page_cover`]); `None` when it holds anything else (a directory's entries
    /// count as the directory's) or the stack cannot tell. Asked without a flash command.
    fn page_inodes(&mut self, _page: flash::PageAddr) -> Option<Vec<Ino>> {
        None
    }
    /// The inode whose object a unit with OOB record `oob` holds data of.
    fn record_inode(&mut self, _oob: &[u8]) -> Option<Ino> {
        None
    }
}

/// The inode whose own object (data, inode record or entry object) `oid` is, on OFS.
fn ofs_inode(oid: osd::Oid) -> Option<Ino> {
    use ofs::layout::{role, ObjectRole, PARTITION};
    if oid.partition != PARTITION {
        return None;
    }
    match role(oid.object) {
        ObjectRole::Data(i) | ObjectRole::Inode(i) | ObjectRole::Dirent(i) => Some(i),
        ObjectRole::Unknown => None,
    }
}

impl Mounted for Ofs<ObjectStore<Device>> {
    fn device(&mut self) -> &mut Device {
        self.store_mut().device_mut()
    }
    fn crash(self) -> Device {
        self.abandon().crash()
    }
    fn close(self) -> Result<Device, (Fail, Device)> {
        let mut store = match self.unmount_or_return() {
            Ok(store) => store,
            Err((e, store)) => return Err(failed_with(e, store.crash())),
        };
        match store.checkpoint() {
            Ok(_) => Ok(store.crash()),
            Err(e) => Err(failed_with(FsError::Device(e.to_string()), store.crash())),
        }
    }
    fn coverage(&self) -> Coverage {
        Coverage {
            checkpoints: self.store().stats().checkpoints,
            ..fml_coverage(self.store().fml().stats())
        }
    }
    // The object store releases a unit only once nothing durable refers to it (see the
    // object store's subject).
    fn page_live(&mut self, page: flash::PageAddr) -> Option<bool> {
        let fml = self.store().fml();
        fml.layout().vpa_of(page).map(|v| fml.is_valid(v))
    }
    fn contract(&self) -> Contract {
        Contract::Versions
    }
    fn record_is_data(&mut self, oob: &[u8]) -> bool {
        matches!(
            osd::record::Record::decode(oob),
            Ok(Some(osd::record::Record::Data { .. }))
        )
    }
    fn xattrs(&self) -> bool {
        true
    }
    // A data unit holds one object's bytes; a descriptor or small-object page the onodes or
    // bytes of a few (the object store's own cover, as for `--stack osd`). An inode's objects
    // are its alone: what damage to them can change is that file (its bytes, length,
    // attributes, and so its entry, which mount drops when the inode is gone).
    fn page_inodes(&mut self, page: flash::PageAddr) -> Option<Vec<Ino>> {
        let objects = crate::subject::objects_on_page(self.store_mut(), page)?;
        objects.into_iter().map(ofs_inode).collect()
    }
    fn record_inode(&mut self, oob: &[u8]) -> Option<Ino> {
        match osd::record::Record::decode(oob) {
            Ok(Some(osd::record::Record::Data { oid, .. })) => ofs_inode(oid),
            _ => None,
        }
    }
}

impl Mounted for BlockFs<Device> {
    fn device(&mut self) -> &mut Device {
        self.ftl_mut().device_mut()
    }
    fn crash(self) -> Device {
        BlockFs::crash(self).crash()
    }
    fn close(self) -> Result<Device, (Fail, Device)> {
        // What a failed unmount had written is on the FTL, which keeps it as far as it
        // flushed: a crash, as the harness takes a failed shutdown.
        let (mut ftl, t) = match self.unmount_or_return() {
            Ok(x) => x,
            Err((e, fs)) => return Err(failed_with(e, BlockFs::crash(*fs).crash())),
        };
        match ftl.checkpoint(t) {
            Ok(_) => Ok(ftl.crash()),
            Err(e) => Err(failed_with(FsError::Device(e.to_string()), ftl.crash())),
        }
    }
    fn coverage(&self) -> Coverage {
        Coverage {
            checkpoints: self.ftl().stats().checkpoint_units_written,
            ..fml_coverage(self.ftl().fml().stats())
        }
    }
    fn page_live(&mut self, page: flash::PageAddr) -> Option<bool> {
        crate::subject::ftl_page_live(self.ftl_mut(), page)
    }
    fn contract(&self) -> Contract {
        Contract::Synced
    }
    fn xattrs(&self) -> bool {
        false
    }
}

/// A file system under torture: slot `N` is the file `slot-N` in the root directory.
pub(crate) struct FsSubject<F: Mounted> {
    pub(crate) fs: F,
    /// The slot of each inode the workload last found or made a slot's file with: what the
    /// harness asks about a struck page is answered from RAM (no lookup, no flash command).
    /// An inode number given again after a crash is updated at its next lookup; one that
    /// names no live file any more holds no live page.
    slots: std::collections::HashMap<Ino, u32>,
}

impl<F: Mounted> FsSubject<F> {
    pub(crate) fn new(fs: F) -> Self {
        FsSubject {
            fs,
            slots: Default::default(),
        }
    }
    fn fail(&mut self, e: FsError) -> Fail {
        let powered = self.fs.device().powered();
        fs_fail(e, powered)
    }
    fn lookup(&mut self, name: &str) -> Result<Option<Ino>, Fail> {
        self.fs.lookup(ROOT, name).map_err(|e| self.fail(e))
    }
    fn file(&mut self, slot: u32) -> Result<Option<Ino>, Fail> {
        let ino = self.lookup(&file_name(slot))?;
        if let Some(i) = ino {
            self.slots.insert(i, slot);
        }
        Ok(ino)
    }
    /// The slot's file, created if needed.
    fn make(&mut self, slot: u32) -> Result<Ino, Fail> {
        match self.file(slot)? {
            Some(ino) => Ok(ino),
            None => {
                let ino = self
                    .fs
                    .create(ROOT, &file_name(slot))
                    .map_err(|e| self.fail(e))?;
                self.slots.insert(ino, slot);
                Ok(ino)
            }
        }
    }
    /// The slots of inodes `inos` as a bit set; `None` if one is not a slot's file.
    fn slots_of(&self, inos: &[Ino]) -> Option<u64> {
        inos.iter()
            .try_fold(0u64, |m, i| Some(m | 1 << self.slots.get(i)?))
    }
    /// The slot's file, which the harness knows exists.
    fn existing(&mut self, slot: u32, what: &str) -> Result<Ino, Fail> {
        self.file(slot)?
            .ok_or_else(|| Fail::Missing(format!("{what}: file {} is gone", file_name(slot))))
    }
}

impl<F: Mounted> Subject for FsSubject<F> {
    fn write(&mut self, slot: u32, offset: u64, data: &[u8]) -> Result<(), Fail> {
        let ino = self.make(slot)?;
        self.fs
            .write(ino, offset, data.len() as u64, FileData::Bytes(data))
            .map_err(|e| self.fail(e))
    }
    fn read(&mut self, slot: u32, offset: u64, buf: &mut [u8]) -> Result<usize, Fail> {
        let Some(ino) = self.file(slot)? else {
            return Ok(0);
        };
        let n = self
            .fs
            .read(ino, offset, ReadInto::Bytes(buf))
            .map_err(|e| self.fail(e))?;
        Ok(n as usize)
    }
    fn discard(&mut self, slot: u32) -> Result<(), Fail> {
        match self.fs.unlink(ROOT, &file_name(slot)) {
            Ok(()) => Ok(()),
            // Nothing to remove (with power on: a lost name is a power loss).
            Err(FsError::NotFound(_)) if self.fs.device().powered() => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }
    fn flush(&mut self) -> Result<(), Fail> {
        self.fs.sync().map_err(|e| self.fail(e))
    }
    fn idle(&mut self) -> Result<(), Fail> {
        let now = self.fs.now();
        self.fs
            .background(now, now + 20_000_000)
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }
    fn exists(&mut self, slot: u32) -> Result<bool, Fail> {
        Ok(self.file(slot)?.is_some())
    }
    fn fsck(&mut self) -> Result<Vec<String>, Fail> {
        self.fs.check().map_err(|e| self.fail(e))
    }
    fn device(&mut self) -> &mut Device {
        self.fs.device()
    }
    fn crash(self: Box<Self>) -> Device {
        self.fs.crash()
    }
    fn close(self: Box<Self>) -> Result<Device, (Fail, Device)> {
        self.fs.close()
    }
    fn coverage(&self) -> Coverage {
        self.fs.coverage()
    }
    fn page_live(&mut self, page: flash::PageAddr) -> Option<bool> {
        self.fs.page_live(page)
    }
    fn record_is_data(&mut self, oob: &[u8]) -> bool {
        self.fs.record_is_data(oob)
    }
    fn page_owner(&mut self, page: flash::PageAddr) -> Option<u32> {
        match self.fs.page_inodes(page)?.as_slice() {
            [ino] => self.slots.get(ino).copied(),
            _ => None,
        }
    }
    fn page_cover(&mut self, page: flash::PageAddr) -> Option<u64> {
        let inos = self.fs.page_inodes(page)?;
        self.slots_of(&inos).filter(|&m| m != 0)
    }
    fn record_owner(&mut self, oob: &[u8]) -> Option<u32> {
        let ino = self.fs.record_inode(oob)?;
        self.slots.get(&ino).copied()
    }
    fn contract(&self) -> Contract {
        self.fs.contract()
    }
    fn objects(&self) -> bool {
        true
    }
    fn attributes(&self) -> bool {
        self.fs.xattrs()
    }
    fn length(&mut self, slot: u32) -> Result<Option<u64>, Fail> {
        let Some(ino) = self.file(slot)? else {
            return Ok(None);
        };
        let st = self.fs.stat(ino).map_err(|e| self.fail(e))?;
        Ok(Some(st.size))
    }
    fn truncate(&mut self, slot: u32, len: u64) -> Result<(), Fail> {
        let ino = self.existing(slot, "truncate")?;
        self.fs.truncate(ino, len).map_err(|e| self.fail(e))
    }
    fn create(&mut self, slot: u32) -> Result<(), Fail> {
        self.make(slot).map(|_| ())
    }
    fn set_attr(&mut self, slot: u32, attr: usize, value: Option<&[u8]>) -> Result<(), Fail> {
        let ino = self.existing(slot, "set attribute")?;
        let name = xattr_name(attr);
        let r = match value {
            Some(v) => self.fs.setxattr(ino, &name, v, XattrMode::Any),
            // Removing an attribute that is not set is a no-op for the harness.
            None => match self.fs.removexattr(ino, &name) {
                Err(FsError::NotFound(_)) if self.fs.device().powered() => Ok(()),
                r => r,
            },
        };
        r.map_err(|e| self.fail(e))
    }
    fn attrs(&mut self, slot: u32) -> Result<Option<Vec<Option<Vec<u8>>>>, Fail> {
        let Some(ino) = self.file(slot)? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(ATTRS);
        for i in 0..ATTRS {
            let v = self
                .fs
                .getxattr(ino, &xattr_name(i))
                .map_err(|e| self.fail(e))?;
            out.push(v);
        }
        Ok(Some(out))
    }
    fn list(&mut self) -> Result<Vec<u32>, Fail> {
        let entries = self.fs.readdir(ROOT).map_err(|e| self.fail(e))?;
        let mut out = Vec::new();
        for (name, _) in entries {
            if name == "." || name == ".." || name == PARTITION_DIR {
                continue;
            }
            match name
                .strip_prefix("slot-")
                .and_then(|n| n.parse::<u32>().ok())
            {
                Some(s) => out.push(s),
                None => return Err(Fail::Other(format!("a foreign entry {name:?} is listed"))),
            }
        }
        out.sort_unstable();
        Ok(out)
    }
    fn set_partition(&mut self, present: bool) -> Result<(), Fail> {
        if present {
            match self.fs.mkdir(ROOT, PARTITION_DIR) {
                Ok(_) => Ok(()),
                Err(FsError::Exists(m)) if self.fs.device().powered() => {
                    Err(Fail::Missing(format!("mkdir: {m} exists already")))
                }
                Err(e) => Err(self.fail(e)),
            }
        } else {
            self.fs.rmdir(ROOT, PARTITION_DIR).map_err(|e| self.fail(e))
        }
    }
    fn partition(&mut self) -> Result<bool, Fail> {
        Ok(self.lookup(PARTITION_DIR)?.is_some())
    }
}

/// Formats OFS on a fresh device.
pub(crate) fn format_ofs(
    dev: Device,
    osd: OsdConfig,
    ofs: OfsConfig,
) -> Result<(Box<dyn Subject>, u64), Fail> {
    let store = ObjectStore::format(dev, osd).map_err(crate::subject::osd_fail)?;
    let capacity = store.fml().capacity_units() * store.unit_bytes() as u64;
    let fs = Ofs::format(store, ofs).map_err(|e| fs_fail(e, true))?;
    Ok((Box::new(FsSubject::new(fs)), capacity))
}

/// Recovers the object store and mounts OFS on it (which repairs the tree after a crash).
#[allow(clippy::result_large_err)]
pub(crate) fn open_ofs(
    dev: Device,
    osd: OsdConfig,
) -> Result<Box<dyn Subject>, (Fail, Option<Device>)> {
    let store = match ObjectStore::open_or_return(dev, osd) {
        Ok(s) => s,
        Err((e, d)) => return Err((crate::subject::osd_fail(e), d)),
    };
    match Ofs::mount_or_return(store) {
        Ok(fs) => Ok(Box::new(FsSubject::new(fs))),
        Err((e, store)) => {
            let (f, dev) = match failed_with(e, store.crash()) {
                // The harness formatted OFS on this store: a superblock that no longer reads
                // is damage, not a foreign store.
                (Fail::Other(m), dev) => (Fail::corrupt(m), dev),
                x => x,
            };
            Err((f, Some(dev)))
        }
    }
}

/// Formats blockfs on the FTL of a fresh device.
pub(crate) fn format_blockfs(
    dev: Device,
    ftl: FtlConfig,
    fs: BlockFsConfig,
) -> Result<(Box<dyn Subject>, u64), Fail> {
    let ftl = Ftl::open(dev, ftl).map_err(crate::subject::ftl_fail)?;
    let fs = BlockFs::format(ftl, fs, 0).map_err(|e| fs_fail(e, true))?;
    // What files can hold: the data zone (the file system's own metadata is set apart).
    let capacity = fs.free_data_blocks() as u64 * fs.layout().block_bytes as u64;
    Ok((Box::new(FsSubject::new(fs)), capacity))
}

/// Recovers the FTL and mounts blockfs on it.
#[allow(clippy::result_large_err)]
pub(crate) fn open_blockfs(
    dev: Device,
    ftl: FtlConfig,
    fs: BlockFsConfig,
) -> Result<Box<dyn Subject>, (Fail, Option<Device>)> {
    // The FTL's recovery may write a checkpoint (after passing a torn unit over), which a
    // power cut may strike: the device comes back.
    let ftl = Ftl::open_or_return(dev, ftl).map_err(|(e, d)| (crate::subject::ftl_fail(e), d))?;
    match BlockFs::mount_or_return(ftl, fs, 0) {
        Ok(fs) => Ok(Box::new(FsSubject::new(fs))),
        Err((e, ftl)) => {
            let (f, dev) = failed_with(e, ftl.crash());
            Err((f, Some(dev)))
        }
    }
}

// ---------------------------------------------------------------------------------- p-OFTL

/// p-OFTL's objects: slot `N` is object `N + 1` (p-OFTL's thin file layer keeps directories in
/// host memory only, so the store is what survives a crash).
pub(crate) struct PoftlSubject {
    store: PoftlStore<Device>,
}

fn poftl_id(slot: u32) -> u64 {
    slot as u64 + 1
}

fn poftl_fail(e: PoftlError) -> Fail {
    use fml::FmlError;
    match e {
        PoftlError::Fml(FmlError::Flash(flash::FlashError::PowerLoss))
        | PoftlError::Flash(flash::FlashError::PowerLoss) => Fail::PowerLoss,
        PoftlError::Fml(FmlError::NoSpace { .. }) | PoftlError::NoSpace { .. } => Fail::NoSpace,
        PoftlError::Fml(FmlError::Flash(_)) | PoftlError::Flash(_) => Fail::Device(e.to_string()),
        PoftlError::NoObject(_) => Fail::Missing(e.to_string()),
        PoftlError::Corrupted { unit, .. } => Fail::Corrupt {
            unit: Some(unit),
            what: e.to_string(),
        },
        PoftlError::Lost { .. } => Fail::corrupt(e.to_string()),
        PoftlError::Poisoned(_) => Fail::Device(e.to_string()),
        _ => Fail::Other(e.to_string()),
    }
}

/// The slot whose object id `object` is (`None` for any other id).
fn poftl_slot(object: u64) -> Option<u32> {
    let slot = u32::try_from(object.checked_sub(1)?).ok()?;
    (slot < crate::sim::SLOTS).then_some(slot)
}

/// The slot whose data a p-OFTL data page's record names.
pub(crate) fn poftl_record_slot(oob: &[u8]) -> Option<u32> {
    let (object, ..) = poftl::store::record::decode(oob)?;
    poftl_slot(object)
}

/// The slots a p-OFTL record page's entries name, from its record and payload; `None` for a
/// page of a snapshot of the log, whose loss sends a mount back to an older epoch of the log
/// that may be partly erased (any slot).
pub(crate) fn poftl_record_cover(oob: &[u8], data: &[u8]) -> Option<u64> {
    use poftl::store::record;
    let log = record::decode_log(oob)?;
    if log.snapshot.is_some() {
        return None;
    }
    let count = log.count;
    let mut cover = 0u64;
    for e in data.chunks(record::ENTRY_BYTES).take(count as usize) {
        let (_, object, ..) = record::decode_entry(e)?;
        cover |= 1 << poftl_slot(object)?;
    }
    Some(cover)
}

impl PoftlSubject {
    /// The OOB bytes of a programmed page, read without a flash command.
    fn peek_oob(&mut self, page: flash::PageAddr, oob: &mut [u8]) -> Option<()> {
        self.store
            .flash_mut()
            .inner_mut()
            .inner_mut()
            .peek_oob(page, oob)
    }

    fn make(&mut self, slot: u32) -> Result<(), Fail> {
        match self.store.create(poftl_id(slot)) {
            Ok(()) | Err(PoftlError::Exists(_)) => Ok(()),
            Err(e) => Err(poftl_fail(e)),
        }
    }
}

impl Subject for PoftlSubject {
    fn write(&mut self, slot: u32, offset: u64, data: &[u8]) -> Result<(), Fail> {
        self.make(slot)?;
        self.store
            .write(poftl_id(slot), offset, poftl::Data::Bytes(data))
            .map_err(poftl_fail)
    }
    fn read(&mut self, slot: u32, offset: u64, buf: &mut [u8]) -> Result<usize, Fail> {
        if !self.store.exists(poftl_id(slot)) {
            return Ok(0);
        }
        let n = self
            .store
            .read(poftl_id(slot), offset, poftl::ReadOut::Bytes(buf))
            .map_err(poftl_fail)?;
        Ok(n as usize)
    }
    fn discard(&mut self, slot: u32) -> Result<(), Fail> {
        match self.store.remove(poftl_id(slot)) {
            Ok(()) | Err(PoftlError::NoObject(_)) => Ok(()),
            Err(e) => Err(poftl_fail(e)),
        }
    }
    fn flush(&mut self) -> Result<(), Fail> {
        self.store.flush().map_err(poftl_fail)
    }
    fn idle(&mut self) -> Result<(), Fail> {
        let now = self.store.now();
        self.store
            .background(now, now + 20_000_000)
            .map(|_| ())
            .map_err(poftl_fail)
    }
    fn exists(&mut self, slot: u32) -> Result<bool, Fail> {
        Ok(self.store.exists(poftl_id(slot)))
    }
    fn fsck(&mut self) -> Result<Vec<String>, Fail> {
        Ok(crate::subject::problems(self.store.check()))
    }
    fn device(&mut self) -> &mut Device {
        self.store.flash_mut()
    }
    fn crash(self: Box<Self>) -> Device {
        self.store.into_flash()
    }
    fn close(self: Box<Self>) -> Result<Device, (Fail, Device)> {
        // p-OFTL has no checkpoint: a flush is its clean shutdown, and mount rebuilds from
        // the records.
        let mut store = self.store;
        match store.flush() {
            Ok(()) => Ok(store.into_flash()),
            Err(e) => Err((poftl_fail(e), store.into_flash())),
        }
    }
    fn coverage(&self) -> Coverage {
        fml_coverage(self.store.fml().stats())
    }
    // No FML validity: a removal invalidates the object's pages in the FML at once but is
    // durable only at the next flush, so a crash brings back pages the FML called stale (the
    // FTL's TRIM has the same limit). A page whose record names an object's data holds that
    // object's bytes alone, whether current or stale, so it counts as live and its slot is
    // the object's. A record page (creations, truncations and removals, all kept) is live
    // too, and covers the objects its entries name: mount rebuilds each object from its own
    // entries and pages, so losing the page changes only those. Any other page (unreadable,
    // erased) is unknown and relaxes every slot.
    fn page_live(&mut self, page: flash::PageAddr) -> Option<bool> {
        let mut oob = [0u8; poftl::store::record::BYTES];
        self.peek_oob(page, &mut oob)?;
        let data = poftl::store::record::decode(&oob).is_some();
        let log = poftl::store::record::decode_log(&oob).is_some();
        (data || log).then_some(true)
    }
    fn page_owner(&mut self, page: flash::PageAddr) -> Option<u32> {
        let mut oob = [0u8; poftl::store::record::BYTES];
        self.peek_oob(page, &mut oob)?;
        self.record_owner(&oob)
    }
    fn page_cover(&mut self, page: flash::PageAddr) -> Option<u64> {
        use poftl::store::record;
        let bytes = flash::Flash::config(self.store.flash_mut())
            .geometry
            .page_size_bytes as usize;
        let mut data = vec![0u8; bytes];
        let mut oob = [0u8; record::BYTES];
        self.store
            .flash_mut()
            .inner_mut()
            .inner_mut()
            .peek_page(page, &mut data, &mut oob)?;
        self.record_cover(&oob, &data)
    }
    fn record_cover(&mut self, oob: &[u8], data: &[u8]) -> Option<u64> {
        poftl_record_cover(oob, data)
    }
    fn record_owner(&mut self, oob: &[u8]) -> Option<u32> {
        poftl_record_slot(oob)
    }
    fn objects(&self) -> bool {
        true
    }
    fn attributes(&self) -> bool {
        false
    }
    fn partitions(&self) -> bool {
        false
    }
    fn length(&mut self, slot: u32) -> Result<Option<u64>, Fail> {
        if !self.store.exists(poftl_id(slot)) {
            return Ok(None);
        }
        self.store
            .size(poftl_id(slot))
            .map(Some)
            .map_err(poftl_fail)
    }
    fn truncate(&mut self, slot: u32, len: u64) -> Result<(), Fail> {
        self.store.truncate(poftl_id(slot), len).map_err(poftl_fail)
    }
    fn create(&mut self, slot: u32) -> Result<(), Fail> {
        self.make(slot)
    }
    fn list(&mut self) -> Result<Vec<u32>, Fail> {
        self.store
            .object_ids()
            .into_iter()
            .map(|id| match id.checked_sub(1) {
                Some(s) if s < u32::MAX as u64 => Ok(s as u32),
                _ => Err(Fail::Other(format!("a foreign object {id:#x} is listed"))),
            })
            .collect()
    }
}

/// The device p-OFTL runs on: `base` ganged to the configuration's parallelism degree.
pub(crate) fn poftl_device(
    cfg: &PoftlConfig,
    base: flash::DeviceConfig,
) -> Result<flash::DeviceConfig, Fail> {
    cfg.device(base).map_err(|e| Fail::Other(e.to_string()))
}

/// Formats p-OFTL on a fresh device.
pub(crate) fn format_poftl(dev: Device, cfg: PoftlConfig) -> Result<(Box<dyn Subject>, u64), Fail> {
    let store = PoftlStore::format(dev, cfg).map_err(poftl_fail)?;
    let capacity = store.capacity_bytes();
    Ok((Box::new(PoftlSubject { store }), capacity))
}

/// Rebuilds p-OFTL from a device (its mount programs the cuts it logs).
#[allow(clippy::result_large_err)]
pub(crate) fn open_poftl(
    dev: Device,
    cfg: PoftlConfig,
) -> Result<Box<dyn Subject>, (Fail, Option<Device>)> {
    match PoftlStore::mount_or_return(dev, cfg) {
        Ok(store) => Ok(Box::new(PoftlSubject { store })),
        Err((e, d)) => Err((poftl_fail(e), d)),
    }
}
