//! Device images holding OFS: format one, open one (with the lock that keeps a second user
//! out while it is mounted). The object store settings come from one place,
//! [`store_config`], which `ossd`'s object commands use too.

use std::fs::File;
use std::path::{Path, PathBuf};

use flash::image::{ImageContent, ImageStore};
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
    /// The FTL on the image (path) could not be opened or formatted.
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Ftl(PathBuf, ftl::FtlError),
    /// OFS on the image (path) could not be mounted.
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Fs(PathBuf, FsError),
    /// The image (path) was formatted for another mapping layer.
    #[error("{path}: the image holds {found}, not {wanted}", path = .0.display(), found = .1, wanted = .2)]
    WrongContent(PathBuf, ImageContent, ImageContent),
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
    let store = store_config(&device, placement);
    format_with(path, device, store, config)
}

/// [`format()`] with the object store's settings `store` (its placement and
/// `metadata_copies` are kept by the image: later opens read them from the checkpoint).
pub fn format_with(
    path: &Path,
    device: DeviceConfig,
    store: OsdConfig,
    config: OfsConfig,
) -> Result<(), ImageError> {
    let image = ImageStore::create_for(path, &device, ImageContent::ObjectStore)?;
    let nand = Nand::open(device, image)?;
    let store =
        ObjectStore::format(nand, store).map_err(|e| ImageError::Store(path.to_owned(), e))?;
    let fs = Ofs::format(store, config).map_err(|e| ImageError::Fs(path.to_owned(), e))?;
    let store = fs
        .unmount()
        .map_err(|e| ImageError::Fs(path.to_owned(), e))?;
    store
        .close()
        .map_err(|e| ImageError::Store(path.to_owned(), e))?;
    Ok(())
}

/// Opens the object store on an image (recovering it after a crash). An image formatted for
/// another layer is refused before any of its records is read.
pub fn open_store(path: &Path) -> Result<ObjectStore<Nand<ImageStore>>, ImageError> {
    let (device, image) = ImageStore::open(path)?;
    expect_content(path, &image, ImageContent::ObjectStore)?;
    let nand = Nand::open(device, image)?;
    ObjectStore::open(nand, store_config(&device, Placement::Semantic))
        .map_err(|e| ImageError::Store(path.to_owned(), e))
}

/// Refuses an image recorded as holding another layer than `wanted` (images that record
/// nothing, from before the content word, are accepted as object stores: nothing else could be
/// formatted on an image then).
pub fn expect_content(
    path: &Path,
    image: &ImageStore,
    wanted: ImageContent,
) -> Result<(), ImageError> {
    let found = image.content();
    let ok = found == wanted
        || (found == ImageContent::Unspecified && wanted == ImageContent::ObjectStore);
    if ok {
        Ok(())
    } else {
        Err(ImageError::WrongContent(path.to_owned(), found, wanted))
    }
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
