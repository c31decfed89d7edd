//! Device images holding OFS: format one, open one (with the lock that keeps a second user
//! out while it is mounted). The object store settings come from one place,
//! [`store_config`], which `ossd`'s object commands use too.

use std::fs::File;
use std::path::{Path, PathBuf};

use flash::image::ImageStore;
use flash::{DeviceConfig, Nand};
use fml::FmlConfig;
use ofs::{Ofs, OfsConfig};
use osd::{ObjectStore, OsdConfig, Placement};
use vfs::FsError;

use crate::DirectOfs;

/// Why an image could not be opened, locked or mounted.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The image file or its device model failed.
    #[error("{0}")]
    Flash(#[from] flash::FlashError),
    /// The object store on the image (path) could not be opened.
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Store(PathBuf, osd::OsdError),
    /// OFS on the image (path) could not be mounted.
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Fs(PathBuf, FsError),
    /// The image (path) could not be locked: in use by another process, or the lock failed.
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Lock(PathBuf, String),
}

/// The object store settings for a device: the defaults, with the FML sized to the device.
pub fn store_config(device: &DeviceConfig, placement: Placement) -> OsdConfig {
    OsdConfig {
        placement,
        fml: FmlConfig::for_blocks(device.gang.superblocks(&device.geometry)),
        ..OsdConfig::default()
    }
}

/// Creates `path` as a new device image holding an object store and an empty OFS on it
/// (its partition, root directory and superblock), unmounted cleanly.
pub fn format(
    path: &Path,
    device: DeviceConfig,
    placement: Placement,
    config: OfsConfig,
) -> Result<(), ImageError> {
    let image = ImageStore::create(path, &device)?;
    let nand = Nand::open(device, image)?;
    let store = ObjectStore::format(nand, store_config(&device, placement))
        .map_err(|e| ImageError::Store(path.to_owned(), e))?;
    let fs = Ofs::format(store, config).map_err(|e| ImageError::Fs(path.to_owned(), e))?;
    let store = fs
        .unmount()
        .map_err(|e| ImageError::Fs(path.to_owned(), e))?;
    store
        .close()
        .map_err(|e| ImageError::Store(path.to_owned(), e))?;
    Ok(())
}

/// Opens the object store on an image (recovering it after a crash).
pub fn open_store(path: &Path) -> Result<ObjectStore<Nand<ImageStore>>, ImageError> {
    let (device, image) = ImageStore::open(path)?;
    let nand = Nand::open(device, image)?;
    ObjectStore::open(nand, store_config(&device, Placement::Semantic))
        .map_err(|e| ImageError::Store(path.to_owned(), e))
}

/// An exclusive lock on an image file, held while it is mounted (released by the kernel when
/// the process ends, however it ends).
pub struct ImageLock(#[allow(dead_code)] File);

/// Takes the image's lock; fails at once if another process holds it.
pub fn lock(path: &Path) -> Result<ImageLock, ImageError> {
    let f = File::open(path).map_err(|e| ImageError::Lock(path.to_owned(), e.to_string()))?;
    // flock(LOCK_EX | LOCK_NB) on Unix.
    match f.try_lock() {
        Ok(()) => Ok(ImageLock(f)),
        Err(std::fs::TryLockError::WouldBlock) => Err(ImageError::Lock(
            path.to_owned(),
            "in use by another process (mounted already?)".into(),
        )),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(ImageError::Lock(path.to_owned(), e.to_string()))
        }
    }
}

/// Locks the image, opens its store and mounts OFS on it (repairing OFS after an unclean end).
pub fn open_ofs(path: &Path) -> Result<(DirectOfs, ImageLock), ImageError> {
    let lock = lock(path)?;
    let store = open_store(path)?;
    let fs = Ofs::mount(store).map_err(|e| ImageError::Fs(path.to_owned(), e))?;
    Ok((fs, lock))
}
